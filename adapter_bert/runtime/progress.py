"""How many steps each compiled host call runs, and when a progress line is printed.

TPUEstimator ran `iterations_per_loop` steps per host call (1000 by default)
and logged once per call. On a TPU that keeps the host out of the way, and is
kept. On a CPU or GPU a call of 1000 steps runs for many minutes in silence,
and a host call costs next to nothing there, so calls are cut to at most
`LOG_EVERY_STEPS` steps and, once a step's time is known, to about
`CALL_SECONDS` of work; a line is printed every `LOG_EVERY_STEPS` steps or
`LOG_EVERY_SECONDS` seconds, whichever comes first.

Evaluation and prediction (runtime/prediction.py) size their calls the same
way (`CallSizes`), to about `PREDICT_CALL_SECONDS`, without progress lines: a
Ctrl-C or SIGTERM, seen between calls, acts within about that long.
"""

import time
from typing import Callable, Optional

LOG_EVERY_STEPS = 100
LOG_EVERY_SECONDS = 30.0
CALL_SECONDS = 5.0
# Evaluation and prediction: nothing to log or save between calls, only the stop
# delay to keep short. A call costs about a millisecond of the host's time (on a
# 2-core CPU), so 2-s calls run as fast as calls of 1000 batches.
PREDICT_CALL_SECONDS = 2.0


class CallSizes:
  """How many steps each compiled host call runs (training's and prediction's).

  `iterations_per_loop` on a TPU (`one_call_per_loop`). Elsewhere one step for
  the first two calls (the first also traces and compiles; the second times a
  step), then as many as the last call's time per step fits into about
  `call_seconds`, at most `iterations_per_loop`.
  """

  def __init__(self, iterations_per_loop: int, one_call_per_loop: bool,
               pace_by_time: bool = True, call_seconds: Optional[float] = None):
    """
    Args:
      pace_by_time: size calls by time (above). Off where every worker must run
        the same steps per call (several machines): a worker's own timing would
        differ from the others'. Calls then hold up to LOG_EVERY_STEPS steps.
      call_seconds: the work of one call; None: CALL_SECONDS (training's).
    """
    self._iterations_per_loop = max(int(iterations_per_loop), 1)
    self._one_call_per_loop = one_call_per_loop
    self._pace_by_time = pace_by_time
    self._call_seconds = call_seconds
    self._seconds_per_step: Optional[float] = None
    self.calls = 0

  def steps_for_next_call(self, at_most: int) -> int:
    """The next call's steps; off a TPU, at most `at_most`."""
    if self._one_call_per_loop:
      return self._iterations_per_loop
    n = min(self._iterations_per_loop, at_most)
    if self.calls < 2:
      return 1  # The first call also compiles; the second times one step.
    if self._pace_by_time:
      seconds = CALL_SECONDS if self._call_seconds is None else self._call_seconds
      n = min(n, int(seconds / self._seconds_per_step))
    else:
      n = min(n, LOG_EVERY_STEPS)
    return max(1, n)

  def record(self, num_steps: int, call_seconds: float) -> None:
    """Takes the steps and duration of the call just made."""
    self.calls += 1
    if self.calls > 1:  # The first includes tracing and compiling: not a step time.
      self._seconds_per_step = max(call_seconds, 1e-9) / num_steps


class Progress:
  """Paces the training loop's host calls and reports step, loss, speed and time left."""

  def __init__(self, start_step: int, num_train_steps: int, batch_size: int,
               iterations_per_loop: int, one_call_per_loop: bool,
               pace_by_time: bool = True,
               clock: Callable[[], float] = time.monotonic):
    """
    Args:
      one_call_per_loop: run `iterations_per_loop` steps per host call and
        report after each (TPU), instead of the pacing above.
      pace_by_time: also cut calls to about CALL_SECONDS of work. Off where
        every worker must run the same steps per call (several machines): a
        worker's own timing would differ from the others'.
    """
    self._num_train_steps = num_train_steps
    self._batch_size = batch_size
    self._one_call_per_loop = one_call_per_loop
    self._sizes = CallSizes(iterations_per_loop, one_call_per_loop, pace_by_time)
    self._clock = clock
    self._last_step, self._last_time = start_step, clock()
    self._loss_sum, self._loss_steps = 0.0, 0

  def steps_for_next_call(self, step: int) -> int:
    # End calls on multiples of LOG_EVERY_STEPS since the last line.
    return self._sizes.steps_for_next_call(
        LOG_EVERY_STEPS - (step - self._last_step) % LOG_EVERY_STEPS)

  def record(self, step: int, num_steps: int, mean_loss: float,
             call_seconds: float) -> Optional[str]:
    """Takes one host call's result; returns a progress line when one is due."""
    self._sizes.record(num_steps, call_seconds)
    self._loss_sum += mean_loss * num_steps
    self._loss_steps += num_steps
    now = self._clock()
    due = (self._one_call_per_loop or step >= self._num_train_steps
           or step - self._last_step >= LOG_EVERY_STEPS
           # The next call may take CALL_SECONDS: print now rather than late.
           or now - self._last_time >= LOG_EVERY_SECONDS - CALL_SECONDS)
    if not due:
      return None
    steps_per_sec = (step - self._last_step) / max(now - self._last_time, 1e-9)
    left = (self._num_train_steps - step) / max(steps_per_sec, 1e-9)
    line = (f"global_step = {step}, loss = {self._loss_sum / self._loss_steps:.6f}, "
            f"steps/sec = {steps_per_sec:.2f}, examples/sec = "
            f"{steps_per_sec * self._batch_size:.1f}, time left = {_duration(left)}")
    self._last_step, self._last_time = step, now
    self._loss_sum, self._loss_steps = 0.0, 0
    return line


def _duration(seconds: float) -> str:
  seconds = int(round(seconds))
  if seconds < 60:
    return f"{seconds} s"
  minutes, seconds = divmod(seconds, 60)
  if minutes < 60:
    return f"{minutes} min {seconds:02d} s"
  hours, minutes = divmod(minutes, 60)
  return f"{hours} h {minutes:02d} min"
