"""Ctrl-C (SIGINT) and SIGTERM (how schedulers and cloud TPUs preempt) as a request to stop.

Within `StopSignals`, either signal only records itself; the training and
prediction loops check it between host calls, save what must be saved and
raise `Stopped`, which ends the process with the status a shell reports for
that signal (130 for Ctrl-C, 143 for SIGTERM), without a traceback. A second
Ctrl-C while the checkpoint is being saved is recorded too, so the save
finishes whole instead of being cut by a KeyboardInterrupt.
"""

import signal
import threading
from typing import Optional

SIGNALS = (signal.SIGINT, signal.SIGTERM)

def exit_status(signum: int) -> int:
  """What a shell reports for a process that `signum` ended (130 for SIGINT)."""
  return 128 + int(signum)


# What a shell reports for a process that SIGTERM ended (143).
TERMINATED_EXIT_STATUS = exit_status(signal.SIGTERM)


def name(signum: int) -> str:
  """SIGINT or SIGTERM, as the log lines say it."""
  return signal.Signals(signum).name


class Stopped(SystemExit):
  """Ends the run after a stop signal was handled (or the TPU was lost:
  runtime/loop.py): the shell's status for `signum`, no traceback (absl's
  app.run lets a SystemExit through)."""

  def __init__(self, signum: int = signal.SIGTERM):
    super().__init__(exit_status(signum))


class StopSignals:
  """Within `with`, SIGINT and SIGTERM set `received` (the first signal's
  number) instead of ending the process.

  Python runs the handler in the main thread between bytecodes, so a signal
  that arrives during a compiled call is seen when the call returns; the
  caller checks `received` there. The previous handlers are put back on exit.
  Off the main thread (where no handler can be set), or with enabled=False,
  the signals keep their previous meaning.
  """

  def __init__(self, enabled: bool = True):
    self.received: Optional[int] = None
    self._enabled = enabled and threading.current_thread() is threading.main_thread()
    self._previous = {}

  def _handle(self, signum, frame):
    del frame
    if self.received is None:
      self.received = signum

  def __enter__(self) -> "StopSignals":
    if self._enabled:
      for signum in SIGNALS:
        self._previous[signum] = signal.signal(signum, self._handle)
    return self

  def __exit__(self, *exc_info) -> bool:
    for signum, previous in self._previous.items():
      # None: a handler not set from Python; the default is the closest.
      signal.signal(signum, signal.SIG_DFL if previous is None else previous)
    self._previous = {}
    return False
