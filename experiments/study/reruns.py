"""The results page's check of reruns: points run again (same settings, so the
same names) and multi-task runs run again (the same setting, method and seed)
against an earlier study's tables, such as the first runs' in
docs/study_first_runs/, whose run directories were lost with their machine.

A run is seeded (runtime/startup.py), so a rerun may give the same numbers to
the last digit the tables keep, even on another CPU, or may not (kernels differ
between instruction sets, and threads may sum in another order): the section
counts the points that do and lists those that do not, with both values, and
counts them by the CPU that ran the rerun (a seed fixes a run on one kind of
CPU, not across kinds: README, the evidence study).
"""

import csv
import io
import math
import os
from typing import Callable, Dict, List, Mapping, Optional

import tensorflow as tf

from experiments import multitask_comparison
from experiments.points import runs
from experiments import sweep as sweep_lib
from experiments.points import tables
from experiments.study.grids import MULTITASK_RUNS, PARTS, TASKS
from experiments.study.results import sweep_dir

# Compared exactly: the dev accuracy and the steps trained. The dev and final
# training losses are compared by their largest difference: a rerun on another
# CPU may differ in their last digits and still choose every label alike.
EXACT = ("eval_accuracy", "global_step")
LOSSES = ("eval_loss", "loss")


def _rows(path: str) -> dict:
  """A results table's ok rows by point name; {} where the file is absent."""
  if not tf.io.gfile.exists(path):
    return {}
  with tf.io.gfile.GFile(path) as f:
    return {r["point"]: r for r in csv.DictReader(io.StringIO(f.read()))
            if r["status"] == "ok"}


def _number(row: dict, column: str) -> float:
  return float(row[column]) if row.get(column) not in (None, "") else float("nan")


def _machine(sweep: str, row: dict,
             machine_of: Callable[[Mapping[str, object]], Optional[str]]) -> Optional[str]:
  """The CPU that ran a results row's point, from its record (None: not known)."""
  path = os.path.join(sweep, row.get("output_dir") or "", runs.RECORD_FILE)
  return machine_of(tables.read_json(path)) if tf.io.gfile.exists(path) else None


def reruns_section(output_dir: str, earlier_dir: str,
                   machine_of: Callable[[Mapping[str, object]], Optional[str]]) -> List[str]:
  """The page's section on the finished points that EARLIER_DIR's tables
  (PART_TASK_results.csv, as the page copies them) also hold, and on the
  finished multi-task runs that its multitask_SETTING.csv tables hold; [] where
  none. `machine_of` gives a point's or a run's CPU from its record."""
  lines = _sweep_reruns(output_dir, earlier_dir, machine_of) + _multitask_reruns(
      output_dir, earlier_dir, machine_of)
  return ["## Reruns of earlier points", ""] + lines if lines else []


class _Tally:
  """Reruns counted: how many give the earlier numbers, the others' lines, and
  both by the CPU that ran the rerun."""

  def __init__(self):
    self.differ: List[str] = []
    self.by_cpu: Dict[Optional[str], List[int]] = {}  # CPU -> [the same, reruns]

  def add(self, label: str, changed: List[str], cpu: Optional[str]) -> None:
    tally = self.by_cpu.setdefault(cpu, [0, 0])
    tally[1] += 1
    if changed:
      self.differ.append(f"- {label}: " + "; ".join(changed)
                         + (f" (rerun on {cpu})" if cpu else ""))
    else:
      tally[0] += 1

  @property
  def same(self) -> int:
    return sum(n_same for n_same, _ in self.by_cpu.values())

  @property
  def total(self) -> int:
    return sum(n for _, n in self.by_cpu.values())

  def lines(self, opening: str) -> List[str]:
    """OPENING, the counts by CPU and the others' lines; [] where none was rerun."""
    if not self.total:
      return []
    cpus = "; ".join(f"{cpu or 'a CPU not recorded'}: {n_same} of {n}"
                     for cpu, (n_same, n) in sorted(
                         self.by_cpu.items(), key=lambda kv: (kv[0] is None, kv[0] or "")))
    differ = self.differ
    return [f"{opening} The same, by the CPU that ran the rerun: {cpus}."
            + (" The others:" if differ else ""), ""] + differ + ([""] if differ else [])


def _sweep_reruns(output_dir: str, earlier_dir: str,
                  machine_of: Callable[[Mapping[str, object]], Optional[str]]) -> List[str]:
  tally, largest = _Tally(), 0.0
  for part in PARTS:
    for task in TASKS:
      earlier = _rows(os.path.join(earlier_dir, f"{part}_{task}_results.csv"))
      if not earlier:
        continue
      sweep = sweep_dir(output_dir, part, task)
      now = _rows(os.path.join(sweep, sweep_lib.RESULTS_CSV))
      for point in sorted(set(earlier) & set(now)):
        then, again = earlier[point], now[point]
        gaps = [abs(_number(then, c) - _number(again, c)) for c in LOSSES]
        largest = max([largest] + [g for g in gaps if not math.isnan(g)])
        changed = [f"{c} {then[c]} then, {again[c]} now" for c in EXACT
                   if _number(then, c) != _number(again, c)]
        tally.add(f"{part}/{task} `{point}`", changed, _machine(sweep, again, machine_of))
  return tally.lines(
      f"{tally.total} finished points are reruns of points in `{earlier_dir}` (the same "
      f"settings, hence the same names): {tally.same} of them give the same dev accuracy "
      f"and steps as that table keeps them, and the dev and final training losses of all "
      f"differ by at most {largest:.2g}.")


def _earlier_accuracies(path: str) -> Dict[tuple, float]:
  """{(method, task, seed): dev accuracy} from a multitask comparison's CSV
  (multitask_comparison.rows_of's: its seeds and values joined by ';'); {}
  where the file is absent."""
  if not tf.io.gfile.exists(path):
    return {}
  with tf.io.gfile.GFile(path) as f:
    rows = list(csv.DictReader(io.StringIO(f.read())))
  return {(r["method"], r["task"], int(seed)): float(value) for r in rows
          for seed, value in zip(r["seeds"].split(";"), r["values"].split(";"))}


def _multitask_reruns(output_dir: str, earlier_dir: str,
                      machine_of: Callable[[Mapping[str, object]], Optional[str]]) -> List[str]:
  """The finished multi-task runs whose setting, method and seed an earlier
  multitask_SETTING.csv holds: each task's dev accuracy against it, at the 4
  decimals rows_of keeps."""
  tally = _Tally()
  for run in MULTITASK_RUNS:
    earlier = _earlier_accuracies(os.path.join(earlier_dir, f"multitask_{run.name}.csv"))
    for method, seed in sorted({(m, s) for m, _, s in earlier}):
      for directory, tasks in multitask_comparison.run_dirs(
          os.path.join(output_dir, "multitask", run.name), method, seed):
        done = os.path.join(directory, multitask_comparison.DONE_FILE)
        if not tf.io.gfile.exists(done) or not all((method, t, seed) in earlier for t in tasks):
          continue
        now = multitask_comparison.accuracies(directory, tasks)
        changed = [f"{t} {earlier[(method, t, seed)]:g} then, {now[t]:g} now" for t in tasks
                   if round(now[t], 4) != earlier[(method, t, seed)]]
        tally.add(f"multitask/{run.name} {method} seed {seed}", changed,
                  machine_of(tables.read_json(done)))
  return tally.lines(
      f"{tally.total} finished multi-task runs are reruns of runs in `{earlier_dir}`'s "
      f"multitask_SETTING.csv tables (the same setting, method and seed): {tally.same} of "
      f"them give the same dev accuracy on every task they train as those tables keep it.")
