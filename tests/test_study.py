"""experiments/study/ (command, grids, page): the grids and the page.

The grids are counted by hand from the paper's design; the page is written from a
study directory made here (results tables and eval_predictions.tsv files as
the sweep and run_classifier.py write them), so no model runs. The learning
rates it runs each method at (selection, bracketing): test_study_rates.py.
"""

import json
import os
import uuid

import pytest
import tensorflow as tf
from absl import flags

from experiments.points import grid as grid_lib
from experiments import multitask_comparison
from experiments.study import command as study
from experiments.study import grids as study_grids
from experiments.study import page as study_page
from experiments.study import results as study_results
from experiments import sweep as sweep_lib
from adapter_bert.runtime import machine
from study_files import JoinablePath, grid_points, write_predictions, write_text


def test_the_grids_are_the_papers_design():
  # Table 1's six methods, three learning rates each (adapters 64 a fourth,
  # below where they collapse), seeds 1-3, 3 epochs; the rates that bracket a
  # selection at the grid's edge come as the points finish (below).
  relation = grid_points("methods", "wordnet_relation")
  assert len(relation) == (6 * 3 + 1) * 3
  assert {p.settings["num_train_epochs"] for p in relation} == {3}
  assert {(p.settings["train_mode"], p.settings["adapter_size"]) for p in relation} == {
      ("adapters", 8), ("adapters", 64), ("full", 0), ("top_layers:3", 0),
      ("layer_norm", 0), ("head", 0)}
  # wordnet_lexname adds the trade-off: adapters 2..256 and top-K for K = 1..6.
  lexname = grid_points("methods", "wordnet_lexname")
  assert len(lexname) == ((6 * 3 + 1) + (6 * 3 + 1) + 5 * 3) * 3
  rates = {}
  for p in lexname:
    if p.settings["train_mode"] == "adapters":
      rates.setdefault(p.settings["adapter_size"], set()).add(p.settings["learning_rate"])
  assert sorted(rates) == [2, 4, 8, 16, 32, 64, 128, 256]
  # The rates fall with the width (Adam moves an adapter's output by about its
  # width times the rate): the paper's grid up to 16, then lower ones too.
  assert all(rates[m] == {3e-4, 1e-3, 3e-3} for m in (2, 4, 8, 16))
  assert rates[32] == rates[64] == {3e-4, 6e-4, 1e-3, 3e-3}
  assert rates[128] == rates[256] == {1e-4, 3e-4, 6e-4}
  assert sorted(p.settings["train_mode"] for p in lexname
                if p.settings["train_mode"].startswith("top_layers")
                and p.settings["seed"] == 1 and p.settings["learning_rate"] == 1e-4) == [
                    f"top_layers:{k}" for k in range(1, 7)]
  # Full fine-tuning at 6 and 10 epochs, at the rate the methods part selected
  # (3 epochs are the methods part's, 20 methods_long's).
  epochs = grid_lib.Grid.from_json(study_grids.part_grid(
      "epochs", study_grids.TASKS["wordnet_pos"], "models/minilm", "data/wordnet",
      rates={("full", 0): 3e-5, ("adapters", 8): 1e-3})).points()
  assert sorted((p.settings["num_train_epochs"], p.settings["seed"]) for p in epochs) == [
      (e, s) for e in (6, 10) for s in (1, 2, 3)]
  assert {(p.settings["train_mode"], p.settings["learning_rate"]) for p in epochs} == {
      ("full", 3e-5)}
  # Figure 2: four sizes from 100 up, the small ones trained for many epochs.
  sizes = grid_points("data_size", "wordnet_lexname")
  assert len(sizes) == 4 * 3 * (2 + 2)
  epochs = {p.settings["train_examples"]: p.settings["train_steps"] * 32
            / p.settings["train_examples"] for p in sizes}
  assert sorted(epochs) == [100, 250, 1000, 4000] and epochs[100] == 64 and epochs[4000] == 6
  # Figure 6: nine initial scales from 1e-4 to 1.
  scales = sorted({p.settings["adapter_init_scale"] for p in grid_points("init_scale",
                                                                     "wordnet_lexname")})
  assert len(scales) == 9 and scales[0] == 1e-4 and scales[-1] == 1.0
  # Every run writes its dev predictions, for the bootstrap.
  assert all(p.settings["eval_predictions"] is True for p in relation)
  pair = grid_points("methods", "wordnet_example")[0].settings
  assert (pair["text_a_column"], pair["text_b_column"]) == ("gloss", "example")
  # Every part trains on length-grouped batches but on wordnet_relation, which
  # keeps the random ones of its first runs, with their points' identities (a
  # hash of all settings) as docs/study_first_runs/ names them, so that its
  # reruns are checked against them.
  for task, parts in (("wordnet_example", ("methods",)), ("wordnet_pos", ("methods",)),
                      ("wordnet_lexname", ("methods", "data_size", "init_scale"))):
    assert all(p.settings["group_by_length"] is True
               for part in parts for p in grid_points(part, task)), task
  for part in ("methods", "stability"):
    assert not any("group_by_length" in p.settings
                   for p in grid_points(part, "wordnet_relation"))
  names = {p.name for p in grid_lib.Grid.from_json(study_grids.part_grid(
      "methods", study_grids.TASKS["wordnet_relation"], "models/minilm",
      "data/wordnet")).points(sweep_lib.DEFAULTS)}  # As the sweep names them.
  with open(os.path.join(os.path.dirname(__file__), "..", "docs", "study_first_runs",
                         "methods_wordnet_relation_results.csv")) as f:
    first_runs = {line.split(",")[0] for line in f.read().splitlines()[1:]}
  assert len(first_runs) == 57 and names == first_runs


def test_table_1_says_which_tasks_trained_on_length_grouped_batches():
  assert study_page._batches_note(["wordnet_relation"]) == ""
  assert study_page._batches_note(["wordnet_pos", "wordnet_example", "wordnet_relation"]) == (
      " Every run on wordnet_pos, wordnet_example, of every method and part, trains on "
      "batches of examples of similar length (run_classifier.py --group_by_length: about "
      "twice the training steps a second); every run on wordnet_relation on random batches, "
      "as its first runs had them.")


def test_a_sitting_is_recorded_only_where_it_had_points_to_run(tmp_path, monkeypatch):
  """sittings.json (the page's list of sittings) keeps the sittings that ran
  something: one that found every point, or every multitask run, done ran none."""
  class FakeSweep:  # init_scale's points are pending, data_size's all done.
    def __init__(self, grid, directory, **unused):
      self.points, self.directory = grid.points(), directory

    def pending(self):
      return self.points if "init_scale" in self.directory else []

    def run(self):
      return {}

  monkeypatch.setattr(study.sweep_lib, "Sweep", FakeSweep)
  monkeypatch.setattr(study.multitask_comparison, "main", lambda argv, fv, **callbacks: None)
  monkeypatch.setattr(study, "report", lambda *args: None)
  monkeypatch.setattr(machine, "cpu_line", lambda: "a CPU")
  out = tmp_path / "out"
  # lr-0.001's three HyperFormer++ runs have finished; lr-0.0001's have not.
  for seed in (1, 2, 3):
    [(run_dir, _)] = multitask_comparison.run_dirs(str(out / "multitask" / "lr-0.001"),
                                                   "hyperformer", seed)
    write_text(os.path.join(run_dir, multitask_comparison.DONE_FILE), json.dumps(
        {"status": "ok", "wall_seconds": 1, "metrics": {"global_step": 1}}))

  def sitting(*parts):
    fv = flags.FlagValues()
    study.define_flags(fv)
    fv(["study", f"--output_dir={out}", f"--model_dir={tmp_path}", f"--data_root={tmp_path}",
        f"--page={tmp_path / 'page.md'}", "--record_dir=", *parts])
    assert study.main([], fv) == 0
    path = out / study_results.SITTINGS_FILE
    recorded = json.loads(path.read_text()) if path.exists() else []
    if path.exists():
      path.unlink()
    return recorded

  assert sitting("--parts=data_size") == []
  assert sitting("--parts=multitask", "--multitask_settings=lr-0.001") == []
  [recorded] = sitting("--parts=init_scale")
  assert recorded["machine"] == "a CPU"
  assert len(sitting("--parts=multitask", "--multitask_settings=lr-0.001,lr-0.0001")) == 1


# Under the claims, while a task's 20-epoch runs (methods_long) are not all done.
NOT_SELECTED_NOTE = (
    "On wordnet_relation Table 1's epochs are not selected yet (the methods_long part has not "
    "finished there): its cells that do not say \"20 ep\" are at 3 epochs, and a claim whose "
    "two methods have not both finished 20 epochs there compares both at 3.")


def _lines(text: str, prefix: str) -> list:
  return [line for line in text.splitlines() if line.startswith(prefix)]


@pytest.mark.parametrize("file_system", ["local", "ram"])
def test_results_page_from_a_study_directory(tmp_path, file_system, monkeypatch):
  """Two methods, two seeds, on a 100-example dev set; the page's numbers by hand.

  Also with every path on ram:// (as gs:// on a Colab TPU): nothing is written
  to the local disk then.
  """
  monkeypatch.chdir(tmp_path)
  monkeypatch.setattr(machine, "cpu_line", lambda: "AMD EPYC, 2 CPUs, avx512f, bfloat16 units")
  local = tmp_path
  if file_system == "ram":
    tmp_path = JoinablePath(f"ram://study-{uuid.uuid4().hex[:8]}")
  data = tmp_path / "data" / "wordnet_relation"
  labels = ["a", "b"] * 50
  write_text(str(data / "train.tsv"), "word_a\tword_b\tlabel\nx\ty\ta\nx\tz\tb\n")
  write_text(str(data / "dev.tsv"), "word_a\tword_b\tlabel\n"
         + "".join(f"w{i}\tv{i}\t{l}\n" for i, l in enumerate(labels)))
  out = tmp_path / "study"
  sweep = out / "methods" / "wordnet_relation"
  # How many of the 100 dev examples each run gets right.
  right = {("full", 0, 1e-4, 1): 90, ("full", 0, 1e-4, 2): 80,
           ("full", 0, 3e-5, 1): 50, ("full", 0, 3e-5, 2): 50,
           ("adapters", 64, 1e-3, 1): 80, ("adapters", 64, 1e-3, 2): 80,
           # A trade-off method: not in Table 1, nor run for 20 epochs.
           ("adapters", 2, 1e-3, 1): 60, ("adapters", 2, 1e-3, 2): 60}
  rows = []
  for (mode, size, lr, seed), k in right.items():
    point = f"{mode}-{size}-{lr}-{seed}"
    write_predictions(sweep / "runs" / point, labels, k)
    rows.append({"point": point, "status": "ok", "train_mode": mode, "adapter_size": size,
                 "method": "full" if mode == "full" else f"adapters_{size}",
                 "learning_rate": lr, "num_train_epochs": 3, "seed": seed,
                 "output_dir": f"runs/{point}", "eval_accuracy": k / 100,
                 "eval_loss": 1.0 - k / 100, "wall_seconds": 1800})
  fixed = {"data_dir": str(data), "text_a_column": "word_a", "text_b_column": "word_b",
           "label_column": "label"}
  write_text(str(sweep / "results.csv"), "point,status\n")
  write_text(str(sweep / "results.json"), json.dumps({
      "rows": rows, "pending": ["one-left"], "grid": {"fixed": fixed},
      "varied_keys": ["train_mode", "adapter_size", "learning_rate", "num_train_epochs",
                      "seed"]}))
  study.record_sitting(str(out), "python -m experiments.study --seeds=1,2",
                       "2026-11-24T20:00:00")
  page = str(tmp_path / "docs" / "study.md")
  text = study_page.report(str(out), page, "python -m experiments.study", bootstrap_samples=500)
  # The sitting records the CPU its points ran on; the page's head says the one
  # it was written on.
  sitting = _lines(text, "- `python -m experiments.study --")
  assert len(sitting) == 1 and sitting[0].startswith(
      "- `python -m experiments.study --seeds=1,2`: 2026-11-24T20:00:00 to "), sitting
  assert sitting[0].endswith(", AMD EPYC, 2 CPUs, avx512f, bfloat16 units"), sitting
  [written_by] = _lines(text, "Written by `")  # In the appendix, with the sittings.
  assert "AMD EPYC, 2 CPUs, avx512f, bfloat16 units (" in written_by
  with tf.io.gfile.GFile(page) as f:
    assert f.read() == text
  # Full fine-tuning's selected 1e-4 is the largest it tried: the best may lie
  # above. Adapters 64 tried one rate only.
  assert ("At the edge of the learning rates tried, so the best rate may lie beyond it: "
          "wordnet_relation: full lr 0.0001 (the largest of 3e-05, 0.0001).\n") in text
  assert ("| methods | wordnet_relation | 8 | 0 | 1 | 4.00 | [methods_wordnet_relation_"
          "results.csv](study/methods_wordnet_relation_results.csv) |") in text
  with tf.io.gfile.GFile(str(tmp_path / "docs" / "study" /
                             "methods_wordnet_relation_results.csv")) as f:
    assert f.read() == "point,status\n"
  # full: 1e-4 selected (mean 0.85 over seeds, against 0.5 at 3e-5).
  # One point pending: the column says how far the task's sweep is.
  assert "| method | wordnet_relation (8 of 9 runs; 20 epochs tried by 0 of 2 methods) |" in text
  assert "| full | 0.850 ± 0.071 (2) |" in text
  assert "| adapters_64 | 0.800 ± 0.000 (2) |" in text
  assert "full lr 0.0001, 3 epochs" in text
  claim = _lines(text, "| adapters_64 within 1 point")
  # 0.80 - 0.85 = -5 points: more than 1 point below, but 100 examples and
  # 2 seeds leave the interval wide.
  assert len(claim) == 1 and "| 1 | -5.00 | [" in claim[0], claim
  cells = claim[0].split(" | ")
  low, high = (float(v) for v in cells[4].strip("[]").split(", "))
  assert low < -5.0 < high and cells[5].strip(" |") in ("fails", "undecided")
  assert "| head more than 1 point below full |" in text and "| 0 | | | pending |" in text
  assert NOT_SELECTED_NOTE in text
  assert "## Epochs" not in text  # Not run.
  assert "## What 20 epochs add" not in text
  # The cost table lists every sweep of the whole study, counted as in
  # test_the_grids_are_the_papers_design, none finished in this directory.
  assert "| methods | wordnet_relation | 57 | 0 | 0.00 | 57 | no point has finished |" in text
  assert "| init_scale | wordnet_lexname | 27 | 0 | 0.00 | 27 |" in text
  # methods_long's cost is estimated before its rates are selected.
  assert "| methods_long | wordnet_relation | 18 | 0 | 0.00 | 18 |" in text

  # The epochs part: full fine-tuning at its selected 1e-4 for 6 and 10
  # epochs, right on 95 and 100 of the 100 examples. 10 minus 3 (the methods
  # part's 90 and 80) is +15 points, far outside what resampling 100 examples
  # gives: still rising after 3.
  epochs = out / "epochs" / "wordnet_relation"
  rows = []
  for (num_epochs, seed), k in {(6, 1): 95, (6, 2): 95, (10, 1): 100, (10, 2): 100}.items():
    point = f"e{num_epochs}-{seed}"
    write_predictions(epochs / "runs" / point, labels, k)
    rows.append({"point": point, "status": "ok", "train_mode": "full", "adapter_size": 0,
                 "method": "full", "num_train_epochs": num_epochs, "seed": seed,
                 "eval_accuracy": k / 100, "eval_loss": 0.5, "wall_seconds": 60})
  write_text(str(epochs / "results.csv"), "point,status\n")

  def write_epochs(epochs_rows, pending):
    write_text(str(epochs / "results.json"), json.dumps({
        "rows": epochs_rows, "pending": pending,
        "grid": {"fixed": dict(fixed, learning_rate=1e-4)},
        "varied_keys": ["num_train_epochs", "seed"]}))

  # A sitting that has run 6 epochs only: +10 points so far, but the reading
  # waits for the 10-epoch points, which may yet turn it.
  write_epochs([r for r in rows if r["num_train_epochs"] == 6], ["e10-1", "e10-2"])
  text = study_page.report(str(out), page, "python -m experiments.study", bootstrap_samples=500)
  line = _lines(text, "| wordnet_relation | 0.0001 |")
  assert len(line) == 1 and line[0].endswith(" (6 ep) | pending | pending |"), line
  assert "has not converged" not in text
  write_epochs(rows, [])
  text = study_page.report(str(out), page, "python -m experiments.study", bootstrap_samples=500)
  line = _lines(text, "| wordnet_relation | 0.0001 |")
  assert len(line) == 1, text
  assert line[0].startswith("| wordnet_relation | 0.0001 | 0.850 ± 0.071 (2) | 0.950 ± 0.000 (2) "
                            "| 1.000 ± 0.000 (2) | pending | +15.00 [+"), line
  assert line[0].endswith(" (10 ep) | pending | still rising after 3 |"), line
  # Then, while methods_long has not run, Table 1's verdicts are said to hold
  # for 3 epochs only.
  assert ("On wordnet_relation full fine-tuning has not converged by 3 epochs, which is why "
          "Table 1 also runs every method 20 epochs") in text
  assert ("On wordnet_relation that part has not finished, so Table 1 and the claims above "
          "compare runs stopped early there: their verdicts hold for 3 epochs only.") in text

  # methods_long: each selected rate 20 epochs. Full fine-tuning gains (all
  # 100 in both seeds), adapters 64 lose (70): Table 1 keeps full's 20 epochs
  # and adapters' 3, and the claims compare those runs: 0.8 - 1.0. Full
  # fine-tuning gains nothing from 10 to 20 epochs: it stopped by 10.
  long = out / "methods_long" / "wordnet_relation"
  rows = []
  for (mode, size, lr, seed), k in {("full", 0, 1e-4, 1): 100, ("full", 0, 1e-4, 2): 100,
                                    ("adapters", 64, 1e-3, 1): 70,
                                    ("adapters", 64, 1e-3, 2): 70}.items():
    point = f"long-{mode}-{seed}"
    write_predictions(long / "runs" / point, labels, k)
    rows.append({"point": point, "status": "ok", "train_mode": mode, "adapter_size": size,
                 "method": "full" if mode == "full" else f"adapters_{size}",
                 "learning_rate": lr, "seed": seed, "eval_accuracy": k / 100,
                 "eval_loss": 0.5, "wall_seconds": 600})
  write_text(str(long / "results.csv"), "point,status\n")

  def write_long(long_rows):
    write_text(str(long / "results.json"), json.dumps({
        "rows": long_rows, "pending": [], "grid": {"fixed": fixed},
        "varied_keys": ["seed", "train_mode", "adapter_size", "learning_rate"]}))

  # A sitting with seed 1 only: fewer seeds than at 3 epochs, so no method's
  # epochs are selected yet.
  write_long([r for r in rows if r["seed"] == 1])
  text = study_page.report(str(out), page, "python -m experiments.study", bootstrap_samples=500)
  assert "| method | wordnet_relation (8 of 9 runs; 20 epochs tried by 0 of 2 methods) |" in text
  assert "| full | 0.850 ± 0.071 (2) |" in text
  # Full fine-tuning's two seeds done, the adapters' not yet: its cell is at 20
  # epochs, the adapters' at 3, and the claim compares both at 3 (full's 20
  # against the adapters' 3 would read -20, a budget gap, not a method's), as
  # the note says.
  write_long([r for r in rows if r["train_mode"] == "full"])
  text = study_page.report(str(out), page, "python -m experiments.study", bootstrap_samples=500)
  assert "| method | wordnet_relation (8 of 9 runs; 20 epochs tried by 1 of 2 methods) |" in text
  assert "| full | 1.000 ± 0.000 (2), 20 ep |" in text
  assert "| adapters_64 | 0.800 ± 0.000 (2) |" in text
  claim = _lines(text, "| adapters_64 within 1 point")
  assert len(claim) == 1 and "| 1 | -5.00 | [" in claim[0], claim
  assert NOT_SELECTED_NOTE in text
  # What 20 epochs add: full fine-tuning 1.0 - 0.85; the adapters' wait.
  [full_gain] = _lines(text, "| full | +15.00 [")
  assert full_gain.endswith("] (kept) |"), full_gain
  assert "| adapters_64 | pending |" in text
  write_long(rows)
  text = study_page.report(str(out), page, "python -m experiments.study", bootstrap_samples=500)
  assert "| method | wordnet_relation (8 of 9 runs) |" in text
  assert "| full | 1.000 ± 0.000 (2), 20 ep |" in text
  assert "| adapters_64 | 0.800 ± 0.000 (2) |" in text
  assert "full lr 0.0001, 20 epochs" in text and "adapters_64 lr 0.001, 3 epochs" in text
  claim = _lines(text, "| adapters_64 within 1 point")
  assert len(claim) == 1 and "| 1 | -20.00 | [" in claim[0], claim
  # The last column compares both at 3 epochs: 0.80 - 0.85, as before methods_long.
  at_three = claim[0].split(" | ")[-1].strip(" |")
  assert at_three.startswith("-5.00 [") and at_three.endswith(("], fails", "], undecided")), \
      at_three
  # Adapters 64 lose 10 points at 20 epochs (0.70 - 0.80), so Table 1 keeps their 3.
  [adapters_gain] = _lines(text, "| adapters_64 | -10.00 [")
  low, high = (float(v) for v in adapters_gain.split("[")[1].split("]")[0].split(", "))
  assert low < -10.0 < high and adapters_gain.endswith("] |"), adapters_gain
  assert "| full | +15.00 [" in text
  # Every Table 1 method has tried both epochs (adapters 2 are not in it).
  assert "their verdicts hold for 3 epochs only" not in text
  assert "Table 1's epochs are not selected yet" not in text
  line = _lines(text, "| wordnet_relation | 0.0001 |")
  assert "| 1.000 ± 0.000 (2) | 1.000 ± 0.000 (2) | +15.00 [+" in line[0], line
  assert line[0].endswith(" (10 ep) | +0.00 [+0.00, +0.00] | stopped by 10 |"), line
  if file_system == "ram":
    assert os.listdir(local) == []


def test_a_sitting_runs_the_points_its_grid_gains(tmp_path, monkeypatch):
  """The methods part's grid grows as its points finish: the sitting runs it
  again for the new points, and stops where no point is new (one left pending,
  stopped or failed, is not run again and again)."""
  base = {"fixed": {}, "vary": {"seed": [1, 2]}}
  grown = {"fixed": {}, "vary": {"seed": [1, 2, 3]}}
  grids = iter([base, grown, grown])
  ran, finished = [], set()

  class FakeSweep:
    def __init__(self, grid, directory, **kwargs):
      self.points = grid.points()

    def pending(self):
      return [p for p in self.points if p.name not in finished]

    def run(self):
      names = [p.name for p in self.pending()]
      ran.append([n.rsplit("-", 1)[0] for n in names])
      finished.update(n for n in names if not n.startswith("seed-2"))  # Seed 2 never ends.

  monkeypatch.setattr(study, "study_grid", lambda *args: next(grids))
  monkeypatch.setattr(study.sweep_lib, "Sweep", FakeSweep)
  monkeypatch.setattr(study, "_after_point", lambda *args: None)
  fv = flags.FlagValues()
  study.define_flags(fv)
  fv(["study", f"--output_dir={tmp_path}"])
  study._run_sweep(fv, "cmd", "2026-11-26T00:00:00", "methods", "wordnet_relation", [1, 2, 3])
  assert ran == [["seed-1", "seed-2"], ["seed-2", "seed-3"]]


def test_a_sittings_command_names_no_path_of_its_machine():
  """The record and the page show a sitting's absolute paths as its flags' names."""
  assert study.portable_args(["--output_dir=/data/runs/study", "--page", "/x/page.md",
                              "--parts=methods", "--record_dir=docs/study/record"]) == [
      "--output_dir=OUTPUT_DIR", "--page", "PAGE", "--parts=methods",
      "--record_dir=docs/study/record"]


def test_the_committed_page_opens_with_the_claims_and_ends_with_the_sittings():
  with open(os.path.join(os.path.dirname(__file__), "..", "docs", "study.md")) as f:
    headings = [l for l in f.read().splitlines() if l.startswith("## ")]
  assert headings[0] == "## The claims"
  assert headings[1].startswith("## Table 1")
  assert headings[-1] == "## Appendix: the sittings"
