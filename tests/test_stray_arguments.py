"""An argument absl leaves over after parsing (a value written after its flag with a
space, a word without "--") is refused in one line naming it, in every command,
instead of vanishing while the flag keeps another value."""

import ast
import os
import subprocess

import pytest
from absl import flags

from adapter_bert.cli import flag_checks
from adapter_bert import errors
import convert_checkpoint
import run_classifier
import run_multitask
from run_harness import REPO

MRPC = os.path.join(REPO, "data", "glue", "MRPC")


def _refusal(capsys, module, argv, passthrough=False):
  """The one line and status of parse_flags (the commands' app.run parser) on argv."""
  fv = flags.FlagValues()
  module.define_flags(fv)
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    flag_checks.parse_flags(argv, fv, passthrough)
  assert exit_info.value.code == errors.USER_ERROR_EXIT_STATUS
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and err.startswith("ERROR: "), err
  return err[len("ERROR: "):-1]


CLASSIFIER = ["run_classifier.py", "--task_name=mrpc", f"--data_dir={MRPC}", "--output_dir=o"]


@pytest.mark.parametrize("argv,message", [
    # absl takes "--do_eval" and leaves "False": the run would evaluate.
    (CLASSIFIER + ["--do_eval", "False"],
     "argument 'False' after --do_eval is not taken as its value: give it as "
     "--do_eval=False"),
    (CLASSIFIER + ["--nodo_eval", "True", "--do_train"],
     "argument 'True' after --nodo_eval is not taken as its value: give it as "
     "--do_eval=True"),
    (CLASSIFIER + ["--do_train", "train.tsv"],
     "argument 'train.tsv' is not a flag: this command takes flags only, each as "
     "--name=value"),
    # The first 'False' is --labels' value; the second is the one left over.
    (CLASSIFIER + ["--labels", "False", "--do_eval", "False"],
     "argument 'False' after --do_eval is not taken as its value: give it as "
     "--do_eval=False"),
    (CLASSIFIER + ["--do_train", "--", "more"],
     "argument 'more' is not a flag: this command takes flags only, each as --name=value"),
])
def test_a_stray_argument_is_one_line_naming_it(capsys, argv, message):
  assert _refusal(capsys, run_classifier, argv) == message


def test_a_value_after_a_space_is_taken_where_absl_takes_it(capsys):
  """A non-boolean flag takes the next argument as its value: nothing is left over."""
  fv = flags.FlagValues()
  run_multitask.define_flags(fv)
  assert flag_checks.parse_flags(["run_multitask.py", "--task_name", "mrpc", "--data_dir",
                                  MRPC, "--output_dir", "o", "--do_eval"], fv) == [
                                      "run_multitask.py"]
  assert fv.task_name == ["mrpc"] and fv.output_dir == "o"
  message = _refusal(capsys, convert_checkpoint,
                     ["convert_checkpoint.py", "--output_dir=o", "hf_dir"])
  assert message == ("argument 'hf_dir' is not a flag: this command takes flags only, each "
                     "as --name=value")


def test_a_sweep_takes_what_follows_double_dash_and_refuses_the_rest(capsys):
  from experiments import sweep
  argv = ["sweep", "--grid=g.json", "--output_dir=o", "--", "--vocab_file=v.txt", "x"]
  fv = flags.FlagValues()
  sweep.define_flags(fv)
  assert flag_checks.parse_flags(argv, fv, passthrough=True) == [
      "sweep", "--vocab_file=v.txt", "x"]
  assert _refusal(capsys, sweep, ["sweep", "--grid=g.json", "stray", "--output_dir=o",
                                  "--", "--vocab_file=v.txt"], passthrough=True) == (
      "argument 'stray' is not a flag: this command takes flags only, each as --name=value")


def _commands():
  """Every command of the repository: its files that call absl's app.run."""
  listed = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout.split()
  return [p for p in listed if not p.startswith(("tests/", "data/"))
          and "app.run(" in open(os.path.join(REPO, p)).read()]


def test_every_command_parses_its_flags_with_the_refusal():
  """app.run(..., flags_parser=flag_checks.parse_flags[_with_passthrough]) everywhere
  (data/'s builders refuse arguments themselves; benchmark helpers that hand
  their command line on are listed)."""
  hands_on = {"benchmarks/iterator_teardown.py", "benchmarks/serving_load.py"}
  missing = []
  for path in _commands():
    tree = ast.parse(open(os.path.join(REPO, path)).read())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute) and n.func.attr == "run"
             and getattr(n.func.value, "id", None) == "app"]
    parsers = [ast.unparse(k.value) for c in calls for k in c.keywords if k.arg == "flags_parser"]
    if path not in hands_on and (not parsers or not all(
        p.startswith("flag_checks.parse_flags") for p in parsers)):
      missing.append(path)
  assert len(_commands()) >= 15 and not missing, missing
