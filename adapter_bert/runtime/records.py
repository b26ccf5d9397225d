"""TFRecord feature files -> batched tf.data pipelines (the original's input_fn builders).

Both tasks write their features as tf.train.Examples (classification/features.py,
squad/features.py), every sequence padded to max_seq_length, and read them back
here, the same way: training repeats forever and shuffles with a buffer of 100,
as the original (its examples are shuffled before they are written, so the
buffer only mixes neighbours); evaluation and prediction read every record once.

How far a batch is padded (`pad_to_multiple_of`):
  * None: every batch to max_seq_length, as the original (for TPUs).
  * k: each batch to its own longest example, rounded up to a multiple of k
    (and at most max_seq_length). The masked positions add exactly zero to
    every result, so only the work changes. Shapes then vary between batches:
    a graph traced with an unknown length runs them all, while XLA (TPU,
    --use_xla) compiles one program per length, so there k = 16 keeps them to
    max_seq_length / 16.
With per-batch padding, batches of similar length pad least:
  * training with `group_by_length`: examples go to length buckets (as they come
    out of the seeded shuffle), a full bucket is a batch, and the batches are
    shuffled again (seeded): the same stream on every run and every worker, so
    resuming by skipping batches works as before;
  * evaluation and prediction always: each window of `_SORT_WINDOW` records is
    sorted by length (stable) before batching, and every example carries its
    `input_index`, by which runtime/prediction.predict puts the results back in
    record order.
Packed (`pack_sequences`, runtime/packing.py): several examples per row of
max_seq_length tokens, each batch `batch_size` such rows (one static shape, the
last batch filled with empty rows); training packs windows of the shuffled
stream, evaluation and prediction windows in record order, their examples
carrying `input_index` as above.
"""

from typing import Mapping, Optional, Sequence, Tuple, Union

from absl import logging
import tensorflow as tf

from adapter_bert.runtime import packing

# The sequence length a batch is rounded up to where XLA compiles a program per
# shape (TPU, --use_xla): at most max_seq_length / 16 programs.
STATIC_SHAPE_MULTIPLE = 16
# Records parsed in one op where examples are handled one by one.
_PARSE_CHUNK = 256
# Evaluation / prediction: records sorted by length together (memory: this many
# examples' features, a few MB at max_seq_length 512).
_SORT_WINDOW = 4096
# Training with group_by_length: length buckets are this wide at least (narrower
# ones wait longer to fill, and XLA needs a program per bucket anyway), and
# this many batches are shuffled together after bucketing.
_MIN_BUCKET_WIDTH = 8
_BATCH_SHUFFLE_BUFFER = 64
# The feature runtime/prediction.predict restores record order by.
INPUT_INDEX = "input_index"
# Packing: examples packed together (first-fit decreasing within a window),
# and training's packed rows shuffled together (seeded) after, so that a batch
# mixes rows of long and short examples.
_PACK_WINDOW = 1024
_ROW_SHUFFLE_BUFFER = 256


def sequence_features(max_seq_length: int, names: Sequence[str] = (
    "input_ids", "input_mask", "segment_ids")) -> dict:
  """int64 [max_seq_length] features: the model inputs every record holds, padded
  to the run's --max_seq_length when written."""
  return {name: tf.io.FixedLenFeature([max_seq_length], tf.int64) for name in names}


def read_batches(record_files: Union[str, Sequence[str]],
                 name_to_features: Mapping[str, tf.io.FixedLenFeature],
                 batch_size: int, is_training: bool, drop_remainder: bool,
                 seed: Optional[int] = None, pad_to_multiple_of: Optional[int] = None,
                 group_by_length: bool = False,
                 fill_last_batch: Optional[Mapping[str, int]] = None,
                 pack_sequences: bool = False) -> tf.data.Dataset:
  """Batches of parsed records: dicts of int32 (int64 features) or float32 Tensors.

  Args:
    record_files: a TFRecord path or a list of them (any tf.io.gfile path).
    name_to_features: the features to parse, by name; "input_mask" (1 on an
      example's tokens, then 0) gives each example's length.
    batch_size: batch size.
    is_training: repeat forever and shuffle (buffer 100, `seed`).
    drop_remainder: drop a last partial batch, which makes the batch dimension
      static (needed on TPU and for training); prediction keeps every record.
    seed: shuffle seed, for reproducible runs.
    pad_to_multiple_of: None pads every batch to max_seq_length; k pads each
      to its longest example rounded up to a multiple of k (module docstring).
    group_by_length: training only: batches of similar length (needs
      `pad_to_multiple_of`). Evaluation and prediction group whenever they pad
      per batch, and then add `INPUT_INDEX`, each example's place in the records.
    fill_last_batch: evaluation / prediction: append examples (all features 0
      but these values) until the last batch is full, for static shapes.
    pack_sequences: batches of `batch_size` packed rows (runtime/packing.py;
      the module docstring), always of one static shape; padding and grouping
      arguments do not apply, and examples of length 0 (fill_last_batch's,
      TPU padding) are left out.
  """
  files = _existing_files(record_files)
  _check_batching(is_training, pad_to_multiple_of, group_by_length, fill_last_batch,
                  pack_sequences)
  max_seq_length = name_to_features["input_mask"].shape[0]
  decode = _decoder(name_to_features)
  d = tf.data.TFRecordDataset(files)
  if is_training:
    d = d.repeat().shuffle(buffer_size=100, seed=seed)
  if pack_sequences:
    return _packed_batches(d, decode, batch_size, max_seq_length, is_training, seed)
  sort_windows = not is_training and pad_to_multiple_of is not None
  if not (group_by_length or sort_windows or fill_last_batch is not None):
    # Batch the serialized records, then parse each batch in one op: the same
    # result as the original's map_and_batch, with fewer ops per example.
    d = d.batch(batch_size, drop_remainder=drop_remainder)
    d = d.map(decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  else:  # Example by example: sorted, filled or bucketed before batching.
    d = _examples(d, decode, sort_windows)
    if fill_last_batch is not None:
      # Before batching and after sorting: the fillers go into the last batch.
      fillers = _fillers(name_to_features, fill_last_batch, sort_windows, batch_size - 1)
      d = d.concatenate(fillers)
      drop_remainder = True  # Drops the fillers a full last batch did not need.
    if group_by_length:
      d = _length_grouped_batches(d, batch_size, max_seq_length, pad_to_multiple_of, seed)
    else:
      d = d.batch(batch_size, drop_remainder=drop_remainder)
  if pad_to_multiple_of is not None:
    d = _trimmed_batches(d, name_to_features, pad_to_multiple_of, max_seq_length)
  return d.prefetch(tf.data.AUTOTUNE)


def _existing_files(record_files: Union[str, Sequence[str]]) -> list:
  """The record paths as a list, each checked to exist (FileNotFoundError)."""
  files = [record_files] if isinstance(record_files, str) else list(record_files)
  for path in files:
    if not tf.io.gfile.exists(path):
      raise FileNotFoundError(f"Feature record not found: {path}")
  return files


def _check_batching(is_training: bool, pad_to_multiple_of: Optional[int],
                    group_by_length: bool, fill_last_batch: Optional[Mapping[str, int]],
                    pack_sequences: bool) -> None:
  """ValueError for read_batches arguments that do not go together."""
  if group_by_length and (not is_training or pad_to_multiple_of is None):
    raise ValueError("group_by_length is for training with per-batch padding")
  if fill_last_batch is not None and is_training:
    raise ValueError("fill_last_batch is for evaluation and prediction")
  if pack_sequences and (group_by_length or pad_to_multiple_of is not None):
    raise ValueError("packed rows are max_seq_length long: no per-batch padding")


def _decoder(name_to_features: Mapping[str, tf.io.FixedLenFeature]):
  """A function from a [N] string Tensor of serialized records to their features:
  [N, ...] int32 (the int64 features) or float32 Tensors, by name."""
  def decode(records):
    example = tf.io.parse_example(records, name_to_features)
    # tf.Example only stores int64, but TPUs only support int32.
    return {name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t
            for name, t in example.items()}
  return decode


def _examples(serialized: tf.data.Dataset, decode, sort_windows: bool) -> tf.data.Dataset:
  """The records parsed (in chunks, one op each) into single examples; with
  `sort_windows`, sorted by length within windows and carrying INPUT_INDEX."""
  if sort_windows:
    return serialized.batch(_SORT_WINDOW).map(decode).enumerate().map(
        _sorted_window).unbatch()
  return serialized.batch(_PARSE_CHUNK).map(decode).unbatch()


def _fillers(name_to_features: Mapping[str, tf.io.FixedLenFeature],
             fill_last_batch: Mapping[str, int], with_input_index: bool,
             count: int) -> tf.data.Dataset:
  """`count` filler examples: every feature 0 (int32 / float32, of its shape) but
  those `fill_last_batch` gives; INPUT_INDEX -1 (no record) `with_input_index`."""
  filler = {name: tf.fill(spec.shape, tf.constant(
      fill_last_batch.get(name, 0), tf.int32 if spec.dtype == tf.int64 else spec.dtype))
            for name, spec in name_to_features.items()}
  if with_input_index:
    filler[INPUT_INDEX] = tf.constant(-1, tf.int32)
  return tf.data.Dataset.from_tensors(filler).repeat(count)


def _trimmed_batches(batches: tf.data.Dataset,
                     name_to_features: Mapping[str, tf.io.FixedLenFeature],
                     multiple: int, max_seq_length: int) -> tf.data.Dataset:
  """Each batch's [B, max_seq_length] features cut after its longest example,
  rounded up to a multiple of `multiple` (_trimmed); the other features as they are."""
  sequences = [name for name, spec in name_to_features.items()
               if list(spec.shape) == [max_seq_length]]
  return batches.map(lambda batch: _trimmed(batch, sequences, multiple, max_seq_length),
                     num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def packing_stats(record_files: Union[str, Sequence[str]],
                  max_seq_length: int) -> packing.PackingStats:
  """What packing the records' examples in record order gives (rows, real
  tokens): as training packs them, but unshuffled. Reads only input_mask."""
  features = sequence_features(max_seq_length, ("input_mask",))
  windows = tf.data.TFRecordDataset(record_files).batch(_PACK_WINDOW).map(
      lambda records: tf.io.parse_example(records, features))
  return packing.measure(windows, max_seq_length)


def packed_batch_rows(record_files: Union[str, Sequence[str]], max_seq_length: int,
                      examples_per_batch: int,
                      num_replicas: int) -> Tuple[int, packing.PackingStats]:
  """The packed rows that hold `examples_per_batch` examples on average (measured
  on the records, rounded up to a multiple of the replicas), so that a batch
  size flag keeps counting examples; logs the packing's line. Returns (rows,
  the PackingStats)."""
  stats = packing_stats(record_files, max_seq_length)
  rows = stats.rows_per_batch(examples_per_batch, num_replicas)
  logging.info(stats.describe(rows))
  return rows, stats


def _packed_batches(serialized, decode, rows_per_batch: int, max_seq_length: int,
                    is_training: bool, seed: Optional[int]) -> tf.data.Dataset:
  """Batches of `rows_per_batch` packed rows of the (shuffled) serialized records."""
  if is_training:
    windows = serialized.batch(_PACK_WINDOW).map(decode)
  else:  # Each example's place in the records, restored by prediction.predict.
    windows = serialized.batch(_PACK_WINDOW).map(decode).enumerate().map(
        lambda index, window: dict(window, **{INPUT_INDEX: tf.cast(
            index * _PACK_WINDOW + tf.range(tf.shape(window["input_mask"],
                                                     out_type=tf.int64)[0]), tf.int32)}))
  rows = packing.pack(windows, max_seq_length)
  if is_training:
    rows = rows.shuffle(_ROW_SHUFFLE_BUFFER, seed=seed)
  else:
    rows = rows.concatenate(packing.empty_rows(rows, rows_per_batch - 1))
  return rows.batch(rows_per_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def _lengths(examples) -> tf.Tensor:
  """Each example's number of tokens (its input_mask is 1 on them, then 0)."""
  return tf.reduce_sum(examples["input_mask"], axis=-1)


def _sorted_window(window_index, window):
  """A window of examples sorted by length (stable), each with its INPUT_INDEX."""
  size = tf.shape(window["input_mask"], out_type=tf.int64)[0]
  # int32 as every feature a step gets (TPUs take int32, as the original cast).
  index = tf.cast(window_index * _SORT_WINDOW + tf.range(size), tf.int32)
  window = dict(window, **{INPUT_INDEX: index})
  order = tf.argsort(_lengths(window), stable=True)
  return {name: tf.gather(t, order) for name, t in window.items()}


def _length_grouped_batches(examples: tf.data.Dataset, batch_size: int,
                            max_seq_length: int, pad_to_multiple_of: int,
                            seed: Optional[int]) -> tf.data.Dataset:
  """Full batches of examples of one length bucket, in a seeded shuffled order;
  buckets as wide as the padding multiple, at least _MIN_BUCKET_WIDTH."""
  bucket_width = max(pad_to_multiple_of, _MIN_BUCKET_WIDTH)
  boundaries = list(range(bucket_width + 1, max_seq_length + 1, bucket_width))
  batches = examples.bucket_by_sequence_length(
      lambda example: _lengths(example), boundaries,
      [batch_size] * (len(boundaries) + 1), drop_remainder=True)
  return batches.shuffle(_BATCH_SHUFFLE_BUFFER, seed=seed)


def _trimmed(batch, sequences: Sequence[str], multiple: int, max_seq_length: int):
  """The batch's sequence features cut after its longest example, rounded up."""
  longest = tf.maximum(tf.reduce_max(_lengths(batch)), 1)
  length = tf.minimum((longest + multiple - 1) // multiple * multiple, max_seq_length)
  return {name: t[:, :length] if name in sequences else t for name, t in batch.items()}


def with_shard_policy(dataset: tf.data.Dataset, policy) -> tf.data.Dataset:
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
