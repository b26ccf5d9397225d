r"""The best setting on dev per method and training-set size, as the paper selected.

  python -m experiments.select --results=output/sweeps/lexname/results.json

A sweep's points fall into groups (by default every varied key except the
tuned ones and the seeds: e.g. train_mode, adapter_size, train_examples), and
within a group into settings (the tuned keys: by default learning_rate,
num_train_epochs and train_steps, where varied). A setting's score is its
mean dev metric over its seeds (`seed`, `subset_seed`); each group keeps the
setting with the best score. Ties go to the lower mean eval_loss, then to the
setting the grid lists first. Failed points count for nothing (`n_failed`
says how many a setting had).

Writes selected.json (the rows, plus every candidate setting's score) and
selected.csv beside the results, and prints the table. Columns: the group
keys, `method`, the selected values of the tuned keys, `n_seeds`, `n_failed`,
`candidates` (settings compared), `<metric>_mean` and `<metric>_std` (sample
standard deviation over seeds, empty for one seed) for every dev metric,
`params_trainable`, `params_total`, `trained_share`, `num_train_examples`,
`wall_seconds` (means over seeds), `points` (the runs averaged).
"""

import math
import os
import sys
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from absl import app
from absl import flags

from adapter_bert.cli import flag_checks
from adapter_bert.cli import path_flags
from adapter_bert import errors
from experiments.points import tables
from adapter_bert.storage import path_checks

DEFAULT_TUNE = ("learning_rate", "num_train_epochs", "train_steps")
# bank_task: a fusion run per seed adds its own task to the bank (one name per seed).
DEFAULT_SEED_KEYS = ("seed", "subset_seed", "bank_task")
_AVERAGED = ("params_trainable", "params_total", "params_adapter", "trained_share",
             "num_train_examples", "num_train_steps", "global_step", "wall_seconds")


def higher_is_better(metric: str) -> bool:
  return "loss" not in metric


def _number(value) -> Optional[float]:
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    return None
  return float(value) if math.isfinite(value) else None


def mean_std(values: Sequence[float]) -> Tuple[Optional[float], Optional[float]]:
  """Mean and sample standard deviation (None for fewer than two values)."""
  if not values:
    return None, None
  mean = math.fsum(values) / len(values)
  if len(values) < 2:
    return mean, None
  return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def metric_columns(rows: Sequence[Mapping[str, object]]) -> List[str]:
  return tables.columns_of([{k: None for k in r if k.startswith("eval_") or k == "loss"}
                            for r in rows])


def default_keys(varied_keys: Sequence[str], tune: Optional[Sequence[str]] = None,
                 seed_keys: Sequence[str] = DEFAULT_SEED_KEYS,
                 group_by: Optional[Sequence[str]] = None):
  """(group_by, tune, seed_keys) restricted to what the sweep varied."""
  tune = [k for k in (DEFAULT_TUNE if tune is None else tune) if k in varied_keys]
  seeds = [k for k in seed_keys if k in varied_keys]
  if group_by is None:
    group_by = [k for k in varied_keys if k not in tune and k not in seeds]
  return list(group_by), tune, seeds


def select(rows: Sequence[Mapping[str, object]], varied_keys: Sequence[str],
           metric: str = "eval_accuracy", tune: Optional[Sequence[str]] = None,
           seed_keys: Sequence[str] = DEFAULT_SEED_KEYS,
           group_by: Optional[Sequence[str]] = None):
  """The selected row per group, and every candidate setting's score.

  Args:
    rows: the results table's rows (experiments/sweep.py), in grid order.
    varied_keys: the sweep's varied keys (results.json "varied_keys").
    metric: the dev metric to select on; lower is better for a loss.
    tune: keys selected over (default DEFAULT_TUNE, where varied).
    seed_keys: keys averaged over.
    group_by: keys that make a group (default: the other varied keys).
  Returns:
    (selected rows, candidate rows), both in grid order.
  """
  group_by, tune, seeds = default_keys(varied_keys, tune, seed_keys, group_by)
  settings: Dict[tuple, List[Mapping]] = {}
  failed: Dict[tuple, int] = {}
  for row in rows:
    key = tuple(row.get(k) for k in group_by), tuple(row.get(k) for k in tune)
    settings.setdefault(key, [])
    if row.get("status") == "ok" and _number(row.get(metric)) is not None:
      settings[key].append(row)
    else:
      failed[key] = failed.get(key, 0) + 1
  metrics = metric_columns(rows)
  sign = 1.0 if higher_is_better(metric) else -1.0
  groups: Dict[tuple, List[dict]] = {}
  for order, ((group, tuned), members) in enumerate(settings.items()):
    candidate = dict(zip(group_by, group))
    candidate.update(zip(tune, tuned))
    for key in ("method", "train_mode", "adapter_size"):  # For labels, where not grouped by.
      if members and key in members[0] and key not in candidate:
        candidate[key] = members[0][key]
    candidate.update(n_seeds=len(members), n_failed=failed.get((group, tuned), 0))
    for name in metrics:
      values = [v for v in (_number(m.get(name)) for m in members) if v is not None]
      candidate[f"{name}_mean"], candidate[f"{name}_std"] = mean_std(values)
    for name in _AVERAGED:
      values = [v for v in (_number(m.get(name)) for m in members) if v is not None]
      if values:
        candidate[name] = mean_std(values)[0]
    candidate["points"] = [m["point"] for m in members]
    score = candidate.get(f"{metric}_mean")
    loss = candidate.get("eval_loss_mean")
    # Sort key: best score first, then lower dev loss, then grid order.
    if metric == "eval_loss":
      loss = 0.0
    candidate["_rank"] = (-sign * score if score is not None else math.inf,
                          loss if loss is not None else math.inf, order)
    candidate["_usable"] = score is not None
    groups.setdefault(group, []).append(candidate)
  selected, candidates = [], []
  for group, members in groups.items():
    usable = [c for c in members if c["_usable"]]
    best = min(usable, key=lambda c: c["_rank"]) if usable else None
    for c in members:
      c["selected"] = c is best
    if best is not None:
      row = {k: v for k, v in best.items() if not k.startswith("_") and k != "selected"}
      row["candidates"] = len(usable)
      row["n_failed"] = best["n_failed"]
      selected.append(row)
    candidates += [{k: v for k, v in c.items() if not k.startswith("_")} for c in members]
  return selected, candidates


def selected_columns(rows, group_by, tune, metric):
  first = list(group_by) + ["method"] + list(tune) + [
      f"{metric}_mean", f"{metric}_std", "n_seeds", "n_failed", "candidates",
      "params_trainable", "trained_share"]
  return tables.columns_of(rows, first)


def markdown(rows, group_by, tune, metric) -> str:
  """The selected table for a terminal or a README."""
  header = [k for k in group_by if k not in ("train_mode", "adapter_size")] + ["method"] + \
      list(tune) + [f"dev {metric}", "seeds", "trained params (share)"]
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  for r in rows:
    mean, std = r.get(f"{metric}_mean"), r.get(f"{metric}_std")
    score = f"{mean:.4f}" + (f" ± {std:.4f}" if std is not None else "")
    params = r.get("params_trainable")
    share = r.get("trained_share")
    cells = [str(r.get(k)) for k in header[:len(header) - 3]]
    cells += [score, str(r["n_seeds"]) + (f" ({r['n_failed']} failed)" if r["n_failed"] else ""),
              "" if params is None else f"{params:,.0f}" + (
                  f" ({100 * share:.2f}%)" if share is not None else "")]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def select_file(results_path: str, output_prefix: Optional[str] = None, **options):
  """Selects on a results.json; writes PREFIX.json / PREFIX.csv; returns (rows, keys)."""
  results = tables.read_json(results_path)
  varied = results.get("varied_keys", [])
  metric = options.get("metric", "eval_accuracy")
  rows, candidates = select(results["rows"], varied, **options)
  group_by, tune, seeds = default_keys(varied, options.get("tune"),
                                       options.get("seed_keys", DEFAULT_SEED_KEYS),
                                       options.get("group_by"))
  if output_prefix is None:
    output_prefix = os.path.join(os.path.dirname(results_path), "selected")
  tables.write_table(output_prefix + ".json", output_prefix + ".csv", rows,
                     selected_columns(rows, group_by, tune, metric), metric=metric,
                     higher_is_better=higher_is_better(metric), group_by=group_by, tune=tune,
                     seed_keys=seeds, results=results_path, candidates=candidates)
  return rows, dict(group_by=group_by, tune=tune, seed_keys=seeds, metric=metric)


def define_selection_flags(flag_values=flags.FLAGS):
  fv = dict(flag_values=flag_values)
  flags.DEFINE_string("results", None, "A sweep's results.json.", **fv)
  flags.DEFINE_string("metric", "eval_accuracy", "Dev metric to select on (eval_results.txt "
                      "key; lower is better if it names a loss).", **fv)
  flags.DEFINE_list("tune", list(DEFAULT_TUNE), "Keys to select over (where varied).", **fv)
  flags.DEFINE_list("seed_keys", list(DEFAULT_SEED_KEYS), "Keys to average over.", **fv)
  flags.DEFINE_list("group_by", None, "Keys of a group (default: the other varied keys).",
                    **fv)
  flags.mark_flag_as_required("results", flag_values=flag_values)


def selection_options(flag_values) -> dict:
  return dict(metric=flag_values.metric, tune=flag_values.tune,
              seed_keys=flag_values.seed_keys, group_by=flag_values.group_by)


def main(argv, flag_values=None):
  del argv
  F = flag_values or flags.FLAGS
  path_flags.check_path_flags(F, dict(results=path_checks.INPUT_FILE,
                                      output_prefix=path_checks.OUTPUT_FILE))
  rows, keys = select_file(F.results, F.output_prefix, **selection_options(F))
  sys.stdout.write(markdown(rows, keys["group_by"], keys["tune"], keys["metric"]))
  return 0


def define_flags(flag_values=flags.FLAGS):
  define_selection_flags(flag_values)
  flags.DEFINE_string("output_prefix", None, "Write PREFIX.json and PREFIX.csv (default: "
                      "selected.* beside --results).", flag_values=flag_values)


if __name__ == "__main__":
  define_flags()
  app.run(errors.exit_on_user_error(main), flags_parser=flag_checks.parse_flags)
