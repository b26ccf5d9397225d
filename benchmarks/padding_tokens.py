r"""Token positions computed per epoch: padded to the maximum, per batch, grouped by length.

  .venv/bin/python benchmarks/padding_tokens.py            # the five WordNet tasks, seq 128
  .venv/bin/python benchmarks/padding_tokens.py --max_seq_length=64 --batch_size=16

Each task's training set goes through run_classifier.py's own feature
conversion and input pipeline (classification/features.py, runtime/records.py):
one epoch of training batches is read three ways and the positions each batch
is padded to are summed. Per batch, the positions are what the encoder computes
(attention grows with their square, so the saving in time is larger):
  max        every batch padded to --max_seq_length (the original, --pad_to_max_seq_length)
  per batch  each batch padded to its longest example (the default), random batches
  grouped    the same with --group_by_length
  grouped 16 the same padded to multiples of 16 (TPU, --use_xla)
  packed     --pack_sequences: rows of --max_seq_length holding several examples
             (runtime/packing.py), as many rows a batch as hold --batch_size examples
Figures are fractions of "max"; then the share of real tokens among the positions
computed, per way. No model runs, so the machine's load does not matter.
"""

import os
import tempfile
from typing import Tuple

from absl import app, flags

from adapter_bert.cli import flag_checks
from adapter_bert.classification import features as classifier_features
from adapter_bert.classification import processors
from adapter_bert.runtime import records
from adapter_bert import tokenization

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FLAGS = flags.FLAGS
flags.DEFINE_list("tasks", [
    "data/wordnet/wordnet_lexname:sentence", "data/wordnet/wordnet_pos:sentence",
    "data/wordnet/wordnet_example:gloss:example", "data/wordnet/wordnet_relation:word_a:word_b",
    "data/wordnet/wordnet_gloss_relation:gloss_a:gloss_b"],
    "tsv task directories with their text columns: DIR:TEXT_A[:TEXT_B].")
flags.DEFINE_string("vocab_file", "models/minilm/vocab.txt", "WordPiece vocabulary "
                    "(demo.sh converts MiniLM into models/minilm).")
flags.DEFINE_integer("max_seq_length", 128, "--max_seq_length (the original's default).")
flags.DEFINE_integer("batch_size", 32, "--train_batch_size.")
flags.DEFINE_integer("seed", 1, "Shuffle seed.")


def positions_per_epoch(record, num_examples, **padding) -> Tuple[int, int]:
  """Sums over one epoch of training batches of batch size x padded length, and
  of real tokens. Packed, an epoch is its packed rows, a batch the rows that
  hold --batch_size examples on average (run_classifier.py's)."""
  batch_size, steps = FLAGS.batch_size, num_examples // FLAGS.batch_size
  if padding.get("pack_sequences"):
    stats = records.packing_stats(record, FLAGS.max_seq_length)
    batch_size = stats.rows_per_batch(FLAGS.batch_size)
    steps = stats.num_rows // batch_size
  dataset = classifier_features.make_dataset(
      record, FLAGS.max_seq_length, batch_size, is_training=True, drop_remainder=True,
      seed=FLAGS.seed, **padding)
  positions = real = 0
  for features, _ in dataset.take(steps):
    positions += int(features["input_ids"].shape[0] * features["input_ids"].shape[1])
    real += int(features["input_mask"].numpy().sum())
  return positions, real


def main(argv):
  del argv
  tokenizer = tokenization.FullTokenizer(os.path.join(REPO, FLAGS.vocab_file)
                                         if not os.path.exists(FLAGS.vocab_file)
                                         else FLAGS.vocab_file, do_lower_case=True)
  print(f"max_seq_length {FLAGS.max_seq_length}, batch {FLAGS.batch_size}: positions "
        f"computed per epoch, as a fraction of padding every batch to the maximum")
  print(f"{'task':<22} {'examples':>8} {'mean len':>8} {'per batch':>9} {'grouped':>8} "
        f"{'grouped 16':>10} {'packed':>6} | real tokens: {'max':>5} {'per batch':>9} "
        f"{'packed':>6}")
  with tempfile.TemporaryDirectory() as tmp:
    for spec in FLAGS.tasks:
      data_dir, *columns = spec.split(":")
      if not os.path.isabs(data_dir) and not os.path.exists(data_dir):
        data_dir = os.path.join(REPO, data_dir)
      processor = processors.get_processor(
          "tsv", data_dir=data_dir, text_a_column=columns[0],
          text_b_column=columns[1] if len(columns) > 1 else None)
      examples = processor.get_train_examples(data_dir)
      record = os.path.join(tmp, os.path.basename(data_dir) + ".tf_record")
      classifier_features.ensure_feature_record(examples, processor.get_labels(),
                                                FLAGS.max_seq_length, tokenizer, record)
      n = len(examples)
      mean_length = sum(int(f["input_mask"].numpy().sum()) for f, _ in classifier_features
                        .make_dataset(record, FLAGS.max_seq_length, 1024, is_training=False,
                                      drop_remainder=False)) / n
      ways = [{}] + [dict(pad_to_multiple_of=k, group_by_length=g)
                     for k, g in ((1, False), (1, True), (16, True))]
      (full, full_real), *padded = [positions_per_epoch(record, n, **way) for way in ways]
      packed = positions_per_epoch(record, n, pack_sequences=True)
      shares = [positions / full for positions, _ in padded + [packed]]
      real = [r / p for p, r in ((full, full_real), padded[0], packed)]
      print(f"{os.path.basename(data_dir):<22} {n:>8} {mean_length:>8.1f} {shares[0]:>9.2f} "
            f"{shares[1]:>8.2f} {shares[2]:>10.2f} {shares[3]:>6.2f} | {'':>12} "
            f"{real[0]:>5.2f} {real[1]:>9.2f} {real[2]:>6.2f}")


if __name__ == "__main__":
  app.run(main, flags_parser=flag_checks.parse_flags)
