"""serving/: the signatures of the exported SavedModel, as a serving client sees them.

Their inputs and outputs (serving_default and tokenize on raw text, token_ids on a
caller's ids; assets.extra/tasks.json describing the tasks), the one assertion
naming the inputs to fix for a request the model cannot answer, and what an empty
batch, generated hostile bytes and text longer than every task give. The export is
serving_bank's (the bank of test_serving.py: vocab_base, runs, bank, exported, served),
built once per test session for both files.
"""

import json
import os
import re

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest
import tensorflow as tf

from adapter_bert.classification import features as classifier_features
from adapter_bert.classification import processors
from adapter_bert.serving import export as serving_export
import generated_inputs
from serving_bank import TASKS
# The fixtures of the bank it exports.
from serving_bank import vocab_base, runs, bank, exported, served  # pylint: disable=unused-import
from adapter_bert import tokenization


def test_token_ids_signature_and_unknown_task(served):
  texts = tf.constant(["the movie was good", "a bad film"])
  tasks = tf.constant(["sst2", "mrpc"])
  packed = served.signatures["tokenize"](text_a=texts, text_b=tf.constant(["", "a man"]),
                                         task=tasks)
  by_ids = served.signatures["token_ids"](
      input_ids=packed["input_ids"], input_mask=packed["input_mask"],
      segment_ids=packed["segment_ids"], task=tasks)
  by_text = served.signatures["serving_default"](
      text_a=texts, text_b=tf.constant(["", "a man"]), task=tasks)
  np.testing.assert_allclose(by_ids["probabilities"], by_text["probabilities"], atol=1e-6)
  # Shorter inputs (the caller's own length) give the same: padding is masked.
  short = served.signatures["token_ids"](
      input_ids=packed["input_ids"][:, :10], input_mask=packed["input_mask"][:, :10],
      segment_ids=packed["segment_ids"][:, :10], task=tasks)
  np.testing.assert_allclose(short["probabilities"], by_text["probabilities"], atol=1e-5)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"(?s)Unknown task.*nope.*serves the tasks: mrpc, sst2, stsb"):
    served.signatures["serving_default"](
        text_a=texts, text_b=tf.constant(["", ""]), task=tf.constant(["sst2", "nope"]))


def test_signatures_follow_serving_conventions(exported, served):
  export_dir, _ = exported
  assert os.path.exists(os.path.join(export_dir, "assets", "vocab.txt"))
  loaded = served
  text_inputs = {"text_a", "text_b", "task"}
  signature = loaded.signatures["serving_default"]
  assert set(signature.structured_input_signature[1]) == text_inputs
  assert {k: (v.dtype, v.shape.as_list()) for k, v in signature.structured_outputs.items()} == {
      "probabilities": (tf.float32, [None, 2]), "labels": (tf.string, [None, 2]),
      "predicted_label": (tf.string, [None]), "score": (tf.float32, [None]),
      "logits": (tf.float32, [None, 2]), "task_index": (tf.int32, [None])}
  token_ids = loaded.signatures["token_ids"].structured_input_signature[1]
  assert {k: (v.dtype, v.shape.as_list()) for k, v in token_ids.items()} == {
      "input_ids": (tf.int32, [None, None]), "input_mask": (tf.int32, [None, None]),
      "segment_ids": (tf.int32, [None, None]), "task": (tf.string, [None])}
  described = serving_export.read_tasks_description(export_dir)
  assert [(t["name"], t["labels"], t["max_seq_length"], t["adapter_size"])
          for t in described["tasks"]] == [
              ("mrpc", ["0", "1"], 16, 8), ("sst2", ["0", "1"], 8, 4), ("stsb", [], 24, 0)]
  assert described["max_seq_length"] == 24 and "seq_length" not in described


def test_tasks_description_of_an_export_before_the_key_was_renamed(tmp_path):
  """assets.extra/tasks.json's "max_seq_length" was written as "seq_length"."""
  os.makedirs(tmp_path / "assets.extra")
  with open(tmp_path / serving_export.TASKS_FILE, "w") as f:
    json.dump({"tasks": [], "seq_length": 128, "num_outputs": 2}, f)
  assert serving_export.read_tasks_description(str(tmp_path)) == {
      "tasks": [], "max_seq_length": 128, "num_outputs": 2}


def _error(signature, **inputs):
  """The message of the InvalidArgumentError a request fails with."""
  with pytest.raises(tf.errors.InvalidArgumentError) as info:
    signature(**{k: tf.constant(v) for k, v in inputs.items()})
  return info.value.message


def test_request_errors_name_the_inputs(served):
  """What a serving client sees for a request the model cannot answer: one
  assertion naming the inputs to fix, not a broadcast error deep in the graph."""
  text = served.signatures["serving_default"]
  pairs = r"text_a, text_b and task must have equal lengths .*their lengths:\] \[%s\]"
  for signature in (text, served.signatures["tokenize"]):
    assert re.search(pairs % "2 1 2", _error(signature, text_a=["a b", "c"], text_b=["d"],
                                             task=["sst2", "mrpc"]))
    assert re.search(pairs % "2 2 3", _error(signature, text_a=["a", "b"], text_b=["", ""],
                                             task=["sst2", "sst2", "stsb"]))
  assert re.search(r"(?s)Unknown task.*nope.*serves the tasks: mrpc, sst2, stsb",
                   _error(text, text_a=["a"], text_b=[""], task=["nope"]))

  ids = served.signatures["token_ids"]
  ones = np.ones((2, 5), np.int32)
  good = dict(input_ids=ones, input_mask=ones, segment_ids=0 * ones, task=["sst2", "stsb"])
  ids(**{k: tf.constant(v) for k, v in good.items()})  # The requests below change one thing.
  assert re.search(r"input_ids, input_mask and segment_ids must have the same shape "
                   r".*their shapes:\] \[2 5\] \[2 4\] \[2 5\]",
                   _error(ids, **dict(good, input_mask=ones[:, :4])))
  assert re.search(r"task must have one entry per row of input_ids .*\[2\] .*\[1\]",
                   _error(ids, **dict(good, task=["sst2"])))
  wide = np.ones((2, 65), np.int32)
  for columns in (wide, ones[:, :0]):
    assert re.search(r"input_ids must have 1 to 64 columns \(max_position_embeddings.*"
                     r"it has\] \[%d\]" % columns.shape[1],
                     _error(ids, **dict(good, input_ids=columns, input_mask=columns,
                                        segment_ids=columns)))
  assert re.search(r"input_ids must be in \[0, 120\) .*out of range:\] \[120 -1\]",
                   _error(ids, **dict(good, input_ids=[[1, 120, 1, 1, 1], [1, 1, 1, 1, -1]])))
  assert re.search(r"segment_ids must be in \[0, 2\) .*out of range:\] \[2\]",
                   _error(ids, **dict(good, segment_ids=[[0, 0, 2, 0, 0], [0] * 5])))
  assert re.search(r"input_mask must be in \[0, 2\)",
                   _error(ids, **dict(good, input_mask=3 * ones)))
  assert re.search(r"(?s)Unknown task.*nope", _error(ids, **dict(good, task=["nope", "sst2"])))
  # Rows of different lengths are no tensor: the client refuses them before any request.
  with pytest.raises(ValueError, match="non-rectangular"):
    tf.constant([[1, 2, 3], [1, 2]])


@hypothesis.settings(**dict(generated_inputs.SETTINGS, max_examples=25))
@hypothesis.given(pairs=st.lists(
    st.tuples(generated_inputs.SERVING_BYTES, generated_inputs.SERVING_BYTES,
              st.sampled_from(sorted(TASKS))), min_size=1, max_size=4))
def test_generated_raw_text_gets_run_classifiers_inputs_and_a_prediction(served, vocab_base,
                                                                          pairs):
  """The SavedModel's text signatures on generated degenerate and hostile bytes (empty,
  blank, control characters, very long, mixed scripts, invalid UTF-8): the inputs
  run_classifier.py would feed, and a prediction of the task for every example."""
  full = _full_tokenizer(vocab_base["vocab_file"])
  inputs = dict(text_a=tf.constant([a for a, _, _ in pairs]),
                text_b=tf.constant([b for _, b, _ in pairs]),
                task=tf.constant([t for _, _, t in pairs]))
  packed = served.signatures["tokenize"](**inputs)
  outputs = {k: v.numpy() for k, v in served.signatures["serving_default"](**inputs).items()}
  for row, (a, b, task) in enumerate(pairs):
    length = TASKS[task]["max_seq_length"]
    feature = classifier_features.convert_single_example(9, processors.InputExample(
        "x", tokenization.convert_to_unicode(a), tokenization.convert_to_unicode(b), "0"),
        None, length, full)
    assert packed["input_ids"].numpy()[row, :length].tolist() == feature.input_ids, (a, b)
    assert packed["segment_ids"].numpy()[row, :length].tolist() == feature.segment_ids
    probabilities = outputs["probabilities"][row]
    if TASKS[task]["task_name"] == "STS-B":
      assert np.isfinite(outputs["score"][row]) and not probabilities.any()
    else:
      np.testing.assert_allclose(probabilities.sum(), 1.0, atol=1e-5)
      labels = [l.decode() for l in outputs["labels"][row]]
      assert outputs["predicted_label"][row].decode() == labels[int(np.argmax(probabilities))]


_FULL = {}


def _full_tokenizer(vocab_file):
  if vocab_file not in _FULL:
    _FULL[vocab_file] = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  return _FULL[vocab_file]


def test_empty_batch_gives_empty_outputs(served):
  """B = 0 is a batch like any other (the export's docstring says why)."""
  empty = tf.constant([], tf.string)
  for name, inputs in [
      ("serving_default", dict(text_a=empty, text_b=empty, task=empty)),
      ("tokenize", dict(text_a=empty, text_b=empty, task=empty)),
      ("token_ids", dict(input_ids=tf.zeros([0, 5], tf.int32),
                         input_mask=tf.zeros([0, 5], tf.int32),
                         segment_ids=tf.zeros([0, 5], tf.int32), task=empty))]:
    signature = served.signatures[name]
    outputs = signature(**inputs)
    assert set(outputs) == set(signature.structured_outputs)
    for key, value in outputs.items():
      spec = signature.structured_outputs[key]
      assert value.dtype == spec.dtype and value.shape[0] == 0, (name, key)
      assert value.shape[1:] == spec.shape[1:], (name, key)


def test_text_longer_than_every_task_is_truncated(served, vocab_base):
  """Far more tokens than any task's max_seq_length (and than the model's 64
  positions), in either segment: each task's ids are run_classifier.py's
  truncation, and the prediction is that of those ids."""
  full = tokenization.FullTokenizer(vocab_base["vocab_file"], do_lower_case=True)
  long_a = " ".join(["the movie was good and a bad film"] * 30)
  long_b = " ".join(["a man the cafe"] * 40)
  pairs = [(long_a, ""), (long_a, long_b), ("short", long_b), (long_b, "the movie")]
  assert all(len(full.tokenize(t)) > 100 for t in (long_a, long_b))
  for name, task_flags in TASKS.items():
    length = task_flags["max_seq_length"]
    inputs = dict(text_a=tf.constant([a for a, _ in pairs]),
                  text_b=tf.constant([b for _, b in pairs]), task=tf.constant([name] * 4))
    got = served.signatures["tokenize"](**inputs)
    for i, (a, b) in enumerate(pairs):
      feature = classifier_features.convert_single_example(
          9, processors.InputExample("x", a, b or None, "0"), None, length, full)
      assert got["input_ids"].numpy()[i, :length].tolist() == feature.input_ids
      assert got["input_mask"].numpy()[i].sum() == length  # Full: truncated, not padded.
    by_text = served.signatures["serving_default"](**inputs)
    by_ids = served.signatures["token_ids"](
        input_ids=got["input_ids"], input_mask=got["input_mask"],
        segment_ids=got["segment_ids"], task=inputs["task"])
    np.testing.assert_allclose(by_text["logits"], by_ids["logits"], atol=1e-6)
