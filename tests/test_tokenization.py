"""Tests for tokenization.py: the original google-research/bert tokenizer tests,
the 200-character word limit, and FullTokenizer == InGraphTokenizer on a mixed corpus."""

import itertools
import string

import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from adapter_bert import errors
from adapter_bert import tokenization

ORIGINAL_VOCAB = ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa",
                  "un", "runn", "##ing", ","]


def _write_vocab(path, tokens):
  with tf.io.gfile.GFile(str(path), "w") as f:
    f.write("".join(t + "\n" for t in tokens))
  return str(path)


# ---- The original tokenization_test.py -------------------------------------


def test_full_tokenizer(tmp_path):
  tokenizer = tokenization.FullTokenizer(
      _write_vocab(tmp_path / "vocab.txt", ORIGINAL_VOCAB))
  tokens = tokenizer.tokenize("UNwant\u00E9d,running")
  assert tokens == ["un", "##want", "##ed", ",", "runn", "##ing"]
  assert tokenizer.convert_tokens_to_ids(tokens) == [7, 4, 5, 10, 8, 9]
  assert tokenizer.convert_ids_to_tokens([7, 4, 5, 10, 8, 9]) == tokens
  assert tokenizer.inv_vocab[10] == "," and tokenizer.vocab["runn"] == 8


def test_chinese():
  tokenizer = tokenization.BasicTokenizer()
  assert tokenizer.tokenize("ah\u535A\u63A8zz") == ["ah", "\u535A", "\u63A8",
                                                    "zz"]


def test_basic_tokenizer_lower():
  tokenizer = tokenization.BasicTokenizer(do_lower_case=True)
  assert tokenizer.tokenize(" \tHeLLo!how  \n Are yoU?  ") == [
      "hello", "!", "how", "are", "you", "?"]
  assert tokenizer.tokenize("H\u00E9llo") == ["hello"]


def test_basic_tokenizer_no_lower():
  tokenizer = tokenization.BasicTokenizer(do_lower_case=False)
  assert tokenizer.tokenize(" \tHeLLo!how  \n Are yoU?  ") == [
      "HeLLo", "!", "how", "Are", "yoU", "?"]


def test_wordpiece_tokenizer():
  vocab = {token: i for i, token in enumerate(ORIGINAL_VOCAB[:-1])}
  tokenizer = tokenization.WordpieceTokenizer(vocab=vocab)
  assert tokenizer.tokenize("") == []
  assert tokenizer.tokenize("unwanted running") == [
      "un", "##want", "##ed", "runn", "##ing"]
  assert tokenizer.tokenize("unwantedX running") == ["[UNK]", "runn", "##ing"]
  assert tokenization.convert_tokens_to_ids(
      vocab, ["un", "##want", "##ed", "runn", "##ing"]) == [7, 4, 5, 8, 9]


def test_is_whitespace():
  for char in [" ", "\t", "\r", "\n", "\u00A0"]:
    assert tokenization._is_whitespace(char)
  for char in ["A", "-"]:
    assert not tokenization._is_whitespace(char)


def test_is_control():
  assert tokenization._is_control("\u0005")
  for char in ["A", " ", "\t", "\r", "\U0001F4A9"]:
    assert not tokenization._is_control(char)


def test_is_punctuation():
  for char in ["-", "$", "`", "."]:
    assert tokenization._is_punctuation(char)
  for char in ["A", " "]:
    assert not tokenization._is_punctuation(char)


def test_validate_case_matches_checkpoint():
  uncased = "gs://bucket/uncased_L-12_H-768_A-12/bert_model.ckpt"
  cased = "/models/cased_L-12_H-768_A-12/bert_model.ckpt"
  with pytest.raises(errors.UserError, match="seems to be a lowercased model"):
    tokenization.validate_case_matches_checkpoint(False, uncased)
  with pytest.raises(errors.UserError, match="`--do_lower_case=False` so that"):
    tokenization.validate_case_matches_checkpoint(True, cased)
  tokenization.validate_case_matches_checkpoint(True, uncased)
  tokenization.validate_case_matches_checkpoint(False, cased)
  tokenization.validate_case_matches_checkpoint(False, "/x/my_model/bert_model.ckpt")
  tokenization.validate_case_matches_checkpoint(False, None)


# ---- Word length limit (original 200; Model Garden's default is 400) --------


def test_words_over_200_chars_are_unknown(tmp_path):
  vocab = {"[UNK]": 0, "a": 1, "##a": 2}
  wordpiece = tokenization.WordpieceTokenizer(vocab=vocab)
  assert wordpiece.tokenize("a" * 200) == ["a"] + ["##a"] * 199
  assert wordpiece.tokenize("a" * 201) == ["[UNK]"]
  vocab_file = _write_vocab(tmp_path / "vocab.txt", list(vocab))
  full = tokenization.FullTokenizer(vocab_file)
  assert full.tokenize("A" * 201 + " " + "a" * 200)[:2] == ["[UNK]", "a"]
  in_graph = tokenization.InGraphTokenizer(vocab_file)
  assert in_graph(["a" * 201, "\u00e0" * 200]).to_list() == [[0], [1] + [2] * 199]


# ---- FullTokenizer == InGraphTokenizer ----------------------------------------

_CORPUS = [
    "UNwant\u00E9d,running", "ah\u535A\u63A8zz", " \tHeLLo!how  \n Are yoU?  ",
    "Caf\u00e9 \u00dcber ma\u00f1ana na\u00efve \u00c5NGSTR\u00d6M r\u00e9sum\u00e9s",
    "ab\x00cd e\x07f g\u200bh \ufffdij k\x7fl m\x1fn o\u00adp",  # Deleted chars.
    "tab\tsep\nnew\r\nline\u00a0nbsp\u3000ideo\u2028ls x\x0by\x0cz\x85w",
    "a" * 201 + " " + "b" * 200 + " B" * 3 + " " + "C" * 201,
    "\ufb01ne \u00b2 \u1e9e \u0130stanbul \u039f\u0394\u039f\u03a3 \uff21",
    "Punct: \u00bf\u00a1\u00abquo\u00bb\u2026 $100 #tag @user ^_^ ~x~ [CLS] \u3008x\u3009",
    "", "   ", "\x00\x07", "\u65e5\u672c\u8a9e\u306e \ud55c\uad6d\uc5b4 \uf900",
]
_RAW_BYTES = [b"ab\xffcd", b"x\xe2\x82y \xed\xa0\x80z"]  # Invalid UTF-8.
_CHARS = (string.ascii_letters + string.digits + "!?,.:;$#@^_~[]\u00bf\u00a1\u00ab"
          "\u00bb\u2026\u3008\u3009\u00e9\u00dc\u00f1\u00dfi\u535a\u63a8\u65e5"
          "\u672c\u8a9e\u306e\u03bf\u03b4\u03c2\u03a3")
_WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "un",
          "runn", "##ing", "hello", "HeLLo", "cafe", "Caf", "##\u00e9", "uber",
          "##ana", "naive", "##ve", "fine", "##ine", "tag", "user", "quo"]


def _vocab_tokens():
  tokens = list(_WORDS)
  for c in _CHARS:
    tokens += [c, "##" + c]
  return list(dict.fromkeys(tokens))  # Unique, order kept.


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_in_graph_ids_match_full_tokenizer(tmp_path, do_lower_case):
  vocab_file = _write_vocab(tmp_path / "vocab.txt", _vocab_tokens())
  full = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
  texts = [t.encode("utf-8") for t in _CORPUS] + _RAW_BYTES
  expected = [full.convert_tokens_to_ids(full.tokenize(t)) for t in texts]
  assert sum(len(e) for e in expected) > 100  # The corpus is not trivial.
  unk = full.vocab["[UNK]"]
  assert any(unk in e for e in expected) and any(
      i not in (unk, full.vocab["a"], full.vocab["##a"])
      for e in expected for i in e)

  in_graph = tokenization.InGraphTokenizer(vocab_file, do_lower_case)
  dataset = tf.data.Dataset.from_tensor_slices(texts).batch(4).map(in_graph)
  got = [row for batch in dataset for row in batch.to_list()]
  assert got == expected
  tokenize = tf.function(in_graph, input_signature=[
      tf.TensorSpec([None], tf.string)])
  assert tokenize(tf.constant(texts)).to_list() == expected


@pytest.mark.parametrize("do_lower_case,texts", [
    (True, ["g\x07h", "\ufb01ne", "\u1e9e", "\ufffdij", "a\u2028b", "b" * 200]),
    (False, ["g\u200bh", "line\u00a0nbsp", "a\u3000b", "\ufffdij", "b" * 200])])
def test_plain_tensorflow_text_differs_from_original(tmp_path, do_lower_case,
                                                     texts):
  """Documents why InGraphTokenizer pre-processes: BertTokenizer alone differs."""
  vocab_file = _write_vocab(tmp_path / "vocab.txt", _vocab_tokens())
  full = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
  in_graph = tokenization.InGraphTokenizer(vocab_file, do_lower_case)
  plain = tf_text.BertTokenizer(in_graph.table, lower_case=do_lower_case,
                                max_chars_per_token=200)
  for text in texts:
    expected = full.convert_tokens_to_ids(full.tokenize(text))
    assert in_graph([text]).to_list() == [expected], text
    assert plain.tokenize([text]).merge_dims(-2, -1).to_list() != [expected], text


def test_ram_filesystem_vocab():
  vocab_file = _write_vocab("ram://tokenization_test/vocab.txt", ORIGINAL_VOCAB)
  full = tokenization.FullTokenizer(vocab_file)
  assert full.convert_tokens_to_ids(full.tokenize("unwanted, running")) == [
      7, 4, 5, 10, 8, 9]
  in_graph = tokenization.InGraphTokenizer(vocab_file)
  assert in_graph(["unwanted, running"]).to_list() == [[7, 4, 5, 10, 8, 9]]


# ---- BERT inputs ------------------------------------------------------------


def _original_inputs(a, b, seq_length, cls_id=101, sep_id=102):
  """The original convert_single_example on id lists (incl. _truncate_seq_pair)."""
  a, b = list(a), None if b is None else list(b)
  if b is None:
    a = a[:seq_length - 2]
  else:
    while len(a) + len(b) > seq_length - 3:
      (a if len(a) > len(b) else b).pop()
  ids = [cls_id] + a + [sep_id] + ([] if b is None else b + [sep_id])
  segments = [0] * (len(a) + 2) + ([] if b is None else [1] * (len(b) + 1))
  pad = [0] * (seq_length - len(ids))
  return ids + pad, [1] * len(ids) + pad, segments + pad


def test_build_bert_inputs_matches_original_truncation():
  lengths = list(itertools.product(range(9), range(9)))
  ids_a = tf.ragged.constant([list(range(1, la + 1)) for la, _ in lengths])
  ids_b = tf.ragged.constant([list(range(51, 51 + lb)) for _, lb in lengths])
  for seq_length in (5, 8, 12):
    for b in (ids_b, None):
      features = tokenization.build_bert_inputs(ids_a, b, seq_length, 101, 102)
      for i, (la, lb) in enumerate(lengths):
        want = _original_inputs(range(1, la + 1),
                                None if b is None else range(51, 51 + lb),
                                seq_length)
        got = tuple(features[k][i].numpy().tolist()
                    for k in ("input_ids", "input_mask", "segment_ids"))
        assert got == want, (seq_length, la, lb)
  assert features["input_ids"].dtype == tf.int32
  # Hand-computed: [CLS] 1 2 [SEP] 51 [SEP] 0 0.
  one = tokenization.build_bert_inputs(
      tf.ragged.constant([[1, 2]]), tf.ragged.constant([[51]]), 8, 101, 102)
  assert one["input_ids"].numpy().tolist() == [[101, 1, 2, 102, 51, 102, 0, 0]]
  assert one["segment_ids"].numpy().tolist() == [[0, 0, 0, 0, 1, 1, 0, 0]]
