"""Adapter-only weights: what one task trained, stored apart from the shared base.

A task trained in adapter mode changes only its adapters, LayerNorms and head
(about 2.4M floats for BERT-base, adapter size 64); everything else is the base
checkpoint. `save_adapter_weights` writes just the trained variables, by their
original checkpoint names, as safetensors (a small, framework-neutral format),
with the adapter config and a fingerprint of the base weights they were trained
on, so that restoring onto a different base fails instead of silently computing
something else.

The directory (adapter_model/) appears whole or not at all. A missing, corrupt
or foreign file (another base, another adapter size) is an errors.UserError
naming it.
"""

import hashlib
import io
import json
import posixpath
import weakref
from typing import Dict, NamedTuple, Optional, Tuple

import keras
import numpy as np
import safetensors.numpy
import tensorflow as tf
from absl import logging

from adapter_bert import label_lists
from adapter_bert import errors
from adapter_bert.storage import file_io
from adapter_bert.storage import renamed_keys

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


# model -> {frozenset(excluded): its base_fingerprint}. A run needs the frozen
# base's fingerprint up to four times (a resumed run checks its checkpoint's
# base twice, records it in new checkpoints and in the adapter file), each a
# read of every frozen weight to the host (~110M floats for BERT-base, from a
# TPU's memory). The values stay valid while the weights are those loaded:
# training writes only what `excluded` leaves out (`model_fingerprint` keeps
# none otherwise), and every loader of this package forgets a model's first.
_fingerprints = weakref.WeakKeyDictionary()


def model_fingerprint(model: keras.Model, excluded) -> str:
  """base_fingerprint of `model`'s variables, computed once while its weights stay loaded."""
  excluded = frozenset(excluded)
  names = model.tf1_variable_map()
  if not all(n in excluded for n, v in names.items() if v.trainable):
    return base_fingerprint(names, excluded)  # Training would change it.
  known = _fingerprints.setdefault(model, {})
  if excluded not in known:
    known[excluded] = base_fingerprint(names, excluded)
  return known[excluded]


def forget_fingerprints(model: keras.Model, keep=None) -> None:
  """Called before weights of `model` are loaded: its fingerprints may change.

  keep: the excluded names of the one fingerprint the load leaves valid (it
  writes only those variables), or None.
  """
  known = _fingerprints.pop(model, {})
  if keep is not None and frozenset(keep) in known:
    _fingerprints[model] = {frozenset(keep): known[frozenset(keep)]}


def save_adapter_weights(model: keras.Model, output_dir: str,
                         metadata: Optional[dict] = None) -> str:
  """Writes the trainable variables of `model` to `output_dir`.

  Args:
    model: a task model of modeling.py after `trainable.set_trainable`.
    output_dir: directory (any tf.io.gfile path), replaced whole: both files
      are written into a temporary sibling that then takes its name, so a
      reader never finds the weights without their config or of another run.
    metadata: extra JSON-serialisable facts to keep (task name, labels, ...).
  Returns:
    The path of the weights file.
  """
  names = model.tf1_variable_map()
  trained = {n: v for n, v in names.items() if v.trainable}
  header = {
      "adapter_config": model.adapter_config.to_dict(),
      "bert_config": model.config.to_dict(),
      "base_fingerprint": model_fingerprint(model, trained),
      "variables": sorted(trained),
      "metadata": metadata or {},
  }
  arrays = {n: keras.ops.convert_to_numpy(v) for n, v in trained.items()}
  weights_path = posixpath.join(output_dir, WEIGHTS_FILE)
  # The weights file carries its own header, so it alone is enough to restore;
  # the JSON beside it is for people.
  blob = safetensors.numpy.save(arrays, metadata={"header": json.dumps(header)})
  with file_io.AtomicDirectory(output_dir, what="the adapter weights") as tmp:
    with tf.io.gfile.GFile(posixpath.join(tmp, WEIGHTS_FILE), "wb") as f:
      f.write(blob)
    with tf.io.gfile.GFile(posixpath.join(tmp, CONFIG_FILE), "w") as f:
      f.write(json.dumps(header, indent=2, sort_keys=True) + "\n")
  logging.info("Saved %d adapter-only variables (%d floats) to %s", len(arrays),
               sum(a.size for a in arrays.values()), weights_path)
  return weights_path


class AdapterFile(NamedTuple):
  """An adapter weights file, read whole and checked (`read_adapter_file`)."""
  path: str  # The weights file (of the directory given).
  header: dict  # As save_adapter_weights wrote it: configs, fingerprint, metadata.
  arrays: Dict[str, np.ndarray]  # The trained variables by original name.


def read_adapter_header(path: str) -> dict:
  """The header of an adapter weights file or of the directory holding one, from the
  start of the file alone and read-only: no tensor is read, and a directory that a
  crash left mid-replacement is read where its contents are (file_io.current_contents),
  not recovered. For settings read before a run writes anything.

  Raises:
    errors.UserError: naming the file, as read_adapter_file.
  """
  path = _weights_file(file_io.current_contents(path))
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      header = json.loads(_safetensors_header(f).get("__metadata__", {})["header"])
  except tf.errors.OpError as e:
    raise errors.UserError(f"cannot read: {e.message}", path) from e
  except Exception as e:  # Any way a file can be cut short or be something else.
    raise errors.UserError(_CORRUPT + f"{e!r}", path) from e
  return _checked_header(header, path)


def check_metadata(path: str, metadata: dict, expected: dict, against: str,
                   required: bool = False, labels_fix: Optional[str] = None) -> None:
  """Refuses adapter weights whose metadata disagrees with `expected`.

  Same-shaped weights of another label order or another multi-task run would
  otherwise load silently. Labels ("labels", a multi-task run's "tasks") are
  compared by their one owner, label_lists.check_recorded_labels.

  Args:
    path: the adapter file, for the message.
    metadata: its header's metadata.
    expected: metadata key -> the value it must have.
    against: what `expected` is, for the message (e.g. "this run").
    required: a key the metadata lacks is refused too (else it passes).
    labels_fix: what to do where the labels differ, for the message.
  Raises:
    errors.UserError: naming the file, the key and both values.
  """
  for key, value in expected.items():
    if not (required or key in metadata):
      continue
    value, saved = label_lists.check_recorded_labels(
        key, value, against, metadata.get(key), "its metadata", path, labels_fix)
    if saved != value:
      raise errors.UserError(f"was trained with {key} {saved!r}, {against} has "
                             f"{value!r}", path)


# What load_adapter_weights reads from the header.
_HEADER_KEYS = ("adapter_config", "base_fingerprint", "variables")
_CORRUPT = "not an adapter weights file (empty, truncated or corrupt?): "
_MAX_HEADER_BYTES = 100_000_000  # safetensors' limit on the header's JSON.


def read_adapter_file(path: str) -> AdapterFile:
  """An adapter weights file or the directory holding one, read and checked whole.

  Raises:
    errors.UserError: naming the file, if it is missing, unreadable, corrupt or
      not written by save_adapter_weights.
  """
  # A replacement of the directory interrupted by a crash: the old one is back.
  file_io.recover_directory(path)
  path = _weights_file(path)
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      blob = f.read()
  except tf.errors.OpError as e:
    raise errors.UserError(f"cannot read: {e.message}", path) from e
  try:
    arrays = safetensors.numpy.load(blob)
    header = json.loads(_safetensors_header(io.BytesIO(blob)).get("__metadata__", {})["header"])
  except Exception as e:  # safetensors raises its own error types.
    raise errors.UserError(_CORRUPT + f"{e!r}", path) from e
  return AdapterFile(path, _checked_header(header, path), arrays)


def _weights_file(path: str) -> str:
  """The weights file that `path` (the file or its directory) names, which exists."""
  if tf.io.gfile.isdir(path):
    path = posixpath.join(path, WEIGHTS_FILE)
  if not tf.io.gfile.exists(path):
    raise errors.UserError(
        f"adapter weights not found (--adapter_checkpoint takes a run's adapter_model "
        f"directory or its {WEIGHTS_FILE})", path)
  return path


def _checked_header(header, path: str) -> dict:
  """`header` with its metadata's keys current, if it is one this project wrote."""
  missing = [k for k in _HEADER_KEYS if not isinstance(header, dict) or k not in header]
  if missing:
    raise errors.UserError(f"not an adapter weights file of this project: its header "
                           f"lacks {', '.join(missing)}", path)
  return _current_metadata_keys(header)


def _current_metadata_keys(header: dict) -> dict:
  """The header with its metadata's renamed keys under their current names (a
  file written before a rename holds the old ones: storage/renamed_keys)."""
  if isinstance(header, dict) and isinstance(header.get("metadata"), dict):
    return dict(header, metadata=renamed_keys.current_keys(header["metadata"]))
  return header


def read_adapter_shapes(path: str) -> Tuple[dict, Dict[str, tuple]]:
  """(header, trained variable -> shape) of an adapter weights file, from the start
  of the file alone: the weights are not read (a bank lists many files)."""
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      entries = _safetensors_header(f)
    header = json.loads(entries.pop("__metadata__")["header"])
    shapes = {name: tuple(e["shape"]) for name, e in entries.items()}
  except Exception as e:  # Any way a file can be cut short or be something else.
    raise errors.UserError(_CORRUPT + f"{e!r}", path) from e
  return _current_metadata_keys(header), shapes


def _safetensors_header(f) -> dict:
  """The JSON at the start of a safetensors file: each tensor's dtype, shape and
  offsets, and "__metadata__" (where this project keeps its header)."""
  # safetensors.numpy.load drops the metadata and safe_open needs a local file
  # (not gs://); the format is an 8-byte little-endian header length, then JSON.
  length = int.from_bytes(f.read(8), "little")
  # The format's own bound: a file that is something else can hold any 8 bytes there,
  # and TensorFlow's GFile crashes the process on a read of such a size.
  if length > _MAX_HEADER_BYTES:
    raise ValueError(f"a header of {length} bytes (safetensors allows {_MAX_HEADER_BYTES})")
  return json.loads(f.read(length))


def load_adapter_weights(model: keras.Model, path) -> dict:
  """Restores adapter-only weights onto `model`, whose base is already loaded.

  Args:
    path: the file or its directory, or the AdapterFile already read from it.

  Raises:
    errors.UserError: naming the file, if it is missing or corrupt, its adapter
      config differs from the model's, a variable is missing or has another
      shape, or the model's base weights are not the ones the adapters were
      trained on.
  Returns:
    The file's header (configs, fingerprint, metadata).
  """
  path, header, arrays = path if isinstance(path, AdapterFile) else read_adapter_file(path)
  names = model.tf1_variable_map()
  saved, wanted = header["adapter_config"], model.adapter_config.to_dict()
  if saved != wanted:
    if isinstance(saved, dict) and saved.get("size") != wanted.get("size"):
      raise errors.UserError(
          f"adapter config: these adapters have size {saved.get('size')}, this run's "
          f"--adapter_size is {wanted.get('size')}", path)
    raise errors.UserError(f"adapter config {saved} does not match the model's {wanted}",
                           path)
  for name, value in arrays.items():
    if name not in names:
      raise errors.UserError(f"variable {name} does not exist in the model", path)
    if tuple(value.shape) != tuple(names[name].shape):
      raise errors.UserError(f"variable {name} has shape {tuple(value.shape)} in the "
                             f"file but {tuple(names[name].shape)} in the model", path)
  fingerprint = model_fingerprint(model, arrays)
  if fingerprint != header["base_fingerprint"]:
    raise errors.UserError(
        f"these adapter weights were trained on another base model "
        f"(base fingerprint {header['base_fingerprint'][:16]}..., this model's base "
        f"{fingerprint[:16]}...); load the same base checkpoint first", path)
  forget_fingerprints(model, keep=arrays)
  for name, value in arrays.items():
    names[name].assign(value)
  logging.info("Restored %d adapter-only variables from %s", len(arrays), path)
  return header
