"""Training, evaluation and prediction loops under any tf.distribute strategy.

What the original got from TPUEstimator: compiled steps, several steps per
host call (`iterations_per_loop` on TPU; paced for progress lines elsewhere,
runtime/progress.py), checkpoints every `save_checkpoints_steps` (last 5 kept,
named `model.ckpt-STEP`), resumption from the latest checkpoint in output_dir,
TensorBoard summaries and progress lines.
"""

import dataclasses
import tempfile
import time
from typing import Callable, Dict, Optional

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from checkpoints import run_checkpoints
import optimization
from runtime.progress import Progress

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

  @classmethod
  def for_epochs(cls, num_examples: int, num_train_epochs: float,
                 warmup_proportion: float, **settings) -> "TrainSettings":
    """The original's step counts (rounded down) with the rest of `settings`.

    Raises:
      ValueError: if that gives no training step.
    """
    batch_size = settings["train_batch_size"]
    num_train_steps = int(num_examples / batch_size * num_train_epochs)
    if num_train_steps < 1:
      raise ValueError(f"num_train_steps = int({num_examples} examples / --train_batch_size="
                       f"{batch_size} * --num_train_epochs={num_train_epochs}) = 0: "
                       f"lower --train_batch_size or raise --num_train_epochs")
    return cls(num_train_steps=num_train_steps,
               num_warmup_steps=int(num_train_steps * warmup_proportion), **settings)


def train(strategy: tf.distribute.Strategy, model: keras.Model, loss_fn: LossFn,
          dataset: tf.data.Dataset, settings: TrainSettings,
          base_reference: Optional[dict] = None) -> Dict[str, float]:
  """Trains `model.trainable_variables` to `settings.num_train_steps`.

  The model is created under `strategy.scope()`, with its initial checkpoint
  loaded and `trainable.set_trainable` applied. If output_dir holds a
  checkpoint of this run, training resumes from it (weights, optimizer slots
  and step), so re-running an interrupted command finishes the same run.

  Args:
    dataset: repeated, shuffled, batched to `train_batch_size` with
      `drop_remainder=True` (static shapes), yielding (features, labels).
    base_reference: `run_checkpoints.base_reference(...)` of the model: the
      checkpoints then hold only the trained variables (None: the whole model).
  Returns:
    {"loss": mean loss of the last host call, "global_step": final step}.
  """
  with strategy.scope():
    optimizer = optimization.create_optimizer(
        settings.learning_rate, settings.num_train_steps, settings.num_warmup_steps,
        settings.weight_decay_rate, settings.adapter_weight_decay_rate)
    optimizer.build(model.trainable_variables)  # Slots exist before a restore fills them.
  # Only the chief writes to output_dir. The other workers of a multi-worker
  # strategy still save (a save may run collective ops that every worker must
  # join), into a local temporary directory removed at the end: TF's
  # multi-worker pattern. Every worker resumes from output_dir.
  is_chief = strategy.extended.should_checkpoint
  write_dir = settings.output_dir if is_chief else tempfile.mkdtemp(prefix="workertemp_")
  manager = run_checkpoints.manager(model, write_dir, optimizer,
                                    settings.keep_checkpoint_max, base_reference)
  run_checkpoints.restore(model, settings.output_dir, optimizer)
  step = int(optimizer.iterations.numpy())

  train_loop = make_train_loop(strategy, model, loss_fn, optimizer,
                               settings.train_batch_size, settings.jit_compile)

  # Under AUTO a file-based dataset is sharded by file: each worker batches its
  # own files, and a global batch holds other examples than on one device.
  # Under DATA every worker reads the same stream (ordered, or shuffled with
  # the same seed), splits each global batch into per-replica batches and
  # keeps its own: the global batch is the one-device batch.
  dataset = _with_shard_policy(dataset, tf.data.experimental.AutoShardPolicy.DATA)
  iterator = iter(strategy.experimental_distribute_dataset(dataset))
  writer = tf.summary.create_file_writer(write_dir)
  logging.info("***** Running training from step %d to %d *****", step,
               settings.num_train_steps)
  progress = Progress(
      step, settings.num_train_steps, settings.train_batch_size,
      settings.iterations_per_loop,
      one_call_per_loop=isinstance(strategy, tf.distribute.TPUStrategy),
      pace_by_time=not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy))
  try:
    loss = float("nan")
    while step < settings.num_train_steps:
      to_checkpoint = (settings.save_checkpoints_steps
                       - step % settings.save_checkpoints_steps)
      n = min(progress.steps_for_next_call(step), settings.num_train_steps - step,
              to_checkpoint)
      call_start = time.monotonic()
      loss = float(train_loop(iterator, tf.constant(n)))
      step += n
      line = progress.record(step, n, loss, time.monotonic() - call_start)
      if line:
        logging.info(line)
      with writer.as_default(step=step):
        tf.summary.scalar("loss", loss)
        tf.summary.scalar("learning_rate", optimizer.learning_rate)
      if step % settings.save_checkpoints_steps == 0 or step == settings.num_train_steps:
        manager.save(checkpoint_number=step)
        logging.info("Saving checkpoints for %d into %s", step, manager.latest_checkpoint)
  finally:
    writer.close()
    if not is_chief:
      tf.io.gfile.rmtree(write_dir)
  return {"loss": loss, "global_step": step}


def make_train_loop(strategy: tf.distribute.Strategy, model: keras.Model,
                    loss_fn: LossFn, optimizer: keras.optimizers.Optimizer,
                    global_batch_size: int, jit_compile: bool = False):
  """The compiled training loop: `train_loop(iterator, num_steps) -> mean loss`.

  Each step computes gradients for `model.trainable_variables` only (frozen
  weights get none) and applies them; `num_steps` steps run per host call, as
  TPUEstimator's iterations_per_loop. The optimizer is built beforehand.
  """
  variables = model.trainable_variables

  def replica_step(features, labels):
    with tf.GradientTape() as tape:
      outputs = model(features, training=True)
      per_example = loss_fn(labels, outputs)
      loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
    grads = tape.gradient(loss, variables)
    optimizer.apply_gradients(zip(grads, variables))
    return loss

  compiled_step = tf.function(replica_step, jit_compile=jit_compile)

  @tf.function
  def train_loop(iterator, num_steps):
    total = tf.constant(0.0)
    for _ in tf.range(num_steps):
      features, labels = next(iterator)
      per_replica = strategy.run(compiled_step, args=(features, labels))
      total += strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
    return total / tf.cast(num_steps, tf.float32)

  return train_loop


def _with_shard_policy(dataset: tf.data.Dataset, policy) -> tf.data.Dataset:
  """`dataset` with auto-shard `policy`, unless the caller chose one (not AUTO).

  The policy decides what each worker of a multi-worker strategy reads; it
  does nothing on one machine.
  """
  options = dataset.options().experimental_distribute
  if options.auto_shard_policy != tf.data.experimental.AutoShardPolicy.AUTO:
    return dataset
  options = tf.data.Options()
  options.experimental_distribute.auto_shard_policy = policy
  return dataset.with_options(options)


def predict(strategy: tf.distribute.Strategy, model: keras.Model,
            dataset: tf.data.Dataset, jit_compile: bool = False) -> Dict[str, np.ndarray]:
  """Runs the model over `dataset` (finite, yielding (features, labels)).

  Returns:
    NumPy arrays concatenated over batches, in dataset order: the model's
    outputs ("logits" for a tensor output, else its dict keys), "labels" and
    every feature (e.g. "is_real_example", "unique_ids").
  """
  def replica_step(features, labels):
    outputs = model(features, training=False)
    if not isinstance(outputs, dict):
      outputs = {"logits": outputs}
    return dict(outputs, labels=labels, **features)

  step = tf.function(replica_step, jit_compile=jit_compile)

  @tf.function
  def distributed_step(features, labels):
    return strategy.run(step, args=(features, labels))

  # Results are not gathered across workers, so every worker of a multi-worker
  # strategy predicts every example, in order (OFF); under AUTO each would get
  # only its own files' examples, less what does not fill a batch.
  dataset = _with_shard_policy(dataset, tf.data.experimental.AutoShardPolicy.OFF)
  batches = []
  for features, labels in strategy.experimental_distribute_dataset(dataset):
    per_replica = distributed_step(features, labels)
    # Replica results in replica order restore the batch order.
    batches.append({k: np.concatenate([t.numpy() for t in
                                       strategy.experimental_local_results(v)])
                    for k, v in per_replica.items()})
  if not batches:
    return {}
  return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
