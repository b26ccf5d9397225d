"""Raw text to BERT inputs inside a SavedModel: tokenizer from an asset, per-task packing.

Each task was trained and predicted with its own --max_seq_length, and
run_classifier.py truncates a pair from the end of the longer segment to fit
it. A mixed batch therefore packs every example at its own task's length,
zero-padded to the longest task length: padding is masked, so the model sees
what run_classifier.py --do_predict fed it.
"""

from typing import Dict

import tensorflow as tf
import tensorflow_text as tf_text

from adapter_bert import tokenization

VOCAB_ASSET = "vocab.txt"


def write_vocab_asset(vocab_file: str, path: str) -> int:
  """Writes `vocab_file`'s token -> id mapping as a file whose line i is the token of id i.

  load_vocab strips each line and, for a token on several lines, keeps the
  last line's id; a lookup table read from the file itself (line number =
  id) would keep surrounding whitespace and fail on the duplicates. Ids that
  no token maps to get a placeholder with a space, which no word ever
  contains, so it is never looked up. For a clean vocabulary the file is a
  copy of the original.

  Returns:
    The number of lines (ids).
  """
  vocab = tokenization.load_vocab(vocab_file)
  size = max(vocab.values()) + 1
  lines = [f" unused id {i}" for i in range(size)]
  for token, index in vocab.items():
    if "\r" not in token:  # A line break for the table's reader; never looked up either.
      lines[index] = token
  with tf.io.gfile.GFile(path, "w") as f:
    f.write("\n".join(lines) + "\n")
  return size


class AssetTokenizer(tokenization.InGraphTokenizer):
  """tokenization.InGraphTokenizer whose vocabulary table reads a SavedModel asset.

  The table is initialised from a file (a tf.lookup.TextFileInitializer),
  which tf.saved_model.save copies into the SavedModel's assets/, so the
  exported directory is self-contained. Everything else is InGraphTokenizer's.
  """

  def __init__(self, vocab_asset: str, vocab_size: int, do_lower_case: bool = True,
               name: str = "tokenizer"):
    """Args: vocab_asset: a file from write_vocab_asset; vocab_size: its lines."""
    tf.Module.__init__(self, name=name)  # pylint: disable=non-parent-init-called
    self.do_lower_case = do_lower_case
    self.unk_token = "[UNK]"
    self.max_input_chars_per_word = tokenization.MAX_INPUT_CHARS_PER_WORD
    self.table = tf.lookup.StaticHashTable(
        tf.lookup.TextFileInitializer(
            vocab_asset, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE,
            tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER, vocab_size=vocab_size),
        default_value=-1)
    # As InGraphTokenizer builds it, on this table.
    self._wordpiece = tf_text.WordpieceTokenizer(
        self.table, suffix_indicator="##",
        max_bytes_per_word=4 * self.max_input_chars_per_word,
        max_chars_per_token=self.max_input_chars_per_word,
        token_out_type=tf.int64, unknown_token=self.unk_token)


def pack_per_example(ids_a: tf.RaggedTensor, ids_b: tf.RaggedTensor,
                     max_seq_length: tf.Tensor, seq_length: int, cls_id: int,
                     sep_id: int) -> Dict[str, tf.Tensor]:
  """[CLS] a [SEP] (b [SEP]) per example, truncated at its own max_seq_length.

  run_classifier.py's convert_single_example, with a length per example: a
  pair is cut to max_seq_length - 3 tokens by popping from the longer segment
  (from b on ties), a single segment to max_seq_length - 2. Popping from the
  longer until the pair fits leaves the shorter whole if it has at most half
  the budget, else b half of it (rounded down) and a the rest, so the kept
  lengths are arithmetic on the row lengths and the packing is dense ops (a
  fraction of the graph of tokenization.build_bert_inputs per length).

  Args:
    ids_a, ids_b: int32 RaggedTensors [batch_size, (tokens)]; an example whose
      b has no tokens gets the single-segment layout, as run_classifier.py
      gives it when text_b is empty or tokenizes to nothing (`if tokens_b:`).
    max_seq_length: int32 [batch_size], each example's length, 3 to seq_length.
    seq_length: the static output length.
    cls_id, sep_id: ids of [CLS] and [SEP].
  Returns:
    int32 "input_ids", "input_mask", "segment_ids" of shape
    [batch_size, seq_length], zero beyond each example's tokens.
  """
  len_a = tf.cast(ids_a.row_lengths(), tf.int32)[:, tf.newaxis]
  len_b = tf.cast(ids_b.row_lengths(), tf.int32)[:, tf.newaxis]
  has_b = len_b > 0
  budget = max_seq_length[:, tf.newaxis] - tf.where(has_b, 3, 2)
  keep_b = tf.minimum(len_b, tf.maximum(budget - len_a, budget // 2))  # 0 without b.
  keep_a = tf.minimum(len_a, budget - keep_b)
  # A b truncated away (max_seq_length 3 or 4) leaves the single-segment layout, as
  # run_classifier.py's `if tokens_b:` after truncation: no second [SEP].
  has_b = keep_b > 0
  dense_a = ids_a.to_tensor(0, shape=[None, seq_length])
  dense_b = ids_b.to_tensor(0, shape=[None, seq_length])

  j = tf.range(seq_length)[tf.newaxis, :]
  in_a = (j >= 1) & (j <= keep_a)
  in_b = has_b & (j >= keep_a + 2) & (j < keep_a + 2 + keep_b)
  second_sep = has_b & tf.equal(j, keep_a + keep_b + 2)
  def at(dense, index):  # dense[b, index[b, j]], any index outside read as position 0.
    index = tf.broadcast_to(tf.clip_by_value(index, 0, seq_length - 1), tf.shape(dense))
    return tf.gather(dense, index, batch_dims=1)

  input_ids = tf.where(in_a, at(dense_a, j - 1), 0)
  input_ids = tf.where(in_b, at(dense_b, j - keep_a - 2), input_ids)
  input_ids = tf.where(tf.equal(j, 0), cls_id, input_ids)
  input_ids = tf.where(tf.equal(j, keep_a + 1) | second_sep, sep_id, input_ids)
  total = keep_a + 2 + tf.where(has_b, keep_b + 1, 0)
  return {"input_ids": input_ids,
          "input_mask": tf.cast(j < total, tf.int32),
          "segment_ids": tf.cast(in_b | second_sep, tf.int32)}
