"""The results page's check of reruns: points run again (same settings, so the
same names) against an earlier study's tables, such as the first runs' in
docs/study_first_runs/, whose run directories were lost with their machine.

A run is seeded (runtime/setup.py), so a rerun may give the same numbers to
the last digit the tables keep, even on another CPU, or may not (kernels differ
between instruction sets, and threads may sum in another order): the section
counts the points that do and lists those that do not, with both values.
"""

import csv
import io
import math
import os
from typing import List

import tensorflow as tf

from experiments import sweep as sweep_lib
from experiments.study_grids import PARTS, TASKS
from experiments.study_results import sweep_dir

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


def reruns_section(output_dir: str, earlier_dir: str) -> List[str]:
  """The page's section on the finished points that EARLIER_DIR's tables
  (PART_TASK_results.csv, as the page copies them) also hold; [] where none."""
  same, differ, largest = 0, [], 0.0
  for part in PARTS:
    for task in TASKS:
      earlier = _rows(os.path.join(earlier_dir, f"{part}_{task}_results.csv"))
      if not earlier:
        continue
      now = _rows(os.path.join(sweep_dir(output_dir, part, task), sweep_lib.RESULTS_CSV))
      for point in sorted(set(earlier) & set(now)):
        then, again = earlier[point], now[point]
        gaps = [abs(_number(then, c) - _number(again, c)) for c in LOSSES]
        largest = max([largest] + [g for g in gaps if not math.isnan(g)])
        changed = [f"{c} {then[c]} then, {again[c]} now" for c in EXACT
                   if _number(then, c) != _number(again, c)]
        if changed:
          differ.append(f"- {part}/{task} `{point}`: " + "; ".join(changed))
        else:
          same += 1
  if not same and not differ:
    return []
  return ["## Reruns of earlier points", "",
          f"{same + len(differ)} finished points are reruns of points in `{earlier_dir}` "
          f"(the same settings, hence the same names): {same} of them give the same dev "
          f"accuracy and steps as that table keeps them, and the dev and final training "
          f"losses of all differ by at most {largest:.2g}."
          + (" The others:" if differ else ""), ""] + differ + ([""] if differ else [])
