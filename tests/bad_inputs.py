"""What the tests of bad input files share: the entry points' main run as their
commands run it (errors.exit_on_user_error, on a fresh FlagValues) and the one ERROR
line each bad file ends the run with (fails, classifier_fails; command_fails for
the real command line in a subprocess), and the files written or copied for them.
"""

import functools
import os
import shutil
import subprocess
import sys

from absl import flags
import pytest

from adapter_bert import errors
import run_classifier

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MRPC = os.path.join(REPO, "data", "glue", "MRPC")
# The subprocesses log less; their stderr is still more than the error line.
QUIET_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")


def copy_dir(src, dst):
  """Copies the directory `src` to `dst`; returns `dst` as a string."""
  shutil.copytree(src, dst)
  return str(dst)


def classifier_argv(base, tmp_path, **overrides):
  """run_classifier.py's arguments: an eval-only MRPC run on the tiny base, then `overrides`
  (None leaves a flag out)."""
  f = dict(task_name="mrpc", data_dir=MRPC, output_dir=str(tmp_path / "out"),
           bert_config_file=base["bert_config_file"], vocab_file=base["vocab_file"],
           init_checkpoint=base["init_checkpoint"], adapter_size=4, max_seq_length=32,
           do_eval=True, eval_batch_size=4)
  f.update(overrides)
  return [f"--{k}" if v is True else f"--{k}={v}" for k, v in f.items() if v is not None]


def fails(capsys, module, argv):
  """Runs `module.main` as its command does; returns the message of its one ERROR line."""
  fv = flags.FlagValues()
  module.define_flags(fv)
  fv([module.__name__ + ".py"] + argv)
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    errors.exit_on_user_error(functools.partial(module.main, flag_values=fv))([])
  assert exit_info.value.code == 2
  err = capsys.readouterr().err
  assert "Traceback" not in err
  lines = [line for line in err.splitlines() if line.startswith("ERROR")]
  assert len(lines) == 1 and err.endswith(lines[0] + "\n"), err
  return lines[0][len("ERROR: "):]


def classifier_fails(capsys, base, tmp_path, **overrides):
  """fails() of run_classifier.py on classifier_argv; nothing written to its output_dir."""
  message = fails(capsys, run_classifier, classifier_argv(base, tmp_path, **overrides))
  assert not (tmp_path / "out").exists()
  return message


def write_file(path, data):
  """Writes `data` (bytes, or text as UTF-8) to `path`, making its directory; returns it."""
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
  return str(path)


def command_fails(args, cwd):
  """Runs `args` with Python in `cwd`: exit status 2 and one ERROR line, which it returns."""
  result = subprocess.run([sys.executable] + args, cwd=cwd, capture_output=True, text=True,
                          env=QUIET_ENV, timeout=120)
  assert result.returncode == 2, result.stderr
  assert "Traceback" not in result.stderr
  lines = [l for l in result.stderr.splitlines() if l.startswith("ERROR")]
  assert len(lines) == 1 and result.stderr.endswith(lines[0] + "\n"), result.stderr
  return lines[0]
