"""An adapter bank: any number of tasks' adapter-only weights over one frozen base.

Adapter tuning leaves the pre-trained encoder untouched, so one copy of it
serves every task; each task adds only what it trained (adapters, LayerNorms,
head: about 3% of BERT-base). A bank is a directory that holds those per-task
files together with a description of the one base they all need:

  BANK/
    bank.json                                  {"format": 1, "base": {...}}
    tasks/<TASK>/adapter_weights.safetensors   a run's adapter_model/, unchanged
    tasks/<TASK>/adapter_config.json

bank.json's base: `fingerprint` (SHA-256 of the frozen weights, as in the
adapter files' headers), `bert_config`, `init_checkpoint`,
`bert_hub_module_handle`, `vocab_file`, `do_lower_case`.

A bank moves (a bucket to a laptop, one directory to another): a base path is
recorded relative to the bank's directory where the two share a root (one
tree below the file system's root, or one bucket), so a bank copied together
with its base finds it in its new place; a URL (https:// hub handles), another
bucket or scheme, or a tree that shares only "/" with the bank keeps its
absolute form. bank.json's `created_in` says where the bank was written: where
a relative path does not resolve against the bank's directory (the bank moved,
its base did not), it is looked for there (base_path). open_bank gives the
paths resolved against the bank's directory; a bank of before (absolute paths)
reads as it did. Wherever the base is not found, every command that reads it
takes its new place (--init_checkpoint or --bert_hub_module_handle,
--vocab_file, --bert_config_file), checked against the recorded fingerprint and
bert_config (bank_tasks.read_base_weights).

A task is a run_classifier.py task: its file holds the adapters, LayerNorms
and classifier head of a model of the bank's BERT config, and its metadata
says what serving needs (labels or regression, max_seq_length, casing);
`check_task` is the one check of that, for adding a task and for serving.

What the fingerprint covers: every encoder weight except the adapters and the
LayerNorms (and the task head, which is no part of the encoder). That is
exactly what stays frozen with --train_mode=adapters, and also with
--train_mode=layer_norm (no adapters, the same frozen set), so the header of
such a file carries the bank's fingerprint itself. The other modes train
encoder weights (full, top_layers:K) or freeze the LayerNorms (head): their
tasks need a base of their own, so a bank refuses them.

Each task is written with storage/file_io.AtomicDirectory: a reader finds a
task's two files from one run or none, and adding or removing a task never
touches another's files. Mistakes (a file of another base, a bad task name, a
directory that is no bank) are errors.UserError naming the file.
"""

import dataclasses
import json
import os
import posixpath
import re
from typing import Dict, List, Mapping, Optional

import numpy as np
import tensorflow as tf
from absl import logging

from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert import label_lists
from adapter_bert.bank import base_paths
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import fusion_weights
from adapter_bert import errors
from adapter_bert.model import modeling
from adapter_bert.model.modeling import variable_role
from adapter_bert.storage import file_io

BANK_FILE = "bank.json"
TASKS_DIR = "tasks"
FORMAT = 1

# A task name is a directory name; a leading dot is left out because hidden
# siblings are file_io's temporaries and backups.
TASK_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")
TASK_NAMES_ALLOWED = "letters, digits, _ . - (not starting with .)"

# What a bank task may have trained: what it leaves frozen is then the same
# set of weights for every task, the one the bank's fingerprint covers.
TRAINED_ROLES = ("adapter", "layer_norm", "head")
TRAIN_MODES = ("adapters", "layer_norm")

# What a task's header metadata must hold, for people and for serving.
REQUIRED_METADATA = ("task", "labels", "is_regression", "max_seq_length", "do_lower_case",
                     "train_mode", "global_step")

# The head of run_classifier.py's BertClassifier, by its original names.
HEAD = ("output_weights", "output_bias")

_BASE_KEYS = ("fingerprint", "bert_config", "init_checkpoint", "bert_hub_module_handle",
              "vocab_file", "do_lower_case")
# The base's paths, each with the flag that gives its new place.
PATH_FLAGS = {"init_checkpoint": "--init_checkpoint",
              "bert_hub_module_handle": "--bert_hub_module_handle",
              "vocab_file": "--vocab_file"}
# bank.json's key of where the bank was written (its relative paths' first home).
CREATED_IN = "created_in"


@dataclasses.dataclass(frozen=True)
class BankBase:
  """The base every task of a bank was trained on (bank.json's "base")."""
  fingerprint: str
  bert_config: dict
  init_checkpoint: Optional[str]
  bert_hub_module_handle: Optional[str]
  vocab_file: str
  do_lower_case: bool
  # Read from a bank: its paths where they were when the bank was written (for
  # a bank that moved without its base); None for a base not read from a bank.
  original_paths: Optional[Dict[str, Optional[str]]] = dataclasses.field(
      default=None, compare=False, repr=False)

  def to_dict(self) -> dict:
    return {k: getattr(self, k) for k in _BASE_KEYS}

  @classmethod
  def of_run(cls, fingerprint: str, bert_config: dict, init_checkpoint: Optional[str],
             bert_hub_module_handle: Optional[str], vocab_file: str,
             do_lower_case: bool) -> "BankBase":
    """A run's base; local paths made absolute, as a bank is read from anywhere."""
    return cls(fingerprint, bert_config, _absolute(init_checkpoint),
               _absolute(bert_hub_module_handle), _absolute(vocab_file), bool(do_lower_case))


def _absolute(path: Optional[str]) -> Optional[str]:
  # URLs (gs://, https:// hub handles) are left as they are.
  if not path or "://" in path:
    return path
  return os.path.abspath(path)


def is_valid_task_name(name: str) -> bool:
  return bool(TASK_NAME.fullmatch(name or ""))


def check_task_name(name: str) -> None:
  if not is_valid_task_name(name):
    raise errors.UserError(f"task name {name!r}: must be {TASK_NAMES_ALLOWED}")


def task_dir(bank_dir: str, task: str) -> str:
  check_task_name(task)
  return posixpath.join(bank_dir, TASKS_DIR, task)


def frozen_fingerprint(variables: Mapping[str, object]) -> str:
  """The bank fingerprint of a base (module docstring), from its variables or arrays
  by original name (e.g. a task model's `tf1_variable_map()`)."""
  return adapter_weights.base_fingerprint(
      variables, [n for n in variables if variable_role(n) in TRAINED_ROLES])


# --- bank.json ---------------------------------------------------------------

def exists(bank_dir: str) -> bool:
  return tf.io.gfile.exists(posixpath.join(bank_dir, BANK_FILE))


def open_bank(bank_dir: str) -> BankBase:
  """Reads bank.json. Raises errors.UserError if bank_dir holds none or a bad one."""
  path = posixpath.join(bank_dir, BANK_FILE)
  if not tf.io.gfile.exists(path):
    raise errors.UserError(
        f"not an adapter bank: no {BANK_FILE} (a bank is created by run_classifier.py "
        f"--do_train --adapter_bank=DIR, or by python manage_bank.py "
        f"--adapter_bank=DIR add)", bank_dir)
  try:
    with tf.io.gfile.GFile(path, "r") as f:
      data = json.loads(f.read())
  except json.JSONDecodeError as e:
    raise errors.UserError(f"not valid JSON: {e.msg}", path, e.lineno) from e
  if not isinstance(data, dict) or data.get("format") != FORMAT:
    raise errors.UserError(f"not a bank file of format {FORMAT}", path)
  base = data.get("base")
  missing = [k for k in _BASE_KEYS if not isinstance(base, dict) or k not in base]
  if missing:
    raise errors.UserError(f"its base lacks {', '.join(missing)}", path)
  created_in = data.get(CREATED_IN)
  if not (created_in is None or isinstance(created_in, str)):
    raise errors.UserError(f"its {CREATED_IN} {created_in!r} is not a path", path)
  for key in PATH_FLAGS:
    if not (base[key] is None or isinstance(base[key], str)):
      raise errors.UserError(f"its base {key} {base[key]!r} is not a path", path)
  # Where the bank was written: a relative path's first home. A bank of before
  # (no created_in) read a relative path from the working directory.
  original = {k: base_paths.resolve_in_bank(base[k], created_in) if created_in else base[k]
              for k in PATH_FLAGS}
  return BankBase(**{k: base_paths.resolve_in_bank(base[k], bank_dir) if k in PATH_FLAGS else base[k]
                     for k in _BASE_KEYS}, original_paths=original)


def _base_path_exists(key: str, path: str) -> bool:
  if key == "bert_hub_module_handle" and path.startswith(("http://", "https://")):
    return True  # Downloaded (or read from the cache) when loaded.
  if key == "init_checkpoint":
    return tf.io.gfile.exists(path) or tf.io.gfile.exists(path + ".index")
  return tf.io.gfile.exists(path)


def base_path(bank_dir: str, bank: BankBase, key: str, required: bool = True) -> Optional[str]:
  """The bank's base path `key` (PATH_FLAGS) where it exists: resolved against the bank's
  directory, else where it was when the bank was written (a bank moved without its
  base). None where bank.json records none, or (not `required`) it is found nowhere.

  Raises:
    errors.UserError: naming bank.json, the missing path and the flag that gives
      the base's new place, where `required` and the path is found nowhere.
  """
  path = getattr(bank, key)
  if not path or _base_path_exists(key, path):
    return path
  original = (bank.original_paths or {}).get(key)
  if original and original != path and _base_path_exists(key, original):
    logging.info("Adapter bank %s: its base's %s is not at %s, reading it from %s, where "
                 "it was when the bank was written", bank_dir, key, path, original)
    return original
  if not required:
    return None
  also = (f" (nor at {original}, where it was when the bank was written)"
          if original and original != path else "")
  raise errors.UserError(
      f"the base's {key} is not found at {path}{also}: if the base has moved, give its "
      f"new place with {PATH_FLAGS[key]} (checked against the bank's fingerprint)",
      posixpath.join(bank_dir, BANK_FILE))


def check_bert_config_file(bank_dir: str, bank: BankBase, bert_config_file: str) -> None:
  """Refuses a --bert_config_file that is not the bank's base's config."""
  given = modeling.BertConfig.from_json_file(bert_config_file)
  check_base(bank_dir, bank, None, given.to_dict(), None,
             errors.flags_named(bert_config_file=bert_config_file))


def bank_config(bank_dir: str, bank: BankBase) -> modeling.BertConfig:
  """The bank's BERT config, as a model is built from it."""
  path = posixpath.join(bank_dir, BANK_FILE)
  try:
    return modeling.BertConfig.from_dict(dict(bank.bert_config))
  except (TypeError, ValueError) as e:
    raise errors.UserError(f"its base bert_config is not a BERT config: {e}", path) from e


def find_bank(bank_dir: str) -> Optional[BankBase]:
  """The bank at bank_dir; None where one can be created (no such or an empty directory).

  Raises:
    errors.UserError: if bank_dir is a non-empty directory that is no bank (it
      might be anything of the user's), or its bank.json is bad.
  """
  if exists(bank_dir):
    return open_bank(bank_dir)
  if tf.io.gfile.isdir(bank_dir) and tf.io.gfile.listdir(bank_dir):
    raise errors.UserError(f"not an adapter bank (no {BANK_FILE}) and not empty: give a new "
                           f"or empty directory to create a bank in", bank_dir)
  return None


def create_bank(bank_dir: str, base: BankBase) -> BankBase:
  """Opens the bank at bank_dir, creating it for `base` if there is none.

  Raises:
    errors.UserError: if the bank exists for another base, or bank_dir is a
      non-empty directory that is no bank (it might be anything of the user's).
  """
  existing = find_bank(bank_dir)
  if existing is not None:
    check_base(bank_dir, existing, base.fingerprint, base.bert_config, base.do_lower_case,
               "this base")
    return existing
  index, tasks = posixpath.join(bank_dir, BANK_FILE), posixpath.join(bank_dir, TASKS_DIR)
  made = [p for p in (bank_dir, tasks) if not tf.io.gfile.exists(p)]
  what = "the adapter bank's index"
  # Paths relative to the bank where they can be (module docstring): it can move.
  record = base.to_dict()
  record.update({k: base_paths.relative_to_bank(_absolute(getattr(base, k)), bank_dir)
                 for k in PATH_FLAGS})
  try:
    tf.io.gfile.makedirs(tasks)
    file_io.atomic_write(index, json.dumps(
        {"format": FORMAT, "base": record, CREATED_IN: base_paths.bank_place(bank_dir)}, indent=2,
        sort_keys=True) + "\n", what=what)
  except (tf.errors.OpError, OSError, file_io.WriteFailed) as e:
    # What this call made goes too: a half-made bank would be refused as "not empty".
    for path in reversed(made):
      file_io.remove_quietly(path)
    if isinstance(e, file_io.WriteFailed) or file_io.is_write_failure(e):
      raise file_io.write_failure(e, index, what) from e
    raise
  logging.info("Created adapter bank %s for base %s (fingerprint %s)", bank_dir,
               base.init_checkpoint or base.bert_hub_module_handle or "(random weights)",
               base.fingerprint)
  return base


def base_from_run(adapter_model: str) -> BankBase:
  """The base of a new bank, from a run's adapter file and the run_config.json beside
  its adapter_model/ (where its base came from): what manage_bank.py `add` creates a
  bank for."""
  weights, header, _ = adapter_weights.read_adapter_file(adapter_model)
  run_dir = posixpath.dirname(posixpath.dirname(weights))
  config_path = posixpath.join(run_dir, "run_config.json")
  if not tf.io.gfile.exists(config_path):
    raise errors.UserError(
        f"cannot create a bank from {adapter_model}: no run_config.json in {run_dir or '.'} "
        f"says which base it was trained on (create the bank by training with "
        f"run_classifier.py --adapter_bank)")
  with tf.io.gfile.GFile(config_path, "r") as f:
    config = json.loads(f.read())
  # The run's paths as it was given them: from the working directory.
  return BankBase.of_run(
      fingerprint=header["base_fingerprint"], bert_config=header.get("bert_config"),
      init_checkpoint=config.get("init_checkpoint"),
      bert_hub_module_handle=config.get("bert_hub_module_handle"),
      vocab_file=config.get("vocab_file"),
      do_lower_case=bool(config.get("do_lower_case",
                                    header.get("metadata", {}).get("do_lower_case"))))

def check_base(bank_dir: str, bank: BankBase, fingerprint: Optional[str],
               bert_config: dict, do_lower_case: Optional[bool], what: str) -> None:
  """Refuses a model or file (`what`) whose base is not the bank's.

  fingerprint None: not known yet (the model is not loaded); the config alone.
  """
  problems = []
  if bert_config != bank.bert_config:
    keys = sorted(k for k in set(bert_config) | set(bank.bert_config)
                  if bert_config.get(k) != bank.bert_config.get(k))
    problems.append("bert_config differs in " + ", ".join(
        f"{k} ({bert_config.get(k)!r}, the bank's {bank.bert_config.get(k)!r})" for k in keys))
  if fingerprint is not None and fingerprint != bank.fingerprint:
    problems.append(f"base fingerprint {fingerprint}, the bank's {bank.fingerprint}")
  if problems:
    raise errors.UserError(f"{what} is not the base of adapter bank {bank_dir}: "
                           + "; ".join(problems))
  if do_lower_case is not None and do_lower_case != bank.do_lower_case:
    raise errors.UserError(f"{what} has do_lower_case={do_lower_case}, adapter bank "
                           f"{bank_dir} has do_lower_case={bank.do_lower_case} (one "
                           f"tokenizer serves every task of a bank)")


# --- tasks -------------------------------------------------------------------

def check_task(bank_dir: str, bank: BankBase, header: dict, arrays: Mapping[str, np.ndarray],
               path: str) -> None:
  """Refuses an adapter file that is no task of this bank (module docstring).

  Args:
    header, arrays: the file's (adapter_weights.read_adapter_file).
    path: the file, for messages.
  Raises:
    errors.UserError: naming the file, if it was trained on a BERT of another
      config, trained encoder weights, holds variables other than those of a
      classifier of the bank's config and its adapter config (names, shapes,
      float32), or its metadata lacks something or disagrees with its head or
      the bank. Whether its base fingerprint is the bank's is the callers' to
      check (add_task: bank.json's; serving: the loaded base's).
  """
  metadata = header.get("metadata") or {}
  if (header.get("bert_config") or {}) != bank.bert_config:
    _refuse_base(bank_dir, bank, header, path)
  config = bank_config(bank_dir, bank)
  _check_variables(arrays, header, config, metadata, path)
  _check_metadata(metadata, int(arrays["output_weights"].shape[0]), config, bank_dir, bank,
                  path)


def _refuse_base(bank_dir: str, bank: BankBase, header: dict, path: str) -> None:
  try:
    check_base(bank_dir, bank, header["base_fingerprint"], header.get("bert_config") or {},
               None, "the base these adapters were trained on")
  except errors.UserError as e:
    raise errors.UserError(str(e), path) from None


def _check_variables(arrays: Mapping[str, np.ndarray], header: dict,
                     config: modeling.BertConfig, metadata: dict, path: str) -> None:
  """Adapters, LayerNorms and a classifier head, each with the shape of its model's."""
  # Before the names: another frozen set is the reason, not "another model".
  if any(variable_role(n) == "pooler" for n in arrays):
    raise errors.UserError(
        "holds a pooler of its own (as an import of AdapterHub's default 2-layer head on "
        "[CLS] does: its first layer becomes the pooler); the tasks of a bank share the "
        "base's frozen pooler: train or import the task with a 1-layer head on the pooler "
        "(AdapterHub: add_classification_head(name, layers=1, use_pooler=True)), or use "
        "this file with run_classifier.py --adapter_checkpoint", path)
  num_layer_norms = 2 * (1 + 2 * config.num_hidden_layers)
  if (any(variable_role(n) not in TRAINED_ROLES for n in arrays)
      or sum(variable_role(n) == "layer_norm" for n in arrays) != num_layer_norms):
    raise errors.UserError(
        f"trained with --train_mode={metadata.get('train_mode', '?')}; a bank holds tasks "
        f"that trained adapters, LayerNorms and the head only (--train_mode="
        f"{' or '.join(TRAIN_MODES)}), so that they all share the same frozen weights",
        path)
  try:
    adapter_config = AdapterConfig.from_dict(header["adapter_config"])
  except (TypeError, ValueError) as e:
    raise errors.UserError(f"bad adapter_config {header['adapter_config']!r}: {e}", path) from e
  head = arrays.get("output_weights")
  num_outputs = head.shape[0] if head is not None and head.ndim == 2 and head.shape[0] else 1
  expected = _trained_shapes(config, adapter_config, num_outputs,
                             fusion=fusion_weights.TASKS_KEY in metadata)
  for name in arrays:
    if variable_role(name) == "head" and name not in HEAD:
      raise errors.UserError(f"not a run_classifier.py task: its head has {name} (a "
                             f"classifier has {' and '.join(HEAD)})", path)
    if name not in expected:
      raise errors.UserError(f"variable {name} does not exist in a model of the bank's "
                             f"bert_config, adapter size {adapter_config.size} and adapter "
                             f"placement {adapter_config.placement}", path)
  missing = [n for n in expected if n not in arrays]
  if missing:
    raise errors.UserError(f"lacks {len(missing)} variable(s) of its model: "
                           f"{', '.join(missing[:5])}", path)
  for name, value in arrays.items():
    if tuple(value.shape) != expected[name]:
      raise errors.UserError(f"variable {name} has shape {tuple(value.shape)}, expected "
                             f"{expected[name]}", path)
    if value.dtype != np.float32:
      raise errors.UserError(f"variable {name} is {value.dtype}, expected float32", path)


def _trained_shapes(config: modeling.BertConfig, adapter_config: AdapterConfig,
                    num_outputs: int, fusion: bool = False) -> Dict[str, tuple]:
  """The shape of every variable a task of the bank trains, by original name: those
  of a classifier of its config (modeling's one table of names); for a fusion
  task (fusion/), its fusion layers where those adapters would be."""
  # The embedding tables and the feed-forward width are frozen shapes (the
  # width unless adapters act at a site of that width, modeling.SITES): 2 rows
  # and width 1 give the same trained variables without allocating the real ones.
  widths = {modeling.SITES[modeling.ADAPTER_PLACES[p].site] for p in adapter_config.places
            if p in modeling.ADAPTER_PLACES}
  frozen = {} if "intermediate_size" in widths else {"intermediate_size": 1}
  small = dataclasses.replace(config, vocab_size=2, max_position_embeddings=2,
                              type_vocab_size=2, **frozen)
  model = modeling.BertClassifier(small, num_outputs,
                                  modeling.NO_ADAPTERS if fusion else adapter_config)
  model.ensure_built()
  shapes = {n: tuple(v.shape) for n, v in model.tf1_variable_map().items()
            if variable_role(n) in TRAINED_ROLES}
  if fusion:
    shapes.update(fusion_weights.fusion_variable_shapes(small, adapter_config))
  return shapes


def _check_metadata(metadata: dict, num_outputs: int, config: modeling.BertConfig,
                    bank_dir: str, bank: BankBase, path: str) -> None:
  """Labels (none for regression, else one per output), max_seq_length and casing."""
  missing = [k for k in REQUIRED_METADATA if k not in metadata]
  if missing:
    raise errors.UserError(
        f"its metadata lacks {', '.join(missing)}: not written by run_classifier.py of "
        f"this version (retrain, or train with --adapter_bank)", path)
  labels = metadata["labels"]
  if not isinstance(labels, list):
    raise errors.UserError(f"its metadata labels {labels!r} are not a list of strings", path)
  label_lists.check_labels(labels, "its metadata", path)
  if bool(metadata["is_regression"]) == bool(labels):
    raise errors.UserError(f"its metadata says is_regression={metadata['is_regression']} "
                           f"with labels {labels!r} (regression: no labels)", path)
  label_lists.check_label_count(labels, num_outputs, "its metadata", path)
  max_seq_length = metadata["max_seq_length"]
  if not (type(max_seq_length) is int and
          3 <= max_seq_length <= config.max_position_embeddings):
    raise errors.UserError(
        f"its metadata max_seq_length is {max_seq_length!r}, not an integer in [3, "
        f"{config.max_position_embeddings}] (max_position_embeddings)", path)
  if metadata["do_lower_case"] != bank.do_lower_case:
    raise errors.UserError(
        f"trained with do_lower_case={metadata['do_lower_case']}, adapter bank {bank_dir} "
        f"has do_lower_case={bank.do_lower_case} (one tokenizer serves every task)", path)


def add_task(bank_dir: str, task: str, adapter_model: str,
             new_base: Optional[BankBase] = None) -> str:
  """Copies a run's adapter-only weights into the bank as `task`.

  Args:
    adapter_model: a run's adapter_model/ directory (or its weights file).
    new_base: where bank_dir holds no bank, the base of the one to create; it
      is created only once the file is checked, so a refused file leaves none.
  Returns:
    The task's directory in the bank.
  Raises:
    errors.UserError: naming the file, if it is missing or corrupt, trained
      on another base, in a train mode whose frozen set is not the bank's, or
      without the metadata a bank task needs. The bank is then unchanged (or
      not created).
  """
  bank = find_bank(bank_dir) if new_base is not None else open_bank(bank_dir)
  dest = task_dir(bank_dir, task)
  # Validates the whole file (readable, complete), not only its header.
  source, header, arrays = adapter_weights.read_adapter_file(adapter_model)
  check_task(bank_dir, bank or new_base, header, arrays, source)
  if header["base_fingerprint"] != (bank or new_base).fingerprint:
    _refuse_base(bank_dir, bank or new_base, header, source)
  if bank is None:
    create_bank(bank_dir, new_base)
  with tf.io.gfile.GFile(source, "rb") as f:
    blob = f.read()
  config_path = posixpath.join(posixpath.dirname(source), adapter_weights.CONFIG_FILE)
  if tf.io.gfile.exists(config_path):
    with tf.io.gfile.GFile(config_path, "rb") as f:
      config_blob = f.read()
  else:  # Given the weights file alone: the readable copy as save_adapter_weights writes it.
    config_blob = (json.dumps(header, indent=2, sort_keys=True) + "\n").encode()
  previous = _previous_step(dest)
  with file_io.AtomicDirectory(dest, what=f"task {task}'s adapter in the bank") as tmp:
    for name, data in ((adapter_weights.WEIGHTS_FILE, blob),
                       (adapter_weights.CONFIG_FILE, config_blob)):
      with tf.io.gfile.GFile(posixpath.join(tmp, name), "wb") as f:
        f.write(data)
  step = header["metadata"]["global_step"]
  if previous is None:
    logging.info("Added task %s (global step %s) to adapter bank %s", task, step, bank_dir)
  else:
    logging.info("Replaced task %s in adapter bank %s: global step %s, was %s", task,
                 bank_dir, step, previous)
  return dest


def _previous_step(dest: str) -> Optional[str]:
  """The global step of the task being replaced ("?" if unreadable); None if new."""
  file_io.recover_directory(dest)
  if not tf.io.gfile.exists(dest):
    return None
  try:
    return str(adapter_weights.read_adapter_header(dest)["metadata"].get("global_step", "?"))
  except errors.UserError:
    return "?"


def task_checkpoint(bank_dir: str, task: str) -> str:
  """tasks/<task> of the bank, for --adapter_checkpoint; refuses a task it lacks."""
  open_bank(bank_dir)
  path = task_dir(bank_dir, task)
  if task not in task_names(bank_dir):
    raise errors.UserError(f"no task {task!r} in adapter bank {bank_dir} (it has: "
                           f"{', '.join(task_names(bank_dir)) or 'none'})")
  return path


def remove_task(bank_dir: str, task: str) -> None:
  """Deletes a task's files; other tasks are untouched."""
  path = task_checkpoint(bank_dir, task)
  # Out of the listing first (a hidden name), so no reader finds half a task.
  hidden = file_io.temp_path(path)
  try:
    tf.io.gfile.rename(path, hidden)
  except tf.errors.OpError:
    hidden = path  # Where directories cannot be renamed (gs://): delete in place.
  tf.io.gfile.rmtree(hidden)
  logging.info("Removed task %s from adapter bank %s", task, bank_dir)


def task_names(bank_dir: str) -> List[str]:
  """The bank's tasks, sorted (temporaries and leftovers of a crash excluded)."""
  root = posixpath.join(bank_dir, TASKS_DIR)
  if not tf.io.gfile.isdir(root):
    return []
  names = set()
  for entry in tf.io.gfile.listdir(root):
    entry = entry.rstrip("/")
    # `.NAME.old-x`: the old copy of a task whose replacement a crash interrupted.
    backup = re.fullmatch(r"\.(.+)\.old-[0-9a-f]+", entry)
    if backup and is_valid_task_name(backup.group(1)):
      file_io.recover_directory(posixpath.join(root, backup.group(1)))
      entry = backup.group(1)
    if is_valid_task_name(entry) and tf.io.gfile.isdir(posixpath.join(root, entry)):
      names.add(entry)
  return sorted(names)
