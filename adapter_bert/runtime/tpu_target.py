"""The TPU that --use_tpu means, found from the flags and the machine alone.

Without TensorFlow: an entry point asks it before TensorFlow loads (a TPU VM's
runtime is chosen by environment variables read at import: cli/launch.py), and
runtime/distribution.py connects to what it finds.
"""

import dataclasses
import glob
import os
from typing import List, Mapping, Optional, Sequence

from adapter_bert import errors


@dataclasses.dataclass(frozen=True)
class TpuTarget:
  """The TPU a --use_tpu run uses, and how it was found."""
  tpu: str  # TPUClusterResolver's `tpu`: "local", "grpc://HOST:PORT" or a TPU's name.
  found_by: str  # "--tpu_name", "--master", or what in the machine's environment.

  @property
  def flag(self) -> str:
    """How error messages name it: the flag, or what stood in for it."""
    if self.found_by.startswith("--"):
      return f"{self.found_by}={self.tpu}"
    return f"--tpu_name (not given; {self.found_by}: {self.tpu})"

  @property
  def remote(self) -> bool:
    """A TPU Node at a known address: its host, not this machine, reads and
    writes every file the TensorFlow ops name (checkpoints, records, outputs).
    (A TPU Node given by name has its address only once it is looked up.)"""
    return self.tpu.startswith("grpc://")


# A TPU VM's own variables (Colab's TPU VM runtime; Cloud TPU VM images).
TPU_VM_VARIABLES = ("COLAB_TPU_1VM", "TPU_ACCELERATOR_TYPE")


def device_files(dev: str = "/dev") -> List[str]:
  """The TPU chips' device files on this machine: /dev/accel* (v2-v4) or
  /dev/vfio/N (v5e and later; /dev/vfio/vfio, the driver's own, is on any
  machine that loads it)."""
  return sorted(glob.glob(os.path.join(dev, "accel*")) + [
      p for p in glob.glob(os.path.join(dev, "vfio", "*")) if os.path.basename(p).isdigit()])


def find_tpu(tpu_name: Optional[str], master: Optional[str], env: Mapping[str, str],
             devices: Sequence[str]) -> TpuTarget:
  """The TPU that --use_tpu means: the flags', else this machine's TPU, else the
  environment's TPU Node. Pure: `env` and `devices` (device_files()) are the machine.

  On a TPU VM there is no TPU name to look up, and TPUClusterResolver(tpu=None)
  fails there ("Please provide a TPU Name"): its TPU is "local".

  Raises:
    errors.UserError: no flag, no TPU VM and no TPU Node in the environment.
  """
  if tpu_name:
    return TpuTarget(tpu_name, "--tpu_name")
  if master:
    return TpuTarget(master, "--master")
  if devices:
    return TpuTarget("local", f"a TPU VM, {devices[0]}")
  for variable in TPU_VM_VARIABLES:
    if env.get(variable):
      return TpuTarget("local", f"a TPU VM, {variable}={env[variable]}")
  if env.get("TPU_NAME"):
    return TpuTarget(env["TPU_NAME"], "TPU_NAME")
  if env.get("COLAB_TPU_ADDR"):  # Colab's TPU Node: "HOST:PORT".
    address = env["COLAB_TPU_ADDR"]
    return TpuTarget(address if "://" in address else "grpc://" + address, "COLAB_TPU_ADDR")
  raise errors.UserError(
      "--use_tpu: no TPU found (not a TPU VM: no /dev/accel* or /dev/vfio/N, no "
      + " or ".join(TPU_VM_VARIABLES) + "; no TPU_NAME or COLAB_TPU_ADDR): give "
      "--tpu_name=local on a TPU VM, or the TPU Node's name or grpc://HOST:8470")
