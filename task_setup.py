"""What run_classifier.py and run_squad.py share: flags, base encoder, task model, weights.

  define_flags        the flags adapter-bert and this project add to both scripts
  read_base           the encoder a run starts from: bert_config, vocab and, for
                      --bert_hub_module_handle, the Hub encoder's weights (read
                      into memory, nothing written)
  create_model        the task model under the strategy, what trains, its weights
  train_settings      the number of steps and the rest of training.TrainSettings
  run_config / check_run_config / write_run_config
                      `run_config.json`, the settings saved with every model in
                      output_dir, and the guard that refuses to mix an
                      output_dir's checkpoints with another model
  save_adapter_model  the trained variables alone, <output_dir>/adapter_model

A run's weights come, in this order of precedence (the original Estimator's):
1. the latest `model.ckpt-N` in output_dir (a trained or interrupted run of this
   task: it holds the whole model, so it wins over everything below);
2. otherwise the base: `--init_checkpoint` (Google / adapter-bert / fine-tuned
   original checkpoint, or one of this project's) or `--bert_hub_module_handle`
   (a TF Hub / Model Garden BERT SavedModel), then `--adapter_checkpoint`
   (adapter-only weights of a task) on top.

Flags are defined by `define_flags(flag_values)`, not at import: both scripts
define --output_dir etc., so importing both into one process (tests) would clash
on the global FLAGS. Tests pass a fresh `flags.FlagValues()`.
"""

import dataclasses
import json
import posixpath
from typing import Callable, Mapping, Optional, Tuple

import keras
import tensorflow as tf
from absl import app
from absl import flags
from absl import logging

import adapter_checkpoint
import checkpoints
import file_io
import modeling
import tf2_bert_reader
import tokenization
import trainable
import training
from adapter_layers import AdapterConfig

ADAPTER_MODEL_DIR = "adapter_model"
RUN_CONFIG_FILE = "run_config.json"

# Keys of run_config.json that fix the model's variables: a checkpoint in
# output_dir is only usable if they match (a task adds its own, e.g. labels).
_MODEL_KEYS = ("bert_config", "adapter_config")


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """The flags adapter-bert adds to the original scripts, plus this project's."""
  fv = dict(flag_values=flag_values)
  flags.DEFINE_integer("adapter_size", 64, "Bottleneck size of the adapters; 0 = no adapters "
                       "(full fine-tuning).", **fv)
  flags.DEFINE_float("adapter_init_scale", 1e-3, "Stddev of the adapters' initial weights "
                     "(truncated normal).", **fv)
  flags.DEFINE_float("adapter_weight_decay_rate", 0.01, "Weight decay of adapter "
                     "variables (other weights: 0.01, as the original).", **fv)
  flags.DEFINE_string("train_mode", None, "What trains: adapters | full | layer_norm | head "
                      "| top_layers:K. Default: adapters if --adapter_size > 0, else full.",
                      **fv)
  flags.DEFINE_string("adapter_checkpoint", None, "Adapter-only weights (a run's "
                      "output_dir/adapter_model) loaded on top of the base weights.", **fv)
  flags.DEFINE_string("bert_hub_module_handle", None, "Start from this TF Hub BERT encoder "
                      "(TF2 SavedModel: URL, local or gs:// dir) instead of "
                      "--init_checkpoint.", **fv)
  flags.DEFINE_integer("seed", None, "Random seed of initialization, dropout and shuffling "
                       "(None: not seeded, as the original).", **fv)
  flags.DEFINE_bool("use_xla", False, "Compile the train/eval/predict steps with XLA "
                    "(jit_compile).", **fv)


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


def shuffle_seed(seed: Optional[int]) -> int:
  """The training-data shuffle seed: --seed, or a fixed one when it is unset.

  Never unseeded: every worker of a multi-worker run must read the same order,
  since each keeps its share of every global batch (training.train).
  """
  return 12345 if seed is None else seed


# The base encoder.


@dataclasses.dataclass(frozen=True)
class Base:
  """The pre-trained encoder a run starts from."""
  bert_config: modeling.BertConfig
  vocab_file: str
  hub_encoder: Optional[tf2_bert_reader.Tf2Encoder]  # with --bert_hub_module_handle


def read_base(options: ModelOptions, bert_config_file: Optional[str],
              vocab_file: Optional[str], do_lower_case: bool, max_seq_length: int) -> Base:
  """Checks the flags that describe the base encoder and reads its config (and Hub weights).

  With --bert_hub_module_handle, --bert_config_file and --vocab_file are
  optional: sizes are then inferred from the weights and the vocabulary is
  the SavedModel's own.
  """
  options.validate()
  tokenization.validate_case_matches_checkpoint(do_lower_case, options.init_checkpoint)
  hub_encoder = None
  if options.bert_hub_module_handle:
    handle = options.bert_hub_module_handle
    hub_encoder = read_hub_encoder(handle, bert_config_file, vocab_file)
    if hub_encoder.do_lower_case not in (None, do_lower_case):
      raise ValueError(f"--bert_hub_module_handle {handle} states do_lower_case="
                       f"{hub_encoder.do_lower_case}: pass "
                       f"--do_lower_case={hub_encoder.do_lower_case}")
    bert_config = modeling.BertConfig.from_dict(hub_encoder.config)
    vocab_file = hub_encoder.vocab_file
  else:
    for name, value in (("bert_config_file", bert_config_file), ("vocab_file", vocab_file)):
      if not value:
        raise app.UsageError(f"Flag --{name} must have a value other than None.")
    bert_config = modeling.BertConfig.from_json_file(bert_config_file)
  if max_seq_length > bert_config.max_position_embeddings:
    raise ValueError(
        "Cannot use sequence length %d because the BERT model "
        "was only trained up to sequence length %d" %
        (max_seq_length, bert_config.max_position_embeddings))
  return Base(bert_config, vocab_file, hub_encoder)


def read_hub_encoder(handle: str, bert_config_file: Optional[str] = None,
                     vocab_file: Optional[str] = None) -> tf2_bert_reader.Tf2Encoder:
  """Reads a TF Hub BERT encoder (TF2 SavedModel) into memory under Google's names.

  Its weights are loaded into the task model directly (rather than wrapping
  the SavedModel), which keeps one model class, so adapters can be inserted
  and checkpoints keep the original names.

  Args:
    handle: https:// URL of a TF Hub model, or a local or gs:// SavedModel dir.
    bert_config_file, vocab_file: see `tf2_bert_reader.read_tf2_encoder`.
  """
  if handle.startswith(("http://", "https://")):
    # Imported here: tensorflow_hub pulls in tf_keras, which only this path needs.
    import tensorflow_hub as hub  # pylint: disable=g-import-not-at-top
    path = hub.resolve(handle)  # Downloads into TFHUB_CACHE_DIR once.
  elif tf.io.gfile.isdir(handle):
    path = handle
  else:
    raise FileNotFoundError(f"--bert_hub_module_handle: no SavedModel directory {handle}")
  encoder = tf2_bert_reader.read_tf2_encoder(
      saved_model_dir=path, bert_config_file=bert_config_file, vocab_file=vocab_file)
  if not encoder.vocab_file:
    raise FileNotFoundError(f"{handle} has no vocabulary (no vocab_file asset, no "
                            f"assets/vocab.txt); pass --vocab_file")
  logging.info("Read TF Hub encoder %s (%d tensors, vocab %s)", handle,
               len(encoder.tensors), encoder.vocab_file)
  return encoder


# The task model and its weights.


def create_model(strategy: tf.distribute.Strategy,
                 make_model: Callable[[modeling.BertConfig, AdapterConfig], keras.Model],
                 options: ModelOptions, base: Base, output_dir: str,
                 adapter_metadata: Optional[Mapping[str, object]] = None
                 ) -> Tuple[keras.Model, int]:
  """Builds the task model under `strategy`, marks what trains and loads its weights.

  Args:
    make_model: (bert config, adapter config) -> an unbuilt task model of modeling.py.
    output_dir: the run's directory; its latest checkpoint wins (module docstring).
    adapter_metadata: see `load_weights`.
  Returns:
    The model (its parameter counts logged: adapter-bert's three lines) and the
    global step of its weights (`load_weights`).
  """
  with strategy.scope():
    model = make_model(base.bert_config, options.adapter_config())
    model.ensure_built()
  # Before loading, so that the loader's "Trainable Variables" list is what trains.
  trainable.set_trainable(model, options.mode())
  global_step = load_weights(model, options, output_dir, base.hub_encoder, adapter_metadata)
  trainable.log_parameter_counts(model)
  return model, global_step


def load_weights(model: keras.Model, options: ModelOptions, output_dir: str,
                 hub_encoder: Optional[tf2_bert_reader.Tf2Encoder] = None,
                 adapter_metadata: Optional[Mapping[str, object]] = None) -> int:
  """Fills `model` from output_dir's latest checkpoint or the base (module docstring).

  Args:
    hub_encoder: the base's weights with --bert_hub_module_handle (`read_base`).
    adapter_metadata: what --adapter_checkpoint must have been trained with,
      e.g. {"labels": [...]}: a key its metadata holds with another value is
      an error (same-shaped heads of another label order would load silently).
  Returns:
    The global step of the weights, as the original's eval results name it:
    the latest checkpoint's, else the adapters' training step, else 0.
  """
  latest = tf.train.latest_checkpoint(output_dir)
  if latest:
    ignored = [f"--{k}" for k in ("init_checkpoint", "bert_hub_module_handle",
                                  "adapter_checkpoint") if getattr(options, k)]
    if ignored:
      logging.warning("%s holds %s, which wins over %s (as the original Estimator's "
                      "model_dir); use a new --output_dir to start from those.",
                      output_dir, latest, ", ".join(ignored))
    checkpoints.load_checkpoint(model, latest)
    return training.latest_step(output_dir)
  if hub_encoder is not None:
    checkpoints.load_arrays(model, hub_encoder.tensors,
                            f"TF Hub encoder {options.bert_hub_module_handle}")
  elif options.init_checkpoint:
    checkpoints.load_checkpoint(model, options.init_checkpoint)
  else:
    logging.warning("No --init_checkpoint or --bert_hub_module_handle: the encoder "
                    "starts from random weights.")
  path = options.adapter_checkpoint
  if not path:
    return 0
  saved = adapter_checkpoint.read_adapter_header(path)["metadata"]
  for key, value in (adapter_metadata or {}).items():
    if saved.get(key, value) != value:
      raise ValueError(f"--adapter_checkpoint {path} was trained with {key} {saved[key]!r}, "
                       f"this run has {value!r}")
  adapter_checkpoint.load_adapter_weights(model, path)
  return int(saved.get("global_step", 0))


def save_adapter_model(model: keras.Model, options: ModelOptions, output_dir: str,
                       metadata: Optional[dict] = None) -> Optional[str]:
  """Writes the trained variables alone to <output_dir>/adapter_model.

  Skipped (returns None) after full fine-tuning: the checkpoint is then the
  model (a span labeler's unused pooler is frozen even then, so "all variables
  train" would not tell).
  """
  if options.mode().name == "full":
    logging.info("Full fine-tuning: no separate adapter-only weights written.")
    return None
  return adapter_checkpoint.save_adapter_weights(
      model, posixpath.join(output_dir, ADAPTER_MODEL_DIR), metadata)


# Training settings and run_config.json.


def train_settings(output_dir: str, num_examples: int, train_batch_size: int,
                   num_train_epochs: float, warmup_proportion: float, **settings
                   ) -> training.TrainSettings:
  """The original's step counts (rounded down) with the rest of `settings`.

  Raises:
    ValueError: if that gives no training step.
  """
  num_train_steps = int(num_examples / train_batch_size * num_train_epochs)
  if num_train_steps < 1:
    raise ValueError(f"num_train_steps = int({num_examples} examples / --train_batch_size="
                     f"{train_batch_size} * --num_train_epochs={num_train_epochs}) = 0: "
                     f"lower --train_batch_size or raise --num_train_epochs")
  return training.TrainSettings(
      output_dir=output_dir, train_batch_size=train_batch_size,
      num_train_steps=num_train_steps,
      num_warmup_steps=int(num_train_steps * warmup_proportion), **settings)


def run_config(options: ModelOptions, base: Base,
               settings: Optional[training.TrainSettings], **task) -> dict:
  """The run's settings as JSON-able data: the model's, training's and the task's."""
  config = dict(bert_config=base.bert_config.to_dict(),
                adapter_config=options.adapter_config().to_dict(),
                train_mode=str(options.mode()), vocab_file=base.vocab_file,
                init_checkpoint=options.init_checkpoint,
                bert_hub_module_handle=options.bert_hub_module_handle,
                adapter_checkpoint=options.adapter_checkpoint)
  if settings is not None:  # Where the run is written is not a setting of it.
    config.update((k, v) for k, v in dataclasses.asdict(settings).items() if k != "output_dir")
  config.update(task)
  return config


def check_run_config(output_dir: str, config: Mapping[str, object], also=()) -> None:
  """Refuses an output_dir whose checkpoints belong to another model.

  Restoring e.g. a 3-label checkpoint into a 2-label model fails deep inside
  tf.train with a shape error, and a same-sized label list in another order
  would not fail at all, so compare the saved settings first.

  Args:
    also: further keys to compare: the task's (e.g. "label_list"), and
      "train_mode" when resuming training, whose optimizer slots exist only
      for the variables that train.
  """
  path = posixpath.join(output_dir, RUN_CONFIG_FILE)
  if not tf.train.latest_checkpoint(output_dir) or not tf.io.gfile.exists(path):
    return
  with tf.io.gfile.GFile(path, "r") as f:
    saved = json.load(f)
  for key in _MODEL_KEYS + tuple(also):
    if key in saved and saved[key] != config.get(key):
      raise ValueError(
          f"{output_dir} holds checkpoints of another run: {key} was {saved[key]!r} there "
          f"(see {path}) but is {config.get(key)!r} now; use a fresh --output_dir or the "
          f"same settings")


def write_run_config(output_dir: str, config: Mapping[str, object], training_run: bool) -> None:
  """Saves `config` as output_dir/run_config.json.

  A training run always does; another run only where there is none, so that
  evaluating does not overwrite the settings of the run that trained the model.
  """
  path = posixpath.join(output_dir, RUN_CONFIG_FILE)
  if training_run or not tf.io.gfile.exists(path):
    file_io.atomic_write(path, json.dumps(config, indent=2, sort_keys=True) + "\n")
