"""SquadExamples -> InputFeatures -> TFRecords -> tf.data: the original's features.

Follows google-research/bert `run_squad.py` (which adapter-bert keeps
unchanged). Model Garden's `official/nlp/data/squad_lib.py` is a fork of that
file; we reuse the parts that are still identical to the original and write
the rest here, because Model Garden's versions differ in ways that change the
written data (see the comments on each function):

* reused unchanged: `InputFeatures` (its two extra fields default to None and
  are never set here), `_improve_answer_span`, `_check_is_max_context`;
* written here: feature conversion (no XLNet branch, the original
  `is_impossible`, no padding features in prediction mode), record writing
  (no extra fields, atomic) and the tf.data builder.

The examples come from squad/examples.py.
"""

import collections
from typing import Callable, Iterable, Iterator, List, Optional

from absl import logging
import tensorflow as tf

from official.nlp.data import squad_lib as _mg

from adapter_bert.runtime import records
from adapter_bert.squad.examples import SquadExample
from adapter_bert.storage import file_io

# Identical to the original's classes and helpers (checked line by line).
InputFeatures = _mg.InputFeatures
_improve_answer_span = _mg._improve_answer_span  # pylint: disable=protected-access
_check_is_max_context = _mg._check_is_max_context  # pylint: disable=protected-access

# The original numbers features from here so that ids never collide with
# example indices; predictions are matched back to features by this id.
FIRST_UNIQUE_ID = 1000000000

_DocSpan = collections.namedtuple("DocSpan", ["start", "length"])
# A document's word pieces (tokens), the word of each piece (tok_to_orig_index)
# and the first piece of each word (orig_to_tok_index).
_Document = collections.namedtuple("Document", ["tokens", "tok_to_orig_index",
                                                "orig_to_tok_index"])
# An answer's first and last word piece in its document (inclusive).
_TokenSpan = collections.namedtuple("TokenSpan", ["start", "end"])


# --------------------------------------------------------------------------
# SquadExample -> InputFeatures
# --------------------------------------------------------------------------


def _doc_spans(num_doc_tokens: int, max_tokens_for_doc: int,
               doc_stride: int) -> List[_DocSpan]:
  """Sliding windows of up to `max_tokens_for_doc` tokens, `doc_stride` apart.

  The last window ends at the last token (it may be shorter). A document without
  tokens (an empty, blank or control-character context) gets one empty window:
  the original gave it no feature, so its question had no prediction (SQuAD
  v2.0's post-processing failed with an IndexError); with [CLS] question [SEP]
  [SEP] the model still scores the null answer, and v1.1 predicts as for a
  question none of whose candidates fit.
  """
  if num_doc_tokens == 0:
    return [_DocSpan(start=0, length=0)]
  doc_spans = []
  start_offset = 0
  while start_offset < num_doc_tokens:
    length = min(num_doc_tokens - start_offset, max_tokens_for_doc)
    doc_spans.append(_DocSpan(start=start_offset, length=length))
    if start_offset + length == num_doc_tokens:
      break
    start_offset += min(length, doc_stride)
  return doc_spans


def convert_examples_to_features(examples: Iterable[SquadExample], tokenizer,
                                 max_seq_length: int, doc_stride: int,
                                 max_query_length: int, is_training: bool,
                                 output_fn: Callable[[InputFeatures], None]
                                 ) -> int:
  """Converts examples to fixed-length features, one per doc span.

  The original algorithm. Model Garden's `convert_examples_to_features`
  differs in what it writes, so it is not used:
  * it sets `is_impossible` to "this span lacks the answer"; the original
    keeps the example's flag (out-of-span training features get positions
    0/0 but is_impossible=0);
  * in prediction mode it appends padding copies of the last feature and
    calls `output_fn(feature, is_padding=...)`; the original writes every
    feature once and lets the last batch be partial;
  * it builds paragraph_mask/class_index and has an XLNet layout.

  Layout: [CLS] query [SEP] doc-span [SEP], segment ids 0 / 1, zero padding.

  Args:
    examples: `SquadExample`s.
    tokenizer: a `FullTokenizer` (tokenize, convert_tokens_to_ids).
    max_seq_length: length of every feature.
    doc_stride: distance between the starts of consecutive doc spans.
    max_query_length: questions are cut to this many word pieces.
    is_training: compute start/end positions.
    output_fn: called with each `InputFeatures`, in order.

  Returns:
    The number of features produced (unique ids run from 1000000000).

  Raises:
    ValueError: if a question leaves no room for the document, i.e.
      max_seq_length - len(query tokens) - 3 <= 0, or doc_stride <= 0.
  """
  if doc_stride <= 0:
    # _doc_spans would never advance.
    raise ValueError("doc_stride (%d) must be positive" % doc_stride)
  unique_id = FIRST_UNIQUE_ID
  for (example_index, example) in enumerate(examples):
    for feature in _example_features(example, example_index, unique_id, tokenizer,
                                     max_seq_length, doc_stride, max_query_length,
                                     is_training):
      output_fn(feature)
      unique_id += 1
  return unique_id - FIRST_UNIQUE_ID


def _example_features(example: SquadExample, example_index: int, first_unique_id: int,
                      tokenizer, max_seq_length: int, doc_stride: int,
                      max_query_length: int, is_training: bool) -> Iterator[InputFeatures]:
  """The features of one example, one per doc span, numbered from `first_unique_id`.

  The original's steps: tokenize the question (cut to max_query_length) and the
  document, find the answer's word pieces (training), slide windows over the
  document, and lay out, pad and label each window.
  """
  query_tokens = tokenizer.tokenize(example.question_text)[0:max_query_length]
  document = _tokenize_document(example.doc_tokens, tokenizer)
  answer = None
  if is_training and not example.is_impossible:
    answer = _answer_tokens(example, document, tokenizer)
  doc_spans = _doc_spans(len(document.tokens),
                         _max_tokens_for_doc(example, query_tokens, max_seq_length,
                                             max_query_length),
                         doc_stride)
  for (doc_span_index, doc_span) in enumerate(doc_spans):
    tokens, segment_ids, token_to_orig_map, token_is_max_context = _span_layout(
        query_tokens, document, doc_spans, doc_span_index)
    input_ids, input_mask, segment_ids = _padded_inputs(
        tokenizer.convert_tokens_to_ids(tokens), segment_ids, max_seq_length)
    start_position = end_position = None
    if is_training:
      # An impossible question points at [CLS] (position 0) in every span.
      start_position, end_position = (
          (0, 0) if example.is_impossible else
          _answer_positions(answer, doc_span, len(query_tokens)))
    unique_id = first_unique_id + doc_span_index
    if example_index < 20:
      _log_feature(unique_id, example_index, doc_span_index, tokens,
                   token_to_orig_map, token_is_max_context, input_ids,
                   input_mask, segment_ids, start_position, end_position,
                   is_training and example.is_impossible)
    yield InputFeatures(
        unique_id=unique_id,
        example_index=example_index,
        doc_span_index=doc_span_index,
        tokens=tokens,
        token_to_orig_map=token_to_orig_map,
        token_is_max_context=token_is_max_context,
        input_ids=input_ids,
        input_mask=input_mask,
        segment_ids=segment_ids,
        start_position=start_position,
        end_position=end_position,
        is_impossible=example.is_impossible)


def _tokenize_document(doc_tokens: List[str], tokenizer) -> _Document:
  """The word pieces of a document's words, with the maps between the two."""
  tok_to_orig_index = []
  orig_to_tok_index = []
  all_doc_tokens = []
  for (i, token) in enumerate(doc_tokens):
    orig_to_tok_index.append(len(all_doc_tokens))
    for sub_token in tokenizer.tokenize(token):
      tok_to_orig_index.append(i)
      all_doc_tokens.append(sub_token)
  return _Document(all_doc_tokens, tok_to_orig_index, orig_to_tok_index)


def _answer_tokens(example: SquadExample, document: _Document, tokenizer) -> _TokenSpan:
  """An answerable training example's answer as word pieces of its document.

  From the first piece of its first word to the last piece of its last word,
  then tightened to the pieces that spell the answer text (_improve_answer_span:
  "(1895-1943)." holds the answer "1895" as pieces, not as words).
  """
  start = document.orig_to_tok_index[example.start_position]
  if example.end_position < len(example.doc_tokens) - 1:
    end = document.orig_to_tok_index[example.end_position + 1] - 1
  else:
    end = len(document.tokens) - 1
  return _TokenSpan(*_improve_answer_span(document.tokens, start, end, tokenizer,
                                          example.orig_answer_text))


def _max_tokens_for_doc(example: SquadExample, query_tokens: List[str],
                        max_seq_length: int, max_query_length: int) -> int:
  """How many document pieces fit beside the question, [CLS] and two [SEP]s.

  Raises:
    ValueError: when none fit: the original loops forever (or builds
      negative-length spans) then.
  """
  max_tokens_for_doc = max_seq_length - len(query_tokens) - 3
  if max_tokens_for_doc <= 0:
    raise ValueError(
        "--max_seq_length=%d leaves no room for the document of question "
        "%r (%d query tokens, --max_query_length=%d): need max_seq_length "
        "- query tokens - 3 > 0; raise --max_seq_length or lower "
        "--max_query_length" % (max_seq_length, example.qas_id,
                                len(query_tokens), max_query_length))
  return max_tokens_for_doc


def _span_layout(query_tokens: List[str], document: _Document,
                 doc_spans: List[_DocSpan], doc_span_index: int):
  """[CLS] query [SEP] doc-span [SEP] of one span, unpadded.

  Returns:
    tokens and segment_ids (0 up to the first [SEP], then 1), lists as long as
    each other; token_to_orig_map (position in tokens -> word of the document)
    and token_is_max_context (position -> whether this span gives the piece its
    most context of all the spans holding it; prediction keeps only answers
    that start in such a piece), dicts over the span's positions.
  """
  doc_span = doc_spans[doc_span_index]
  tokens = ["[CLS]"] + query_tokens + ["[SEP]"]
  segment_ids = [0] * len(tokens)
  token_to_orig_map = {}
  token_is_max_context = {}
  for i in range(doc_span.length):
    split_token_index = doc_span.start + i
    token_to_orig_map[len(tokens)] = document.tok_to_orig_index[split_token_index]
    token_is_max_context[len(tokens)] = _check_is_max_context(
        doc_spans, doc_span_index, split_token_index)
    tokens.append(document.tokens[split_token_index])
    segment_ids.append(1)
  tokens.append("[SEP]")
  segment_ids.append(1)
  return tokens, segment_ids, token_to_orig_map, token_is_max_context


def _padded_inputs(input_ids, segment_ids: List[int], max_seq_length: int):
  """input_ids, input_mask, segment_ids: int lists of max_seq_length, zero-padded.

  The mask is 1 for real tokens, 0 for padding: only real tokens are attended to.
  """
  input_mask = [1] * len(input_ids)
  padding = [0] * (max_seq_length - len(input_ids))
  return list(input_ids) + padding, input_mask + padding, segment_ids + padding


def _answer_positions(answer: _TokenSpan, doc_span: _DocSpan, num_query_tokens: int):
  """The answer's start and end positions in a span's feature, both inclusive.

  A span without the whole answer is kept but points at [CLS] (0, 0), as for
  impossible questions.
  """
  doc_start = doc_span.start
  doc_end = doc_span.start + doc_span.length - 1
  if not (answer.start >= doc_start and answer.end <= doc_end):
    return 0, 0
  doc_offset = num_query_tokens + 2  # [CLS] query [SEP]
  return answer.start - doc_start + doc_offset, answer.end - doc_start + doc_offset


def _log_feature(unique_id, example_index, doc_span_index, tokens,
                 token_to_orig_map, token_is_max_context, input_ids,
                 input_mask, segment_ids, start_position, end_position,
                 impossible):
  """The original's "*** Example ***" log of the first examples."""
  logging.info("*** Example ***")
  logging.info("unique_id: %s", unique_id)
  logging.info("example_index: %s", example_index)
  logging.info("doc_span_index: %s", doc_span_index)
  logging.info("tokens: %s", " ".join(tokens))
  logging.info("token_to_orig_map: %s", " ".join(
      "%d:%d" % (x, y) for (x, y) in token_to_orig_map.items()))
  logging.info("token_is_max_context: %s", " ".join(
      "%d:%s" % (x, y) for (x, y) in token_is_max_context.items()))
  logging.info("input_ids: %s", " ".join(str(x) for x in input_ids))
  logging.info("input_mask: %s", " ".join(str(x) for x in input_mask))
  logging.info("segment_ids: %s", " ".join(str(x) for x in segment_ids))
  if impossible:
    logging.info("impossible example")
  elif start_position is not None:
    logging.info("start_position: %d", start_position)
    logging.info("end_position: %d", end_position)
    logging.info("answer: %s",
                 " ".join(tokens[start_position:(end_position + 1)]))


# --------------------------------------------------------------------------
# InputFeatures -> TFRecord -> tf.data
# --------------------------------------------------------------------------


class FeatureWriter:
  """Writes `InputFeatures` as tf.train.Examples, atomically.

  Records carry the original's fields only: unique_ids, input_ids,
  input_mask, segment_ids and, for training, start_positions, end_positions,
  is_impossible (Model Garden adds paragraph_mask / class_index).

  Records go to a temp file that is renamed to `filename` on `close()`; on an
  error inside a `with` block the temp file is removed, so a failed
  conversion never leaves a partial record file behind for a later run.

      with FeatureWriter(path, is_training=False, keep_features=True) as w:
        convert_examples_to_features(..., output_fn=w.process_feature)
      eval_features = w.features
  """

  def __init__(self, filename: str, is_training: bool,
               keep_features: bool = False):
    self.filename = filename
    self.is_training = is_training
    self.num_features = 0
    # Prediction needs the features again for post-processing; training does
    # not, and keeping ~100k of them would waste memory.
    self.features: Optional[List[InputFeatures]] = [] if keep_features else None
    self._file = file_io.AtomicFile(filename, what="the feature record")
    self._writer = tf.io.TFRecordWriter(self._file.temp)

  def process_feature(self, feature: InputFeatures) -> None:
    """Serializes one feature (the `output_fn` of the conversion)."""

    def int_feature(values):
      return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

    features = collections.OrderedDict()
    features["unique_ids"] = int_feature([feature.unique_id])
    features["input_ids"] = int_feature(feature.input_ids)
    features["input_mask"] = int_feature(feature.input_mask)
    features["segment_ids"] = int_feature(feature.segment_ids)
    if self.is_training:
      features["start_positions"] = int_feature([feature.start_position])
      features["end_positions"] = int_feature([feature.end_position])
      features["is_impossible"] = int_feature([int(bool(feature.is_impossible))])
    example = tf.train.Example(features=tf.train.Features(feature=features))
    self._writer.write(example.SerializeToString())
    self.num_features += 1
    if self.features is not None:
      self.features.append(feature)

  def close(self) -> None:
    """Finishes the file and moves it into place."""
    self._writer.close()
    self._file.commit()

  def abort(self) -> None:
    """Drops everything written so far."""
    self._writer.close()
    self._file.abort()

  def __enter__(self):
    return self

  def __exit__(self, exc_type, exc, tb):
    if exc_type is None:
      self.close()
    else:
      self.abort()
    return False


def make_dataset(record_file, max_seq_length: int, batch_size: int,
                 is_training: bool, drop_remainder: bool,
                 seed: Optional[int] = None, pad_to_multiple_of: Optional[int] = None,
                 group_by_length: bool = False,
                 fill_last_batch: Optional[dict] = None,
                 pack_sequences: bool = False) -> tf.data.Dataset:
  """Reads feature records as batches of int32 tensors (original input_fn).

  Args:
    record_file: a record file path (or list of paths).
    max_seq_length: the length the records were written with.
    batch_size: batch size.
    is_training: repeat forever and shuffle (buffer 100, as the original,
      which pre-shuffles the examples instead of using a large buffer), and
      read start_positions / end_positions.
    drop_remainder: drop a last partial batch, which gives static batch
      shapes (needed on TPU / for training); prediction keeps every feature.
    seed: shuffle seed (training only), for reproducible runs.
    pad_to_multiple_of, group_by_length, fill_last_batch, pack_sequences: how
      batches are padded, grouped by length, filled or packed
      (runtime/records.read_batches); packed, `batch_size` is in rows.

  Returns:
    A dataset of dicts: unique_ids [B], input_ids / input_mask / segment_ids
    [B, max_seq_length or less] and, for training, start_positions / end_positions
    [B] (prediction batches grouped by length: also records.INPUT_INDEX [B]);
    all int32 (tf.Example only stores int64; accelerators prefer int32).
    Packed: B rows of max_seq_length, the per-feature ones [B, K] (runtime/packing.py).
  """
  name_to_features = records.sequence_features(max_seq_length)
  name_to_features["unique_ids"] = tf.io.FixedLenFeature([], tf.int64)
  if is_training:
    name_to_features["start_positions"] = tf.io.FixedLenFeature([], tf.int64)
    name_to_features["end_positions"] = tf.io.FixedLenFeature([], tf.int64)
  return records.read_batches(record_file, name_to_features, batch_size, is_training,
                              drop_remainder, seed, pad_to_multiple_of, group_by_length,
                              fill_last_batch, pack_sequences)
