"""experiments/points/runner.py, the one runner of the sweep, the paper table and the
multi-task comparison: resume, parallel points, records and failures, completions,
and results kept out of the design. The points run stand_in_runs.STAND_IN.
"""

import json
import os
import threading

from absl import flags
import pytest

from adapter_bert import errors
from experiments import sweep as sweep_lib
from experiments.points import grid as grid_lib
from experiments.points import runner as runner_lib
from experiments.points import runs
from experiments.points import tables
from stand_in_runs import accuracy, stand_in


@pytest.fixture
def fake(tmp_path, monkeypatch):
  return stand_in(tmp_path, monkeypatch)


def _points(program, root, rates, **kwargs):
  """A point per learning rate, each in ROOT/lr-RATE; seed 1."""
  return [runner_lib.Point(key=f"lr-{rate:g}", output_dir=os.path.join(root, f"lr-{rate:g}"),
                           command=runs.command(program, {"learning_rate": rate, "seed": 1},
                                                os.path.join(root, f"lr-{rate:g}")),
                           **kwargs) for rate in rates]


def test_a_done_point_is_skipped_and_records_are_written_as_points_finish(tmp_path, fake):
  program, calls = fake
  root = str(tmp_path / "runs")
  written, finished = [], []

  def write_results(records):  # The point's record is on disk and in the runner by then.
    written.append({k: r["metrics"]["eval_accuracy"] for k, r in records.items()})

  def runner(**kwargs):
    return runner_lib.Runner(_points(program, root, [1e-3, 2e-3, 3e-3]), log=lambda _: None,
                             write_results=write_results, **kwargs)

  first = runner(on_finished=lambda point, record: finished.append(
      (point.key, tables.read_json(os.path.join(point.output_dir, runs.RECORD_FILE)))))
  assert [p.key for p in first.pending()] == ["lr-0.001", "lr-0.002", "lr-0.003"]
  assert first.run() == {"ok": 3, "failed": 0, "pending": 0}
  assert len(calls()) == 3
  assert written[-1] == {f"lr-{r:g}": accuracy(r, seed=1) for r in (1e-3, 2e-3, 3e-3)}
  assert [len(w) for w in written] == [1, 2, 3]
  assert [(k, r["status"], r["command"]) for k, r in finished] == [
      (p.key, "ok", p.command) for p in first.points]
  assert finished[0][1] == first.records["lr-0.001"]

  # Resumed: the done points are skipped, the one whose record is gone (stopped
  # midway) or cut short (a crash while it was written) runs again.
  again = runner()
  assert again.pending() == [] and again.run()["ok"] == 3 and len(calls()) == 3
  os.remove(os.path.join(root, "lr-0.002", runs.RECORD_FILE))
  with open(os.path.join(root, "lr-0.003", runs.RECORD_FILE), "w") as f:
    f.write('{"status": "o')
  resumed = runner()
  assert [p.key for p in resumed.pending()] == ["lr-0.002", "lr-0.003"]
  assert resumed.run() == {"ok": 3, "failed": 0, "pending": 0}
  assert [c["args"]["learning_rate"] for c in calls()[3:]] == ["0.002", "0.003"]


def test_a_command_is_built_only_for_a_point_that_runs_and_before_any_runs(tmp_path, fake):
  program, calls = fake
  root = str(tmp_path / "runs")
  built = []
  done, todo = _points(program, root, [1e-3, 2e-3])
  tables.write_json(os.path.join(done.output_dir, runs.RECORD_FILE), {"status": "ok"})

  def lazy(point, fails=False):
    def command():
      built.append(point.key)
      if fails:
        raise errors.UserError("bad settings")
      return point.command
    return runner_lib.Point(point.key, point.output_dir, command)

  assert runner_lib.Runner([lazy(done), lazy(todo)], log=lambda _: None).run()["ok"] == 2
  assert built == ["lr-0.002"] and len(calls()) == 1
  bad = _points(program, root, [3e-3, 4e-3])
  with pytest.raises(errors.UserError, match="bad settings"):
    runner_lib.Runner([lazy(bad[0]), lazy(bad[1], fails=True)], log=lambda _: None).run()
  assert len(calls()) == 1  # Nothing ran: the second command failed before the first ran.


@pytest.mark.parametrize("parallel", [1, 3])
def test_parallel_runs_that_many_points_at_once(tmp_path, fake, monkeypatch, parallel):
  program, calls = fake
  monkeypatch.setenv("FAKE_SLEEP", "1.0")
  run = runner_lib.Runner(_points(program, str(tmp_path), [1e-3, 2e-3, 3e-3, 4e-3, 5e-3, 6e-3]),
                          parallel=parallel, log=lambda _: None)
  assert run.run() == {"ok": 6, "failed": 0, "pending": 0}
  spans = [(c["start"], c["end"]) for c in calls()]
  assert max(sum(s <= t < e for s, e in spans) for t, _ in spans) == parallel
  # The records by key in the points' order, whatever order they finished in.
  assert list(run.snapshot()) == [p.key for p in run.points]
  with pytest.raises(errors.UserError, match="--parallel=0: must be at least 1"):
    runner_lib.Runner([], parallel=0)


def test_a_failed_point_is_recorded_and_retried_on_request(tmp_path, fake, monkeypatch):
  program, calls = fake
  logs = []
  run = runner_lib.Runner(_points(program, str(tmp_path), [1.0, 1e-3]), log=logs.append)
  assert run.run() == {"ok": 1, "failed": 1, "pending": 0}
  failed = tables.read_json(os.path.join(str(tmp_path), "lr-1", runs.RECORD_FILE))
  assert failed["status"] == "failed" and failed["exit_code"] == 2
  assert "training diverged" in failed["error"] and failed["metrics"] == {}
  assert any(line.startswith("[1/2] lr-1: failed") for line in logs)
  # Done, failed or not; with retry_failed the failed one runs again.
  assert runner_lib.Runner(_points(program, str(tmp_path), [1.0, 1e-3])).pending() == []
  monkeypatch.setenv("FAKE_NO_FAIL", "1")
  retry = runner_lib.Runner(_points(program, str(tmp_path), [1.0, 1e-3]), retry_failed=True,
                            log=logs.append)
  assert [p.key for p in retry.pending()] == ["lr-1"]
  assert retry.run() == {"ok": 2, "failed": 0, "pending": 0} and len(calls()) == 3


def test_a_failure_that_raises_stops_the_run_and_is_not_recorded(tmp_path, fake):
  program, calls = fake
  seen, results = [], []

  def on_failure(point, cmd, measured):
    seen.append((point.key, cmd, measured["exit_code"]))
    raise errors.UserError(f"{point.key} failed")

  points = _points(program, str(tmp_path), [1e-3, 1.0, 2e-3, 3e-3])
  run = runner_lib.Runner(points, parallel=1, log=lambda _: None, on_failure=on_failure,
                          write_results=results.append)
  with pytest.raises(errors.UserError, match="^lr-1 failed$"):
    run.run()
  assert seen == [("lr-1", points[1].command, 2)]
  assert [c["args"]["learning_rate"] for c in calls()] == ["0.001", "1.0"]  # None after it.
  assert list(results[-1]) == ["lr-0.001"]
  assert not os.path.exists(os.path.join(points[1].output_dir, runs.RECORD_FILE))
  assert run.summary() == {"ok": 1, "failed": 0, "pending": 3}


def test_a_point_without_a_record_file_runs_every_time_in_a_fresh_directory(tmp_path, fake):
  program, calls = fake
  [point] = _points(program, str(tmp_path), [1e-3], record_file=None, fresh=True,
                    cwd=str(tmp_path), record=lambda measured, cmd: {
                        "accuracy": measured["metrics"]["eval_accuracy"]})
  stale = os.path.join(point.output_dir, "model.ckpt-1.index")
  for n in (1, 2):
    os.makedirs(point.output_dir, exist_ok=True)
    with open(stale, "w") as f:
      f.write("an earlier attempt's")
    run = runner_lib.Runner([point], log=lambda _: None)
    assert run.pending() == [point]
    run.run()
    assert run.records == {"lr-0.001": {"accuracy": accuracy(1e-3, seed=1)}}
    assert len(calls()) == n and calls()[-1]["cwd"] == str(tmp_path)
    assert not os.path.exists(stale)
    assert sorted(os.listdir(point.output_dir)) == ["eval_results.txt", "run.log"]


def test_a_done_point_that_lacks_an_output_runs_its_completion_once(tmp_path, fake):
  program, calls = fake
  finished = []
  [point] = _points(program, str(tmp_path), [1e-3])
  record = {"status": "ok", "wall_seconds": 7.0}
  tables.write_json(os.path.join(point.output_dir, runs.RECORD_FILE), record)
  results = os.path.join(point.output_dir, "eval_results.txt")
  point.complete = lambda: os.path.exists(results)
  point.completion = runs.command(program, {"learning_rate": 2e-3, "seed": 1}, point.output_dir)
  for _ in range(2):
    run = runner_lib.Runner([point], log=lambda _: None,
                            on_finished=lambda p, r: finished.append(p.key))
    assert run.pending() == []
    assert run.run() == {"ok": 1, "failed": 0, "pending": 0}
    assert run.records == {point.key: record}
  assert [c["args"]["learning_rate"] for c in calls()] == ["0.002"]  # Once, the completion.
  assert tables.read_json(os.path.join(point.output_dir, runs.RECORD_FILE)) == record
  assert finished == []  # Nothing newly recorded.


def test_stopped_points_are_not_recorded(tmp_path, fake, monkeypatch):
  program, calls = fake
  monkeypatch.setenv("FAKE_SLEEP", "30")
  run = runner_lib.Runner(_points(program, str(tmp_path), [1e-3, 2e-3, 3e-3]), parallel=2,
                          log=lambda _: None)
  threading.Timer(1.0, run.stop).start()
  assert run.run() == {"ok": 0, "failed": 0, "pending": 3}
  assert calls() == []  # SIGTERM ended both before they wrote; the third never started.
  assert not [p for p in run.points
              if os.path.exists(os.path.join(p.output_dir, runs.RECORD_FILE))]


def test_a_sweep_writes_no_result_into_its_design(tmp_path, fake):
  """The grid file and the sweep's sweep.json hold the design only, as given,
  however many points finish or fail; the results go to results.json/.csv."""
  program, calls = fake
  design = {"fixed": {"task_name": "tsv"}, "vary": {"learning_rate": [1e-3, 1.0]}}
  grid_file = tmp_path / "grid.json"
  grid_file.write_text(json.dumps(design, indent=1))
  before = grid_file.read_bytes()
  out = str(tmp_path / "sweep")
  fv = flags.FlagValues()
  sweep_lib.define_flags(fv)
  argv = fv(["sweep", f"--output_dir={out}", f"--grid={grid_file}",
             f"--program={' '.join(program)}"])
  for _ in range(2):
    assert sweep_lib.main(argv, fv) == 0
  assert len(calls()) == 2
  assert grid_file.read_bytes() == before
  saved = tables.read_json(os.path.join(out, sweep_lib.SWEEP_FILE))
  assert set(saved) == {"grid", "program"} and saved["program"] == program
  assert grid_lib.Grid.from_json(saved["grid"]).points() == grid_lib.Grid.from_json(
      design).points()
  assert not {"status", "eval_accuracy", "rows"} & set(json.dumps(saved).replace(
      '"', " ").split())
  results = tables.read_json(os.path.join(out, sweep_lib.RESULTS_JSON))
  assert [r["status"] for r in results["rows"]] == ["ok", "failed"]
