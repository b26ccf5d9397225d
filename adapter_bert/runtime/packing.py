"""Packed sequences: several whole examples in one row of max_seq_length tokens.

A packed batch holds, besides the usual int32 [rows, L] "input_ids",
"segment_ids" and "input_mask" (1 on every real token of any example):
  EXAMPLE_IDS [rows, L]     1..K: the row's example each token belongs to, 0 padding;
  POSITION_IDS [rows, L]    each token's position in its own example (from 0);
  EXAMPLE_STARTS [rows, K]  the row index of each example's first token ([CLS]);
  EXAMPLE_LENGTHS [rows, K] each example's tokens; 0 marks an empty slot;
and every per-example feature (labels, is_real_example, input_index ...) as
[rows, K]. The models (modeling.py) then let each token attend only to its own
example, give it its own positions and read each example's own [CLS], so an
example's outputs are those it has alone (to float rounding) while every batch
has one static shape with little padding computed.

Rows are made per window of examples by first-fit decreasing: the window's
examples, longest first, each go to the first row with room for it (and fewer
than K examples), which fills rows far better than packing in arrival order
(next-fit) does with examples of ordinary length. Pure TensorFlow ops in the
input pipeline (a TPU host's, gs:// records), deterministic for a seed, so a
resumed run skips batches of the same stream as before (loop.training_dataset).

Hand-written: TensorFlow, tensorflow-text and Model Garden have no such packer
(Model Garden's PackBertEmbeddings reshapes a fixed number of equally long
sequences into one; BertPackInputs joins the segments of one example).
"""

import dataclasses
import math
from typing import Dict, Mapping

import numpy as np
import tensorflow as tf

from adapter_bert.model.modeling import EXAMPLE_IDS, EXAMPLE_LENGTHS, EXAMPLE_STARTS, POSITION_IDS

# K, the examples a row holds at most, is max_seq_length // TOKENS_PER_SLOT: an
# example has at least [CLS] and [SEP], and empty slots cost only a pooled vector
# each, so K rarely limits a row.
TOKENS_PER_SLOT = 4
# The token-level features of a packed batch ([rows, L]); the others are per example.
TOKEN_FEATURES = ("input_ids", "input_mask", "segment_ids", EXAMPLE_IDS, POSITION_IDS)


def max_examples_per_row(max_seq_length: int) -> int:
  """K: the examples a row of `max_seq_length` tokens holds at most."""
  return max(1, max_seq_length // TOKENS_PER_SLOT)


def _first_fit_decreasing(lengths, max_seq_length: int, max_examples: int):
  """Each example's row, slot in the row and offset in it; -1 rows for empty
  (length 0) examples, which are left out. Returns (row, slot, offset, num_rows)."""
  n = tf.shape(lengths)[0]
  order = tf.argsort(-lengths, stable=True)  # Longest first; ties in window order.
  rows = tf.range(n)

  def body(i, space, counts, num_rows, row, slot, offset):
    example = order[i]
    length = lengths[example]
    # Rows not yet opened have all the room and come after the open ones, so
    # the first that fits exists and is an open row whenever one has room.
    fits = tf.logical_and(space >= length, counts < max_examples)
    r = tf.reduce_min(tf.where(fits, rows, n))
    used = length > 0
    at = [[r]]
    row = tf.tensor_scatter_nd_update(row, [[example]], [tf.where(used, r, -1)])
    slot = tf.tensor_scatter_nd_update(slot, [[example]], [counts[r]])
    offset = tf.tensor_scatter_nd_update(offset, [[example]], [max_seq_length - space[r]])
    space = tf.tensor_scatter_nd_sub(space, at, [length])
    counts = tf.tensor_scatter_nd_add(counts, at, [tf.cast(used, tf.int32)])
    num_rows = tf.where(used, tf.maximum(num_rows, r + 1), num_rows)
    return i + 1, space, counts, num_rows, row, slot, offset

  zeros = tf.zeros([n], tf.int32)
  _, _, _, num_rows, row, slot, offset = tf.while_loop(
      lambda i, *_: i < n, body,
      (tf.constant(0), tf.fill([n], tf.constant(max_seq_length, tf.int32)), zeros,
       tf.constant(0), zeros, zeros, zeros))
  return row, slot, offset, num_rows


def pack_window(window: Mapping[str, tf.Tensor], max_seq_length: int) -> Dict[str, tf.Tensor]:
  """A window of examples ([W, L] sequence features, [W, ...] per-example ones,
  "input_mask" 1 on each example's first tokens) as packed rows ([M, L] and
  [M, K, ...], the module docstring). Examples of length 0 (TPU padding) are
  left out; no example is split."""
  max_examples = max_examples_per_row(max_seq_length)
  lengths = tf.reduce_sum(tf.cast(window["input_mask"], tf.int32), axis=-1)
  row, slot, offset, num_rows = _first_fit_decreasing(lengths, max_seq_length, max_examples)
  # Every real token: (example, position) -> (row, offset + position).
  tokens = tf.cast(tf.where(tf.sequence_mask(lengths, max_seq_length)), tf.int32)
  example, position = tokens[:, 0], tokens[:, 1]
  to_token = tf.stack([tf.gather(row, example), tf.gather(offset, example) + position], 1)
  kept = tf.where(row >= 0)[:, 0]
  to_slot = tf.stack([tf.gather(row, kept), tf.gather(slot, kept)], 1)

  def scatter(values, indices, width):
    shape = tf.concat([[num_rows, width], tf.shape(values)[1:]], 0)
    return tf.scatter_nd(indices, values, shape)

  rows = {}
  for name, t in window.items():
    if t.shape.rank == 2 and t.shape[1] == max_seq_length:
      rows[name] = scatter(tf.gather_nd(t, tokens), to_token, max_seq_length)
    else:
      rows[name] = scatter(tf.gather(t, kept), to_slot, max_examples)
  rows[EXAMPLE_IDS] = scatter(tf.gather(slot, example) + 1, to_token, max_seq_length)
  rows[POSITION_IDS] = scatter(position, to_token, max_seq_length)
  rows[EXAMPLE_STARTS] = scatter(tf.gather(offset, kept), to_slot, max_examples)
  rows[EXAMPLE_LENGTHS] = scatter(tf.gather(lengths, kept), to_slot, max_examples)
  return rows


def pack(windows: tf.data.Dataset, max_seq_length: int) -> tf.data.Dataset:
  """Windows of parsed examples (batches of them) -> a stream of packed rows."""
  return windows.map(lambda w: pack_window(w, max_seq_length)).unbatch()


def empty_rows(rows: tf.data.Dataset, count: int) -> tf.data.Dataset:
  """`count` rows of zeros shaped as `rows`' (no example: EXAMPLE_LENGTHS 0),
  to fill a last batch to the static batch shape."""
  zeros = tf.nest.map_structure(lambda spec: tf.zeros(spec.shape, spec.dtype),
                                rows.element_spec)
  return tf.data.Dataset.from_tensors(zeros).repeat(count)


def mean_over_examples(per_example: tf.Tensor, lengths: tf.Tensor) -> tf.Tensor:
  """A packed batch's loss: the mean of `per_example` [rows, K] over the real
  examples of the global batch (EXAMPLE_LENGTHS > 0), this replica's share of
  it as tf.nn.compute_average_loss gives (the replicas' losses and gradients sum)."""
  weights = tf.cast(lengths > 0, per_example.dtype)
  count = tf.reduce_sum(weights)
  context = tf.distribute.get_replica_context()
  if context is not None:
    count = context.all_reduce(tf.distribute.ReduceOp.SUM, count)
  return tf.reduce_sum(per_example * weights) / tf.maximum(count, 1.0)


def unpack(outputs: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
  """Per-row prediction outputs -> per example: every [rows, K, ...] array but
  the token features, flattened to [examples, ...] over the non-empty slots in
  row order. Token-level arrays ([rows, L]) belong to no one example: dropped."""
  lengths = np.asarray(outputs[EXAMPLE_LENGTHS])
  num_rows, max_examples = lengths.shape
  real = lengths.reshape([-1]) > 0
  return {key: np.asarray(value).reshape((-1,) + value.shape[2:])[real]
          for key, value in outputs.items()
          if key not in TOKEN_FEATURES and np.ndim(value) >= 2
          and value.shape[:2] == (num_rows, max_examples)}


@dataclasses.dataclass(frozen=True)
class PackingStats:
  """What packing a record's examples gives: how many rows, how full."""
  num_examples: int
  num_rows: int
  real_tokens: int
  max_seq_length: int

  @property
  def examples_per_row(self) -> float:
    return self.num_examples / max(self.num_rows, 1)

  @property
  def real_token_share(self) -> float:
    return self.real_tokens / max(self.num_rows * self.max_seq_length, 1)

  def rows_per_batch(self, examples_per_batch: int, multiple_of: int = 1) -> int:
    """Rows that hold `examples_per_batch` examples on average, rounded up (to
    a multiple of `multiple_of`, the replicas a batch is split between)."""
    rows = max(1, math.ceil(examples_per_batch / self.examples_per_row))
    return -(-rows // multiple_of) * multiple_of

  def describe(self, rows_per_batch: int) -> str:
    return (f"packed {self.num_examples} examples into {self.num_rows} rows of "
            f"{self.max_seq_length} tokens ({100 * self.real_token_share:.1f}% real tokens), "
            f"{rows_per_batch} rows per batch (~{rows_per_batch * self.examples_per_row:.1f} "
            f"examples)")


def measure(windows: tf.data.Dataset, max_seq_length: int) -> PackingStats:
  """PackingStats of packing `windows` (batches of at least "input_mask")."""
  def count(totals, window):
    rows = pack_window({"input_mask": window["input_mask"]}, max_seq_length)
    lengths = rows[EXAMPLE_LENGTHS]
    return (totals[0] + tf.reduce_sum(tf.cast(lengths > 0, tf.int64)),
            totals[1] + tf.cast(tf.shape(lengths)[0], tf.int64),
            totals[2] + tf.cast(tf.reduce_sum(lengths), tf.int64))
  zero = tf.constant(0, tf.int64)
  examples, rows, tokens = windows.reduce((zero, zero, zero), count)
  return PackingStats(int(examples), int(rows), int(tokens), max_seq_length)
