"""What every command does first, before TensorFlow loads.

TensorFlow reads how to reach a TPU VM's chips from the environment once, when
it is imported, and Keras imports whatever optional packages are installed. So
each entry point's first statement is `launch.start(argv)`, before any module
that imports TensorFlow:

  * under --use_tpu on a TPU VM (--tpu_name=local, or found: runtime/tpu_target),
    it selects the PJRT runtime as the public TensorFlow-on-TPU-VM recipes do
    (Keras' TPU CI, the Keras RS TPU example: tensorflow-tpu 2.19.1) unless
    --tpu_runtime=legacy; a variable the user set is kept;
  * under --use_tpu it refuses TPU_LOAD_LIBRARY=0, with which TensorFlow never
    loads the TPU library and fails later with a misleading "No OpKernel";
  * it imports TensorFlow, Keras and two Model Garden modules without the
    packages they import for features this project does not use, with host
    tensors from TensorFlow's BFC allocator rather than malloc.
"""

import contextlib
import importlib
import os
import sys
import types
from typing import Dict, Optional, Sequence

from absl import flags

from adapter_bert import errors
from adapter_bert.cli import tpu_flags
from adapter_bert.runtime import tpu_target

# MLIR bridge passes the recipes turn on for TensorFlow on a TPU VM.
MLIR_BRIDGE_FLAGS = ("--tf_mlir_enable_mlir_bridge=true",
                     "--tf_mlir_enable_convert_control_to_data_outputs_pass=true",
                     "--tf_mlir_enable_merge_control_flow_pass=true")


def start_parent(argv: Optional[Sequence[str]]) -> None:
  """`start` for a command whose runs are child processes (experiments.sweep,
  experiments.study): TensorFlow loads here without the TPU library, which would
  hold a TPU VM's chips that the runs need (child_environment gives it back)."""
  if argv is not None:
    os.environ["TPU_LOAD_LIBRARY"] = "0"
  import_frameworks()


def child_environment(environ) -> Dict[str, str]:
  """The environment of a run started by a `start_parent` command: its own, less
  the TPU_LOAD_LIBRARY=0 set there."""
  return {k: v for k, v in environ.items() if k != "TPU_LOAD_LIBRARY"}


def uses_tpu(argv: Sequence[str]) -> bool:
  """Whether the command line `argv` (program first) asks for --use_tpu."""
  return bool(_early_flags(argv).use_tpu)


def start(argv: Optional[Sequence[str]]) -> None:
  """An entry point's first call: `argv` is sys.argv when it runs as a command,
  None when it is imported (then only the frameworks are imported)."""
  try:
    pjrt = set_tpu_environment(argv, os.environ) if argv is not None else {}
    import_pjrt_frameworks(pjrt)
  except errors.UserError as e:
    errors.exit_with_message(str(e))


def import_pjrt_frameworks(pjrt: Dict[str, str]) -> None:
  """import_frameworks, with TensorFlow loading the TPU library that the `pjrt`
  variables (set_tpu_environment's) name: its failure is one line."""
  if not pjrt:
    import_frameworks()
    return
  try:
    import_frameworks()
  except (OSError, ImportError, RuntimeError) as e:
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    raise errors.UserError(
        f"--tpu_runtime=pjrt: TensorFlow could not load the TPU library "
        f"{pjrt['TF_PLUGGABLE_DEVICE_LIBRARY_PATH']} ({first}): reinstall the TPU "
        "requirements (bash scripts/install_tpu.sh) and run with the Python it names") from e


def set_tpu_environment(argv: Sequence[str], environ) -> Dict[str, str]:
  """Sets in `environ` what the run's TPU needs before TensorFlow loads; returns it.

  Reads --use_tpu, --tpu_name, --master and --tpu_runtime from `argv` (flag
  files included), leaving every other flag to the command's own parsing.

  Raises:
    errors.UserError: TPU_LOAD_LIBRARY=0 under --use_tpu; the PJRT runtime
      without the libtpu package.
  """
  early = _early_flags(argv)
  if not early.use_tpu:
    return {}
  if environ.get("TPU_LOAD_LIBRARY") == "0":
    raise errors.UserError(
        "--use_tpu: TPU_LOAD_LIBRARY=0 is set in the environment, so TensorFlow would not "
        "load the TPU library and could not reach the TPU; unset it (in a notebook: "
        "%env TPU_LOAD_LIBRARY=1, or os.environ.pop('TPU_LOAD_LIBRARY')) and run again")
  try:
    target = tpu_target.find_tpu(early.tpu_name, early.master, environ,
                                 tpu_target.device_files())
  except errors.UserError:
    return {}  # The strategy's set-up reports it, with the other flags' checks.
  if target.tpu != "local" or early.tpu_runtime != "pjrt":
    return {}
  wanted = pjrt_environment(_libtpu_path(), environ.get("TF_XLA_FLAGS", ""))
  for name, value in wanted.items():
    if name == "TF_XLA_FLAGS":  # The user's flags and the bridge's.
      environ[name] = value
    else:
      environ.setdefault(name, value)
  return {name: environ[name] for name in wanted}


def pjrt_environment(library_path: str, xla_flags: str = "") -> Dict[str, str]:
  """The recipe's variables for TensorFlow's PJRT TPU runtime; `xla_flags` (a
  TF_XLA_FLAGS already set) keeps its own flags, the bridge's are added."""
  present = xla_flags.split()
  return {
      "PJRT_DEVICE": "TPU",
      "NEXT_PLUGGABLE_DEVICE_USE_C_API": "true",
      "TF_PLUGGABLE_DEVICE_LIBRARY_PATH": library_path,
      "TF_XLA_FLAGS": " ".join(present + [f for f in MLIR_BRIDGE_FLAGS if f not in present]),
  }


def _libtpu_path() -> str:
  try:
    import libtpu  # pylint: disable=g-import-not-at-top,import-outside-toplevel
    return libtpu.get_library_path()
  except (ImportError, AttributeError, OSError) as e:
    raise errors.UserError(
        f"--tpu_runtime=pjrt: the libtpu package is not usable here ({e}): install the TPU "
        "requirements (bash scripts/install_tpu.sh) and run with the Python it names") from e


def _early_flags(argv: Sequence[str]) -> flags.FlagValues:
  """The TPU flags of `argv`, parsed apart from the command's other flags."""
  values = flags.FlagValues()
  tpu_flags.define_tpu_flags(values)
  try:
    values(list(argv), known_only=True)
  except flags.Error:
    values.unparse_flags()  # The command's own parsing reports the flag.
  return values


# Keras 3 (and TensorFlow's legacy Keras under tf.compat) import these whenever they are
# installed, for features this project never uses: Keras' scikit-learn wrappers, pandas
# inputs, image plots (matplotlib, OpenCV), PIL images, legacy .h5 models (h5py), SciPy
# sparse inputs. They held ~180 MiB of a training process's RSS before any model
# existed (`git show ce1ce3d^:benchmarks/README.md`, "Memory"). While TensorFlow and
# Keras import, each one not yet imported is marked absent (None in sys.modules, so
# Keras' `try: import` takes its not-installed branch); the marks go right after, so
# any later import of them (this project's plots, a user's code) works as always.
_KERAS_EXTRAS = ("sklearn", "pandas", "matplotlib", "cv2", "PIL", "h5py", "scipy")
# Model Garden modules whose header imports tf_keras (Keras 2, ~110 MiB more) and
# which never use it (tokenization.py and the SQuAD pipeline import them): imported
# here with an empty module in its place. Model Garden's other modules,
# tensorflow_hub and a user's code import the real one.
_TF_KERAS_IN_HEADER_ONLY = ("official.nlp.tools.tokenization", "official.nlp.data.squad_lib")


def import_frameworks() -> None:
  """Imports TensorFlow, Keras and the Model Garden modules above without the packages
  they do not need, and with host tensors from TensorFlow's BFC allocator
  (use_bfc_host_allocator), unless TensorFlow was imported before."""
  if "tensorflow" in sys.modules:
    return
  use_bfc_host_allocator(os.environ)
  # pylint: disable=g-import-not-at-top,unused-import,import-outside-toplevel
  with _standing_in({name: None for name in _KERAS_EXTRAS}):
    import tensorflow
    import keras
  stand_in = types.ModuleType("tf_keras", "Not loaded: see adapter_bert.cli.launch.")
  with _standing_in({"tf_keras": stand_in}):
    for name in _TF_KERAS_IN_HEADER_ONLY:
      importlib.import_module(name)


def use_bfc_host_allocator(environ) -> None:
  """Sets TensorFlow's host (CPU) tensors to come from its best-fit-with-coalescing
  allocator, the one it uses for GPU memory, unless `environ` says otherwise.

  By default they come from malloc, whose heap keeps the pieces of each step's
  freed activations, so a training process held more at its peak
  (`git show ce1ce3d^:benchmarks/README.md`, "Memory"); BFC reuses its own blocks. Read once, when
  TensorFlow first allocates. Its limit, 64 GiB unless set, becomes the machine's
  memory: a bigger host never fails below what it has.
  """
  environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
  try:
    total_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
  except (ValueError, OSError):  # No such sysconf name here: TensorFlow's default.
    return
  environ.setdefault("TF_CPU_BFC_MEM_LIMIT_IN_MB", str(total_mib))


@contextlib.contextmanager
def _standing_in(marks):
  """sys.modules[name] = mark for each name not yet imported, for the block's imports."""
  marks = {name: mark for name, mark in marks.items() if name not in sys.modules}
  sys.modules.update(marks)
  try:
    yield
  finally:
    for name, mark in marks.items():
      if sys.modules.get(name, False) is mark:
        del sys.modules[name]

