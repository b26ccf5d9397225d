"""Study directories for the tests of experiments/study/, written as the sweep,
run_classifier.py and TensorBoard leave them, through tf.io.gfile (ram:// too)."""

import json
import os

import tensorflow as tf

from experiments.points import grid as grid_lib
from experiments import multitask_comparison
from experiments.study import grids as study_grids


def grid_points(part, task):
  grid = study_grids.part_grid(part, study_grids.TASKS[task], "models/minilm", "data/wordnet")
  return grid_lib.Grid.from_json(grid).points()


class JoinablePath(str):
  """A path string that joins with "/" (pathlib would fold ram:// into ram:/)."""

  def __truediv__(self, name):
    return JoinablePath(os.path.join(self, name))


def write_text(path, text):
  tf.io.gfile.makedirs(os.path.dirname(path))
  if tf.io.gfile.exists(path):  # ram:// keeps a longer old file's tail on "w".
    tf.io.gfile.remove(path)
  with tf.io.gfile.GFile(path, "w") as f:
    f.write(text)


def write_dev_sets(data_root, n=100):
  """The four WordNet tasks' training and dev sets as their columns, n examples of
  labels a, b; returns the labels."""
  labels = ["a", "b"] * (n // 2)
  for task, (text_a, text_b) in multitask_comparison.WORDNET_TASKS.items():
    columns = [text_a] + ([text_b] if text_b else []) + ["label"]
    rows = ["\t".join([f"w{i}"] * (len(columns) - 1) + [l]) for i, l in enumerate(labels)]
    for split in ("train", "dev"):  # The cost table counts the training examples.
      write_text(str(data_root / task / f"{split}.tsv"),
                 "\n".join(["\t".join(columns)] + rows) + "\n")
  return labels


def write_predictions(run_dir, labels, right):
  """A run's eval_predictions.tsv that gets the first `right` examples right."""
  write_text(str(run_dir / "eval_predictions.tsv"), "".join(
      ("0.9\t0.1\n" if (l == "a") == (i < right) else "0.1\t0.9\n")
      for i, l in enumerate(labels)))


def write_run(directory, losses, labels=("a", "b"), warmup_steps=3):
  """A run directory as run_classifier.py leaves it: its config, and the training
  loss and learning rate (step / 40000) in TensorBoard, one value per logged step."""
  write_text(os.path.join(directory, "run_config.json"), json.dumps(
      {"label_list": list(labels), "num_warmup_steps": warmup_steps}))
  writer = tf.summary.create_file_writer(directory)
  with writer.as_default():
    for step, loss in losses:
      tf.summary.scalar("loss", loss, step=step)
      tf.summary.scalar("learning_rate", step / 40000, step=step)
  writer.close()
