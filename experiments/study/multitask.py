"""The results page's multi-task part: HyperFormer++ against per-task and shared
adapters (experiments.multitask_comparison's runs, per MULTITASK_RUNS setting),
its claims decided by the bootstrap, and why its seeds differ."""

import os
from typing import Dict, List, Mapping, Optional

import numpy as np
import tensorflow as tf

from experiments.study import claims
from experiments.study import cost
from experiments import multitask_comparison
from experiments import plots
from experiments.points import run_summary
from experiments.points import tables
from experiments.study.grids import (EPOCHS, LONG_EPOCHS, MULTITASK_METHODS, MULTITASK_RUNS,
                                     PARTS, SEEDS)
from adapter_bert.storage import file_io
from adapter_bert.storage import input_files

# The multi-task comparison's tasks, in its table's order.
_MULTITASK_TASKS = tuple(multitask_comparison.WORDNET_TASKS)


def multitask_section(output_dir: str, figures: str, multitask: Mapping[str, cost.Runs],
                      samples: int, data_root: str) -> List[str]:
  """Each setting's comparison table (experiments.multitask_comparison's own), its
  wall time (`multitask`: each setting's runs), its CSV (every seed's value)
  copied beside the page; HyperFormer++'s spread between seeds and its difference
  from per-task adapters (`samples` bootstrap samples over the dev sets under
  `data_root`), and its loss curves. Its claims are multitask_claims."""
  lines = []
  for run in MULTITASK_RUNS:
    directory = os.path.join(output_dir, "multitask", run.name)
    path = os.path.join(directory, "comparison.md")
    if tf.io.gfile.exists(path):
      table = os.path.join(figures, f"multitask_{run.name}.csv")
      file_io.make_parent_dirs(table)
      tf.io.gfile.copy(os.path.join(directory, "comparison.csv"), table, overwrite=True)
      link = os.path.relpath(table, os.path.dirname(figures))
      records = multitask[run.name].records
      seconds = sum(r.get("wall_seconds") or 0 for r in records)
      lines += [f"{run.describe()} ({', '.join(run.methods)}; {len(records)} runs, "
                f"{seconds / 3600:.2f} h of wall time; every seed's value: "
                f"[{os.path.basename(table)}]({link})):",
                "", input_files.read_text(path).strip(), ""]
  differences = _Differences(data_root, samples)
  lines += (_multitask_epochs(output_dir) + _hyperformer_spread(output_dir, differences)
            + _hyperformer_curves(output_dir, figures))
  # The heading over whatever has finished: a setting's runs can be done (claims,
  # curves) before its comparison table is written.
  return [f"## Multi-task: {PARTS['multitask'][1]}", ""] + lines if lines else []


def _comparison_rows(output_dir: str, run) -> Optional[List[dict]]:
  """The rows of a MULTITASK_RUNS entry's comparison.json; None before it has run."""
  path = os.path.join(output_dir, "multitask", run.name, "comparison.json")
  return tables.read_json(path)["rows"] if tf.io.gfile.exists(path) else None


def _multitask_epochs(output_dir: str) -> List[str]:
  """Every method's average over the four tasks at EPOCHS and at LONG_EPOCHS, side
  by side: whether the multi-task comparison is still moving between the two."""
  both = [r for r in MULTITASK_RUNS if r.methods == MULTITASK_METHODS]
  averages = []
  for run in sorted(both, key=lambda r: r.epochs):
    rows = _comparison_rows(output_dir, run) or []
    averages.append({r["method"]: r for r in rows if r["task"] == "average"})
  methods = [m for m in MULTITASK_METHODS if all(m in a for a in averages)]
  if len(averages) != 2 or not methods:
    return []
  cell = lambda r: f"{r['mean']:.3f} ± {r['std'] or 0:.3f} ({len(r['seeds'])})"
  short, long_ = averages
  return [f"Each method's mean dev accuracy over the four tasks at {EPOCHS} and at "
          f"{LONG_EPOCHS} epochs (± std between seeds, the seeds in brackets), and the "
          "change:", "",
          f"| method | {EPOCHS} epochs | {LONG_EPOCHS} epochs | change |", "|---|---|---|---|"] + [
      f"| {m} | {cell(short[m])} | {cell(long_[m])} | {long_[m]['mean'] - short[m]['mean']:+.3f} |"
      for m in methods] + [""]


class _Differences:
  """Differences of dev accuracy between two methods' multi-task runs, mean over
  the four tasks, with the paired bootstrap's 95% interval (claims.bootstrap_difference),
  each task's dev labels read once from `data_root`."""

  def __init__(self, data_root: str, samples: int):
    self.data_root, self.samples = data_root, samples
    self._labels: Dict[str, np.ndarray] = {}
    # Each run's correctness, read once: the per-task adapters are every setting's reference.
    self._correct: Dict[str, np.ndarray] = {}

  def __call__(self, method: tuple, reference: tuple) -> Optional[tuple]:
    """(estimate, low, high, tasks, fewest seeds) of `method` against `reference`,
    each (setting directory, method name), over the tasks where both have
    predictions; None where no task has."""
    pairs = []
    for task, (text_a, text_b) in multitask_comparison.WORDNET_TASKS.items():
      runs = {"method": _predictions(*method, task), "reference": _predictions(*reference, task)}
      if not all(runs.values()):
        continue
      if task not in self._labels:  # Read only where predictions are (and the task's data).
        self._labels[task] = claims.dev_labels(os.path.join(self.data_root, task), dict(
            text_a_column=text_a, text_b_column=text_b or None, label_column="label"))
      for d in runs["method"] + runs["reference"]:
        if d not in self._correct:
          self._correct[d] = claims.correctness(d, self._labels[task])
      pairs.append({key: np.stack([self._correct[d] for d in dirs])
                    for key, dirs in runs.items()})
    if not pairs:
      return None
    estimate, low, high = claims.bootstrap_difference(pairs, self.samples)
    return estimate, low, high, len(pairs), min(p[k].shape[0] for p in pairs for k in p)


def multitask_claims(output_dir: str, samples: int, data_root: str) -> List[str]:
  """HyperFormer++'s claims (the page opens with them, beside the paper's): see _claims."""
  return _claims(output_dir, _Differences(data_root, samples))


def _claims(output_dir: str, differences: _Differences) -> List[str]:
  """claims.MULTITASK_CLAIMS in each setting that ran both methods: the mean over
  the four tasks of the difference from per-task adapters, its 95% interval from
  the paired bootstrap over dev examples and seeds (the seeds whose runs wrote
  eval_predictions.tsv), the verdict."""
  rows, failed = [], False
  for run in MULTITASK_RUNS:
    directory = os.path.join(output_dir, "multitask", run.name)
    for claim in claims.MULTITASK_CLAIMS:
      if not {claim.method, claim.reference} <= set(run.methods):
        continue
      found = differences((directory, claim.method), (directory, claim.reference))
      if found is None:
        continue
      estimate, low, high, tasks, seeds = found
      verdict = claims.verdict(claim, low, high)
      failed |= verdict == "fails"
      rows.append(f"| {run.describe()} | {claim.describe()} | {claim.paper} | {tasks} | "
                  f"{seeds} | {100 * estimate:+.2f} | [{100 * low:+.2f}, {100 * high:+.2f}] | "
                  f"{verdict} |")
  if not rows:
    return []
  return ["HyperFormer++'s claim against one adapter set per task (houlsby), all on one "
          "frozen encoder: the difference of dev accuracy, mean over the tasks, with a 95% "
          f"interval from a paired bootstrap over dev examples and seeds "
          f"({differences.samples} samples).",
          "", "| setting | claim | paper | tasks | seeds (fewest) | difference | "
          "95% interval | verdict |", "|---|---|---|---|---|---|---|---|"] + rows + [""] + (
              [f"Where it fails, three causes are tested: the budget (the {LONG_EPOCHS}-epoch "
               "setting's rows), capacity (HyperFormer++ with "
               "generated adapters as wide as the per-task ones) and the learning rate (a "
               "third and three times as large); for the last two see \"vs houlsby\" in "
               "the table below.", ""] if failed else [])


def _predictions(directory: str, method: str, task: str) -> List[str]:
  """The directories holding `method`'s dev predictions on `task` under
  `directory`, a seed each: the seeds whose runs have finished and written them
  (eval_predictions.tsv, or its summary)."""
  found = []
  for seed in SEEDS:
    path = multitask_comparison.eval_predictions_path(directory, method, seed, task)
    [run_dir] = [d for d, tasks in multitask_comparison.run_dirs(directory, method, seed)
                 if task in tasks]
    if (tf.io.gfile.exists(os.path.join(run_dir, multitask_comparison.DONE_FILE))
        and run_summary.has_predictions(os.path.dirname(path))):
      found.append(os.path.dirname(path))
  return found


def _hyperformer_spread(output_dir: str, differences: _Differences) -> List[str]:
  """HyperFormer++ (encoder frozen) in each MULTITASK_RUNS setting: its mean and
  spread between seeds side by side, one factor changed at a time, and its
  difference from per-task adapters at the same epochs (the setting that ran them)."""
  with_houlsby = {r.epochs: os.path.join(output_dir, "multitask", r.name)
                  for r in MULTITASK_RUNS if claims.HOULSBY in r.methods}
  rows, settings = [], []
  for run in MULTITASK_RUNS:
    comparison = _comparison_rows(output_dir, run) if "hyperformer" in run.methods else None
    if comparison is None:
      continue
    cells = {r["task"]: r for r in comparison if r["method"] == "hyperformer"}
    average = cells.get("average")
    if average is None:
      continue
    std = lambda r: "" if r.get("std") is None else f"{r['std']:.3f}"
    found = differences((os.path.join(output_dir, "multitask", run.name), "hyperformer"),
                        (with_houlsby[run.epochs], claims.HOULSBY)) if (
                            run.epochs in with_houlsby) else None
    settings.append((run, average, found))
    rows.append(f"| {run.describe()} | {len(average['seeds'])} | {average['mean']:.3f} | "
                f"{std(average)} | "
                + " | ".join(std(cells[t]) if t in cells else "" for t in _MULTITASK_TASKS)
                + " | " + ", ".join(f"{v:.3f}" for v in average["values"]) + " | "
                + (claims.in_points(*found[:3]) if found else "") + " |")
  if not rows:
    return []
  return ["HyperFormer++ with the encoder frozen, one factor changed at a time: the mean "
          "dev accuracy over the four tasks, its std between seeds, each task's std, each "
          "seed's mean, and the difference from per-task adapters (houlsby) at the same "
          "epochs, in points, with its 95% bootstrap interval.", "",
          "| setting | seeds | mean | std | " + " | ".join(f"std {t}" for t in _MULTITASK_TASKS)
          + " | each seed | vs houlsby |", "|---" * (6 + len(_MULTITASK_TASKS)) + "|"]\
      + rows + [""] + _factors_reading(settings) + _spread_beside_the_others(output_dir)


def _factors_reading(settings: List[tuple]) -> List[str]:
  """What the one-factor settings at EPOCHS say, counted from the spread table's
  (run, average row, difference from houlsby) entries: whether any factor narrows
  HyperFormer++'s spread between seeds below the first setting's (every method,
  the authors' initial scales), and how near the nearest comes to per-task adapters."""
  at_epochs = [(run, average, found) for run, average, found in settings
               if run.epochs == EPOCHS and average.get("std") is not None]
  if len(at_epochs) < 2 or at_epochs[0][0] != MULTITASK_RUNS[0]:
    return []
  (_, first_average, _), factors = at_epochs[0], at_epochs[1:]
  narrowest = min(factors, key=lambda s: s[1]["std"])
  seeds = min(len(s[1]["seeds"]) for s in at_epochs)
  narrower = narrowest[1]["std"] < first_average["std"]
  lines = [f"Counted from the table, at {EPOCHS:g} epochs: "
           + (f"the narrowest spread between seeds is {narrowest[1]['std']:.3f} "
              f"({narrowest[0].describe()}), against the first row's "
              f"{first_average['std']:.3f}" if narrower else
              f"no changed factor narrows the spread between seeds below the first row's "
              f"{first_average['std']:.3f} (the narrowest: {narrowest[0].describe()}, "
              f"{narrowest[1]['std']:.3f})")
           # The sample std of n values is uncertain by about 1/sqrt(2(n - 1)) of itself.
           + f"; with {seeds} seeds a std is uncertain by about "
           f"{100 / (2 * (seeds - 1)) ** 0.5:.0f}% of itself."]
  compared = [s for s in factors if s[2] is not None]
  if compared:
    run, average, found = max(compared, key=lambda s: s[2][0])
    [claim] = [c for c in claims.MULTITASK_CLAIMS if c.method == "hyperformer"]
    lines.append(f"Nearest to per-task adapters of the changed factors: {run.describe()}, "
                 f"{claims.in_points(*found[:3])} points: HyperFormer++'s claim "
                 f"{claims.verdict(claim, *found[1:3])} there.")
  return [" ".join(lines), ""]


def _spread_beside_the_others(output_dir: str) -> List[str]:
  """HyperFormer++'s std between seeds beside every other method's in the settings
  that ran them all: whether its spread is its own or the budget's."""
  parts = []
  for run in MULTITASK_RUNS:
    if run.methods != MULTITASK_METHODS:
      continue
    averages = {r["method"]: r for r in _comparison_rows(output_dir, run) or []
                if r["task"] == "average" and r.get("std") is not None}
    if "hyperformer" in averages:
      parts.append(f"at {run.epochs:g} epochs " + ", ".join(
          f"{m} {averages[m]['std']:.3f} ({len(averages[m]['seeds'])} seeds)"
          for m in MULTITASK_METHODS if m in averages))
  if not parts:
    return []
  return ["The std between seeds of the mean over the four tasks, every method in the same "
          "setting: " + "; ".join(parts) + ".", ""]


def _hyperformer_curves(output_dir: str, figures: str) -> List[str]:
  """Each seed's training loss of HyperFormer++ (encoder frozen), a panel per
  MULTITASK_RUNS setting, as the finished runs logged it, with the points as a
  CSV (a run still going is left out: its curve would read as a whole run's)."""
  panels, rows = {}, []
  for run in MULTITASK_RUNS:
    if "hyperformer" not in run.methods:
      continue
    for seed in SEEDS:
      [(directory, _)] = multitask_comparison.run_dirs(
          os.path.join(output_dir, "multitask", run.name), "hyperformer", seed)
      done = tf.io.gfile.exists(os.path.join(directory, multitask_comparison.DONE_FILE))
      points = run_summary.curve(directory) if done else []
      if points:
        panels.setdefault(run.describe(), {})[f"seed {seed}"] = points
        # Logged as float32: 6 decimals hold all it has.
        rows += [{"setting": run.name, "seed": seed, "step": x, "loss": round(y, 6)}
                 for x, y in points]
  if not panels:
    return []
  png = os.path.join(figures, "multitask_hyperformer_loss.png")
  csv = os.path.join(figures, "multitask_hyperformer_loss.csv")
  plots.draw_curves(panels, "training loss (mean of a host call)", png)
  file_io.atomic_write(csv, tables.csv_text(rows, ["setting", "seed", "step", "loss"]))
  page_dir = os.path.dirname(figures)
  return ["HyperFormer++ with the encoder frozen: each seed's training loss as its run "
          "logged it (the mean over a host call's steps, batches of all four tasks "
          "mixed), a panel per setting: where the seeds part, and how early.", "",
          f"![HyperFormer++ training loss]({os.path.relpath(png, page_dir)})", "",
          f"Points: `{os.path.relpath(csv, page_dir)}`.", ""]
