"""experiments/study/multitask.py: the results page's multi-task part, from a study
directory made here (the comparison's tables, run records, TensorBoard losses and
eval_predictions.tsv files as experiments.multitask_comparison leaves them), so no
model runs; the claims' differences are hand-computed."""

import json

from absl import flags

from experiments.study import claims
from experiments import multitask_comparison
from experiments.study import command as study
from experiments.study import grids as study_grids
from experiments.study import page as study_page
from study_files import JoinablePath, write_dev_sets, write_predictions, write_run, write_text


def test_multitask_part_changes_one_factor_of_hyperformer_at_a_time(tmp_path, capsys):
  runs = study_grids.multitask_runs("out", "models/minilm", "data/wordnet", [1, 2, 3])
  parsed = []
  assert [name for name, _ in runs] == [r.name for r in study_grids.MULTITASK_RUNS]
  for _, argv in runs:  # Flags multitask_comparison takes, as it parses them.
    fv = flags.FlagValues()
    multitask_comparison.define_flags(fv)
    fv(["multitask_comparison"] + argv)
    assert fv.seeds == ["1", "2", "3"]
    parsed.append((fv.learning_rate, tuple(fv.methods), fv.num_train_epochs,
                   fv.generator_init_stddev, fv.task_embedding_init_stddev,
                   fv.hyperformer_adapter_size, fv.output_dir))
  hyper, every = ("hyperformer",), ("houlsby", "shared", "hyperformer", "hyperformer_ln")
  assert parsed == [
      (3e-4, every, 3.0, 0.01, 1.0, 16, "out/multitask/lr-0.0003"),
      (1e-4, hyper, 3.0, 0.01, 1.0, 16, "out/multitask/lr-0.0001"),
      (1e-3, hyper, 3.0, 0.01, 1.0, 16, "out/multitask/lr-0.001"),
      (3e-4, hyper, 3.0, 0.001, 1.0, 16, "out/multitask/lr-0.0003_generator_init_stddev-0.001"),
      (3e-4, hyper, 3.0, 0.1, 1.0, 16, "out/multitask/lr-0.0003_generator_init_stddev-0.1"),
      (3e-4, hyper, 3.0, 0.01, 0.1, 16, "out/multitask/lr-0.0003_task_embedding_init_stddev-0.1"),
      (3e-4, hyper, 3.0, 0.01, 1.0, 64, "out/multitask/lr-0.0003_hyperformer_adapter_size-64"),
      (3e-4, every, 20.0, 0.01, 1.0, 16, "out/multitask/lr-0.0003_epochs-20")]
  # --multitask_settings picks some, in MULTITASK_RUNS' order; a wrong name is one line.
  def dry_run(*extra):
    fv = flags.FlagValues()
    study.define_flags(fv)
    fv(["study", f"--output_dir={tmp_path / 'dry'}", "--parts=multitask", "--dry_run",
        f"--model_dir={tmp_path}", f"--data_root={tmp_path}", "--record_dir=", *extra])
    return study.main([], fv)

  assert dry_run("--multitask_settings=lr-0.0003_epochs-20,lr-0.001") == 0
  printed = [l for l in capsys.readouterr().out.splitlines() if l.startswith("multitask: ")]
  assert [l.split("--output_dir=")[1].split()[0] for l in printed] == [
      f"{tmp_path / 'dry'}/multitask/lr-0.001", f"{tmp_path / 'dry'}/multitask/lr-0.0003_epochs-20"]
  assert dry_run("--multitask_settings=lr-0.002") == 2
  assert capsys.readouterr().err == (
      "ERROR: --multitask_settings: unknown setting 'lr-0.002'; expected "
      + ", ".join(run.name for run in study_grids.MULTITASK_RUNS) + "\n")
  # The page shows each run's table as the comparison wrote it.
  write_text(str(tmp_path / "out" / "multitask" / "lr-0.001" / "comparison.md"),
         "| method | avg |\n|---|---|\n| hyperformer | 0.5 |\n")
  write_text(str(tmp_path / "out" / "multitask" / "lr-0.001" / "comparison.csv"), "method\n")
  # Each run's record with its wall time and steps, as multitask_comparison's runner
  # leaves it (a Houlsby run per task one level deeper): 0.5 h here, 1.5 h in all.
  for run, seconds, steps in (("lr-0.001/hyperformer/seed-1", 1000, 1000),
                              ("lr-0.001/hyperformer/seed-2", 800, 1000),
                              ("lr-0.0003/houlsby/seed-1/wordnet_pos", 3600, 375)):
    write_text(str(tmp_path / "out" / "multitask" / run / multitask_comparison.DONE_FILE),
           json.dumps({"status": "ok", "wall_seconds": seconds,
                       "metrics": {"global_step": steps}}))
  text = study_page.report(str(tmp_path / "out"), str(tmp_path / "study.md"), "cmd")
  assert ("## Multi-task: HyperFormer++ against per-task and shared adapters\n\n"
          "Learning rate 0.001, 3 epochs (hyperformer; 2 runs, 0.50 h of wall time; every "
          "seed's value: [multitask_lr-0.001.csv](study/multitask_lr-0.001.csv)):\n\n"
          "| method | avg |\n|---|---|\n| hyperformer | 0.5 |\n") in text
  # The cost table counts them per setting, the pending runs at the setting's
  # own seconds per step. lr-0.001: 3 hyperformer runs (one per seed); the
  # pending one trains 3 epochs of the four tasks' examples (the repository's
  # data: 4,000 each), int(16,000 / 32 * 3) = 1,500 steps, at 1,800 s / 2,000
  # steps: 0.375 h.
  assert "| multitask | lr-0.001 | 3 | 2 | 0.50 | 1 | 0.4 (0.90 s/step) |" in text
  # lr-0.0003: 4 methods x 3 seeds, Houlsby's a run per task: 3 x 4 + 3 x 3 =
  # 21. Pending: 11 Houlsby runs of int(4,000 / 32 * 3) = 375 steps, 9 of
  # 1,500, at 3,600 s / 375 steps: 17,625 x 9.6 s = 47 h.
  assert "| multitask | lr-0.0003 | 21 | 1 | 1.00 | 20 | 47.0 (9.60 s/step) |" in text
  assert (tmp_path / "study" / "multitask_lr-0.001.csv").read_text() == "method\n"
  # Beside the tables, HyperFormer++'s spread per setting, from comparison.json
  # as multitask_comparison.rows_of writes it (here two seeds of the average
  # and of one task; the other tasks' rows left out).
  def comparison(name, values, houlsby=()):
    records = {}
    for method, seed_values in (("hyperformer", values), ("houlsby", houlsby)):
      for seed, v in enumerate(seed_values, start=1):
        records.update({(method, seed, t): {"accuracy": v}
                        for t in multitask_comparison.WORDNET_TASKS})
        records[(method, seed, "params")] = {"trained_per_task": 1, "total_multiple": 1.0}
    rows = multitask_comparison.rows_of(records)
    write_text(str(tmp_path / "out" / "multitask" / name / "comparison.json"),
           json.dumps({"rows": rows}))

  comparison("lr-0.0003", [0.3, 0.5], houlsby=[0.6, 0.6])
  comparison("lr-0.0003_generator_init_stddev-0.1", [0.52, 0.5])
  text = study_page.report(str(tmp_path / "out"), str(tmp_path / "study.md"), "cmd")
  assert "at 3 and at 20 epochs" not in text  # Until the 20-epoch comparison has run.
  spread = text[text.index("HyperFormer++ with the encoder frozen, one factor"):]
  # std of (0.3, 0.5) = 0.1414; of (0.52, 0.5) = 0.0141.
  assert ("| Learning rate 0.0003, 3 epochs | 2 | 0.400 | 0.141 | 0.141 | 0.141 | 0.141 | "
          "0.141 | 0.300, 0.500 |") in spread
  assert ("| Learning rate 0.0003, 3 epochs, generator_init_stddev 0.1 | 2 | 0.510 | 0.014 | "
          "0.014 | 0.014 | 0.014 | 0.014 | 0.520, 0.500 |") in spread
  assert "| houlsby" not in spread and "Learning rate 0.001, 3 epochs |" not in spread
  # Under it, counted from it: the changed factor's spread against the first row's;
  # the sample std of 2 values is uncertain by 1/sqrt(2) = 71% of itself.
  assert ("Counted from the table, at 3 epochs: the narrowest spread between seeds is 0.014 "
          "(Learning rate 0.0003, 3 epochs, generator_init_stddev 0.1), against the first "
          "row's 0.141; with 2 seeds a std is uncertain by about 71% of itself.\n") in spread
  # At 20 epochs: each method's average beside its 3-epoch one, the change
  # hand-computed (hyperformer 0.4 -> 0.7, houlsby 0.6 -> 0.65).
  comparison("lr-0.0003_epochs-20", [0.7, 0.7], houlsby=[0.6, 0.7])
  text = study_page.report(str(tmp_path / "out"), str(tmp_path / "study.md"), "cmd")
  epochs = text[text.index("over the four tasks at 3 and at 20 epochs"):]
  assert ("| houlsby | 0.600 ± 0.000 (2) | 0.650 ± 0.071 (2) | +0.050 |\n"
          "| hyperformer | 0.400 ± 0.141 (2) | 0.700 ± 0.000 (2) | +0.300 |\n") in epochs
  assert "| Learning rate 0.0003, 20 epochs | 2 | 0.700 | 0.000 |" in epochs
  # HyperFormer++'s std between seeds beside the others' in the settings that ran
  # them all (std of (0.6, 0.7) = 0.0707).
  assert ("every method in the same setting: at 3 epochs houlsby 0.000 (2 seeds), "
          "hyperformer 0.141 (2 seeds); at 20 epochs houlsby 0.071 (2 seeds), hyperformer "
          "0.000 (2 seeds).") in epochs
  # Each seed's training loss, as its run logged it to TensorBoard: a panel per
  # setting, the points beside the page; of finished runs only (with their
  # record), so seed 3, still going, is left out.
  hyper = tmp_path / "out" / "multitask" / "lr-0.0003_generator_init_stddev-0.1" / "hyperformer"
  for seed, losses in ((1, [(50, 1.2), (100, 0.9)]), (2, [(50, 1.3), (100, 1.25)]),
                       (3, [(50, 1.4)])):
    write_run(str(hyper / f"seed-{seed}"), losses)
    if seed < 3:
      write_text(str(hyper / f"seed-{seed}" / multitask_comparison.DONE_FILE),
             json.dumps({"status": "ok", "wall_seconds": 60, "metrics": {"global_step": 100}}))
  text = study_page.report(str(tmp_path / "out"), str(tmp_path / "study.md"), "cmd")
  assert ("![HyperFormer++ training loss](study/multitask_hyperformer_loss.png)\n\n"
          "Points: `study/multitask_hyperformer_loss.csv`.") in text
  assert (tmp_path / "study" / "multitask_hyperformer_loss.png").read_bytes()[:4] == b"\x89PNG"
  assert (tmp_path / "study" / "multitask_hyperformer_loss.csv").read_text().splitlines() == [
      "setting,seed,step,loss",
      "lr-0.0003_generator_init_stddev-0.1,1,50,1.2",
      "lr-0.0003_generator_init_stddev-0.1,1,100,0.9",
      "lr-0.0003_generator_init_stddev-0.1,2,50,1.3",
      "lr-0.0003_generator_init_stddev-0.1,2,100,1.25"]


def test_hyperformer_claim_against_per_task_adapters(tmp_path):
  """HyperFormer++ right on 80 of each task's 100 dev examples, the per-task
  adapters on 90 (a superset): -10 points, and the interval far below -1."""
  labels = write_dev_sets(tmp_path / "data")
  multitask = tmp_path / "out" / "multitask"
  done = json.dumps({"status": "ok", "wall_seconds": 60, "metrics": {"global_step": 100}})
  # A factor setting's HyperFormer++ (generated adapters of 64) right on 88.
  for name, method, right, seeds in (
      ("lr-0.0003", "houlsby", 90, (1, 2)), ("lr-0.0003", "hyperformer", 80, (1, 2)),
      ("lr-0.0003_hyperformer_adapter_size-64", "hyperformer", 88, (1,))):
    setting = multitask / name
    for seed in seeds:
      for task in multitask_comparison.WORDNET_TASKS:
        path = multitask_comparison.eval_predictions_path(str(setting), method, seed, task)
        run_dir = path[:-len("/eval_predictions.tsv")]
        # Seed 2 of HyperFormer++ finished before the comparison wrote predictions.
        if not (method == "hyperformer" and seed == 2):
          write_predictions(JoinablePath(run_dir), labels, right)
      for run_dir, _ in multitask_comparison.run_dirs(str(setting), method, seed):
        write_text(f"{run_dir}/{multitask_comparison.DONE_FILE}", done)
  text = study_page.report(str(tmp_path / "out"), str(tmp_path / "study.md"), "cmd",
                           bootstrap_samples=500, data_root=str(tmp_path / "data"))
  [row] = [l for l in text.splitlines() if l.startswith("| Learning rate 0.0003, 3 epochs | "
                                                         "hyperformer within 1 point of houlsby")]
  # With the page's claims at its head, though no comparison table has been written yet.
  assert text.index("## The claims") < text.index(row)
  cells = [c.strip() for c in row.strip("|").split("|")]
  # 4 tasks; HyperFormer++ with 1 seed of predictions, houlsby with 2.
  assert cells[3:6] == ["4", "1", "-10.00"], row
  low, high = (float(v) for v in cells[6].strip("[]").split(", "))
  # The difference is the share of examples 80-89 in a redraw of 100, averaged
  # over 4 tasks: std sqrt(0.1 * 0.9 / 100) / 2 = 1.5 points.
  assert -15 < low < -10 < high < -6 and cells[7] == "fails", row
  assert "hyperformer_ln within" not in text  # It has no runs.
  assert "Where it fails, three causes are tested: the budget (the 20-epoch setting's rows)" in text
  # The spread table: each HyperFormer++ setting against the per-task adapters of
  # the setting that ran them at the same epochs (here once the comparison's
  # tables are written): -10 points, and -2 with adapters of 64.
  for name, values in (("lr-0.0003", (0.5, 0.6)),
                       ("lr-0.0003_hyperformer_adapter_size-64", (0.4, 0.6))):
    records = {}
    for seed, v in enumerate(values, start=1):
      records.update({("hyperformer", seed, t): {"accuracy": v}
                      for t in multitask_comparison.WORDNET_TASKS})
      records[("hyperformer", seed, "params")] = {"trained_per_task": 1, "total_multiple": 1.0}
    write_text(str(multitask / name / "comparison.json"),
               json.dumps({"rows": multitask_comparison.rows_of(records)}))
  text = study_page.report(str(tmp_path / "out"), str(tmp_path / "study.md"), "cmd",
                           bootstrap_samples=500, data_root=str(tmp_path / "data"))
  spread = text[text.index("HyperFormer++ with the encoder frozen, one factor"):]
  for describe, estimate in (("Learning rate 0.0003, 3 epochs |", -10.0),
                             ("Learning rate 0.0003, 3 epochs, hyperformer_adapter_size 64 |", -2.0)):
    [row] = [l for l in spread.splitlines() if l.startswith("| " + describe)]
    cell = row.strip(" |").split(" | ")[-1]
    assert cell.startswith(f"{estimate:+.2f} ["), row
    low, high = (float(v) for v in cell.split(" [")[1].strip("]").split(", "))
    assert low < estimate < high, row
  # Counted from the table: no narrower spread (0.141 against 0.071); the nearest to
  # per-task adapters is the one changed factor, its verdict read from its interval.
  assert ("no changed factor narrows the spread between seeds below the first row's 0.071 "
          "(the narrowest: Learning rate 0.0003, 3 epochs, hyperformer_adapter_size 64, "
          "0.141)") in spread
  verdict = claims.verdict(claims.MULTITASK_CLAIMS[0], low / 100, high / 100)
  assert (f"Nearest to per-task adapters of the changed factors: {describe[:-2]}, {cell} "
          f"points: HyperFormer++'s claim {verdict} there.") in spread
