"""experiments/study/: the learning rates the study runs at, from study directories
made here (no model runs). The methods_long part runs each Table 1 method at the
rate the methods part selected, once none of its points is pending; a selection at
the edge of a method's rates gains the next rate past it (at most two past the
grid), run before the trade-off's points; and the page names a method at the edge
only once its points have all finished. The grids, the page, the sittings:
test_study.py.
"""

import json
import os

import pytest
from absl import flags

from experiments.points import grid as grid_lib
from experiments.points import runs as runs_lib
from experiments.study import command as study
from experiments.study import grids as study_grids
from experiments.study import page as study_page
from experiments.study import results as study_results
from experiments import sweep as sweep_lib
from study_files import write_text


def test_methods_long_runs_each_table_method_at_its_selected_rate(tmp_path, capsys,
                                                                 monkeypatch):
  """Its grid waits for the methods part's points, then takes each method's
  selected rate (here the second of its grid's rates: best mean dev accuracy
  over seeds 1 and 2, though seed 1 alone prefers the first)."""
  monkeypatch.chdir(tmp_path)
  os.makedirs("models/minilm")
  os.makedirs("data/wordnet")
  out, task = str(tmp_path / "study"), "wordnet_relation"
  args = ("models/minilm", "data/wordnet", [1, 2])
  sweep = sweep_lib.Sweep(grid_lib.Grid.from_json(study_grids.part_grid(
      "methods", study_grids.TASKS[task], *args)), os.path.join(out, "methods", task))
  methods = sweep.points
  rates = {}
  for p in methods:
    rates.setdefault((p.settings["train_mode"], p.settings["adapter_size"]), []).append(
        p.settings["learning_rate"])
  second = {key: sorted(set(r))[1] for key, r in rates.items()}

  def record(p):
    key = (p.settings["train_mode"], p.settings["adapter_size"])
    rate, seed = p.settings["learning_rate"], p.settings["seed"]
    accuracy = ({1: 0.6, 2: 0.5}[seed] if rate == min(rates[key]) else
                {1: 0.5, 2: 1.0}[seed] if rate == second[key] else 0.5)
    path = os.path.join(sweep.point_dir(p), runs_lib.RECORD_FILE)
    write_text(path, json.dumps({"point": p.name, "status": "ok", "vary": p.vary,
                             "train_mode": key[0], "adapter_size": key[1],
                             "metrics": {"eval_accuracy": accuracy, "eval_loss": 0.5}}))

  def dry_run(*extra):
    fv = flags.FlagValues()
    study.define_flags(fv)
    fv(["study", f"--output_dir={out}", "--parts=methods_long", f"--tasks={task}",
        "--seeds=1,2", "--model_dir=models/minilm", "--data_root=data/wordnet", "--dry_run",
        *extra])
    assert study.main([], fv) == 0
    return capsys.readouterr().out

  for p in methods[:-1]:
    record(p)
  assert study_results.selected_rates(out, task, *args) is None
  assert study_results.study_grid(out, "methods_long", task, *args) is None
  assert study_results.study_grid(out, "epochs", task, *args) is None
  assert "=== methods_long on wordnet_relation: waits for the methods part" in dry_run()
  record(methods[-1])
  assert study_results.selected_rates(out, task, *args) == second
  # A sitting with --seeds=1 runs the rates every finished seed chose.
  assert study_results.selected_rates(out, task, *args[:2], [1]) == second
  assert "methods_long/wordnet_relation: 12 points, 12 pending" in dry_run()
  long = grid_lib.Grid.from_json(study_results.study_grid(out, "methods_long", task, *args))
  assert sorted((p.settings["train_mode"], p.settings["adapter_size"],
                 p.settings["learning_rate"], p.settings["seed"]) for p in long.points()) == \
      sorted((mode, size, second[(mode, size)], seed) for mode, size in rates
             for seed in (1, 2))
  assert {p.settings["num_train_epochs"] for p in long.points()} == {20}
  # A finished point and a failed one: --retry_failed runs the failed one again.
  long_sweep = sweep_lib.Sweep(long, study_results.sweep_dir(out, "methods_long", task))
  for point, status in zip(long_sweep.points, ("ok", "failed")):
    write_text(os.path.join(long_sweep.point_dir(point), runs_lib.RECORD_FILE),
           json.dumps({"point": point.name, "status": status, "vary": point.vary}))
  assert "methods_long/wordnet_relation: 12 points, 10 pending" in dry_run()
  assert "methods_long/wordnet_relation: 12 points, 11 pending" in dry_run("--retry_failed")
  epochs = grid_lib.Grid.from_json(study_results.study_grid(out, "epochs", task, *args))
  assert {p.settings["learning_rate"] for p in epochs.points()} == {second[("full", 0)]}
  with pytest.raises(ValueError, match="selected rates"):
    study_grids.part_grid("methods_long", study_grids.TASKS[task], *args)


def test_full_fine_tunings_epochs_wait_for_its_own_pending_points(tmp_path):
  """methods_long's pending points hold back full fine-tuning's epochs reading
  only where some are full fine-tuning's; any pending point of the epochs part
  (full fine-tuning only) does."""
  out, task = str(tmp_path), "wordnet_relation"
  grid = grid_lib.Grid.from_json({
      "fixed": {"task_name": "tsv"},
      "vary": {"train_mode/adapter_size": [["full", 0], ["adapters", 64]], "seed": [1, 2]}})
  points = grid.points(sweep_lib.DEFAULTS)

  def write(part, pending):
    write_text(os.path.join(study_results.sweep_dir(out, part, task), "results.json"),
               json.dumps({"grid": grid.to_json(), "pending": pending, "rows": []}))

  assert not study_results.full_by_epochs_pending(out, task)  # Nothing started.
  write("methods_long", [p.name for p in points if p.settings["train_mode"] == "adapters"])
  assert not study_results.full_by_epochs_pending(out, task)
  write("methods_long", [p.name for p in points if p.settings["seed"] == 2])
  assert study_results.full_by_epochs_pending(out, task)
  write("methods_long", [])
  write("epochs", ["e10-2"])
  assert study_results.full_by_epochs_pending(out, task)


def test_bracketing_rate_is_the_next_rate_past_an_edge_selection():
  grid = [3e-5, 1e-4, 3e-4]
  assert study_grids.bracketing_rate(3e-5, grid, grid) == 1e-5
  assert study_grids.bracketing_rate(3e-4, grid, grid) == 1e-3
  assert study_grids.bracketing_rate(1e-4, grid, grid) is None  # Bracketed.
  # Past the grid at most BRACKET_STEPS (2) rates: 3e-6 is the last.
  assert study_grids.bracketing_rate(1e-5, [1e-5] + grid, grid) == 3e-6
  assert study_grids.bracketing_rate(3e-6, [3e-6, 1e-5] + grid, grid) is None
  # Off the ladder (adapters' 6e-4): the next ladder value; exact literals,
  # since a point's name hashes its settings.
  assert study_grids.bracketing_rate(6e-4, [3e-4, 6e-4], [3e-4, 6e-4]) == 1e-3
  assert study_grids.bracketing_rate(0.03, [3e-3, 1e-2, 3e-2], [3e-3, 1e-2, 3e-2]) == 0.1


def test_the_edge_sentence_waits_for_a_methods_pending_points():
  """A method is named at the edge of its rates only once none of its points
  is pending: with seed 2 still to run, its selection may yet move."""
  grid = grid_lib.Grid.from_json({
      "fixed": {"task_name": "tsv"},
      "vary": {"train_mode/adapter_size": [["full", 0], ["adapters", 64]],
               "learning_rate": [1e-4, 3e-4], "seed": [1, 2]}})
  points = grid.points(sweep_lib.DEFAULTS)
  pending = [p.name for p in points
             if p.settings["train_mode"] == "adapters" and p.settings["seed"] == 2]
  finished = [p for p in points if p.name not in pending]
  methods = {"grid": grid.to_json(), "pending": pending, "rows": [
      {"method": runs_lib.method_name(p.settings["train_mode"], p.settings["adapter_size"]),
       "learning_rate": p.settings["learning_rate"]} for p in finished]}
  assert study_results.pending_methods(methods) == {"adapters_64"}
  selected = {"full": {"learning_rate": 3e-4}, "adapters_64": {"learning_rate": 3e-4}}
  assert study_page._at_the_edge(selected, methods) == [
      "full lr 0.0003 (the largest of 0.0001, 0.0003)"]
  methods["pending"] = []
  assert len(study_page._at_the_edge(selected, methods)) == 2


def test_the_methods_part_brackets_each_selected_rate(tmp_path):
  """Full fine-tuning best at its grid's smallest rate: the grid gains the next
  rate below, with every seed, once full fine-tuning's points have finished;
  again while the new rate wins, at most two past the grid. Selection waits for
  those points. A method with points still pending is not extended yet."""
  from experiments.points import tables
  out, task = str(tmp_path), "wordnet_relation"
  args = (out, task, "models/minilm", "data/wordnet")
  full_accuracy = {1e-5: 0.72, 3e-6: 0.73, 3e-5: 0.70, 1e-4: 0.65, 3e-4: 0.25}

  def finish(skip=()):
    """Records for the methods grid's pending points (but `skip`'s method)."""
    grid = study_results.methods_grid(*args)
    sweep = sweep_lib.Sweep(grid_lib.Grid.from_json(grid), study_results.sweep_dir(
        out, "methods", task))
    for p in sweep.pending():
      mode, size, rate = (p.settings[k] for k in ("train_mode", "adapter_size",
                                                   "learning_rate"))
      if mode in skip:
        continue
      if mode == "full":
        accuracy = full_accuracy[rate]
      else:  # Best at the grid's middle rate: bracketed.
        rates = sorted(g["learning_rate"] for g in study_grids.TABLE_METHODS
                       if [mode, size] in g["train_mode/adapter_size"])[0]
        accuracy = 0.6 if rate == sorted(rates)[1] else 0.5
      tables.write_json(os.path.join(sweep.point_dir(p), runs_lib.RECORD_FILE), {
          "point": p.name, "status": "ok", "vary": p.vary, "settings": p.settings,
          "train_mode": mode, "adapter_size": size, "metrics": {"eval_accuracy": accuracy},
          "method": runs_lib.method_name(mode, size)})
    return sweep

  def full_rates():
    grid = grid_lib.Grid.from_json(study_results.methods_grid(*args))
    return sorted({p.settings["learning_rate"] for p in grid.points()
                   if p.settings["train_mode"] == "full"})

  # The head's points pending, the rest finished: full fine-tuning gains 1e-5;
  # the head (best at its smallest finished rate) is not extended while it waits.
  finish(skip=("head",))
  assert full_rates() == [1e-5, 3e-5, 1e-4, 3e-4]
  assert study_results.selected_rates(*args) is None
  finish()
  assert full_rates() == [3e-6, 1e-5, 3e-5, 1e-4, 3e-4]  # 1e-5 won: one more.
  finish()
  # 3e-6 won too, but two rates past the grid is the most.
  assert full_rates() == [3e-6, 1e-5, 3e-5, 1e-4, 3e-4]
  rates = study_results.selected_rates(*args)
  assert rates[("full", 0)] == 3e-6 and rates[("head", 0)] == study_grids.HEAD_RATES[1]
  assert len(grid_lib.Grid.from_json(study_results.methods_grid(*args)).points()) == (
      (6 * 3 + 1) + 2) * 3


def test_the_rates_that_bracket_table_1_run_before_the_trade_off():
  """A sweep runs its grid in order: on the trade-off's task the bracketing
  rates (Table 1's claims) come right after Table 1's own points."""
  grid = grid_lib.Grid.from_json(study_grids.part_grid(
      "methods", study_grids.TASKS["wordnet_lexname"], "models/minilm", "data/wordnet",
      beyond={("full", 0): [1e-5]}))
  order = [(p.settings["train_mode"], p.settings["adapter_size"],
            p.settings["learning_rate"]) for p in grid.points()]
  table = {tuple(m) for g in study_grids.TABLE_METHODS for m in g["train_mode/adapter_size"]}
  bracketing = [i for i, point in enumerate(order) if point == ("full", 0, 1e-5)]
  trade_off = [i for i, (mode, size, _) in enumerate(order) if (mode, size) not in table]
  assert len(bracketing) == 3 and trade_off
  assert max(i for i, (mode, size, _) in enumerate(order)
             if (mode, size) in table) < min(trade_off)
  assert max(bracketing) < min(trade_off)
