"""experiments/paper_table.py: the commands it runs and what it reads back (no training
here: a stand-in runs in place of run_classifier.py)."""

import json
import subprocess

from absl import flags
import pytest

from adapter_bert import errors
from experiments import paper_table
from experiments.points import runs
from stand_in_runs import accuracy, stand_in


SETTINGS = dict(num_train_epochs=2.0, max_seq_length=32, train_batch_size=32,
                eval_batch_size=64, seed=1, machine="test")


def _command(task, method, output_dir="out"):
  return paper_table.run_command(".venv/bin/python", paper_table.TASKS[task],
                                 paper_table.METHODS[method], SETTINGS, "models/minilm",
                                 "data/wordnet", output_dir)


def _rate(command):
  (rate,) = [a for a in command if a.startswith("--learning_rate=")]
  return float(rate.partition("=")[2])


def test_commands_differ_only_in_method_flags_and_learning_rate():
  pair = _command("wordnet_example", "top_layers_3")
  assert "--text_a_column=gloss" in pair and "--text_b_column=example" in pair
  assert "--train_mode=top_layers:3" in pair and "--adapter_size=0" in pair
  assert "--learning_rate=5e-05" in pair and "--data_dir=data/wordnet/wordnet_example" in pair
  shared = set(_command("wordnet_lexname", "adapters_8"))
  for method in paper_table.METHODS.values():
    varying = set(_command("wordnet_lexname", method.name)) - shared
    assert varying <= set(method.flags) | {f"--learning_rate={method.learning_rate:g}"}


def test_learning_rate_is_per_method_with_per_task_overrides():
  # wordnet_lexname: the method defaults. wordnet_example (pair task): lower rates, the
  # head keeps its own.
  expected = {"wordnet_lexname": {"adapters_8": 1e-3, "adapters_64": 1e-3, "full": 1e-4,
                                  "top_layers_3": 1e-4, "layer_norm": 3e-3, "head": 3e-3},
              "wordnet_example": {"adapters_8": 3e-4, "adapters_64": 3e-4, "full": 5e-5,
                                  "top_layers_3": 5e-5, "layer_norm": 1e-3, "head": 3e-3}}
  for task, rates in expected.items():
    for method, rate in rates.items():
      assert paper_table.learning_rate(paper_table.TASKS[task],
                                       paper_table.METHODS[method]) == rate
      assert _rate(_command(task, method)) == rate
  assert paper_table.TASKS["wordnet_lexname"].learning_rates == {}
  assert set(paper_table.TASKS["wordnet_example"].learning_rates) <= set(paper_table.METHODS)


def test_dry_run_prints_per_task_rates_and_what_merge_keeps(tmp_path, capsys):
  results_json = tmp_path / "table.json"
  results_json.write_text(json.dumps({"settings": dict(SETTINGS, eval_batch_size=64), "runs": [
      _fake_run("wordnet_lexname", "full", 1e-4, 0.85),
      _fake_run("wordnet_example", "full", 1e-4, 0.5)]}))

  def dry_run(*args):  # The command's main on its flags, in this process.
    fv = flags.FlagValues()
    paper_table.define_flags(fv)
    fv(["paper_table", "--dry_run", "--tasks=wordnet_example",
        "--methods=adapters_64,full,head", "--machine=test",
        f"--results_json={results_json}", *args])
    capsys.readouterr()
    paper_table.main([], fv)
    return capsys.readouterr().out.splitlines()

  out = dry_run("--merge")
  commands = [line.split() for line in out if not line.startswith("#")]
  assert [_rate(c) for c in commands] == [3e-4, 5e-5, 3e-3]
  assert all("--data_dir=data/wordnet/wordnet_example" in c for c in commands)
  assert out[-1] == "# --merge keeps 1 runs of {}: wordnet_lexname/full".format(results_json)
  assert dry_run() == out[:-1]  # Without --merge nothing is kept.


def test_reads_log_counts_and_eval_results():
  log = ("I1122 trainable.py:124] ***** Total Parameters = 23312266 *****\n"
         "I1122 trainable.py:125] ***** Adapter Parameters = 595200 *****\n"
         "I1122 trainable.py:126] ***** Total Trainable Parameters = 609034 *****\n")
  assert runs.parse_parameter_counts(log, require_all=True) == {
      "total": 23312266, "adapter": 595200, "trainable": 609034}
  with pytest.raises(ValueError, match="missing"):
    runs.parse_parameter_counts(log.splitlines()[0], require_all=True)
  assert runs.parse_parameter_counts(log.splitlines()[0]) == {"total": 23312266}
  results = runs.parse_eval_results(
      "eval_accuracy = 0.853\neval_loss = 0.445\nglobal_step = 250\n")
  assert results == {"eval_accuracy": 0.853, "eval_loss": 0.445, "global_step": 250}
  assert type(results["global_step"]) is int  # As the original BERT writes it.


def _fake_run(task, method, rate, accuracy, trainable=1000):
  return dict(task=task, method=method, learning_rate=rate, command=["run", task, method],
              eval_accuracy=accuracy, eval_loss=0.5, global_step=250, total=1000, adapter=0,
              trainable=trainable, trained_share=trainable / 1000, wall_seconds=12.4)


def test_markdown_table_rows_and_delta_to_full():
  table = paper_table.markdown_table({"settings": SETTINGS, "runs": [
      _fake_run("wordnet_lexname", "adapters_64", 1e-3, 0.853, 26),
      _fake_run("wordnet_lexname", "full", 1e-4, 0.861)]})
  lines = table.splitlines()
  assert len(lines) == 4  # Header, rule, one row per method, in METHODS order.
  assert lines[0].startswith("| method | learning rate | trained params (share) |")
  assert lines[2].startswith("| adapters, size 64") and "| 0.853 | -0.8 | 12 s |" in lines[2]
  assert "| 0.001 | 26 (2.60%) |" in lines[2]
  assert lines[3].startswith("| full fine-tuning") and "| 0.861 |  | 12 s |" in lines[3]


def test_markdown_table_has_a_rate_column_per_task_where_rates_differ():
  table = paper_table.markdown_table({"settings": SETTINGS, "runs": [
      _fake_run("wordnet_example", "adapters_64", 3e-4, 0.675, 26),
      _fake_run("wordnet_lexname", "adapters_64", 1e-3, 0.853, 26),
      _fake_run("wordnet_lexname", "full", 1e-4, 0.851)]})
  lines = table.splitlines()
  assert lines[0] == (
      "| method | trained params (share) | wordnet_lexname learning rate | "
      "wordnet_lexname dev acc. | wordnet_lexname Δ vs full | wordnet_lexname wall | "
      "wordnet_example learning rate | wordnet_example dev acc. | wordnet_example Δ vs full | "
      "wordnet_example wall |")
  assert lines[2] == ("| adapters, size 64 (+ LayerNorms + head) | 26 (2.60%) | 0.001 | 0.853 | "
                      "+0.2 | 12 s | 0.0003 | 0.675 |  | 12 s |")
  # A method not run on a task leaves that task's cells empty.
  assert lines[3] == ("| full fine-tuning | 1,000 (100.00%) | 0.0001 | 0.851 |  | 12 s "
                      "|  |  |  |  |")


def test_merge_keeps_runs_not_rerun_and_records_each_runs_rate(tmp_path, monkeypatch):
  settings = dict(SETTINGS)
  old_runs = [_fake_run(t, m, r, a) for t, m, r, a in (
      ("wordnet_lexname", "adapters_64", 1e-3, 0.853), ("wordnet_lexname", "full", 1e-4, 0.851),
      ("wordnet_example", "adapters_64", 1e-3, 0.500), ("wordnet_example", "full", 1e-4, 0.500))]
  results_json, results_md = tmp_path / "docs" / "table.json", tmp_path / "docs" / "table.md"
  results_json.parent.mkdir()
  results_json.write_text(json.dumps({"settings": settings, "runs": old_runs}))
  plan = [(task, method, f"out/{task}/{method}", _command(task, method, f"out/{task}/{method}"))
          for task in ["wordnet_example"] for method in ["full", "adapters_64"]]
  popen, calls = _stand_in(tmp_path, monkeypatch)
  # An earlier attempt's file in a run's directory: each run starts from an empty one.
  (tmp_path / "out" / "wordnet_example" / "full").mkdir(parents=True)
  stale = tmp_path / "out" / "wordnet_example" / "full" / "model.ckpt-100.index"
  stale.write_text("an earlier attempt's checkpoint")

  keep = paper_table.kept_runs(str(results_json), settings,
                               {(task, method) for task, method, *_ in plan})
  assert keep == old_runs[:2]
  results = paper_table.sweep(plan, settings, str(results_json), str(results_md), keep,
                              popen=popen, root=str(tmp_path))
  # Each command as planned, one at a time, from the root, into its own directory.
  assert [c["command"] for c in calls()] == [command for *_, command in plan]
  assert [c["cwd"] for c in calls()] == [str(tmp_path)] * 2
  assert calls()[0]["end"] <= calls()[1]["start"]
  for _, _, output_dir, _ in plan:
    assert "Total Trainable Parameters" in (tmp_path / output_dir / "run.log").read_text()
  assert not stale.exists()
  written = json.loads(results_json.read_text())
  assert written == results
  # Kept runs first and untouched; new runs in table order, each with its own rate.
  assert written["runs"][:2] == old_runs[:2]
  adapters, full = accuracy(3e-4, 64, 1), accuracy(5e-5, 0, 1)
  assert [(r["task"], r["method"], r["learning_rate"], r["eval_accuracy"])
          for r in written["runs"][2:]] == [("wordnet_example", "adapters_64", 3e-4, adapters),
                                            ("wordnet_example", "full", 5e-5, full)]
  assert {k: written["runs"][2][k] for k in ("total", "adapter", "trainable", "global_step")} == {
      "total": 100000, "adapter": 640, "trainable": 1640, "global_step": 4}
  assert written["runs"][2]["trained_share"] == 1640 / 100000
  assert written["runs"][2]["command"] == plan[1][3]
  md = results_md.read_text()
  assert f"| 0.0003 | {adapters:.3f} | {100 * (adapters - full):+.1f} | 0 s |" in md
  assert "wordnet_lexname learning rate" in md
  assert "| 0.001 | 0.853 | +0.2 | 12 s |" in md
  # A run that fails stops the table; the runs before it are written.
  failing = plan[:1] + [(*plan[1][:3], [a.replace("--learning_rate=0.0003", "--learning_rate=1")
                                         for a in plan[1][3]])]
  with pytest.raises(RuntimeError, match=r"(?s)run failed \(exit 2\), see .*run.log:\n.*"
                     r"training diverged"):
    paper_table.sweep(failing, settings, str(results_json), str(results_md), [],
                      popen=popen, root=str(tmp_path))
  assert [r["method"] for r in json.loads(results_json.read_text())["runs"]] == ["full"]
  # Other settings refuse to merge; a missing file keeps nothing.
  with pytest.raises(paper_table.app.UsageError, match="settings"):
    paper_table.kept_runs(str(results_json), dict(settings, seed=2), set())
  assert paper_table.kept_runs(str(tmp_path / "missing.json"), settings, set()) == []


def _stand_in(tmp_path, monkeypatch):
  """(popen, calls): popen runs stand_in_runs.STAND_IN in place of run_classifier.py;
  calls gives each call's command as it was given, its flags and its directory."""
  program, calls = stand_in(tmp_path, monkeypatch)
  given = []

  def popen(cmd, **kwargs):
    given.append(list(cmd))
    return subprocess.Popen(program + list(cmd[2:]), **kwargs)
  return popen, lambda: [dict(c, command=cmd) for c, cmd in zip(calls(), given)]


def test_a_run_directory_this_script_did_not_write_is_refused_before_any_run(tmp_path):
  model_dir, data_root = tmp_path / "model", tmp_path / "data"
  model_dir.mkdir()
  data_root.mkdir()
  (model_dir / "bert_model.ckpt.index").write_bytes(b"")
  users = tmp_path / "out" / "wordnet_example" / "full"
  users.mkdir(parents=True)
  (users / "NOTES.md").write_text("the user's")
  earlier = tmp_path / "out" / "wordnet_example" / "head"  # An earlier run of the script's.
  earlier.mkdir()
  (earlier / "run.log").write_text("")

  def popen(*args, **kwargs):
    raise AssertionError("no run may start")

  fv = flags.FlagValues()
  paper_table.define_flags(fv)
  fv(["paper_table", "--tasks=wordnet_example", "--methods=head,full",
      f"--model_dir={model_dir}", f"--data_root={data_root}",
      f"--output_root={tmp_path / 'out'}", f"--results_json={tmp_path / 'table.json'}",
      f"--results_md={tmp_path / 'table.md'}"])
  with pytest.raises(errors.UserError) as refused:
    paper_table.main([], fv, popen=popen)
  assert str(refused.value) == (
      f"{users}: holds files but no run.log (no run of this script wrote it), and each run "
      f"empties its directory first: give another --output_root, or move them away")
  assert [p.name for p in users.iterdir()] == ["NOTES.md"]
  assert [p.name for p in earlier.iterdir()] == ["run.log"]
  assert not (tmp_path / "table.json").exists()
