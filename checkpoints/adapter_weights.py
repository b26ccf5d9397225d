"""Adapter-only weights: what one task trained, stored apart from the shared base.

A task trained in adapter mode changes only its adapters, LayerNorms and head
(about 2.4M floats for BERT-base, adapter size 64); everything else is the base
checkpoint. `save_adapter_weights` writes just the trained variables, by their
original checkpoint names, as safetensors (a small, framework-neutral format),
with the adapter config and a fingerprint of the base weights they were trained
on, so that restoring onto a different base fails instead of silently computing
something else.
"""

import hashlib
import json
import posixpath
from typing import Dict, Optional

import keras
import numpy as np
import safetensors.numpy
import tensorflow as tf
from absl import logging

from storage import file_io

WEIGHTS_FILE = "adapter_weights.safetensors"
CONFIG_FILE = "adapter_config.json"


def base_fingerprint(names: Dict[str, keras.Variable], excluded) -> str:
  """SHA-256 over the names, shapes and values of every variable not in `excluded`."""
  digest = hashlib.sha256()
  for name in sorted(set(names) - set(excluded)):
    value = np.ascontiguousarray(keras.ops.convert_to_numpy(names[name]))
    digest.update(f"{name}:{value.shape}:{value.dtype};".encode())
    digest.update(value.tobytes())
  return digest.hexdigest()


def save_adapter_weights(model: keras.Model, output_dir: str,
                         metadata: Optional[dict] = None) -> str:
  """Writes the trainable variables of `model` to `output_dir`.

  Args:
    model: a task model of modeling.py after `trainable.set_trainable`.
    output_dir: directory (any tf.io.gfile path); created if missing.
    metadata: extra JSON-serialisable facts to keep (task name, labels, ...).
  Returns:
    The path of the weights file.
  """
  names = model.tf1_variable_map()
  trained = {n: v for n, v in names.items() if v.trainable}
  header = {
      "adapter_config": model.adapter_config.to_dict(),
      "bert_config": model.config.to_dict(),
      "base_fingerprint": base_fingerprint(names, trained),
      "variables": sorted(trained),
      "metadata": metadata or {},
  }
  arrays = {n: keras.ops.convert_to_numpy(v) for n, v in trained.items()}
  weights_path = posixpath.join(output_dir, WEIGHTS_FILE)
  # The weights file carries its own header, so it alone is enough to restore;
  # the JSON beside it is for people.
  blob = safetensors.numpy.save(arrays, metadata={"header": json.dumps(header)})
  file_io.atomic_write(weights_path, blob, binary=True)
  file_io.atomic_write(posixpath.join(output_dir, CONFIG_FILE),
                       json.dumps(header, indent=2, sort_keys=True) + "\n")
  logging.info("Saved %d adapter-only variables (%d floats) to %s", len(arrays),
               sum(a.size for a in arrays.values()), weights_path)
  return weights_path


def read_adapter_header(path: str) -> dict:
  """The header of an adapter weights file or of the directory holding one."""
  return _read(path)[1]


def _read(path: str):
  if tf.io.gfile.isdir(path):
    path = posixpath.join(path, WEIGHTS_FILE)
  if not tf.io.gfile.exists(path):
    raise ValueError(f"adapter weights not found: {path}")
  with tf.io.gfile.GFile(path, "rb") as f:
    blob = f.read()
  try:
    arrays = safetensors.numpy.load(blob)
    header = json.loads(_safetensors_metadata(blob)["header"])
  except Exception as e:  # safetensors raises its own error types.
    raise ValueError(f"{path}: not an adapter weights file: {e}") from e
  return arrays, header, path


def _safetensors_metadata(blob: bytes) -> dict:
  # safetensors.numpy.load drops the metadata and safe_open needs a local file
  # (not gs://); the format is an 8-byte little-endian header length, then JSON.
  length = int.from_bytes(blob[:8], "little")
  return json.loads(blob[8:8 + length]).get("__metadata__", {})


def load_adapter_weights(model: keras.Model, path: str) -> dict:
  """Restores adapter-only weights onto `model`, whose base is already loaded.

  Raises:
    ValueError: if the file's adapter config differs from the model's, a
      variable is missing or has another shape, or the model's base weights are
      not the ones the adapters were trained on.
  Returns:
    The file's header (configs, fingerprint, metadata).
  """
  arrays, header, path = _read(path)
  names = model.tf1_variable_map()
  if header["adapter_config"] != model.adapter_config.to_dict():
    raise ValueError(f"{path}: adapter config {header['adapter_config']} does not match "
                     f"the model's {model.adapter_config.to_dict()}")
  for name, value in arrays.items():
    if name not in names:
      raise ValueError(f"{path}: variable {name} does not exist in the model")
    if tuple(value.shape) != tuple(names[name].shape):
      raise ValueError(f"{path}: variable {name} has shape {tuple(value.shape)} in the "
                       f"file but {tuple(names[name].shape)} in the model")
  fingerprint = base_fingerprint(names, arrays)
  if fingerprint != header["base_fingerprint"]:
    raise ValueError(
        f"{path}: these adapter weights were trained on another base model "
        f"(base fingerprint {header['base_fingerprint'][:16]}..., this model's base "
        f"{fingerprint[:16]}...); load the same base checkpoint first")
  for name, value in arrays.items():
    names[name].assign(value)
  logging.info("Restored %d adapter-only variables from %s", len(arrays), path)
  return header
