"""The header of an adapter weights file, read as settings are: before a run writes
anything (checkpoints/adapter_weights.read_adapter_header).

It comes from the start of the file alone (a file whose tensors are cut off still
gives it, where reading the weights refuses the file) and nothing is written: a
directory that a crash left mid-replacement (AtomicDirectory's backup beside, the
directory itself missing) is read where its contents are and left as it is; reading
the weights recovers it. Every write and move of tf.io.gfile fails while the header is
read (the tests run as root here, so a read-only file mode would not stop a write).
"""

import json
import os

import numpy as np
import pytest
import safetensors.numpy
import tensorflow as tf

from adapter_bert import errors
from adapter_bert.checkpoints import adapter_weights

HEADER = {"adapter_config": {"adapter_size": 8}, "base_fingerprint": "f" * 16,
          "variables": ["bert/encoder/layer_0/output/adapters/weights1"],
          "metadata": {"global_step": 7}}


def _write_adapter_model(directory):
  os.makedirs(directory)
  blob = safetensors.numpy.save(
      {HEADER["variables"][0]: np.arange(4096, dtype=np.float32).reshape(64, 64)},
      metadata={"header": json.dumps(HEADER)})
  with open(os.path.join(directory, adapter_weights.WEIGHTS_FILE), "wb") as f:
    f.write(blob)
  return blob


def _refuse_writes(monkeypatch):
  """Makes every tf.io.gfile call that writes, moves or removes fail."""
  def refuse(name):
    def call(*args, **kwargs):
      raise AssertionError(f"tf.io.gfile.{name}{args} while reading a header")
    return call
  for name in ("rename", "remove", "rmtree", "makedirs", "mkdir", "copy"):
    monkeypatch.setattr(tf.io.gfile, name, refuse(name))
  real_gfile = tf.io.gfile.GFile

  def read_only_gfile(path, mode="r"):
    assert "r" in mode and "+" not in mode, (path, mode)
    return real_gfile(path, mode)
  monkeypatch.setattr(tf.io.gfile, "GFile", read_only_gfile)


def test_the_header_comes_from_the_start_of_the_file_alone(tmp_path, monkeypatch):
  model = str(tmp_path / "adapter_model")
  blob = _write_adapter_model(model)
  weights = os.path.join(model, adapter_weights.WEIGHTS_FILE)
  with open(weights, "wb") as f:  # The tensors cut off: only the header is whole.
    f.write(blob[:len(blob) - 4096 * 4 + 8])
  with monkeypatch.context() as m:
    _refuse_writes(m)
    assert adapter_weights.read_adapter_header(model) == HEADER
    assert adapter_weights.read_adapter_header(weights) == HEADER
  with pytest.raises(errors.UserError, match="not an adapter weights file"):
    adapter_weights.read_adapter_file(model)


def test_a_directory_left_mid_replacement_is_read_where_it_is_and_left_alone(tmp_path,
                                                                              monkeypatch):
  model = str(tmp_path / "adapter_model")
  _write_adapter_model(model)
  backup = str(tmp_path / ".adapter_model.old-0123abcd")  # A crash between the moves.
  os.rename(model, backup)
  with monkeypatch.context() as m:
    _refuse_writes(m)
    assert adapter_weights.read_adapter_header(model) == HEADER
  assert sorted(os.listdir(tmp_path)) == [".adapter_model.old-0123abcd"]
  # Reading the weights (a run about to use them) recovers the directory.
  assert adapter_weights.read_adapter_file(model).header == HEADER
  assert sorted(os.listdir(tmp_path)) == ["adapter_model"]


def test_a_file_that_is_no_adapter_file_is_one_error_naming_it(tmp_path):
  path = str(tmp_path / adapter_weights.WEIGHTS_FILE)
  with open(path, "wb") as f:
    f.write(b"not safetensors")
  # Its first 8 bytes read as a header length of 7e18: refused, not read (a bank's
  # listing reads the same header).
  for read in (adapter_weights.read_adapter_header, adapter_weights.read_adapter_shapes):
    with pytest.raises(errors.UserError, match="not an adapter weights file") as error:
      read(path)
    assert path in str(error.value)
  with pytest.raises(errors.UserError, match="adapter weights not found"):
    adapter_weights.read_adapter_header(str(tmp_path / "missing"))
