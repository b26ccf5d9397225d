"""A run_multitask.py output_dir, read as the base and tasks that serving stacks.

run_multitask.py trains one model for several tasks on one frozen encoder:
HyperFormer++ (a hypernetwork makes each task's adapters) or one set of
Houlsby adapters that every task shares, and a head per task, all heads in one
padded variable. The model is rebuilt here from run_config.json, its base and
adapter_model/ loaded, and each task becomes a bank_tasks.BankTask of what its
examples compute with:
  * its adapters: generated here, once per task, for HyperFormer++ (with the
    adapters' own LayerNorms; the SavedModel holds no hypernetwork), the
    shared ones otherwise;
  * every encoder LayerNorm as the run has it (trained with
    --train_mode=layer_norm or shared adapters, else the base's);
  * its head, its own rows of the padded stack, as output_weights and
    output_bias.
Labels, regression, max_seq_length and casing come from run_config.json.
A missing or inconsistent file is an errors.UserError that names it.
"""

import dataclasses
import posixpath
from typing import List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.bank import bank_tasks
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import base_model
from adapter_bert import errors
from adapter_bert.model import modeling
from adapter_bert.multitask import model as multitask_model
from adapter_bert.multitask.hypernetwork import HyperFormerConfig
from adapter_bert.runtime import model_setup
from adapter_bert.runtime import run_config

# run_config.json keys that fix the trained variables (tasks/multitask.py's MODEL_KEYS):
# the adapter file must have been written with the same.
_MODEL_KEYS = ("multitask_adapters", "hyperformer_config", "tasks")


@dataclasses.dataclass(frozen=True)
class _Run:
  """run_config.json, read and checked, and the model it describes (not built yet)."""
  config_path: str
  saved: dict  # run_config.json's contents.
  bert_config: modeling.BertConfig
  model: multitask_model.MultiTaskClassifier
  max_seq_length: int
  do_lower_case: bool
  vocab_file: str


def read_run(run_dir: str, task_names: Optional[Sequence[str]] = None,
             init_checkpoint: Optional[str] = None,
             bert_hub_module_handle: Optional[str] = None
             ) -> Tuple[bank_tasks.Base, List[bank_tasks.BankTask]]:
  """The run's base and tasks (all, or `task_names`), in the run's task order.

  Args:
    init_checkpoint, bert_hub_module_handle: the base to load instead of
      run_config.json's (e.g. the same checkpoint at another path).
  Raises:
    errors.UserError: a missing or malformed run_config.json or adapter
      weights file, weights of another run or another base, an unknown task.
  """
  run = _read_run_config(run_dir)
  heads = _select(run.model.tasks, task_names, run_dir)
  weights_path, adapter_file = _read_trained_weights(run_dir, run)
  base = _load_run_base(run, init_checkpoint, bert_hub_module_handle)
  # Then what trained; fails if that base is not the one it was trained on.
  adapter_weights.load_adapter_weights(run.model, adapter_file)
  return base, _served_tasks(run, heads, weights_path, adapter_file.header)


def _read_run_config(run_dir: str) -> _Run:
  """run_config.json of a run_multitask.py run, and the model it describes."""
  config_path = posixpath.join(run_dir, run_config.RUN_CONFIG_FILE)
  if not tf.io.gfile.exists(config_path):
    raise errors.UserError("not found: --multitask_run takes a run_multitask.py "
                           "output_dir", config_path)
  saved = run_config.read(config_path)
  if not isinstance(saved, dict) or saved.get("multitask_adapters") is None:
    raise errors.UserError("not a run_multitask.py run_config.json (it names no "
                           "multitask_adapters); serve run_classifier.py runs as a bank "
                           "(--adapter_bank)", config_path)
  try:
    bert_config = modeling.BertConfig.from_dict(dict(saved["bert_config"]))
    hyper = saved.get("hyperformer_config")
    model = multitask_model.MultiTaskClassifier(
        bert_config, [multitask_model.TaskHead.from_dict(t) for t in saved["tasks"]],
        saved["multitask_adapters"], AdapterConfig.from_dict(saved["adapter_config"]),
        HyperFormerConfig.from_dict(hyper) if hyper else None)
    max_seq_length, do_lower_case = saved["max_seq_length"], saved["do_lower_case"]
    vocab_file = saved["vocab_file"]
  except (KeyError, TypeError, ValueError) as e:
    raise errors.UserError(f"not a run_multitask.py run_config.json: "
                           f"{'no key ' if isinstance(e, KeyError) else ''}{e}",
                           config_path) from e
  if not (type(max_seq_length) is int and
          3 <= max_seq_length <= bert_config.max_position_embeddings):
    raise errors.UserError(f"max_seq_length {max_seq_length!r} is not an integer in [3, "
                           f"{bert_config.max_position_embeddings}]", config_path)
  return _Run(config_path, saved, bert_config, model, max_seq_length, do_lower_case,
              vocab_file)


def _read_trained_weights(run_dir: str,
                          run: _Run) -> Tuple[str, adapter_weights.AdapterFile]:
  """adapter_model/'s weights file (its path, for messages), checked whole and
  checked to be this run's (its metadata against run_config.json)."""
  weights_path = posixpath.join(run_dir, model_setup.ADAPTER_MODEL_DIR,
                                adapter_weights.WEIGHTS_FILE)
  if not tf.io.gfile.exists(weights_path):
    raise errors.UserError("not found: the run wrote no trained weights (it did not "
                           "finish --do_train?)", weights_path)
  adapter_file = adapter_weights.read_adapter_file(weights_path)  # Checks the whole file.
  metadata = adapter_file.header.get("metadata") or {}
  adapter_weights.check_metadata(weights_path, metadata,
                                 {key: run.saved.get(key) for key in _MODEL_KEYS},
                                 f"{run.config_path} (another run's weights?)", required=True,
                                 labels_fix="serve the run whose adapter_model this is")
  return weights_path, adapter_file


def _load_run_base(run: _Run, init_checkpoint: Optional[str],
                   bert_hub_module_handle: Optional[str]) -> bank_tasks.Base:
  """Builds the run's model and loads its base alone into it (the one given, else
  run_config.json's); the encoder's weights but its adapters, as the Base."""
  init_checkpoint = init_checkpoint or (None if bert_hub_module_handle
                                        else run.saved.get("init_checkpoint"))
  bert_hub_module_handle = bert_hub_module_handle or (
      None if init_checkpoint else run.saved.get("bert_hub_module_handle"))
  hub_encoder, vocab_file = None, run.vocab_file
  if bert_hub_module_handle:
    hub_encoder = base_model.read_hub_encoder(bert_hub_module_handle, vocab_file=vocab_file)
    vocab_file, source = hub_encoder.vocab_file, f"TF Hub encoder {bert_hub_module_handle}"
  elif init_checkpoint:
    source = f"checkpoint {init_checkpoint}"
  else:
    raise errors.UserError("names no base weights (init_checkpoint and "
                           "bert_hub_module_handle are null: the run trained on a randomly "
                           "initialised encoder); pass --init_checkpoint", run.config_path)
  base_model.check_vocab(vocab_file, run.bert_config)
  run.model.ensure_built()
  # The base alone first (not the run's own model.ckpt-N: adapter_model/ is what it serves).
  model_setup.load_base(run.model, init_checkpoint, bert_hub_module_handle,
                        hub_encoder=hub_encoder)
  encoder = run.model.bert.tf1_variable_map()
  return bank_tasks.Base(run.bert_config, {n: v.numpy() for n, v in encoder.items()
                                           if modeling.variable_role(n) != "adapter"},
                         vocab_file, bool(run.do_lower_case), source)


def _served_tasks(run: _Run, heads: Sequence[Tuple[int, multitask_model.TaskHead]],
                  weights_path: str, header: dict) -> List[bank_tasks.BankTask]:
  """Each of `heads` as a BankTask of what its examples compute with (module docstring),
  from the trained model."""
  model, metadata = run.model, header.get("metadata") or {}
  encoder = model.bert.tf1_variable_map()
  layer_norms = {n: v.numpy() for n, v in encoder.items()
                 if modeling.variable_role(n) == "layer_norm"}
  if model.hypernetwork is not None:
    adapter_config = model.generated_adapter_config()
  else:
    adapter_config = model.adapter_config
    shared = {n: v.numpy() for n, v in encoder.items()
              if modeling.variable_role(n) == "adapter"}
  output_weights, output_bias = model.head.output_weights.numpy(), model.head.output_bias.numpy()
  tasks = []
  for index, head in heads:
    adapters = model.generate_adapters(index) if model.hypernetwork is not None else shared
    n = head.num_outputs
    arrays = dict(layer_norms, **adapters, output_weights=output_weights[index, :n],
                  output_bias=output_bias[index, :n])
    tasks.append(bank_tasks.BankTask(
        name=head.name, path=weights_path, adapter_config=adapter_config,
        arrays={k: np.asarray(v, np.float32) for k, v in arrays.items()},
        labels=tuple(head.labels), is_regression=head.is_regression,
        max_seq_length=run.max_seq_length, base_fingerprint=header["base_fingerprint"],
        metadata=metadata))
  return tasks


def _select(heads: Sequence[multitask_model.TaskHead], names: Optional[Sequence[str]],
            run_dir: str) -> List[Tuple[int, multitask_model.TaskHead]]:
  """(index in the run, head) of the tasks to serve, in the run's order."""
  available = [h.name for h in heads]
  unknown = [n for n in names or () if n not in available]
  if unknown:
    raise errors.UserError(f"no task {', '.join(map(repr, unknown))} in multi-task run "
                           f"{run_dir} (it has: {', '.join(available)})")
  return [(i, h) for i, h in enumerate(heads) if not names or h.name in names]
