"""torch.save files written without PyTorch, for tests of the readers that take them.

PyTorch (>= 1.6) writes a zip: ARCHIVE/data.pkl, a protocol-2 pickle of the
state dict, and each tensor's bytes in ARCHIVE/data/KEY. The pickle rebuilds a
tensor with torch._utils._rebuild_tensor_v2(storage, offset, size, stride,
requires_grad, backward_hooks), its storage a persistent id ("storage",
torch.<Type>Storage, KEY, "cpu", numel). This module pickles stand-ins of those
two globals and then names PyTorch's in their place (a protocol-2 GLOBAL is
"c" MODULE "\\n" NAME "\\n", nothing else refers to its length).
test_weight_precisions.py checks the pickle against one PyTorch wrote
(tests/fixtures/interop/adapterhub/seq_bn/pytorch_adapter.bin).
"""

import collections
import io
import pickle
import zipfile

import ml_dtypes
import numpy as np


def _rebuild_tensor_v2(*args):  # Stands for torch._utils._rebuild_tensor_v2.
  raise NotImplementedError(args)


class FloatStorage:  # Stand-ins for torch.<Type>Storage, by NumPy dtype.
  pass


class HalfStorage:
  pass


class BFloat16Storage:
  pass


class LongStorage:
  pass


STORAGES = {np.dtype(np.float32): FloatStorage, np.dtype(np.float16): HalfStorage,
            np.dtype(ml_dtypes.bfloat16): BFloat16Storage, np.dtype(np.int64): LongStorage}


class _Storage:  # A tensor's bytes: pickled as its persistent id.

  def __init__(self, key, array):
    self.key, self.array = key, array


class _Tensor:

  def __init__(self, storage):
    self.storage = storage

  def __reduce__(self):
    shape = tuple(self.storage.array.shape)
    strides = tuple(int(np.prod(shape[n + 1:])) for n in range(len(shape)))
    return _rebuild_tensor_v2, (self.storage, 0, shape, strides, False,
                                collections.OrderedDict())


class _Pickler(pickle.Pickler):

  def persistent_id(self, obj):
    if isinstance(obj, _Storage):
      return ("storage", STORAGES[obj.array.dtype], obj.key, "cpu", obj.array.size)
    return None


def torch_save_bytes(state, archive="archive", ordered=True):
  """`state` ({name: NumPy array}) as torch.save writes it: an OrderedDict with
  the `_metadata` of module versions that Module.state_dict() returns (as
  transformers' save_pretrained wrote pytorch_model.bin), or with `ordered=False`
  a dict (as AdapterHub saves its own and save_pretrained its shards now)."""
  storages = [_Storage(str(n), np.ascontiguousarray(array)) for n, array in
              enumerate(state.values())]
  tensors = {name: _Tensor(storage) for name, storage in zip(state, storages)}
  buffer = io.BytesIO()
  if ordered:
    tensors = collections.OrderedDict(tensors)
    setattr(tensors, "_metadata", collections.OrderedDict({"": {"version": 1}}))
  _Pickler(buffer, protocol=2).dump(tensors)
  data = buffer.getvalue()
  for stand_in, module in [(_rebuild_tensor_v2, "torch._utils")] + [
      (storage, "torch") for storage in STORAGES.values()]:
    data = data.replace(f"c{__name__}\n{stand_in.__name__}\n".encode(),
                        f"c{module}\n{stand_in.__name__}\n".encode())
  blob = io.BytesIO()
  with zipfile.ZipFile(blob, "w") as z:
    z.writestr(f"{archive}/data.pkl", data)
    z.writestr(f"{archive}/byteorder", "little")
    for storage in storages:
      z.writestr(f"{archive}/data/{storage.key}", storage.array.tobytes())
    z.writestr(f"{archive}/version", "3\n")
  return blob.getvalue()
