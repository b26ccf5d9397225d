"""What a command does before TensorFlow loads (adapter_bert/cli/launch.py): a TPU
VM's PJRT runtime, TPU_LOAD_LIBRARY, and the runs of the experiment commands.

The environment TensorFlow saw is read in a fresh process, at the moment the
entry point first imports `tensorflow` (an import hook stops the process there):
the variables must be set by then, or TensorFlow never reads them. `libtpu` is
a stand-in package whose library path the test knows (no TPU here).
"""

import json
import os
import subprocess
import sys

import pytest

from adapter_bert.cli import launch
from adapter_bert import errors
from adapter_bert.runtime import tpu_target
from experiments import sweep as sweep_lib
from experiments.points import grid as grid_lib
from experiments.points import runs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PJRT = ("PJRT_DEVICE", "NEXT_PLUGGABLE_DEVICE_USE_C_API", "TF_PLUGGABLE_DEVICE_LIBRARY_PATH",
        "TF_XLA_FLAGS")
FAKE_LIBRARY = "/fake-libtpu/libtpu.so"  # Never loaded: the stand-in libtpu names it.
# The recipe's (the Keras RS TPU example's) values, written out.
RECIPE = {"PJRT_DEVICE": "TPU", "NEXT_PLUGGABLE_DEVICE_USE_C_API": "true",
          "TF_PLUGGABLE_DEVICE_LIBRARY_PATH": FAKE_LIBRARY,
          "TF_XLA_FLAGS": "--tf_mlir_enable_mlir_bridge=true "
                          "--tf_mlir_enable_convert_control_to_data_outputs_pass=true "
                          "--tf_mlir_enable_merge_control_flow_pass=true"}

_AT_TENSORFLOW_IMPORT = """
import importlib.abc, json, os, runpy, sys
class Watch(importlib.abc.MetaPathFinder):
  def find_spec(self, name, path=None, target=None):
    if name == "tensorflow":
      print(json.dumps({n: os.environ.get(n) for n in %r}))
      sys.stdout.flush()
      os._exit(0)
    return None
sys.meta_path.insert(0, Watch())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
print(json.dumps("TensorFlow was never imported"))
""" % (PJRT + ("TPU_LOAD_LIBRARY",),)


@pytest.fixture(scope="module")
def fake_libtpu(tmp_path_factory):
  d = tmp_path_factory.mktemp("site")
  (d / "libtpu").mkdir()
  (d / "libtpu" / "__init__.py").write_text(
      f"def get_library_path():\n  return {FAKE_LIBRARY!r}\n")
  return str(d)


def _environment_tensorflow_saw(script, args, fake_libtpu, **env):
  environ = {k: v for k, v in os.environ.items() if k not in PJRT + ("TPU_LOAD_LIBRARY",)}
  environ.update(PYTHONPATH=os.pathsep.join([fake_libtpu, REPO]), **env)
  done = subprocess.run([sys.executable, "-c", _AT_TENSORFLOW_IMPORT, script] + args,
                        cwd=REPO, env=environ, capture_output=True, text=True, timeout=120,
                        check=False)
  return done, (json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0
                else None)


@pytest.mark.parametrize("script", ["run_classifier.py", "run_squad.py", "run_multitask.py"])
def test_pjrt_variables_are_set_before_tensorflow_loads_on_a_tpu_vm(script, fake_libtpu):
  done, seen = _environment_tensorflow_saw(
      script, ["--use_tpu", "--tpu_name=local", "--output_dir=/tmp/unused"], fake_libtpu)
  assert done.returncode == 0, done.stderr[-2000:]
  assert {k: seen[k] for k in PJRT} == RECIPE
  # Not a TPU run, or the other runtime: TensorFlow sees none of them.
  for args in (["--output_dir=/tmp/unused"], ["--nouse_tpu", "--tpu_name=local"],
               ["--use_tpu", "--tpu_name=local", "--tpu_runtime=legacy"]):
    done, seen = _environment_tensorflow_saw(script, args, fake_libtpu)
    assert done.returncode == 0, done.stderr[-2000:]
    assert all(seen[k] is None for k in PJRT), (args, seen)


def test_a_tpu_node_gets_no_pjrt_variables_and_the_users_own_are_kept(fake_libtpu):
  done, seen = _environment_tensorflow_saw(
      "run_classifier.py", ["--use_tpu", "--tpu_name=grpc://10.0.0.2:8470"], fake_libtpu)
  assert all(seen[k] is None for k in PJRT), seen
  done, seen = _environment_tensorflow_saw(
      "run_classifier.py", ["--use_tpu", "--tpu_name=local"], fake_libtpu,
      PJRT_DEVICE="TPU", TF_XLA_FLAGS="--tf_xla_auto_jit=0 --tf_mlir_enable_mlir_bridge=true")
  assert seen["TF_XLA_FLAGS"] == (
      "--tf_xla_auto_jit=0 --tf_mlir_enable_mlir_bridge=true "
      "--tf_mlir_enable_convert_control_to_data_outputs_pass=true "
      "--tf_mlir_enable_merge_control_flow_pass=true")


def test_tpu_load_library_0_is_refused_in_one_line_before_tensorflow_loads(fake_libtpu):
  done, _ = _environment_tensorflow_saw(
      "run_classifier.py", ["--use_tpu", "--tpu_name=local"], fake_libtpu,
      TPU_LOAD_LIBRARY="0")
  assert done.returncode == errors.USER_ERROR_EXIT_STATUS
  lines = done.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith(
      "ERROR: --use_tpu: TPU_LOAD_LIBRARY=0 is set in the environment"), done.stderr
  assert done.stdout == ""  # Refused before TensorFlow was imported.
  # Without --use_tpu it is no concern of the run's.
  done, seen = _environment_tensorflow_saw("run_classifier.py", [], fake_libtpu,
                                           TPU_LOAD_LIBRARY="0")
  assert done.returncode == 0 and seen["TPU_LOAD_LIBRARY"] == "0"


def test_pjrt_without_libtpu_is_one_line_naming_the_flag(tmp_path):
  done, _ = _environment_tensorflow_saw("run_classifier.py", ["--use_tpu", "--tpu_name=local"],
                                        str(tmp_path))  # No libtpu package there.
  assert done.returncode == errors.USER_ERROR_EXIT_STATUS
  assert done.stderr.startswith("ERROR: --tpu_runtime=pjrt: the libtpu package is not usable")
  assert done.stderr.rstrip().endswith(": install the TPU requirements (bash "
                                       "scripts/install_tpu.sh) and run with the Python it "
                                       "names")
  assert len(done.stderr.splitlines()) == 1


def test_experiment_commands_load_tensorflow_without_the_tpu_library_and_their_runs_with_it(
    fake_libtpu):
  for script in ("experiments/sweep.py",):
    done, seen = _environment_tensorflow_saw(script, ["--output_dir=/tmp/unused"], fake_libtpu)
    assert done.returncode == 0, done.stderr[-2000:]
    assert seen["TPU_LOAD_LIBRARY"] == "0"
  assert launch.child_environment({"TPU_LOAD_LIBRARY": "0", "HOME": "/h"}) == {"HOME": "/h"}


def test_a_run_started_by_an_experiment_command_gets_the_tpu_library_back(tmp_path, monkeypatch):
  monkeypatch.setenv("TPU_LOAD_LIBRARY", "0")
  log = str(tmp_path / "run.log")
  status = runs.run_logged([sys.executable, "-c", "import os; print(os.environ.get("
                            "'TPU_LOAD_LIBRARY', 'unset'))"], log)
  assert status == 0
  with open(log) as f:
    assert f.read().splitlines()[-1] == "unset"


def test_a_sweep_refuses_parallel_runs_on_one_tpu(tmp_path):
  grid = grid_lib.Grid.from_json({"vary": {"seed": [1, 2]}})
  program = [sys.executable, "run_classifier.py", "--use_tpu"]
  with pytest.raises(errors.UserError, match=r"^--parallel=2 with --use_tpu: a TPU runs one "
                     r"run at a time .*give --parallel=1$"):
    sweep_lib.Sweep(grid, str(tmp_path), program, parallel=2, log=lambda _: None).run()
  assert not os.listdir(tmp_path)  # Nothing written.
  assert launch.uses_tpu(program) and not launch.uses_tpu([sys.executable, "run_squad.py"])


def test_the_install_check_says_in_one_line_what_was_tried_and_what_next(fake_libtpu):
  """scripts/check_tpu.py, install_tpu.sh's last step, without a TPU: the stand-in
  libtpu names a library that does not exist, so TensorFlow fails as it loads it."""
  environ = {k: v for k, v in os.environ.items() if k not in PJRT + ("TPU_LOAD_LIBRARY",)}
  # A TPU VM as its environment shows it (this machine has no TPU device files).
  environ.update(PYTHONPATH=os.pathsep.join([fake_libtpu, REPO]),
                 TPU_ACCELERATOR_TYPE="v5litepod-1")
  for runtime, reason, then in [
      ("pjrt", f"--tpu_runtime=pjrt: TensorFlow could not load the TPU library {FAKE_LIBRARY}",
       f"; next: restart the runtime (another process may hold the TPU) and run "
       f"{sys.executable} scripts/check_tpu.py again"),
      ("legacy", "--tpu_name=local: could not reach the TPU", "; next: restart the runtime")]:
    done = subprocess.run(
        [sys.executable, os.path.join("scripts", "check_tpu.py"), f"--tpu_runtime={runtime}"],
        cwd=REPO, env=environ, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    assert lines[0].startswith(f"TPU check failed (TensorFlow initializing this TPU VM's TPU "
                               f"with --tpu_runtime={runtime}): {reason}"), lines[0]
    assert then in lines[0]


def test_the_install_check_on_a_machine_that_is_no_tpu_vm_says_so_before_tensorflow_loads(
    fake_libtpu):
  # Elsewhere TensorFlow's TPU library looks for a TPU for minutes, then may abort.
  environ = {k: v for k, v in os.environ.items()
             if k not in PJRT + ("TPU_LOAD_LIBRARY", "COLAB_TPU_1VM", "TPU_ACCELERATOR_TYPE")}
  environ["PYTHONPATH"] = os.pathsep.join([fake_libtpu, REPO])
  if tpu_target.device_files():
    pytest.skip("this machine has TPU device files")
  check = os.path.join("scripts", "check_tpu.py")
  done = subprocess.run([sys.executable, "-c", _AT_TENSORFLOW_IMPORT, check], cwd=REPO,
                        env=environ, capture_output=True, text=True, timeout=120, check=False)
  # Status 1, not the hook's 0: the check ended before TensorFlow was imported.
  assert done.returncode == 1, done.stderr[-2000:]
  assert done.stdout.splitlines() == [
      "TPU check failed (TensorFlow initializing this TPU VM's TPU with --tpu_runtime=pjrt): "
      "this machine is no TPU VM (no /dev/accel* or /dev/vfio/N, no COLAB_TPU_1VM or "
      "TPU_ACCELERATOR_TYPE); next: on Colab, Runtime > Change runtime type > a TPU, then "
      "run bash scripts/install_tpu.sh again"]
