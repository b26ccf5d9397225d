"""Packed batches built by hand, as the packed-batch interface lays them out and
independent of runtime/packing.py's packer: examples back to back, example_ids
1..K, positions restarting at 0, each example's start and length per slot. Shared
by the packed SQuAD and multi-task tests; the tiny BERT without dropout (CONFIG)
and the features' lengths (LENGTHS) placed in rows (ROWS)."""

import numpy as np
import tensorflow as tf

import tiny_bert

# Dropout off: packed and unpacked must compute the same function.
CONFIG = dict(tiny_bert.TINY_CONFIG, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
ROW_LENGTH = 24
# Features' lengths and how they share rows: full, partial and empty slots.
LENGTHS = (7, 12, 5, 9, 3, 16)
ROWS = ((0, 1), (2, 3, 4), (5,))
MAX_EXAMPLES = 3


def pack_by_hand(features, rows=ROWS, row_length=ROW_LENGTH, max_examples=MAX_EXAMPLES,
                 per_example=("start_positions", "end_positions")):
  """The packed batch of `features` placed in `rows` (feature indices per row),
  with their `per_example` values [rows, max_examples]."""
  batch = len(rows)
  packed = {name: np.zeros([batch, row_length], np.int32) for name in (
      "input_ids", "input_mask", "segment_ids", "example_ids", "position_ids")}
  packed.update({name: np.zeros([batch, max_examples], np.int32) for name in (
      "example_starts", "example_lengths")})
  packed.update({name: np.zeros([batch, max_examples], np.asarray(features[0][name]).dtype)
                 for name in per_example})
  for b, row in enumerate(rows):
    at = 0
    for k, i in enumerate(row):
      f = features[i]
      n = len(f["input_ids"])
      packed["input_ids"][b, at:at + n] = f["input_ids"]
      packed["segment_ids"][b, at:at + n] = f["segment_ids"]
      packed["input_mask"][b, at:at + n] = 1
      packed["example_ids"][b, at:at + n] = k + 1
      packed["position_ids"][b, at:at + n] = np.arange(n)
      packed["example_starts"][b, k], packed["example_lengths"][b, k] = at, n
      for name in per_example:
        packed[name][b, k] = f[name]
      at += n
  return {k: tf.constant(v) for k, v in packed.items()}
