r"""Training steps with --pack_sequences against per-batch padding, interleaved in one process.

  .venv/bin/python benchmarks/packing_steps.py --bert_dir=models/minilm
  .venv/bin/python benchmarks/packing_steps.py --bert_dir=models/minilm \
      --task=data/wordnet/wordnet_lexname:sentence --rounds=10

A task's training set goes through run_classifier.py's feature conversion and
input pipeline both ways (batches of --batch_size examples padded to their
longest, the default; and packed rows, as many a batch as hold --batch_size
examples on average), and run_classifier.py's compiled training loop
(runtime/loop.make_train_loop: one trace for every batch length) trains an
adapter model of the base's shape on each, alternating rounds of
--steps_per_round steps. The weights are random (the speed is the shape's);
examples/s counts the real examples each step held.
"""

import json
import os
import sys
import tempfile
import time

import keras
import numpy as np
import tensorflow as tf
from absl import app, flags

from adapter_bert.cli import flag_checks
from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.classification import features as classifier_features
from adapter_bert.classification import processors
from adapter_bert.classification import task as classifier_task
from adapter_bert.runtime import loop
from adapter_bert.runtime import machine
from adapter_bert.runtime import records
import run_conditions  # Beside this script: threads, oneDNN ISA, ceiling, steal and load.
from adapter_bert.model import modeling
from adapter_bert import tokenization

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FLAGS = flags.FLAGS
flags.DEFINE_string("bert_dir", "models/minilm", "Google-format base: bert_config.json and "
                    "vocab.txt (demo.sh converts MiniLM into models/minilm).")
flags.DEFINE_string("task", "data/wordnet/wordnet_example:gloss:example",
                    "tsv task directory with its text columns: DIR:TEXT_A[:TEXT_B].")
flags.DEFINE_integer("max_seq_length", 128, "--max_seq_length.")
flags.DEFINE_integer("batch_size", 32, "--train_batch_size (examples).")
flags.DEFINE_integer("adapter_size", 64, "--adapter_size.")
flags.DEFINE_integer("rounds", 6, "Rounds of each way, alternating.")
flags.DEFINE_integer("steps_per_round", 5, "Steps a round (one host call).")
flags.DEFINE_string("json_out", None, "Also write the figures to this JSON file.")


def _path(path):
  return path if os.path.isabs(path) or os.path.exists(path) else os.path.join(REPO, path)


def main(argv):
  del argv
  load_start = os.getloadavg()[0]
  bert_dir = _path(FLAGS.bert_dir)
  data_dir, *columns = FLAGS.task.split(":")
  data_dir = _path(data_dir)
  processor = processors.get_processor(
      "tsv", data_dir=data_dir, text_a_column=columns[0],
      text_b_column=columns[1] if len(columns) > 1 else None)
  tokenizer = tokenization.FullTokenizer(os.path.join(bert_dir, "vocab.txt"), do_lower_case=True)
  config = modeling.BertConfig.from_json_file(os.path.join(bert_dir, "bert_config.json"))
  # Packed steps vary in length, so no step FLOPs: the ceiling is for the full batch's shapes.
  conditions = run_conditions.Conditions({"tensorflow": sys.executable}, run_conditions.model_shapes(
      FLAGS.batch_size * FLAGS.max_seq_length, config.hidden_size, config.intermediate_size))
  keras.utils.set_random_seed(1)
  model = modeling.BertClassifier(config, processor.num_labels(),
                                  AdapterConfig(size=FLAGS.adapter_size))
  model.ensure_built()
  strategy = tf.distribute.get_strategy()
  with tempfile.TemporaryDirectory() as tmp:
    record = os.path.join(tmp, "train.tf_record")
    classifier_features.ensure_feature_record(processor.get_train_examples(data_dir),
                                              processor.get_labels(), FLAGS.max_seq_length,
                                              tokenizer, record)
    stats = records.packing_stats(record, FLAGS.max_seq_length)
    rows = stats.rows_per_batch(FLAGS.batch_size)
    datasets = {
        "per batch": classifier_features.make_dataset(
            record, FLAGS.max_seq_length, FLAGS.batch_size, True, True, seed=1,
            pad_to_multiple_of=1),
        "packed": classifier_features.make_dataset(
            record, FLAGS.max_seq_length, rows, True, True, seed=1, pack_sequences=True)}
    settings = loop.TrainSettings(output_dir=tmp, train_batch_size=FLAGS.batch_size,
                                  num_train_steps=10**6, num_warmup_steps=10,
                                  learning_rate=1e-3)
    train_loop = loop.make_train_loop(strategy, model, classifier_task.loss_fn(False),
                                      loop.create_optimizer(strategy, model, settings),
                                      FLAGS.batch_size)
    # The loop's stream and a twin of it, read to count each step's examples.
    streams = {k: loop.training_iterator(strategy, d, 0) for k, d in datasets.items()}
    twins = {k: iter(d) for k, d in datasets.items()}

    def examples(name, steps):
      batches = [next(twins[name])[0] for _ in range(steps)]
      return sum(int(np.count_nonzero(b[modeling.EXAMPLE_LENGTHS])) if
                 modeling.EXAMPLE_LENGTHS in b else int(b["input_ids"].shape[0])
                 for b in batches)

    for name in datasets:  # Traces and warms up.
      train_loop(streams[name], tf.constant(2)).numpy()
      examples(name, 2)
    seconds = {name: [] for name in datasets}
    counted = dict.fromkeys(datasets, 0)
    for _ in range(FLAGS.rounds):
      for name in datasets:
        start = time.perf_counter()
        train_loop(streams[name], tf.constant(FLAGS.steps_per_round)).numpy()
        seconds[name].append((time.perf_counter() - start) / FLAGS.steps_per_round)
        counted[name] += examples(name, FLAGS.steps_per_round)
  print(f"machine: {machine.cpu_line()}; load average {load_start:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end")
  print(stats.describe(rows))
  rates = {}
  for name in datasets:
    total = sum(seconds[name]) * FLAGS.steps_per_round
    rates[name] = counted[name] / total
    print(f"{name:<10} {1000 * np.median(seconds[name]):7.0f} ms/step (median), "
          f"{rates[name]:6.1f} examples/s over {FLAGS.rounds * FLAGS.steps_per_round} steps")
  print(f"packed / per batch: {rates['packed'] / rates['per batch']:.2f}x examples/s")
  print("\n".join(conditions.lines()))
  if FLAGS.json_out:
    with tf.io.gfile.GFile(FLAGS.json_out, "w") as f:
      json.dump(dict(machine=machine.cpu_line(), task=FLAGS.task, rows_per_batch=rows,
                     real_token_share=stats.real_token_share, examples_per_second=rates,
                     ms_per_step={k: 1000 * float(np.median(v)) for k, v in seconds.items()},
                     conditions=conditions.as_dict()),
                f, indent=2)


if __name__ == "__main__":
  app.run(main, flags_parser=flag_checks.parse_flags)
