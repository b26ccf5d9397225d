"""The set-up every entry point shares: seed, base encoder, strategy, settings, model, weights.

An entry point's flags become `RunOptions` (cli/parse.py); runtime/task_run.run then
  base = startup.read_base(options)        seeds, checks the options, reads the base
  ...                                    the task reads and checks its own inputs
  run = startup.set_up(options, base, make_model, num_train_examples, ...)
                                         training settings, run_config.json checked
                                         against output_dir, strategy, model, weights
  ...                                    the task's training records (pack_training)
  startup.write_run_config(run)            once, with the final step counts
  startup.train(run, loss_fn, dataset, metadata)
Nothing before set_up's end writes a file, so a mistake in a flag, a file or
output_dir fails before any output.
"""

import dataclasses
import math
from typing import Callable, Mapping, Optional, Sequence

import keras
import tensorflow as tf
from absl import logging

from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.checkpoints import base_model
from adapter_bert.checkpoints import run_checkpoints
from adapter_bert import errors
from adapter_bert.model import modeling
from adapter_bert.runtime import distribution
from adapter_bert.runtime import loop
from adapter_bert.runtime import model_setup
from adapter_bert.runtime import records
from adapter_bert.runtime import run_config


@dataclasses.dataclass(frozen=True)
class RunOptions:
  """How a run is set up: its fields are named after the flags they come from."""
  output_dir: str
  model: model_setup.ModelOptions = model_setup.ModelOptions()
  bert_config_file: Optional[str] = None
  vocab_file: Optional[str] = None
  do_lower_case: bool = True
  max_seq_length: int = 128
  do_train: bool = False
  do_eval: bool = False
  do_predict: bool = False
  # Training (the original's schedule; weight decay 0.01 as the original).
  train_batch_size: int = 32
  eval_batch_size: int = 8
  predict_batch_size: int = 8
  learning_rate: float = 5e-5
  num_train_epochs: float = 3.0
  warmup_proportion: float = 0.1
  adapter_weight_decay_rate: float = 0.01
  optimizer: str = "bert"  # optimization.OPTIMIZERS
  save_checkpoints_steps: int = 1000
  iterations_per_loop: int = 1000
  # Input batches (runtime/records.py).
  # None: to max_seq_length with use_tpu (one program), unless group_by_length;
  # else per batch (`pads_to_max_seq_length`).
  pad_to_max_seq_length: Optional[bool] = None
  group_by_length: bool = False
  # Several examples per row of max_seq_length tokens (runtime/packing.py).
  pack_sequences: bool = False
  # Devices and compilation.
  use_tpu: bool = False
  tpu_name: Optional[str] = None
  tpu_zone: Optional[str] = None
  gcp_project: Optional[str] = None
  master: Optional[str] = None
  num_tpu_cores: Optional[int] = None  # None: whatever the TPU has.
  use_xla: bool = False
  seed: Optional[int] = None


  @property
  def pads_to_max_seq_length(self) -> bool:
    """Whether every batch is padded to max_seq_length: as asked, else on TPU
    (static shapes, one compiled program; per-batch padding there is untried)
    unless group_by_length asks for batches padded to their own length.
    Packed rows are always max_seq_length long."""
    if self.pack_sequences:
      return True
    if self.pad_to_max_seq_length is not None:
      return self.pad_to_max_seq_length
    return self.use_tpu and not self.group_by_length

  @property
  def pad_to_multiple_of(self) -> Optional[int]:
    """records.read_batches' padding: None (to max_seq_length) or per batch,
    rounded up where XLA compiles a program per shape (TPU, --use_xla)."""
    if self.pads_to_max_seq_length:
      return None
    return records.STATIC_SHAPE_MULTIPLE if self.use_tpu or self.use_xla else 1


@dataclasses.dataclass
class Run:
  """A run, set up: what the entry point trains, evaluates and predicts with."""
  options: RunOptions
  base: base_model.Base
  settings: Optional[loop.TrainSettings]  # None: the run does not train.
  config: dict  # run_config.json's contents.
  strategy: tf.distribute.Strategy
  model: keras.Model
  global_step: int  # Of the weights loaded, then of the training that ended.
  # Where those weights are (model_setup.weights_evaluated): the result files name it.
  checkpoint_path: Optional[str] = None


def read_base(options: RunOptions) -> base_model.Base:
  """Seeds the run, checks its model options and reads the base encoder they name."""
  if options.use_tpu and options.model.mixed_precision == "float16":
    raise errors.UserError(
        f"{errors.flags_named(mixed_precision='float16', use_tpu=True)}: TPUs compute "
        "in bfloat16, not float16: use --mixed_precision=bfloat16")
  model_setup.set_seed(options.seed)
  return options.model.read_checked_base(options.bert_config_file, options.vocab_file,
                                         options.do_lower_case, options.max_seq_length)


def train_settings(options: RunOptions, num_examples: int) -> loop.TrainSettings:
  """The training loop's settings for `num_examples` examples an epoch."""
  return loop.TrainSettings.for_epochs(
      num_examples, options.num_train_epochs, options.warmup_proportion,
      output_dir=options.output_dir, train_batch_size=options.train_batch_size,
      learning_rate=options.learning_rate,
      adapter_weight_decay_rate=options.adapter_weight_decay_rate,
      optimizer=options.optimizer, save_checkpoints_steps=options.save_checkpoints_steps,
      iterations_per_loop=options.iterations_per_loop, jit_compile=options.use_xla)


def create_strategy(options: RunOptions) -> tf.distribute.Strategy:
  strategy = distribution.create_strategy(options.use_tpu, options.tpu_name, options.tpu_zone,
                                          options.gcp_project, options.master)
  if options.use_tpu:
    cores = strategy.num_replicas_in_sync
    logging.info("TPU cores found: %d", cores)
    if options.num_tpu_cores is not None and options.num_tpu_cores != cores:
      logging.warning("--num_tpu_cores=%d but the TPU has %d cores; using %d",
                      options.num_tpu_cores, cores, cores)
  check_batch_sizes(options, strategy.num_replicas_in_sync)
  return strategy


def check_batch_sizes(options: RunOptions, num_replicas: int) -> None:
  """Each batch size of what the run does splits evenly between the replicas.

  A strategy splits every global batch between its replicas (loop.py): on a
  TPU the shares must be of one shape, and a multi-task batch's shares must
  each hold whole examples of its one task.

  Raises:
    errors.UserError: naming the first flag that does not divide.
  """
  for action, flag in (("do_train", "train_batch_size"), ("do_eval", "eval_batch_size"),
                       ("do_predict", "predict_batch_size")):
    size = getattr(options, flag)
    if getattr(options, action) and size % num_replicas:
      what = "TPU cores" if options.use_tpu else "devices"
      raise errors.UserError(
          f"{errors.flags_named(**{flag: size})}: must be a multiple of the "
          f"{num_replicas} {what} that each "
          f"batch is split between, e.g. --{flag}={-(-size // num_replicas) * num_replicas}")


def set_up(options: RunOptions, base: base_model.Base,
           make_model: Callable[[modeling.BertConfig, AdapterConfig], keras.Model],
           num_train_examples: Optional[int] = None,
           adapter_metadata: Optional[Mapping[str, object]] = None,
           model_keys: Sequence[str] = (), weights_flags: Sequence[str] = (),
           **task) -> Run:
  """Everything but the task's data: writes nothing.

  Args:
    make_model: (bert config, adapter config) -> the unbuilt task model.
    num_train_examples: examples an epoch, with options.do_train.
    adapter_metadata: what --adapter_checkpoint must have been trained with
      (model_setup.load_weights).
    model_keys: the task's run_config.json keys that fix its model
      (run_config.check); "train_mode" is added when training.
    weights_flags: the entry point's own flags that give weights, named when none
      does (model_setup.check_weights_given).
    **task: the task's settings for run_config.json.
  Raises:
    errors.UserError: no training step, output_dir holding another run, or (without
      training) no source of weights (model_setup.check_weights_given).
  """
  if not options.do_train:
    run_checkpoints.check_evaluable(options.output_dir)
    model_setup.check_weights_given(options.model, options.output_dir, weights_flags)
  settings = (train_settings(options, num_train_examples) if options.do_train else None)
  config = run_config.build(
      options.model, base, settings, **task, max_seq_length=options.max_seq_length,
      do_lower_case=options.do_lower_case, num_train_epochs=options.num_train_epochs,
      warmup_proportion=options.warmup_proportion, seed=options.seed,
      use_tpu=options.use_tpu, pad_to_max_seq_length=options.pads_to_max_seq_length,
      group_by_length=options.group_by_length,
      # Recorded where used only: a run_config.json without it was not packed.
      **({"pack_sequences": True} if options.pack_sequences else {}))
  run_config.check(options.output_dir, config,
                   also=tuple(model_keys) + (("train_mode",) if options.do_train else ()),
                   resuming=options.do_train, derived=not options.pack_sequences)
  strategy = create_strategy(options)
  model, global_step = model_setup.create_model(strategy, make_model, options.model, base,
                                                options.output_dir, adapter_metadata)
  if not options.do_train and model_setup.untrained_head(model, options.model,
                                                        options.output_dir):
    logging.warning("WARNING: the task head is untrained (only the base's weights were "
                    "loaded: no --adapter_checkpoint and no checkpoint in --output_dir=%s); "
                    "the metrics are chance-level", options.output_dir)
  return Run(options, base, settings, config, strategy, model, global_step,
             model_setup.weights_evaluated(options.model, options.output_dir))


def write_run_config(run: Run) -> None:
  """Creates output_dir and saves run_config.json there (run_config.write)."""
  tf.io.gfile.makedirs(run.options.output_dir)
  run_config.write(run.options.output_dir, run.config, training_run=run.options.do_train)


def train(run: Run, loss_fn: loop.LossFn, dataset: tf.data.Dataset,
          metadata: Mapping[str, object]) -> Optional[str]:
  """Trains run.model to the end (loop.train), then writes what trained alone to
  output_dir/adapter_model with the task's `metadata` and the run's.

  Returns:
    The adapter-only weights' path (None after full fine-tuning); run.global_step
    is the last step, run.checkpoint_path its checkpoint.
  """
  options = run.options
  labels = run.config.get("label_list") or ()
  run.global_step = loop.train(
      run.strategy, run.model, loss_fn, dataset, run.settings,
      model_setup.base_reference(run.model, options.model, options.output_dir),
      chance_loss=math.log(len(labels)) if len(labels) > 1 else None)["global_step"]
  run.checkpoint_path = model_setup.weights_evaluated(options.model, options.output_dir)
  return model_setup.save_adapter_model(run.model, options.model, options.output_dir, dict(
      metadata, max_seq_length=options.max_seq_length, do_lower_case=options.do_lower_case,
      train_mode=run.config["train_mode"], global_step=run.global_step))


def pack_training(run: Run, record_file: str) -> int:
  """With --pack_sequences: the packed rows per training batch, and run.settings
  (and run.config, before run_config.json is written) counted in them;
  --train_batch_size keeps meaning examples.

  The examples per row are measured by packing the record's lengths once: a
  batch is the rows that hold --train_batch_size examples on average (rounded
  up to a multiple of the replicas), and the epochs count packed rows, so
  that the steps, the warmup and the learning-rate schedule cover as many
  examples as unpacked. A step's number of examples then varies a little;
  its loss is the mean over them (packing.mean_over_examples).

  Raises:
    errors.UserError: if that gives no training step.
  """
  options = run.options
  rows, stats = records.packed_batch_rows(record_file, options.max_seq_length,
                                          options.train_batch_size,
                                          run.strategy.num_replicas_in_sync)
  steps = loop.steps_for_epochs(stats.num_rows, rows, options.num_train_epochs)
  if steps < 1:
    raise errors.UserError(
        f"num_train_steps = int({stats.num_rows} packed rows / {rows} rows a batch * "
        f"--num_train_epochs={options.num_train_epochs}) = 0: lower --train_batch_size "
        f"or raise --num_train_epochs")
  # The loop's train_batch_size becomes the examples a step holds on average,
  # which progress lines count (examples/sec); run_config.json keeps the flag's.
  run.settings = dataclasses.replace(
      run.settings, num_train_steps=steps,
      num_warmup_steps=int(steps * options.warmup_proportion),
      train_batch_size=max(1, round(rows * stats.examples_per_row)))
  run.config.update(num_train_steps=steps, num_warmup_steps=run.settings.num_warmup_steps,
                    packed_rows_per_batch=rows)
  # The counts set_up could not compare yet, before they are recorded.
  run_config.check(options.output_dir, run.config, resuming=True)
  return rows
