"""Mistakes a user can fix, reported as one line instead of a traceback.

A bad flag value, a missing or malformed input file, an output_dir that belongs
to another run: the user needs to know which flag, file or line is wrong and
what is allowed, not where in the code it was noticed. Code that detects such a
mistake raises `UserError`; the entry points run their `main` through
`exit_on_user_error`, which prints `ERROR: <message>` on stderr and exits with
status 2. Anything else is a bug and keeps its traceback (exit status 1).

Set BERT_TRACEBACK=1 in the environment to get the traceback of a UserError too
(for a bug report that starts from one).
"""

import os
import sys
import traceback
from typing import Callable, Optional

USER_ERROR_EXIT_STATUS = 2


class UserError(Exception):
  """A mistake in the user's flags or files; `str()` is the whole message.

  With `path` (and `line`, 1-based) the message starts with `path:line: `, as
  compilers name the place of an error.
  """

  def __init__(self, message: str, path: Optional[str] = None, line: Optional[int] = None):
    self.path = path
    self.line = line
    where = ""
    if path:
      where = f"{path}:{line}: " if line is not None else f"{path}: "
    super().__init__(where + message)


def exit_with_message(message: str, exit_fn: Callable[[int], None] = sys.exit) -> None:
  """Ends the process as for a UserError: `ERROR: message` on stderr, status 2.

  exit_fn: os._exit from a thread other than the main one (sys.exit there
  would end only that thread).
  """
  sys.stderr.write(f"ERROR: {message}\n")
  sys.stderr.flush()
  exit_fn(USER_ERROR_EXIT_STATUS)


def exit_on_user_error(main: Callable) -> Callable:
  """Wraps an absl `main(argv)`: a UserError ends the process with one line, status 2."""

  def wrapped(argv):
    try:
      return main(argv)
    except UserError as e:
      if os.environ.get("BERT_TRACEBACK"):
        traceback.print_exc()
      exit_with_message(str(e))

  wrapped.__name__ = getattr(main, "__name__", "main")
  wrapped.__doc__ = main.__doc__
  return wrapped


def flags_named(**values) -> str:
  """Options as the command line names them, the way absl's flag errors do:
  "flag --name=value", "flags a=1, b=2" (the library's options are named after
  the flags, so its UserErrors read as the flag checks' do)."""
  if len(values) == 1:
    (name, value), = values.items()
    return f"flag --{name}={value}"
  return "flags " + ", ".join(f"{k}={v}" for k, v in values.items())
