"""experiments/study/cost.py, as the study's page uses it: the hours measured, and the
pending points priced by their steps at the rates finished points took, per CPU.

Every rate and total is worked out by hand in the comments.
"""

import os

from experiments.points import grid as grid_lib
from experiments.study import results as study_results
from study_files import write_text


def test_cost_measures_finished_points_and_estimates_pending_ones_by_steps(tmp_path):
  from experiments.study import cost
  from experiments.points import runs
  from experiments import sweep as sweep_lib
  from experiments.points import tables
  data = tmp_path / "task"
  write_text(str(data / "train.tsv"), "sentence\tlabel\n" + "".join(f"s{i}\ta\n" for i in range(25)))
  fixed = {"task_name": "tsv", "data_dir": str(data), "train_batch_size": 10}
  # 25 rows, batch 10, 2 epochs: int(25 / 10 * 2) = 5 steps, as run_classifier.py.
  methods = sweep_lib.Sweep(grid_lib.Grid.from_json(
      {"fixed": dict(fixed, num_train_epochs=2), "vary": {"seed": [1, 2, 3]}}),
      str(tmp_path / "methods"))
  # Given as steps: 40 each, none finished.
  sizes = sweep_lib.Sweep(grid_lib.Grid.from_json(
      {"fixed": fixed, "vary": {"seed": [1, 2], "train_steps": [40]}}),
      str(tmp_path / "sizes"))
  assert [cost.point_steps(p.settings, {}) for p in methods.points + sizes.points] == [
      5, 5, 5, 40, 40]

  def finish_first(sweep, seconds, steps):
    """The sweep, read again after its first point finished in `seconds`."""
    first = sweep.points[0]
    tables.write_json(os.path.join(sweep.point_dir(first), runs.RECORD_FILE),
                      {"point": first.name, "status": "ok", "wall_seconds": seconds,
                       "num_train_steps": steps})
    return sweep_lib.Sweep(sweep.grid, sweep.output_dir)

  # Seed 1 finished in an hour: 720 s a step.
  methods = finish_first(methods, 3600, 5)
  # On a second task u, a sizes point finished at 360 s a step; u's methods
  # have none finished.
  sizes_u = finish_first(sweep_lib.Sweep(sizes.grid, str(tmp_path / "sizes_u")), 14400, 40)
  methods_u = sweep_lib.Sweep(methods.grid, str(tmp_path / "methods_u"))
  # Runs that are not a sweep's: one finished, 10 steps in half an hour; two pending.
  multitask = cost.Runs([{"status": "ok", "wall_seconds": 1800, "global_step": 10}], 2,
                        lambda: 20 + 40)
  # Tasks v and w train on length-grouped batches: w's sizes point finished at
  # 90 s a step; v's methods, none finished, take the grouped sweeps' rate, not
  # the methods part's random-batch one (t's 720 s).
  grouped = lambda sweep: grid_lib.Grid.from_json(dict(
      sweep.grid.to_json(), fixed=dict(sweep.grid.to_json()["fixed"], group_by_length=True)))
  sizes_w = finish_first(sweep_lib.Sweep(grouped(sizes), str(tmp_path / "sizes_w")), 3600, 40)
  methods_v = sweep_lib.Sweep(grouped(methods), str(tmp_path / "methods_v"))
  text = "\n".join(cost.section([("methods", "t", methods), ("sizes", "t", sizes),
                                 ("methods", "u", methods_u), ("sizes", "u", sizes_u),
                                 ("multitask", "lr-1", multitask), ("methods", "v", methods_v),
                                 ("sizes", "w", sizes_w)], "Two parts."))
  # Pending: 2 x 5 steps x 720 s = 2 h; the sizes part has no finished point on
  # t, so task t's rate: 2 x 40 x 720 s = 16 h; methods on u take u's rate
  # (not the methods part's): 3 x 5 x 360 s = 1.5 h.
  assert "| methods | t | 3 | 1 | 1.00 | 2 | 2.0 (720.00 s/step) |" in text
  assert "| sizes | t | 2 | 0 | 0.00 | 2 | 16.0 (720.00 s/step) |" in text
  assert "| methods | u | 3 | 0 | 0.00 | 3 | 1.5 (360.00 s/step) |" in text
  assert "| sizes | u | 2 | 1 | 4.00 | 1 | 4.0 (360.00 s/step) |" in text
  # The runs at their own 180 s a step: 60 steps = 3 h.
  assert "| multitask | lr-1 | 3 | 1 | 0.50 | 2 | 3.0 (180.00 s/step) |" in text
  # v: 3 x 5 steps x 90 s = 0.375 h; w: 40 x 90 s = 1 h.
  assert "| methods | v | 3 | 0 | 0.00 | 3 | 0.4 (90.00 s/step) |" in text
  assert "| sizes | w | 2 | 1 | 1.00 | 1 | 1.0 (90.00 s/step) |" in text
  assert "| all | | 18 | | 6.50 | 14 | 27.9 |" in text
  assert "\nTwo parts. Hours measured are the finished points' own wall times" in text


def test_cost_prices_the_pending_at_the_rate_measured_on_the_newest_sittings_cpu():
  """Points on two CPUs: the estimate takes the newest sitting's CPU's rate where
  the chain finds a point on it, else every CPU's (marked *); the hours measured
  are summed per CPU. A record names its CPU, or its sitting's span does."""
  from experiments.study import cost
  sittings = [
      {"started": "2026-01-01T10:00:00", "last_finished": "2026-01-01T12:00:00",
       "machine": "slow CPU"},
      {"started": "2026-01-02T10:00:00", "last_finished": "2026-01-02T12:00:00",
       "machine": "fast CPU"},
      {"started": "2026-01-03T10:00:00", "last_finished": "2026-01-03T12:00:00"}]
  assert study_results.newest_cpu(sittings) == "fast CPU"
  assert study_results.newest_cpu([]) is None
  machine_of = study_results.machine_of_run(sittings)
  slow = {"status": "ok", "wall_seconds": 400, "num_train_steps": 100,
          "finished_at": "2026-01-01T11:00:00"}     # 4 s a step, in the first sitting
  fast = {"status": "ok", "wall_seconds": 100, "num_train_steps": 100,
          "finished_at": "2026-01-02T10:30:00"}     # 1 s a step, in the second
  named = {"status": "ok", "wall_seconds": 200, "num_train_steps": 100,
           "finished_at": "2026-01-01T11:00:00", "machine": "fast CPU"}  # its own word wins
  unknown = {"status": "ok", "wall_seconds": 3600, "num_train_steps": 100,
             "finished_at": "2026-01-03T11:00:00"}  # a sitting that named no CPU
  assert [machine_of(r) for r in (slow, fast, named, unknown)] == [
      "slow CPU", "fast CPU", "fast CPU", None]
  ten_steps = lambda: 10 * 100
  text = "\n".join(cost.section(
      [("a", "t", cost.Runs([slow, fast, named], 10, ten_steps)),
       ("b", "t", cost.Runs([slow], 10, ten_steps)),
       ("c", "u", cost.Runs([slow, unknown], 10, ten_steps))],
      "Three sweeps.", cpu="fast CPU", machine_of=machine_of))
  # a: its own points on the fast CPU, (100 + 200) s / 200 steps = 1.5 s a step,
  # not the 2.33 of all three: 1000 steps x 1.5 s.
  assert "| a | t | 13 | 3 | 0.19 | 10 | 0.4 (1.50 s/step) |" in text
  # b: none of its own on the fast CPU, so task t's fast points (1.5 s), not its
  # own slow one (4 s).
  assert "| b | t | 11 | 1 | 0.11 | 10 | 0.4 (1.50 s/step) |" in text
  # c: neither c nor task u has a fast point; the next pool, the part's with
  # the same batches, neither; then any with the same batches: a's, 1.5 s.
  assert "| c | u | 12 | 2 | 1.11 | 10 | 0.4 (1.50 s/step) |" in text
  assert ("Hours measured, by the CPU that ran them: fast CPU: 0.08 h (2 runs); "
          "slow CPU: 0.33 h (3 runs); a CPU not recorded: 1.00 h (1 run).") in text
  # Priced for a CPU none ran on: every CPU's rates, marked.
  text = "\n".join(cost.section([("a", "t", cost.Runs([slow, fast], 10, ten_steps))],
                                "One sweep.", cpu="new CPU", machine_of=machine_of))
  assert "| a | t | 12 | 2 | 0.14 | 10 | 0.7 (2.50 s/step*) |" in text
  assert "a rate marked * is of points on other CPUs, where none of those ran on new CPU" in text
