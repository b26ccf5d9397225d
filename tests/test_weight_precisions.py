"""Hugging Face BERT weights in 16 bits convert as their float32 twin, rounded.

A BERT saved in bfloat16 or float16, as model.safetensors or as torch.save's
pytorch_model.bin, converts (convert_checkpoint.py --hf_dir, the reader every HF
base goes through) to the checkpoint that its float32 twin converts to once that
twin's weights are rounded to the 16-bit type: float32(bfloat16(w)) or
float32(float16(w)), exactly, in a float32 checkpoint. One log line per file says
which precision was read. The torch.save files are written without PyTorch
(torch_save.py), whose pickle is checked here against one PyTorch wrote.
"""

import io
import json
import logging
import os
import shutil
import subprocess
import sys
import zipfile

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
import tensorflow as tf

from adapter_bert import errors
from adapter_bert.checkpoints import adapterhub
from adapter_bert.checkpoints import huggingface
from adapter_bert.checkpoints import peft_lora
from adapter_bert.checkpoints import torch_files
from adapter_bert.model import modeling
from bad_inputs import QUIET_ENV, REPO
import convert_checkpoint
from hf_checkpoints import hf_state, write_hf_dir
from torch_save import torch_save_bytes

BF16, F16 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)
SOURCES = [("model.safetensors", BF16), ("model.safetensors", F16),
           ("pytorch_model.bin", BF16), ("pytorch_model.bin", F16)]
SOURCE_IDS = ["safetensors-bf16", "safetensors-fp16", "torch-bf16", "torch-fp16"]


def _narrowed(state, dtype):
  """The float32 tensors of `state` rounded to `dtype` (others, e.g. position_ids, kept)."""
  return {k: v.astype(dtype) if v.dtype == np.float32 else v for k, v in state.items()}


def _widened(state):
  """The 16-bit tensors of `state` as float32: the reference, float32(dtype(w))."""
  return {k: v.astype(np.float32) if v.dtype in (BF16, F16) else v for k, v in state.items()}


def _write_weights(path, state):
  if str(path).endswith(".safetensors"):
    save_file(state, str(path))
  else:
    with open(path, "wb") as f:
      f.write(torch_save_bytes(state))


def _hf_dir(path, weights_file, state):
  """An HF BERT directory whose weights are `state` in `weights_file` only."""
  d = write_hf_dir(path, {})
  os.remove(os.path.join(d, "model.safetensors"))
  _write_weights(os.path.join(d, weights_file), state)
  return d


def _convert(hf_dir, out, caplog):
  """Converts; returns the log lines about 16-bit weights."""
  caplog.clear()
  with caplog.at_level("INFO", logger="absl"):
    convert_checkpoint.hf_bert_to_google(hf_dir, out)
  return [r.getMessage() for r in caplog.records if "16-bit" in r.getMessage()]


def _read_google(out):
  reader = tf.train.load_checkpoint(os.path.join(out, "bert_model.ckpt"))
  return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


def _checkpoint_bytes(out):
  return {name: open(os.path.join(out, name), "rb").read() for name in sorted(os.listdir(out))}


@pytest.mark.parametrize("weights_file,dtype", SOURCES, ids=SOURCE_IDS)
def test_16_bit_weights_convert_to_their_float32_twin_rounded(tmp_path, caplog, weights_file,
                                                              dtype):
  state = hf_state()
  narrow = _narrowed(state, dtype)
  hf16 = _hf_dir(tmp_path / "hf16", weights_file, narrow)
  twin = write_hf_dir(tmp_path / "hf32", _widened(narrow))
  out16, out32 = str(tmp_path / "google16"), str(tmp_path / "google32")

  assert _convert(hf16, out16, caplog) == [
      f"read 16-bit weights ({dtype.name}) from {hf16}/{weights_file}: converted to float32"]
  assert _convert(twin, out32, caplog) == []  # A float32 file says nothing of precision.
  assert _checkpoint_bytes(out16) == _checkpoint_bytes(out32)
  google = _read_google(out16)
  assert len(google) == 5 + 16 * 2 + 2
  assert all(v.dtype == np.float32 for v in google.values())
  # The reference by hand: the source's rounding, exactly, nothing more.
  kernel = state["encoder.layer.1.intermediate.dense.weight"]
  np.testing.assert_array_equal(google["bert/encoder/layer_1/intermediate/dense/kernel"],
                                kernel.astype(dtype).astype(np.float32).T)
  np.testing.assert_array_equal(google["bert/embeddings/word_embeddings"],
                                state["embeddings.word_embeddings.weight"].astype(dtype)
                                .astype(np.float32))
  assert not np.array_equal(google["bert/embeddings/word_embeddings"],
                            state["embeddings.word_embeddings.weight"])


def test_float32_weights_convert_the_same_from_safetensors_and_torch(tmp_path, caplog):
  """A float32 pytorch_model.bin converts as its safetensors twin, unrounded; neither
  logs a precision."""
  state = hf_state(prefix="bert.")
  from_st = write_hf_dir(tmp_path / "st", state)
  from_torch = _hf_dir(tmp_path / "torch", "pytorch_model.bin", state)
  assert _convert(from_st, str(tmp_path / "g_st"), caplog) == []
  assert _convert(from_torch, str(tmp_path / "g_torch"), caplog) == []
  assert _checkpoint_bytes(str(tmp_path / "g_st")) == _checkpoint_bytes(str(tmp_path / "g_torch"))
  np.testing.assert_array_equal(_read_google(str(tmp_path / "g_torch"))["bert/pooler/dense/kernel"],
                                state["bert.pooler.dense.weight"].T)


@pytest.mark.parametrize("weights_file,dtype", [("model.safetensors", F16),
                                                ("pytorch_model.bin", BF16)],
                         ids=["safetensors-fp16", "torch-bf16"])
def test_sharded_16_bit_weights_log_each_shard(tmp_path, caplog, weights_file, dtype):
  narrow = _narrowed(hf_state(), dtype)
  d = write_hf_dir(tmp_path / "hf", {})
  os.remove(os.path.join(d, "model.safetensors"))
  stem, ext = weights_file.rsplit(".", 1)
  shards = [f"{stem}-0000{n}-of-00002.{ext}" for n in (1, 2)]
  keys = sorted(narrow)
  weight_map = {k: shards[0] if n < len(keys) // 2 else shards[1] for n, k in enumerate(keys)}
  for shard in shards:
    _write_weights(os.path.join(d, shard), {k: narrow[k] for k in keys if weight_map[k] == shard})
  with open(os.path.join(d, weights_file + ".index.json"), "w") as f:
    json.dump({"metadata": {}, "weight_map": weight_map}, f)
  twin = write_hf_dir(tmp_path / "hf32", _widened(narrow))

  assert _convert(d, str(tmp_path / "g16"), caplog) == [
      f"read 16-bit weights ({dtype.name}) from {d}/{shard}: converted to float32"
      for shard in shards]
  _convert(twin, str(tmp_path / "g32"), caplog)
  assert _checkpoint_bytes(str(tmp_path / "g16")) == _checkpoint_bytes(str(tmp_path / "g32"))


def test_safetensors_are_read_before_a_pytorch_model_bin(tmp_path, caplog):
  """As transformers' from_pretrained: model.safetensors when both are there."""
  state = hf_state()
  d = write_hf_dir(tmp_path / "hf", state)
  with open(os.path.join(d, "pytorch_model.bin"), "wb") as f:
    f.write(b"not read")
  assert _convert(d, str(tmp_path / "google"), caplog) == []
  np.testing.assert_array_equal(_read_google(str(tmp_path / "google"))["bert/pooler/dense/bias"],
                                state["pooler.dense.bias"])


def _refused(hf_dir, tmp_path):
  out = str(tmp_path / "google")
  with pytest.raises(errors.UserError) as e:
    convert_checkpoint.hf_bert_to_google(hf_dir, out)
  assert not os.path.exists(out)
  assert "\n" not in str(e.value)
  return str(e.value)


@pytest.mark.parametrize("weights_file", ["model.safetensors", "pytorch_model.bin"])
def test_corrupt_16_bit_files_are_refused_in_one_line_naming_the_file(tmp_path, weights_file):
  d = _hf_dir(tmp_path / "hf", weights_file, _narrowed(hf_state(), BF16))
  path = os.path.join(d, weights_file)
  blob = open(path, "rb").read()
  with open(path, "wb") as f:
    f.write(blob[:len(blob) * 7 // 10])
  what = ("not a safetensors file (empty, truncated or corrupt?): "
          if weights_file.endswith(".safetensors") else
          "not a PyTorch state dict this reader takes (torch.save's zip format, tensors only): ")
  assert _refused(d, tmp_path).startswith(f"{path}: {what}")
  with open(path, "wb") as f:
    f.write(b"")
  assert _refused(d, tmp_path).startswith(f"{path}: {what}")


def test_a_safetensors_dtype_without_a_numpy_type_is_refused_naming_file_and_tensor(tmp_path):
  state = hf_state()
  state["pooler.dense.bias"] = state["pooler.dense.bias"].astype(ml_dtypes.float8_e4m3fn)
  d = write_hf_dir(tmp_path / "hf", state)
  assert _refused(d, tmp_path).startswith(
      f"{d}/model.safetensors: tensor pooler.dense.bias has dtype F8_E4M3, which this reader "
      f"does not take (it takes ['BF16', ")


def test_the_command_logs_the_precision_it_read(tmp_path):
  """convert_checkpoint.py --hf_dir itself, at its default verbosity."""
  d = _hf_dir(tmp_path / "hf", "model.safetensors", _narrowed(hf_state(), BF16))
  out = tmp_path / "google"
  result = subprocess.run(
      [sys.executable, "convert_checkpoint.py", f"--hf_dir={d}", f"--output_dir={out}"],
      cwd=REPO, capture_output=True, text=True, env=QUIET_ENV, timeout=300)
  assert result.returncode == 0, result.stderr
  assert (f"] read 16-bit weights (bfloat16) from {d}/model.safetensors: converted to "
          f"float32\n") in result.stderr, result.stderr
  assert sorted(os.listdir(out)) == ["bert_config.json", "bert_model.ckpt.data-00000-of-00001",
                                     "bert_model.ckpt.index", "vocab.txt"]


def test_the_torch_files_here_pickle_as_pytorch_does():
  """torch_save.py's pickle of a state dict is byte for byte the one PyTorch wrote
  (an AdapterHub fixture, float32): its 16-bit files above differ only in the
  storage class that the pickle names, torch.BFloat16Storage or torch.HalfStorage."""
  path = os.path.join(REPO, "tests", "fixtures", "interop", "adapterhub", "seq_bn",
                      "pytorch_adapter.bin")
  real = open(path, "rb").read()
  state = torch_files.read_torch_file(real, path)
  ours = torch_save_bytes(state, archive="pytorch_adapter", ordered=False)
  real_zip, our_zip = zipfile.ZipFile(io.BytesIO(real)), zipfile.ZipFile(io.BytesIO(ours))
  for name in our_zip.namelist():
    if name != "pytorch_adapter/version":
      assert our_zip.read(name) == real_zip.read(name), name
  bf16 = torch_save_bytes({"w": state[sorted(state)[0]].astype(ml_dtypes.bfloat16)})
  assert b"ctorch\nBFloat16Storage\n" in zipfile.ZipFile(io.BytesIO(bf16)).read("archive/data.pkl")


@pytest.mark.slow
def test_the_real_minilm_in_bfloat16_converts_to_its_float32_checkpoint_rounded(minilm,
                                                                               tmp_path, caplog):
  """The real MiniLM's model.safetensors rounded to bfloat16, as a bf16 Hub upload
  of it holds: its checkpoint is conftest.minilm's (the float32 file's) rounded."""
  source = huggingface.minilm_package_dir()
  d = tmp_path / "minilm_bf16"
  d.mkdir()
  for name in ("config.json", "vocab.txt"):
    (d / name).write_bytes(open(os.path.join(source, name), "rb").read())
  save_file(_narrowed(load_file(os.path.join(source, "model.safetensors")), BF16),
            str(d / "model.safetensors"))
  out = str(tmp_path / "google")
  assert _convert(str(d), out, caplog) == [
      f"read 16-bit weights (bfloat16) from {d}/model.safetensors: converted to float32"]
  ours, reference = _read_google(out), _read_google(minilm["dir"])
  assert sorted(ours) == sorted(reference)
  for name, value in ours.items():
    assert value.dtype == np.float32, name
    np.testing.assert_array_equal(
        value, reference[name].astype(ml_dtypes.bfloat16).astype(np.float32), err_msg=name)


# Adapters saved in a model's 16-bit precision (PEFT and AdapterHub save in the
# model's dtype): read as their float32 twins rounded, as the base is.

INTEROP = os.path.join(os.path.dirname(__file__), "fixtures", "interop")


def _rounded(arrays, dtype):
  return {k: v.astype(dtype).astype(np.float32) for k, v in arrays.items()}


def _narrowed_copy(source, weights_files, dtype, tmp_path):
  """A copy of the adapter directory `source` with `weights_files` rounded to `dtype`."""
  copy = str(tmp_path / f"{os.path.basename(source)}_{dtype.name}")
  shutil.copytree(source, copy)
  for weights_file in weights_files:
    path = os.path.join(copy, weights_file)
    with open(path, "rb") as f:
      blob = f.read()
    state = (huggingface.read_safetensors(blob, path) if weights_file.endswith(".safetensors")
             else torch_files.read_torch_file(blob, path))
    _write_weights(path, _narrowed(state, dtype))
  return copy


@pytest.mark.parametrize("dtype", [BF16, F16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("source,weights_file", [("seq_cls_qv", "adapter_model.safetensors"),
                                                 ("torch_file", "adapter_model.bin")])
def test_16_bit_peft_adapters_read_as_their_float32_twins_rounded(tmp_path, caplog, dtype,
                                                                  source, weights_file):
  original = peft_lora.read_peft_lora(os.path.join(INTEROP, "peft", source))
  with caplog.at_level(logging.INFO):
    narrow = peft_lora.read_peft_lora(_narrowed_copy(os.path.join(INTEROP, "peft", source),
                                                     [weights_file], dtype, tmp_path))
  assert narrow.arrays.keys() == original.arrays.keys()
  for name, value in _rounded(original.arrays, dtype).items():
    assert narrow.arrays[name].dtype == np.float32
    np.testing.assert_array_equal(narrow.arrays[name], value, err_msg=name)
  assert f"read 16-bit weights ({dtype.name}) from " in caplog.text


@pytest.mark.parametrize("dtype", [BF16, F16], ids=["bf16", "fp16"])
def test_16_bit_adapterhub_adapters_read_as_their_float32_twins_rounded(tmp_path, interop_base,
                                                                        dtype):
  config = modeling.BertConfig.from_json_file(interop_base["bert_config_file"])
  source = os.path.join(INTEROP, "adapterhub", "seq_bn")
  original = adapterhub.read_adapterhub(source, config)
  copy = _narrowed_copy(source, ["pytorch_adapter.bin", "pytorch_model_head.bin"], dtype,
                        tmp_path)
  narrow = adapterhub.read_adapterhub(copy, config)
  assert narrow.arrays.keys() == original.arrays.keys()
  for name, value in _rounded(original.arrays, dtype).items():
    np.testing.assert_array_equal(narrow.arrays[name], value, err_msg=name)
  assert any(not np.array_equal(narrow.arrays[n], original.arrays[n]) for n in original.arrays)
