"""What run_classifier.py and run_squad.py share: adapter flags, the task model, its weights.

A run's weights come, in this order of precedence (as the original Estimator):
1. the latest `model.ckpt-N` in output_dir (a trained or interrupted run of this
   task: it holds the whole model, so it wins over everything below);
2. otherwise the base: `--init_checkpoint` (Google / adapter-bert / fine-tuned
   original checkpoint, or one of this project's) or `--bert_hub_module_handle`
   (a TF Hub / Model Garden BERT SavedModel, converted to Google format first),
   then `--adapter_checkpoint` (adapter-only weights of a task) on top.

Flags are defined by `define_flags(flag_values)`, not at import: both scripts
define --output_dir etc., so importing both into one process (tests) would clash
on the global FLAGS. Tests pass a fresh `flags.FlagValues()`.
"""

import dataclasses
import posixpath
from typing import Callable, Optional

import keras
import tensorflow as tf
from absl import flags
from absl import logging

import adapter_checkpoint
import checkpoints
import trainable
from adapter_layers import AdapterConfig

ADAPTER_MODEL_DIR = "adapter_model"
HUB_BERT_DIR = "hub_bert"


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """The flags adapter-bert adds to the original scripts, plus this project's."""
  fv = dict(flag_values=flag_values)
  flags.DEFINE_integer("adapter_size", 64, "Adapter bottleneck size (0: no adapters, "
                       "full fine-tuning).", **fv)
  flags.DEFINE_float("adapter_init_scale", 1e-3, "Stddev of the adapter weight "
                     "initializers (truncated normal).", **fv)
  flags.DEFINE_float("adapter_weight_decay_rate", 0.01, "Weight decay of adapter "
                     "weights (other weights: 0.01).", **fv)
  flags.DEFINE_string("train_mode", None, "What trains: adapters, full, layer_norm, head "
                      "or top_layers:K. Default: adapters if --adapter_size > 0, else full.",
                      **fv)
  flags.DEFINE_string("adapter_checkpoint", None, "Adapter-only weights (a directory "
                      "written as <output_dir>/adapter_model) loaded on top of the base "
                      "checkpoint.", **fv)
  flags.DEFINE_string("bert_hub_module_handle", None, "TF Hub BERT encoder (SavedModel "
                      "path or handle) used as the base instead of --init_checkpoint.", **fv)
  flags.DEFINE_integer("seed", None, "Random seed of weight init, dropout and data "
                       "shuffling (None: not seeded, as the original).", **fv)
  flags.DEFINE_bool("use_xla", False, "Compile train/predict steps with XLA.", **fv)


@dataclasses.dataclass(frozen=True)
class ModelOptions:
  """Where a task model's weights come from and what trains."""
  adapter_size: int = 64
  adapter_init_scale: float = 1e-3
  train_mode: Optional[str] = None
  init_checkpoint: Optional[str] = None
  bert_hub_module_handle: Optional[str] = None
  adapter_checkpoint: Optional[str] = None

  @classmethod
  def from_flags(cls, flag_values: flags.FlagValues) -> "ModelOptions":
    return cls(**{f.name: flag_values[f.name].value for f in dataclasses.fields(cls)})

  def adapter_config(self) -> AdapterConfig:
    return AdapterConfig(size=self.adapter_size, init_scale=self.adapter_init_scale)

  def validate(self) -> None:
    """Fails on inconsistent flags before a script does any work."""
    if self.init_checkpoint and self.bert_hub_module_handle:
      raise ValueError("give at most one of --init_checkpoint and --bert_hub_module_handle")
    if self.adapter_size < 0:
      raise ValueError(f"--adapter_size must be >= 0, got {self.adapter_size}")
    self.mode()  # Parses --train_mode.

  def mode(self) -> trainable.TrainMode:
    if self.train_mode:
      return trainable.TrainMode.parse(self.train_mode)
    return trainable.default_train_mode(self.adapter_size)


def set_seed(seed: Optional[int]) -> None:
  if seed is not None:
    keras.utils.set_random_seed(seed)


def create_model(strategy: tf.distribute.Strategy,
                 make_model: Callable[[AdapterConfig], keras.Model],
                 options: ModelOptions, output_dir: str, bert_config_file: str,
                 vocab_file: str) -> keras.Model:
  """Builds the task model under `strategy`, marks what trains and loads its weights.

  Args:
    make_model: adapter config -> an unbuilt task model of modeling.py.
    output_dir: the run's directory; its latest checkpoint wins (module docstring).
    bert_config_file, vocab_file: for converting a Hub encoder.
  Returns:
    The model; its parameter counts are logged (adapter-bert's three lines).
  """
  options.validate()
  mode = options.mode()
  with strategy.scope():
    model = make_model(options.adapter_config())
    model.ensure_built()
  trainable.set_trainable(model, mode)
  load_weights(model, options, output_dir, bert_config_file, vocab_file)
  trainable.log_parameter_counts(model)
  return model


def load_weights(model: keras.Model, options: ModelOptions, output_dir: str,
                 bert_config_file: str, vocab_file: str) -> str:
  """Fills `model` from output_dir's latest checkpoint or the base; returns the source."""
  options.validate()
  latest = tf.train.latest_checkpoint(output_dir) if tf.io.gfile.isdir(output_dir) else None
  if latest:
    ignored = [f"--{k}" for k in ("init_checkpoint", "bert_hub_module_handle",
                                  "adapter_checkpoint") if getattr(options, k)]
    if ignored:
      logging.warning("%s holds %s, which wins over %s (as the original Estimator's "
                      "model_dir); use a new --output_dir to start from those.",
                      output_dir, latest, ", ".join(ignored))
    checkpoints.load_checkpoint(model, latest)
    return latest
  source = "random initialization"
  if options.bert_hub_module_handle:
    source = hub_to_google(options.bert_hub_module_handle, output_dir, bert_config_file,
                           vocab_file)
  elif options.init_checkpoint:
    source = options.init_checkpoint
  if source == "random initialization":
    logging.warning("No --init_checkpoint or --bert_hub_module_handle: the encoder "
                    "starts from random weights.")
  else:
    checkpoints.load_checkpoint(model, source)
  if options.adapter_checkpoint:
    adapter_checkpoint.load_adapter_weights(model, options.adapter_checkpoint)
    source += " + " + options.adapter_checkpoint
  return source


def hub_to_google(handle: str, output_dir: str, bert_config_file: str,
                  vocab_file: str) -> str:
  """Converts a Hub BERT SavedModel to <output_dir>/hub_bert; returns its checkpoint.

  Converting (rather than wrapping the SavedModel) keeps one model class, so
  adapters can be inserted and checkpoints keep the original names.
  """
  # Imported here: tensorflow_hub pulls in tf_keras, which only this path needs.
  import tensorflow_hub as hub  # pylint: disable=g-import-not-at-top
  import convert_checkpoint  # pylint: disable=g-import-not-at-top
  target = posixpath.join(output_dir, HUB_BERT_DIR)
  convert_checkpoint.tf2_bert_encoder_to_google(
      target, saved_model_dir=hub.resolve(handle), bert_config_file=bert_config_file,
      vocab_file=vocab_file, overwrite=True)
  return posixpath.join(target, convert_checkpoint.CHECKPOINT_NAME)


def save_adapter_model(model: keras.Model, output_dir: str,
                       metadata: Optional[dict] = None) -> Optional[str]:
  """Writes the trained variables alone to <output_dir>/adapter_model.

  Skipped (returns None) when everything trains: the checkpoint is then the model.
  """
  counts = trainable.parameter_counts(model)
  if counts["trainable"] == counts["total"]:
    logging.info("Every variable trains; no separate adapter-only weights written.")
    return None
  return adapter_checkpoint.save_adapter_weights(
      model, posixpath.join(output_dir, ADAPTER_MODEL_DIR), metadata)
