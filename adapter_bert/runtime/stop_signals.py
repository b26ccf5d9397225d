"""Ctrl-C (SIGINT) and SIGTERM (how schedulers and cloud TPUs preempt) as a request to stop.

Within `StopSignals`, either signal only records itself; the training and
prediction loops check it between host calls, save what must be saved and
raise `Stopped`, which ends the process with the status a shell reports for
that signal (130 for Ctrl-C, 143 for SIGTERM), without a traceback. A second
Ctrl-C while the checkpoint is being saved is recorded too, so the save
finishes whole instead of being cut by a KeyboardInterrupt.

A command that runs training children (the experiments' sweeps, studies and
comparisons) stops otherwise: within `interrupts` the first signal raises
`Interrupted` where it waits, it passes SIGTERM on to its children (each saves
its step as above) and waits for them, later signals only recorded; then
`exit_on_interrupt` ends it with one line and the same exit status.
"""

import contextlib
import signal
import sys
import threading
from typing import Callable, Optional

from absl import logging

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


class Interrupted(KeyboardInterrupt):
  """What `interrupts` raises on the first SIGINT or SIGTERM; `signum` says which."""

  def __init__(self, signum: int):
    super().__init__(name(signum))
    self.signum = signum


@contextlib.contextmanager
def interrupts():
  """Within it, the first SIGINT or SIGTERM raises `Interrupted` in the main thread;
  any later one is only recorded, so that a command's clean-up (waiting for its
  children to save their checkpoints) is not cut short by a second Ctrl-C. The
  previous handlers are put back on exit. Off the main thread (a test's), or
  within another `interrupts` (a study runs comparisons), nothing changes."""
  global _interrupts_active
  if _interrupts_active or threading.current_thread() is not threading.main_thread():
    yield
    return
  received = []

  def handle(signum, frame):
    del frame
    received.append(signum)
    if len(received) == 1:
      raise Interrupted(signum)
  previous = {signum: signal.signal(signum, handle) for signum in SIGNALS}
  _interrupts_active = True
  try:
    yield
  finally:
    _interrupts_active = False
    for signum, handler in previous.items():
      signal.signal(signum, signal.SIG_DFL if handler is None else handler)


_interrupts_active = False  # Whether the main thread is within `interrupts`.


def exit_on_interrupt(main: Callable, then: str = "the same command resumes") -> Callable:
  """Wraps the absl `main(argv)` of a command that runs others: Ctrl-C (a
  KeyboardInterrupt) or `Interrupted` ends the process with one line on stderr,
  "SIGINT: interrupted; the same command resumes (exit status 130)" (`then` says
  what is next), and that status (143 for SIGTERM), without a traceback."""

  def wrapped(argv):
    try:
      return main(argv)
    except KeyboardInterrupt as e:
      signum = getattr(e, "signum", signal.SIGINT)
      sys.stderr.write(f"{name(signum)}: interrupted; {then} "
                       f"(exit status {exit_status(signum)})\n")
      sys.stderr.flush()
      raise Stopped(signum) from None

  wrapped.__name__ = getattr(main, "__name__", "main")
  wrapped.__doc__ = main.__doc__
  return wrapped


def log_lost_device(error, during: str, then: str) -> None:
  """The one line of a run whose device went away `during` a host call (`error`,
  a tf.errors.UnavailableError).

  Nothing is saved: the device's weights went with it, or stand at a step
  somewhere within the failed call, which no checkpoint name could state.
  """
  message = (error.message or type(error).__name__).strip().splitlines()
  logging.error("The TPU (or another device of the run) became unavailable during %s "
                "(%s): preempted or restarted. Run the same command again %s (exit "
                "status %d)", during, message[0] if message else "", then,
                TERMINATED_EXIT_STATUS)
