"""Training-set subsets: a data directory per size, with the task's own dev and test.

run_classifier.py reads the whole of its task's training file, so a point with
`train_examples=N` gets a prepared copy of `--data_dir` in which the training
file holds only N of its rows (the header, if the task's file has one, kept),
and every other file is a copy of the original (through tf.io.gfile: a bucket
has no symbolic links): dev and test are the task's own. Rows are `random` (a
seeded shuffle, of which the first N are kept, in file order: with one
`subset_seed` a smaller set is part of every larger one, as in a learning
curve) or the `first` N. Blank lines are not rows, as for run_classifier.py.

The label list is the full training file's, given to a `tsv` task as
`--labels` (its default would be the subset's labels, so a small subset could
build a head without some class and then fail on dev).
"""

import dataclasses
import hashlib
import os
import posixpath
import random
from typing import Dict, List, Optional, Tuple

import tensorflow as tf

from adapter_bert.classification import processors
from experiments.points import grid as grid_lib
from adapter_bert.storage import file_io


@dataclasses.dataclass(frozen=True)
class TrainFile:
  """Where a task's training rows are, relative to --data_dir."""
  path: str
  header: bool


def train_file(task_name: str) -> TrainFile:
  """The training file run_classifier.py reads for `task_name`."""
  name = processors.canonical_task_name(str(task_name))
  cls = processors.PROCESSORS.get(name)
  if cls is None:
    raise grid_lib.GridError(f"--task_name={task_name}: unknown task")
  if name == "tsv":
    return TrainFile("train.tsv", True)
  if name == "xnli":
    language = processors.XnliProcessor().language
    return TrainFile(os.path.join("multinli", f"multinli.train.{language}.tsv"), True)
  if not issubclass(cls, processors.GlueTsvProcessor) or name == "ax":
    raise grid_lib.GridError(f"--task_name={task_name} has no training set to take a subset of")
  return TrainFile(cls.files["train"], cls.header["train"])


def _split_rows(data: bytes, header: bool) -> Tuple[List[bytes], List[bytes]]:
  """(header lines, data rows) of a TSV file's bytes; blank lines are no rows."""
  lines = data.split(b"\n")
  if lines and lines[-1] == b"":
    lines.pop()
  head = lines[:1] if header else []
  rows = [l for l in lines[len(head):] if l not in (b"", b"\r")]
  return head, rows


def count_rows(data_dir: str, task_name: str) -> int:
  """Training rows of the task's file (the examples run_classifier.py trains on)."""
  layout = train_file(task_name)
  with tf.io.gfile.GFile(posixpath.join(data_dir, layout.path), "rb") as f:
    return len(_split_rows(f.read(), layout.header)[1])


def choose_rows(num_rows: int, n: int, subset: str, seed: int) -> List[int]:
  """Indices of the rows kept, in file order."""
  if subset == "first":
    return list(range(n))
  if subset != "random":
    raise grid_lib.GridError(f"subset={subset}: expected 'random' or 'first'")
  order = list(range(num_rows))
  random.Random(seed).shuffle(order)
  return sorted(order[:n])


def tsv_labels(data_dir: str, settings: Dict[str, object]) -> List[str]:
  """The label list a tsv task gets from its full train.tsv (run_classifier.py's default)."""
  processor = processors.TsvProcessor(
      data_dir=data_dir, text_a_column=settings.get("text_a_column") or "sentence",
      text_b_column=settings.get("text_b_column"),
      label_column=settings.get("label_column") or "label")
  labels = processor.get_labels()
  bad = [l for l in labels if "," in l]
  if bad:
    raise grid_lib.GridError(f"labels {bad} of {data_dir}/train.tsv hold commas, which "
                             "--labels cannot carry: train on all rows (train_examples=all)")
  return labels


def _absolute(path: str) -> str:
  """A local path made absolute; a URL (gs://, ram://) as it is."""
  return path if "://" in path else os.path.abspath(path)


def subset_dir_name(data_dir: str, n: int, subset: str, seed: int) -> str:
  digest = hashlib.sha256(_absolute(data_dir).encode()).hexdigest()[:8]
  base = posixpath.basename(data_dir.rstrip("/")) or "data"
  how = "first" if subset == "first" else f"random{seed}"
  return f"{base}-{digest}-n{n}-{how}"


def prepare_subset(data_dir: str, task_name: str, n: int, subset: str, seed: int,
                   root: str) -> str:
  """The data directory of a training-set subset under `root`, made once.

  The directory is built under a temporary name and renamed into place, so it
  is whole or absent; a later sweep reuses it.
  Raises:
    GridError: if the task's training file has fewer than `n` rows.
  """
  target = posixpath.join(root, subset_dir_name(data_dir, n, subset, seed))
  if tf.io.gfile.isdir(target):
    return target
  layout = train_file(task_name)
  source = posixpath.join(data_dir, layout.path)
  if tf.io.gfile.isdir(source) or not tf.io.gfile.exists(source):
    raise grid_lib.GridError(f"--data_dir={data_dir}: no training file {layout.path}")
  with tf.io.gfile.GFile(source, "rb") as f:
    head, rows = _split_rows(f.read(), layout.header)
  if not 1 <= n <= len(rows):
    raise grid_lib.GridError(f"train_examples={n}: {source} has {len(rows)} training rows")
  with file_io.AtomicDirectory(target) as temp:
    source_dir = data_dir.rstrip("/")
    for directory, _, names in tf.io.gfile.walk(source_dir):
      relative = directory.rstrip("/")[len(source_dir):].lstrip("/")
      for name in names:
        path = posixpath.join(relative, name)
        if posixpath.normpath(path) != posixpath.normpath(layout.path):
          tf.io.gfile.makedirs(posixpath.join(temp, relative))
          tf.io.gfile.copy(posixpath.join(directory, name), posixpath.join(temp, path))
    kept = [rows[i] for i in choose_rows(len(rows), n, subset, seed)]
    with tf.io.gfile.GFile(posixpath.join(temp, layout.path), "wb") as f:
      f.write(b"\n".join(head + kept) + b"\n")
  return target


def resolve(settings: Dict[str, object], root: str,
            cache: Optional[Dict[tuple, object]] = None) -> Dict[str, object]:
  """A point's settings with the sweep keys turned into run_classifier.py flags.

  `train_examples=N` points --data_dir at a subset (and gives a tsv task its
  full --labels); `train_steps` becomes --num_train_epochs. Other settings pass.
  `cache` keeps label lists and row counts across the points of a sweep.
  """
  cache = {} if cache is None else cache
  settings = dict(settings)
  n = settings.get("train_examples", "all")
  steps = settings.get("train_steps")
  if steps is not None and "num_train_epochs" in settings:
    raise grid_lib.GridError("train_steps and num_train_epochs both given: use one")
  if n in (None, "all") and steps is None:
    return settings
  data_dir, task_name = settings.get("data_dir"), settings.get("task_name")
  if not data_dir or not task_name:
    raise grid_lib.GridError("train_examples and train_steps need --data_dir and --task_name")
  if n not in (None, "all"):
    if not isinstance(n, int) or isinstance(n, bool):
      raise grid_lib.GridError(f"train_examples={n}: expected a number of rows or 'all'")
    is_tsv = processors.canonical_task_name(str(task_name)) == "tsv"
    if is_tsv and settings.get("labels") is None:
      key = ("labels", _absolute(data_dir), settings.get("text_a_column"),
             settings.get("text_b_column"), settings.get("label_column"))
      if key not in cache:
        cache[key] = tsv_labels(data_dir, settings)
      settings["labels"] = cache[key]
    settings["data_dir"] = prepare_subset(
        data_dir, task_name, n, str(settings.get("subset", "random")),
        int(settings.get("subset_seed", 0)), root)
    num_examples = n
  else:
    key = ("rows", _absolute(data_dir), str(task_name))
    if key not in cache:
      cache[key] = count_rows(data_dir, task_name)
    num_examples = cache[key]
  if steps is not None:
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
      raise grid_lib.GridError(f"train_steps={steps}: expected a positive number of steps")
    batch = int(settings.get("train_batch_size", 32))
    # run_classifier.py takes int(examples / batch * epochs) steps: the half
    # step keeps float rounding from landing one short.
    settings["num_train_epochs"] = (steps + 0.5) * batch / num_examples
  return settings
