"""The study's record: what its page reads from OUTPUT_DIR, kept where it
outlives the machine (by default docs/study/record/ in the repository).

The study takes tens of hours over many sittings, and the machine that ran a
sitting may not keep its disk (a lent GPU, a Colab VM, a CI runner; this
project lost a first set of 215 runs so). `save` copies into RECORD_DIR, for
every finished run, the small files the page and the resume read: the sweep's
point record (its settings, command, metrics, wall time), the run's config and
eval results, and its summary (experiments/run_summary.py: its dev
predictions' labels and spread, its logged training curves) in place of
eval_predictions.tsv and the TensorBoard events. Checkpoints, logs and
feature files stay behind. About 10 KB a run (a 3-epoch point on a
1,000-example dev set).

`restore` copies the record back into an OUTPUT_DIR that lacks those files, so
on a new machine the study skips the runs that finished elsewhere and its page
comes out as it did there. A file OUTPUT_DIR already has is never replaced.
Both go through tf.io.gfile: either side may be gs:// or ram://.
"""

import os
from typing import Dict, Iterator, List, Tuple

import tensorflow as tf

from adapter_bert.classification import metrics as classifier_metrics
from adapter_bert import errors
from experiments import grid as grid_lib
from experiments import multitask_comparison
from experiments import run_summary
from experiments import runs
from experiments import sweep as sweep_lib
from experiments import tables
from adapter_bert.storage import file_io

# A finished run's directory holds one of these (the sweep's, the multitask comparison's).
DONE_FILES = (runs.RECORD_FILE, multitask_comparison.DONE_FILE)
# Kept from a finished run's directory and from its tasks' subdirectories (a
# multi-task run evaluates each task in its own).
RUN_FILES = DONE_FILES + ("run_config.json", "eval_results.txt", run_summary.SUMMARY_FILE)
# Kept wherever they are: a sweep's grid, the multitask settings' tables, the sittings.
STUDY_FILES = (sweep_lib.SWEEP_FILE, "comparison.json", "comparison.csv", "comparison.md",
               "sittings.json")


def _walk(root: str) -> Iterator[Tuple[str, List[str], List[str]]]:
  if tf.io.gfile.isdir(root):
    yield from tf.io.gfile.walk(root)


def _relative(path: str, root: str) -> str:
  """PATH under ROOT as a relative path ("" for ROOT itself). By hand: os.path's
  relpath and normpath would fold ram:// and gs:// into ram:/."""
  root = root.rstrip("/")
  return "" if path.rstrip("/") == root else path[len(root) + 1:]


def _finished_dirs(listing: Dict[str, List[str]]) -> List[str]:
  """Each finished run's directory, and those of its subdirectories that hold
  dev predictions (a multi-task run's tasks'; not eval/ or adapter_model/), from
  a walk's {directory: files}."""
  out = []
  for directory, files in listing.items():
    if any(f in files for f in DONE_FILES):
      out.append(directory)
      out += [d for d, sub_files in listing.items()
              if os.path.dirname(d) == directory and any(
                  f in sub_files for f in (classifier_metrics.EVAL_PREDICTIONS_FILE,
                                           run_summary.SUMMARY_FILE))]
  return out


def _copy_if_changed(src: str, dst: str) -> bool:
  with tf.io.gfile.GFile(src, "rb") as f:
    data = f.read()
  if tf.io.gfile.exists(dst):
    with tf.io.gfile.GFile(dst, "rb") as f:
      if f.read() == data:
        return False
  file_io.atomic_write(dst, data, binary=True)
  return True


def check_apart(output_dir: str, record_dir: str) -> None:
  """A record inside OUTPUT_DIR would be saved into itself, a level deeper each time."""
  if record_dir.rstrip("/").startswith(output_dir.rstrip("/") + "/"):
    raise errors.UserError(f"--record_dir={record_dir} is inside --output_dir={output_dir}: "
                           "keep the record beside the runs, not among them")


def save(output_dir: str, record_dir: str) -> int:
  """Brings RECORD_DIR up to date with OUTPUT_DIR's finished runs (summarizing
  each first, once); returns how many files it wrote."""
  check_apart(output_dir, record_dir)
  # One walk: each point calls this, and OUTPUT_DIR grows to thousands of files.
  listing = {directory: files for directory, _, files in _walk(output_dir)}
  finished = set(_finished_dirs(listing))
  for directory in finished:
    files = listing[directory]
    if run_summary.SUMMARY_FILE not in files and run_summary.write(directory):
      listing[directory] = files + [run_summary.SUMMARY_FILE]
  written = 0
  for directory, files in listing.items():
    kept = RUN_FILES if directory in finished else ()
    for name in files:
      if name in kept or name in STUDY_FILES:
        written += _copy_if_changed(
            os.path.join(directory, name),
            os.path.join(record_dir, _relative(directory, output_dir), name))
  return written


def restore(record_dir: str, output_dir: str) -> int:
  """Copies RECORD_DIR's files that OUTPUT_DIR lacks into it, then rewrites the
  results table of each sweep that gained a point; returns how many it copied."""
  copied, sweeps = 0, set()
  for directory, _, files in _walk(record_dir):
    relative = _relative(directory, record_dir)
    for name in files:
      target = os.path.join(output_dir, relative, name)
      if tf.io.gfile.exists(target):
        continue
      _copy_if_changed(os.path.join(directory, name), target)
      copied += 1
      if name == runs.RECORD_FILE:  # SWEEP_DIR/runs/POINT/sweep_point.json
        sweeps.add(os.path.dirname(os.path.dirname(os.path.dirname(target))))
  for sweep_dir in sorted(sweeps):
    if not tf.io.gfile.exists(os.path.join(sweep_dir, sweep_lib.SWEEP_FILE)):
      continue  # Not a sweep's point (or its grid not recorded): no table to rewrite.
    saved = tables.read_json(os.path.join(sweep_dir, sweep_lib.SWEEP_FILE))
    sweep_lib.Sweep(grid_lib.Grid.from_json(saved["grid"]), sweep_dir,
                    log=lambda _: None).write_table()
  return copied
