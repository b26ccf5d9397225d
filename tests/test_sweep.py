"""experiments/: grids and sweeps (resume, failures, parallel points); selection on dev
and plots: test_sweep_selection.py.

Most sweeps run a stand-in for run_classifier.py (stand_in_runs.STAND_IN, a few
lines of Python that write what run_classifier.py writes); one point runs the real
run_classifier.py on the tiny BERT, to hold the wiring and the parsing to it.
"""

import os
import pathlib
import threading

from absl import flags
import pytest

from experiments.points import data as data_lib
from experiments.points import grid as grid_lib
from experiments.points import runs
from experiments import sweep as sweep_lib
from experiments.points import tables
from adapter_bert.runtime import machine
from run_harness import run_main
from stand_in_runs import stand_in
from sweep_tables import csv_cell, read_csv
import tiny_bert

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def fake(tmp_path, monkeypatch):
  return stand_in(tmp_path, monkeypatch)


def _grid(fixed=(), vary=()):
  return grid_lib.Grid(fixed=grid_lib.parse_flags(fixed), vary=grid_lib.parse_axes(vary))


# Grids.

def test_grid_axes_bundles_union_and_flag_syntax():
  grid = _grid(["--task_name=tsv", "--do_lower_case", "--nouse_xla", "--learning_rate=3e-4"],
               ["train_mode/adapter_size=adapters/8,top_layers:3/0", "seed=1,2"])
  points = grid.points(sweep_lib.DEFAULTS)
  assert [p.vary for p in points] == [
      {"train_mode": "adapters", "adapter_size": 8, "seed": 1},
      {"train_mode": "adapters", "adapter_size": 8, "seed": 2},
      {"train_mode": "top_layers:3", "adapter_size": 0, "seed": 1},
      {"train_mode": "top_layers:3", "adapter_size": 0, "seed": 2}]
  assert grid_lib.flag_args(points[2].settings) == [
      "--do_train", "--do_eval", "--task_name=tsv", "--do_lower_case", "--nouse_xla",
      "--learning_rate=0.0003", "--train_mode=top_layers:3", "--adapter_size=0", "--seed=1"]
  assert points[2].name.startswith("mode-top_layers-3_size-0_seed-1-")
  assert len({p.name for p in points}) == 4
  # Another fixed flag is another point (the name's hash covers every setting).
  other = _grid(["--task_name=tsv", "--learning_rate=1e-3"], ["seed=1"]).points()[0]
  same = _grid(["--task_name=tsv", "--learning_rate=0.001"], ["seed=1"]).points()[0]
  assert other.name == same.name
  assert other.name != _grid(["--task_name=tsv"], ["seed=1"]).points()[0].name
  # Sweep keys stay out of the command; floats are exact; null leaves a flag out.
  assert grid_lib.flag_args({"train_examples": 100, "adapter_init_scale": 1e-07,
                             "text_b_column": None, "labels": ["a", "b"]}) == [
      "--adapter_init_scale=1e-07", "--labels=a,b"]

  union = grid_lib.Grid.from_json({
      "fixed": {"task_name": "tsv"}, "vary": {"seed": [1, 2]},
      "grids": [{"train_mode/adapter_size": [["adapters", 64]], "learning_rate": [1e-3, 1e-4]},
                {"train_mode": ["full"], "learning_rate": [1e-4]},
                {"train_mode": ["full"], "learning_rate": [1e-4]}]})  # Repeats run once.
  assert [(p.vary["train_mode"], p.vary["learning_rate"], p.vary["seed"])
          for p in union.points()] == [
      ("adapters", 1e-3, 1), ("adapters", 1e-4, 1), ("adapters", 1e-3, 2),
      ("adapters", 1e-4, 2), ("full", 1e-4, 1), ("full", 1e-4, 2)]
  assert union.varied_keys() == ["seed", "train_mode", "adapter_size", "learning_rate"]
  assert grid_lib.Grid.from_json(union.to_json()).points() == union.points()

  for bad, match in [(_grid(["--seed=1"], ["seed=1,2"]), "both fixed and varied"),
                     (_grid([], ["seed=1", "seed/lr=1/2"]), "two axes")]:
    with pytest.raises(grid_lib.GridError, match=match):
      bad.points()
  with pytest.raises(grid_lib.GridError, match="set by the sweep"):
    grid_lib.parse_flags(["--output_dir=x"])
  with pytest.raises(grid_lib.GridError, match="2 parts"):
    grid_lib.Axis.parse("train_mode/adapter_size=adapters/8,full")


# Sweeps with the stand-in runner.

def test_sweep_records_failures_resumes_and_retries(tmp_path, fake, monkeypatch):
  program, calls = fake
  out = str(tmp_path / "sweep")
  grid = _grid(["--task_name=tsv", "--data_dir=unused"],
               ["learning_rate=1e-3,1.0", "seed=1,2"])
  logs, finished = [], []

  def on_finished(record):  # Its record and the table's row are on disk by then.
    table = tables.read_json(os.path.join(out, "results.json"))
    finished.append((record["point"], tables.read_json(os.path.join(
        out, record["output_dir"], runs.RECORD_FILE)) == record,
        record["point"] in [r["point"] for r in table["rows"]]))

  sweep = sweep_lib.Sweep(grid, out, program, log=logs.append, on_finished=on_finished)
  assert sweep.run() == {"ok": 2, "failed": 2, "pending": 0}
  assert len(calls()) == 4
  assert finished == [(p.name, True, True) for p in sweep.points]
  rows = read_csv(os.path.join(out, "results.csv"))
  assert [(r["learning_rate"], r["seed"], r["status"], r["exit_code"]) for r in rows] == [
      ("0.001", "1", "ok", "0"), ("0.001", "2", "ok", "0"),
      ("1.0", "1", "failed", "2"), ("1.0", "2", "failed", "2")]
  ok, failed = rows[0], rows[2]
  assert ok["eval_accuracy"] == "0.584"  # 0.5 + 10 * lr + size / 1000 + seed / 100.
  assert ok["params_trainable"] == "1640" and ok["params_total"] == "100000"
  assert ok["trained_share"] == csv_cell(1640 / 100000)
  assert ok["method"] == "adapters_64" and ok["num_train_examples"] == "10"
  assert "training diverged" in failed["error"] and failed["eval_accuracy"] == ""
  # The JSON table has the same rows, typed.
  table = tables.read_json(os.path.join(out, "results.json"))
  assert [r["point"] for r in table["rows"]] == [r["point"] for r in rows]
  assert table["varied_keys"] == ["learning_rate", "seed"] and table["pending"] == []
  assert table["rows"][0]["eval_accuracy"] == pytest.approx(0.584)
  record = tables.read_json(os.path.join(out, ok["output_dir"], runs.RECORD_FILE))
  assert record["command"][:2] == program and record["settings"]["seed"] == 1

  # Run again: everything is done (failed points too).
  assert sweep_lib.Sweep(grid, out, program, log=logs.append).run()["pending"] == 0
  assert len(calls()) == 4
  # A point whose record is missing (stopped midway) runs again, alone.
  os.remove(os.path.join(out, rows[1]["output_dir"], runs.RECORD_FILE))
  sweep_lib.Sweep(grid, out, program, log=logs.append).run()
  assert len(calls()) == 5 and calls()[-1]["args"]["seed"] == "2"
  # --retry_failed runs the failed ones, which now succeed.
  monkeypatch.setenv("FAKE_NO_FAIL", "1")
  again = sweep_lib.Sweep(grid, out, program, retry_failed=True, log=logs.append)
  assert again.run() == {"ok": 4, "failed": 0, "pending": 0}
  assert len(calls()) == 7
  assert [r["status"] for r in read_csv(os.path.join(out, "results.csv"))] == ["ok"] * 4
  assert any("FAILED (exit 2)" in line for line in logs)


def test_a_sweep_keeps_a_users_files_in_its_directories(tmp_path, fake):
  # Issue 62 item 3: a command writing a directory never deletes files it did not
  # write. A sweep replaces only its tables and, in a point's directory, what
  # resuming needs (checkpoints, records) and an earlier attempt's results.
  program, calls = fake
  out = tmp_path / "sweep"
  grid = _grid(["--task_name=tsv", "--data_dir=unused"], ["learning_rate=1e-3"])
  sweep = sweep_lib.Sweep(grid, str(out), program, log=lambda line: None)
  point_dir = pathlib.Path(sweep.point_dir(sweep.points[0]))
  point_dir.mkdir(parents=True)
  users = {out / "NOTES.md": "the user's notes\n", point_dir / "mine.txt": "kept\n",
           point_dir / "model.ckpt.notes": "not a checkpoint\n"}
  for path, text in users.items():
    path.write_text(text)
  assert sweep.run() == {"ok": 1, "failed": 0, "pending": 0} and len(calls()) == 1
  assert {path: path.read_text() for path in users} == users


def test_a_resumed_point_is_timed_over_all_its_attempts(tmp_path, fake):
  """A point stopped midway twice (sittings that ended) and resumed a third time:
  its wall time adds the earlier attempts, each from run_logged's "====" line to
  its last timed line (absl's lines have no year; TensorFlow's C++ lines do)."""
  program, calls = fake
  out = str(tmp_path / "point")
  os.makedirs(out)
  log = ("==== 2026-12-31T23:50:00 python run_classifier.py --learning_rate=0.001\n"
         "2026-12-31 23:50:04.967328: E external/cuda_platform.cc:51] failed call to cuInit\n"
         "I1231 23:50:10.000001 1406 loop.py:154] ***** Running training *****\n"
         "I0101 00:05:50.568748 1406 loop.py:249] global_step = 2745\n"  # 950 s in.
         "  a line without a time\n"
         "==== 2027-01-01T08:59:00 python run_classifier.py --learning_rate=0.001\n"
         "W0101 08:59:30.100000 1406 loop.py:1] resumed\n"  # 30 s in.
         "==== 2027-01-01T09:00:00 python run_classifier.py --learning_rate=0.001\n"
         "I0101 12:00:00.000000 1406 loop.py:1] the last attempt is timed as it runs\n")
  assert runs.earlier_attempts_seconds(log) == 950 + 30
  assert runs.earlier_attempts_seconds(log.split("==== 2027-01-01T08")[0]) == 0
  with open(os.path.join(out, runs.LOG_FILE), "w") as f:
    f.write(log.rpartition("====")[0])
  measured = runs.run(runs.command(program, {"learning_rate": 1e-3}, out), out)
  call, = calls()
  assert measured["status"] == "ok"
  assert 980 + (call["end"] - call["start"]) < measured["wall_seconds"] < 980 + 60


def test_parallel_points_run_concurrently(tmp_path, fake, monkeypatch):
  program, calls = fake
  monkeypatch.setenv("FAKE_SLEEP", "1.0")
  grid = _grid(["--learning_rate=1e-3"], ["seed=1,2,3,4"])
  sweep = sweep_lib.Sweep(grid, str(tmp_path / "sweep"), program, parallel=2, log=print)
  assert sweep.run() == {"ok": 4, "failed": 0, "pending": 0}
  spans = [(c["start"], c["end"]) for c in calls()]
  running = [sum(s <= t < e for s, e in spans) for t, _ in spans]
  assert max(running) == 2  # Two at once, never more.
  # Rows keep grid order whatever order the points finished in.
  rows = tables.read_json(os.path.join(str(tmp_path / "sweep"), "results.json"))["rows"]
  assert [r["seed"] for r in rows] == [1, 2, 3, 4]


def test_stopped_points_stay_pending(tmp_path, fake, monkeypatch):
  program, calls = fake
  monkeypatch.setenv("FAKE_SLEEP", "30")
  out = str(tmp_path / "sweep")
  grid = _grid(["--learning_rate=1e-3"], ["seed=1,2,3"])
  sweep = sweep_lib.Sweep(grid, out, program, parallel=2, log=print)
  # What Ctrl-C or SIGTERM does (main thread): SIGTERM to the running points.
  threading.Timer(1.0, sweep.stop).start()
  assert sweep.run() == {"ok": 0, "failed": 0, "pending": 3}
  assert tables.read_json(os.path.join(out, "results.json"))["rows"] == []
  monkeypatch.setenv("FAKE_SLEEP", "0")
  assert sweep_lib.Sweep(grid, out, program, log=print).run()["ok"] == 3


def _write_tsv(path, header, rows):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.write("\n".join(["\t".join(header)] + ["\t".join(r) for r in rows]) + "\n")


def test_training_set_subsets_and_steps(tmp_path, fake):
  program, calls = fake
  task = str(tmp_path / "task")
  train = [(f"r{i}", f"text {i}", "c" if i == 7 else "ab"[i % 2]) for i in range(20)]
  _write_tsv(os.path.join(task, "train.tsv"), ["id", "sentence", "label"], train)
  with open(os.path.join(task, "train.tsv"), "a") as f:
    f.write("\n")  # A blank line is not a row.
  _write_tsv(os.path.join(task, "dev.tsv"), ["id", "sentence", "label"], [("d", "x", "c")])
  _write_tsv(os.path.join(task, "test.tsv"), ["id", "sentence"], [("t", "y")])
  out = str(tmp_path / "sweep")
  grid = _grid(["--task_name=tsv", f"--data_dir={task}", "--learning_rate=1e-3",
                "--train_batch_size=4"],
               ["train_examples=5,10,all", "train_steps=3"])
  assert sweep_lib.Sweep(grid, out, program, log=print).run()["ok"] == 3
  by_n = {}
  for call in calls():
    with open(os.path.join(call["args"]["data_dir"], "train.tsv")) as f:
      by_n[sum(1 for line in f if line.strip()) - 1] = call["args"]
  assert sorted(by_n) == [5, 10, 20]
  for n, args in by_n.items():
    assert int(n / 4 * float(args["num_train_epochs"])) == 3  # run_classifier's step count.
    # A subset gets the full file's labels, even where it lacks c; all rows need none.
    assert args.get("labels") == (None if n == 20 else "a,b,c")
  five, ten = by_n[5]["data_dir"], by_n[10]["data_dir"]
  assert by_n[20]["data_dir"] == task
  with open(os.path.join(five, "train.tsv")) as f:
    five_rows = f.read().splitlines()
  with open(os.path.join(ten, "train.tsv")) as f:
    ten_rows = f.read().splitlines()
  assert five_rows[0] == "id\tsentence\tlabel" and len(five_rows) == 6 and len(ten_rows) == 11
  assert set(five_rows) < set(ten_rows)  # Random subsets of one seed are nested.
  for name in ("dev.tsv", "test.tsv"):  # The task's own, copied.
    with open(os.path.join(five, name)) as f, open(os.path.join(task, name)) as g:
      assert f.read() == g.read()
  rows = read_csv(os.path.join(out, "results.csv"))
  assert [r["num_train_examples"] for r in rows] == ["5", "10", "20"]
  # A task whose training file has no header (CoLA); the first rows.
  cola = data_lib.prepare_subset(os.path.join(REPO, "data", "glue", "CoLA"), "cola", 3,
                                 "first", 0, str(tmp_path / "data"))
  with open(os.path.join(REPO, "data", "glue", "CoLA", "train.tsv")) as f:
    first = f.read().splitlines()[:3]
  with open(os.path.join(cola, "train.tsv")) as f:
    assert f.read().splitlines() == first
  with pytest.raises(grid_lib.GridError, match="has 20 training rows"):
    sweep_lib.Sweep(_grid([f"--data_dir={task}", "--task_name=tsv"], ["train_examples=21"]),
                    out, program, log=print).run()


def test_command_line_dry_run_and_saved_grid(tmp_path, fake, capsys):
  program, calls = fake
  out = str(tmp_path / "sweep")

  def run_main(*args):
    fv = flags.FlagValues()
    sweep_lib.define_flags(fv)
    argv = fv(["sweep", f"--output_dir={out}", f"--program={' '.join(program)}", *args])
    return sweep_lib.main(argv, fv)

  assert run_main("--vary=learning_rate=1e-4,1e-3", "--dry_run", "--",
                  "--task_name=tsv", "--nodo_lower_case") == 0
  printed = capsys.readouterr().out.splitlines()
  assert len(printed) == 4 and printed[1].endswith(
      "--do_train --do_eval --task_name=tsv --nodo_lower_case --learning_rate=0.0001 "
      f"--output_dir={out}/runs/{printed[0][2:]}")
  assert calls() == []
  assert run_main("--vary=learning_rate=1e-4,1e-3", "--", "--task_name=tsv") == 0
  assert len(calls()) == 2
  assert run_main() == 0  # Only --output_dir: its sweep.json, all done.
  assert len(calls()) == 2
  assert run_main("--vary=seed") == 2  # A grid error: one line, status 2.
  assert "ERROR: " in capsys.readouterr().err


# One real point: run_classifier.py on the tiny BERT.

def test_real_run_classifier_point(tmp_path):
  base = str(tmp_path / "base")
  config, vocab, ckpt, _ = tiny_bert.write_google_dir(base)
  out = str(tmp_path / "sweep")
  fv = flags.FlagValues()
  sweep_lib.define_flags(fv)
  argv = fv(["sweep", f"--output_dir={out}", "--vary=train_examples=6",
             "--vary=train_mode/adapter_size=adapters/8", "--",
             "--task_name=MRPC", f"--data_dir={os.path.join(REPO, 'data', 'glue', 'MRPC')}",
             f"--bert_config_file={config}", f"--vocab_file={vocab}",
             f"--init_checkpoint={ckpt}", "--max_seq_length=32", "--train_batch_size=4",
             "--eval_batch_size=4", "--learning_rate=1e-3", "--num_train_epochs=2",
             "--seed=1", "--subset=first"])
  assert sweep_lib.main(argv, fv) == 0
  [row] = tables.read_json(os.path.join(out, "results.json"))["rows"]
  assert row["status"] == "ok", row["error"]
  with open(os.path.join(out, "results.csv")) as f:
    header = f.readline().strip().split(",")
  assert header[:6] == ["point", "status", "exit_code", "train_examples", "train_mode",
                        "adapter_size"]
  assert len(header) == len(set(header)) and "eval_f1" in header
  point_dir = os.path.join(out, row["output_dir"])
  with open(os.path.join(point_dir, "eval_results.txt")) as f:
    written = runs.parse_eval_results(f.read())
  assert sorted(written) == ["eval_accuracy", "eval_f1", "eval_loss", "global_step", "loss"]
  assert {k: row[k] for k in written} == written
  h, layers, m, labels = 32, 2, 8, 2  # tiny_bert.TINY_CONFIG, adapter size, MRPC's labels.
  trainable = 2 * layers * (2 * m * h + h + m) + (2 * h + layers * 4 * h) + labels * (h + 1)
  assert row["params_trainable"] == trainable and row["params_adapter"] == 2208
  assert row["num_train_examples"] == 6 and row["global_step"] == int(6 / 4 * 2)
  assert row["num_train_steps"] == 3
  assert (row["method"], row["train_mode"], row["adapter_size"]) == ("adapters_8",
                                                                     "adapters", 8)
  assert row["wall_seconds"] > 0
  # Its wall time with the CPU that took it (the study prices pending points per CPU).
  assert row["machine"] == machine.cpu_line()
  names = os.listdir(point_dir)
  assert "adapter_model" in names and runs.LOG_FILE in names
  assert not [n for n in names if n.startswith("model.ckpt-") or ".tf_record" in n]
  # The recorded metrics are those of the model this point trained: its adapters,
  # evaluated again in this process on the task's dev set.
  reference = str(tmp_path / "reference")
  run_main(task_name="MRPC", data_dir=os.path.join(REPO, "data", "glue", "MRPC"),
           bert_config_file=config, vocab_file=vocab, init_checkpoint=ckpt,
           adapter_checkpoint=os.path.join(point_dir, "adapter_model"), adapter_size=8,
           max_seq_length=32, eval_batch_size=4, output_dir=reference, do_eval=True)
  with open(os.path.join(reference, "eval_results.txt")) as f:
    evaluated = runs.parse_eval_results(f.read())
  for key in ("eval_accuracy", "eval_f1", "eval_loss", "global_step"):
    assert row[key] == pytest.approx(evaluated[key], abs=1e-6), key


def test_example_grids_parse():
  # The trade-off: 48 points of Houlsby adapters and the baselines, then 3
  # other designs x 3 sizes x 2 rates x 3 seeds.
  counts = {"wordnet_lexname_tradeoff.json": 48 + 54, "wordnet_lexname_data_size.json": 18,
            "wordnet_lexname_init_scale.json": 18,
            # Houlsby 8 and 64 at one rate, the 3 other designs at 2 rates, 3 seeds;
            # a fusion per seed, each its own bank task.
            "wordnet_lexname_designs.json": (2 + 2 * 3 * 2) * 3 + 3}
  for name, count in counts.items():
    grid = grid_lib.Grid.from_json(tables.read_json(
        os.path.join(REPO, "experiments", "grids", name)))
    points = grid.points(sweep_lib.DEFAULTS)
    assert len(points) == count, name
    for point in points:
      grid_lib.flag_args(point.settings)

