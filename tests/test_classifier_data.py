"""Tests for classification/processors.py and classification/features.py (run_classifier.py's data side).

Expected examples are read off the sample files in data/glue by hand; feature
layouts are hand-tokenized with a whitespace tokenizer whose ids are listed here.
"""

import logging
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from adapter_bert.classification import processors
from adapter_bert.classification import features as classifier_features
from adapter_bert.classification.processors import InputExample, PaddingInputExample
from adapter_bert.classification.tsv_files import TsvFormatError
from adapter_bert import errors
from adapter_bert import tokenization

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GLUE = os.path.join(ROOT, "data", "glue")
TSV_EXAMPLE = os.path.join(ROOT, "data", "tsv_example")

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "sat", "a", "dog", "ran", "on", "mat"]


class WhitespaceTokenizer:
  """Hand-checkable tokenizer: optional lower-casing, split on spaces, [UNK] for OOV."""

  def __init__(self, tokens=VOCAB, do_lower_case=True, fail_on=None):
    self.vocab = {t: i for i, t in enumerate(tokens)}
    self.do_lower_case = do_lower_case
    self.fail_on = fail_on  # text whose tokenization raises, to simulate a crash

  def tokenize(self, text):
    if text == self.fail_on:
      raise RuntimeError("simulated failure while converting")
    if self.do_lower_case:
      text = text.lower()
    return [t if t in self.vocab else "[UNK]" for t in text.split()]

  def convert_tokens_to_ids(self, tokens):
    return [self.vocab[t] for t in tokens]


def _examples(task, split, data_dir, **options):
  return getattr(processors.get_processor(task, **options), f"get_{split}_examples")(data_dir)


# (task, directory, split, count, first example) -- read off the sample files.
FIRST_EXAMPLES = [
    ("cola", "CoLA", "train", 8, InputExample(
        "train-0", "The kettle whistled before the water boiled over.", None, "1")),
    ("cola", "CoLA", "dev", 6, InputExample(
        "dev-0", "The gardener watered every plant twice.", None, "1")),
    ("cola", "CoLA", "test", 6, InputExample(
        "test-1", "The committee has finally reached a decision.", None, "0")),
    ("mrpc", "MRPC", "train", 8, InputExample(
        "train-1", "The council approved the new budget on Tuesday .",
        "On Tuesday , the council passed the new budget .", "1")),
    ("mrpc", "MRPC", "test", 6, InputExample(
        "test-1", "The storm knocked out power to 5,000 homes .",
        "About 5,000 homes lost power in the storm .", "0")),
    ("mnli", "MNLI", "train", 8, InputExample(
        "train-0", "The old lighthouse was repainted last summer.",
        "The lighthouse has never been painted.", "contradiction")),
    ("mnli", "MNLI", "dev", 6, InputExample(
        "dev_matched-0", "The chef closed her restaurant after ten years.",
        "The restaurant is still open.", "contradiction")),
    ("mnli", "MNLI", "test", 6, InputExample(
        "test-0", "The cat slept on the warm windowsill.", "The cat was awake.", "contradiction")),
    ("mnli-mm", "MNLI", "dev", 6, InputExample(
        "dev_mismatched-0", "Thank you for your generous gift to the shelter.",
        "The shelter received a gift.", "entailment")),
    ("MNLI_MM", "MNLI", "test", 6, InputExample(
        "test-0", "We are writing to ask for your support.", "The letter asks for help.",
        "contradiction")),
    ("xnli", "XNLI", "train", 8, InputExample(
        "train-1", "他每天早上骑自行车去上班。", "他开车上班。", "contradiction")),
    ("xnli", "XNLI", "dev", 4, InputExample(
        "dev-3", "他在图书馆学习了一整天。", "他明天有考试。", "neutral")),
    ("xnli", "XNLI", "test", 4, InputExample(
        "test-1", "她每周去游泳两次。", "她会游泳。", "contradiction")),
    ("sst-2", "SST-2", "train", 8, InputExample(
        "train-1", "a warm , unhurried portrait of a fishing village ", None, "1")),
    ("SST2", "SST-2", "test", 6, InputExample(
        "test-1", "a clever script undone by clumsy pacing ", None, "0")),
    ("sts-b", "STS-B", "train", 8, InputExample(
        "train-1", "A dog is running on the beach.", "A dog runs along the shore.", 4.2)),
    ("stsb", "STS-B", "test", 6, InputExample(
        "test-1", "A bird is perched on a wire.", "A bird sits on a power line.", 0.0)),
    ("qqp", "QQP", "dev", 6, InputExample(
        "dev-1", "How do I clean a cast iron pan?", "What is the right way to wash cast iron?", "1")),
    ("qqp", "QQP", "test", 6, InputExample(
        "test-1", "How do I fix a flat tire?", "What is the way to repair a flat bike tire?", "0")),
    ("qnli", "QNLI", "train", 8, InputExample(
        "train-1", "When did the bridge open?",
        "The bridge opened to traffic in 1932 after four years of work.", "entailment")),
    ("qnli", "QNLI", "test", 6, InputExample(
        "test-1", "When was the canal dug?", "The canal was dug between 1820 and 1825.",
        "entailment")),
    ("rte", "RTE", "dev", 6, InputExample(
        "dev-1", "The company was bought by a rival in 2004.", "A rival bought the company.",
        "entailment")),
    ("wnli", "WNLI", "train", 8, InputExample(
        "train-1", "The trophy did not fit in the bag because it was too big.",
        "The trophy was too big.", "1")),
    ("ax", "diagnostic", "test", 8, InputExample(
        "test-1", "The cat sat on the mat.", "The cat did not sit on the mat.", "contradiction")),
]


@pytest.mark.parametrize("task,directory,split,count,expected", FIRST_EXAMPLES,
                         ids=[f"{t}-{s}" for t, _, s, _, _ in FIRST_EXAMPLES])
def test_processor_reads_first_example(task, directory, split, count, expected):
  examples = _examples(task, split, os.path.join(GLUE, directory))
  assert len(examples) == count
  assert examples[0] == expected


def test_quotes_stay_in_the_text():
  cola = _examples("cola", "train", os.path.join(GLUE, "CoLA"))
  assert cola[2].text_a == '"Fine," she said, and closed the ledger.'
  mrpc = _examples("mrpc", "train", os.path.join(GLUE, "MRPC"))
  assert mrpc[2].text_a == 'The mayor called the plan " a fair compromise " .'
  assert mrpc[2].text_b == 'The plan is " a fair compromise , " the mayor said .'


def test_labels_and_regression_flags():
  assert processors.get_processor("mnli").get_labels() == ["contradiction", "entailment", "neutral"]
  assert processors.get_processor("ax").get_labels() == ["contradiction", "entailment", "neutral"]
  assert processors.get_processor("rte").get_labels() == ["entailment", "not_entailment"]
  assert processors.get_processor("mrpc").get_labels() == ["0", "1"]
  stsb = processors.get_processor("STS-B")
  assert stsb.is_regression and stsb.get_labels() is None and stsb.num_labels() == 1
  assert processors.get_processor("cola").num_labels() == 2


def test_xnli_keeps_one_language_and_renames_contradictory():
  train = _examples("xnli", "train", os.path.join(GLUE, "XNLI"))
  assert {e.label for e in train} == {"contradiction", "entailment", "neutral"}
  dev = _examples("xnli", "dev", os.path.join(GLUE, "XNLI"))
  # Rows 3, 4, 6, 8 are Chinese; guids count every language's rows.
  assert [e.guid for e in dev] == ["dev-3", "dev-4", "dev-6", "dev-8"]
  de = _examples("xnli", "dev", os.path.join(GLUE, "XNLI"), language="de")
  assert [e.text_a for e in de] == ["Der Zug fährt um acht Uhr ab.", "Sie hat das Buch gelesen."]


def test_ax_is_test_only():
  with pytest.raises(errors.UserError, match="no train set"):
    _examples("ax", "train", os.path.join(GLUE, "diagnostic"))
  with pytest.raises(errors.UserError, match="no dev set"):
    _examples("ax", "dev", os.path.join(GLUE, "diagnostic"))


def test_get_processor_errors():
  with pytest.raises(ValueError, match="^Task not found: foo$"):
    processors.get_processor("FOO")
  with pytest.raises(ValueError, match="does not take"):
    processors.get_processor("mrpc", text_a_column="x")


def test_user_tsv_task():
  processor = processors.get_processor("tsv", data_dir=TSV_EXAMPLE)
  # Sorted unique labels of train.tsv.
  assert processor.get_labels() == ["negative", "neutral", "positive"]
  train = processor.get_train_examples(TSV_EXAMPLE)
  assert train[0] == InputExample("train-1", "The battery lasts two full days.", None, "positive")
  assert train[3].text_a == 'The "quick start" guide was useless.'
  test = processor.get_test_examples(TSV_EXAMPLE)  # no label column: dummy label
  assert test[0] == InputExample("test-1", "The strap feels cheap.", None, "negative")
  chosen = processors.get_processor("tsv", labels=["positive", "neutral", "negative"])
  assert chosen.get_labels() == ["positive", "neutral", "negative"]
  assert len(chosen.get_dev_examples(TSV_EXAMPLE)) == 6


def test_user_tsv_pairs_bom_blank_lines_and_bad_labels(tmp_path):
  (tmp_path / "train.tsv").write_text(
      "\ufeffq\tanswer\tlabel\tid\nWhy?\tBecause.\tyes\t1\n\nHow?\tSomehow.\tno\t2\n",
      encoding="utf-8")
  (tmp_path / "dev.tsv").write_text("q\tanswer\tlabel\nWho?\tMe.\tmaybe\n", encoding="utf-8")
  processor = processors.get_processor("tsv", data_dir=str(tmp_path), text_a_column="q",
                               text_b_column="answer")
  assert processor.get_labels() == ["no", "yes"]
  train = processor.get_train_examples(str(tmp_path))
  # The blank line 3 is skipped; guids keep the row index.
  assert train == [InputExample("train-1", "Why?", "Because.", "yes"),
                   InputExample("train-3", "How?", "Somehow.", "no")]
  with pytest.raises(TsvFormatError, match=r"dev\.tsv:2: label 'maybe' is not one of"):
    processor.get_dev_examples(str(tmp_path))
  with pytest.raises(TsvFormatError, match=r"train\.tsv:1: no column named 'text'"):
    processors.get_processor("tsv", data_dir=str(tmp_path), text_a_column="text").get_labels()
  with pytest.raises(ValueError, match="needs data_dir"):
    processors.get_processor("tsv").get_labels()


def _write(path, text):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(text, encoding="utf-8")
  return str(path.parent)


def test_errors_name_file_and_line(tmp_path):
  header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
  data_dir = _write(tmp_path / "mrpc" / "train.tsv", header + "1\t1\t2\tA a.\tB b.\n0\t3\t4\tC c.\n")
  path = os.path.join(data_dir, "train.tsv")
  with pytest.raises(TsvFormatError) as e:
    _examples("mrpc", "train", data_dir)
  assert str(e.value) == f"{path}:3: row has 4 tab-separated column(s), the header (line 1) has 5"

  _write(tmp_path / "mrpc" / "dev.tsv", header + "2\t1\t2\tA a.\tB b.\n")
  with pytest.raises(TsvFormatError, match=r"dev\.tsv:2: label '2' is not one of \['0', '1'\]"):
    _examples("mrpc", "dev", data_dir)

  with pytest.raises(errors.UserError, match=r"test\.tsv: TSV file not found"):
    _examples("mrpc", "test", data_dir)

  sts = "\t".join(["index", "genre", "filename", "year", "old_index", "source1", "source2",
                   "sentence1", "sentence2", "score"]) + "\n"
  sts_dir = _write(tmp_path / "sts" / "train.tsv", sts + "0\tg\tf\ty\t1\tn\tn\tA.\tB.\thigh\n")
  with pytest.raises(TsvFormatError, match=r"train\.tsv:2: score 'high' is not a number"):
    _examples("sts-b", "train", sts_dir)


def test_qqp_malformed_rows_error_or_skip(tmp_path):
  data_dir = _write(tmp_path / "qqp" / "train.tsv",
                    "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                    "1\t1\t2\tWhy\n"  # a question cut by a stray newline
                    "2\t3\t4\tHow?\tIn what way?\t1\n")
  with pytest.raises(TsvFormatError, match=r"train\.tsv:2:"):
    _examples("qqp", "train", data_dir)
  kept = _examples("qqp", "train", data_dir, skip_malformed_rows=True)
  assert kept == [InputExample("train-2", "How?", "In what way?", "1")]


def test_ram_data_dir():
  src = os.path.join(GLUE, "MRPC")
  tf.io.gfile.makedirs("ram://glue_test/MRPC")
  for name in ("train.tsv", "dev.tsv"):
    tf.io.gfile.copy(os.path.join(src, name), f"ram://glue_test/MRPC/{name}", overwrite=True)
  on_ram = _examples("mrpc", "dev", "ram://glue_test/MRPC")
  assert on_ram == _examples("mrpc", "dev", src)


# ----------------------------------------------------------------- features


def test_truncate_seq_pair_by_hand():
  a, b = ["a1", "a2", "a3", "a4", "a5"], ["b1", "b2"]
  classifier_features.truncate_seq_pair(a, b, 5)  # only the longer side loses tokens
  assert (a, b) == (["a1", "a2", "a3"], ["b1", "b2"])
  a, b = ["a1", "a2", "a3"], ["b1", "b2", "b3"]
  classifier_features.truncate_seq_pair(a, b, 3)  # equal lengths pop from b first: (3,2) (2,2) (2,1)
  assert (a, b) == (["a1", "a2"], ["b1"])
  a, b = ["a1"], ["b1"]
  classifier_features.truncate_seq_pair(a, b, 5)
  assert (a, b) == (["a1"], ["b1"])


def test_feature_layout_of_a_pair():
  example = InputExample("x-1", "The cat sat", "a dog", "1")
  f = classifier_features.convert_single_example(0, example, ["0", "1"], 10, WhitespaceTokenizer())
  # [CLS] the cat sat [SEP] a dog [SEP] pad pad
  assert f.input_ids == [2, 4, 5, 6, 3, 7, 8, 3, 0, 0]
  assert f.input_mask == [1, 1, 1, 1, 1, 1, 1, 1, 0, 0]
  assert f.segment_ids == [0, 0, 0, 0, 0, 1, 1, 1, 0, 0]
  assert (f.label_id, f.is_real_example) == (1, True)


def test_truncation_in_conversion():
  tok = WhitespaceTokenizer()
  pair = InputExample("x", "the cat sat on the mat", "a dog ran", "0")
  f = classifier_features.convert_single_example(0, pair, ["0", "1"], 8, tok)
  # 8 - 3 = 5 tokens: (6,3)->(5,3)->(4,3)->(3,3), then equal lengths pop b: (3,2).
  assert f.input_ids == [2, 4, 5, 6, 3, 7, 8, 3]
  assert f.segment_ids == [0, 0, 0, 0, 0, 1, 1, 1]
  single = InputExample("y", "the cat sat on the mat", None, "1")
  f = classifier_features.convert_single_example(0, single, ["0", "1"], 4, tok)
  assert f.input_ids == [2, 4, 5, 3] and f.input_mask == [1, 1, 1, 1]
  # An empty second text gives the single-sentence layout, as the original.
  f = classifier_features.convert_single_example(0, InputExample("z", "a dog", "", "1"), ["0", "1"], 6, tok)
  assert f.input_ids == [2, 7, 8, 3, 0, 0] and f.segment_ids == [0] * 6


def test_padding_example_and_regression_label():
  tok = WhitespaceTokenizer()
  f = classifier_features.convert_single_example(0, PaddingInputExample(), ["0", "1"], 4, tok)
  assert (f.input_ids, f.input_mask, f.segment_ids) == ([0] * 4, [0] * 4, [0] * 4)
  assert (f.label_id, f.is_real_example) == (0, False)
  f = classifier_features.convert_single_example(0, InputExample("s", "a dog", "a cat", 3.5), None, 8, tok)
  assert f.label_id == 3.5 and isinstance(f.label_id, float)


def test_unknown_label_names_example_and_source():
  example = InputExample("dev-7", "a dog", None, "maybe", source="dev.tsv:8")
  with pytest.raises(errors.UserError, match=r"dev-7 \(dev\.tsv:8\): label 'maybe' is not one of"):
    classifier_features.convert_single_example(0, example, ["0", "1"], 8, WhitespaceTokenizer())


def test_pad_examples_for_tpu(caplog):
  caplog.set_level(logging.INFO, logger="absl")
  examples = [InputExample(str(i), "a", None, "0") for i in range(5)]
  padded = classifier_features.pad_examples_for_tpu(examples, 4)
  assert len(padded) == 8 and padded[:5] == examples and len(examples) == 5
  assert all(isinstance(e, PaddingInputExample) for e in padded[5:])
  assert "  Num examples = 8 (5 actual, 3 padding)" in caplog.messages
  assert len(classifier_features.pad_examples_for_tpu(examples[:4], 4)) == 4


EXAMPLES = [InputExample("e-1", "the cat sat", "on the mat", "1"),
            InputExample("e-2", "a dog ran", None, "0"),
            InputExample("e-3", "the dog", "the cat", "1")]


def test_record_round_trip_through_make_dataset(tmp_path):
  record = str(tmp_path / "eval.tf_record")
  examples = EXAMPLES + [PaddingInputExample()]
  classifier_features.file_based_convert_examples_to_features(examples, ["0", "1"], 9, WhitespaceTokenizer(),
                                             record)
  batches = list(classifier_features.make_dataset(record, 9, 3, is_training=False, drop_remainder=False))
  assert len(batches) == 2
  features, labels = batches[0]
  assert set(features) == {"input_ids", "input_mask", "segment_ids", "is_real_example"}
  assert all(t.dtype == tf.int32 for t in features.values()) and labels.dtype == tf.int32
  np.testing.assert_array_equal(features["input_ids"][0], [2, 4, 5, 6, 3, 10, 4, 11, 3])
  np.testing.assert_array_equal(features["segment_ids"][0], [0, 0, 0, 0, 0, 1, 1, 1, 1])
  np.testing.assert_array_equal(features["input_ids"][1], [2, 7, 8, 9, 3, 0, 0, 0, 0])
  np.testing.assert_array_equal(features["input_mask"][1], [1, 1, 1, 1, 1, 0, 0, 0, 0])
  np.testing.assert_array_equal(labels, [1, 0, 1])
  last_features, last_labels = batches[1]
  np.testing.assert_array_equal(last_features["input_ids"], np.zeros([1, 9]))
  np.testing.assert_array_equal(last_features["is_real_example"], [0])
  np.testing.assert_array_equal(features["is_real_example"], [1, 1, 1])

  static = classifier_features.make_dataset(record, 9, 2, is_training=False, drop_remainder=True)
  assert static.element_spec[0]["input_ids"].shape.as_list() == [2, 9]
  assert len(list(static)) == 2

  train = classifier_features.make_dataset(record, 9, 2, is_training=True, drop_remainder=True, seed=1)
  seen = [tuple(x) for f, _ in train.take(6) for x in f["input_ids"].numpy()]
  assert len(seen) == 12  # repeats past the 4 records
  assert set(seen) <= {tuple(x) for f, _ in batches for x in f["input_ids"].numpy()}
  again = classifier_features.make_dataset(record, 9, 2, is_training=True, drop_remainder=True, seed=1)
  assert seen == [tuple(x) for f, _ in again.take(6) for x in f["input_ids"].numpy()]


def test_regression_record(tmp_path):
  record = str(tmp_path / "sts.tf_record")
  examples = [InputExample("s-1", "a dog", "a cat", 4.25), InputExample("s-2", "the", None, 0.5)]
  classifier_features.file_based_convert_examples_to_features(examples, None, 6, WhitespaceTokenizer(), record)
  (_, labels), = list(classifier_features.make_dataset(record, 6, 2, False, False, is_regression=True))
  assert labels.dtype == tf.float32
  np.testing.assert_array_equal(labels, [4.25, 0.5])


def test_interrupted_write_leaves_no_partial_file(tmp_path):
  record = str(tmp_path / "train.tf_record")
  failing = WhitespaceTokenizer(fail_on="a dog ran")
  with pytest.raises(RuntimeError, match="simulated"):
    classifier_features.file_based_convert_examples_to_features(EXAMPLES, ["0", "1"], 8, failing, record)
  assert os.listdir(tmp_path) == []

  classifier_features.file_based_convert_examples_to_features(EXAMPLES, ["0", "1"], 8, WhitespaceTokenizer(),
                                             record)
  before = open(record, "rb").read()
  with pytest.raises(RuntimeError):
    classifier_features.file_based_convert_examples_to_features(EXAMPLES, ["0", "1"], 8, failing, record)
  assert os.listdir(tmp_path) == ["train.tf_record"]
  assert open(record, "rb").read() == before  # the old record is untouched


@pytest.fixture
def count_builds(monkeypatch):
  calls = []
  real = classifier_features.file_based_convert_examples_to_features

  def counting(*args, **kwargs):
    calls.append(args[-1])
    return real(*args, **kwargs)

  monkeypatch.setattr(classifier_features, "file_based_convert_examples_to_features", counting)
  return calls


def test_record_is_reused_until_its_inputs_change(tmp_path, count_builds):
  data_dir = tmp_path / "MRPC"
  shutil.copytree(os.path.join(GLUE, "MRPC"), data_dir)
  record = str(tmp_path / "out" / "train.tf_record")
  tf.io.gfile.makedirs(str(tmp_path / "out"))
  labels, tok = ["0", "1"], WhitespaceTokenizer()

  def ensure(max_seq_length=16, tokenizer=tok, pad_to=1):
    examples = _examples("mrpc", "train", str(data_dir))
    examples = classifier_features.pad_examples_for_tpu(examples, pad_to)
    return classifier_features.ensure_feature_record(examples, labels, max_seq_length, tokenizer, record)

  assert ensure() == 8 and len(count_builds) == 1
  assert ensure() == 8 and len(count_builds) == 1  # unchanged: reused
  assert tf.io.gfile.exists(record + ".meta.json")

  # Edit one sentence of the TSV: rebuilt, and the new text is in the record.
  path = data_dir / "train.tsv"
  path.write_text(path.read_text().replace("The council approved", "The cat sat"))
  assert ensure() == 8 and len(count_builds) == 2
  (features, _), = list(classifier_features.make_dataset(record, 16, 1, False, False).take(1))
  np.testing.assert_array_equal(features["input_ids"][0][:4], [2, 4, 5, 6])
  assert ensure() == 8 and len(count_builds) == 2

  assert ensure(max_seq_length=12) == 8 and len(count_builds) == 3
  assert ensure(max_seq_length=12, pad_to=5) == 10 and len(count_builds) == 4
  cased = WhitespaceTokenizer(do_lower_case=False)
  ensure(max_seq_length=12, pad_to=5, tokenizer=cased)
  assert len(count_builds) == 5
  bigger_vocab = WhitespaceTokenizer(tokens=VOCAB + ["council"], do_lower_case=False)
  ensure(max_seq_length=12, pad_to=5, tokenizer=bigger_vocab)
  assert len(count_builds) == 6


def test_failed_rebuild_is_not_reused_later(tmp_path, count_builds):
  record = str(tmp_path / "eval.tf_record")
  tok = WhitespaceTokenizer()
  classifier_features.ensure_feature_record(EXAMPLES, ["0", "1"], 8, tok, record)
  changed = EXAMPLES[:2] + [InputExample("e-3", "a dog ran", None, "1")]
  with pytest.raises(RuntimeError):
    classifier_features.ensure_feature_record(changed, ["0", "1"], 8, WhitespaceTokenizer(fail_on="a dog ran"),
                             record)
  assert sorted(os.listdir(tmp_path)) == ["eval.tf_record"]  # meta gone, no temp files
  # The surviving old record has no meta, so even the old inputs rebuild it.
  classifier_features.ensure_feature_record(EXAMPLES, ["0", "1"], 8, tok, record)
  assert len(count_builds) == 3


def test_ensure_feature_record_on_ram():
  record = "ram://records_test/train.tf_record"
  tf.io.gfile.makedirs("ram://records_test")
  n = classifier_features.ensure_feature_record(EXAMPLES, ["0", "1"], 8, WhitespaceTokenizer(), record)
  assert n == 3
  assert len(list(classifier_features.make_dataset(record, 8, 2, False, False))) == 2
  assert classifier_features.ensure_feature_record(EXAMPLES, ["0", "1"], 8, WhitespaceTokenizer(), record) == 3


def test_project_full_tokenizer(tmp_path):
  """The team's FullTokenizer: the original tokenizer test's vocabulary and text."""
  vocab_file = tmp_path / "vocab.txt"
  vocab_file.write_text("\n".join(["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa",
                                   "un", "runn", "##ing", ","]) + "\n")
  tok = tokenization.FullTokenizer(str(vocab_file), do_lower_case=True)
  example = InputExample("t-1", "UNwant\u00E9d,running", "running", "0")
  f = classifier_features.convert_single_example(0, example, ["0", "1"], 12, tok)
  # [CLS] un ##want ##ed , runn ##ing [SEP] runn ##ing [SEP] pad
  assert f.input_ids == [1, 7, 4, 5, 10, 8, 9, 2, 8, 9, 2, 0]
  assert f.segment_ids == [0] * 8 + [1] * 3 + [0]
  cased = tokenization.FullTokenizer(str(vocab_file), do_lower_case=False)
  assert (classifier_features.features_fingerprint(EXAMPLES, ["0", "1"], 8, tok)
          != classifier_features.features_fingerprint(EXAMPLES, ["0", "1"], 8, cased))
