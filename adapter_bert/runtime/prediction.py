"""Evaluation and prediction under any tf.distribute strategy: each example
computed once, on one replica, in compiled host calls, results in record order.

Training's counterpart (runtime/loop.py): the same compiled `tf.range` loop of
up to `iterations_per_loop` steps per host call (sized by time off a TPU, as
training's: runtime/progress.py), the same stop signals (nothing of a
prediction is written when one arrives) and the same one line when the device
goes away.
"""

import time
from typing import Dict

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from adapter_bert.runtime import packing
from adapter_bert.runtime import progress
from adapter_bert.runtime import records
from adapter_bert.runtime import stop_signals


def make_predict_step(model: keras.Model, jit_compile: bool = False):
  """The step each replica runs in `predict` (evaluation too): `step(features,
  labels)` -> the model's outputs ("logits" for a tensor output), "labels" and
  the features, passed through. XLA-compiled with `jit_compile` (make_train_step).
  """
  def replica_step(features, labels):
    outputs = model(features, training=False)
    if not isinstance(outputs, dict):
      outputs = {"logits": outputs}
    return dict(outputs, labels=labels, **features)

  return tf.function(replica_step, jit_compile=jit_compile)


def predict(strategy: tf.distribute.Strategy, model: keras.Model,
            dataset: tf.data.Dataset, jit_compile: bool = False,
            iterations_per_loop: int = 1) -> Dict[str, np.ndarray]:
  """Runs the model over `dataset` (finite, yielding (features, labels)).

  Each example is computed once, on one replica, also across several hosts (a
  pod, or a multi-worker strategy): every host reads the stream and keeps its
  share of each batch (DATA sharding, as training: batches as on one device),
  and every host gets all results (gathered in the step). The host counts the
  batches first, then runs them in host calls of up to `iterations_per_loop`
  batches, each a `tf.range` loop as training's (`predict_function`): traced
  once per run for the batches' shapes, whatever the number of calls. Off a
  TPU, calls are sized by time as training's (progress.CallSizes): one batch,
  one more to time it, then about progress.PREDICT_CALL_SECONDS of batches (on
  several machines, which must agree, up to progress.LOG_EVERY_STEPS), so that
  a stop signal, seen between calls, acts within seconds.

  Returns:
    NumPy arrays concatenated over batches: the model's outputs ("logits" for
    a tensor output, else its dict keys), "labels" and every feature (e.g.
    "is_real_example", "unique_ids"). In dataset order, or where the dataset
    carries `records.INPUT_INDEX` (batches grouped by length), in that index's
    order: the order of the records. Batches padded to their own length give
    sequence outputs of different widths: each is zero-padded to the widest.
    Packed batches (runtime/packing.py) give one entry per example, their
    per-example outputs unpacked (packing.unpack), in record order.
  Raises:
    stop_signals.Stopped: on a Ctrl-C or SIGTERM, after the host call in progress
      (about PREDICT_CALL_SECONDS off a TPU, `iterations_per_loop` batches on one), or
      when the device became unavailable (a preempted TPU): the caller has
      written nothing yet, and a re-run does the whole prediction again.
  """
  function = predict_function(strategy, model, jit_compile)
  dataset = records.with_shard_policy(_with_positions(dataset),
                                      tf.data.experimental.AutoShardPolicy.DATA)
  # Without tf.data's autotuner, as training_dataset says: the compiled loop
  # reads the iterator, whose deletion would wait for the autotuner's thread.
  options = tf.data.Options()
  options.autotune.enabled = False
  dataset = dataset.with_options(options)
  sizes = progress.CallSizes(
      iterations_per_loop, one_call_per_loop=isinstance(strategy, tf.distribute.TPUStrategy),
      pace_by_time=not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy),
      call_seconds=progress.PREDICT_CALL_SECONDS)
  batches = []
  with stop_signals.StopSignals() as stop_request:  # Counting reads the inputs too.
    num_batches = count_batches(dataset)
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    while len(batches) < num_batches and not stop_request.received:
      left = num_batches - len(batches)
      n = min(sizes.steps_for_next_call(at_most=left), left)
      call_start = time.monotonic()
      try:
        outputs = function(iterator, tf.constant(n))
      except tf.errors.UnavailableError as e:
        stop_signals.log_lost_device(
            e, f"batch {len(batches) + 1} of {num_batches} of an evaluation or prediction",
            "to redo it: nothing of it was written")
        raise stop_signals.Stopped() from None
      batches.extend(_split_batches(n, outputs))  # Its results are read: the call is over.
      sizes.record(n, time.monotonic() - call_start)
  if stop_request.received:
    signum = stop_request.received
    logging.info("%s: stopped predicting after %d batches; nothing of it is "
                 "written: run the same command again to redo it (exit status %d)",
                 stop_signals.name(signum), len(batches), stop_signals.exit_status(signum))
    raise stop_signals.Stopped(signum)
  return _in_record_order(batches) if batches else {}


def _in_record_order(batches) -> Dict[str, np.ndarray]:
  """The batches' outputs concatenated: the gathered rows in dataset order (the
  replicas' order across hosts is the strategy's), packed rows unpacked, then in
  record order where batches were grouped by length."""
  outputs = {k: _concatenate([b[k] for b in batches]) for k in batches[0]}
  order = np.argsort(outputs.pop(_POSITION), kind="stable")
  outputs = {k: v[order] for k, v in outputs.items()}
  if packing.EXAMPLE_LENGTHS in outputs:
    outputs = packing.unpack(outputs)
  if records.INPUT_INDEX in outputs:
    order = np.argsort(outputs[records.INPUT_INDEX], kind="stable")
    outputs = {k: v[order] for k, v in outputs.items()}
  return outputs


def count_batches(dataset: tf.data.Dataset) -> int:
  """The number of batches of the finite `dataset`, counted on the host.

  Record files have no cardinality that tf.data knows, so it reads them once,
  parsing included (10,000 examples of 128 tokens, 313 batches: 0.9-1.0 s on
  this project's 2-core machine under load); prediction then runs exactly that
  many steps, with no end-of-input test on the device.
  """
  cardinality = int(dataset.cardinality())
  if cardinality >= 0:
    return cardinality
  return int(dataset.reduce(np.int64(0), lambda count, _: count + 1))


# Each example's place in the dataset, added by `predict` and removed from its
# results: gathered rows go back in order whatever the replicas' order.
_POSITION = "_predict_position"


def predict_function(strategy: tf.distribute.Strategy, model: keras.Model,
                     jit_compile: bool = False):
  """The compiled prediction loop of `model` under `strategy`, made once:
  `function(iterator, num_steps) -> {key: results}`.

  It runs exactly `num_steps` batches of the distributed iterator in a
  `tf.range` loop (the shape of `make_train_loop`, the one public TPU code
  uses: no replicated call under a conditional) and returns each output,
  gathered from every replica of every host. An output whose per-batch shape
  is static (always on a TPU, whose batches are filled and padded to fixed
  lengths) comes back stacked, [num_steps, ...]; one whose shape varies (batches
  padded to their own length) as (values flattened and concatenated, each
  batch's shape [num_steps, rank]). One function per model, strategy and
  `jit_compile`, so a run's evaluation and prediction calls share its trace.
  """
  # Kept by the model (outside Keras' attribute tracking): they go with it.
  functions = vars(model).setdefault("_compiled_predict_functions", {})
  key = (id(strategy), bool(jit_compile))
  if key not in functions:
    functions[key] = _make_predict_function(strategy, model, jit_compile)
  return functions[key]


def forget_predict_functions(model: keras.Model) -> None:
  """Drops `model`'s compiled prediction loops (`predict_function`), for a
  caller that changes what a trace of the model computes (an ablation's
  switched-off adapters): the next prediction traces afresh."""
  vars(model).pop("_compiled_predict_functions", None)


def _make_predict_function(strategy, model, jit_compile):
  step = make_predict_step(model, jit_compile)

  def replica_step(features, labels):
    features = dict(features)
    position = features.pop(_POSITION)
    return dict(step(features, labels), **{_POSITION: position})

  def gathered_step(features, labels):
    per_replica = strategy.run(replica_step, args=(features, labels))
    # In replica order, every host's replicas: each host gets every result.
    return {k: strategy.gather(v, axis=0) for k, v in per_replica.items()}

  traced_step = tf.function(gathered_step)

  def output_spec(element_spec):
    # The outputs' structure, from a trace of the step whose trace of `step`
    # (the model) the loop reuses. Outside the loop's graph: called as a
    # function within it, MirroredStrategy's per-replica inputs go unfed.
    with tf.init_scope():
      return traced_step.get_concrete_function(*element_spec).structured_outputs

  @tf.function
  def predict_loop(iterator, num_steps):
    spec = output_spec(iterator.element_spec)
    results = {k: _BatchResults(spec[k], num_steps) for k in sorted(spec)}
    arrays = {k: r.arrays for k, r in results.items()}
    for i in tf.range(num_steps):
      outputs = gathered_step(*next(iterator))
      arrays = {k: results[k].write(arrays[k], i, outputs[k]) for k in results}
    return {k: results[k].stack(arrays[k]) for k in results}

  return predict_loop


class _BatchResults:
  """How `predict_function` keeps one output over its steps: stacked where each
  batch's shape is static, else flattened with each batch's shape."""

  def __init__(self, spec: tf.TensorSpec, num_steps):
    self.static = spec.shape.is_fully_defined()
    if self.static:
      self.arrays = (tf.TensorArray(spec.dtype, size=num_steps, element_shape=spec.shape),)
    else:
      self.arrays = (tf.TensorArray(spec.dtype, size=num_steps, infer_shape=False,
                                    element_shape=[None]),
                     tf.TensorArray(tf.int32, size=num_steps,
                                    element_shape=[spec.shape.rank]))

  def write(self, arrays, i, value):
    if self.static:
      return (arrays[0].write(i, value),)
    return (arrays[0].write(i, tf.reshape(value, [-1])),
            arrays[1].write(i, tf.shape(value, out_type=tf.int32)))

  def stack(self, arrays):
    if self.static:
      return arrays[0].stack()
    return arrays[0].concat(), arrays[1].stack()


def _split_batches(steps: int, outputs) -> list:
  """`predict_function`'s results as one {key: array} per batch."""
  batches = [{} for _ in range(steps)]
  for key, value in outputs.items():
    if isinstance(value, tuple):  # Flattened values, each batch's shape.
      values, batch_shapes = value[0].numpy(), value[1].numpy()
      ends = np.cumsum([int(np.prod(shape)) for shape in batch_shapes])
      parts = [part.reshape(shape) for part, shape in
               zip(np.split(values, ends[:-1]), batch_shapes)]
    else:  # Stacked: [steps, ...].
      parts = list(value.numpy())
    for batch, part in zip(batches, parts):
      batch[key] = part
  return batches


def _with_positions(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """`dataset` whose features also hold each example's place in it (int32, a
  TPU's type; the batch dimension as static as the dataset's)."""
  def add(start, batch):
    features, labels = batch
    size = tf.shape(tf.nest.flatten(features)[0], out_type=tf.int32)[0]
    position = start + tf.range(size)
    position = tf.ensure_shape(position, tf.nest.flatten(features)[0].shape[:1])
    return start + size, (dict(features, **{_POSITION: position}), labels)
  return dataset.scan(tf.constant(0), add)


def _concatenate(arrays) -> np.ndarray:
  """Batches' arrays as one, each zero-padded to the widest along every axis but the first."""
  widest = np.max([a.shape for a in arrays], axis=0)
  return np.concatenate([
      np.pad(a, [(0, 0)] + [(0, w - n) for w, n in zip(widest[1:], a.shape[1:])])
      for a in arrays])
