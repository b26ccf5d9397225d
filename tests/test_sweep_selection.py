"""experiments/select.py and experiments/plots.py on hand-made rows of a sweep's
results: the learning rate each method is selected at on dev (best mean over seeds,
ties to the lower dev loss), the select command's tables, the plots and exactly
the points they plot, and the method (and adapter design) a point counts under.
Sweeps themselves (grids, runs, resume, failures): test_sweep.py.
"""

import os

from absl import flags
import pytest

from experiments import plots
from experiments.points import runs
from experiments import select as select_lib
from experiments.points import tables
from adapter_bert.cli import options as cli_options
from sweep_tables import csv_cell, read_csv


# Selection.

def _row(point, lr, seed, accuracy, loss=0.5, mode="adapters", size=64, status="ok", **extra):
  row = dict(point=point, status=status, learning_rate=lr, seed=seed, train_mode=mode,
             adapter_size=size, method=runs.method_name(mode, size),
             params_trainable=1000 if mode == "adapters" else 100000, params_total=100000,
             trained_share=0.01 if mode == "adapters" else 1.0, num_train_examples=100,
             wall_seconds=10.0, **extra)
  if status == "ok":
    row.update(eval_accuracy=accuracy, eval_loss=loss)
  return row


VARIED = ["train_mode", "adapter_size", "learning_rate", "seed"]


def test_select_best_mean_over_seeds():
  rows = [
      # adapters: 1e-3 has the best single run (0.90) but the lower mean.
      _row("a1", 1e-3, 1, 0.90), _row("a2", 1e-3, 2, 0.60), _row("a3", 1e-3, 3, 0.60),
      _row("b1", 1e-4, 1, 0.80), _row("b2", 1e-4, 2, 0.80), _row("b3", 1e-4, 3, 0.70),
      # full: one seed failed; the other two decide.
      _row("c1", 3e-5, 1, 0.70, mode="full", size=0),
      _row("c2", 3e-5, 2, None, mode="full", size=0, status="failed"),
      _row("c3", 3e-5, 3, 0.90, mode="full", size=0),
      _row("d1", 1e-4, 1, 0.75, mode="full", size=0),
      _row("d2", 1e-4, 2, 0.75, mode="full", size=0),
      _row("d3", 1e-4, 3, 0.75, mode="full", size=0),
  ]
  selected, candidates = select_lib.select(rows, VARIED)
  assert [(r["method"], r["learning_rate"]) for r in selected] == [
      ("adapters_64", 1e-4), ("full", 3e-5)]
  adapters, full = selected
  assert adapters["n_seeds"] == 3 and adapters["n_failed"] == 0 and adapters["candidates"] == 2
  assert adapters["eval_accuracy_mean"] == pytest.approx(0.7666667)
  assert adapters["eval_accuracy_std"] == pytest.approx(0.0577350)  # Sample std (n - 1).
  assert adapters["points"] == ["b1", "b2", "b3"]
  assert full["n_seeds"] == 2 and full["n_failed"] == 1
  assert full["eval_accuracy_mean"] == pytest.approx(0.8)
  assert full["params_trainable"] == 100000 and full["trained_share"] == 1.0
  assert [c["selected"] for c in candidates] == [False, True, True, False]
  # A loss is selected downwards.
  by_loss, _ = select_lib.select([_row("x", 1e-3, 1, 0.5, loss=0.2),
                                  _row("y", 1e-4, 1, 0.9, loss=0.1)], VARIED,
                                 metric="eval_loss")
  assert by_loss[0]["learning_rate"] == 1e-4


def test_select_ties_go_to_lower_dev_loss_then_grid_order():
  tied = [_row("a", 1e-3, 1, 0.5, loss=0.69), _row("b", 1e-4, 1, 0.5, loss=0.60),
          _row("c", 3e-4, 1, 0.5, loss=0.60)]
  assert select_lib.select(tied, VARIED)[0][0]["learning_rate"] == 1e-4
  no_loss = [dict(r, eval_loss=None) for r in tied]
  assert select_lib.select(no_loss, VARIED)[0][0]["learning_rate"] == 1e-3
  # One seed: no standard deviation; per training-set size, its own selection.
  sized = [_row("s1", 1e-3, 1, 0.6, train_examples=100), _row("s2", 1e-4, 1, 0.7,
                                                              train_examples=100),
           _row("s3", 1e-3, 1, 0.9, train_examples=1000), _row("s4", 1e-4, 1, 0.8,
                                                               train_examples=1000)]
  picked, _ = select_lib.select(sized, VARIED + ["train_examples"])
  assert [(r["train_examples"], r["learning_rate"], r["eval_accuracy_std"]) for r in picked] \
      == [(100, 1e-4, None), (1000, 1e-3, None)]


def test_select_command_writes_selected_tables(tmp_path, capsys):
  rows = [_row("a1", 1e-3, 1, 0.8), _row("a2", 1e-3, 2, 0.7), _row("b1", 1e-4, 1, 0.6),
          _row("b2", 1e-4, 2, 0.6), _row("c1", 1e-4, 1, 0.9, mode="full", size=0)]
  results = str(tmp_path / "results.json")
  tables.write_json(results, {"varied_keys": VARIED, "rows": rows})
  fv = flags.FlagValues()
  select_lib.define_flags(fv)
  assert select_lib.main(fv(["select", f"--results={results}"]), fv) == 0
  printed = capsys.readouterr().out.splitlines()
  assert printed[2].startswith("| adapters_64 | 0.001 | 0.7500 ± 0.0707 | 2 | 1,000 (1.00%)")
  assert printed[3].startswith("| full | 0.0001 | 0.9000 | 1 |")
  written = read_csv(str(tmp_path / "selected.csv"))
  assert [(r["method"], r["learning_rate"], r["eval_accuracy_mean"]) for r in written] == [
      ("adapters_64", "0.001", csv_cell(0.75)), ("full", "0.0001", csv_cell(0.9))]
  saved = tables.read_json(str(tmp_path / "selected.json"))
  assert saved["group_by"] == ["train_mode", "adapter_size"] and saved["tune"] == [
      "learning_rate"] and saved["seed_keys"] == ["seed"]
  assert len(saved["candidates"]) == 3


# Plots.

def test_plots_write_png_and_exactly_the_plotted_points(tmp_path):
  rows = []
  for mode, size, params in [("adapters", 8, 900), ("adapters", 64, 5000),
                             ("top_layers:1", 0, 20000), ("full", 0, 100000),
                             ("layer_norm", 0, 300)]:
    for n in (100, 1000):
      for lr in (1e-4, 1e-3):
        for seed in (1, 2):
          acc = 0.5 + (0.2 if n == 1000 else 0) + (0.05 if lr == 1e-3 else 0) + seed / 100
          rows.append(_row(f"{mode}{size}-{n}-{lr}-{seed}", lr, seed, acc, mode=mode,
                           size=size, train_examples=n,
                           adapter_init_scale=1e-3 if n == 100 else 1e-1))
          rows[-1].update(params_trainable=params, num_train_examples=n)
  varied = ["train_mode", "adapter_size", "train_examples", "learning_rate", "seed"]
  results = str(tmp_path / "results.json")
  tables.write_json(results, {"varied_keys": varied, "rows": rows})
  selected, _ = select_lib.select(rows, varied)
  for kind in ("data_size", "tradeoff"):
    paths = plots.make_plot(results, kind)
    with open(paths["png"], "rb") as f:
      assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    plotted = read_csv(paths["csv"])
    data = tables.read_json(paths["json"])
    assert [r["y"] for r in plotted] == [csv_cell(p["y"]) for p in data["rows"]]
    x = plots.KINDS[kind]["x"]
    expected = sorted((r["method"], r[x], r["eval_accuracy_mean"], r["eval_accuracy_std"])
                      for r in selected)
    assert sorted((p["method"], p["x"], p["y"], p["y_std"]) for p in data["rows"]) == expected
  tradeoff = tables.read_json(os.path.join(str(tmp_path), "plots", "tradeoff.json"))
  assert tradeoff["log_x"] is True
  assert tradeoff["y_label"] == "dev eval_accuracy (mean ± std over 2 seeds)"
  assert {p["series"] for p in tradeoff["rows"]} == {
      "adapters, train_examples=100", "adapters, train_examples=1000",
      "top_layers, train_examples=100", "top_layers, train_examples=1000",
      "full, train_examples=100", "full, train_examples=1000",
      "layer_norm, train_examples=100", "layer_norm, train_examples=1000"}
  assert {p["label"] for p in tradeoff["rows"]} == {"8", "64", "K=1", ""}
  data_size = tables.read_json(os.path.join(str(tmp_path), "plots", "data_size.json"))
  adapters_8 = [p for p in data_size["rows"] if p["series"] == "adapters_8"]
  assert [(p["x"], p["learning_rate"]) for p in adapters_8] == [(100, 1e-3), (1000, 1e-3)]
  assert adapters_8[0]["y"] == pytest.approx(0.565) and adapters_8[0]["n_seeds"] == 2
  # Init scale: needs a sweep that varies it.
  with pytest.raises(Exception, match="varies adapter_init_scale"):
    plots.make_plot(results, "init_scale")
  varied_init = ["adapter_init_scale", "learning_rate", "seed"]
  init_rows = [dict(r, train_examples=None) for r in rows
               if r["train_mode"] == "adapters" and r["adapter_size"] == 8]
  tables.write_json(results, {"varied_keys": varied_init, "rows": init_rows})
  paths = plots.make_plot(results, "init_scale", str(tmp_path / "init"))
  points = tables.read_json(paths["json"])["rows"]
  assert [(p["x"], p["y"]) for p in points] == [(1e-3, pytest.approx(0.565)),
                                                (1e-1, pytest.approx(0.765))]


def test_the_y_axis_promises_a_std_only_where_points_have_seeds():
  def label(*seeds):
    return plots.y_axis_label([{"n_seeds": n} for n in seeds], "eval_accuracy")
  assert label(3, 3) == "dev eval_accuracy (mean ± std over 3 seeds)"
  assert label(2, 3) == "dev eval_accuracy (mean ± std over 2-3 seeds)"
  assert label(3, 1) == "dev eval_accuracy (mean ± std over 3 seeds; no bar: one seed)"
  assert label(1, 1) == "dev eval_accuracy (one seed)"


# Methods.

def test_a_point_without_run_config_gets_the_method_run_classifier_derives():
  """A point that failed before writing run_config.json: its method from its flags, as
  run_classifier.py derives it (cli/options.py's ModelOptions; runtime/model_setup
  owns the implied adapter size)."""
  for settings, method in [({}, ("adapters", 64)), ({"adapter_size": 8}, ("adapters", 8)),
                           ({"adapter_size": 0}, ("full", 0)),
                           ({"train_mode": "full"}, ("full", 0)),
                           ({"train_mode": "top_layers:3"}, ("top_layers:3", 0)),
                           ({"train_mode": "layer_norm"}, ("layer_norm", 0))]:
    assert runs.resolve_method(settings) == method, settings
    options = cli_options.model_options_of(settings)
    assert (str(options.mode()), options.adapter_size) == method, settings
  assert runs.resolve_method({"adapter_size": 8}, {"train_mode": "full", "adapter_config": {
      "size": 4}}) == ("full", 4)  # What the run itself wrote wins.


def test_adapter_designs_are_methods_and_trade_off_lines(tmp_path):
  """A sweep that varies --adapter_design: each design is its own method
  (pfeiffer_8, ...) and its own line of the trade-off plot, labelled by size."""
  assert runs.resolve_design({"adapter_design": "lora"}) == "lora"
  assert runs.resolve_design({"adapter_design": "lora"},
                             {"adapter_config": {"size": 8, "design": "parallel"}}) == "parallel"
  assert runs.resolve_design({}, {"adapter_config": {"size": 8}}) == "houlsby"
  assert runs.resolve_design({}, {"adapter_config": {"size": 64},
                                  "fusion_tasks": ["pos", "relation"]}) == "fusion"
  assert runs.resolve_design({"fusion_tasks": "pos,relation"}) == "fusion"
  rows = []
  for design, size, params in [("houlsby", 8, 1000), ("houlsby", 64, 8000),
                               ("pfeiffer", 8, 500), ("lora", 8, 700), ("lora", 64, 5000),
                               ("fusion", 64, 90000)]:
    for seed in (1, 2):
      fusion = dict(adapter_bank="bank", fusion_tasks="a,b", bank_task=f"t{seed}") \
          if design == "fusion" else {}
      rows.append(_row(f"{design}{size}-{seed}", 1e-3, seed, 0.6 + size / 1000 + seed / 100,
                       size=size, adapter_design=design, **fusion))
      rows[-1].update(method=runs.method_name("adapters", size, design),
                      params_trainable=params)
  rows.append(_row("full-1", 1e-4, 1, 0.7, mode="full", size=0, adapter_design="houlsby"))
  assert [r["method"] for r in rows[::2]] == [
      "adapters_8", "adapters_64", "pfeiffer_8", "lora_8", "lora_64", "fusion_64", "full"]
  varied = ["train_mode", "adapter_size", "adapter_design", "adapter_bank", "fusion_tasks",
            "learning_rate", "seed", "bank_task"]
  results = str(tmp_path / "results.json")
  tables.write_json(results, {"varied_keys": varied, "rows": rows})
  plots.make_plot(results, "tradeoff")
  points = tables.read_json(os.path.join(str(tmp_path), "plots", "tradeoff.json"))["rows"]
  assert sorted((p["series"], p["label"], p["x"]) for p in points) == [
      ("adapters", "64", 8000), ("adapters", "8", 1000), ("full", "", 100000),
      ("fusion", "64", 90000), ("lora", "64", 5000), ("lora", "8", 700), ("pfeiffer", "8", 500)]
