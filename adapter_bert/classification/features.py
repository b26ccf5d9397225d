"""`InputExample`s -> BERT features -> TFRecord files -> tf.data (run_classifier.py).

Feature layout, as google-research/bert `convert_single_example`:

  tokens:      [CLS] a1 a2 [SEP] b1 b2 [SEP] 0 0 ...
  segment_ids:   0   0  0    0   1  1    1   0 0 ...
  input_mask:    1   1  1    1   1  1    1   0 0 ...

Records hold int64 features `input_ids`, `input_mask`, `segment_ids`
[max_seq_length], `label_ids` (a float feature for regression) and
`is_real_example` — the original's names, so its records read here and back.

A record is written to a temporary name and renamed into place, so an
interrupted run never leaves a half-written file under the final name; and
`ensure_feature_record` keeps a `<record>.meta.json` fingerprint so a record is
reused only while it still matches its examples, label list, sequence length
and tokenizer.
"""

import collections
import dataclasses
import hashlib
import json
from typing import List, Optional, Sequence, Union

from absl import logging
import tensorflow as tf

from adapter_bert.classification.processors import PaddingInputExample
from adapter_bert import errors
from adapter_bert.runtime import records
from adapter_bert.storage import file_io

# The model's inputs; a dataset's features dict also carries "is_real_example".
MODEL_INPUT_KEYS = ("input_ids", "input_mask", "segment_ids")

# Bump when the record layout or the conversion changes, so old caches rebuild.
_RECORD_FORMAT = 1

# A fixed text tokenized into the fingerprint: it changes when lower-casing,
# accent stripping or Chinese-character splitting change, even for tokenizers
# that do not expose those settings as attributes.
_TOKENIZER_PROBE = "Hello WORLD, naïve Ünïcödé café 中文 don't ##x [UNK] 123.45"


@dataclasses.dataclass
class InputFeatures:
  """A single set of features of data (lists of length max_seq_length)."""
  input_ids: List[int]
  input_mask: List[int]
  segment_ids: List[int]
  label_id: Union[int, float]
  is_real_example: bool = True


def truncate_seq_pair(tokens_a: list, tokens_b: list, max_length: int) -> None:
  """Truncates a sequence pair in place to at most `max_length` tokens in total.

  Pops one token at a time from the longer sequence (from b when equal): a
  short sequence loses little information per token kept, so trimming the
  longer one beats trimming both by the same fraction.
  """
  while True:
    total_length = len(tokens_a) + len(tokens_b)
    if total_length <= max_length:
      break
    if len(tokens_a) > len(tokens_b):
      tokens_a.pop()
    else:
      tokens_b.pop()




def convert_single_example(ex_index: int, example, label_list: Optional[Sequence[str]],
                           max_seq_length: int, tokenizer) -> InputFeatures:
  """Converts one `InputExample` (or `PaddingInputExample`) into `InputFeatures`.

  Args:
    ex_index: position in the data set; the first 5 examples are logged.
    example: the example; a `PaddingInputExample` gives all-zero features with
      is_real_example False.
    label_list: labels, index = label id; None for regression, where the
      label id is float(example.label).
    max_seq_length: total length after [CLS]/[SEP] and zero padding.
    tokenizer: has `tokenize(text) -> tokens` and `convert_tokens_to_ids(tokens)`.
  """
  if max_seq_length < 2:
    raise ValueError(f"max_seq_length must be >= 2 (for [CLS] and [SEP]), got {max_seq_length}")
  if isinstance(example, PaddingInputExample):
    return InputFeatures(
        input_ids=[0] * max_seq_length,
        input_mask=[0] * max_seq_length,
        segment_ids=[0] * max_seq_length,
        label_id=0.0 if label_list is None else 0,
        is_real_example=False)

  tokens_a = tokenizer.tokenize(example.text_a)
  tokens_b = None
  if example.text_b:
    tokens_b = tokenizer.tokenize(example.text_b)

  if tokens_b:
    # Account for [CLS], [SEP], [SEP] with "- 3".
    truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
  elif len(tokens_a) > max_seq_length - 2:
    # Account for [CLS] and [SEP] with "- 2".
    tokens_a = tokens_a[0:(max_seq_length - 2)]

  tokens = ["[CLS]"] + list(tokens_a) + ["[SEP]"]
  segment_ids = [0] * len(tokens)
  # An empty second text after tokenization gives the single-sentence layout,
  # exactly as the original's `if tokens_b:`.
  if tokens_b:
    tokens += list(tokens_b) + ["[SEP]"]
    segment_ids += [1] * (len(tokens_b) + 1)

  input_ids = list(tokenizer.convert_tokens_to_ids(tokens))
  # 1 for real tokens, 0 for padding: only real tokens are attended to.
  input_mask = [1] * len(input_ids)
  padding = [0] * (max_seq_length - len(input_ids))
  input_ids += padding
  input_mask += padding
  segment_ids += padding
  assert len(input_ids) == len(input_mask) == len(segment_ids) == max_seq_length

  label_id = _label_id(example, label_list)
  if ex_index < 5:
    logging.info("*** Example ***")
    logging.info("guid: %s", example.guid)
    logging.info("tokens: %s", " ".join(str(x) for x in tokens))
    logging.info("input_ids: %s", " ".join(str(x) for x in input_ids))
    logging.info("input_mask: %s", " ".join(str(x) for x in input_mask))
    logging.info("segment_ids: %s", " ".join(str(x) for x in segment_ids))
    logging.info("label: %s (id = %s)", example.label, label_id)
  return InputFeatures(input_ids=input_ids, input_mask=input_mask,
                       segment_ids=segment_ids, label_id=label_id, is_real_example=True)


def _label_id(example, label_list):
  # The processors check labels as they read; examples built elsewhere are
  # checked here, still naming the row they came from.
  if label_list is None:
    try:
      return float(example.label)
    except (TypeError, ValueError):
      raise errors.UserError(f"example {example.guid} ({example.source}): regression label "
                             f"{example.label!r} is not a number") from None
  try:
    return list(label_list).index(example.label)
  except ValueError:
    raise errors.UserError(f"example {example.guid} ({example.source}): label "
                           f"{example.label!r} is not one of {list(label_list)}") from None


def convert_examples_to_features(examples, label_list, max_seq_length, tokenizer):
  """Converts a list of examples to a list of `InputFeatures`."""
  return [convert_single_example(i, ex, label_list, max_seq_length, tokenizer)
          for i, ex in enumerate(examples)]


def _to_tf_example(feature: InputFeatures, is_regression: bool) -> tf.train.Example:
  def int_feature(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

  features = collections.OrderedDict()
  features["input_ids"] = int_feature(feature.input_ids)
  features["input_mask"] = int_feature(feature.input_mask)
  features["segment_ids"] = int_feature(feature.segment_ids)
  if is_regression:
    features["label_ids"] = tf.train.Feature(
        float_list=tf.train.FloatList(value=[feature.label_id]))
  else:
    features["label_ids"] = int_feature([feature.label_id])
  features["is_real_example"] = int_feature([int(feature.is_real_example)])
  return tf.train.Example(features=tf.train.Features(feature=features))


def file_based_convert_examples_to_features(examples, label_list, max_seq_length,
                                            tokenizer, output_file) -> None:
  """Converts examples to a TFRecord file, replacing `output_file` atomically.

  Args:
    examples: `InputExample`s and `PaddingInputExample`s, in output order.
    label_list: labels (index = id), or None for regression (float label_ids).
    max_seq_length: sequence length of every record.
    tokenizer: see `convert_single_example`.
    output_file: record path (any tf.io.gfile path). On any failure no file is
      left at a temporary name, and a previous `output_file` is untouched.
  """
  is_regression = label_list is None
  with file_io.AtomicFile(output_file, what="the feature record") as tmp, \
       tf.io.TFRecordWriter(tmp) as writer:
    for (ex_index, example) in enumerate(examples):
      if ex_index % 10000 == 0:
        logging.info("Writing example %d of %d", ex_index, len(examples))
      feature = convert_single_example(ex_index, example, label_list, max_seq_length,
                                       tokenizer)
      writer.write(_to_tf_example(feature, is_regression).SerializeToString())


def _tokenizer_fingerprint(tokenizer, digest) -> None:
  """Feeds what decides the tokenizer's output into `digest` (duck-typed)."""
  digest.update(type(tokenizer).__qualname__.encode())
  vocab = getattr(tokenizer, "vocab", None)
  if vocab is not None:
    for token, index in sorted(vocab.items(), key=lambda kv: (kv[1], kv[0])):
      digest.update(f"{index}\t{token}\n".encode())
  basic = getattr(tokenizer, "basic_tokenizer", None)
  do_lower_case = getattr(tokenizer, "do_lower_case", getattr(basic, "do_lower_case", None))
  probe = list(tokenizer.tokenize(_TOKENIZER_PROBE))
  try:
    probe_ids = [int(i) for i in tokenizer.convert_tokens_to_ids(probe)]
  except KeyError:  # a vocabulary without [UNK]; the tokens still identify it
    probe_ids = None
  digest.update(json.dumps({"do_lower_case": do_lower_case, "probe": probe,
                            "probe_ids": probe_ids}, ensure_ascii=False).encode())


def features_fingerprint(examples, label_list, max_seq_length, tokenizer) -> str:
  """SHA-256 of everything a record's content depends on.

  Hashes the examples' texts and labels (the TSV content as read, so a changed
  row or a different column choice both count, guids do not), padding
  examples, the label list, max_seq_length, the record format and the
  tokenizer (vocabulary, do_lower_case, and the tokens of a fixed probe text).
  """
  digest = hashlib.sha256()
  digest.update(json.dumps({"format": _RECORD_FORMAT, "max_seq_length": max_seq_length,
                            "label_list": None if label_list is None else list(label_list)},
                           sort_keys=True).encode())
  _tokenizer_fingerprint(tokenizer, digest)
  for example in examples:
    if isinstance(example, PaddingInputExample):
      row = ["<padding>"]
    else:
      row = [example.text_a, example.text_b, example.label]
    digest.update(json.dumps(row, ensure_ascii=False).encode() + b"\n")
  return digest.hexdigest()


def _meta_path(record_file: str) -> str:
  return record_file + ".meta.json"


def ensure_feature_record(examples, label_list, max_seq_length, tokenizer,
                          output_file) -> int:
  """Reuses `output_file` if it still matches its inputs, else rebuilds it.

  The sidecar `<output_file>.meta.json` stores the fingerprint (see
  `features_fingerprint`) and counts. It is removed before a rebuild and
  written after the record is in place, so a crash in between leaves no meta
  and the next run rebuilds rather than trusting a stale record.

  Returns:
    The number of records (padding included).
  """
  fingerprint = features_fingerprint(examples, label_list, max_seq_length, tokenizer)
  meta_file = _meta_path(output_file)
  if tf.io.gfile.exists(output_file) and tf.io.gfile.exists(meta_file):
    try:
      with tf.io.gfile.GFile(meta_file, "r") as f:
        meta = json.load(f)
    except (ValueError, tf.errors.OpError):
      meta = {}
    if meta.get("fingerprint") == fingerprint:
      logging.info("Reusing %s (%d examples): its inputs are unchanged",
                   output_file, meta["num_examples"])
      return int(meta["num_examples"])
    logging.info("Rebuilding %s: its inputs changed", output_file)
  if tf.io.gfile.exists(meta_file):
    tf.io.gfile.remove(meta_file)
  file_based_convert_examples_to_features(examples, label_list, max_seq_length, tokenizer,
                                          output_file)
  num_real = sum(not isinstance(e, PaddingInputExample) for e in examples)
  meta = {"fingerprint": fingerprint, "num_examples": len(examples),
          "num_real_examples": num_real, "max_seq_length": max_seq_length,
          "is_regression": label_list is None,
          "label_list": None if label_list is None else list(label_list)}
  file_io.atomic_write(meta_file, json.dumps(meta, indent=2, sort_keys=True) + "\n",
                       what="the feature record's description")
  return len(examples)


def make_dataset(record_file: str, max_seq_length: int, batch_size: int, is_training: bool,
                 drop_remainder: bool, is_regression: bool = False,
                 seed: Optional[int] = None, pad_to_multiple_of: Optional[int] = None,
                 group_by_length: bool = False,
                 pack_sequences: bool = False) -> tf.data.Dataset:
  """Reads a feature record as batches (the original's file_based_input_fn_builder).

  Training repeats forever and shuffles with a buffer of 100, as the original
  (records are written in file order, so the buffer only mixes neighbours).
  Padding and grouping by length: runtime/records.read_batches' arguments of
  the same names; eval/predict batches grouped by length carry each example's
  `records.INPUT_INDEX`, by which prediction.predict restores file order, which
  `test_results.tsv` relies on.

  Returns:
    Dataset of (features, label_ids): features holds int32 "input_ids",
    "input_mask", "segment_ids" [batch, max_seq_length or less] and int32
    "is_real_example" [batch]; label_ids is int32 [batch] (float32 for
    regression). int64 is cast to int32 as the original did for TPUs. With
    drop_remainder the batch dimension is static. For Keras' (x, y,
    sample_weight): `ds.map(lambda f, y: ({k: f[k] for k in MODEL_INPUT_KEYS},
    y, tf.cast(f["is_real_example"], tf.float32)))`.
    With `pack_sequences`, batches of `batch_size` packed rows
    (runtime/packing.py): the per-example features and label_ids [rows, K].
  """
  name_to_features = records.sequence_features(max_seq_length)
  name_to_features.update(
      label_ids=tf.io.FixedLenFeature([], tf.float32 if is_regression else tf.int64),
      is_real_example=tf.io.FixedLenFeature([], tf.int64))

  def split_labels(example):
    label_ids = example.pop("label_ids")
    return example, label_ids

  return records.read_batches(record_file, name_to_features, batch_size, is_training,
                              drop_remainder, seed, pad_to_multiple_of,
                              group_by_length,
                              pack_sequences=pack_sequences).map(split_labels)


def pad_examples_for_tpu(examples: Sequence, batch_size: int) -> list:
  """Appends `PaddingInputExample`s until len is a multiple of `batch_size`.

  TPUs need full batches; padding keeps every real example (the original's
  earlier versions dropped the last partial batch). Logs
  "  Num examples = %d (%d actual, %d padding)" as the original.

  Returns:
    A new list; `examples` is not modified.
  """
  if batch_size < 1:
    raise ValueError(f"batch_size must be >= 1, got {batch_size}")
  padded = list(examples)
  num_actual = len(padded)
  padded += [PaddingInputExample() for _ in range(-num_actual % batch_size)]
  logging.info("  Num examples = %d (%d actual, %d padding)", len(padded), num_actual,
               len(padded) - num_actual)
  return padded
