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
fingerprint, and reads the trained variables on top. A training checkpoint
also holds the dropout random state under "rng" (Keras' seed generators), so
that a resumed run draws the dropout masks the uninterrupted run would have.

A kill at any moment leaves a usable latest checkpoint: TensorFlow writes the
files of `model.ckpt-STEP` first and names it in the `checkpoint` state file
(written to a temporary and renamed) only once they are complete. `latest`
still checks the one named, reading every tensor of it (a `.data` file cut
short by a full disk or a killed copy has an intact index), and falls back to
the newest complete one with a one-line warning if its files are missing,
unreadable or damaged. With none left, training starts from the initial
weights (the warning says so): a seeded run then reaches the same result; an
evaluation is refused (check_evaluable). What this process saved is not read back.

A save the file system refuses (no space, a read-only directory, a failing
bucket) ends the run with one line (file_io.WriteFailed) after removing what
it left: TensorFlow's `model.ckpt-STEP_temp` staging directory and the step's
files unless the state file already names them. The previous checkpoint stays
the latest, and the same command resumes from it once the fault is fixed.
"""

import json
import posixpath
import re
from typing import Dict, List, Mapping, Optional, Tuple

import keras
import tensorflow as tf
from absl import logging

from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import checkpoint_io
from adapter_bert import errors
from adapter_bert.storage import file_io

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
              fingerprint=adapter_weights.model_fingerprint(model, trained))


def seed_states(model: keras.Model) -> List[keras.Variable]:
  """The state variables of the model's Keras seed generators (dropout), in model order.

  Each advances at every training step; a resumed run needs them back to draw
  the dropout masks of an uninterrupted one.
  """
  return [v for v in model.non_trainable_variables if v.name == "seed_generator_state"]


def _checkpoint(model: keras.Model, optimizer=None, reference: Optional[dict] = None,
                rng: bool = False) -> tf.train.Checkpoint:
  if reference is None:
    items = {"model": checkpoint_io.trackable_variables(model)}
  else:
    names = model.tf1_variable_map()
    items = {"model": tf.train.Checkpoint(**{n: names[n] for n in reference["variables"]}),
             "base": tf.Variable(json.dumps(reference, sort_keys=True), trainable=False)}
  if optimizer is not None:
    items["optimizer"] = optimizer
  if rng:
    items["rng"] = tf.train.Checkpoint(
        **{f"seed_{i}": v for i, v in enumerate(seed_states(model))})
  return tf.train.Checkpoint(**items)


def manager(model: keras.Model, output_dir: str, optimizer=None, max_to_keep: int = 5,
            reference: Optional[dict] = None) -> tf.train.CheckpointManager:
  """Saves `model.ckpt-STEP` into output_dir (`manager.save(checkpoint_number=STEP)`).

  Args:
    optimizer: given when training: its slots and step are saved, and the
      dropout random state with them.
    reference: `base_reference(...)`: save only its variables and the reference;
      None saves the whole model.
  """
  checkpoint = _checkpoint(model, optimizer, reference, rng=optimizer is not None)
  return _Manager(checkpoint, output_dir, max_to_keep=max_to_keep,
                  checkpoint_name=CHECKPOINT_NAME)


class _Manager(tf.train.CheckpointManager):
  """A CheckpointManager whose failed save leaves nothing and says so in one line."""

  def save(self, checkpoint_number=None, **kwargs):
    try:
      path = super().save(checkpoint_number=checkpoint_number, **kwargs)
      # Written whole by this process: latest() need not read it back.
      _verified[_files_key(path)] = None
      return path
    except (tf.errors.OpError, OSError) as e:
      if not file_io.is_write_failure(e) or not isinstance(checkpoint_number, int):
        raise
      prefix = posixpath.join(self.directory, f"{CHECKPOINT_NAME}-{checkpoint_number}")
      remove_failed_save(prefix)
      raise file_io.write_failure(e, prefix, f"the checkpoint at step {checkpoint_number}") from e


def remove_failed_save(prefix: str) -> None:
  """Removes what a refused save of checkpoint `prefix` left (see the module docstring)."""
  directory = posixpath.dirname(prefix)
  leftovers = tf.io.gfile.glob(prefix + "_temp*")  # TF's sharded-save staging.
  leftovers += tf.io.gfile.glob(posixpath.join(directory, "checkpoint.tmp*"))  # State file's.
  try:
    state = tf.train.get_checkpoint_state(directory)
  except (ValueError, tf.errors.OpError):
    state = None
  if state is None or state.model_checkpoint_path.rstrip("/") != prefix:
    leftovers += tf.io.gfile.glob(prefix + ".index") + tf.io.gfile.glob(prefix + ".data-*")
  for path in leftovers:
    file_io.remove_quietly(path)


def latest(output_dir: str) -> Optional[str]:
  """The prefix of the run's latest complete checkpoint, None if it has none.

  That is the one the `checkpoint` state file names or, should its files be
  missing, unreadable or damaged (every tensor is read: _damaged), the newest
  complete one before it (with a warning): not None, which would start training
  over and overwrite what is there. None where none is left (warned too).
  """
  named, problem, fallback = _search(output_dir)
  if problem is None:
    return named
  if (named, fallback) not in _warned:
    _warned.add((named, fallback))
    logging.warning("%s names %s as the latest checkpoint, but %s; %s", output_dir,
                    named, problem, f"using {fallback}, the newest complete one"
                    if fallback else "no complete checkpoint is left: starting afresh")
  return fallback


def _search(output_dir: str) -> Tuple[Optional[str], Optional[str], Optional[str]]:
  """latest()'s search: the checkpoint the state file names, what is wrong with
  it (None: nothing) and, if anything, the newest complete one before it."""
  try:
    state = tf.train.get_checkpoint_state(output_dir)  # None if unreadable.
  except ValueError as e:  # A state file naming no checkpoint.
    logging.warning("%s", e)
    return None, None, None
  if state is None:
    return None, None, None
  named = state.model_checkpoint_path
  problem = _incomplete(named)
  if problem is None:
    return named, None, None
  found = set(state.all_model_checkpoint_paths)
  found.update(p[:-len(".index")] for p in tf.io.gfile.glob(
      posixpath.join(output_dir, f"{CHECKPOINT_NAME}-*.index")))
  below = _step_or_none(named)
  older = sorted((p for p in found if _step_or_none(p) is not None
                  and (below is None or _step_or_none(p) < below)),
                 key=_step_or_none, reverse=True)
  return named, problem, next((p for p in older if _incomplete(p) is None), None)


def check_evaluable(output_dir: str) -> None:
  """Refuses to evaluate an output_dir whose checkpoints are all damaged.

  Training starts afresh from such a directory (latest() warns); evaluating
  would score the base instead of what was trained, so it is one line instead.

  Raises:
    errors.UserError: naming the latest checkpoint and what is wrong with it.
  """
  named, problem, fallback = _search(output_dir)
  if problem is not None and fallback is None:
    raise errors.UserError(
        f"the latest checkpoint of --output_dir={output_dir}, and every one before it, is "
        f"damaged or incomplete ({problem}): nothing of it to evaluate; train again "
        f"(--do_train) or give another --output_dir", named)


_warned = set()  # Fallbacks already reported: latest() runs several times per run.


def _incomplete(prefix: str) -> Optional[str]:
  """What is wrong with the files of checkpoint `prefix`; None if nothing."""
  if not tf.io.gfile.exists(prefix + ".index"):
    return "its .index file is missing"
  try:
    checkpoint_io.checkpoint_reader(prefix)
  except (errors.UserError, tf.errors.OpError, ValueError):
    return "its .index file is unreadable"
  shards = tf.io.gfile.glob(prefix + ".data-*-of-*")
  counts = {int(re.search(r"-of-(\d+)$", p).group(1)) for p in shards}
  if len(counts) != 1 or len(shards) != counts.pop():
    return "some of its .data files are missing"
  return _damaged(prefix, sorted(shards))


def _damaged(prefix: str, shards: List[str]) -> Optional[str]:
  """checkpoint_io.unreadable_tensor, once per version of the checkpoint's files:
  latest() runs several times a run, and a rewritten checkpoint is read again."""
  try:
    key = _files_key(prefix, shards)
  except tf.errors.NotFoundError:
    return "some of its files are missing"
  if key not in _verified:
    _verified[key] = checkpoint_io.unreadable_tensor(prefix)
  return _verified[key]


def _files_key(prefix: str, shards: Optional[List[str]] = None) -> tuple:
  """The version of checkpoint `prefix`'s files: each one's name, size and time."""
  if shards is None:
    shards = sorted(tf.io.gfile.glob(prefix + ".data-*-of-*"))
  return (prefix,) + tuple((p, s.length, s.mtime_nsec) for p in [prefix + ".index"] + shards
                           for s in [tf.io.gfile.stat(p)])


_verified = {}  # _damaged's answers by _files_key.


def step_of(path: str) -> int:
  """The global step in a checkpoint prefix: `.../model.ckpt-12` -> 12."""
  return int(path.rsplit("-", 1)[1])


def _step_or_none(path: str) -> Optional[int]:
  match = re.search(rf"{re.escape(CHECKPOINT_NAME)}-(\d+)$", path)
  return int(match.group(1)) if match else None


def read_reference(path: str) -> Optional[dict]:
  """The base reference of a checkpoint of trained variables only; None for a whole model."""
  reader = checkpoint_io.checkpoint_reader(path)
  if not reader.has_tensor(_BASE_KEY):
    return None
  return json.loads(reader.get_tensor(_BASE_KEY))


def _has_rng(path: str) -> bool:
  names = checkpoint_io.checkpoint_reader(path).get_variable_to_shape_map()
  return any(n.startswith("rng/") for n in names)


def check_base(model: keras.Model, path: str, reference: Dict[str, object]) -> None:
  """Refuses to put a checkpoint's trained variables on another base than its own."""
  fingerprint = adapter_weights.model_fingerprint(model, reference["variables"])
  if fingerprint != reference["fingerprint"]:
    sources = ", ".join(f"--{k}={v}" for k, v in sorted(reference.items())
                        if k not in ("variables", "fingerprint") and v)
    raise errors.UserError(
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
  (resuming training) its slots and step must be in the checkpoint too, and
  the dropout random state is restored where the checkpoint has it.
  """
  reference = read_reference(path)
  if reference is not None:
    check_base(model, path, reference)
  if reference is None and optimizer is None:
    checkpoint_io.load_checkpoint(model, path)
    return
  # The read writes the reference's variables only: the base's fingerprint stays.
  adapter_weights.forget_fingerprints(model, keep=reference and reference["variables"])
  rng = optimizer is not None and _has_rng(path)
  if optimizer is not None and not rng:
    logging.warning("%s holds no dropout random state (an older checkpoint): the "
                    "resumed run draws other dropout masks than an uninterrupted one", path)
  try:
    status = _checkpoint(model, optimizer, reference, rng).read(path)
  except (tf.errors.DataLossError, tf.errors.OutOfRangeError, IndexError) as e:
    # Damaged since latest() read it (or given directly): one line, not TF's traceback.
    raise errors.UserError(f"cannot read checkpoint {path} (corrupt or truncated?): "
                           f"{checkpoint_io.first_line(e)}",
                           checkpoint_io.data_files(path)) from e
  status.assert_existing_objects_matched()
  # What the model has no place for (e.g. the save counter) is not an error.
  status.expect_partial()
  if optimizer is not None:
    logging.info("Resuming from %s", path)
  else:
    logging.info("Restored %d trained variables from %s", len(reference["variables"]), path)
