"""The study's record: what its page reads from OUTPUT_DIR, kept where it
outlives the machine (by default docs/study/record/ in the repository).

The study takes tens of hours over many sittings, and the machine that ran a
sitting may not keep its disk (a lent GPU, a Colab VM, a CI runner; this
project lost a first set of 215 runs so). `save` keeps in RECORD_DIR, for
every finished run, the small files the page and the resume read: the sweep's
point record (its settings, command, metrics, wall time), the run's config and
eval results, and its summary (experiments/points/run_summary.py: its dev
predictions' labels and spread, its logged training curves) in place of
eval_predictions.tsv and the TensorBoard events. Checkpoints, logs and
feature files stay behind. About 7 KB a run (a 3-epoch point on a
1,000-example dev set).

The record is one file per part of the study, RECORD_DIR/PART.jsonl (files at
the top of OUTPUT_DIR, the sittings, in study.jsonl): a line per kept file,
{"file": its path under OUTPUT_DIR/PART, "json": its content} ("text" for a
file that is not JSON), in the order of the paths, so that a finished run
adds a few lines and rewrites no other. A part's file is rewritten whole or not
at all (storage/file_io), after each finished run.

`restore` writes the record's files back into an OUTPUT_DIR that lacks them, so
on a new machine the study skips the runs that finished elsewhere and its page
comes out as it did there. A file OUTPUT_DIR already has is never replaced.
Both go through tf.io.gfile: either side may be gs:// or ram://.
"""

import json
import os
from typing import Dict, Iterator, List, Tuple

import tensorflow as tf

from adapter_bert.classification import metrics as classifier_metrics
from adapter_bert import errors
from experiments.points import grid as grid_lib
from experiments import multitask_comparison
from experiments.points import run_summary
from experiments.points import runs
from experiments import sweep as sweep_lib
from experiments.points import tables
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


def check_apart(output_dir: str, record_dir: str) -> None:
  """A record inside OUTPUT_DIR would be saved into itself, a level deeper each time."""
  if record_dir.rstrip("/").startswith(output_dir.rstrip("/") + "/"):
    raise errors.UserError(f"--record_dir={record_dir} is inside --output_dir={output_dir}: "
                           "keep the record beside the runs, not among them")


# The part of the files at the top of OUTPUT_DIR (the sittings).
TOP = "study"
_SUFFIX = ".jsonl"


def _part_of(relative: str) -> Tuple[str, str]:
  """(part, path under the part's directory) of a path under OUTPUT_DIR."""
  part, _, rest = relative.partition("/")
  return (part, rest) if rest else (TOP, relative)


def _portable(value, output_dir: str):
  """A file's JSON content with the paths of the machine that wrote it made
  portable (a point's command names its interpreter, run_classifier.py and its
  output_dir absolutely): under OUTPUT_DIR as OUTPUT_DIR/..., under the
  repository as relative paths, elsewhere by their base name. Nothing reads
  them back: a resumed point runs this machine's command."""
  if isinstance(value, dict):
    return {k: _portable(v, output_dir) for k, v in value.items()}
  if isinstance(value, list):
    return [_portable(v, output_dir) for v in value]
  if not isinstance(value, str):
    return value
  flag, equals, path = value.partition("=")
  if not (equals and flag.startswith("--")):
    flag, equals, path = "", "", value
  if not (path.startswith("/") and os.path.isabs(path)):
    return value
  for root, shown in ((output_dir.rstrip("/"), "OUTPUT_DIR"), (runs.ROOT, "")):
    if path.startswith(root + "/"):
      rest = path[len(root) + 1:]
      return flag + equals + (f"{shown}/{rest}" if shown else rest)
  return flag + equals + os.path.basename(path)


def _line(relative: str, path: str, output_dir: str) -> str:
  """A kept file as its record's line: JSON content as JSON, other files as text
  (keys in the order the file has them: a grid's axes name its points in order)."""
  with tf.io.gfile.GFile(path, "r") as f:
    text = f.read()
  content = ({"json": _portable(json.loads(text), output_dir)} if path.endswith(".json")
             else {"text": text})
  return json.dumps({"file": relative, **content}, ensure_ascii=False)


def _read_part(path: str) -> Dict[str, str]:
  """A part's record file as {path under the part: its line}; {} if none."""
  if not tf.io.gfile.exists(path):
    return {}
  with tf.io.gfile.GFile(path, "r") as f:
    lines = [line for line in f.read().splitlines() if line]
  return {json.loads(line)["file"]: line for line in lines}


def _parts(record_dir: str) -> List[str]:
  if not tf.io.gfile.isdir(record_dir):
    return []
  return sorted(name[:-len(_SUFFIX)] for name in tf.io.gfile.listdir(record_dir)
                if name.endswith(_SUFFIX))


def files(record_dir: str) -> List[str]:
  """The paths under OUTPUT_DIR of the files RECORD_DIR keeps, sorted."""
  out = []
  for part in _parts(record_dir):
    kept = _read_part(os.path.join(record_dir, part + _SUFFIX))
    out += [name if part == TOP else f"{part}/{name}" for name in kept]
  return sorted(out)


def save(output_dir: str, record_dir: str) -> int:
  """Brings RECORD_DIR up to date with OUTPUT_DIR's finished runs (summarizing
  each first, once); returns how many files' lines it added or changed."""
  check_apart(output_dir, record_dir)
  # One walk: each point calls this, and OUTPUT_DIR grows to thousands of files.
  listing = {directory: files for directory, _, files in _walk(output_dir)}
  finished = set(_finished_dirs(listing))
  for directory in finished:
    names = listing[directory]
    if run_summary.SUMMARY_FILE not in names and run_summary.write(directory):
      listing[directory] = names + [run_summary.SUMMARY_FILE]
  found: Dict[str, Dict[str, str]] = {}
  for directory, names in listing.items():
    kept = RUN_FILES if directory in finished else ()
    for name in names:
      if name in kept or name in STUDY_FILES:
        part, relative = _part_of(_relative(os.path.join(directory, name), output_dir))
        found.setdefault(part, {})[relative] = _line(
            relative, os.path.join(directory, name), output_dir)
  written = 0
  for part, lines in sorted(found.items()):
    path = os.path.join(record_dir, part + _SUFFIX)
    record = _read_part(path)
    changed = {name: line for name, line in lines.items() if record.get(name) != line}
    if changed:
      record.update(changed)
      file_io.atomic_write(path, "".join(record[name] + "\n" for name in sorted(record)))
      written += len(changed)
  return written


def restore(record_dir: str, output_dir: str) -> int:
  """Writes RECORD_DIR's files that OUTPUT_DIR lacks into it, then rewrites the
  results table of each sweep that gained a point; returns how many it wrote."""
  copied, sweeps = 0, set()
  for part in _parts(record_dir):
    for name, line in _read_part(os.path.join(record_dir, part + _SUFFIX)).items():
      target = os.path.join(output_dir, name) if part == TOP else os.path.join(
          output_dir, part, name)
      if tf.io.gfile.exists(target):
        continue
      kept = json.loads(line)
      file_io.atomic_write(target, tables.json_text(kept["json"]) if "json" in kept
                           else kept["text"])
      copied += 1
      if os.path.basename(name) == runs.RECORD_FILE:  # SWEEP_DIR/runs/POINT/sweep_point.json
        sweeps.add(os.path.dirname(os.path.dirname(os.path.dirname(target))))
  for sweep_dir in sorted(sweeps):
    if not tf.io.gfile.exists(os.path.join(sweep_dir, sweep_lib.SWEEP_FILE)):
      continue  # Not a sweep's point (or its grid not recorded): no table to rewrite.
    saved = tables.read_json(os.path.join(sweep_dir, sweep_lib.SWEEP_FILE))
    sweep_lib.Sweep(grid_lib.Grid.from_json(saved["grid"]), sweep_dir,
                    log=lambda _: None).write_table()
  return copied
