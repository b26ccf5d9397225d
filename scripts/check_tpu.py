"""Whether TensorFlow reaches this TPU VM's TPU the way the commands will.

  python scripts/check_tpu.py [--tpu_runtime=pjrt|legacy]

Run in a fresh process by scripts/install_tpu.sh as its last step, with the
Python of the environment it made. It sets up the runtime as `--use_tpu
--tpu_name=local` does (adapter_bert/cli/launch.py), initializes the TPU and
prints its cores in one line, or prints one line saying what was tried and what
to try next, and exits with status 1.
"""

import os
import sys

from adapter_bert.cli import launch
from adapter_bert import errors
from adapter_bert.runtime import tpu_target


def _next_step() -> str:
  # One process at a time holds a TPU VM's TPU: an earlier one that has not ended (a
  # notebook's kernel that imported TensorFlow, a run still going) is the usual cause.
  return ("restart the runtime (another process may hold the TPU) and run "
          f"{sys.executable} scripts/check_tpu.py again; on Colab, check that the runtime "
          "type is a TPU")


def main(argv) -> int:
  argv = [argv[0], "--use_tpu", "--tpu_name=local"] + list(argv[1:])
  runtime = "legacy" if "--tpu_runtime=legacy" in argv else "pjrt"
  tried = f"TensorFlow initializing this TPU VM's TPU with --tpu_runtime={runtime}"
  if not tpu_target.device_files() and not any(
      os.environ.get(v) for v in tpu_target.TPU_VM_VARIABLES):
    # Before TensorFlow loads: on another machine its TPU library looks for a TPU for
    # minutes and may end the process.
    print(f"TPU check failed ({tried}): this machine is no TPU VM (no /dev/accel* or "
          f"/dev/vfio/N, no {' or '.join(tpu_target.TPU_VM_VARIABLES)}); next: on Colab, "
          "Runtime > Change runtime type > a TPU, then run bash scripts/install_tpu.sh again")
    return 1
  try:
    launch.import_pjrt_frameworks(launch.set_tpu_environment(argv, launch.os.environ))
    # pylint: disable=g-import-not-at-top,import-outside-toplevel
    import tensorflow as tf
    from adapter_bert.runtime import distribution
    distribution.connect_tpu(distribution.TpuTarget("local", "--tpu_name"))
    cores = tf.config.list_logical_devices("TPU")
  except errors.UserError as e:
    reason = " ".join(str(e).split("\n", 1)[0].split())  # Its first line.
    print(f"TPU check failed ({tried}): {reason}; next: {_next_step()}")
    return 1
  if not cores:
    print(f"TPU check failed ({tried}): the TPU initialized but lists no cores; next: "
          f"{_next_step()}")
    return 1
  print(f"TPU ready: {len(cores)} cores ({cores[0].name} ...), TensorFlow "
        f"{tf.__version__}, --tpu_runtime={runtime}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
