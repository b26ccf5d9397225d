"""experiments/points/run_summary.py and study/record.py: a finished run's summary answers
as its own files do, and a study directory's record, restored on another
machine, gives the same page and resumes where the first left off."""

import functools
import json
import math
import os
import subprocess
import sys
import uuid

import numpy as np
import pytest
from absl import flags
import tensorflow as tf

from experiments.study import claims
from experiments.study import collapse
from experiments.points import grid as grid_lib
from experiments import multitask_comparison
from experiments.points import run_summary
from experiments.points import runner as runner_lib
from experiments.points import runs
from experiments.study import command as study
from experiments.study import grids as study_grids
from experiments.study import page as study_page
from experiments.study import record as study_record
from experiments.study import reruns as study_reruns
from experiments import sweep as sweep_lib
from experiments.points import tables
from adapter_bert import errors
from adapter_bert.runtime import machine
from study_files import JoinablePath, write_dev_sets, write_predictions, write_run, write_text


def _copy(src, dst, names):
  for name in names:
    tf.io.gfile.makedirs(str(dst))
    tf.io.gfile.copy(str(src / name), str(dst / name))


def test_a_run_summary_answers_as_the_runs_own_files(tmp_path):
  run = tmp_path / "run"
  labels = ["a", "b"] * 5
  losses = [(100, 0.69), (200, 0.41), (300, 0.6931)]
  write_run(str(run), losses, labels=("a", "b"), warmup_steps=150)
  write_predictions(run, labels, 7)  # Right on the first 7 of 10.
  assert run_summary.write(str(run))
  kept = tmp_path / "kept"
  _copy(run, kept, ["run_config.json", run_summary.SUMMARY_FILE])
  for directory in (run, kept):
    d = str(directory)
    # A row predicts label 0 (0.9) where it is right on an "a" or wrong on a "b".
    assert run_summary.predicted_labels(d).tolist() == [0, 1, 0, 1, 0, 1, 0, 0, 1, 0]
    # Each label's probability is 0.9 on 6 rows and 0.1 on 4: std 0.8 * sqrt(0.6 * 0.4).
    assert run_summary.prediction_spread(d) == pytest.approx(0.8 * math.sqrt(0.24))
    # As TensorBoard stored them (float32), to the bit.
    assert run_summary.curve(d) == [(s, float(np.float32(v))) for s, v in losses]
    assert run_summary.curve(d, "learning_rate") == [
        (s, float(np.float32(s / 40000))) for s, _ in losses]
    assert run_summary.curve(d, "no_such_tag") == []
    assert run_summary.has_predictions(d)
    assert claims.correctness(d, np.array([0, 1] * 5)).sum() == 7
  assert collapse.timeline(str(run)) == collapse.timeline(str(kept))
  # A run with nothing to summarize; its predictions asked for: one line naming it.
  (tmp_path / "empty").mkdir()
  assert not run_summary.write(str(tmp_path / "empty"))
  assert not run_summary.has_predictions(str(tmp_path / "empty"))
  with pytest.raises(errors.UserError, match="^.*empty: no eval_predictions.tsv and no "
                     "run_summary.json with its predictions$"):
    run_summary.predicted_labels(str(tmp_path / "empty"))


TASK = "wordnet_relation"
# Dev examples right out of 100, by method (then + the rate's index and the seed).
RIGHT = {"full": 88, "top_layers_3": 84, "adapters_64": 86, "adapters_8": 85,
         "layer_norm": 78, "head": 60}


def _finished_study(out, labels):
  """A study directory as the sweep, run_classifier.py and the multitask comparison
  leave it: Table 1's methods on wordnet_relation (two seeds; one point still
  running, with a checkpoint), and a multitask setting with per-task adapters
  and HyperFormer++ (seed 1)."""
  grid_json = study_grids.part_grid("methods", study_grids.TASKS[TASK], "models/minilm",
                                    "data/wordnet", seeds=[1, 2])
  grid = grid_lib.Grid.from_json(grid_json)
  sweep_dir = out / "methods" / TASK
  sweep = sweep_lib.Sweep(grid, str(sweep_dir))
  tables.write_json(str(sweep_dir / sweep_lib.SWEEP_FILE), {"grid": grid.to_json(),
                                                            "program": ["run_classifier.py"]})
  rates = {}
  for p in sweep.points:
    rates.setdefault(p.settings["train_mode"], set()).add(p.settings["learning_rate"])
  for p in sweep.points:
    run = sweep_dir / "runs" / p.name
    mode, size = p.settings["train_mode"], p.settings["adapter_size"]
    method = runs.method_name(mode, size)
    write_run(str(run), [(100, 0.7), (200, 0.5)], labels=("a", "b"))
    write_text(str(run / "model.ckpt-200.index"), "checkpoint")
    if p is sweep.points[-1]:
      continue  # Still running: no record, no predictions.
    right = (RIGHT[method] + sorted(rates[mode]).index(p.settings["learning_rate"])
             + p.settings["seed"])
    write_predictions(run, labels, right)
    write_text(str(run / "eval_results.txt"), f"eval_accuracy = {right / 100}\n")
    write_text(str(run / "run.log"), "INFO ...\n")
    # What run_classifier.py leaves beside: the evaluation's TensorBoard
    # directory, the adapter-only weights.
    write_run(str(run / "eval"), [(200, 0.45)])
    write_text(str(run / "adapter_model" / "adapter_weights.safetensors"), "weights")
    tables.write_json(str(run / runs.RECORD_FILE), {
        "point": p.name, "status": "ok", "exit_code": 0, "vary": p.vary,
        "settings": p.settings, "command": ["run_classifier.py", f"--output_dir={run}"],
        "output_dir": f"runs/{p.name}", "finished_at": "2026-11-25T16:00:00",
        "wall_seconds": 100.0 + right, "train_mode": mode, "adapter_size": size,
        "method": method, "num_train_examples": 100, "num_train_steps": 200,
        "metrics": {"eval_accuracy": right / 100, "eval_loss": 1 - right / 100,
                    "global_step": 200, "loss": 0.5},
        "params": {"total": 1000, "adapter": 10, "trainable": 20}, "error": None})
  sweep_lib.Sweep(grid, str(sweep_dir)).write_table()

  setting = out / "multitask" / "lr-0.0003"
  done = json.dumps({"status": "ok", "wall_seconds": 60, "metrics": {"global_step": 100}})
  for method, right in (("houlsby", 90), ("hyperformer", 80)):
    for run_dir, tasks in multitask_comparison.run_dirs(str(setting), method, 1):
      write_text(f"{run_dir}/{multitask_comparison.DONE_FILE}", done)
      write_text(f"{run_dir}/eval_results.txt", "eval_accuracy = 0.9\n")
      if method == "hyperformer":
        write_run(run_dir, [(50, 1.2), (100, 0.9)])
      for task in tasks:
        path = multitask_comparison.eval_predictions_path(str(setting), method, 1, task)
        write_predictions(JoinablePath(os.path.dirname(path)), labels, right)
  records = {}
  for method, value in (("houlsby", 0.9), ("hyperformer", 0.8)):
    records.update({(method, 1, t): {"accuracy": value}
                    for t in multitask_comparison.WORDNET_TASKS})
    records[(method, 1, "params")] = {"trained_per_task": 1, "total_multiple": 1.0}
  rows = multitask_comparison.rows_of(records)
  tables.write_table(str(setting / "comparison.json"), str(setting / "comparison.csv"), rows,
                     ["method", "task", "mean", "std", "seeds", "values"])
  write_text(str(setting / "comparison.md"), multitask_comparison.markdown(rows))
  study.record_sitting(str(out), "python -m experiments.study", "2026-11-25T15:00:00")
  return sweep


def _files(record_dir):
  return study_record.files(record_dir)


def _recorded(record_dir, name):
  """A file as the record keeps it: restored into a directory of its own."""
  out = os.path.join(str(record_dir), "..", f"restored-{uuid.uuid4().hex[:8]}")
  study_record.restore(str(record_dir), out)
  with open(os.path.join(out, name)) as f:
    return f.read()


@pytest.mark.parametrize("record_on", ["local", "ram"])
def test_the_page_comes_back_from_the_record_on_another_machine(tmp_path, monkeypatch,
                                                                record_on):
  """The record holds the finished runs' small files only; restored into an empty
  directory (another machine's), the page is the same, and the sweep resumes
  with the one point that had not finished."""
  monkeypatch.chdir(tmp_path)
  labels = write_dev_sets(JoinablePath("data/wordnet"))
  first = JoinablePath(str(tmp_path / "first"))
  sweep = _finished_study(first, labels)
  record = (JoinablePath(f"ram://record-{uuid.uuid4().hex[:8]}") if record_on == "ram"
            else JoinablePath(str(tmp_path / "record")))

  def page(out, name):
    text = study_page.report(str(out), f"{name}/study.md", "cmd", bootstrap_samples=200)
    return text.replace(str(out), "OUT")

  first_page = page(first, "docs1")
  assert "| adapters_64 within 1 point of full |" in first_page  # Its claim is decided.
  written = study_record.save(str(first), str(record))
  kept = _files(str(record))
  assert written == len(kept)
  assert {os.path.basename(f) for f in kept} == {
      "sweep.json", "sweep_point.json", "run_config.json", "eval_results.txt",
      "run_summary.json", "comparison_run.json", "comparison.json", "comparison.csv",
      "comparison.md", "sittings.json"}
  # The running point left nothing, nor did eval/ and adapter_model/; the multitask
  # runs' per-task predictions are summarized.
  assert not [f for f in kept if sweep.points[-1].name in f or "/eval/" in f
              or "adapter_model" in f]
  assert "multitask/lr-0.0003/hyperformer/seed-1/wordnet_pos/run_summary.json" in kept
  assert study_record.save(str(first), str(record)) == 0  # Up to date.

  second = JoinablePath(str(tmp_path / "second"))
  assert study_record.restore(str(record), str(second)) == len(kept)
  resumed = sweep_lib.Sweep(sweep.grid, str(second / "methods" / TASK))
  assert [p.name for p in resumed.pending()] == [sweep.points[-1].name]
  assert not tf.io.gfile.exists(str(second / "methods" / TASK / "runs" / sweep.points[0].name
                                    / "eval_predictions.tsv"))
  assert page(second, "docs2") == first_page
  for name in ("methods_wordnet_relation_results.csv", "multitask_hyperformer_loss.csv",
               "multitask_lr-0.0003.csv"):
    assert (tmp_path / "docs2" / "study" / name).read_text() == (
        tmp_path / "docs1" / "study" / name).read_text(), name
  # The multitask comparison takes a restored run as finished, predictions and all:
  # it neither trains nor evaluates it again.
  def no_run(*args, **kwargs):
    raise AssertionError("ran a finished run")
  fv = flags.FlagValues()
  multitask_comparison.define_flags(fv)
  fv(["multitask_comparison", f"--output_dir={second / 'multitask' / 'lr-0.0003'}"])
  restored = runner_lib.Runner(multitask_comparison.points(fv, "hyperformer", 1),
                               popen=no_run, log=lambda _: None)
  assert restored.pending() == [] and restored.incomplete() == []
  assert restored.run() == {"ok": 1, "failed": 0, "pending": 0}


def test_a_run_summary_reads_events_through_tensorflows_checked_reader(tmp_path, caplog):
  """The curves come from tf.compat.v1.train.summary_iterator, which checks each
  record: a record whose bytes changed (a bit flipped on disk) ends the file's
  events there, with a warning naming it, where a reader of the framing alone
  would take the changed value."""
  run = str(tmp_path / "run")
  losses = [(100, 0.69), (200, 0.41), (300, 0.25)]
  write_run(run, losses)
  [events] = [n for n in os.listdir(run) if n.startswith("events.out.tfevents")]
  path = os.path.join(run, events)
  with open(path, "rb") as f:
    data = bytearray(f.read())
  third = bytes(np.float32(0.25).tobytes())
  at = data.rindex(third)  # The last loss's value, in its record's data.
  data[at:at + 4] = np.float32(0.75).tobytes()
  with open(path, "wb") as f:
    f.write(bytes(data))
  with caplog.at_level("WARNING"):
    curve = run_summary.curve(run)
  assert curve == [(s, float(np.float32(v))) for s, v in losses[:2]]
  assert [r.getMessage() for r in caplog.records if "bad record" in r.getMessage()][0].startswith(
      f"{path}: the events after a bad record are left out")


def test_restore_keeps_what_the_output_directory_has(tmp_path):
  record, out, first = tmp_path / "record", tmp_path / "out", tmp_path / "first"
  write_text(str(first / "sittings.json"), "[1]\n")
  write_text(str(first / "multitask" / "lr-0.001" / "comparison.md"), "from the record\n")
  study_record.save(str(first), str(record))
  write_text(str(out / "sittings.json"), "[1, 2]\n")
  assert study_record.restore(str(record), str(out)) == 1
  assert (out / "sittings.json").read_text() == "[1, 2]\n"
  assert (out / "multitask" / "lr-0.001" / "comparison.md").read_text() == "from the record\n"
  # Saving brings the record up to date with the directory.
  assert study_record.save(str(out), str(record)) == 1
  assert json.loads(_recorded(record, "sittings.json")) == [1, 2]
  # A record among the runs would be saved into itself: one line, nothing written.
  with pytest.raises(errors.UserError, match=r"^--record_dir=.*/out/record is inside "
                     r"--output_dir=.*/out: keep the record beside the runs, not among them$"):
    study_record.save(str(out), str(out / "record"))
  assert not (out / "record").exists()
  # A sweep point's record without its sweep's grid: restored, no table rewritten.
  write_text(str(first / "methods" / TASK / "runs" / "p" / runs.RECORD_FILE), "{}")
  study_record.save(str(first), str(record))
  assert study_record.restore(str(record), str(tmp_path / "elsewhere")) == 3
  assert not (tmp_path / "elsewhere" / "methods" / TASK / "results.json").exists()


def test_the_study_command_restores_saves_and_writes_the_page(tmp_path, monkeypatch, capsys):
  """`python -m experiments.study --report_only` on a machine with no runs: the
  record's runs come back, and the page is the first machine's."""
  monkeypatch.chdir(tmp_path)
  labels = write_dev_sets(JoinablePath("data/wordnet"))
  tf.io.gfile.makedirs("models/minilm")
  _finished_study(JoinablePath("machine-a"), labels)
  kept = study_record.save("machine-a", "docs/study/record")  # The flag's default.

  def report_only(out):
    fv = flags.FlagValues()
    study.define_flags(fv)
    fv(["study", f"--output_dir={out}", "--report_only", "--bootstrap_samples=200",
        f"--page={out}.md"])
    assert study.main([], fv) == 0
    return (tmp_path / f"{out}.md").read_text().replace(out, "OUT")

  first = report_only("machine-a")
  assert "Restored" not in capsys.readouterr().out
  assert report_only("machine-b") == first
  assert ("(every finished run's small files are kept in `docs/study/record`, from which "
          "`--report_only` writes this page on any machine)") in first
  assert f"Restored {kept} files of finished runs from docs/study/record" in capsys.readouterr().out


def test_the_page_checks_reruns_against_the_earlier_tables(tmp_path, monkeypatch):
  """Points run again (the same names) against an earlier study's tables: the
  ones that agree counted, the one that differs listed with both values."""
  monkeypatch.chdir(tmp_path)
  labels = write_dev_sets(JoinablePath("data/wordnet"))
  out = JoinablePath(str(tmp_path / "out"))
  sweep = _finished_study(out, labels)
  now = (tmp_path / "out" / "methods" / TASK / "results.csv").read_text().splitlines()
  header = now[0].split(",")
  first, second = sweep.points[0].name, sweep.points[1].name
  earlier = [now[0]]
  for line in now[1:]:
    cells = line.split(",")
    if cells[0] == second:  # The first runs had it at another accuracy.
      cells[header.index("eval_accuracy")] = "0.5"
    if cells[0] == first:  # And this one's dev loss 0.25 higher.
      loss = header.index("eval_loss")
      cells[loss] = str(float(cells[loss]) + 0.25)
    if cells[0] in (first, second):
      earlier.append(",".join(cells))
  write_text(str(tmp_path / "earlier" / f"methods_{TASK}_results.csv"), "\n".join(earlier) + "\n")
  text = study_page.report(str(out), "docs/study.md", "cmd", bootstrap_samples=100,
                           earlier_dir=str(tmp_path / "earlier"))
  accuracy = [l for l in now if l.startswith(second)][0].split(",")[header.index("eval_accuracy")]
  # The points' records name no CPU; the sitting whose span holds them does.
  cpu = machine.cpu_line()
  assert (f"## Reruns of earlier points\n\n2 finished points are reruns of points in "
          f"`{tmp_path / 'earlier'}` (the same settings, hence the same names): 1 of them give "
          f"the same dev accuracy and steps as that table keeps them, and the dev and final "
          f"training losses of all differ by at most 0.25. The same, by the CPU that ran "
          f"the rerun: {cpu}: 1 of 2. The others:\n\n- methods/{TASK} "
          f"`{second}`: eval_accuracy 0.5 then, {accuracy} now (rerun on {cpu})\n") in text
  # No earlier tables (or none of their points rerun): no section.
  assert "## Reruns" not in study_page.report(str(out), "docs/study.md", "cmd",
                                               bootstrap_samples=100,
                                               earlier_dir=str(tmp_path / "none"))


def test_the_page_checks_multitask_reruns_against_the_earlier_tables(tmp_path):
  """Multi-task runs run again (the same setting, method and seed) against the
  earlier study's multitask_SETTING.csv (rows_of's table: each seed's value):
  each task's dev accuracy compared; unfinished runs and runs the table lacks
  left out."""
  tasks = list(multitask_comparison.WORDNET_TASKS)
  then = {("houlsby", 1, t): {"accuracy": 0.8} for t in tasks}
  # More digits than the table keeps (4): compared at its 4.
  then.update({("hyperformer", s, t): {"accuracy": 0.60004 + 0.01 * i}
               for s in (1, 2) for i, t in enumerate(tasks)})
  for method, seed in (("houlsby", 1), ("hyperformer", 1), ("hyperformer", 2)):
    then[(method, seed, "params")] = {"trained_per_task": 1, "total_multiple": 1.0}
  rows = multitask_comparison.rows_of(then)
  tables.write_table(str(tmp_path / "earlier.json"),
                     str(tmp_path / "earlier" / "multitask_lr-0.0003.csv"), rows,
                     ["method", "task", "mean", "std", "seeds", "values"])
  out = tmp_path / "out" / "multitask" / "lr-0.0003"

  def finished(directory, results, cpu):
    write_text(str(directory / "eval_results.txt"),
               "".join(f"{k} = {v}\n" for k, v in results.items()))
    write_text(str(directory / multitask_comparison.DONE_FILE),
               json.dumps({"status": "ok", "machine": cpu}))

  # Houlsby on lexname as then (a run per task; its other tasks not finished).
  finished(out / "houlsby" / "seed-1" / "wordnet_lexname", {"eval_accuracy": 0.8}, "CPU A")
  # HyperFormer++ seed 1: pos (then 0.61) at 0.615 now; seed 2 not finished;
  # seed 3 finished but not in the earlier table.
  now = {f"{t}/eval_accuracy": 0.60004 + 0.01 * i for i, t in enumerate(tasks)}
  finished(out / "hyperformer" / "seed-1", dict(now, **{"wordnet_pos/eval_accuracy": 0.615}),
           "CPU B")
  finished(out / "hyperformer" / "seed-3", now, "CPU B")
  text = "\n".join(study_reruns.reruns_section(
      str(tmp_path / "out"), str(tmp_path / "earlier"), lambda record: record["machine"]))
  assert text == (
      "## Reruns of earlier points\n\n2 finished multi-task runs are reruns of runs in "
      f"`{tmp_path / 'earlier'}`'s multitask_SETTING.csv tables (the same setting, method "
      "and seed): 1 of them give the same dev accuracy on every task they train as those "
      "tables keep it. The same, by the CPU that ran the rerun: CPU A: 1 of 1; CPU B: 0 of "
      "1. The others:\n\n- multitask/lr-0.0003 hyperformer seed 1: wordnet_pos 0.61 then, "
      "0.615 now (rerun on CPU B)\n")


def test_the_record_is_saved_as_each_point_finishes(tmp_path, monkeypatch):
  """A sitting killed midway (its machine gone) has its finished points in the
  record already, and itself in the record's list of sittings."""
  monkeypatch.chdir(tmp_path)
  seen = []

  class OnePointThenKilled(sweep_lib.Sweep):
    def run(self):
      point = self.points[0]
      record = {"point": point.name, "status": "ok", "vary": point.vary,
                "output_dir": f"runs/{point.name}"}
      tables.write_json(os.path.join(self.point_dir(point), runs.RECORD_FILE), record)
      self.on_finished(record)
      seen.append(sorted(_files("docs/study/record")))
      raise SystemExit("killed")  # Not a KeyboardInterrupt: no clean-up runs.

  monkeypatch.setattr(study.sweep_lib, "Sweep", OnePointThenKilled)
  fv = flags.FlagValues()
  study.define_flags(fv)
  fv(["study", "--output_dir=out", "--parts=init_scale", "--model_dir=.", "--data_root=."])
  with pytest.raises(SystemExit):
    study.main([], fv)
  point = grid_lib.Grid.from_json(study_grids.part_grid(
      "init_scale", study_grids.TASKS["wordnet_lexname"], ".", ".")).points(
          sweep_lib.DEFAULTS)[0].name
  assert seen == [[f"init_scale/wordnet_lexname/runs/{point}/sweep_point.json", "sittings.json"]]
  [sitting] = json.loads(_recorded(tmp_path / "docs" / "study" / "record", "sittings.json"))
  assert sitting["command"].startswith("python -m experiments.study")


def test_the_record_is_saved_as_each_multitask_run_finishes(tmp_path, monkeypatch):
  """The multitask part's settings take hours each: a sitting killed midway has
  the setting's finished runs in the record already, not only whole settings."""
  monkeypatch.chdir(tmp_path)
  seen = []

  def popen(cmd, **kwargs):  # A multi-task run: its results, predictions, parameter lines.
    seen.append(sorted(_files("docs/study/record")))  # As each run starts.
    if len(seen) == 2:
      raise SystemExit("killed")  # Not a KeyboardInterrupt: no clean-up runs.
    output_dir = next(a for a in cmd if a.startswith("--output_dir=")).partition("=")[2]
    script = "\n".join(
        [f"import os; out = {output_dir!r}",
         "open(os.path.join(out, 'eval_results.txt'), 'w').write(" + repr("".join(
             f"{t}/eval_accuracy = 0.5\n" for t in multitask_comparison.WORDNET_TASKS)) + ")"]
        + [f"os.makedirs(os.path.join(out, {t!r}), exist_ok=True); open(os.path.join("
           f"out, {t!r}, 'eval_predictions.tsv'), 'w').write('0.5\\t0.5\\n')"
           for t in multitask_comparison.WORDNET_TASKS]
        + ["print('***** Trained Parameters per Task = 1 (of the base\\'s 10) *****')",
           "print('***** Parameters for 4 Tasks = 1.0 x the base *****')"])
    return subprocess.Popen([sys.executable, "-c", script], **kwargs)

  fv = flags.FlagValues()
  study.define_flags(fv)
  fv(["study", "--output_dir=out", "--parts=multitask", "--multitask_settings=lr-0.001",
      "--model_dir=.", "--data_root=."])
  monkeypatch.setattr(study.multitask_comparison, "main", functools.partial(
      multitask_comparison.main, popen=popen))
  with pytest.raises(SystemExit):
    study.main([], fv)
  # As the second run (seed 2) starts, the first (seed 1) is kept, with this sitting.
  assert seen == [[], ["multitask/lr-0.001/hyperformer/seed-1/comparison_run.json",
                       "multitask/lr-0.001/hyperformer/seed-1/eval_results.txt"] + [
                           f"multitask/lr-0.001/hyperformer/seed-1/{t}/run_summary.json"
                           for t in sorted(multitask_comparison.WORDNET_TASKS)]
                  + ["sittings.json"]]
  [sitting] = json.loads(_recorded(tmp_path / "docs" / "study" / "record", "sittings.json"))
  assert sitting["command"].startswith("python -m experiments.study")
  # The next sitting: called after the two runs it finished (the 4th and 5th
  # started here: seeds 2 and 3), not after seed 1's, which it found done.
  seen.append("not killed")
  finished = []
  fv = flags.FlagValues()
  multitask_comparison.define_flags(fv)
  fv(["multitask_comparison", "--output_dir=out/multitask/lr-0.001", "--seeds=1,2,3",
      "--methods=hyperformer", "--model_dir=.", "--data_root=."])
  multitask_comparison.main([], fv, popen=popen, on_run_finished=lambda: finished.append(
      len(seen)))
  assert finished == [4, 5] and len(seen) == 5


def test_the_committed_page_is_what_the_committed_record_gives(tmp_path, monkeypatch):
  """docs/study.md, as committed, is what `--report_only` writes from
  docs/study/record/ on a clean clone (all but the line that says when, where and
  from which directory it was written)."""
  root = os.path.join(os.path.dirname(__file__), "..")
  monkeypatch.chdir(root)  # The record's grids name the task data relative to it.
  out = str(tmp_path / "runs")
  study_record.restore("docs/study/record", out)
  written = study_page.report(out, str(tmp_path / "docs" / "study.md"), "cmd",
                              record_dir="docs/study/record",
                              earlier_dir="docs/study_first_runs")
  with open("docs/study.md") as f:
    committed = f.read()
  written_by = lambda text: [l for l in text.splitlines() if not l.startswith("Written by `")]
  assert written_by(written) == written_by(committed)


def test_the_record_names_no_path_of_the_machine(tmp_path):
  """A point's command names its interpreter, run_classifier.py and output_dir
  absolutely: the record keeps them under OUTPUT_DIR, relative to the
  repository, or by their base name."""
  out, record = tmp_path / "out", tmp_path / "record"
  tables.write_json(str(out / "methods" / TASK / "runs" / "p" / runs.RECORD_FILE), {
      "command": ["/usr/bin/python3", os.path.join(runs.ROOT, "run_classifier.py"),
                  f"--output_dir={out}/methods/{TASK}/runs/p", "--seed=1"]})
  assert study_record.save(str(out), str(record)) == 1
  assert json.loads(_recorded(record, f"methods/{TASK}/runs/p/{runs.RECORD_FILE}")) == {
      "command": ["python3", "run_classifier.py",
                  f"--output_dir=OUTPUT_DIR/methods/{TASK}/runs/p", "--seed=1"]}
