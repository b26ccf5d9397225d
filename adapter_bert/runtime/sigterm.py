"""SIGTERM, the preemption signal of cloud TPUs and schedulers, as a request to stop.

Within `SigtermFlag`, SIGTERM only sets a flag; the training and prediction
loops check it between host calls, save what must be saved and raise
`Terminated`, which ends the process with the status a shell reports for
SIGTERM, without a traceback.
"""

import signal
import threading

# What a shell reports for a process that SIGTERM ended.
TERMINATED_EXIT_STATUS = 128 + signal.SIGTERM


class Terminated(SystemExit):
  """Ends the run after a SIGTERM was handled (or the TPU was lost: runtime/loop.py):
  exit status TERMINATED_EXIT_STATUS, no traceback (absl's app.run lets a SystemExit
  through)."""

  def __init__(self):
    super().__init__(TERMINATED_EXIT_STATUS)


class SigtermFlag:
  """Within `with`, SIGTERM sets `received` instead of ending the process.

  Python runs the handler in the main thread between bytecodes, so a signal
  that arrives during a compiled call is seen when the call returns; the
  caller checks `received` there. The previous handler is put back on exit.
  Off the main thread (where no handler can be set), or with enabled=False,
  SIGTERM keeps its previous meaning.
  """

  def __init__(self, enabled: bool = True):
    self.received = False
    self._enabled = enabled and threading.current_thread() is threading.main_thread()
    self._previous = None

  def _handle(self, signum, frame):
    del signum, frame
    self.received = True

  def __enter__(self) -> "SigtermFlag":
    if self._enabled:
      self._previous = signal.signal(signal.SIGTERM, self._handle)
    return self

  def __exit__(self, *exc_info) -> bool:
    if self._enabled:
      # None: a handler not set from Python; the default is the closest.
      signal.signal(signal.SIGTERM,
                    signal.SIG_DFL if self._previous is None else self._previous)
    return False
