"""A run's own checkpoints: `model.ckpt-STEP` in output_dir, saved, found and resumed.

As the original Estimator's model_dir: training saves every
`save_checkpoints_steps` (the last 5 kept), and the latest checkpoint of
output_dir wins over every other source of weights, so running the same command
again resumes an interrupted run and an eval-only run evaluates what was trained.
This module is the one place that looks that checkpoint up.

The files are object-based `tf.train.Checkpoint`s: the model's variables under
"model", keyed by their original TF1 names (checkpoint_io), the optimizer
(slots and step) under "optimizer". When part of the model is frozen (adapter
tuning and the other baselines) a checkpoint holds only what trains, plus a
reference to its base under "base": where the frozen weights were loaded from
and a SHA-256 fingerprint of their values. Saving then writes ~3% of the model
(and its optimizer state), and restoring loads the base first, checks the
fingerprint, and reads the trained variables on top.
"""

import json
from typing import Dict, Mapping, Optional

import keras
import tensorflow as tf
from absl import logging

from checkpoints import adapter_weights
from checkpoints import checkpoint_io

CHECKPOINT_NAME = "model.ckpt"
_BASE_KEY = "base/.ATTRIBUTES/VARIABLE_VALUE"


def base_reference(model: keras.Model, sources: Mapping[str, Optional[str]]) -> Optional[dict]:
  """What a checkpoint of only the trained variables must say about the rest.

  Args:
    model: the task model, its frozen variables already loaded.
    sources: where they came from, e.g. {"init_checkpoint": ..., "adapter_checkpoint": ...}.
  Returns:
    None if every variable trains (the checkpoint then holds the whole model),
    else {"variables": the trained TF1 names, "fingerprint": SHA-256 of the
    frozen ones, **sources}.
  """
  names = model.tf1_variable_map()
  trained = sorted(n for n, v in names.items() if v.trainable)
  if len(trained) == len(names):
    return None
  return dict(sources, variables=trained,
              fingerprint=adapter_weights.base_fingerprint(names, trained))


def _checkpoint(model: keras.Model, optimizer=None,
                reference: Optional[dict] = None) -> tf.train.Checkpoint:
  if reference is None:
    items = {"model": checkpoint_io.trackable_variables(model)}
  else:
    names = model.tf1_variable_map()
    items = {"model": tf.train.Checkpoint(**{n: names[n] for n in reference["variables"]}),
             "base": tf.Variable(json.dumps(reference, sort_keys=True), trainable=False)}
  if optimizer is not None:
    items["optimizer"] = optimizer
  return tf.train.Checkpoint(**items)


def manager(model: keras.Model, output_dir: str, optimizer=None, max_to_keep: int = 5,
            reference: Optional[dict] = None) -> tf.train.CheckpointManager:
  """Saves `model.ckpt-STEP` into output_dir (`manager.save(checkpoint_number=STEP)`).

  Args:
    reference: `base_reference(...)`: save only its variables and the reference;
      None saves the whole model.
  """
  return tf.train.CheckpointManager(_checkpoint(model, optimizer, reference), output_dir,
                                    max_to_keep=max_to_keep,
                                    checkpoint_name=CHECKPOINT_NAME)


def latest(output_dir: str) -> Optional[str]:
  """The prefix of the run's latest checkpoint, None if it has none."""
  return tf.train.latest_checkpoint(output_dir)


def step_of(path: str) -> int:
  """The global step in a checkpoint prefix: `.../model.ckpt-12` -> 12."""
  return int(path.rsplit("-", 1)[1])


def latest_step(output_dir: str) -> int:
  """The global step of the run's latest checkpoint, 0 if none."""
  path = latest(output_dir)
  return step_of(path) if path else 0


def read_reference(path: str) -> Optional[dict]:
  """The base reference of a checkpoint of trained variables only; None for a whole model."""
  reader = checkpoint_io.checkpoint_reader(path)
  if not reader.has_tensor(_BASE_KEY):
    return None
  return json.loads(reader.get_tensor(_BASE_KEY))


def check_base(model: keras.Model, path: str, reference: Dict[str, object]) -> None:
  """Refuses to put a checkpoint's trained variables on another base than its own."""
  names = model.tf1_variable_map()
  fingerprint = adapter_weights.base_fingerprint(names, reference["variables"])
  if fingerprint != reference["fingerprint"]:
    sources = ", ".join(f"--{k}={v}" for k, v in sorted(reference.items())
                        if k not in ("variables", "fingerprint") and v)
    raise ValueError(
        f"{path} holds only the trained variables of a model whose frozen weights came "
        f"from {sources or 'random initialization'} (fingerprint "
        f"{reference['fingerprint'][:16]}...); the weights loaded now differ "
        f"({fingerprint[:16]}...): start from the same base")


def restore(model: keras.Model, output_dir: str, optimizer=None) -> int:
  """Fills `model` (and `optimizer`) from output_dir's latest checkpoint (`restore_from`).

  Returns:
    The checkpoint's global step; 0 (and nothing restored) if there is none.
  """
  path = latest(output_dir)
  if path is None:
    return 0
  restore_from(model, path, optimizer)
  return step_of(path)


def restore_from(model: keras.Model, path: str, optimizer=None) -> None:
  """Fills `model` (and `optimizer`) from one of this project's run checkpoints.

  A checkpoint of the whole model is read with the checks and log lines of any
  other checkpoint (checkpoint_io.load_checkpoint). One of trained variables
  only needs the model's base loaded first (model_setup does), and is refused
  if the base differs from the one it was trained on. With an optimizer
  (resuming training) its slots and step must be in the checkpoint too.
  """
  reference = read_reference(path)
  if reference is not None:
    check_base(model, path, reference)
  if reference is None and optimizer is None:
    checkpoint_io.load_checkpoint(model, path)
    return
  status = _checkpoint(model, optimizer, reference).read(path)
  if optimizer is None:
    status.expect_partial()
  status.assert_existing_objects_matched()
  if optimizer is not None:
    logging.info("Resuming from %s", path)
  else:
    logging.info("Restored %d trained variables from %s", len(reference["variables"]), path)
