"""convert_checkpoint.py called in-process as its command runs, for the tests of
its adapter converters (AdapterHub, PEFT)."""

import functools

from absl import flags
import pytest

from adapter_bert import errors
import convert_checkpoint


def main_with(argv):
  """convert_checkpoint.main with `argv` parsed into its own flag values."""
  fv = flags.FlagValues()
  convert_checkpoint.define_flags(fv)
  fv(["convert_checkpoint.py"] + argv)
  return functools.partial(convert_checkpoint.main, flag_values=fv)


def one_error_line(capsys, argv):
  """Runs convert_checkpoint as its command does; its one ERROR line (exit 2, no
  traceback)."""
  main = main_with(argv)
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    errors.exit_on_user_error(main)([])
  assert exit_info.value.code == 2
  err = capsys.readouterr().err
  lines = [line for line in err.splitlines() if line.startswith("ERROR")]
  assert "Traceback" not in err and len(lines) == 1 and err.endswith(lines[0] + "\n"), err
  return lines[0]
