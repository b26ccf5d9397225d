"""A bank's tasks and its base weights, read and checked: for serving them
(serving/) and for fusing them (fusion/).

Every task of an adapter bank (adapter_bank.py) was trained on the same
frozen encoder and adds only what it trained: adapters, LayerNorms, a
classifier head. Serving stacks those along a task axis over one copy of the
encoder, so a task must be a run_classifier.py task whose trained variables
are of those kinds, with the bank's BERT config, tokenizer casing and base
weights (adapter_bank.check_task). Anything else is an errors.UserError naming
the file: a missing or corrupt file, a SQuAD head, encoder weights it trained,
a base fingerprint that differs from the loaded base's.
"""

import dataclasses
import posixpath
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
from absl import logging

from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert import label_lists
from adapter_bert.bank import adapter_bank
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import base_model
from adapter_bert import errors
from adapter_bert.model import modeling
from adapter_bert.runtime import model_setup

@dataclasses.dataclass(frozen=True)
class BankTask:
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

  def __post_init__(self):  # Every bank and SavedModel task table is made of these.
    label_lists.check_labels(self.labels, f"task {self.name!r}", self.path)

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


def read_tasks(bank_dir: str, bank: adapter_bank.BankBase,
               names: Optional[Sequence[str]] = None) -> List[BankTask]:
  """The bank's tasks (all, or `names`), sorted by name, each read and checked.

  Args:
    bank: the bank's bank.json (adapter_bank.open_bank).
  Raises:
    errors.UserError: bank.json's bert_config builds no model, the bank has no
      tasks, lacks one of `names`, or a task cannot be served (module docstring).
  """
  adapter_bank.bank_config(bank_dir, bank)
  available = adapter_bank.task_names(bank_dir)
  if names:
    unknown = [n for n in names if n not in available]
    if unknown:
      raise errors.UserError(f"no task {', '.join(map(repr, unknown))} in adapter bank "
                             f"{bank_dir} (it has: {', '.join(available) or 'none'})")
    available = sorted(set(names))
  if not available:
    raise errors.UserError(f"adapter bank {bank_dir} has no tasks (add some with "
                           f"python manage_bank.py --adapter_bank={bank_dir} "
                           "add TASK ADAPTER_MODEL)")
  return [read_task(bank_dir, bank, name) for name in available]


def task_weights_file(bank_dir: str, name: str) -> str:
  """tasks/<name>'s adapter weights file; refuses a task directory without one."""
  directory = adapter_bank.task_dir(bank_dir, name)
  path = posixpath.join(directory, adapter_weights.WEIGHTS_FILE)
  if not tf.io.gfile.exists(path):
    raise errors.UserError(f"task {name!r} has no {adapter_weights.WEIGHTS_FILE} (a task "
                           f"directory holds a run's adapter_model/ files)", directory)
  return path


def read_task(bank_dir: str, bank: adapter_bank.BankBase, name: str) -> BankTask:
  """Reads tasks/<name> of the bank and checks it is one (adapter_bank.check_task)."""
  path = task_weights_file(bank_dir, name)
  _, header, arrays = adapter_weights.read_adapter_file(path)
  adapter_bank.check_task(bank_dir, bank, header, arrays, path)
  metadata = header["metadata"]
  return BankTask(name=name, path=path,
              adapter_config=AdapterConfig.from_dict(header["adapter_config"]),
              arrays=dict(arrays), labels=tuple(metadata["labels"]),
              is_regression=bool(metadata["is_regression"]),
              max_seq_length=metadata["max_seq_length"],
              base_fingerprint=header["base_fingerprint"], metadata=metadata)


def read_base_weights(bank_dir: str, bank: adapter_bank.BankBase,
                      init_checkpoint: Optional[str] = None,
                      bert_hub_module_handle: Optional[str] = None,
                      vocab_file: Optional[str] = None,
                      bert_config_file: Optional[str] = None) -> Base:
  """The bank's base weights: from bank.json's source, or the one given instead.

  Args:
    init_checkpoint, bert_hub_module_handle, vocab_file, bert_config_file: the
      base's place given by these flags (a bank or base that moved), each used
      instead of bank.json's; the weights must have the bank's fingerprint, the
      config be the bank's bert_config. Those not given are bank.json's
      (adapter_bank.base_path: relative to the bank, or where they were).
  Raises:
    errors.UserError: no source (a bank of a randomly initialised encoder), a
      recorded path found nowhere (naming the flag that gives its new place),
      an unreadable source or one that does not fit the bank's config,
      weights whose fingerprint is not the bank's (naming the flag where one
      gave them), a --bert_config_file that is not the bank's config.
  """
  config = adapter_bank.bank_config(bank_dir, bank)
  if bert_config_file:
    adapter_bank.check_bert_config_file(bank_dir, bank, bert_config_file)
  given = (errors.flags_named(init_checkpoint=init_checkpoint) if init_checkpoint else
           errors.flags_named(bert_hub_module_handle=bert_hub_module_handle)
           if bert_hub_module_handle else None)
  if not given:
    if bank.bert_hub_module_handle:
      bert_hub_module_handle = adapter_bank.base_path(bank_dir, bank, "bert_hub_module_handle")
    else:
      init_checkpoint = adapter_bank.base_path(bank_dir, bank, "init_checkpoint")
  encoder = modeling.BertEncoder(config)
  encoder.ensure_built()
  hub = None
  if bert_hub_module_handle:
    # The bank's vocabulary where it still is; else the encoder's own.
    vocab_file = vocab_file or adapter_bank.base_path(bank_dir, bank, "vocab_file",
                                                      required=False)
    hub = base_model.read_hub_encoder(bert_hub_module_handle, vocab_file=vocab_file)
    source, vocab_file = f"TF Hub encoder {bert_hub_module_handle}", hub.vocab_file
  elif init_checkpoint:
    source = f"checkpoint {init_checkpoint}"
  else:
    raise errors.UserError(
        "bank.json names no base weights (init_checkpoint and bert_hub_module_handle are "
        "null: its tasks were trained on a randomly initialised encoder); pass "
        "--init_checkpoint", posixpath.join(bank_dir, adapter_bank.BANK_FILE))
  if not vocab_file:
    vocab_file = adapter_bank.base_path(bank_dir, bank, "vocab_file")
  model_setup.load_base(encoder, init_checkpoint, bert_hub_module_handle, hub_encoder=hub)
  if not vocab_file:
    raise errors.UserError("bank.json names no vocab_file: pass --vocab_file",
                           posixpath.join(bank_dir, adapter_bank.BANK_FILE))
  base_model.check_vocab(vocab_file, config)
  arrays = {n: v.numpy() for n, v in encoder.tf1_variable_map().items()}
  base = Base(config, arrays, vocab_file, bool(bank.do_lower_case), source)
  if bank.fingerprint:
    fingerprint = adapter_bank.frozen_fingerprint(base.arrays)
    if fingerprint != bank.fingerprint:
      message = (f"the base weights of {source} are not the bank's base: their fingerprint "
                 f"is {fingerprint[:16]}..., the bank's {bank.fingerprint[:16]}...")
      if given:
        raise errors.UserError(f"{given}: {message} (adapter bank {bank_dir})")
      raise errors.UserError(f"{message}; give the bank's base with --init_checkpoint or "
                             f"--bert_hub_module_handle",
                             posixpath.join(bank_dir, adapter_bank.BANK_FILE))
  return base


def check_fingerprints(base: Base, tasks: Sequence[BankTask]) -> None:
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
