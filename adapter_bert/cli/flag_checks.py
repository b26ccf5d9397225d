"""Flag checks that absl runs when the flags are parsed, reported as user errors.

absl's validators run at parse time (and whenever a flag is set later), so a
bad value fails before anything is read or written. The scripts give app.run
`parse_flags`, so a failed check ends the process the way a UserError does:
one `ERROR:` line naming the flag, its value and what is allowed, status 2.
"""

import math

from absl import flags

from adapter_bert import errors


def flag_given(flag) -> bool:
  """Whether an absl flag was set (command line or assignment), not left at its default."""
  return bool(getattr(flag, "present", True)) or not getattr(flag, "using_default_value", True)


def check_flag(flag_values, name, ok, allowed):
  """--name must satisfy `ok(value)` (None, an unset optional flag, passes);
  else absl reports "flag --name=VALUE: must be ALLOWED"."""
  flags.register_validator(name, lambda v: v is None or ok(v), message=f"must be {allowed}",
                           flag_values=flag_values)


def check_flags_together(flag_values, names, problem):
  """`problem(*values of names)` returns None if they fit together, else the message."""
  def checker(values):
    message = problem(*(values[n] for n in names))
    if message:
      raise flags.ValidationError(message)
    return True
  flags.register_multi_flags_validator(list(names), checker, flag_values=flag_values)


# (check, what is allowed) of the usual kinds of flag.
POSITIVE_INT = (lambda v: v >= 1, "a positive integer")
POSITIVE = (lambda v: math.isfinite(v) and v > 0, "a positive number")
NON_NEGATIVE = (lambda v: math.isfinite(v) and v >= 0, "a number >= 0")
PROPORTION = (lambda v: 0 <= v <= 1, "in [0, 1]")


def parse_flags(argv, flag_values=flags.FLAGS):
  """app.run's flags parser: a bad flag ends the process as a UserError does
  (one line on stderr, exit status 2) rather than absl's two lines and status 1."""
  try:
    return flag_values(argv)
  except flags.Error as e:
    errors.exit_with_message(" ".join(str(e).split("\n")))
