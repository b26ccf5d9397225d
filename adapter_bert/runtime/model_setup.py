"""A run's task model: its adapter settings, what trains, and where its weights come from.

Both scripts build their model here (`create_model`). Its weights come, in
this order of precedence (the original Estimator's):
1. the latest `model.ckpt-N` in output_dir (a trained or interrupted run of this
   task: it wins over everything below; where it holds only what trained, its
   base is loaded first, from the flags or else from where the checkpoint says);
2. otherwise the base: `--init_checkpoint` (Google / adapter-bert / fine-tuned
   original checkpoint, or one of this project's) or `--bert_hub_module_handle`
   (a TF Hub / Model Garden BERT SavedModel), then `--adapter_checkpoint`
   (adapter-only weights of a task) on top.
After training, `save_adapter_model` writes what trained, alone, to
output_dir/adapter_model.
"""

import contextlib
import dataclasses
import posixpath
from typing import Callable, Mapping, Optional, Sequence, Tuple

import keras
import tensorflow as tf
from absl import logging

from adapter_bert.model import adapter_layers
from adapter_bert.model.adapter_layers import AdapterConfig, AdapterConfigError
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import base_model
from adapter_bert.checkpoints import checkpoint_io
from adapter_bert.checkpoints import run_checkpoints
from adapter_bert import errors
from adapter_bert.model import modeling
from adapter_bert.runtime import trainable
from adapter_bert import tokenization

ADAPTER_MODEL_DIR = "adapter_model"


# adapter-bert's --adapter_size, where the train mode trains adapters: AdapterConfig's.
DEFAULT_ADAPTER_SIZE = AdapterConfig.size


# AdapterConfig's fields, and the flag that sets each ("adapter_" + the field; in
# this order a given flag is compared with what an adapter file records).
ADAPTER_CONFIG_FLAGS = {field: "adapter_" + field for field in (
    "size", "init_scale", "placement", "design", "scaling", "activation", "layer_norm")}
assert set(ADAPTER_CONFIG_FLAGS) == {f.name for f in dataclasses.fields(AdapterConfig)}


def checked_adapter_config(**settings) -> AdapterConfig:
  """AdapterConfig(**settings), its refusal (AdapterConfigError) as the one-line
  user error naming the flag (ADAPTER_CONFIG_FLAGS), its value and what is allowed.

  The one place where the command line's words for AdapterConfig's own checks
  are made: the flags' checks at parse time are the same rules (field_rule).
  """
  try:
    return AdapterConfig(**settings)
  except AdapterConfigError as e:
    named = errors.flags_named(**{ADAPTER_CONFIG_FLAGS[e.field]: e.value})
    if e.needs:
      field, values = e.needs
      reason = f"only with --{ADAPTER_CONFIG_FLAGS[field]}=" + " or ".join(values)
    else:
      reason = f"must be {e.allowed}" if e.allowed else str(e)
    raise errors.UserError(f"{named}: {reason}") from e


@dataclasses.dataclass(frozen=True)
class ModelOptions:
  """Where a task model's weights come from and what trains (the adapter flags).

  Attributes:
    adapter: the adapter settings as given, AdapterConfig's keyword arguments
      (field -> value; an AdapterConfig is taken as its fields); AdapterConfig
      alone checks them (`adapter_config`). Without "size" (the flag not
      given), the size is DEFAULT_ADAPTER_SIZE for train mode adapters (the
      default) and 0 for the others: a baseline must not carry random adapters,
      nor a full fine-tuning run modify BERT unasked (`adapter_size`).
  """
  adapter: Mapping[str, object] = dataclasses.field(default_factory=dict)
  train_mode: Optional[str] = None
  init_checkpoint: Optional[str] = None
  bert_hub_module_handle: Optional[str] = None
  adapter_checkpoint: Optional[str] = None
  mixed_precision: str = "none"

  def __post_init__(self):
    adapter = self.adapter
    if isinstance(adapter, AdapterConfig):
      adapter = dataclasses.asdict(adapter)
    # None is "not given", as the flags give it.
    object.__setattr__(self, "adapter",
                       {k: v for k, v in dict(adapter).items() if v is not None})

  @property
  def adapter_size(self) -> int:
    """The adapters' size: as given, else what the train mode implies."""
    size = self.adapter.get("size")
    return implied_adapter_size(self.train_mode) if size is None else size

  def _full_adapter_config(self) -> AdapterConfig:
    """The settings as given, the size resolved: checked (UserError) as given."""
    return checked_adapter_config(**dict(self.adapter, size=self.adapter_size))

  def adapter_config(self) -> AdapterConfig:
    config = self._full_adapter_config()
    if not config.size:  # Plain BERT, recorded as before designs existed.
      return AdapterConfig(size=0, init_scale=config.init_scale)
    return config

  def validate(self, do_lower_case: bool) -> None:
    """Fails on inconsistent flags before a script does any work.

    Raises:
      errors.UserError: naming the flags, their values and what is allowed.
    """
    named = errors.flags_named
    message = sources_conflict(self.init_checkpoint, self.bert_hub_module_handle)
    if message:
      sources = named(init_checkpoint=self.init_checkpoint,
                      bert_hub_module_handle=self.bert_hub_module_handle)
      raise errors.UserError(f"{sources}: {message}")
    placement, design = self.adapter.get("placement"), self.adapter.get("design")
    message = given_placement_conflict(design, placement)
    if message:  # Before AdapterConfig's own check, which does not say "leave it out".
      raise errors.UserError(f"{named(adapter_design=design)}: {message}")
    config = self._full_adapter_config()  # AdapterConfig's checks of each setting.
    if not train_mode_ok(self.train_mode):
      raise errors.UserError(f"{named(train_mode=self.train_mode)}: must be "
                             + TRAIN_MODES_ALLOWED)
    message = adapter_conflict(self.mode(), config.size)
    if message:
      raise errors.UserError(
          f"{named(train_mode=self.train_mode, adapter_size=config.size)}: {message}")
    message = placement_conflict(placement, config.size)
    if message:
      raise errors.UserError(f"{named(adapter_placement=placement)}: {message}")
    message = design_conflict(config.design, config.size)
    if message:
      raise errors.UserError(f"{named(adapter_design=config.design)}: {message}")
    tokenization.validate_case_matches_checkpoint(do_lower_case, self.init_checkpoint)

  def mode(self) -> trainable.TrainMode:
    if self.train_mode:
      return trainable.TrainMode.parse(self.train_mode)
    return trainable.default_train_mode(self.adapter_size)

  def read_checked_base(self, bert_config_file: Optional[str], vocab_file: Optional[str],
                        do_lower_case: bool, max_seq_length: int) -> base_model.Base:
    """Validates these options and reads the base encoder they start from."""
    self.validate(do_lower_case)
    base = base_model.read_base_files(bert_config_file, vocab_file, do_lower_case,
                                      max_seq_length, self.bert_hub_module_handle)
    mode, num_layers = self.mode(), base.bert_config.num_hidden_layers
    if mode.name == "top_layers" and mode.top_layers > num_layers:
      raise errors.UserError(f"{errors.flags_named(train_mode=mode)}: the base model "
                             f"has {num_layers} layers; K must be at most {num_layers}")
    return base


def implied_adapter_size(train_mode: Optional[str]) -> int:
  """--adapter_size when it is not given: adapters only where they are the method."""
  if not train_mode_ok(train_mode):
    return DEFAULT_ADAPTER_SIZE  # validate() reports the train mode.
  if train_mode and trainable.TrainMode.parse(train_mode).name not in ("adapters",
                                                                       "adapters_only"):
    return 0
  return DEFAULT_ADAPTER_SIZE


# The checks of these options that involve more than one adapter setting or a
# setting besides them, shared by the scripts' flag validators (absl prefixes
# their messages with the flags and values, as flags_named does).

TRAIN_MODES_ALLOWED = ("one of adapters, adapters_only, full, layer_norm, head, "
                       "top_layers:K (K >= 0)")


def train_mode_ok(train_mode: Optional[str]) -> bool:
  try:
    if train_mode:
      trainable.TrainMode.parse(train_mode)
  except ValueError:
    return False
  return True


def sources_conflict(init_checkpoint: Optional[str],
                     bert_hub_module_handle: Optional[str]) -> Optional[str]:
  if init_checkpoint and bert_hub_module_handle:
    return "give at most one of --init_checkpoint and --bert_hub_module_handle"
  return None


def adapter_conflict(mode: trainable.TrainMode, adapter_size: int) -> Optional[str]:
  """Adapters that the train mode needs but lacks, or builds but never trains."""
  if mode.name in ("adapters", "adapters_only") and adapter_size == 0:
    return (f"--train_mode={mode} needs adapters: give --adapter_size > 0 or leave it "
            f"out ({DEFAULT_ADAPTER_SIZE})")
  if adapter_size > 0 and not mode.trains_adapters:
    return (f"--train_mode={mode} trains no adapters: leave --adapter_size out or give "
            "--adapter_size=0 (adapters that never train stay random)")
  return None


def placement_conflict(placement: Optional[str], adapter_size: int) -> Optional[str]:
  """A placement other than the default asked for a model without adapters."""
  if placement not in (None, "both") and adapter_size == 0:
    return (f"--adapter_placement={placement} places adapters, but the model has none "
            "(--adapter_size=0, or a --train_mode without adapters)")
  return None


def design_conflict(design: Optional[str], adapter_size: int) -> Optional[str]:
  """A design asked for a model without adapters."""
  if design not in (None, adapter_layers.DEFAULT_DESIGN) and adapter_size == 0:
    return (f"--adapter_design={design} needs adapters, but the model has none "
            "(--adapter_size=0, or a --train_mode without adapters)")
  return None


def given_placement_conflict(design: Optional[str], placement: Optional[str]) -> Optional[str]:
  """A placement given to a design whose places are fixed (LoRA's)."""
  if placement is None or design is None or design not in adapter_layers.design_names():
    return None
  spec = adapter_layers.get_design(design)
  if spec.takes_placement:
    return None
  return (f"design {design} takes no placement ({spec.summary}); leave "
          f"--adapter_placement={placement} out")


def set_seed(seed: Optional[int]) -> None:
  if seed is not None:
    keras.utils.set_random_seed(seed)


def shuffle_seed(seed: Optional[int]) -> int:
  """The training-data shuffle seed: --seed, or a fixed one when it is unset.

  Never unseeded: every worker of a multi-worker run must read the same order,
  since each keeps its share of every global batch (loop.train).
  """
  return 12345 if seed is None else seed


# --mixed_precision -> Keras dtype policy: float32 variables, 16-bit compute.
DTYPE_POLICIES = {"none": "float32", "bfloat16": "mixed_bfloat16",
                  "float16": "mixed_float16"}


@contextlib.contextmanager
def dtype_policy(mixed_precision: str):
  """Layers created inside take the policy of `--mixed_precision` (Keras reads
  the global policy when a layer is created); the previous one is restored."""
  previous = keras.config.dtype_policy()
  keras.config.set_dtype_policy(DTYPE_POLICIES[mixed_precision])
  try:
    yield
  finally:
    keras.config.set_dtype_policy(previous)


def create_model(strategy: tf.distribute.Strategy,
                 make_model: Callable[[modeling.BertConfig, AdapterConfig], keras.Model],
                 options: ModelOptions, base: base_model.Base, output_dir: str,
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
  with strategy.scope(), dtype_policy(options.mixed_precision):
    model = make_model(base.bert_config, options.adapter_config())
    model.ensure_built()
  # Before loading, so that the loader's "Trainable Variables" list is what trains.
  trainable.set_trainable(model, options.mode())
  global_step = load_weights(model, options, output_dir, base.hub_encoder, adapter_metadata)
  trainable.log_parameter_counts(model)
  return model, global_step


def load_weights(model: keras.Model, options: ModelOptions, output_dir: str,
                 hub_encoder=None,
                 adapter_metadata: Optional[Mapping[str, object]] = None) -> int:
  """Fills `model` from output_dir's latest checkpoint or the base (module docstring).

  Args:
    hub_encoder: the base's weights with --bert_hub_module_handle (base_model.Base).
    adapter_metadata: what --adapter_checkpoint must have been trained with,
      e.g. {"labels": [...]}: a key its metadata holds with another value is
      an error (same-shaped heads of another label order would load silently).
  Returns:
    The global step of the weights, as the original's eval results name it:
    the latest checkpoint's, else the adapters' training step, else 0.
  Raises:
    ValueError: if output_dir's checkpoint holds trained variables only and
      the base loaded under them is not the one they were trained on.
    errors.UserError: if --adapter_checkpoint was trained with other metadata.
  """
  latest = run_checkpoints.latest(output_dir)
  reference = run_checkpoints.read_reference(latest) if latest else None
  if latest and reference is None:
    ignored = [f"--{k}" for k in _SOURCES if getattr(options, k)]
    if ignored:
      logging.warning("%s holds %s, which wins over %s (as the original Estimator's "
                      "model_dir); use a new --output_dir to start from those.",
                      output_dir, latest, ", ".join(ignored))
    return run_checkpoints.restore(model, output_dir)
  if reference is not None and not (options.init_checkpoint or hub_encoder is not None):
    # Trained variables only: their base as the checkpoint records it, unless
    # the flags name one (e.g. the same checkpoint at another path).
    logging.info("%s holds the trained variables only; loading its base from %s",
                 latest, {k: reference.get(k) for k in _SOURCES if reference.get(k)})
    options = dataclasses.replace(options, **{k: reference.get(k) for k in _SOURCES})
    if options.bert_hub_module_handle:
      hub_encoder = base_model.read_hub_encoder(options.bert_hub_module_handle)
  step = _load_from_options(model, options, hub_encoder, adapter_metadata)
  if reference is not None:
    return run_checkpoints.restore(model, output_dir)
  return step


# Where a base's weights come from, as ModelOptions (and --flags) name them.
_SOURCES = ("init_checkpoint", "bert_hub_module_handle", "adapter_checkpoint")


def check_weights_given(options: ModelOptions, output_dir: str,
                        weights_flags: Sequence[str] = ()) -> None:
  """Evaluating or predicting without training: some source must give weights.

  Args:
    weights_flags: the entry point's flags that give weights besides the model
      flags (run_classifier.py's "--adapter_bank/--bank_task"), named in the error.
  Raises:
    errors.UserError: no weights flag and no checkpoint in output_dir (a typo
      in the directory is enough): the model would be random.
  """
  if any(getattr(options, k) for k in _SOURCES) or run_checkpoints.latest(output_dir):
    return
  named = ["--init_checkpoint", "--adapter_checkpoint", *weights_flags,
           "--bert_hub_module_handle"]
  raise errors.UserError(
      f"nothing to evaluate: no weights from {', '.join(named[:-1])} or {named[-1]}, and "
      f"no model.ckpt-N in --output_dir={output_dir}; give one of these (or --do_train)")


def weights_evaluated(options: ModelOptions, output_dir: str) -> Optional[str]:
  """The checkpoint the model's weights came from, as the result files record it
  (`load_weights`' precedence): output_dir's latest, else --adapter_checkpoint
  (over its base), else --init_checkpoint's checkpoint prefix, else the TF Hub
  handle; None for random weights."""
  latest = run_checkpoints.latest(output_dir)
  if latest:
    return latest
  if options.adapter_checkpoint:
    return options.adapter_checkpoint
  if options.init_checkpoint:
    return checkpoint_io.resolve_checkpoint(options.init_checkpoint)
  return options.bert_hub_module_handle


def untrained_head(model: keras.Model, options: ModelOptions, output_dir: str) -> bool:
  """Whether the task head keeps its initial values: no checkpoint of this run, no
  --adapter_checkpoint, and a base (Hub encoder, or a TF1 checkpoint without any
  of the model's variables outside bert/) that gives the encoder only."""
  if options.adapter_checkpoint or run_checkpoints.latest(output_dir):
    return False
  if not options.init_checkpoint:
    return True
  path = checkpoint_io.resolve_checkpoint(options.init_checkpoint)
  if checkpoint_io.is_object_based(path):  # One of this project's runs: all of a model.
    return False
  saved = checkpoint_io.checkpoint_reader(path).get_variable_to_shape_map()
  return not any(name in saved for name in model.tf1_variable_map()
                 if not name.startswith("bert/"))


def _load_from_options(model, options, hub_encoder, adapter_metadata) -> int:
  """load_base from these options, with a warning where no base is given."""
  if hub_encoder is None and not options.init_checkpoint:
    # As the original (it trained from random weights silently); legitimate for
    # tests and from-scratch runs, so a warning, louder where the random weights stay.
    frozen = options.mode().name != "full"
    logging.warning("No --init_checkpoint or --bert_hub_module_handle: the encoder "
                    "starts from random weights%s.",
                    f", and --train_mode={options.mode()} keeps most of them frozen"
                    if frozen else "")
  return load_base(model, options.init_checkpoint, options.bert_hub_module_handle,
                   options.adapter_checkpoint, hub_encoder, adapter_metadata)


def load_base(model: keras.Model, init_checkpoint: Optional[str] = None,
              bert_hub_module_handle: Optional[str] = None,
              adapter_checkpoint: Optional[str] = None, hub_encoder=None,
              adapter_metadata: Optional[Mapping[str, object]] = None) -> int:
  """The one loader of a model's starting weights, for training and serving alike.

  First the base: the TF Hub encoder (`hub_encoder`, read from
  `bert_hub_module_handle` if not given), or the checkpoint (Google's,
  adapter-bert's, a fine-tuned one, or a run's; a run's checkpoint of trained
  variables only loads the base it records first); neither leaves the
  model's weights as they are. Then `adapter_checkpoint`'s adapter-only
  weights on top.

  Args:
    adapter_metadata: see `load_weights`.
  Returns:
    The adapter file's training step, or 0.
  Raises:
    errors.UserError: an unreadable source, one that does not fit the model,
      or an adapter file trained with other metadata.
  """
  if bert_hub_module_handle and hub_encoder is None:
    hub_encoder = base_model.read_hub_encoder(bert_hub_module_handle)
  if hub_encoder is not None:
    checkpoint_io.load_arrays(model, hub_encoder.tensors,
                              f"TF Hub encoder {bert_hub_module_handle}")
  elif init_checkpoint:
    path = checkpoint_io.resolve_checkpoint(init_checkpoint)
    reference = run_checkpoints.read_reference(path)
    if reference is None:
      checkpoint_io.load_checkpoint(model, path)
    else:  # A run's checkpoint of trained variables only: its own base first.
      load_base(model, **{k: reference.get(k) for k in _SOURCES})
      run_checkpoints.restore_from(model, path)
  if not adapter_checkpoint:
    return 0
  adapter_file = adapter_weights.read_adapter_file(adapter_checkpoint)
  saved = adapter_file.header["metadata"]
  adapter_weights.check_metadata(
      f"--adapter_checkpoint={adapter_checkpoint}", saved, adapter_metadata or {},
      "this run", labels_fix="give this run the labels the adapters were trained with, "
      "in that order (--labels of a tsv task), or adapters trained with this run's")
  adapter_weights.load_adapter_weights(model, adapter_file)
  return int(saved.get("global_step", 0))


def base_reference(model: keras.Model, options: ModelOptions,
                   output_dir: str) -> Optional[dict]:
  """What training checkpoints record about the frozen weights (run_checkpoints).

  Where they came from is what the flags say or, for a run resumed without
  them, what output_dir's checkpoint said. None (checkpoints of the whole
  model) where no file gives the encoder: a random base cannot be rebuilt
  (another --seed, or none, draws other weights), so a checkpoint of the
  trained variables alone could never be resumed.
  """
  sources = {k: getattr(options, k) for k in _SOURCES}
  latest = run_checkpoints.latest(output_dir)
  recorded = run_checkpoints.read_reference(latest) if latest else None
  if recorded and not (options.init_checkpoint or options.bert_hub_module_handle):
    sources = {k: recorded.get(k) for k in _SOURCES}
  if not (sources["init_checkpoint"] or sources["bert_hub_module_handle"]):
    return None
  return run_checkpoints.base_reference(model, sources)


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
  return adapter_weights.save_adapter_weights(
      model, posixpath.join(output_dir, ADAPTER_MODEL_DIR), metadata)
