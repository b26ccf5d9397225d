"""`python -m experiments.study`: the evidence study's command (command.py)."""

import sys

# First, before anything imports TensorFlow: without the TPU library, which the runs need.
from adapter_bert.cli import launch  # pylint: disable=g-bad-import-order
launch.start_parent(sys.argv if __name__ == "__main__" else None)

from absl import app
from absl import flags

from adapter_bert.cli import flag_checks
from adapter_bert.runtime import stop_signals
from experiments.study import command

__doc__ = command.__doc__  # What --help prints: the command's usage.

if __name__ == "__main__":
  command.define_flags()
  flags.adopt_module_key_flags(command)  # --helpshort lists the command's flags.
  app.run(stop_signals.exit_on_interrupt(command.main), flags_parser=flag_checks.parse_flags)
