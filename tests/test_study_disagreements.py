"""experiments/study/collapse.py and disagreements.py: the stability part's grid, a
run's collapse read from its TensorBoard loss, and the page's section on the
runs that collapsed, from a study directory made here (no model runs)."""

import json
import math
import os

import pytest

from experiments.study import collapse
from experiments.study import disagreements as study_disagreements
from experiments.study import page as study_page
from study_files import grid_points, write_run, write_text


def test_stability_grid_changes_one_factor_at_a_time():
  points = [p.settings for p in grid_points("stability", "wordnet_relation")]
  # The 4 collapsed (rate, seed) points with the long warm-up, seed 2 at 1e-3
  # replayed, the 4 with the small init, adapters 256 at 1e-3 with seeds 1-3,
  # seeds 4-6 at 1e-3 with either warm-up, 6e-4 with seeds 1-3.
  assert len(points) == 4 + 1 + 4 + 3 + 3 * 2 + 3 == 21
  assert {(p["train_mode"], p["num_train_epochs"]) for p in points} == {("adapters", 3)}
  changed = {}
  for p in points:
    factors = tuple(k for k, table1 in (("warmup_proportion", 0.1), ("adapter_size", 64),
                                        ("adapter_init_scale", 1e-3)) if p[k] != table1)
    assert len(factors) <= 1, p
    changed.setdefault(factors, []).append((p["learning_rate"], p["seed"]))
  collapsed = [(3e-3, 1), (3e-3, 2), (3e-3, 3), (1e-3, 2)]
  assert changed[("warmup_proportion",)] == collapsed + [(1e-3, s) for s in (4, 5, 6)]
  assert changed[("adapter_init_scale",)] == collapsed
  assert changed[("adapter_size",)] == [(1e-3, s) for s in (1, 2, 3)]
  assert changed[()] == [(1e-3, s) for s in (2, 4, 5, 6)] + [(6e-4, s) for s in (1, 2, 3)]
  assert {p["adapter_size"] for p in points} == {64, 256}
  assert {p["warmup_proportion"] for p in points} == {0.1, 0.3}
  assert {p["adapter_init_scale"] for p in points} == {1e-3, 1e-4}


def test_optimizer_grid_is_table_1s_adapters_64_with_bias_correction():
  """Each point is a Table 1 point of adapters 64 with one setting changed: the optimizer."""
  for task in ("wordnet_relation", "wordnet_pos"):
    table1 = {(p.settings["learning_rate"], p.settings["seed"]): p.settings
              for p in grid_points("methods", task)
              if p.settings["train_mode"] == "adapters" and p.settings["adapter_size"] == 64}
    points = [p.settings for p in grid_points("optimizer", task)]
    assert len(points) == 5 * 3
    for p in points:  # 1e-2 is beyond Table 1's rates: as its 3e-3 point there.
      table1_point = table1[min(p["learning_rate"], 3e-3), p["seed"]]
      assert p == dict(table1_point, optimizer="adamw", learning_rate=p["learning_rate"]), p
    assert sorted({p["learning_rate"] for p in points}) == [3e-4, 6e-4, 1e-3, 3e-3, 1e-2]


def test_collapse_timeline_from_a_runs_loss(tmp_path):
  ln2 = math.log(2)
  # Falls to 0.6 by step 20, is back at ln 2 (within 0.02) from step 40 on.
  write_run(str(tmp_path / "fell"), [(1, 0.69), (10, 0.65), (20, 0.6), (30, 0.8),
                                (40, ln2 + 0.015), (50, ln2 - 0.01), (60, ln2)])
  line = collapse.timeline(str(tmp_path / "fell"))
  assert (line.num_labels, line.warmup_steps, line.lowest_step, line.chance_from) == (
      2, 3, 20, 40)
  assert line.lowest_loss == pytest.approx(0.6)
  assert line.lowest_learning_rate == pytest.approx(20 / 40000)
  write_run(str(tmp_path / "learned"), [(1, 0.69), (10, 0.5), (20, 0.3)])
  assert collapse.timeline(str(tmp_path / "learned")).chance_from is None
  # Collapsed: dev loss within 0.01 of ln 2 and one label for at least 95% of
  # the dev examples (19 of 20). A weak learner at the same loss that answers
  # both labels (the head alone on the pair task: 0.68 against ln 2) has not.
  one_label, split = str(tmp_path / "one_label"), str(tmp_path / "split")
  write_text(os.path.join(one_label, "eval_predictions.tsv"),
             "0.51\t0.49\n" * 19 + "0.49\t0.51\n")
  write_text(os.path.join(split, "eval_predictions.tsv"),
             "0.51\t0.49\n" * 18 + "0.49\t0.51\n" * 2)
  assert collapse.collapsed(ln2 - 0.005, one_label, 2)
  assert not collapse.collapsed(ln2 - 0.02, one_label, 2)
  assert not collapse.collapsed(ln2 - 0.005, split, 2)
  assert not collapse.collapsed(None, one_label, 2)


def test_disagreements_section_counts_the_collapses(tmp_path, monkeypatch):
  """Full fine-tuning and adapters 64 in Table 1 (adapters' seed 2 collapsed),
  then the stability part: seed 2 with the long warm-up, and replayed."""
  monkeypatch.chdir(tmp_path)
  data = tmp_path / "data" / "wordnet_relation"
  labels = ["a", "b"] * 5
  write_text(str(data / "train.tsv"), "word_a\tword_b\tlabel\nx\ty\ta\nx\tz\tb\n")
  write_text(str(data / "dev.tsv"), "word_a\tword_b\tlabel\n"
         + "".join(f"w{i}\tv{i}\t{l}\n" for i, l in enumerate(labels)))
  fixed = {"data_dir": str(data), "text_a_column": "word_a", "text_b_column": "word_b",
           "label_column": "label"}
  out = tmp_path / "study"
  ln2 = math.log(2)
  learned = [(1, 0.69), (20, 0.4)]
  fell = [(1, 0.69), (20, 0.6), (40, ln2)]

  def sweep(part, runs):
    rows = []
    for i, (settings, right, eval_loss, losses) in enumerate(runs):
      point = f"p{i}"
      run_dir = str(out / part / "wordnet_relation" / "runs" / point)
      # A collapsed run: 0.5 for both labels, argmax the first: right on the "a"s.
      write_text(os.path.join(run_dir, "eval_predictions.tsv"), "0.5\t0.5\n" * 10
             if losses is fell else "".join(
                 ("0.9\t0.1\n" if (l == "a") == (j < right) else "0.1\t0.9\n")
                 for j, l in enumerate(labels)))
      write_run(run_dir, losses)
      rows.append(dict(settings, point=point, status="ok", output_dir=f"runs/{point}",
                       eval_accuracy=right / 10, eval_loss=eval_loss, wall_seconds=60,
                       num_train_epochs=3))
    write_text(str(out / part / "wordnet_relation" / "results.csv"), "point\n")
    write_text(str(out / part / "wordnet_relation" / "results.json"), json.dumps({
        "rows": rows, "pending": [], "grid": {"fixed": fixed},
        "varied_keys": sorted({k for r in runs for k in r[0]})}))

  adapters = {"train_mode": "adapters", "adapter_size": 64, "method": "adapters_64",
              "learning_rate": 1e-3}
  sweep("methods", [
      ({"train_mode": "full", "adapter_size": 0, "method": "full", "learning_rate": 1e-4,
        "seed": 1}, 9, 0.3, learned),
      ({"train_mode": "full", "adapter_size": 0, "method": "full", "learning_rate": 1e-4,
        "seed": 2}, 8, 0.3, learned),
      (dict(adapters, seed=1), 8, 0.4, learned),
      (dict(adapters, seed=2), 5, ln2, fell)])
  stability = dict(adapters, adapter_init_scale=1e-3)
  sweep("stability", [
      (dict(stability, seed=2, warmup_proportion=0.3), 7, 0.5, learned),
      (dict(stability, seed=2, warmup_proportion=0.1), 5, ln2 - 0.001, fell)])
  text = study_page.report(str(out), str(tmp_path / "study.md"), "cmd", bootstrap_samples=200)
  section = text[text.index("## Disagreements with the paper"):]
  assert ("| wordnet_relation | adapters_64 | 0.001 | 1 of 2 | 2 | 0.800 (1), 0.500 (2) |"
          in section), section
  # Table 1's seed 2: lowest loss 0.6 at step 20 (learning rate 5e-4 there),
  # at ln 2 from step 40; warm-up 3 steps. Runs that did not collapse: no turn.
  # The spread of the predictions: a collapsed run answers 0.5/0.5 for every
  # example (0); the others 0.9 or 0.1 for "a": 5 and 5 times with 8 right (std
  # 0.8 * sqrt(0.5 * 0.5) = 0.4), 6 and 4 times with 7 (0.8 * sqrt(0.24) = 0.39).
  runs = [l for l in section.splitlines() if l.startswith("| `")]
  assert runs == [
      "| `methods/wordnet_relation/runs/p2` | 64 | 0.001 | 1 | 0.1 | 0.001 | 0.800 | 0.4 | "
      "no |  |  |  | 3 |",
      "| `methods/wordnet_relation/runs/p3` | 64 | 0.001 | 2 | 0.1 | 0.001 | 0.500 | 0 | "
      "yes | 0.600 (20) | 0.0005 | 40 | 3 |",
      "| `stability/wordnet_relation/runs/p1` | 64 | 0.001 | 2 | 0.1 | 0.001 | 0.500 | 0 | "
      "yes | 0.600 (20) | 0.0005 | 40 | 3 |",
      "| `stability/wordnet_relation/runs/p0` | 64 | 0.001 | 2 | 0.3 | 0.001 | 0.700 | 0.39 | "
      "no |  |  |  | 3 |"], runs
  # Seeds 1 and 2 (the replay counted once) against full's 0.85: 0.65 - 0.85.
  assert "| 64 | 0.001 | 0.1 | 0.001 | 1, 2 | 1 of 2 | 0.650 | 0.800 (1) | -20.00 | [" in section
  assert "| 64 | 0.001 | 0.3 | 0.001 | 2 | 0 of 1 | 0.700 | 0.700 (1) | -15.00 | [" in section
  assert ("- Replayed unchanged, seed 2 at 0.001 reached dev accuracy 0.500 (Table 1's "
          "run: 0.500).") in section
  assert ("- The collapsed points with warm-up 0.3: 0 of 1 collapsed (adapters 64 as in "
          "Table 1 at the same points: 1 of 1).") in section
  assert "- Adapters 64 at 1e-3 with warm-up 0.1, seeds 1, 2: 1 of 2 collapsed." in section
  assert ("- With warm-up 0.1, the collapsed runs' training loss was lowest at learning "
          "rates 0.0005 to 0.0005, and rose to ln(labels) from there.") in section
  # The stability part has nothing pending: its reading follows.
  assert study_disagreements.STABILITY_READING in section


def test_optimizer_section_counts_the_collapses_by_optimizer(tmp_path, monkeypatch):
  """Table 1's adapters 64 (the original's optimizer: seed 2 collapsed at 1e-3,
  both seeds at 3e-3) beside the optimizer part's bias-corrected runs (only seed
  1 at 3e-3 collapsed); wordnet_pos has no optimizer part yet: not shown."""
  monkeypatch.chdir(tmp_path)
  data = tmp_path / "data" / "wordnet_relation"
  labels = ["a", "b"] * 5
  write_text(str(data / "train.tsv"), "word_a\tword_b\tlabel\nx\ty\ta\nx\tz\tb\n")
  write_text(str(data / "dev.tsv"), "word_a\tword_b\tlabel\n"
             + "".join(f"w{i}\tv{i}\t{l}\n" for i, l in enumerate(labels)))
  fixed = {"data_dir": str(data), "text_a_column": "word_a", "text_b_column": "word_b",
           "label_column": "label"}
  out = tmp_path / "study"
  ln2 = math.log(2)

  def sweep(part, runs):  # runs: (rate, seed, right, collapsed)
    rows = []
    for i, (rate, seed, right, fell) in enumerate(runs):
      run_dir = str(out / part / "wordnet_relation" / "runs" / f"p{i}")
      write_text(os.path.join(run_dir, "eval_predictions.tsv"), "0.5\t0.5\n" * 10 if fell
                 else "".join(("0.9\t0.1\n" if (l == "a") == (j < right) else "0.1\t0.9\n")
                              for j, l in enumerate(labels)))
      rows.append({"point": f"p{i}", "status": "ok", "output_dir": f"runs/p{i}",
                   "train_mode": "adapters", "adapter_size": 64, "method": "adapters_64",
                   "learning_rate": rate, "seed": seed, "eval_accuracy": right / 10,
                   "eval_loss": ln2 if fell else 0.4, "wall_seconds": 60,
                   "num_train_epochs": 3})
    # A method other than adapters 64 is not the section's.
    rows.append(dict(rows[0], method="adapters_8", adapter_size=8, eval_accuracy=0.1))
    write_text(str(out / part / "wordnet_relation" / "results.csv"), "point\n")
    write_text(str(out / part / "wordnet_relation" / "results.json"), json.dumps(
        {"rows": rows, "pending": [], "grid": {"fixed": fixed},
         "varied_keys": ["learning_rate", "seed"]}))

  sweep("methods", [(3e-4, 1, 7, False), (3e-4, 2, 6, False), (1e-3, 1, 9, False),
                    (1e-3, 2, 5, True), (3e-3, 1, 5, True), (3e-3, 2, 5, True)])
  sweep("optimizer", [(3e-4, 1, 6, False), (3e-4, 2, 6, False), (1e-3, 2, 8, False),
                      (1e-3, 1, 8, False), (3e-3, 1, 5, True), (3e-3, 2, 9, False),
                      (1e-2, 1, 5, True)])
  section = study_disagreements.optimizer_section(str(out))
  assert section[0] == "## Where adapters collapse, by optimizer"
  assert [l for l in section if l.startswith("| wordnet")] == [
      "| wordnet_relation | 0.0003 | 0 of 2 | 0.650 | 0 of 2 | 0.600 |",
      "| wordnet_relation | 0.001 | 1 of 2 (2) | 0.700 | 0 of 2 | 0.800 |",
      "| wordnet_relation | 0.003 | 2 of 2 (1, 2) | 0.500 | 1 of 2 (1) | 0.700 |",
      "| wordnet_relation | 0.01 | not run |  | 1 of 1 (1) | 0.500 |"]
  assert [l for l in section if l.startswith("- ")] == [
      "- With the original's optimizer (the default): no run collapsed at rates up to "
      "0.0003; runs collapsed at 0.001 (1 of 2), 0.003 (2 of 2) (counted over the tasks "
      "and seeds above).",
      "- With --optimizer=adamw: no run collapsed at rates up to 0.001; runs collapsed at "
      "0.003 (1 of 2), 0.01 (1 of 1) (counted over the tasks and seeds above)."]
  # And on the page, after the disagreements.
  text = study_page.report(str(out), str(tmp_path / "study.md"), "cmd", bootstrap_samples=50)
  assert "\n".join(section) in text
