"""Training speed and optimizer memory: adapters vs full fine-tuning, with and without XLA.

Times the same compiled loop that `training.train` runs (`make_train_loop`) on
synthetic inputs, and the input pipeline of run_classifier.py
(`classifier_features.make_dataset`) on a TFRecord of the same shape, so one
can see whether the pipeline keeps up with the model. Prints one line a setting.

  .venv/bin/python benchmarks/benchmark_training.py \
      --bert_config_file=models/minilm/bert_config.json --seq_length=64
"""

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf
from absl import app, flags

import classifier_features
import modeling
import optimization
import trainable
import training
from adapter_layers import AdapterConfig

FLAGS = flags.FLAGS
flags.DEFINE_string("bert_config_file", None, "bert_config.json (default: BERT-base).")
flags.DEFINE_integer("seq_length", 128, "Sequence length.")
flags.DEFINE_integer("batch_size", 32, "Global batch size.")
flags.DEFINE_integer("steps", 10, "Timed steps per setting (after a compiling warm-up).")
flags.DEFINE_integer("adapter_size", 64, "Adapter size of the adapters setting.")
flags.DEFINE_list("modes", ["adapters", "full"], "Train modes to time.")
flags.DEFINE_list("xla", ["false", "true"], "jit_compile settings to time.")

BERT_BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                 num_attention_heads=12, intermediate_size=3072, type_vocab_size=2)


def synthetic_batches(config, seq_length, batch_size, seed=0):
  rng = np.random.default_rng(seed)
  features = {
      "input_ids": rng.integers(0, config.vocab_size, (batch_size, seq_length)),
      "input_mask": np.ones((batch_size, seq_length)),
      "segment_ids": np.zeros((batch_size, seq_length)),
  }
  features = {k: tf.constant(v, tf.int32) for k, v in features.items()}
  labels = tf.constant(rng.integers(0, 2, batch_size), tf.int32)
  return tf.data.Dataset.from_tensors((features, labels)).repeat()


def time_training(config, mode, jit_compile):
  adapter_size = FLAGS.adapter_size if mode == "adapters" else 0
  model = modeling.BertClassifier(config, 2, AdapterConfig(size=adapter_size))
  model.ensure_built()
  trainable.set_trainable(model, trainable.TrainMode.parse(mode))
  optimizer = optimization.create_optimizer(1e-4, 10_000, 100)
  optimizer.build(model.trainable_variables)
  loss_fn = lambda labels, logits: tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels, logits)
  strategy = tf.distribute.get_strategy()
  loop = training.make_train_loop(strategy, model, loss_fn, optimizer,
                                  FLAGS.batch_size, jit_compile)
  iterator = iter(synthetic_batches(config, FLAGS.seq_length, FLAGS.batch_size))
  loop(iterator, tf.constant(2)).numpy()  # Compiles.
  start = time.perf_counter()
  loop(iterator, tf.constant(FLAGS.steps)).numpy()
  seconds = (time.perf_counter() - start) / FLAGS.steps
  counts = trainable.parameter_counts(model)
  state = sum(int(np.prod(v.shape)) for v in optimizer.variables) - 1  # Less the step.
  print(f"train  mode={mode:<8} xla={str(jit_compile):<5} "
        f"step={seconds * 1000:8.1f} ms  examples/s={FLAGS.batch_size / seconds:8.1f}  "
        f"trainable={counts['trainable']:>11,} of {counts['total']:,}  "
        f"optimizer state={state:>11,} floats", flush=True)
  return FLAGS.batch_size / seconds


def time_input_pipeline(num_examples=4096):
  """Examples per second that make_dataset reads, parses and batches."""
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "train.tf_record")
    rng = np.random.default_rng(0)
    with tf.io.TFRecordWriter(path) as writer:
      for _ in range(num_examples):
        ints = lambda values: tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        ids = rng.integers(0, 30000, FLAGS.seq_length).tolist()
        example = tf.train.Example(features=tf.train.Features(feature={
            "input_ids": ints(ids), "input_mask": ints([1] * FLAGS.seq_length),
            "segment_ids": ints([0] * FLAGS.seq_length), "label_ids": ints([1]),
            "is_real_example": ints([1])}))
        writer.write(example.SerializeToString())
    dataset = classifier_features.make_dataset(path, FLAGS.seq_length, FLAGS.batch_size,
                                               is_training=True, drop_remainder=True,
                                               seed=0)
    batches = num_examples // FLAGS.batch_size
    iterator = iter(dataset)
    next(iterator)
    start = time.perf_counter()
    for _ in range(batches):
      next(iterator)
    rate = batches * FLAGS.batch_size / (time.perf_counter() - start)
  print(f"input  pipeline examples/s={rate:10.1f}", flush=True)
  return rate


def main(_):
  if FLAGS.bert_config_file:
    config = modeling.BertConfig.from_json_file(FLAGS.bert_config_file)
  else:
    config = modeling.BertConfig(**BERT_BASE)
  print(f"config: hidden {config.hidden_size}, layers {config.num_hidden_layers}, "
        f"seq_length {FLAGS.seq_length}, batch {FLAGS.batch_size}, "
        f"threads {os.cpu_count()} CPUs, devices "
        f"{[d.name for d in tf.config.list_logical_devices()]}", flush=True)
  fastest = max(time_training(config, mode, xla == "true")
                for mode in FLAGS.modes for xla in FLAGS.xla)
  pipeline = time_input_pipeline()
  print(f"input pipeline / fastest training: {pipeline / fastest:.1f}x "
        f"({'keeps up' if pipeline > fastest else 'is the bottleneck'})")


if __name__ == "__main__":
  app.run(main)
