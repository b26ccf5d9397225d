"""A path that is not what it looks like (a file system's scheme misspelt, a shell
expansion that never happened) is refused naming the flag and the likely path,
before anything is created: TensorFlow would take it for a local directory of
that strange name and put the results there."""

import os

import pytest

from adapter_bert import errors
import run_multitask
from run_harness import GLUE, classifier_flags, multitask_flags, run_main

MRPC = os.path.join(GLUE, "MRPC")


@pytest.mark.parametrize("output_dir,problem", [
    ("gs:/bucket/run", "'gs:/' is no file system's prefix: likely gs://bucket/run"),
    ("gs//bucket/run", "'gs//' is no file system's prefix: likely gs://bucket/run"),
    ("GS:bucket/run", "'GS:' is no file system's prefix: likely gs://bucket/run"),
    ("$(date +%s)/run", "'$(date +%s)' is for a shell to expand, but none did (a path in "
     "single quotes, or from a file or a notebook): give the path itself"),
    ("`pwd`/run", "'`pwd`' is for a shell to expand, but none did (a path in single quotes, "
     "or from a file or a notebook): give the path itself"),
])
def test_a_misspelt_or_unexpanded_output_dir_is_refused_before_anything_is_made(
    base, tmp_path, monkeypatch, output_dir, problem):
  monkeypatch.chdir(tmp_path)  # Where TensorFlow would have made it.
  with pytest.raises(errors.UserError) as error:
    run_main(**classifier_flags(base, task_name="MRPC", data_dir=MRPC, do_train=True,
                                output_dir=output_dir))
  assert str(error.value) == f"flag --output_dir={output_dir}: {problem}"
  assert os.listdir(tmp_path) == []


def test_the_likely_path_is_the_expansion_where_this_process_knows_it(base, tmp_path,
                                                                      monkeypatch):
  """A variable or ~ that this process can expand: the message gives the result."""
  monkeypatch.chdir(tmp_path)
  monkeypatch.setenv("GLUE_DIR", GLUE)
  monkeypatch.setenv("HOME", str(tmp_path / "home"))
  for flag, path, token, likely in [
      ("data_dir", "${GLUE_DIR}/MRPC", "${GLUE_DIR}", MRPC),
      ("data_dir", "$GLUE_DIR/MRPC", "$GLUE_DIR", MRPC),
      ("output_dir", "~/runs/mrpc", "~", str(tmp_path / "home" / "runs" / "mrpc"))]:
    flags = classifier_flags(base, task_name="MRPC", data_dir=MRPC, do_train=True,
                             output_dir=str(tmp_path / "out"))
    flags[flag] = path
    with pytest.raises(errors.UserError) as error:
      run_main(**flags)
    assert str(error.value) == (
        f"flag --{flag}={path}: {token!r} is for a shell to expand, but none did (a path "
        f"in single quotes, or from a file or a notebook): likely {likely}")
  assert os.listdir(tmp_path) == []


def test_each_path_of_a_list_flag_is_checked(base, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  monkeypatch.delenv("SST", raising=False)
  data_dirs = f"{MRPC},$SST/SST-2"
  with pytest.raises(errors.UserError, match=(
      r"^flag --data_dir=\$SST/SST-2: '\$SST' is for a shell to expand, but none did .*: "
      r"give the path itself$")):
    run_main(run_multitask, **multitask_flags(
        base, task_name="mrpc,sst-2", data_dir=data_dirs, output_dir=str(tmp_path / "out"),
        do_train=True))
  assert os.listdir(tmp_path) == []


def test_paths_that_only_look_odd_are_taken(base, tmp_path, monkeypatch):
  """A colon or a dollar sign that no shell or file system means: a path as any other."""
  monkeypatch.chdir(tmp_path)
  out = "run:1 price$5"
  run_main(**classifier_flags(base, task_name="MRPC", data_dir=MRPC, do_eval=True,
                              output_dir=out, adapter_size=0, train_mode="full"))
  assert os.path.exists(tmp_path / out / "eval_results.txt")
