"""TFRecord feature files -> batched tf.data pipelines (the original's input_fn builders).

Both tasks write their features as tf.train.Examples (classification/features.py,
squad/data.py) and read them back here, the same way: training repeats forever
and shuffles with a buffer of 100, as the original (its examples are shuffled
before they are written, so the buffer only mixes neighbours); evaluation and
prediction keep file order, which the result files rely on.
"""

from typing import Mapping, Optional, Sequence, Union

import tensorflow as tf


def sequence_features(seq_length: int, names: Sequence[str] = (
    "input_ids", "input_mask", "segment_ids")) -> dict:
  """int64 [seq_length] features: the model inputs every record holds."""
  return {name: tf.io.FixedLenFeature([seq_length], tf.int64) for name in names}


def read_batches(record_files: Union[str, Sequence[str]],
                 name_to_features: Mapping[str, tf.io.FixedLenFeature],
                 batch_size: int, is_training: bool, drop_remainder: bool,
                 seed: Optional[int] = None) -> tf.data.Dataset:
  """Batches of parsed records: dicts of int32 (int64 features) or float32 Tensors.

  Args:
    record_files: a TFRecord path or a list of them (any tf.io.gfile path).
    name_to_features: the features to parse, by name.
    batch_size: batch size.
    is_training: repeat forever and shuffle (buffer 100, `seed`).
    drop_remainder: drop a last partial batch, which makes the batch dimension
      static (needed on TPU and for training); prediction keeps every record.
    seed: shuffle seed, for reproducible runs.
  """
  files = [record_files] if isinstance(record_files, str) else list(record_files)
  for path in files:
    if not tf.io.gfile.exists(path):
      raise FileNotFoundError(f"Feature record not found: {path}")

  def decode_batch(records):
    example = tf.io.parse_example(records, name_to_features)
    # tf.Example only stores int64, but TPUs only support int32.
    return {name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t
            for name, t in example.items()}

  d = tf.data.TFRecordDataset(files)
  if is_training:
    d = d.repeat()
    d = d.shuffle(buffer_size=100, seed=seed)
  # Batch the serialized records, then parse each batch in one op: the same
  # result as the original's map_and_batch, with fewer ops per example.
  d = d.batch(batch_size, drop_remainder=drop_remainder)
  d = d.map(decode_batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return d.prefetch(tf.data.AUTOTUNE)
