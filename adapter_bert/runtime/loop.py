"""The training loop under any tf.distribute strategy (evaluation and prediction:
runtime/prediction.py).

What the original got from TPUEstimator: compiled steps, several steps per
host call (`iterations_per_loop` on TPU; paced for progress lines elsewhere,
runtime/progress.py), checkpoints every `save_checkpoints_steps` (last 5 kept,
named `model.ckpt-STEP`), resumption from the latest checkpoint in output_dir,
TensorBoard summaries and progress lines.

Interruptions lose nothing that a re-run of the same command cannot redo:
  * Ctrl-C (SIGINT) or SIGTERM (how a preemptible VM or a scheduler stops a
    job) during training saves a checkpoint at the current step, after the host
    call in progress, and ends the process with status 130 or 143
    (runtime/stop_signals.py); during prediction it ends it before any result
    is written. A second Ctrl-C during the save waits for it.
  * SIGKILL at any moment loses at most the steps since the last checkpoint
    (run_checkpoints.latest finds the newest complete one).
  * A resumed run continues the input stream where the checkpoint left it and
    draws the same dropout masks (the random state is checkpointed), so it
    ends with the weights of an uninterrupted run with the same --seed.
  * A NaN or Inf loss (or weights) stops training with a UserError naming the
    step, before anything non-finite is saved.
  * A TPU lost mid-run (a preempted or restarted TPU Node: UnavailableError)
    ends training with one line and the SIGTERM status; the last checkpoint
    stays the latest (the failed host call left the weights at an unknown step
    within it), so the same command resumes from there. Lost during evaluation
    or prediction, it ends the same way with nothing of them written. A TPU VM preempted or
    stopped for maintenance is shut down, which sends SIGTERM. TensorFlow's
    PreemptionCheckpointHandler does not apply: it watches for termination on
    Borg and on GCP GPU VMs only, and declines TPUs and CPUs on GCP (TF 2.20).
"""

import dataclasses
import tempfile
import time
from typing import Callable, Dict, Optional

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from adapter_bert.checkpoints import run_checkpoints
from adapter_bert import errors
from adapter_bert.model import optimization
from adapter_bert.runtime import packing
from adapter_bert.runtime import records
from adapter_bert.runtime import stop_signals
from adapter_bert.runtime.progress import Progress

# (labels, model outputs) -> float32 per-example loss [batch_size].
LossFn = Callable[[object, object], tf.Tensor]

@dataclasses.dataclass(frozen=True)
class TrainSettings:
  output_dir: str
  train_batch_size: int
  num_train_steps: int
  num_warmup_steps: int
  learning_rate: float
  weight_decay_rate: float = 0.01
  adapter_weight_decay_rate: float = 0.01
  save_checkpoints_steps: int = 1000
  iterations_per_loop: int = 1000
  keep_checkpoint_max: int = 5
  jit_compile: bool = False
  optimizer: str = "bert"  # A name of optimization.OPTIMIZERS.

  @classmethod
  def for_epochs(cls, num_examples: int, num_train_epochs: float,
                 warmup_proportion: float, **settings) -> "TrainSettings":
    """The original's step counts (rounded down) with the rest of `settings`.

    Raises:
      errors.UserError: if that gives no training step.
    """
    batch_size = settings["train_batch_size"]
    num_train_steps = steps_for_epochs(num_examples, batch_size, num_train_epochs)
    if num_train_steps < 1:
      raise errors.UserError(
          f"num_train_steps = int({num_examples} examples / --train_batch_size="
          f"{batch_size} * --num_train_epochs={num_train_epochs}) = 0: "
          f"lower --train_batch_size or raise --num_train_epochs")
    return cls(num_train_steps=num_train_steps,
               num_warmup_steps=int(num_train_steps * warmup_proportion), **settings)


def steps_for_epochs(num_examples: int, batch_size: int, num_train_epochs: float) -> int:
  """The original's training steps: int(examples / batch * epochs), rounded down."""
  return int(num_examples / batch_size * num_train_epochs)


def train(strategy: tf.distribute.Strategy, model: keras.Model, loss_fn: LossFn,
          dataset: tf.data.Dataset, settings: TrainSettings,
          base_reference: Optional[dict] = None,
          chance_loss: Optional[float] = None) -> Dict[str, float]:
  """Trains `model.trainable_variables` to `settings.num_train_steps`.

  The model is created under `strategy.scope()`, with its initial checkpoint
  loaded and `trainable.set_trainable` applied. If output_dir holds a
  checkpoint of this run, training resumes from it (weights, optimizer slots,
  step and dropout random state) and skips the batches trained on before, so
  re-running an interrupted command finishes the same run.

  Args:
    dataset: repeated, shuffled, batched to `train_batch_size` with
      `drop_remainder=True` (static shapes), yielding (features, labels).
    base_reference: `run_checkpoints.base_reference(...)` of the model: the
      checkpoints then hold only the trained variables (None: the whole model).
    chance_loss: the loss of a model that ignores its inputs (ln of the label
      count): a loss that stays there after warm-up gets one WARNING (ChanceWatch).
  Returns:
    {"loss": mean loss of the last host call, "global_step": final step}.
  Raises:
    stop_signals.Stopped: after a Ctrl-C or SIGTERM, once the checkpoint of the current
      step is saved;
      when the device became unavailable (a preempted TPU Node), with nothing saved.
    errors.UserError: if the loss or the weights become NaN or Inf; nothing
      is saved from that step on.
  """
  training = _set_up_training(strategy, model, loss_fn, dataset, settings, base_reference)
  training.chance_watch = ChanceWatch(chance_loss, settings) if chance_loss else None
  try:
    return _run_training(training)
  finally:
    training.writer.close()
    if not training.is_chief:
      tf.io.gfile.rmtree(training.write_dir)


@dataclasses.dataclass
class _Training:
  """What the training loop works with (`_set_up_training`)."""
  strategy: tf.distribute.Strategy
  settings: TrainSettings
  optimizer: keras.optimizers.Optimizer
  manager: tf.train.CheckpointManager
  train_loop: Callable
  iterator: object  # Of the distributed dataset.
  writer: object  # tf.summary writer of write_dir.
  progress: Progress
  variables: list  # The model's trainable variables.
  step: int  # The step the loop starts from.
  is_chief: bool  # Writes to output_dir (the others to write_dir, removed after).
  write_dir: str
  chance_watch: Optional["ChanceWatch"] = None


def _set_up_training(strategy, model, loss_fn, dataset, settings,
                     base_reference) -> _Training:
  """The optimizer, the checkpoints (restored from output_dir's latest), the
  compiled loop and the input stream from where the restored step left it."""
  optimizer = create_optimizer(strategy, model, settings)
  checkpointed = getattr(optimizer, "inner_optimizer", optimizer)
  # Only the chief writes to output_dir. The other workers of a multi-worker
  # strategy still save (a save may run collective ops that every worker must
  # join), into a local temporary directory removed at the end: TF's
  # multi-worker pattern. Every worker resumes from output_dir.
  is_chief = strategy.extended.should_checkpoint
  write_dir = settings.output_dir if is_chief else tempfile.mkdtemp(prefix="workertemp_")
  manager = run_checkpoints.manager(model, write_dir, checkpointed,
                                    settings.keep_checkpoint_max, base_reference)
  # The step is the checkpoint's (0 without one), not optimizer.iterations:
  # a step that float16 loss scaling skips leaves that count behind, but it
  # took a batch and counts towards num_train_steps like any other.
  step = run_checkpoints.restore(model, settings.output_dir, checkpointed)

  train_loop = make_train_loop(strategy, model, loss_fn, optimizer,
                               settings.train_batch_size, settings.jit_compile)

  iterator = training_iterator(strategy, dataset, step)
  writer = tf.summary.create_file_writer(write_dir)
  logging.info("***** Running training from step %d to %d *****", step,
               settings.num_train_steps)
  progress = Progress(
      step, settings.num_train_steps, settings.train_batch_size,
      settings.iterations_per_loop,
      one_call_per_loop=isinstance(strategy, tf.distribute.TPUStrategy),
      pace_by_time=not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy))
  return _Training(strategy, settings, optimizer, manager, train_loop, iterator, writer,
                   progress, model.trainable_variables, step, is_chief, write_dir)


def create_optimizer(strategy: tf.distribute.Strategy, model: keras.Model,
                     settings: TrainSettings) -> keras.optimizers.Optimizer:
  """The run's optimizer (optimization.create_optimizer), built under `strategy`
  for `model.trainable_variables`, loss-scaled under mixed_float16."""
  with strategy.scope():
    optimizer = optimization.create_optimizer(
        settings.learning_rate, settings.num_train_steps, settings.num_warmup_steps,
        settings.weight_decay_rate, settings.adapter_weight_decay_rate,
        # A multi-task model's per-task variables (multitask/model.py).
        [optimization.variable_name(v) for v in getattr(model, "task_row_variables", ())],
        optimizer=settings.optimizer)
    optimizer.build(model.trainable_variables)  # Slots exist before a restore fills them.
    if model.dtype_policy.name == "mixed_float16":
      # float16 gradients underflow without it. The checkpoint keeps the inner
      # optimizer (`checkpointed`): the same files for every precision; the
      # loss scale restarts on resume and re-adapts within a few steps.
      optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
  return optimizer


def training_iterator(strategy: tf.distribute.Strategy, dataset: tf.data.Dataset,
                      step: int):
  """The iterator of per-replica batches that training from `step` reads."""
  return iter(strategy.experimental_distribute_dataset(training_dataset(dataset, step)))


def training_dataset(dataset: tf.data.Dataset, step: int) -> tf.data.Dataset:
  """The batches training from `step` reads: `dataset`'s from that step on."""
  if step:
    # The stream is the same on every run (seeded shuffle), and each step took
    # one batch of it: going on after them gives what an uninterrupted run
    # would have read. Skipping reads and parses them (seconds per 10k steps).
    logging.info("Skipping the %d batches trained on before step %d", step, step)
    dataset = dataset.skip(step)
  # Under AUTO a file-based dataset is sharded by file: each worker batches its
  # own files, and a global batch holds other examples than on one device.
  # Under DATA every worker reads the same stream (ordered, or shuffled with
  # the same seed), splits each global batch into per-replica batches and
  # keeps its own: the global batch is the one-device batch.
  dataset = records.with_shard_policy(dataset, tf.data.experimental.AutoShardPolicy.DATA)
  # Without tf.data's autotuner: deleting an iterator that a tf.function has
  # read waits for the autotuner's thread to wake up (TF 2.20), which it does
  # less often as a run goes on, so training runs stalled at their end, up to
  # a minute (100-step runs here stalled 14-15 s in 7 of 12 with it, in none
  # of 12 without: benchmarks/iterator_teardown.py). The pipeline
  # (runtime/records.py) parses over 800 batches a second on two CPU cores
  # either way, far ahead of any train step.
  options = tf.data.Options()
  options.autotune.enabled = False
  return dataset.with_options(options)


def _run_training(t: _Training) -> Dict[str, float]:
  """Host calls of the compiled loop to settings.num_train_steps, with checkpoints,
  summaries and progress lines; stops on a non-finite loss, a Ctrl-C or a SIGTERM."""
  settings, step = t.settings, t.step
  saved_step = step if step else None

  def save(step: int) -> None:
    if not all(bool(tf.reduce_all(tf.math.is_finite(v))) for v in t.variables):
      raise _diverged("the weights hold NaN or Inf values (the loss was still finite)",
                      step, settings)
    t.manager.save(checkpoint_number=step)
    logging.info("Saving checkpoints for %d into %s", step, t.manager.latest_checkpoint)

  # Every worker of a multi-worker strategy must join each save; one saving
  # alone on its own SIGTERM would wait for the others forever.
  stop_request = stop_signals.StopSignals(
      enabled=not isinstance(t.strategy, tf.distribute.MultiWorkerMirroredStrategy))
  loss = float("nan")
  with stop_request:
    while step < settings.num_train_steps:
      to_checkpoint = (settings.save_checkpoints_steps
                       - step % settings.save_checkpoints_steps)
      n = min(t.progress.steps_for_next_call(step), settings.num_train_steps - step,
              to_checkpoint)
      call_start = time.monotonic()
      try:
        losses = t.train_loop(t.iterator, tf.constant(n)).numpy()
      except tf.errors.UnavailableError as e:
        stop_signals.log_lost_device(e, f"the steps after {step}", "to resume from " + (
            t.manager.latest_checkpoint or "the start (no checkpoint was saved yet)"))
        raise stop_signals.Stopped() from None
      bad = np.flatnonzero(~np.isfinite(losses))
      if bad.size:  # Before anything of this call is saved.
        raise _diverged(f"the loss is {losses[bad[0]]}", step + int(bad[0]) + 1, settings)
      if t.chance_watch is not None:
        t.chance_watch.record(step, losses)
      step += n
      loss = float(np.mean(losses))
      line = t.progress.record(step, n, loss, time.monotonic() - call_start)
      if line:
        logging.info(line)
      with t.writer.as_default(step=step):
        tf.summary.scalar("loss", loss)
        tf.summary.scalar("learning_rate", t.optimizer.learning_rate)
      if step % settings.save_checkpoints_steps == 0 or step == settings.num_train_steps:
        save(step)
        saved_step = step
      if stop_request.received:
        signum = stop_request.received
        if saved_step != step:
          save(step)
        logging.info("%s: interrupted at step %d; the same command resumes from its "
                     "checkpoint %s (exit status %d)", stop_signals.name(signum), step,
                     t.manager.latest_checkpoint, stop_signals.exit_status(signum))
        raise stop_signals.Stopped(signum)
  return {"loss": loss, "global_step": step}


class ChanceWatch:
  """Warns once when the loss stays at chance level after warm-up.

  A model that ignores its inputs and predicts the labels' prior has the loss
  ln(labels) (balanced labels). Training that sits there from the end of
  warm-up on has collapsed, which the original's Adam without bias correction
  does at adapter learning rates around 1e-3 (its first updates are about 3x
  Adam's: optimization.py). Checked over `window` steps after warm-up: the
  warm-up's length, at least 10.
  """

  TOLERANCE = 0.02  # Of chance_loss: a learning model leaves that band within its first epoch.

  def __init__(self, chance_loss: float, settings: TrainSettings):
    self.chance_loss = chance_loss
    self.settings = settings
    self.window = max(settings.num_warmup_steps, 10)
    self.after_warmup = []  # Per-step losses from the end of warm-up on.
    self.warned = False

  def record(self, first_step: int, losses: np.ndarray) -> None:
    """The losses of the steps after `first_step` (a host call's)."""
    warmup = self.settings.num_warmup_steps
    self.after_warmup += [float(l) for i, l in enumerate(losses, start=first_step + 1)
                          if i > warmup]
    if self.warned or len(self.after_warmup) < self.window:
      return
    recent = float(np.mean(self.after_warmup[-self.window:]))
    if abs(recent - self.chance_loss) <= self.TOLERANCE * self.chance_loss:
      self.warned = True
      last = first_step + len(losses)
      logging.warning(
          "WARNING: the training loss is at chance level: %.4f over steps %d-%d, after "
          "warm-up, against ln(labels) = %.4f: the model predicts the labels' prior, "
          "ignoring its inputs. Likely a learning rate too high for the optimizer (--optimizer="
          "%s%s): lower --learning_rate (now %g)%s, and start in a new --output_dir",
          recent, last - self.window + 1, last, self.chance_loss, self.settings.optimizer,
          ", Adam without bias correction, whose first updates are about 3x Adam's"
          if self.settings.optimizer == "bert" else "", self.settings.learning_rate,
          " or use --optimizer=adamw" if self.settings.optimizer == "bert" else "")


def _diverged(what: str, step: int, settings: TrainSettings) -> errors.UserError:
  """The error that stops a run whose loss or weights are no longer finite."""
  last = run_checkpoints.latest(settings.output_dir)
  if last:
    kept = (f"Nothing after step {run_checkpoints.step_of(last)} was saved: the last "
            f"checkpoint, {last}, is intact. ")
    where = (f"start in a new --output_dir (this one resumes from step "
             f"{run_checkpoints.step_of(last)})")
  else:
    kept, where = "No checkpoint was saved. ", "run the command again"
  return errors.UserError(
      f"training diverged: {what} at step {step}. {kept}A NaN or Inf loss usually "
      f"means a learning rate too high for this model and data: lower --learning_rate "
      f"(now {settings.learning_rate:g}) or warm up longer (--warmup_proportion), and "
      f"{where}.")


def make_train_loop(strategy: tf.distribute.Strategy, model: keras.Model,
                    loss_fn: LossFn, optimizer: keras.optimizers.Optimizer,
                    global_batch_size: int, jit_compile: bool = False):
  """The compiled training loop: `train_loop(iterator, num_steps) -> losses`.

  Each step computes gradients for `model.trainable_variables` only (frozen
  weights get none) and applies them; `num_steps` steps run per host call, as
  TPUEstimator's iterations_per_loop. The optimizer is built beforehand. The
  result holds each step's mean loss, float32 [num_steps]: the host checks
  them all for NaN and Inf at no cost to the steps.
  """
  compiled_step = make_train_step(model, loss_fn, optimizer, global_batch_size, jit_compile)

  @tf.function
  def train_loop(iterator, num_steps):
    losses = tf.TensorArray(tf.float32, size=num_steps)
    for i in tf.range(num_steps):
      features, labels = next(iterator)
      per_replica = strategy.run(compiled_step, args=(features, labels))
      losses = losses.write(
          i, strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None))
    return losses.stack()

  return train_loop


def make_train_step(model: keras.Model, loss_fn: LossFn,
                    optimizer: keras.optimizers.Optimizer, global_batch_size: int,
                    jit_compile: bool = False):
  """The step each replica runs in `make_train_loop`: `step(features, labels) -> loss`.

  With `jit_compile` it is one XLA program, as a TPU compiles it: nothing in
  it runs on the host (tests/test_tpu_compile.py).
  """
  variables = model.trainable_variables
  # A model's own term of the loss, e.g. AdapterFusion's ||I - V||^2 (fusion/model.py).
  regularization = getattr(model, "regularization_loss", None)

  def replica_step(features, labels):
    with tf.GradientTape() as tape:
      outputs = model(features, training=True)
      per_example = loss_fn(labels, outputs)
      if packing.EXAMPLE_LENGTHS in features:  # [rows, K]: its real examples' mean.
        loss = packing.mean_over_examples(per_example, features[packing.EXAMPLE_LENGTHS])
      else:
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
      if regularization is not None:  # Once per global batch: split between replicas.
        loss += tf.nn.scale_regularization_loss(regularization())
      scaled_loss = optimizer.scale_loss(loss)  # The loss itself without loss scaling.
    grads = tape.gradient(scaled_loss, variables)
    optimizer.apply_gradients(zip(grads, variables))
    return loss

  return tf.function(replica_step, jit_compile=jit_compile)
