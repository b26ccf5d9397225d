"""The one run of every entry point: `run(task, options)` over a `Task`.

A task (adapter_bert/tasks/, in the shape of Model Garden's official/nlp/tasks)
knows its inputs, model, loss and result files; this module knows the order
every run keeps, whatever its task:

  base = startup.read_base(options)          seeds, checks the model options, reads the base
  options = task.read_inputs(options, base)  every input file read and checked
  run = task.set_up(options, base)           startup.set_up with the task's model
  startup.write_run_config(run)              the first file written
  task.train(run)                            with --do_train: records, startup.train
  task.evaluate(run)                         with --do_eval
  task.predict(run)                          with --do_predict

So a mistake in a flag, a file or output_dir fails before anything is
written, and training (loop.train: compiled steps, checkpoints, SIGTERM,
progress lines) is the same loop for every task.
"""

from typing import Protocol

from adapter_bert.checkpoints import base_model
from adapter_bert.runtime import startup


class Task(Protocol):
  """What `run` asks of an entry point's task."""

  def read_inputs(self, options: startup.RunOptions,
                  base: base_model.Base) -> startup.RunOptions:
    """Reads and checks every input the run needs (writes nothing); returns the
    options to run with (an adapter bank's task can fix the adapters')."""

  def set_up(self, options: startup.RunOptions, base: base_model.Base) -> startup.Run:
    """startup.set_up with the task's model and run_config.json keys."""

  def train(self, run: startup.Run) -> None:
    """Writes the training records and trains (startup.train)."""

  def evaluate(self, run: startup.Run) -> None:
    """Writes the eval result files."""

  def predict(self, run: startup.Run) -> None:
    """Writes the prediction files."""


def run(task: Task, options: startup.RunOptions) -> startup.Run:
  """Runs what `options` asks for (do_train, do_eval, do_predict) on `task`."""
  base = startup.read_base(options)
  options = task.read_inputs(options, base)
  set_up = task.set_up(options, base)
  # From here on files are written.
  startup.write_run_config(set_up)
  if options.do_train:
    task.train(set_up)
  if options.do_eval:
    task.evaluate(set_up)
  if options.do_predict:
    task.predict(set_up)
  return set_up
