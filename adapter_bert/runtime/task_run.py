"""The one run of every entry point: `run(task)` over a `Task`.

A task (adapter_bert/tasks/, in the shape of Model Garden's official/nlp/tasks)
holds its run's config and knows its inputs, model, loss and result files;
this module knows the order every run keeps, whatever its task:

  base = startup.read_base(options)        seeds, checks the model options, reads the base
  task.read_inputs(base)                   every input file read and checked
  run = task.set_up(base)                  startup.set_up with the task's model
  dataset = task.train_inputs(run)         with --do_train: the training records and
                                           batches (packing measured there)
  startup.write_run_config(run)            once, with the run's final step counts
  task.train(run, dataset)                 with --do_train: startup.train
  task.evaluate(run)                       with --do_eval
  task.predict(run)                        with --do_predict

So a mistake in a flag, a file or output_dir fails before anything is
written, and training (loop.train: compiled steps, checkpoints, SIGTERM,
progress lines) is the same loop for every task.
"""

from typing import Protocol

import tensorflow as tf

from adapter_bert.checkpoints import base_model
from adapter_bert.runtime import startup


class Task(Protocol):
  """What `run` asks of an entry point's task."""

  @property
  def options(self) -> startup.RunOptions:
    """How the run is set up (its config's)."""

  def read_inputs(self, base: base_model.Base) -> None:
    """Reads and checks every input the run needs; writes nothing."""

  def set_up(self, base: base_model.Base) -> startup.Run:
    """startup.set_up with the task's model and run_config.json keys; writes nothing."""

  def train_inputs(self, run: startup.Run) -> tf.data.Dataset:
    """Writes the training records; the training batches, run.settings final."""

  def train(self, run: startup.Run, dataset: tf.data.Dataset) -> None:
    """Trains on `dataset` (startup.train)."""

  def evaluate(self, run: startup.Run) -> None:
    """Writes the eval result files."""

  def predict(self, run: startup.Run) -> None:
    """Writes the prediction files."""


def run(task: Task) -> startup.Run:
  """Runs what the task's options ask for (do_train, do_eval, do_predict)."""
  options = task.options
  base = startup.read_base(options)
  task.read_inputs(base)
  set_up = task.set_up(base)
  # From here on files are written.
  tf.io.gfile.makedirs(options.output_dir)
  dataset = task.train_inputs(set_up) if options.do_train else None
  startup.write_run_config(set_up)
  if options.do_train:
    task.train(set_up, dataset)
  if options.do_eval:
    task.evaluate(set_up)
  if options.do_predict:
    task.predict(set_up)
  return set_up
