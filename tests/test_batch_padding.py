"""Per-batch padding and batches grouped by length (runtime/records.py).

The reference is the original's input pipeline: every example padded to
max_seq_length, batches in record order. Cutting a batch after its longest
example must drop only padding, and a run must give the same results either way.
"""

import functools
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from absl import flags as absl_flags

from adapter_bert.classification import features as classifier_features
from adapter_bert.cli import flags as cli_flags
from adapter_bert.runtime import loop
from adapter_bert.runtime import prediction
from adapter_bert.runtime import records
from adapter_bert.runtime import startup
from adapter_bert.tasks import question_answering
from run_harness import GLUE, classifier_flags, read_eval_results, read_test_results, run_main

MAX_LEN = 40
NUM_RECORDS = 50


def _write_records(path, seed, features):
  """NUM_RECORDS records of random lengths 1..MAX_LEN: input_ids = uid + 1 on the
  tokens, input_mask, and features(uid, n); returns the lengths."""
  lengths = np.random.default_rng(seed).integers(1, MAX_LEN + 1, size=NUM_RECORDS)
  with tf.io.TFRecordWriter(path) as writer:
    for uid, n in enumerate(lengths):
      pad = [0] * (MAX_LEN - n)
      values = {"input_ids": [uid + 1] * n + pad, "input_mask": [1] * n + pad,
                **features(uid, n)}
      writer.write(tf.train.Example(features=tf.train.Features(feature={
          k: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
          for k, v in values.items()})).SerializeToString())
  return lengths


@pytest.fixture(scope="module")
def record(tmp_path_factory):
  """NUM_RECORDS records of random lengths 1..MAX_LEN (input_ids = uid + 1 on the tokens)."""
  path = str(tmp_path_factory.mktemp("records") / "features.tf_record")
  lengths = _write_records(path, 0, lambda uid, n: {
      "segment_ids": [0] * (n // 2) + [1] * (n - n // 2) + [0] * (MAX_LEN - n),
      "uid": [uid]})
  return path, lengths


def _features():
  return dict(records.sequence_features(MAX_LEN), uid=tf.io.FixedLenFeature([], tf.int64))


def _batches(path, batch_size, is_training=False, take=None, **kwargs):
  d = records.read_batches(path, _features(), batch_size, is_training,
                           drop_remainder=is_training, **kwargs)
  return [{k: v.numpy() for k, v in b.items()} for b in (d.take(take) if take else d)]


@pytest.mark.parametrize("multiple", [1, 16])
def test_prediction_batches_cut_only_padding_and_come_back_in_order(record, multiple):
  path, lengths = record
  fixed = _batches(path, 8)
  want = {k: np.concatenate([b[k] for b in fixed]) for k in fixed[0]}
  got = _batches(path, 8, pad_to_multiple_of=multiple)
  assert sum(len(b["uid"]) for b in got) == NUM_RECORDS
  for b in got:
    width, longest = b["input_ids"].shape[1], lengths[b["uid"]].max()
    assert width == min(-(-longest // multiple) * multiple, MAX_LEN)
    for name in ("input_ids", "input_mask", "segment_ids"):
      np.testing.assert_array_equal(b[name], want[name][b["uid"], :width])
      assert not want[name][b["uid"], width:].any()  # Only padding was cut.
    np.testing.assert_array_equal(b[records.INPUT_INDEX], b["uid"])
  # Sorted by length: consecutive batches of a window do not overlap in length.
  assert all(lengths[a["uid"]].max() <= lengths[b["uid"]].min() for a, b in zip(got, got[1:]))
  # The tokens computed: batches of 8 of the sorted lengths, each rounded up.
  chunks = np.split(np.sort(lengths), range(8, NUM_RECORDS, 8))
  want_tokens = sum(len(c) * min(-(-c.max() // multiple) * multiple, MAX_LEN) for c in chunks)
  assert sum(b["input_ids"].size for b in got) == want_tokens < NUM_RECORDS * MAX_LEN


def test_last_batch_filled_after_sorting(record):
  path, lengths = record
  got = _batches(path, 8, pad_to_multiple_of=1, fill_last_batch={"uid": -1})
  uids = np.concatenate([b["uid"] for b in got])
  assert [len(b["uid"]) for b in got] == [8] * 7  # 50 records and 6 fillers.
  assert sorted(uids[uids >= 0]) == list(range(NUM_RECORDS)) and (uids < 0).sum() == 6
  assert (got[-1]["uid"][-6:] == -1).all() and not got[-1]["input_mask"][-6:].any()


def test_grouped_training_batches_are_of_one_bucket_seeded_and_resumable(record):
  path, lengths = record
  kwargs = dict(is_training=True, seed=7, pad_to_multiple_of=1, group_by_length=True)
  stream = _batches(path, 4, take=60, **kwargs)
  for b in stream:
    n = lengths[b["uid"]]
    # Buckets of 8 tokens: 1-8, 9-16, ...; the batch cut after its longest example.
    assert (n.min() - 1) // 8 == (n.max() - 1) // 8
    assert b["input_ids"].shape == (4, n.max())
  # The whole data set goes round (repeated, shuffled) ...
  assert set(np.concatenate([b["uid"] for b in stream])) == set(range(NUM_RECORDS))
  # ... and so do the buckets: not in length order.
  assert sorted(lengths[b["uid"]].max() for b in stream[:10]) != [
      lengths[b["uid"]].max() for b in stream[:10]]
  same = _batches(path, 4, take=60, **kwargs)
  assert all((a["uid"] == b["uid"]).all() for a, b in zip(stream, same))
  other = _batches(path, 4, take=60, **dict(kwargs, seed=8))
  assert any((a["uid"] != b["uid"]).any() for a, b in zip(stream, other))
  # Resuming skips the batches trained on: what training reads from step 25
  # (loop.training_dataset) is the rest of the stream. With tf.data's
  # autotuner off there: its thread stalled the iterator's deletion at the
  # end of every training run.
  d = loop.training_dataset(records.read_batches(path, _features(), 4, drop_remainder=True,
                                                 **kwargs), 25).take(5)
  assert d.options().autotune.enabled is False
  assert [b["uid"].numpy().tolist() for b in d] == [b["uid"].tolist() for b in stream[25:30]]


def test_grouping_needs_training_with_per_batch_padding(record):
  path, _ = record
  with pytest.raises(ValueError, match="group_by_length"):
    records.read_batches(path, _features(), 4, True, True, group_by_length=True)
  with pytest.raises(ValueError, match="group_by_length"):
    records.read_batches(path, _features(), 4, False, False, pad_to_multiple_of=1,
                         group_by_length=True)


class Doubler(keras.Model):
  """Outputs of each shape a model gives: per token ("doubled") and per example."""

  def call(self, features, training=False):
    x = tf.cast(features["input_ids"], tf.float32)
    return {"doubled": 2 * x, "total": tf.reduce_sum(x, axis=-1)}


def test_predict_traces_once_a_run_and_runs_iterations_per_loop_batches_a_call(
    record, monkeypatch):
  path, lengths = record
  calls = []
  made = prediction.predict_function

  def counted(*args, **kwargs):
    function = made(*args, **kwargs)
    return lambda iterator, num_steps: calls.append(int(num_steps)) or function(
        iterator, num_steps)

  monkeypatch.setattr(prediction, "predict_function", counted)
  strategy, model = tf.distribute.get_strategy(), Doubler()
  fixed = _batches(path, 8)
  want = np.concatenate([b["input_ids"] for b in fixed]) * 2
  # Batches of 8 of their own lengths (7 batches, each of its width), several
  # calls, as a run's evaluation and prediction.
  for iterations_per_loop, host_calls in ((2, [1, 1, 2, 2, 1]), (7, [1, 1, 5]), (1, [1] * 7),
                                          (3, [1, 1, 3, 2])):
    calls.clear()
    d = records.read_batches(path, _features(), 8, False, False, pad_to_multiple_of=1)
    out = prediction.predict(strategy, model, d.map(lambda f: (f, f["uid"])),
                             iterations_per_loop=iterations_per_loop)
    # The host counts the 7 batches first, then runs one batch (the trace), one
    # (timed), then calls of iterations_per_loop batches (each well within
    # progress.PREDICT_CALL_SECONDS) and one of the rest: no call asks for a batch
    # that is not there.
    assert calls == host_calls
    np.testing.assert_array_equal(out["uid"], np.arange(NUM_RECORDS))  # Record order.
    # Each batch zero-padded to the widest: the longest example.
    np.testing.assert_array_equal(out["doubled"], want[:, :lengths.max()])
    np.testing.assert_array_equal(out["total"], want.sum(-1) / 2)
    assert sorted(out) == sorted(["doubled", "total", "labels", "uid", records.INPUT_INDEX,
                                  "input_ids", "input_mask", "segment_ids"])
  # One trace for every call and width (the batches' spec has an unknown length).
  assert made(strategy, model).experimental_get_tracing_count() == 1


@pytest.fixture(scope="module")
def task_records(tmp_path_factory):
  """NUM_RECORDS records holding every feature the classifier and SQuAD read."""
  path = str(tmp_path_factory.mktemp("task_records") / "features.tf_record")
  _write_records(path, 1, lambda uid, n: {
      "segment_ids": [0] * MAX_LEN, "label_ids": [uid % 2], "is_real_example": [1],
      "unique_ids": [1000 + uid], "start_positions": [0], "end_positions": [n - 1]})
  return path


def test_padding_defaults_to_max_seq_length_on_tpu():
  options = functools.partial(startup.RunOptions, output_dir="unused")
  assert options().pad_to_multiple_of == 1  # Per batch on CPU and GPU, as before,
  assert options(use_xla=True).pad_to_multiple_of == records.STATIC_SHAPE_MULTIPLE
  assert options(pad_to_max_seq_length=True).pad_to_multiple_of is None
  assert options(use_tpu=True).pad_to_multiple_of is None  # One program on TPU,
  for opt_in in (dict(pad_to_max_seq_length=False), dict(group_by_length=True)):
    # per batch there only when asked.
    assert (options(use_tpu=True, **opt_in).pad_to_multiple_of
            == records.STATIC_SHAPE_MULTIPLE)
  fv = absl_flags.FlagValues()
  cli_flags.define_training_flags(fv)
  cli_flags.define_tpu_flags(fv)
  fv(["run", "--use_tpu"])
  assert fv.pad_to_max_seq_length is None  # Unset: the options decide.
  fv(["run", "--use_tpu", "--nopad_to_max_seq_length"])
  assert fv.pad_to_max_seq_length is False


@pytest.mark.parametrize("batch_size", [8, 10])  # 50 records: a last batch part-full, or not.
def test_tpu_batches_have_static_shapes(task_records, batch_size):
  """Every dataset a --use_tpu run reads, built with its options as the scripts build it."""
  options = startup.RunOptions(output_dir="unused", use_tpu=True, max_seq_length=MAX_LEN)
  padding = dict(pad_to_multiple_of=options.pad_to_multiple_of)
  datasets = {
      "classifier train": classifier_features.make_dataset(
          task_records, MAX_LEN, batch_size, is_training=True, drop_remainder=True, seed=1,
          group_by_length=options.group_by_length, **padding),
      # run_classifier / run_multitask: examples padded to a multiple of the batch.
      "classifier eval, predict": classifier_features.make_dataset(
          task_records, MAX_LEN, batch_size, is_training=False,
          drop_remainder=options.use_tpu, **padding),
      "squad train": question_answering.train_dataset(
          task_records, MAX_LEN, batch_size, 1, group_by_length=options.group_by_length,
          **padding),
      "squad predict": question_answering.predict_dataset(
          task_records, MAX_LEN, batch_size, NUM_RECORDS, pad_last_batch=options.use_tpu,
          **padding)}
  for name, d in datasets.items():
    for spec in tf.nest.flatten(d.element_spec):
      assert spec.shape.is_fully_defined(), (name, d.element_spec)
      assert spec.shape[:1] == [batch_size], name
  # SQuAD predicts every feature, its last batch filled where part-full.
  unique_ids = np.concatenate([u.numpy() for _, u in datasets["squad predict"]])
  assert len(unique_ids) == -(-NUM_RECORDS // batch_size) * batch_size
  assert sorted(unique_ids[unique_ids >= 0]) == list(range(1000, 1000 + NUM_RECORDS))


def _sst2_run(base, output_dir, **flags):
  """SST-2 trained 2 epochs, evaluated and predicted; `flags` override (None: not given)."""
  flags = {"do_train": True, "do_eval": True, "do_predict": True, "num_train_epochs": 2,
           **flags}
  return run_main(**classifier_flags(base, task_name="SST-2", data_dir=os.path.join(GLUE, "SST-2"),
                                     output_dir=output_dir, **flags))


def test_per_batch_padding_gives_the_results_of_padding_to_the_maximum(no_dropout_base,
                                                                       tmp_path):
  results = {}
  # XLA's kernels round differently: compared with XLA padding to the maximum.
  for name, flags in {"max": dict(pad_to_max_seq_length=True), "batch": {},
                      "xla_max": dict(pad_to_max_seq_length=True, use_xla=True),
                      "xla": dict(use_xla=True)}.items():
    out = str(tmp_path / name)
    logs = _sst2_run(no_dropout_base, out, **flags)
    results[name] = (read_eval_results(os.path.join(out, "eval_results.txt")),
                     read_test_results(os.path.join(out, "test_results.tsv")), logs)
  for name, reference in (("batch", "max"), ("xla", "xla_max")):
    want_eval, want_test, _ = results[reference]
    got_eval, got_test, _ = results[name]
    assert got_eval.keys() == want_eval.keys()
    for key in want_eval:
      assert got_eval[key] == pytest.approx(want_eval[key], abs=1e-5), (name, key)
    np.testing.assert_allclose(got_test, want_test, atol=1e-5)
  # The test examples differ in length: the comparison covers the order too.
  assert len({tuple(row) for row in want_test.round(4)}) == len(want_test)


def test_group_by_length_trains_the_same_steps(no_dropout_base, tmp_path):
  out = str(tmp_path / "grouped")
  _sst2_run(no_dropout_base, out, group_by_length=True, do_predict=None)  # Training's steps.
  config = json.loads(open(os.path.join(out, "run_config.json")).read())
  assert config["group_by_length"] is True and config["pad_to_max_seq_length"] is False
  assert tf.train.latest_checkpoint(out).endswith("model.ckpt-4")  # 8 examples, batch 4.
  assert read_eval_results(os.path.join(out, "eval_results.txt"))["global_step"] == 4
