r"""The paper's figures from a sweep: each PNG beside a data file of its exact points.

  python -m experiments.plots --results=output/sweeps/lexname/results.json --kind=tradeoff

Every plotted point is a selected setting (experiments/select.py: best on dev,
mean over seeds) with its standard deviation over seeds as a band or error bar:

  data_size   dev metric vs training examples (the `train_examples` axis), one
              line per method: adapters against full fine-tuning as the data shrinks
  tradeoff    dev metric vs trained parameters (log x), one line per family:
              adapters of sizes 2..256, top-K-layer fine-tuning, LayerNorms only,
              full fine-tuning, head only (as in the paper's trade-off figures)
  init_scale  dev metric vs the adapters' initial standard deviation
              (`adapter_init_scale`, log x, e.g. 1e-7 .. 1), one line per method

Writes OUTPUT_DIR/KIND.png, KIND.csv and KIND.json (default OUTPUT_DIR: plots/
beside the results). The CSV's rows are the plotted points: series, x, y,
y_std, n_seeds, label (the adapter size or K shown beside a trade-off point),
and the selected setting's keys.
"""

import io
import os
from typing import Dict, List, Mapping, Optional, Sequence

import matplotlib

matplotlib.use("Agg")  # Files only: no display on servers.
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
from matplotlib import ticker  # pylint: disable=g-import-not-at-top

from absl import app
from absl import flags

from adapter_bert.cli import flag_checks
from adapter_bert.cli import path_flags
from adapter_bert import errors
from experiments.points import runs
from experiments import select as select_lib
from experiments.points import tables
from adapter_bert.storage import file_io
from adapter_bert.storage import path_checks

# What names a method; a fusion's bank and fused tasks are part of it.
_METHOD_KEYS = ("train_mode", "adapter_size", "adapter_design", "adapter_bank", "fusion_tasks",
                "method")
KINDS = {
    "data_size": dict(x="num_train_examples", needs="train_examples",
                      x_label="training examples", title="dev metric vs training-set size",
                      hidden=_METHOD_KEYS + ("train_examples",)),
    "tradeoff": dict(x="params_trainable", needs=None, x_label="trained parameters per task",
                     title="dev metric vs trained parameters", hidden=_METHOD_KEYS),
    "init_scale": dict(x="adapter_init_scale", needs="adapter_init_scale",
                       x_label="adapter initial weight std (adapter_init_scale)",
                       title="dev metric vs adapter initialization scale",
                       hidden=_METHOD_KEYS + ("adapter_init_scale",)),
}
DATA_COLUMNS = ("series", "x", "y", "y_std", "n_seeds", "label")


def _series_name(row: Mapping[str, object], kind: str, group_by: Sequence[str]) -> str:
  if kind == "tradeoff":
    base = runs.method_family(str(row.get("train_mode") or row.get("method") or ""),
                              str(row.get("method") or ""))
  else:
    base = str(row.get("method") or "")
  others = [f"{k}={row.get(k)}" for k in group_by if k not in KINDS[kind]["hidden"]]
  return ", ".join([base] + others)


def _label(row: Mapping[str, object]) -> str:
  mode = str(row.get("train_mode") or "")
  if mode == "adapters":
    return str(row.get("adapter_size"))
  if mode.startswith("top_layers:"):
    return "K=" + mode.partition(":")[2]
  return ""


def plot_points(selected: Sequence[Mapping[str, object]], kind: str, metric: str,
                group_by: Sequence[str], tune: Sequence[str] = ()) -> List[Dict[str, object]]:
  """The points a figure shows, sorted by series then x.

  Raises:
    errors.UserError: if the sweep did not vary what the figure needs.
  """
  spec = KINDS[kind]
  if spec["needs"] and spec["needs"] not in group_by:
    raise errors.UserError(f"--kind={kind} needs a sweep that varies {spec['needs']} "
                           f"(groups here: {', '.join(group_by) or 'none'})")
  points = []
  for row in selected:
    x, y = row.get(spec["x"]), row.get(f"{metric}_mean")
    if not isinstance(x, (int, float)) or isinstance(x, bool) or y is None:
      continue
    point = {"series": _series_name(row, kind, group_by), "x": x, "y": y,
             "y_std": row.get(f"{metric}_std"), "n_seeds": row.get("n_seeds"),
             "label": _label(row) if kind == "tradeoff" else ""}
    point.update((k, row.get(k)) for k in list(group_by) + ["method"] + list(tune)
                 if k not in point)
    points.append(point)
  order = list(dict.fromkeys(p["series"] for p in points))
  points.sort(key=lambda p: (order.index(p["series"]), p["x"]))
  return points


def _log_x(kind: str, xs: Sequence[float]) -> bool:
  if kind != "data_size":
    return True
  positive = [x for x in xs if x > 0]
  return bool(positive) and max(positive) / min(positive) >= 10


def y_axis_label(points: Sequence[Mapping[str, object]], metric: str) -> str:
  """The y axis's label, promising only what the points have: a bar is a std
  over seeds only where a point has two or more."""
  counts = sorted({int(p.get("n_seeds") or 1) for p in points})
  several = [n for n in counts if n > 1]
  if not several:
    return f"dev {metric} (one seed)"
  span = str(several[0]) if len(several) == 1 else f"{several[0]}-{several[-1]}"
  label = f"dev {metric} (mean ± std over {span} seeds"
  return label + ("; no bar: one seed)" if counts[0] == 1 else ")")


def draw(points: Sequence[Mapping[str, object]], kind: str, metric: str, path: str) -> None:
  """The figure of `points` as a PNG."""
  spec = KINDS[kind]
  fig, ax = plt.subplots(figsize=(7, 4.5))
  for series in dict.fromkeys(p["series"] for p in points):
    mine = [p for p in points if p["series"] == series]
    xs = [p["x"] for p in mine]
    ys = [p["y"] for p in mine]
    stds = [p["y_std"] or 0.0 for p in mine]
    if kind == "tradeoff":
      line = ax.errorbar(xs, ys, yerr=stds, marker="o", capsize=3, label=series)
      for p in mine:
        if p["label"]:
          ax.annotate(p["label"], (p["x"], p["y"]), textcoords="offset points",
                      xytext=(4, 4), fontsize=7)
    else:
      (line,) = ax.plot(xs, ys, marker="o", label=series)
      ax.fill_between(xs, [y - s for y, s in zip(ys, stds)], [y + s for y, s in zip(ys, stds)],
                      color=line.get_color(), alpha=0.2, linewidth=0)
  if _log_x(kind, [p["x"] for p in points]):
    ax.set_xscale("log")
    if kind != "init_scale":  # Counts read better whole (1,000) than as 10^3.
      ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
      ax.xaxis.set_minor_formatter(ticker.NullFormatter())
  xs = sorted({p["x"] for p in points})
  if kind == "data_size" and len(xs) <= 12:  # The sizes run, not decades.
    ax.set_xticks(xs)
  ax.set_xlabel(spec["x_label"])
  ax.set_ylabel(y_axis_label(points, metric))
  ax.set_title(spec["title"])
  ax.grid(True, which="major", alpha=0.3)
  if points:
    ax.legend(fontsize=8)
  _save_png(fig, path, dpi=150)


def _save_png(fig, path: str, dpi: int) -> None:
  fig.tight_layout()
  # Drawn into memory and written whole through tf.io.gfile: a bucket path works.
  png = io.BytesIO()
  fig.savefig(png, format="png", dpi=dpi)
  plt.close(fig)
  file_io.atomic_write(path, png.getvalue(), binary=True)


def draw_curves(panels: Mapping[str, Mapping[str, Sequence[tuple]]], y_label: str,
                path: str) -> None:
  """Training curves as a PNG: a panel per entry of `panels` (its title), three
  to a row, a line per entry of its mapping (the legend), each a sequence of
  (step, value). The panels share the value axis, so they can be read
  against each other; each has its own steps (runs may differ in length)."""
  columns = min(3, len(panels))
  rows = -(-len(panels) // columns)
  fig, axes = plt.subplots(rows, columns, figsize=(3.6 * columns + 0.6, 3.2 * rows),
                           sharey=True, squeeze=False)
  for ax, (title, lines) in zip(axes.flat, panels.items()):
    for name, points in lines.items():
      ax.plot([x for x, _ in points], [y for _, y in points], label=name, linewidth=1)
    ax.set_title(title, fontsize=8)
    ax.set_xlabel("training step")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
  for ax in list(axes.flat)[len(panels):]:
    ax.set_visible(False)
  for row in axes:
    row[0].set_ylabel(y_label)
  _save_png(fig, path, dpi=120)


def make_plot(results_path: str, kind: str, output_dir: Optional[str] = None,
              **options) -> Dict[str, str]:
  """Selects on `results_path` and writes KIND.png, .csv, .json; returns their paths."""
  if kind not in KINDS:
    raise errors.UserError(f"--kind={kind}: expected one of {', '.join(KINDS)}")
  results = tables.read_json(results_path)
  varied = results.get("varied_keys", [])
  metric = options.get("metric", "eval_accuracy")
  selected, _ = select_lib.select(results["rows"], varied, **options)
  group_by, tune, _ = select_lib.default_keys(
      varied, options.get("tune"), options.get("seed_keys", select_lib.DEFAULT_SEED_KEYS),
      options.get("group_by"))
  points = plot_points(selected, kind, metric, group_by, tune)
  if not points:
    raise errors.UserError(f"{results_path}: no finished points to plot for --kind={kind}")
  output_dir = output_dir or os.path.join(os.path.dirname(results_path), "plots")
  paths = {ext: os.path.join(output_dir, f"{kind}.{ext}") for ext in ("png", "csv", "json")}
  columns = tables.columns_of(points, DATA_COLUMNS)
  tables.write_table(paths["json"], paths["csv"], points, columns, kind=kind, metric=metric,
                     x=KINDS[kind]["x"], x_label=KINDS[kind]["x_label"],
                     log_x=_log_x(kind, [p["x"] for p in points]),
                     y_label=y_axis_label(points, metric), results=results_path)
  draw(points, kind, metric, paths["png"])
  return paths


def define_flags(flag_values=flags.FLAGS):
  select_lib.define_selection_flags(flag_values)
  flags.DEFINE_list("kind", list(KINDS), "Figures: " + ", ".join(KINDS) + ".",
                    flag_values=flag_values)
  flags.DEFINE_string("output_dir", None, "Where the figures go (default: plots/ beside "
                      "--results).", flag_values=flag_values)


def main(argv, flag_values=None):
  del argv
  F = flag_values or flags.FLAGS
  path_flags.check_path_flags(F, dict(results=path_checks.INPUT_FILE,
                                      output_dir=path_checks.OUTPUT_DIR))
  for kind in F.kind:
    try:
      paths = make_plot(F.results, kind, F.output_dir, **select_lib.selection_options(F))
    except errors.UserError as e:
      print(f"{kind}: skipped: {e}")
      if len(F.kind) == 1:
        return 2
      continue
    print(f"{kind}: {paths['png']} (points: {paths['csv']})")
  return 0


if __name__ == "__main__":
  define_flags()
  app.run(errors.exit_on_user_error(main), flags_parser=flag_checks.parse_flags)
