"""runtime/progress: host-call pacing and progress lines, on a fake clock."""

from adapter_bert.runtime import progress


class FakeClock:
  def __init__(self):
    self.now = 0.0

  def __call__(self):
    return self.now


def _run(p, clock, step, num_steps, seconds_per_step, compile_seconds=0.0):
  """Runs the loop as runtime/loop.train does; returns (calls, lines)."""
  calls, lines = [], []
  while step < num_steps:
    n = min(p.steps_for_next_call(step), num_steps - step)
    seconds = n * seconds_per_step + (compile_seconds if not calls else 0.0)
    clock.now += seconds
    step += n
    calls.append(n)
    line = p.record(step, n, 0.5, seconds)
    if line:
      lines.append((clock.now, line))
  return calls, lines


def test_slow_steps_give_a_line_at_least_every_30_seconds():
  clock = FakeClock()
  p = progress.Progress(0, 1000, 32, iterations_per_loop=1000, one_call_per_loop=False,
                        clock=clock)
  calls, lines = _run(p, clock, 0, 1000, seconds_per_step=2.0, compile_seconds=40.0)
  # One step to compile, one to time it, then calls of CALL_SECONDS of work.
  assert calls[:3] == [1, 1, 2]
  assert max(calls) == 2
  times = [0.0] + [t for t, _ in lines]
  assert max(b - a for a, b in zip(times[1:], times[2:])) <= 30.0
  assert lines[-1][1].startswith("global_step = 1000, loss = 0.500000, steps/sec = 0.50, "
                                 "examples/sec = 16.0, time left = 0 s")


def test_fast_steps_give_a_line_every_100_steps():
  clock = FakeClock()
  p = progress.Progress(0, 1000, 8, iterations_per_loop=1000, one_call_per_loop=False,
                        clock=clock)
  calls, lines = _run(p, clock, 0, 1000, seconds_per_step=0.001)
  assert sum(calls) == 1000 and max(calls) == 100
  steps = [int(line.split(",")[0].split("=")[1]) for _, line in lines]
  assert steps == list(range(100, 1001, 100))
  # 100 steps in 0.1 s: 1000 steps/s, 8000 examples/s, 900 steps left = 0.9 s.
  assert "steps/sec = 1000.00, examples/sec = 8000.0, time left = 1 s" in lines[0][1]


def test_tpu_keeps_iterations_per_loop_and_one_line_per_call():
  clock = FakeClock()
  p = progress.Progress(200, 1000, 32, iterations_per_loop=300, one_call_per_loop=True,
                        clock=clock)
  calls, lines = _run(p, clock, 200, 1000, seconds_per_step=0.5)
  assert calls == [300, 300, 200]
  assert len(lines) == 3
  assert "time left = 4 min 10 s" in lines[0][1]  # 500 steps at 2 steps/s.


def test_several_machines_pace_by_steps_only():
  """Every worker must run the same steps per call, whatever its own timing."""
  calls = []
  for seconds_per_step in (0.1, 3.0):
    clock = FakeClock()
    p = progress.Progress(0, 250, 32, iterations_per_loop=1000, one_call_per_loop=False,
                          pace_by_time=False, clock=clock)
    calls.append(_run(p, clock, 0, 250, seconds_per_step)[0])
  assert calls[0] == calls[1] == [1, 1, 98, 100, 50]
