"""Flags that were renamed: the old spelling still works and says once what replaced it.

A command defines the flag under its current name, then the old name here
(absl: `define_renamed`; argparse: `add_renamed_argument`). Giving the old
name sets the same value and logs one line,

  WARNING: --adapter_type is deprecated; use --multitask_adapters

while the current name logs nothing.
"""

import argparse

from absl import flags
from absl import logging


def deprecation_message(old: str, new: str) -> str:
  return f"--{old} is deprecated; use --{new}"


def define_renamed(old: str, new: str, flag_values=flags.FLAGS) -> None:
  """--old as an alias of the defined flag --new (absl's DEFINE_alias, which
  sets --new's value, marks it given and runs its checks), logging the
  deprecation line when --old was given.

  The line is logged by a check of --old, which absl runs once the command
  line is parsed: logged while parsing, absl would first print that logging
  started before flag parsing.
  """
  flags.DEFINE_alias(old, new, flag_values=flag_values)
  alias = flag_values[old]
  alias.help = f"Deprecated spelling of --{new}."
  parse_as_new, given = alias.parse, []

  def parse(argument):
    parse_as_new(argument)
    given.append(argument)
  alias.parse = parse

  def log_once(unused_value):
    if given:
      given.clear()
      logging.warning(deprecation_message(old, new))
    return True
  flags.register_validator(old, log_once, flag_values=flag_values)


class _RenamedOption(argparse.Action):
  """Stores the value; logs the deprecation line when given under the old name."""

  def __init__(self, option_strings, dest, old=None, **kwargs):
    self._old = old
    super().__init__(option_strings, dest, **kwargs)

  def __call__(self, parser, namespace, values, option_string=None):
    if option_string == f"--{self._old}":
      logging.warning(deprecation_message(self._old, self.dest))
    setattr(namespace, self.dest, values)


def add_renamed_argument(parser: argparse.ArgumentParser, new: str, old: str,
                         **kwargs) -> None:
  """argparse's --new (stored as `new`) that also takes --old, as define_renamed."""
  parser.add_argument(f"--{new}", f"--{old}", dest=new, action=_RenamedOption, old=old,
                      **kwargs)
