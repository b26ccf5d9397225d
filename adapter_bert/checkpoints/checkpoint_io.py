"""Checkpoints in: Google's BERT releases, original adapter-bert runs, this project's runs.

Google's and adapter-bert's TF1 checkpoints are name-based (`bert/encoder/...`);
`model.tf1_variable_map()` is the one table from those names to Keras variables.
This project's training checkpoints are object-based (`tf.train.Checkpoint`,
managed by `tf.train.CheckpointManager`) with the model's variables under "model",
keyed by those same original names (`trackable_variables`).

A checkpoint that is missing, unreadable (a corrupt `.index`, a truncated
`.data-*`) or does not fit the model is an errors.UserError naming its files
(and, for a misfit, bert_config.json and the variable).
"""

import re
from typing import Callable, Dict, Mapping, Optional

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from adapter_bert import errors
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.model.modeling import variable_role
from adapter_bert.storage import file_io

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"

# Checkpoint entries that fine-tuning never uses: pre-training heads, Adam slots
# of the original optimizer, the TF1 step counter.
_SKIPPED = re.compile(r"^cls/(predictions|seq_relationship)/|/adam_[mv]$|^global_step$")


def write_tf1_checkpoint(prefix: str, tensors: Mapping[str, np.ndarray]) -> None:
  """Writes `tensors` as a name-based checkpoint, the format of Google's BERT releases.

  Object-based `tf.train.Checkpoint` files key variables by object-graph paths;
  Google's checkpoints key them by TF1 variable name (`bert/embeddings/...`), and
  only the raw `SaveV2` op writes that layout in TF2.

  Args:
    prefix: checkpoint prefix (e.g. `dir/bert_model.ckpt`), any tf.io.gfile path.
    tensors: TF1 variable name -> array.
  """
  names = sorted(tensors)
  file_io.make_parent_dirs(prefix)
  tf.raw_ops.SaveV2(
      prefix=prefix,
      tensor_names=names,
      shape_and_slices=[""] * len(names),
      tensors=[tf.convert_to_tensor(tensors[n]) for n in names])


def trackable_variables(model: keras.Model) -> tf.train.Checkpoint:
  """The model's variables keyed by their original names, for tf.train.Checkpoint.

  Keras 3 lists of layers are invisible to tf.train.Checkpoint, and keying by
  the original names keeps checkpoints independent of the Keras object layout.
  """
  return tf.train.Checkpoint(**model.tf1_variable_map())


def checkpoint_reader(path: str):
  """A reader of the checkpoint with prefix `path`.

  Not `tf.train.load_checkpoint`: it asks `isdir` first, which is true for any
  prefix of a file on `ram://` (and would be on some object stores).

  Raises:
    errors.UserError: naming `path.index` if it is missing or not an index.
  """
  try:
    return tf.compat.v1.train.NewCheckpointReader(path)
  except tf.errors.NotFoundError as e:
    raise errors.UserError(f"checkpoint not found (no {_base(path)}.index)", path) from e
  except tf.errors.OpError as e:  # DataLoss and the like: a corrupt or cut-off index
    raise errors.UserError(f"not a readable checkpoint index (corrupt or truncated?): "
                           f"{e.message}", path + ".index") from e


def unreadable_tensor(prefix: str) -> Optional[str]:
  """Why some tensor of checkpoint `prefix` cannot be read; None if all can.

  Opening a checkpoint reads its index only: a `.data-*` file cut short (a full
  disk, a killed copy) shows when its tensors are read ("Read less bytes than
  requested", an IndexError), a damaged byte as a checksum mismatch. So every
  tensor is read once, one at a time, as a restore would read them.
  """
  reader = checkpoint_reader(prefix)
  for name in sorted(reader.get_variable_to_shape_map()):
    try:
      reader.get_tensor(name)
    except (tf.errors.OpError, IndexError) as e:
      return (f"its data ({data_files(prefix)}) is damaged: cannot read {name} "
              f"({first_line(e)})")
  return None


def _base(path: str) -> str:
  return path.rstrip("/").rsplit("/", 1)[-1]


def data_files(prefix: str) -> str:
  """The `.data-*` file name(s) of a checkpoint, for messages."""
  found = sorted(tf.io.gfile.glob(prefix + ".data-*"))
  return ", ".join(found) if found else prefix + ".data-00000-of-00001 (missing)"


def resolve_checkpoint(path: str) -> str:
  """A checkpoint prefix from a prefix or a directory holding a `checkpoint` file.

  Raises:
    errors.UserError: if there is none; a path to one of the checkpoint's
      files (`.index`, `.data-*`) is named with the prefix to give instead.
  """
  if tf.io.gfile.exists(path + ".index"):
    return path
  if tf.io.gfile.isdir(path):
    latest = tf.train.latest_checkpoint(path)
    if latest is None:
      raise errors.UserError("no checkpoint found in this directory (no `checkpoint` file "
                             "naming one)", path)
    return latest
  prefix = re.sub(r"\.(index|data-\d+-of-\d+|meta)$", "", path)
  if prefix != path and tf.io.gfile.exists(prefix + ".index"):
    raise errors.UserError(f"give the checkpoint prefix {prefix}, not one of its files", path)
  raise errors.UserError(f"checkpoint not found (no {_base(path)}.index)", path)


def is_object_based(path: str) -> bool:
  return OBJECT_GRAPH_KEY in checkpoint_reader(path).get_variable_to_shape_map()


def _log_variables(names: Dict[str, keras.Variable], initialized) -> None:
  # The original's log lines, so that `grep INIT_FROM_CKPT` still works.
  logging.info("**** Trainable Variables ****")
  for name, variable in names.items():
    if variable.trainable:
      init = ", *INIT_FROM_CKPT*" if name in initialized else ""
      logging.info("  name = %s:0, shape = %s%s", name, tuple(variable.shape), init)


def load_checkpoint(model: keras.Model, path: str) -> Dict[str, keras.Variable]:
  """Loads a Google, adapter-bert or project checkpoint into `model`.

  Name-based checkpoints must hold every encoder variable (an error names the
  missing ones); adapters and the task head are loaded when present and keep
  their fresh initial values otherwise. Pre-training heads and Adam slots are
  skipped.

  Args:
    model: a model of modeling.py (encoder or task model).
    path: checkpoint prefix or a directory with a `checkpoint` state file.
  Returns:
    The variables that were loaded, by TF1 name.
  Raises:
    errors.UserError: for a missing or unreadable checkpoint, a missing encoder
      variable or a shape mismatch; the message names the checkpoint, the
      variable, both shapes and the model's bert_config.json.
  """
  path = resolve_checkpoint(path)
  names = model.tf1_variable_map()
  adapter_weights.forget_fingerprints(model)
  if is_object_based(path):
    loaded = _load_object_based(model, path, names)
  else:
    reader = checkpoint_reader(path)

    def get_tensor(name):
      try:
        return reader.get_tensor(name)
      # A truncated .data file raises IndexError ("Read less bytes than requested").
      except (tf.errors.OpError, IndexError) as e:
        raise errors.UserError(f"cannot read variable {name} of checkpoint {path} "
                               f"(corrupt or truncated?): {first_line(e)}",
                               data_files(path)) from e

    loaded = _load_by_name(names, reader.get_variable_to_shape_map(), get_tensor,
                           f"checkpoint {path}", _config_source(model))
  _log_variables(names, loaded)
  return loaded


def first_line(error: Exception) -> str:
  return (getattr(error, "message", None) or str(error)).strip().split("\n")[0]


def _config_source(model: keras.Model) -> Optional[str]:
  """The bert_config.json `model` was built from, if it was read from a file."""
  return getattr(getattr(model, "config", None), "source", None)


def load_arrays(model: keras.Model, arrays: Mapping[str, np.ndarray],
                source: str) -> Dict[str, keras.Variable]:
  """Loads {TF1 name: array} into `model`: weights read into memory from another
  format (e.g. a TF Hub encoder, tf2_encoder), with the checks and log lines of
  a name-based checkpoint (see `load_checkpoint`); `source` names them in messages."""
  names = model.tf1_variable_map()
  adapter_weights.forget_fingerprints(model)
  shapes = {name: np.shape(array) for name, array in arrays.items()}
  loaded = _load_by_name(names, shapes, arrays.__getitem__, source, _config_source(model))
  _log_variables(names, loaded)
  return loaded


def _load_by_name(names: Dict[str, keras.Variable], shapes: Mapping[str, object],
                  get_tensor: Callable[[str], np.ndarray], source: str,
                  config_source: Optional[str] = None):
  """Assigns `get_tensor(name)` to each variable of `names` that `shapes` lists.

  The one loader of name-based weights (checkpoint files and in-memory arrays):
  every encoder variable must be there with the model's shape.
  """
  config = config_source or "bert_config.json"
  missing = [n for n in names
             if n not in shapes and variable_role(n) not in ("adapter", "head")]
  if missing:
    raise errors.UserError(
        f"{source} lacks {len(missing)} encoder variable(s) of the model built from "
        f"{config}: {', '.join(missing[:10])} (does the config match the checkpoint?)")
  for name, variable in names.items():
    if name in shapes and tuple(shapes[name]) != tuple(variable.shape):
      raise errors.UserError(
          f"{source}: variable {name} has shape {tuple(shapes[name])} in the "
          f"checkpoint but {tuple(variable.shape)} in the model built from {config}: "
          f"the config does not match the checkpoint")
  loaded = {}
  for name, variable in names.items():
    if name in shapes:
      variable.assign(get_tensor(name))
      loaded[name] = variable
    else:
      logging.info("Not in checkpoint, keeps its initial value: %s", name)
  unused = sorted(n for n in shapes if n not in names and not _SKIPPED.search(n))
  if unused:
    logging.warning("Checkpoint variables not used by the model: %s", ", ".join(unused))
  return loaded


def _load_object_based(model, path, names):
  try:
    status = tf.train.Checkpoint(model=trackable_variables(model)).read(path)
    status.expect_partial()
    status.assert_existing_objects_matched()
  except (ValueError, AssertionError, tf.errors.InvalidArgumentError) as e:
    raise errors.UserError(f"checkpoint {path} does not fit the model built from "
                           f"{_config_source(model) or 'bert_config.json'}: {e}") from e
  except (tf.errors.OpError, IndexError) as e:
    raise errors.UserError(f"cannot read checkpoint {path} (corrupt or truncated?): "
                           f"{first_line(e)}", data_files(path)) from e
  return dict(names)
