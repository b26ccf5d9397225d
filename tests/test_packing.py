"""Packed sequences (runtime/packing.py, modeling.py's packed path): rows checked
by hand, the packed model against the unpacked one on the same examples
(logits, loss, gradients), the packed input pipeline's order and resumption."""

import json
import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert import errors
from adapter_bert.model import modeling
from adapter_bert.classification import task as classifier_task
from adapter_bert.runtime import loop
from adapter_bert.runtime import packing
from adapter_bert.runtime import records
import tiny_bert


def _window(lengths, max_seq_length):
  """Examples of the given lengths: input_ids 10 * (i + 1) + position, one label each."""
  ids = np.zeros([len(lengths), max_seq_length], np.int32)
  for i, n in enumerate(lengths):
    ids[i, :n] = 10 * (i + 1) + np.arange(n)
  mask = (ids > 0).astype(np.int32)
  return {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask),
          "segment_ids": tf.constant(mask * 0), "label_ids": tf.range(len(lengths))}


def test_rows_by_hand():
  # max_seq_length 8: K = 2 examples a row. Longest first, each to the first row
  # with room: 8 -> row 0; 5 -> row 1; 4 -> row 2; 3 -> row 1 (5 + 3);
  # 2 -> row 2 (4 + 2); 1 -> row 2 is full of examples (K), row 3; 0 is left out.
  rows = packing.pack_window(_window([3, 5, 2, 0, 4, 8, 1], 8), 8)
  rows = {k: v.numpy().tolist() for k, v in rows.items()}
  assert rows["input_ids"] == [[60, 61, 62, 63, 64, 65, 66, 67],
                               [20, 21, 22, 23, 24, 10, 11, 12],
                               [50, 51, 52, 53, 30, 31, 0, 0],
                               [70, 0, 0, 0, 0, 0, 0, 0]]
  assert rows["input_mask"] == [[1] * 8, [1] * 8, [1] * 6 + [0] * 2, [1] + [0] * 7]
  assert rows["example_ids"] == [[1] * 8, [1] * 5 + [2] * 3, [1] * 4 + [2] * 2 + [0] * 2,
                                 [1] + [0] * 7]
  assert rows["position_ids"] == [list(range(8)), [0, 1, 2, 3, 4, 0, 1, 2],
                                  [0, 1, 2, 3, 0, 1, 0, 0], [0] * 8]
  assert rows["example_starts"] == [[0, 0], [0, 5], [0, 4], [0, 0]]
  assert rows["example_lengths"] == [[8, 0], [5, 3], [4, 2], [1, 0]]
  assert rows["label_ids"] == [[5, 0], [1, 0], [4, 2], [6, 0]]
  assert rows["segment_ids"] == [[0] * 8] * 4


def test_attention_bias_is_block_diagonal():
  bias = modeling.packed_attention_bias(tf.constant([[1, 1, 2, 0]])).numpy()[0, 0]
  m = -10000.0
  np.testing.assert_array_equal(bias, [[0, 0, m, m], [0, 0, m, m], [m, m, 0, m],
                                       [m, m, m, m]])


def test_mean_over_examples_ignores_empty_slots():
  per_example = tf.constant([[1.0, 7.0], [2.0, 3.0]])
  lengths = tf.constant([[5, 0], [2, 4]])
  assert float(packing.mean_over_examples(per_example, lengths)) == pytest.approx(2.0)


def test_regression_loss_of_packed_logits():
  logits = tf.constant([[[0.5], [2.0]], [[-1.0], [0.0]]])  # [rows 2, K 2, 1]
  labels = tf.constant([[1.0, 2.0], [1.0, 0.0]])
  np.testing.assert_allclose(classifier_task.loss_fn(is_regression=True)(labels, logits),
                             [[0.25, 0.0], [4.0, 0.0]])


MAX_LEN = 16
LENGTHS = [5, 16, 3, 9, 7, 4, 12, 2, 6]


@pytest.fixture(scope="module")
def model_and_examples():
  """A tiny classifier (Houlsby adapters, no dropout), examples of LENGTHS
  (random tokens and segments), and the same examples packed."""
  config = modeling.BertConfig.from_dict(dict(
      tiny_bert.TINY_CONFIG, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
  keras.utils.set_random_seed(1)
  model = modeling.BertClassifier(config, 3, AdapterConfig(size=4))
  model.ensure_built()
  rng = np.random.default_rng(0)
  n = len(LENGTHS)
  mask = (np.arange(MAX_LEN)[None, :] < np.array(LENGTHS)[:, None]).astype(np.int32)
  ids = rng.integers(5, 99, size=[n, MAX_LEN]).astype(np.int32) * mask
  segments = (rng.integers(0, 2, size=[n, MAX_LEN]) * mask).astype(np.int32)
  ids[:, 0] = 2  # [CLS]
  unpacked = {"input_ids": ids, "input_mask": mask, "segment_ids": segments}
  labels = rng.integers(0, 3, size=[n]).astype(np.int32)
  window = dict({k: tf.constant(v) for k, v in unpacked.items()},
                label_ids=tf.constant(labels), index=tf.range(n))
  packed = packing.pack_window(window, MAX_LEN)
  assert packed["input_ids"].shape[0] < n  # Really packed: fewer rows than examples.
  return model, {k: tf.constant(v) for k, v in unpacked.items()}, tf.constant(labels), packed


def _packed_inputs(packed):
  return {k: v for k, v in packed.items() if k not in ("label_ids", "index")}


def test_packed_model_gives_each_example_its_own_logits(model_and_examples):
  model, unpacked, _, packed = model_and_examples
  want = model(unpacked, training=False).numpy()
  got = model(_packed_inputs(packed), training=False).numpy()  # [rows, K, 3]
  outputs = packing.unpack({"logits": got, "index": packed["index"].numpy(),
                            "example_lengths": packed["example_lengths"].numpy()})
  assert sorted(outputs["index"]) == list(range(len(LENGTHS)))
  np.testing.assert_allclose(outputs["logits"], want[outputs["index"]], atol=1e-5)
  # Not the same numbers by construction: examples differ.
  assert np.abs(want[0] - want[1]).max() > 1e-3


def test_packed_loss_and_gradients_equal_the_unpacked(model_and_examples):
  model, unpacked, labels, packed = model_and_examples
  loss_fn = classifier_task.loss_fn(is_regression=False)
  variables = model.trainable_variables

  def loss_and_grads(compute):
    with tf.GradientTape() as tape:
      loss = compute()
    return float(loss), tape.gradient(loss, variables)

  # training=False: the head's dropout (0.1 whatever the config) off too.
  want_loss, want = loss_and_grads(lambda: tf.reduce_mean(
      loss_fn(labels, model(unpacked, training=False))))
  got_loss, got = loss_and_grads(lambda: packing.mean_over_examples(
      loss_fn(packed["label_ids"], model(_packed_inputs(packed), training=False)),
      packed["example_lengths"]))
  assert got_loss == pytest.approx(want_loss, abs=1e-5)
  assert len(variables) > 10
  for variable, w, g in zip(variables, want, got):
    w, g = tf.convert_to_tensor(w).numpy(), tf.convert_to_tensor(g).numpy()
    np.testing.assert_allclose(g, w, atol=1e-5, err_msg=variable.path)
  # The comparison is not of zeros: adapters and position embeddings get gradients.
  assert max(np.abs(tf.convert_to_tensor(w).numpy()).max() for w in want) > 1e-3


NUM_RECORDS = 60
RECORD_LEN = 24


@pytest.fixture(scope="module")
def record(tmp_path_factory):
  """NUM_RECORDS records of random lengths 2..RECORD_LEN: input_ids = uid + 1 on
  the tokens, label_ids = uid, and TPU padding (length 0) at the end."""
  path = str(tmp_path_factory.mktemp("packing") / "features.tf_record")
  lengths = list(np.random.default_rng(3).integers(2, RECORD_LEN + 1, size=NUM_RECORDS))
  lengths += [0, 0]
  with tf.io.TFRecordWriter(path) as writer:
    for uid, n in enumerate(lengths):
      pad = [0] * (RECORD_LEN - n)
      values = {"input_ids": [uid + 1] * n + pad, "input_mask": [1] * n + pad,
                "segment_ids": [0] * RECORD_LEN, "label_ids": [uid]}
      writer.write(tf.train.Example(features=tf.train.Features(feature={
          k: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
          for k, v in values.items()})).SerializeToString())
  return path, lengths


def _features():
  return dict(records.sequence_features(RECORD_LEN),
              label_ids=tf.io.FixedLenFeature([], tf.int64))


def _read(path, rows, is_training, seed=None):
  return records.read_batches(path, _features(), rows, is_training, drop_remainder=True,
                              seed=seed, pack_sequences=True)


def test_packed_batches_hold_every_example_once_whole_and_come_back_in_order(record):
  path, lengths = record
  batches = [{k: v.numpy() for k, v in b.items()} for b in _read(path, 4, False)]
  k = packing.max_examples_per_row(RECORD_LEN)
  assert all(b["input_ids"].shape == (4, RECORD_LEN) and b["example_lengths"].shape == (4, k)
             for b in batches)
  seen = []
  for b in batches:
    for r in range(4):
      for s in np.flatnonzero(b["example_lengths"][r]):
        start, n, uid = b["example_starts"][r, s], b["example_lengths"][r, s], \
            b["label_ids"][r, s]
        assert n == lengths[uid]
        tokens = slice(start, start + n)
        np.testing.assert_array_equal(b["input_ids"][r, tokens], uid + 1)
        np.testing.assert_array_equal(b["position_ids"][r, tokens], np.arange(n))
        np.testing.assert_array_equal(b["example_ids"][r, tokens], s + 1)
        assert b[records.INPUT_INDEX][r, s] == uid
        seen.append(uid)
      # Padding only after the row's examples.
      used = b["example_lengths"][r].sum()
      assert b["input_mask"][r].tolist() == [1] * used + [0] * (RECORD_LEN - used)
  assert sorted(seen) == list(range(NUM_RECORDS))  # Each real example once; no padding.
  stats = records.packing_stats(path, RECORD_LEN)
  assert stats.num_examples == NUM_RECORDS and stats.real_tokens == sum(lengths)
  # First-fit decreasing reaches the least number of rows here: the tokens' own.
  assert stats.num_rows == -(-sum(lengths) // RECORD_LEN)
  assert stats.real_token_share == pytest.approx(sum(lengths) / (stats.num_rows * RECORD_LEN))
  # Unpacked prediction outputs come back in record order.
  outputs = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
  unpacked = packing.unpack(outputs)
  order = np.argsort(unpacked[records.INPUT_INDEX], kind="stable")
  assert unpacked["label_ids"][order].tolist() == list(range(NUM_RECORDS))
  assert "input_ids" not in unpacked


def test_packed_training_stream_is_seeded_and_resumes_by_skipping_batches(record):
  path, _ = record

  def take(dataset, n):
    return [b["input_ids"].numpy() for b in dataset.take(n)]

  first = take(_read(path, 3, True, seed=5), 12)
  assert all(np.array_equal(a, b) for a, b in zip(first, take(_read(path, 3, True, seed=5),
                                                              12)))
  resumed = take(loop.training_dataset(_read(path, 3, True, seed=5), 7), 5)
  assert all(np.array_equal(a, b) for a, b in zip(resumed, first[7:]))
  other = take(_read(path, 3, True, seed=6), 12)
  assert not all(np.array_equal(a, b) for a, b in zip(first, other))


# run_classifier.py in-process on the tiny base without dropout (conftest.no_dropout_base).
from run_harness import (  # pylint: disable=wrong-import-position
    GLUE, classifier_flags, read_eval_results, read_test_results, run_main)


def _sst2(base, output_dir, **flags):
  return run_main(**classifier_flags(base, task_name="SST-2", data_dir=os.path.join(GLUE, "SST-2"),
                                     output_dir=output_dir, **flags))


def test_packed_evaluation_and_prediction_give_the_unpacked_results(no_dropout_base, tmp_path):
  out = str(tmp_path / "run")
  results = {}
  # Unpacked: evaluated and predicted by the run that trained, on its last step's
  # weights (those of the checkpoint the packed run restores).
  for packed, flags in ((False, dict(do_train=True, num_train_epochs=2)), (True, {})):
    logs = _sst2(no_dropout_base, out, do_eval=True, do_predict=True, pack_sequences=packed,
                 eval_batch_size=4, predict_batch_size=4, **flags)
    results[packed] = (read_eval_results(os.path.join(out, "eval_results.txt")),
                       read_test_results(os.path.join(out, "test_results.tsv")), logs)
  (want_eval, want_test, _), (got_eval, got_test, logs) = results[False], results[True]
  assert got_eval.keys() == want_eval.keys()
  for key in want_eval:
    assert got_eval[key] == pytest.approx(want_eval[key], abs=1e-5), key
  np.testing.assert_allclose(got_test, want_test, atol=1e-5)
  # The test examples differ: the comparison covers their order too.
  assert len({tuple(row) for row in want_test.round(4)}) == len(want_test) > 1
  # Really packed: fewer rows than examples.
  (line,) = [l for l in logs if l.startswith("packed ") and "examples into" in l][:1]
  examples, rows = map(int, re.match(r"packed (\d+) examples into (\d+) rows", line).groups())
  assert rows < examples


# The packed training run of two tests: SST-2, 3 epochs of batches of about 3
# examples, a checkpoint every 2 steps.
PACKED_TRAINING = dict(do_train=True, do_eval=True, pack_sequences=True,
                       num_train_epochs=3, train_batch_size=3, save_checkpoints_steps=2)


@pytest.fixture(scope="module")
def packed_run(base, tmp_path_factory):
  """run_classifier.py trained packed (PACKED_TRAINING), uninterrupted: its output_dir
  and log lines."""
  out = str(tmp_path_factory.mktemp("packed") / "whole")
  return out, _sst2(base, out, **PACKED_TRAINING)


def test_packed_training_counts_examples_per_batch_and_epochs(packed_run):
  out, logs = packed_run
  stats = records.packing_stats(os.path.join(out, "train.tf_record"), 32)
  assert stats.num_examples == 8 and stats.num_rows < 8  # SST-2's 8 short sentences.
  rows = -(-3 * stats.num_rows // 8)  # Rows that hold 3 examples on average.
  steps = int(stats.num_rows / rows * 3)
  assert f"packed 8 examples into {stats.num_rows} rows of 32 tokens" in "\n".join(logs)
  assert f"{rows} rows per batch" in "\n".join(logs)
  config = json.loads(open(os.path.join(out, "run_config.json")).read())
  assert config["pack_sequences"] is True and config["packed_rows_per_batch"] == rows
  assert config["num_train_steps"] == steps and config["num_warmup_steps"] == int(steps * 0.1)
  assert tf.train.latest_checkpoint(out).endswith(f"model.ckpt-{steps}")
  assert read_eval_results(os.path.join(out, "eval_results.txt"))["global_step"] == steps
  assert config["train_batch_size"] == 3  # The flag's; a step holds about that many:
  per_step = round(rows * 8 / stats.num_rows)
  assert per_step != 3
  # progress lines count the examples a step holds on average.
  lines = [l for l in logs if "examples/sec = " in l]
  assert lines
  for line in lines:
    steps_per_sec, examples_per_sec = map(float, re.search(
        r"steps/sec = ([\d.]+), examples/sec = ([\d.]+)", line).groups())
    assert examples_per_sec == pytest.approx(steps_per_sec * per_step, rel=0.02), line


@pytest.mark.parametrize("flag,value", [("group_by_length", True),
                                        ("pad_to_max_seq_length", False)])
def test_packing_refuses_per_batch_padding_flags(base, tmp_path, flag, value):
  with pytest.raises(errors.UserError,
                     match=f"--pack_sequences fills rows of --max_seq_length: drop "
                           f"--{'' if value else 'no'}{flag}"):
    _sst2(base, str(tmp_path), do_train=True, pack_sequences=True, **{flag: value})


def test_an_interrupted_packed_run_resumes_to_the_uninterrupted_results(base, packed_run,
                                                                        tmp_path, monkeypatch):
  """The device lost after step 3 (interrupted_runs.losing_the_device_at, as in
  test_interruptions): the same command resumes from checkpoint 2, skips the
  packed batches trained on and ends where an uninterrupted run (packed_run) does."""
  from interrupted_runs import losing_the_device_at  # pylint: disable=import-outside-toplevel
  from adapter_bert.runtime import stop_signals  # pylint: disable=import-outside-toplevel
  whole, _ = packed_run
  out = str(tmp_path / "interrupted")
  steps = json.loads(open(os.path.join(whole, "run_config.json")).read())["num_train_steps"]
  assert steps >= 6
  monkeypatch.setattr(loop, "make_train_loop", losing_the_device_at(3))
  with pytest.raises(stop_signals.Stopped):
    _sst2(base, out, **PACKED_TRAINING)
  monkeypatch.undo()
  logs = _sst2(base, out, **PACKED_TRAINING)
  assert "Skipping the 2 batches trained on before step 2" in logs
  assert read_eval_results(os.path.join(out, "eval_results.txt")) == read_eval_results(
      os.path.join(whole, "eval_results.txt"))
