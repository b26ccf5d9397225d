"""BERT WordPiece tokenization: the original Python tokenizer and an in-graph twin.

The Python classes are google-research/bert `tokenization.py`, taken from TF Model
Garden (`official/nlp/tools/tokenization.py`, a fork of it) wherever it behaves the
same. Importing that module also imports `tf_keras` (its header does), which adds
about 0.2 s; it does not touch Keras 3.

`InGraphTokenizer` runs the same tokenization as TensorFlow ops (tensorflow_text),
so it works inside `tf.data` and `tf.function`, and yields the same ids as
`FullTokenizer` on the same vocab file.
"""

import collections
from typing import Dict, Optional

import tensorflow as tf
import tensorflow_text as tf_text
from official.nlp.tools import tokenization as _mg

from adapter_bert import errors
from adapter_bert.storage import input_files

# Identical to the original: re-exported unchanged.
convert_to_unicode = _mg.convert_to_unicode
printable_text = _mg.printable_text
convert_by_vocab = _mg.convert_by_vocab
convert_tokens_to_ids = _mg.convert_tokens_to_ids
convert_ids_to_tokens = _mg.convert_ids_to_tokens
whitespace_tokenize = _mg.whitespace_tokenize
BasicTokenizer = _mg.BasicTokenizer
_is_whitespace = _mg._is_whitespace  # pylint: disable=protected-access
_is_control = _mg._is_control  # pylint: disable=protected-access
_is_punctuation = _mg._is_punctuation  # pylint: disable=protected-access


def validate_case_matches_checkpoint(do_lower_case: bool, init_checkpoint: Optional[str]):
  """The original's check that --do_lower_case fits a Google checkpoint's name
  (Model Garden's copy), its ValueError as a user error."""
  try:
    _mg.validate_case_matches_checkpoint(do_lower_case, init_checkpoint)
  except ValueError as e:
    raise errors.UserError(str(e).strip()) from e


# The original maps words longer than this to [UNK]; Model Garden raised it to 400.
MAX_INPUT_CHARS_PER_WORD = 200


def load_vocab(vocab_file: str) -> "collections.OrderedDict[str, int]":
  """Reads a vocabulary file (one token per line) into {token: line index}.

  The original's dict: the id of a token is its 0-based line number (lines
  split at line feeds only, tokens stripped). Reads through tf.io.gfile (gs://,
  ram://). Unlike Model Garden's copy, which drops undecodable bytes, a file
  that is missing, empty or not UTF-8 is an errors.UserError naming it (and
  the line).
  """
  # Strict UTF-8: a byte-order mark would be part of the first token, as in
  # the original.
  text = input_files.read_text(vocab_file, "vocabulary file", encoding="utf-8")
  lines = text.split("\n")
  if lines[-1] == "":  # After the last newline: not a line.
    lines.pop()
  if not lines:
    raise errors.UserError("empty vocabulary file", vocab_file)
  vocab = collections.OrderedDict()
  for index, line in enumerate(lines):
    vocab[line.strip()] = index
  return vocab


class WordpieceTokenizer(_mg.WordpieceTokenizer):
  """Greedy longest-match-first WordPiece, with the original 200-char word limit."""

  def __init__(self, vocab: Dict[str, int], unk_token: str = "[UNK]",
               max_input_chars_per_word: int = MAX_INPUT_CHARS_PER_WORD):
    """Args: vocab: token -> id; unk_token: str; max_input_chars_per_word: int."""
    super().__init__(vocab, unk_token=unk_token,
                     max_input_chars_per_word=max_input_chars_per_word)


class FullTokenizer(_mg.FullTokenizer):
  """BasicTokenizer followed by WordpieceTokenizer, as in the original.

  Attributes: vocab (OrderedDict str -> int), inv_vocab (dict int -> str),
  basic_tokenizer, wordpiece_tokenizer.
  """

  def __init__(self, vocab_file: str, do_lower_case: bool = True):
    """Args: vocab_file: str, one token per line; do_lower_case: bool."""
    # The original's constructor: Model Garden's reads the vocabulary with its
    # own load_vocab (no errors for bad files) and a 400-character word limit.
    self.vocab = load_vocab(vocab_file)
    self.inv_vocab = {v: k for k, v in self.vocab.items()}
    self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
    self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)


# What the original's BasicTokenizer._clean_text deletes: U+0000, U+FFFD and
# categories Cc/Cf except \t \n \r. tensorflow_text turns Cc/Cf into spaces
# instead (splitting "a\x07b" into two words), so they go before it sees them.
_DELETE_PATTERN = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\x{fffd}]|\p{Cf}"
# Original whitespace: \t \n \r, category Zs, and U+2028/U+2029, which survive
# _clean_text but split words in str.split(). RE2's \s is ASCII only, so
# tensorflow_text alone would keep e.g. U+00A0 inside a word.
_SPACE_PATTERN = r"[\t\n\r\p{Zs}\x{2028}\x{2029}]"
# Word boundaries of the original _run_split_on_punc / _tokenize_chinese_chars
# (the same as tensorflow_text's private BasicTokenizer): ASCII non-alphanumerics
# and \p{P} are punctuation; CJK ideographs are single-character words.
_KEEP_PATTERN = "|".join([
    r"[!-/:-@\[-`{-~]", r"\p{P}",
    r"[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}]",
    r"[\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]"])
_SPLIT_PATTERN = " +|" + _KEEP_PATTERN


class InGraphTokenizer(tf.Module):
  """FullTokenizer as TensorFlow ops; usable in tf.data.Dataset.map and tf.function.

  Built on tensorflow_text's regex_split and WordpieceTokenizer, with in-graph
  clean-up that reproduces the original where tensorflow_text's BertTokenizer
  differs:
  deletion (not splitting) of control/format characters, U+0000 and U+FFFD;
  Unicode whitespace; lower-casing with `str.lower` semantics instead of
  tensorflow_text's NFKC case folding (which maps e.g. "ﬁ" to "fi", "²" to "2");
  invalid UTF-8 dropped as `convert_to_unicode` does; and words longer than 200
  characters mapped to [UNK] (tensorflow_text counts bytes, with a limit of 100).
  Checked on every code point: the only remaining differences are characters
  whose Unicode data changed after Unicode 14 (Python 3.11's unicodedata), where
  TensorFlow's ICU/RE2 tables are older (lower-casing) or newer (categories, NFD).
  """

  def __init__(self, vocab_file: str, do_lower_case: bool = True,
               unk_token: str = "[UNK]",
               max_input_chars_per_word: int = MAX_INPUT_CHARS_PER_WORD,
               name: Optional[str] = None):
    """Args: vocab_file: str (gfile path); do_lower_case: bool; unk_token: str;
    max_input_chars_per_word: int; name: optional module name."""
    super().__init__(name=name)
    self.vocab = load_vocab(vocab_file)  # Same dict as FullTokenizer.vocab.
    self.do_lower_case = do_lower_case
    self.unk_token = unk_token
    self.max_input_chars_per_word = max_input_chars_per_word
    self.table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(list(self.vocab.keys()), tf.string),
            tf.constant(list(self.vocab.values()), tf.int64)),
        default_value=-1)
    self._wordpiece = tf_text.WordpieceTokenizer(
        self.table, suffix_indicator="##",
        # Byte limit high enough for any word within the character limit.
        max_bytes_per_word=4 * max_input_chars_per_word,
        max_chars_per_token=max_input_chars_per_word,
        token_out_type=tf.int64, unknown_token=unk_token)

  def _normalize(self, texts: tf.Tensor) -> tf.Tensor:
    """Returns the string Tensor (same shape) cleaned, lower-cased, accents stripped."""
    texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8",
                                         errors="ignore")
    texts = tf.strings.regex_replace(texts, _DELETE_PATTERN, "")
    texts = tf.strings.regex_replace(texts, _SPACE_PATTERN, " ")
    if self.do_lower_case:
      texts = tf.strings.lower(texts, encoding="utf-8")
      texts = tf_text.normalize_utf8(texts, "NFD")
      texts = tf.strings.regex_replace(texts, r"\p{Mn}", "")
    return texts

  def tokenize_words(self, texts: tf.Tensor) -> tf.RaggedTensor:
    """BasicTokenizer: string Tensor [batch] -> string RaggedTensor [batch, (words)].

    Words over the character limit are already replaced by the unknown token.
    """
    # tensorflow_text's BasicTokenizer is not public API, so split here.
    words = tf_text.regex_split(self._normalize(texts), _SPLIT_PATTERN,
                                _KEEP_PATTERN)
    too_long = (tf.strings.length(words.flat_values, unit="UTF8_CHAR")
                > self.max_input_chars_per_word)
    return words.with_flat_values(
        tf.where(too_long, self.unk_token, words.flat_values))

  def __call__(self, texts: tf.Tensor) -> tf.RaggedTensor:
    """Tokenizes a batch of strings.

    Args:
      texts: string Tensor of shape [batch_size] (UTF-8).

    Returns:
      int32 RaggedTensor of shape [batch_size, (num_wordpieces)] with vocab ids.
    """
    texts = tf.convert_to_tensor(texts, tf.string)
    ids = self._wordpiece.tokenize(self.tokenize_words(texts))
    return tf.cast(ids.merge_dims(-2, -1), tf.int32)


def build_bert_inputs(ids_a: tf.RaggedTensor, ids_b: Optional[tf.RaggedTensor],
                      seq_length: int, cls_id: int,
                      sep_id: int) -> Dict[str, tf.Tensor]:
  """Packs wordpiece ids as the original `convert_single_example` does.

  "[CLS] a [SEP]" or "[CLS] a [SEP] b [SEP]", truncated to `seq_length` by
  removing tokens from the end of the longer segment (ties: from b), which is
  what tensorflow_text's RoundRobinTrimmer keeps; zero-padded.

  Args:
    ids_a: int RaggedTensor [batch_size, (len_a)].
    ids_b: int RaggedTensor [batch_size, (len_b)] or None for single sentences.
    seq_length: int, the static output length.
    cls_id: int, id of "[CLS]".
    sep_id: int, id of "[SEP]".

  Returns:
    Dict of int32 Tensors of shape [batch_size, seq_length]: "input_ids",
    "input_mask" (1 for real tokens), "segment_ids" (0 for [CLS] a [SEP]).
  """
  segments = [ids_a] if ids_b is None else [ids_a, ids_b]
  budget = seq_length - 1 - len(segments)  # [CLS] and one [SEP] per segment.
  segments = tf_text.RoundRobinTrimmer(budget).trim(segments)
  ids, segment_ids = tf_text.combine_segments(
      segments, start_of_sequence_id=cls_id, end_of_segment_id=sep_id)
  input_ids, input_mask = tf_text.pad_model_inputs(ids, seq_length)
  segment_ids, _ = tf_text.pad_model_inputs(segment_ids, seq_length)
  return {"input_ids": tf.cast(input_ids, tf.int32),
          "input_mask": tf.cast(input_mask, tf.int32),
          "segment_ids": tf.cast(segment_ids, tf.int32)}
