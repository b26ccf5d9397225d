"""Every reader of user input, fed generated degenerate and hostile inputs
(generated_inputs.py): it returns examples the next step takes (features,
predictions, packed model inputs), or raises errors.UserError naming the file
(and its line or question); never another exception.

Readers: the classification TSV (a tsv task and a GLUE one), SQuAD v1.1 and v2.0
JSON through to predictions, a multi-task run's task lists, and the SavedModel's
raw-text path (tokenizer and per-example packing) against run_classifier.py's.
"""

import os
import re
import tempfile

from hypothesis import example, given, settings
from hypothesis import strategies as st
import numpy as np
import pytest
import tensorflow as tf

from adapter_bert import errors
from adapter_bert.classification import features as classifier_features
from adapter_bert.classification import processors
from adapter_bert.multitask import tasks as multitask_tasks
from adapter_bert.serving import text as serving_text
from adapter_bert.squad import examples as squad_examples
from adapter_bert.squad import features as squad_features
from adapter_bert.squad import postprocess
import generated_inputs as gen
from adapter_bert import tokenization

_WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "##a", "x", "##x", "abc", "xyz", "the",
          "привет", "мир", "中", "文", "字", "符", "🙂", ".", "?", "!", "e", "##e"]


@pytest.fixture(scope="module")
def vocab_file():
  with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "vocab.txt")
    with open(path, "w", encoding="utf-8") as f:
      f.write("\n".join(_WORDS) + "\n")
    yield path


@pytest.fixture(scope="module")
def tokenizer(vocab_file):
  return tokenization.FullTokenizer(vocab_file, do_lower_case=True)


def _write(directory, name, data: bytes):
  path = os.path.join(directory, name)
  with tf.io.gfile.GFile(path, "wb") as f:
    f.write(data)
  return path


def _assert_names_a_file(error, paths):
  """A UserError's message starts with one of `paths`, then ':' (and the line)."""
  message = str(error)
  assert "\n" not in message, message
  assert any(message.startswith(p + ":") for p in paths), message


# --- Classification TSV


@settings(**gen.SETTINGS)
@given(train=gen.tsv_file(), dev=gen.tsv_file(), test=gen.tsv_file(header=("sentence",)),
       labels=st.sampled_from([None, ["a", "b"]]))
def test_tsv_task_reads_examples_or_names_the_file(tokenizer, train, dev, test, labels):
  with tempfile.TemporaryDirectory() as d:
    paths = [_write(d, name + ".tsv", data)
             for name, data in (("train", train), ("dev", dev), ("test", test))]
    processor = processors.TsvProcessor(d, labels=labels)
    for read in (processor.get_train_examples, processor.get_dev_examples,
                 processor.get_test_examples):
      try:
        examples = read(d)
        label_list = processor.get_labels()
      except errors.UserError as e:
        _assert_names_a_file(e, paths)
        continue
      assert examples and all(isinstance(e.text_a, str) for e in examples)
      # Every label names a class: a row without one is no class ''.
      assert all(label.strip() for label in label_list), label_list
      assert all(e.label in label_list for e in examples)
      features = classifier_features.convert_examples_to_features(
          examples, label_list, 16, tokenizer)
      assert all(f.input_ids[0] == tokenizer.vocab["[CLS]"] and len(f.input_ids) == 16
                 for f in features)


@settings(**gen.SETTINGS)
@given(train=gen.tsv_file(header=("sentence", "label"), labels=("0", "1")))
def test_glue_task_reads_examples_or_names_the_file(tokenizer, train):
  """SST-2's reader (fixed columns, header row) on the same files."""
  with tempfile.TemporaryDirectory() as d:
    path = _write(d, "train.tsv", train)
    processor = processors.get_processor("sst-2")
    try:
      examples = processor.get_train_examples(d)
    except errors.UserError as e:
      _assert_names_a_file(e, [path])
      return
    assert all(e.label in ("0", "1") for e in examples)
    classifier_features.convert_examples_to_features(examples, ["0", "1"], 16, tokenizer)


# --- SQuAD JSON, through to predictions


def _predict(examples, tokenizer, version_2):
  """Features at a small length and stride, random logits, post-processing."""
  features = []
  squad_features.convert_examples_to_features(examples, tokenizer, max_seq_length=16,
                                          doc_stride=3, max_query_length=6,
                                          is_training=False, output_fn=features.append)
  rng = np.random.default_rng(0)
  results = [postprocess.RawResult(f.unique_id, rng.normal(size=16), rng.normal(size=16))
             for f in features]
  return postprocess.compute_predictions(examples, features, results, n_best_size=3,
                                         max_answer_length=5, do_lower_case=True,
                                         version_2_with_negative=version_2)


@pytest.mark.parametrize("version", ["1.1", "2.0"])
def test_squad_reads_and_predicts_or_names_the_file(tokenizer, version):
  v2 = version == "2.0"

  @settings(**gen.SETTINGS)
  @given(data=gen.squad_file(version), is_training=st.booleans())
  def check(data, is_training):
    with tempfile.TemporaryDirectory() as d:
      path = _write(d, "file.json", data)
      try:
        examples = squad_examples.read_squad_examples(path, is_training, v2)
      except errors.UserError as e:
        _assert_names_a_file(e, [path])
        return
      if is_training:
        features = []
        squad_features.convert_examples_to_features(examples, tokenizer, 16, 3, 6, True,
                                                features.append)
        assert {f.example_index for f in features} == set(range(len(examples)))
        return
      predictions, _, null_odds = _predict(examples, tokenizer, v2)
      # Every question has a prediction (ids may repeat; the last one wins, as in the
      # original's dict).
      assert set(predictions) == {e.qas_id for e in examples}
      assert all(isinstance(p, str) for p in predictions.values())
      if v2:
        assert set(null_odds) == set(predictions)
        nothing = {e.qas_id for e in examples if not "".join(e.doc_tokens).strip()}
        assert all(predictions[q] == "" for q in nothing)

  check()


# --- A multi-task run's task lists


@settings(**gen.SETTINGS)
@given(names=st.lists(gen.TASK_NAMES, min_size=1, max_size=4),
       dirs=st.lists(gen.DIR_NAMES, min_size=1, max_size=4),
       trains=st.lists(gen.tsv_file(), min_size=4, max_size=4))
def test_multitask_task_lists_read_tasks_or_refuse_in_one_line(names, dirs, trains):
  with tempfile.TemporaryDirectory() as d:
    data_dirs = []
    for i, name in enumerate(dirs):
      path = os.path.join(d, str(i), name)
      tf.io.gfile.makedirs(path)
      _write(path, "train.tsv", trains[i])
      data_dirs.append(path)
    try:
      tasks = multitask_tasks.tasks_from_flags(names, data_dirs, ["sentence"], None, ["label"])
      heads = []
      for task in tasks:
        task.processor.get_train_examples(task.data_dir)
        heads.append(task.head())
    except errors.UserError as e:
      message = str(e)
      assert "\n" not in message, message
      # A flag (--task_name, --data_dir, a column) or a file of a task's directory.
      assert re.match(r"(flag )?--\w+", message) or message.startswith(d), message
      return
    assert len(heads) == len(names) and len({h.name for h in heads}) == len(heads)


# --- The SavedModel's raw text: tokenizer and per-example packing


@settings(**gen.SETTINGS)
@given(pairs=st.lists(st.tuples(gen.SERVING_BYTES, gen.SERVING_BYTES, st.integers(3, 12)),
                      min_size=1, max_size=4))
# Found by this test: a b truncated away at max_seq_length 3 or 4 had kept a second [SEP].
@example(pairs=[(b"", b"x" * 5000, 3), (b"a", b"a", 4), (b"\xff", b"a b", 3)])
def test_serving_raw_text_packs_as_run_classifier(vocab_file, tokenizer, pairs):
  """What the SavedModel's text signatures feed the model: for any bytes (invalid
  UTF-8 dropped, as tokenization.convert_to_unicode does), each example packed at its
  own max_seq_length as run_classifier.py's convert_single_example packs it."""
  seq_length = 12
  in_graph = _in_graph_tokenizer(vocab_file)
  texts_a = tf.constant([a for a, _, _ in pairs])
  texts_b = tf.constant([b for _, b, _ in pairs])
  ids = in_graph(tf.concat([texts_a, texts_b], axis=0))
  packed = serving_text.pack_per_example(
      ids[:len(pairs)], ids[len(pairs):], tf.constant([n for _, _, n in pairs], tf.int32),
      seq_length, tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"])
  for row, (a, b, max_seq_length) in enumerate(pairs):
    example = processors.InputExample("x", tokenization.convert_to_unicode(a),
                                      tokenization.convert_to_unicode(b), "l")
    expected = classifier_features.convert_single_example(
        5, example, ["l"], max_seq_length, tokenizer)
    pad = [0] * (seq_length - max_seq_length)
    assert packed["input_ids"][row].numpy().tolist() == expected.input_ids + pad, (a, b)
    assert packed["input_mask"][row].numpy().tolist() == expected.input_mask + pad
    assert packed["segment_ids"][row].numpy().tolist() == expected.segment_ids + pad


_IN_GRAPH = {}


def _in_graph_tokenizer(vocab_file):
  if vocab_file not in _IN_GRAPH:  # One table for every generated example.
    _IN_GRAPH[vocab_file] = tokenization.InGraphTokenizer(vocab_file, do_lower_case=True)
  return _IN_GRAPH[vocab_file]
