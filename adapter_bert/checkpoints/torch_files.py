"""torch.save files (the zip format of PyTorch >= 1.6) read without PyTorch: a
state dict of tensors as NumPy arrays. AdapterHub's pytorch_adapter.bin and
PEFT's adapter_model.bin are such files, and so is a Hugging Face BERT's
pytorch_model.bin. Written by hand because no library reads them without
installing torch, which this project does not need. bfloat16 storage (which
NumPy lacks) is read as ml_dtypes.bfloat16, the type TensorFlow's NumPy uses.
"""

import collections
import io
import pickle
import zipfile
from typing import Dict

import ml_dtypes
import numpy as np

from adapter_bert import errors

_TORCH_DTYPES = {"FloatStorage": np.float32, "DoubleStorage": np.float64,
                 "HalfStorage": np.float16, "BFloat16Storage": ml_dtypes.bfloat16,
                 "LongStorage": np.int64,
                 "IntStorage": np.int32, "ShortStorage": np.int16, "CharStorage": np.int8,
                 "ByteStorage": np.uint8, "BoolStorage": np.bool_}


def _rebuild_tensor(storage, offset, size, stride, *unused):
  itemsize = storage.dtype.itemsize
  view = np.lib.stride_tricks.as_strided(storage[offset:], shape=tuple(size),
                                         strides=tuple(s * itemsize for s in stride))
  return np.array(view)


class _TorchUnpickler(pickle.Unpickler):
  """The pickle of a torch.save state dict, its tensors as NumPy arrays. Any
  other object is refused: loading never runs code named by the file."""

  def __init__(self, archive: zipfile.ZipFile, prefix: str, data: bytes):
    super().__init__(io.BytesIO(data))
    self._archive, self._prefix = archive, prefix

  def find_class(self, module, name):
    if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
      return _rebuild_tensor
    if (module, name) == ("torch._utils", "_rebuild_parameter"):
      return lambda data, *unused: data
    if (module, name) == ("collections", "OrderedDict"):
      return collections.OrderedDict
    if module == "torch" and name in _TORCH_DTYPES:
      return np.dtype(_TORCH_DTYPES[name])
    raise pickle.UnpicklingError(f"holds a {module}.{name}, not only tensors")

  def persistent_load(self, pid):
    if not (isinstance(pid, tuple) and pid and pid[0] == "storage"):
      raise pickle.UnpicklingError(f"unknown storage {pid!r}")
    dtype, key = pid[1], pid[2]
    if not isinstance(dtype, np.dtype):
      raise pickle.UnpicklingError(f"tensor type {dtype!r} has no NumPy equivalent")
    return np.frombuffer(self._archive.read(f"{self._prefix}/data/{key}"), dtype.newbyteorder("<"))


def read_torch_file(blob: bytes, path: str) -> Dict[str, np.ndarray]:
  """A state dict written by torch.save (its zip format), as NumPy arrays."""
  try:
    archive = zipfile.ZipFile(io.BytesIO(blob))
    pickles = [n for n in archive.namelist() if n.endswith("/data.pkl")]
    if len(pickles) != 1:
      raise ValueError("no data.pkl: not a torch.save zip file")
    prefix = pickles[0][:-len("/data.pkl")]
    byteorder = f"{prefix}/byteorder"
    if byteorder in archive.namelist() and archive.read(byteorder).strip() != b"little":
      raise ValueError("big-endian tensors")
    state = _TorchUnpickler(archive, prefix, archive.read(pickles[0])).load()
  except Exception as e:  # zipfile, pickle and NumPy each raise their own.
    raise errors.UserError(f"not a PyTorch state dict this reader takes (torch.save's zip "
                           f"format, tensors only): {e}", path) from e
  if not isinstance(state, dict) or not all(isinstance(v, np.ndarray) for v in state.values()):
    raise errors.UserError("not a state dict of tensors", path)
  return dict(state)
