"""Flag checks, reported as user errors.

A single flag's check is an absl validator: it runs at parse time, so a bad
value fails before anything is read or written. The scripts give app.run
`parse_flags`, so a failed check ends the process the way a UserError does:
one `ERROR:` line naming the flag, its value and what is allowed, status 2.
The checks of flags together run in `validate`, the first step of a
command's main (cli/parse.py), with the same line.
"""

import math
import weakref

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


# The checks of several flags together, per FlagValues (`check_flags_together`),
# run once by `validate`: not absl's multi-flag validators, which run at parse
# time inside absl and again whenever a flag is set, so that a run's
# settings are checked in one pass of the command's own (cli/parse.py).
_TOGETHER = weakref.WeakKeyDictionary()


def check_flags_together(flag_values, names, problem):
  """`problem(*values of names)` returns None if they fit together, else the message
  that `validate` reports."""
  _TOGETHER.setdefault(flag_values, []).append((tuple(names), problem))


def validate(flag_values) -> None:
  """Runs the checks of flags together, in the order they were defined.

  Raises:
    errors.UserError: the first problem, after the flags and their values, as
      absl names them ("flags a=1, b=2: ...").
  """
  for names, problem in _TOGETHER.get(flag_values, ()):
    values = {name: flag_values[name].value for name in names}
    message = problem(*values.values())
    if message:
      raise errors.UserError(f"{errors.flags_named(**values)}: {message}")


# (check, what is allowed) of the usual kinds of flag.
POSITIVE_INT = (lambda v: v >= 1, "a positive integer")
POSITIVE = (lambda v: math.isfinite(v) and v > 0, "a positive number")
NON_NEGATIVE = (lambda v: math.isfinite(v) and v >= 0, "a number >= 0")
PROPORTION = (lambda v: 0 <= v <= 1, "in [0, 1]")


def parse_flags(argv, flag_values=flags.FLAGS, passthrough: bool = False):
  """app.run's flags parser: a bad flag ends the process as a UserError does
  (one line on stderr, exit status 2) rather than absl's two lines and status 1.

  So does an argument absl leaves over (`stray_argument`): a value written after
  its flag with a space (`--do_train False` sets --do_train and leaves "False")
  would otherwise vanish, and the run go on with another value. With
  `passthrough`, what follows a "--" is the command's to take.
  """
  try:
    remaining = flag_values(argv)
  except flags.Error as e:
    errors.exit_with_message(" ".join(str(e).split("\n")))
  message = stray_argument(argv, remaining, flag_values, passthrough)
  if message:
    errors.exit_with_message(message)
  return remaining


def parse_flags_with_passthrough(argv, flag_values=flags.FLAGS):
  """parse_flags for a command that hands what follows "--" to another command."""
  return parse_flags(argv, flag_values, passthrough=True)


def stray_argument(argv, remaining, flag_values, passthrough: bool = False):
  """The one-line refusal of the first argument left over after parsing (None: none).

  argv: the command line parsed; remaining: what absl returned (argv[0] first).
  """
  given = list(argv[1:])
  stop = given.index("--") if "--" in given else len(given)
  # absl returns the arguments it did not take in order, then those after "--".
  after = len(given) - stop - 1 if stop < len(given) else 0
  strays = list(remaining[1:len(remaining) - after])
  if not passthrough:
    strays += list(remaining[len(remaining) - after:])
  if not strays:
    return None
  stray = strays[0]
  if stray.lower() in ("true", "false", "1", "0"):
    # A value written after its boolean flag with a space (which absl takes as the
    # flag alone): the occurrence after a boolean flag, not one a flag took as its value.
    for before, word in zip(given, given[1:]):
      name = before.lstrip("-")
      if name not in flag_values and name.startswith("no"):
        name = name[2:]  # --noflag: the boolean flag's other spelling.
      if (word == stray and before.startswith("-") and "=" not in before
          and name in flag_values and flag_values[name].boolean):
        return (f"argument {stray!r} after {before} is not taken as its value: give it "
                f"as --{name}={stray}")
  return (f"argument {stray!r} is not a flag: this command takes flags only, each as "
          "--name=value")
