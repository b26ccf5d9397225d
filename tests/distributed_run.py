"""One tiny adapter training for tests/test_distribution.py, in-process or as a script.

The test runs the same training under several strategies and compares the
results, so everything that decides them is fixed here: a tiny BERT with
adapters and classifier head all read from a checkpoint (no random init), no
dropout, 24 examples in two TFRecord files read in order, global batch 8.

As a script (a fresh interpreter, because logical devices, TF_CONFIG and
XLA_FLAGS must be in place before TensorFlow starts):
  distributed_run.py machine DATA_DIR WORK_DIR   on two logical CPUs: the default
      strategy ("single"), the same with jit_compile ("xla"), MirroredStrategy
      over both CPUs ("mirrored"), the latter with per-replica clipping
      ("per_replica_clip"), the first step's gradient norms ("grad_norms"),
      dropout masks under both strategies ("dropout_masks") and three optimizer
      steps on optimizer_problem's batch under each ("optimizer_steps")
  distributed_run.py worker DATA_DIR OUTPUT_DIR  one MultiWorkerMirroredStrategy
      worker of the cluster in TF_CONFIG ("worker")
DATA_DIR holds write_checkpoint's and write_examples' files. Each mode prints
one JSON line (the last line of stdout): {run name: result}. One process runs
several trainings because starting TensorFlow costs more than a tiny training.
"""

import glob
import json
import os
import sys

# As the commands do, before anything imports TensorFlow: without the packages Keras
# imports only for features not used here (adapter_bert/cli/launch.py), ~1.7 CPU-s
# less for each fresh interpreter. Imported by a test, TensorFlow is there already.
from adapter_bert.cli import launch  # pylint: disable=g-bad-import-order
launch.import_frameworks()

import keras  # pylint: disable=g-import-not-at-top,wrong-import-order
import numpy as np
import tensorflow as tf

from adapter_bert.checkpoints import checkpoint_io
from adapter_bert.runtime import distribution
from adapter_bert.model.layers.ops import Dropout
from adapter_bert.model import modeling
from adapter_bert.model import optimization
import optimizer_problem
import tiny_bert
from adapter_bert.runtime import trainable
from adapter_bert.runtime import loop
from adapter_bert.runtime import prediction
from adapter_bert.model.adapter_layers import AdapterConfig

NUM_EXAMPLES, SEQ_LENGTH, BATCH_SIZE, NUM_STEPS = 24, 16, 8, 6
ADAPTER_SIZE = 4
# Scales the loss so that the global gradient norm is far above the clip norm
# (1.0) on every step, for the whole batch and for each half of it: clipping
# then changes every update, and where it happens (before or after the sum over
# replicas) changes the result.
LOSS_SCALE = 100.0
SETTINGS = dict(train_batch_size=BATCH_SIZE, num_train_steps=NUM_STEPS,
                num_warmup_steps=0, learning_rate=2e-3, save_checkpoints_steps=3,
                # 2 steps per host call exercises the in-graph loop; host calls
                # end at steps 1 and 2 (the first two run one step each, to time
                # a step: runtime/progress.py), 3 (checkpoint), 5, 6.
                iterations_per_loop=2)
# Prediction's batches a host call: 3 batches run as calls of 2 and 1.
PREDICT_LOOP = 2


def write_checkpoint(directory):
  """A tiny Google-format BERT with adapters and head; returns the config path."""
  config = dict(tiny_bert.TINY_CONFIG, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0)
  rng = np.random.default_rng(1)
  head = {"output_weights": rng.normal(0, 0.2, (2, 32)).astype(np.float32),
          "output_bias": np.zeros(2, np.float32)}
  config_path, _, _, _ = tiny_bert.write_google_dir(
      directory, config=config, adapter_size=ADAPTER_SIZE, extra=head)
  return config_path


def write_examples(directory):
  """Examples 0-11 and 12-23 in two TFRecord files; returns the file names."""
  rng = np.random.default_rng(2)
  ids = rng.integers(5, 99, size=(NUM_EXAMPLES, SEQ_LENGTH))
  lengths = rng.integers(4, SEQ_LENGTH + 1, size=NUM_EXAMPLES)
  mask = (np.arange(SEQ_LENGTH)[None, :] < lengths[:, None]).astype(np.int64)
  segments = (np.arange(SEQ_LENGTH)[None, :] >= lengths[:, None] // 2) * mask
  labels = rng.integers(0, 2, size=NUM_EXAMPLES)
  files = []
  for part, rows in enumerate(np.split(np.arange(NUM_EXAMPLES), 2)):
    path = os.path.join(directory, f"train-{part}.tf_record")
    with tf.io.TFRecordWriter(path) as writer:
      for i in rows:
        feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=list(v)))
                   for k, v in (("input_ids", ids[i] * mask[i]), ("input_mask", mask[i]),
                                ("segment_ids", segments[i]), ("label_ids", [labels[i]]))}
        writer.write(tf.train.Example(
            features=tf.train.Features(feature=feature)).SerializeToString())
    files.append(path)
  return files


def dataset(files, repeat):
  """(features, labels) batches of BATCH_SIZE, in file order, as run_classifier reads."""
  spec = {k: tf.io.FixedLenFeature([SEQ_LENGTH], tf.int64)
          for k in ("input_ids", "input_mask", "segment_ids")}
  spec["label_ids"] = tf.io.FixedLenFeature([], tf.int64)

  def parse(record):
    example = {k: tf.cast(v, tf.int32) for k, v in
               tf.io.parse_single_example(record, spec).items()}
    labels = example.pop("label_ids")
    return example, labels

  d = tf.data.TFRecordDataset(files).map(parse)
  if repeat:
    d = d.repeat()
  return d.batch(BATCH_SIZE, drop_remainder=True)


def loss_fn(labels, logits):
  return LOSS_SCALE * tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)


def build_model(strategy, data_dir):
  """The adapter classifier under `strategy`, every weight from the checkpoint."""
  config = modeling.BertConfig.from_json_file(os.path.join(data_dir, "bert_config.json"))
  with strategy.scope():
    model = modeling.BertClassifier(config, 2, AdapterConfig(size=ADAPTER_SIZE))
    # The head's dropout is the original's fixed 0.1, not in bert_config.json.
    model.head.dropout.rate = 0.0
    model.ensure_built()
    checkpoint_io.load_checkpoint(model, os.path.join(data_dir, "bert_model.ckpt"))
    trainable.set_trainable(model, trainable.TrainMode.parse("adapters"))
  return model


def read_scalars(directory, tag):
  """{step: value} of a TF2 scalar summary in directory's event files."""
  values = {}
  for path in glob.glob(os.path.join(directory, "events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(path):
      for v in event.summary.value:
        if v.tag == tag:
          values[event.step] = float(tf.make_ndarray(v.tensor))
  return values


class _CountingModel:
  """`model` that records the input_ids rows this process computes (`computed`):
  where each example was predicted. Not for jit_compile (a host callback)."""

  def __init__(self, model):
    self.model, self.computed = model, []

  def _record(self, input_ids):
    self.computed.extend(input_ids.tolist())
    return np.int32(len(self.computed))

  def __call__(self, features, training=False):
    recorded = tf.numpy_function(self._record, [features["input_ids"]], tf.int32,
                                 stateful=True)
    with tf.control_dependencies([recorded]):
      return tf.identity(self.model(features, training=training))


def train_and_predict(strategy, data_dir, files, output_dir, jit_compile=False,
                      predict=True):
  """Trains to NUM_STEPS and predicts the training set (PREDICT_LOOP batches a
  host call); JSON-able results, with the rows this process computed
  ("computed", without jit_compile)."""
  model = build_model(strategy, data_dir)
  settings = loop.TrainSettings(output_dir=output_dir, jit_compile=jit_compile,
                                    **SETTINGS)
  result = loop.train(strategy, model, loss_fn, dataset(files, repeat=True), settings)
  out = {"global_step": result["global_step"],
         "losses": read_scalars(output_dir, "loss"),
         "weights": {name: v.numpy().tolist()
                     for name, v in model.tf1_variable_map().items() if v.trainable}}
  if predict:
    counting = None if jit_compile else _CountingModel(model)
    predictions = prediction.predict(strategy, counting or model, dataset(files, repeat=False),
                                     jit_compile=jit_compile, iterations_per_loop=PREDICT_LOOP)
    out["predictions"] = {k: v.tolist() for k, v in predictions.items()}
    if counting:
      out["computed"] = counting.computed
  return out


def dropout_masks(strategy, seed=3):
  """Which elements a Dropout(0.5) keeps in two steps, replica by replica:
  [step][replica] -> 0/1 rows."""
  with strategy.scope():
    layer = Dropout(0.5, seed=seed)

  @tf.function
  def two_steps():
    return [strategy.experimental_local_results(
        strategy.run(lambda: layer(tf.ones([4, 16]), training=True))) for _ in range(2)]

  return [[(m.numpy() != 0).astype(int).tolist() for m in step] for step in two_steps()]


def first_batch_grad_norms(strategy, data_dir, files):
  """Global norms of the first step's gradient: whole batch, and each half's share.

  The halves are what each of two replicas holds before the sum (the loss is
  averaged over the global batch).
  """
  model = build_model(strategy, data_dir)
  features, labels = next(iter(dataset(files, repeat=False)))
  norms = {}
  half = BATCH_SIZE // 2
  for name, part in (("global", slice(0, BATCH_SIZE)), ("replica_0", slice(0, half)),
                     ("replica_1", slice(half, BATCH_SIZE))):
    with tf.GradientTape() as tape:
      logits = model({k: v[part] for k, v in features.items()}, training=True)
      loss = tf.nn.compute_average_loss(loss_fn(labels[part], logits),
                                        global_batch_size=BATCH_SIZE)
    grads = tape.gradient(loss, model.trainable_variables)
    norms[name] = float(tf.linalg.global_norm(grads))
  return norms


_AdamWeightDecay = optimization.AdamWeightDecay


class _PerReplicaClip(_AdamWeightDecay):
  """Keras' own clip placement: each replica's partial gradient, before the sum."""

  def _clip_gradients(self, grads):
    return tf.clip_by_global_norm(grads, self.global_clipnorm)[0]

  def _all_reduce_sum_gradients(self, grads_and_vars):
    # The base optimizer's: sum only.
    return super(_AdamWeightDecay, self)._all_reduce_sum_gradients(grads_and_vars)


def optimizer_steps(strategy, opt_cls):
  """Three steps of `opt_cls` on optimizer_problem's batch, split between the
  replicas: the variables, then the Adam slots m and v (as lists)."""
  x, y = optimizer_problem.batch()
  with strategy.scope():
    variables = optimizer_problem.make_variables()
    opt = opt_cls(learning_rate=optimization.WarmupLinearDecay(0.1, 10, 1))
    opt.build(variables)
  n = strategy.num_replicas_in_sync

  def shard(a):
    return strategy.experimental_distribute_values_from_function(
        lambda ctx: a[ctx.replica_id_in_sync_group::n])
  xs, ys = shard(x), shard(y)

  @tf.function
  def step():
    strategy.run(optimizer_problem.train_step_fn, args=(opt, variables, xs, ys, 8.0))
  for _ in range(3):
    step()
  out = [v.numpy() for v in variables]
  out += [s.numpy() for s in opt._adam_m + opt._adam_v]  # pylint: disable=protected-access
  return [a.tolist() for a in out]


def _main(mode, data_dir, work_dir):
  keras.utils.set_random_seed(0)
  files = sorted(glob.glob(os.path.join(data_dir, "train-*.tf_record")))
  if mode == "machine":
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    single = distribution.create_strategy()
    mirrored = distribution.create_strategy(devices=["/cpu:0", "/cpu:1"])
    assert mirrored.num_replicas_in_sync == 2, mirrored
    results = {}
    for name, strategy, jit in (("single", single, False), ("xla", single, True),
                                ("mirrored", mirrored, False)):
      results[name] = train_and_predict(strategy, data_dir, files,
                                        os.path.join(work_dir, name), jit_compile=jit)
    results["grad_norms"] = first_batch_grad_norms(single, data_dir, files)
    # Twice under MirroredStrategy: a rerun draws the same masks.
    results["dropout_masks"] = {name: dropout_masks(strategy) for name, strategy in (
        ("mirrored", mirrored), ("mirrored_rerun", mirrored), ("single", single))}
    results["optimizer_steps"] = {
        "single": optimizer_steps(tf.distribute.get_strategy(), _AdamWeightDecay),
        "mirrored": optimizer_steps(mirrored, _AdamWeightDecay),
        "per_replica_clip": optimizer_steps(mirrored, _PerReplicaClip)}
    optimization.AdamWeightDecay = _PerReplicaClip  # What create_optimizer builds.
    results["per_replica_clip"] = train_and_predict(
        mirrored, data_dir, files, os.path.join(work_dir, "per_replica_clip"),
        predict=False)
  elif mode == "worker":
    strategy = distribution.create_strategy()
    assert isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy), strategy
    results = {"worker": train_and_predict(strategy, data_dir, files, work_dir)}
  else:
    raise ValueError(f"unknown mode {mode!r}")
  print(json.dumps(results))


if __name__ == "__main__":
  _main(*sys.argv[1:])
