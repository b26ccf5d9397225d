"""Packed SQuAD features (--pack_sequences): the span labeler and run_squad.py.

Reference: the same features computed one at a time, each at its own length
(no padding at all), by the unpacked model. Packed rows are built by hand
(packed_batches.pack_by_hand, independent of runtime/packing.py's packer), following
the packed-batch interface: examples back to back, example_ids 1..K,
positions restarting at 0, each example's start and length per slot.
"""

import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.model import modeling
from adapter_bert.runtime import prediction
from adapter_bert.runtime import packing
from adapter_bert.squad import examples as squad_examples
import run_squad
from adapter_bert.tasks import question_answering
from packed_batches import CONFIG, LENGTHS, MAX_EXAMPLES, ROW_LENGTH, ROWS, pack_by_hand
import tiny_bert
from adapter_bert import tokenization

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                    "squad")


def _features(seed=0):
  """[CLS] query [SEP] document [SEP]-like features: ids, segment ids, a gold span."""
  rng = np.random.default_rng(seed)
  features = []
  for n in LENGTHS:
    query = int(rng.integers(1, n - 1))
    start = int(rng.integers(0, n))
    features.append(dict(
        input_ids=rng.integers(5, CONFIG["vocab_size"], n).astype(np.int32),
        segment_ids=np.array([0] * query + [1] * (n - query), np.int32),
        start_positions=start, end_positions=int(rng.integers(start, n))))
  return features


def _single(feature):
  """One feature as an unpacked batch of one, at its own length."""
  n = len(feature["input_ids"])
  return {"input_ids": tf.constant(feature["input_ids"][None]),
          "segment_ids": tf.constant(feature["segment_ids"][None]),
          "input_mask": tf.ones([1, n], tf.int32)}


@pytest.fixture(scope="module")
def span_labeler():
  tf.keras.utils.set_random_seed(0)
  model = modeling.BertSpanLabeler(modeling.BertConfig.from_dict(CONFIG),
                                   AdapterConfig(size=4, init_scale=0.5))
  model.ensure_built()
  # Adapters far from the identity, so that they count in every comparison.
  for v in model.trainable_variables:
    if "adapter" in v.path:
      v.assign(tf.random.stateless_normal(v.shape, [1, len(v.path)], stddev=0.3))
  return model


def _slots():
  return [(b, k, i) for b, row in enumerate(ROWS) for k, i in enumerate(row)]


def test_packed_span_logits_are_each_features_own(span_labeler):
  features = _features()
  packed = span_labeler(pack_by_hand(features), training=False)
  assert packed["start_logits"].shape == (len(ROWS), MAX_EXAMPLES, ROW_LENGTH)
  for b, k, i in _slots():
    alone = span_labeler(_single(features[i]), training=False)
    n = LENGTHS[i]
    for key in ("start_logits", "end_logits"):
      got = packed[key].numpy()[b, k]
      np.testing.assert_allclose(got[:n], alone[key].numpy()[0], atol=1e-5, rtol=1e-5)
      # Past the feature's own tokens: masked, so softmax gives them exactly 0.
      assert (got[n:] == modeling.BertSpanLabeler.SPAN_MASKED_LOGIT).all()
  empty = packed["start_logits"].numpy()[2, 1:]
  assert (empty == modeling.BertSpanLabeler.SPAN_MASKED_LOGIT).all()


def test_packed_span_loss_and_gradients_are_the_unpacked_ones(span_labeler):
  """The mean span loss over the packed features (empty slots left out) and its
  gradients equal those of the features computed one at a time, unpadded."""
  features = _features(seed=1)
  variables = span_labeler.trainable_variables
  packed = pack_by_hand(features)
  labels = {k: packed[k] for k in ("start_positions", "end_positions")}
  with tf.GradientTape() as tape:
    per_example = question_answering.span_loss(labels, span_labeler(packed, training=False))
    loss = packing.mean_over_examples(per_example, packed[modeling.EXAMPLE_LENGTHS])
  grads = tape.gradient(loss, variables)
  with tf.GradientTape() as tape:
    losses = [question_answering.span_loss(
        {k: tf.constant([f[k]]) for k in labels}, span_labeler(_single(f), training=False))
              for f in features]
    expected = tf.reduce_mean(tf.concat(losses, 0))
  expected_grads = tape.gradient(expected, variables)
  assert float(loss) == pytest.approx(float(expected), rel=1e-5)
  assert float(loss) > 0.5  # Not a degenerate loss.
  for v, got, want in zip(variables, grads, expected_grads):
    if want is None:  # The pooler: the span head never reads it.
      assert got is None and "pooler" in v.path, v.path
      continue
    got, want = tf.convert_to_tensor(got).numpy(), tf.convert_to_tensor(want).numpy()
    assert np.abs(want).max() > 0, v.path
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4, err_msg=v.path)


# run_squad.py on a tiny base with room for two features per row (the tiny
# base's 64 positions hold about one): the features of data/squad are 49 to
# 145 tokens long here.
LONG_BASE = dict(CONFIG, max_position_embeddings=256)
RUN_ARGS = ["--max_seq_length=256", "--doc_stride=64", "--max_query_length=16",
            "--train_batch_size=4", "--predict_batch_size=4", "--adapter_size=8", "--seed=1"]


def run(args):
  fv = flags.FlagValues()
  run_squad.define_flags(fv)
  fv(["run_squad.py"] + args)
  return run_squad.main([], fv)


@pytest.fixture(scope="module")
def long_base(tmp_path_factory):
  d = str(tmp_path_factory.mktemp("long_base"))
  config, vocab, ckpt, _ = tiny_bert.write_google_dir(d, LONG_BASE)
  return ["--bert_config_file=" + config, "--vocab_file=" + vocab] + RUN_ARGS, ckpt


def _read_json(path):
  with open(path) as f:
    return json.load(f)


def _assert_same_predictions(got_dir, want_dir):
  """predictions.json (and null_odds.json) alike, nbest_predictions.json's texts
  exactly and its numbers to 1e-5 (logits computed in other shapes)."""
  want = _read_json(os.path.join(want_dir, "predictions.json"))
  assert _read_json(os.path.join(got_dir, "predictions.json")) == want
  want = _read_json(os.path.join(want_dir, "nbest_predictions.json"))
  got = _read_json(os.path.join(got_dir, "nbest_predictions.json"))
  assert list(got) == list(want)
  for qid in want:
    assert [e["text"] for e in got[qid]] == [e["text"] for e in want[qid]], qid
    for key in ("probability", "start_logit", "end_logit"):
      np.testing.assert_allclose([e[key] for e in got[qid]], [e[key] for e in want[qid]],
                                 atol=1e-5, err_msg=f"{qid} {key}")
  # A trained model: its best answers are not all the same span.
  assert len({e[0]["text"] for e in want.values()}) > 1
  null_odds = os.path.join(want_dir, "null_odds.json")
  if os.path.exists(null_odds):
    want, got = _read_json(null_odds), _read_json(os.path.join(got_dir, "null_odds.json"))
    assert list(got) == list(want)
    np.testing.assert_allclose(list(got.values()), list(want.values()), atol=1e-5)


def _packed_counts(log):
  """(examples, rows) of each "packed N examples into M rows" log line."""
  return [(int(a), int(b)) for a, b in re.findall(r"packed (\d+) examples into (\d+) rows", log)]


def test_packed_training_and_prediction(long_base, tmp_path, caplog):
  """SQuAD 2.0 trained packed keeps the original's steps (12 questions / batch 4
  * 2 epochs); its weights predict the same files packed as unpacked."""
  args, ckpt = long_base
  packed, unpacked = str(tmp_path / "packed"), str(tmp_path / "unpacked")
  dev = "--predict_file=" + os.path.join(DATA, "dev-v2.0.json")
  with caplog.at_level("INFO"):
    run(args + ["--output_dir=" + packed, "--init_checkpoint=" + ckpt, "--pack_sequences",
                "--version_2_with_negative", "--do_train", "--num_train_epochs=2",
                "--train_file=" + os.path.join(DATA, "train-v2.0.json"),
                "--learning_rate=1e-2", "--do_predict", dev])
  assert "Running training from step 0 to 6 *****" in caplog.text
  assert tf.train.latest_checkpoint(packed).endswith("model.ckpt-6")
  (train_features, train_rows), (dev_features, dev_rows) = _packed_counts(caplog.text)
  assert train_features > train_rows and dev_features > dev_rows
  run(args + ["--output_dir=" + unpacked, "--init_checkpoint=" + packed,
              "--version_2_with_negative", "--do_predict", dev])
  _assert_same_predictions(packed, unpacked)


def test_packed_batches_have_one_shape_and_compile_once_with_xla(long_base, tmp_path):
  """Packed training and prediction batches of run_squad.py: one static shape,
  so XLA (a TPU) compiles one program; the compiled prediction, traced once
  for every batch, gives the model's own logits."""
  args, _ = long_base
  vocab = next(a.split("=", 1)[1] for a in args if a.startswith("--vocab_file="))
  tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
  convert = dict(tokenizer=tokenizer, max_seq_length=256, doc_stride=64, max_query_length=16)
  train = question_answering.write_features(
      squad_examples.read_squad_examples(os.path.join(DATA, "train-v2.0.json"), True, True),
      path=str(tmp_path / "train.tf_record"), is_training=True, **convert)
  predict = question_answering.write_features(
      squad_examples.read_squad_examples(os.path.join(DATA, "dev-v2.0.json"), False, True),
      path=str(tmp_path / "eval.tf_record"), is_training=False, **convert)
  train_batches = question_answering.train_dataset(train.filename, 256, 2, 1, pack_sequences=True)
  predict_batches = question_answering.predict_dataset(predict.filename, 256, 2, predict.num_features,
                                              pad_last_batch=False, pack_sequences=True)
  for batches in (train_batches, predict_batches):
    assert all(s.shape.is_fully_defined() for s in tf.nest.flatten(batches.element_spec))
  tf.keras.utils.set_random_seed(0)
  model = modeling.BertSpanLabeler(modeling.BertConfig.from_dict(LONG_BASE),
                                   AdapterConfig(size=4))
  model.ensure_built()
  predict_step = prediction.make_predict_step(model, jit_compile=True)
  batches = list(predict_batches)
  assert len(batches) > 1  # The last one filled with empty rows: the same shape.
  for features, unique_ids in batches:
    compiled = predict_step(features, unique_ids)
    np.testing.assert_allclose(compiled["start_logits"],
                               model(features, training=False)["start_logits"], atol=1e-5)
  assert predict_step.experimental_get_tracing_count() == 1
