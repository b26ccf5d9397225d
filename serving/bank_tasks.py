"""A bank's tasks and its base weights, read and checked for serving.

Every task of an adapter bank (bank/adapter_bank.py) was trained on the same
frozen encoder and adds only what it trained: adapters, LayerNorms, a
classifier head. Serving stacks those along a task axis over one copy of the
encoder, so a task must be a run_classifier.py task whose trained variables
are of those kinds, with the bank's BERT config, tokenizer casing and base
weights. Anything else is an errors.UserError naming the file: a missing or
corrupt file, a SQuAD head, encoder weights it trained, a base fingerprint
that differs from the loaded base's.
"""

import dataclasses
import posixpath
import re
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import safetensors.numpy
import tensorflow as tf
from absl import logging

from adapter_layers import AdapterConfig
from bank import adapter_bank
from checkpoints import adapter_weights
from checkpoints import base_model
import errors
import modeling
from runtime import model_setup

# The head of run_classifier.py's BertClassifier, by its original names.
HEAD = ("output_weights", "output_bias")

_ADAPTER = re.compile(r"bert/encoder/layer_(\d+)/(attention/output|output)/adapters/"
                      r"(weights1|biases1|weights2|biases2)")


@dataclasses.dataclass(frozen=True)
class Task:
  """One task of a bank: what it trained and how its inputs are made."""
  name: str
  path: str  # Its weights file, for messages.
  adapter_config: AdapterConfig
  arrays: Dict[str, np.ndarray]  # Trained variables by original name.
  labels: Tuple[str, ...]  # Index = label id; () for regression.
  is_regression: bool
  max_seq_length: int
  base_fingerprint: str
  metadata: dict

  @property
  def num_outputs(self) -> int:
    """Width of its head: the number of labels, 1 for regression."""
    return int(self.arrays["output_weights"].shape[0])


@dataclasses.dataclass(frozen=True)
class Base:
  """The frozen encoder every task shares."""
  bert_config: modeling.BertConfig
  arrays: Dict[str, np.ndarray]  # Every encoder variable (no adapters) by original name.
  vocab_file: str
  do_lower_case: bool
  source: str  # Where the weights came from, for messages.


def open_bank(bank_dir: str) -> adapter_bank.BankBase:
  """bank.json, with a BERT config that builds a model."""
  bank = adapter_bank.open_bank(bank_dir)
  bank_config(bank_dir, bank)
  return bank


def bank_config(bank_dir: str, bank: adapter_bank.BankBase) -> modeling.BertConfig:
  path = posixpath.join(bank_dir, adapter_bank.BANK_FILE)
  try:
    return modeling.BertConfig.from_dict(dict(bank.bert_config))
  except (TypeError, ValueError) as e:
    raise errors.UserError(f"its base bert_config is not a BERT config: {e}", path) from e


def read_tasks(bank_dir: str, bank: adapter_bank.BankBase,
               names: Optional[Sequence[str]] = None) -> List[Task]:
  """The bank's tasks (all, or `names`), sorted by name.

  Raises:
    errors.UserError: the bank has no tasks, lacks one of `names`, or a task
      cannot be served (module docstring).
  """
  available = adapter_bank.task_names(bank_dir)
  if names:
    unknown = [n for n in names if n not in available]
    if unknown:
      raise errors.UserError(f"no task {', '.join(map(repr, unknown))} in adapter bank "
                             f"{bank_dir} (it has: {', '.join(available) or 'none'})")
    available = sorted(set(names))
  if not available:
    raise errors.UserError(f"adapter bank {bank_dir} has no tasks (add some with "
                           f"python -m bank.manage --bank={bank_dir} add TASK ADAPTER_MODEL)")
  config = bank_config(bank_dir, bank)
  return [read_task(bank_dir, name, config, bank.do_lower_case) for name in available]


def read_task(bank_dir: str, name: str, config: modeling.BertConfig,
              do_lower_case: bool) -> Task:
  """Reads tasks/<name> of the bank and checks it fits a model of `config`."""
  directory = adapter_bank.task_dir(bank_dir, name)
  path = posixpath.join(directory, adapter_weights.WEIGHTS_FILE)
  if not tf.io.gfile.exists(path):
    raise errors.UserError(f"task {name!r} has no {adapter_weights.WEIGHTS_FILE} (a task "
                           f"directory holds a run's adapter_model/ files)", directory)
  header = adapter_weights.read_adapter_header(path)  # Checks the whole file.
  with tf.io.gfile.GFile(path, "rb") as f:
    arrays = safetensors.numpy.load(f.read())
  metadata = header.get("metadata") or {}
  try:
    adapter_config = AdapterConfig.from_dict(header["adapter_config"])
  except (TypeError, ValueError) as e:
    raise errors.UserError(f"bad adapter_config {header['adapter_config']!r}: {e}", path) from e
  saved_config = header.get("bert_config")
  if saved_config is not None and saved_config != config.to_dict():
    keys = sorted(k for k in set(saved_config) | set(config.to_dict())
                  if saved_config.get(k) != config.to_dict().get(k))
    raise errors.UserError(f"trained on a BERT whose config differs from the bank's in "
                           f"{', '.join(keys)}", path)
  _check_variables(arrays, adapter_config, config, metadata, path)
  labels, is_regression = _labels(metadata, int(arrays["output_weights"].shape[0]), path)
  max_seq_length = metadata.get("max_seq_length")
  if not (type(max_seq_length) is int and
          3 <= max_seq_length <= config.max_position_embeddings):
    raise errors.UserError(
        f"its metadata max_seq_length is {max_seq_length!r}, not an integer in [3, "
        f"{config.max_position_embeddings}] (max_position_embeddings): not written by "
        f"run_classifier.py?", path)
  if "do_lower_case" in metadata and metadata["do_lower_case"] != do_lower_case:
    raise errors.UserError(
        f"trained with do_lower_case={metadata['do_lower_case']}, the bank has "
        f"do_lower_case={do_lower_case} (one tokenizer serves every task)", path)
  return Task(name=name, path=path, adapter_config=adapter_config, arrays=dict(arrays),
              labels=labels, is_regression=is_regression, max_seq_length=max_seq_length,
              base_fingerprint=header["base_fingerprint"], metadata=metadata)


def _check_variables(arrays, adapter_config: AdapterConfig, config: modeling.BertConfig,
                     metadata: dict, path: str) -> None:
  """Trained variables of the kinds serving stacks, each with the right shape."""
  h, m = config.hidden_size, adapter_config.size
  layer_norms = {n: (h,) for n in _layer_norm_names(config)}
  adapters = {}
  for i in range(config.num_hidden_layers):
    for scope in modeling.adapter_scopes(adapter_config):  # None without adapters.
      p = f"bert/encoder/layer_{i}/{scope}/adapters/"
      adapters.update({p + "weights1": (h, m), p + "biases1": (1, m),
                       p + "weights2": (m, h), p + "biases2": (1, h)})
  mode = metadata.get("train_mode", "?")
  for name in arrays:
    role = modeling.variable_role(name)
    if role not in adapter_bank.TRAINED_ROLES:
      raise errors.UserError(
          f"trained encoder variable {name} (--train_mode={mode}); only tasks that trained "
          f"adapters, LayerNorms and the head share the frozen encoder", path)
    if role == "head" and name not in HEAD:
      raise errors.UserError(f"not a run_classifier.py task: its head has {name} (a "
                             f"classifier has {' and '.join(HEAD)})", path)
    if name not in layer_norms and name not in adapters and name not in HEAD:
      raise errors.UserError(f"variable {name} does not exist in a model of the bank's "
                             f"bert_config, adapter size {m} and adapter placement "
                             f"{adapter_config.placement}", path)
  missing = [n for n in list(adapters) + list(HEAD) if n not in arrays]
  if missing:
    raise errors.UserError(f"lacks {len(missing)} variable(s) of its model: "
                           f"{', '.join(missing[:5])}", path)
  head = arrays["output_weights"]
  num_outputs = head.shape[0] if head.ndim == 2 and head.shape[0] >= 1 else 1
  expected = {**layer_norms, **adapters, "output_weights": (num_outputs, h),
              "output_bias": (num_outputs,)}
  for name, value in arrays.items():
    if tuple(value.shape) != expected[name]:
      raise errors.UserError(f"variable {name} has shape {tuple(value.shape)}, expected "
                             f"{expected[name]}", path)
    if value.dtype != np.float32:
      raise errors.UserError(f"variable {name} is {value.dtype}, expected float32", path)


def _layer_norm_names(config: modeling.BertConfig) -> List[str]:
  scopes = ["bert/embeddings/LayerNorm"] + [
      f"bert/encoder/layer_{i}/{s}/LayerNorm" for i in range(config.num_hidden_layers)
      for s in ("attention/output", "output")]
  return [f"{s}/{v}" for s in scopes for v in ("gamma", "beta")]


def _labels(metadata: dict, num_outputs: int, path: str) -> Tuple[Tuple[str, ...], bool]:
  """(labels, is_regression) from the metadata; regression: no labels, one output."""
  labels = metadata.get("labels")
  if "labels" not in metadata:
    raise errors.UserError("its metadata has no labels: not written by run_classifier.py?",
                           path)
  is_regression = metadata.get("is_regression", not labels)
  if is_regression:
    if num_outputs != 1 or labels:
      raise errors.UserError(f"a regression task must have one output and no labels; it has "
                             f"{num_outputs} outputs and labels {labels!r}", path)
    return (), True
  if not (isinstance(labels, list) and all(isinstance(l, str) for l in labels)):
    raise errors.UserError(f"its metadata labels {labels!r} are not a list of strings", path)
  if len(labels) != num_outputs:
    raise errors.UserError(f"its head has {num_outputs} outputs but its metadata lists "
                           f"{len(labels)} labels", path)
  return tuple(labels), False


def load_base(bank_dir: str, bank: adapter_bank.BankBase,
              init_checkpoint: Optional[str] = None,
              bert_hub_module_handle: Optional[str] = None) -> Base:
  """The bank's base weights: from bank.json's source, or the one given instead.

  Raises:
    errors.UserError: no source (a bank of a randomly initialised encoder), an
      unreadable source or one that does not fit the bank's config, or
      weights whose fingerprint is not the bank's.
  """
  config = bank_config(bank_dir, bank)
  if not (init_checkpoint or bert_hub_module_handle):
    init_checkpoint, bert_hub_module_handle = (bank.init_checkpoint,
                                               bank.bert_hub_module_handle)
  encoder = modeling.BertEncoder(config)
  encoder.ensure_built()
  vocab_file, hub = bank.vocab_file, None
  if bert_hub_module_handle:
    hub = base_model.read_hub_encoder(bert_hub_module_handle, vocab_file=vocab_file)
    source, vocab_file = f"TF Hub encoder {bert_hub_module_handle}", hub.vocab_file
  elif init_checkpoint:
    source = f"checkpoint {init_checkpoint}"
  else:
    raise errors.UserError(
        "bank.json names no base weights (init_checkpoint and bert_hub_module_handle are "
        "null: its tasks were trained on a randomly initialised encoder); pass "
        "--init_checkpoint", posixpath.join(bank_dir, adapter_bank.BANK_FILE))
  model_setup.load_base(encoder, init_checkpoint, bert_hub_module_handle, hub_encoder=hub)
  if not vocab_file:
    raise errors.UserError("bank.json names no vocab_file",
                           posixpath.join(bank_dir, adapter_bank.BANK_FILE))
  base_model.check_vocab(vocab_file, config)
  arrays = {n: v.numpy() for n, v in encoder.tf1_variable_map().items()}
  base = Base(config, arrays, vocab_file, bool(bank.do_lower_case), source)
  if bank.fingerprint:
    fingerprint = adapter_bank.frozen_fingerprint(base.arrays)
    if fingerprint != bank.fingerprint:
      raise errors.UserError(
          f"the base weights of {source} are not the bank's base: their fingerprint is "
          f"{fingerprint[:16]}..., the bank's {bank.fingerprint[:16]}...",
          posixpath.join(bank_dir, adapter_bank.BANK_FILE))
  return base


def check_fingerprints(base: Base, tasks: Sequence[Task]) -> None:
  """Each task's recorded base fingerprint against the loaded base.

  A task's fingerprint covers the encoder variables it did not train (as
  adapter_weights.save_adapter_weights computed it), so it is recomputed per
  set of trained variables.
  """
  computed = {}
  for task in tasks:
    trained = frozenset(n for n in task.arrays if n in base.arrays)
    if trained not in computed:
      computed[trained] = adapter_weights.base_fingerprint(base.arrays, trained)
    if computed[trained] != task.base_fingerprint:
      raise errors.UserError(
          f"task {task.name!r} was trained on another base model (base fingerprint "
          f"{task.base_fingerprint[:16]}..., the loaded base's {computed[trained][:16]}... "
          f"from {base.source})", task.path)
  logging.info("All %d tasks were trained on the loaded base (%s)", len(tasks), base.source)
