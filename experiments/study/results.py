"""Reading a study directory (OUTPUT_DIR/PART/TASK/ sweeps): results, each
method's selected setting (Table 1's rate, then its epochs), the grids that
depend on them, the runs' dev predictions, the sittings."""

import functools
import os
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf

from experiments.study import claims
from experiments.study import cost
from experiments.points import data as data_lib
from experiments.points import grid as grid_lib
from experiments import multitask_comparison
from experiments.points import runs
from experiments import select as select_lib
from experiments import sweep as sweep_lib
from experiments.points import tables
from experiments.study.grids import (CONVERGENCE_EPOCHS, EPOCHS, LONG_EPOCHS, MULTITASK_RUNS,
                                     PARTS, SEEDS, TABLE_METHOD_KEYS, TABLE_METHOD_RATES,
                                     TASKS, bracketing_rate, part_grid)
from adapter_bert.runtime import loop

SITTINGS_FILE = "sittings.json"


def read_sittings(output_dir: str) -> List[dict]:
  """The sittings that ran points (experiments/study/command.py records them), oldest first."""
  path = os.path.join(output_dir, SITTINGS_FILE)
  return tables.read_json(path) if tf.io.gfile.exists(path) else []


def newest_cpu(sittings: Sequence[Mapping[str, str]]) -> Optional[str]:
  """The CPU of the sitting that started last, of those that recorded one."""
  known = [s for s in sittings if s.get("machine")]
  return max(known, key=lambda s: s["started"])["machine"] if known else None


def machine_of_run(sittings: Sequence[Mapping[str, str]]
                   ) -> Callable[[Mapping[str, object]], Optional[str]]:
  """A function giving a finished run's CPU: its record's own `machine`
  (experiments/points/runs.py writes it), else that of the sitting whose span (started
  to last_finished) holds the record's finished_at, for the runs recorded before
  the records named it; None where neither says."""
  spans = [(s["started"], s["last_finished"], s["machine"]) for s in sittings
           if s.get("machine") and s.get("last_finished")]

  def machine_of(record: Mapping[str, object]) -> Optional[str]:
    if record.get("machine"):
      return str(record["machine"])
    finished = record.get("finished_at")
    # ISO timestamps of one format order as strings do.
    return next((m for start, end, m in spans if finished and start <= finished <= end),
                None)
  return machine_of


def sweep_dir(output_dir: str, part: str, task: str) -> str:
  return os.path.join(output_dir, part, task)


def multitask_cost(output_dir: str, data_root: str,
                   seeds: Sequence[int] = SEEDS) -> Dict[str, cost.Runs]:
  """Each MULTITASK_RUNS setting's runs, by its name, as experiments/study/cost.py counts
  them: a finished run's record (multitask_comparison.DONE_FILE, with its wall
  time and steps), a pending one's training steps (runtime/loop.py's, over the
  tasks the run trains)."""
  examples: Dict[str, int] = {}

  def steps(runs_tasks: Sequence[Sequence[str]], epochs: float) -> int:
    """The training steps of runs, each given by the tasks it trains, summed."""
    total = 0
    for tasks in runs_tasks:
      for t in tasks:
        if t not in examples:
          examples[t] = data_lib.count_rows(os.path.join(data_root, t), "tsv")
      total += loop.steps_for_epochs(sum(examples[t] for t in tasks),
                                     multitask_comparison.TRAIN_BATCH_SIZE, epochs)
    return total

  out = {}
  for run in MULTITASK_RUNS:
    records, pending = [], []
    for method in run.methods:
      for seed in seeds:
        for directory, tasks in multitask_comparison.run_dirs(
            os.path.join(output_dir, "multitask", run.name), method, seed):
          done = os.path.join(directory, multitask_comparison.DONE_FILE)
          if tf.io.gfile.exists(done):
            record = tables.read_json(done)
            records.append(dict(record, global_step=record["metrics"].get("global_step")))
          else:
            pending.append(tasks)
    out[run.name] = cost.Runs(records, len(pending),
                              functools.partial(steps, pending, run.epochs))
  return out


def _key(row: Mapping[str, object]) -> tuple:
  return row["train_mode"], row["adapter_size"]


def methods_grid(output_dir: str, task: str, model_dir: str, data_root: str,
                 seeds: Sequence[int] = SEEDS) -> dict:
  """The methods part's grid on `task`: the design's (grids.part_grid), and
  for each Table 1 method whose points at `seeds` have all finished and whose
  selected rate (the best mean over every finished seed, as selected_rates
  selects) is the smallest or the largest it tried, the next rate beyond it
  (grids.bracketing_rate), again until bracketed. So the grid grows as
  its points finish: the study runs it until it stops growing."""
  beyond: Dict[tuple, List[float]] = {}
  every_seed = sorted(set(seeds) | set(SEEDS))
  while True:
    finished = sweep_lib.Sweep(grid_lib.Grid.from_json(part_grid(
        "methods", TASKS[task], model_dir, data_root, every_seed, beyond=beyond)),
        sweep_dir(output_dir, "methods", task))
    waiting = {_key(p.settings) for p in finished.pending() if p.settings["seed"] in seeds}
    rows = finished.rows()
    selected, _ = select_lib.select(rows, finished.grid.varied_keys())
    grew = False
    for row in selected:
      key = _key(row)
      if key not in TABLE_METHOD_RATES or key in waiting:
        continue
      tried = {r["learning_rate"] for r in rows if _key(r) == key}
      rate = bracketing_rate(row["learning_rate"], tried, TABLE_METHOD_RATES[key])
      if rate is not None:
        beyond.setdefault(key, []).append(rate)
        grew = True
    if not grew:
      return part_grid("methods", TASKS[task], model_dir, data_root, seeds, beyond=beyond)


def selected_rates(output_dir: str, task: str, model_dir: str, data_root: str,
                   seeds: Sequence[int] = SEEDS) -> Optional[Dict[tuple, float]]:
  """Each Table 1 method's learning rate selected by the methods part on `task`,
  by (train_mode, adapter_size): None while any of its points at `seeds` is
  pending (the rates that bracket a selection among them); else selected over
  every seed that has finished there (so a sitting with --seeds=1 still runs
  the rates that three seeds chose)."""
  def sweep(with_seeds):
    grid = methods_grid(output_dir, task, model_dir, data_root, with_seeds)
    return sweep_lib.Sweep(grid_lib.Grid.from_json(grid), sweep_dir(output_dir, "methods", task))
  if sweep(seeds).pending():
    return None
  finished = sweep(sorted(set(seeds) | set(SEEDS)))
  rows, _ = select_lib.select(finished.rows(), finished.grid.varied_keys())
  return {(r["train_mode"], r["adapter_size"]): r["learning_rate"] for r in rows
          if (r["train_mode"], r["adapter_size"]) in TABLE_METHOD_KEYS}


# The parts whose grids are the methods part's selected rates.
SELECTION_PARTS = ("methods_long", "epochs")


def study_grid(output_dir: str, part: str, task: str, model_dir: str, data_root: str,
               seeds: Sequence[int] = SEEDS) -> Optional[dict]:
  """The part's grid on the task; None for SELECTION_PARTS until the rates are selected."""
  rates = None
  if part == "methods":
    return methods_grid(output_dir, task, model_dir, data_root, seeds)
  if part in SELECTION_PARTS:
    rates = selected_rates(output_dir, task, model_dir, data_root, seeds)
    if rates is None:
      return None
  return part_grid(part, TASKS[task], model_dir, data_root, seeds, rates)


# Stand-in rates for the SELECTION_PARTS' cost before the rates are selected: a
# point's steps, hence its estimated hours, do not depend on its rate.
_ANY_RATES = {key: rates[0] for key, rates in TABLE_METHOD_RATES.items()}


def whole_study(output_dir: str, model_dir: str, data_root: str) -> List[cost.Sweep]:
  """Every sweep of the study with its defaults (parts, tasks, seeds), as on disk."""
  out, rates = [], {}
  for part, (tasks, _) in PARTS.items():
    if part == "multitask":
      continue
    for task in tasks:
      task_rates = None
      if part in SELECTION_PARTS:
        if task not in rates:  # Selected once per task.
          rates[task] = selected_rates(output_dir, task, model_dir, data_root)
        task_rates = rates[task] or _ANY_RATES
      grid = (methods_grid(output_dir, task, model_dir, data_root) if part == "methods"
              else part_grid(part, TASKS[task], model_dir, data_root, rates=task_rates))
      out.append((part, task, sweep_lib.Sweep(grid_lib.Grid.from_json(grid),
                                              sweep_dir(output_dir, part, task))))
  return out


def read_results(output_dir: str, part: str, task: str) -> Optional[dict]:
  """The (part, task) sweep's results.json; None where that sweep has not started."""
  path = os.path.join(sweep_dir(output_dir, part, task), sweep_lib.RESULTS_JSON)
  return tables.read_json(path) if tf.io.gfile.exists(path) else None


def ok_rows(output_dir: str, part: str, task: str) -> Optional[tuple]:
  results = read_results(output_dir, part, task)
  if results is None:
    return None
  return results, [r for r in results["rows"] if r["status"] == "ok"]


def pending_methods(results: Mapping) -> set:
  """The methods (runs.method_name) of a sweep's pending points, which its
  results name only: their settings come from the sweep's grid."""
  pending = set(results.get("pending", ()))
  points = grid_lib.Grid.from_json(results["grid"]).points(sweep_lib.DEFAULTS)
  return {runs.method_name(*runs.resolve_method(p.settings), runs.resolve_design(p.settings))
          for p in points if p.name in pending}


def full_by_epochs_pending(output_dir: str, task: str) -> bool:
  """Whether full_by_epochs(task) still waits for points: the epochs part's
  (every one full fine-tuning) or methods_long's of full fine-tuning."""
  epochs = read_results(output_dir, "epochs", task)
  if epochs is not None and epochs.get("pending"):
    return True
  long = read_results(output_dir, "methods_long", task)
  return long is not None and bool(long.get("pending")) and "full" in pending_methods(long)


def selected_methods(results: Mapping) -> Dict[str, dict]:
  """Each method's selected setting (experiments.select), by method name."""
  rows, _ = select_lib.select(results["rows"], results.get("varied_keys", []))
  return {r["method"]: r for r in rows}


def table_selection(output_dir: str, task: str) -> Optional[Dict[str, dict]]:
  """Table 1's row of each method on `task`, by method name, with its "part".

  The methods part selects the learning rate at EPOCHS epochs; where
  methods_long has run that rate for LONG_EPOCHS with as many seeds, the
  epochs are selected as the rate was (experiments.select: the better mean dev
  accuracy over seeds, then the lower dev loss, then EPOCHS), and
  "epochs_tried" lists both. None before the methods part has results.
  """
  short = read_results(output_dir, "methods", task)
  if short is None:
    return None
  chosen = {m: dict(r, part="methods", num_train_epochs=EPOCHS, epochs_tried=[EPOCHS])
            for m, r in selected_methods(short).items()}
  long = read_results(output_dir, "methods_long", task)
  if long is None:
    return chosen
  for method, row in selected_methods(long).items():
    three = chosen.get(method)
    # A candidate: a long run of the rate selected now, with as many seeds.
    if (three is None or row["learning_rate"] != three["learning_rate"]
        or row["n_seeds"] + row["n_failed"] < three["n_seeds"] + three["n_failed"]):
      continue
    candidates = [dict(r, num_train_epochs=EPOCHS) for r in short["rows"]
                  if r["point"] in three["points"]] + [
                      dict(r, num_train_epochs=LONG_EPOCHS) for r in long["rows"]
                      if r["point"] in row["points"]]
    best, _ = select_lib.select(candidates, ["num_train_epochs", "seed"])
    kept = three
    if best[0]["num_train_epochs"] == LONG_EPOCHS:
      kept = dict(row, part="methods_long", num_train_epochs=LONG_EPOCHS)
    chosen[method] = dict(kept, epochs_tried=[EPOCHS, LONG_EPOCHS])
  return chosen


def full_by_epochs(output_dir: str, task: str) -> Dict[float, tuple]:
  """Full fine-tuning at the rate the methods part selected, by epochs: (part,
  results, selected row) from the methods part (EPOCHS), the epochs part
  (CONVERGENCE_EPOCHS) and methods_long (LONG_EPOCHS), where they ran that rate."""
  short = read_results(output_dir, "methods", task)
  full = selected_methods(short).get("full") if short is not None else None
  if full is None:
    return {}
  rate = full["learning_rate"]
  curve = {EPOCHS: ("methods", short, full)}
  epochs = read_results(output_dir, "epochs", task)
  if epochs is not None and epochs["grid"]["fixed"].get("learning_rate") == rate:
    rows, _ = select_lib.select(epochs["rows"], epochs.get("varied_keys", []), tune=())
    curve.update((r["num_train_epochs"], ("epochs", epochs, r)) for r in rows
                 if r["num_train_epochs"] in CONVERGENCE_EPOCHS)
  long = read_results(output_dir, "methods_long", task)
  row = selected_methods(long).get("full") if long is not None else None
  if row is not None and row["learning_rate"] == rate:
    curve[LONG_EPOCHS] = ("methods_long", long, row)
  return dict(sorted(curve.items()))


def runs_correct(predictions: claims.Predictions, output_dir: str, part: str, task: str,
                  results: Mapping, points: Sequence[str]) -> np.ndarray:
  return predictions.correct(os.path.join(sweep_dir(output_dir, part, task), "runs"), points,
                             results["grid"]["fixed"])
