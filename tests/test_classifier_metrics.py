"""Tests for classification/metrics.py against hand-computed values and exact file bytes."""

import logging
import math
import os

import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

from adapter_bert.classification import metrics as cm
from adapter_bert.classification import processors
from adapter_bert.classification import task as classifier_task

# Logits log(p) give softmax = p exactly, so the loss is -log p(label) by hand.
P = np.array([[0.8, 0.2], [0.4, 0.6], [0.3, 0.7], [0.9, 0.1], [0.5, 0.5]])
LOGITS = np.log(P)


def test_accuracy_and_loss_ignore_padding():
  labels = [0, 1, 0, 1, 0]
  real = [1, 1, 1, 1, 0]  # the last row is TPU padding
  r = cm.compute_metrics("rte", labels, LOGITS, real, is_regression=False)
  assert set(r) == {"eval_accuracy", "eval_loss"}
  # Predictions 0, 1, 1, 0 on labels 0, 1, 0, 1: two right out of four.
  assert r["eval_accuracy"] == np.float32(0.5)
  expected_loss = -(math.log(0.8) + math.log(0.6) + math.log(0.3) + math.log(0.1)) / 4
  assert r["eval_loss"] == pytest.approx(expected_loss, rel=1e-6)
  assert r["eval_loss"].dtype == np.float32
  # Without weights every row counts (row 5: argmax picks 0 on a tie, label 0).
  r = cm.compute_metrics("rte", labels, LOGITS, is_regression=False)
  assert r["eval_accuracy"] == np.float32(0.6)


def test_f1_for_mrpc_and_qqp():
  labels = np.array([1, 1, 1, 0, 0, 0, 1, 0])
  preds = np.array([1, 1, 0, 1, 0, 0, 0, 0])
  logits = np.eye(2)[preds] * 3.0
  # TP 2, FP 1, FN 2: F1 = 2*2 / (2*2 + 1 + 2) = 4/7.
  for task in ("MRPC", "qqp"):
    r = cm.compute_metrics(task, labels, logits, is_regression=False)
    assert set(r) == {"eval_accuracy", "eval_loss", "eval_f1"}
    assert r["eval_f1"] == pytest.approx(4 / 7, rel=1e-6)
    assert r["eval_accuracy"] == np.float32(5 / 8)
  # The padded row (a false positive) does not count.
  r = cm.compute_metrics("mrpc", np.append(labels, 0), np.vstack([logits, [0.0, 3.0]]),
                         [1] * 8 + [0], is_regression=False)
  assert r["eval_f1"] == pytest.approx(4 / 7, rel=1e-6)


def test_mcc_for_cola():
  labels = np.array([1, 1, 1, 0, 0, 0, 1, 0])
  preds = np.array([1, 1, 0, 1, 0, 0, 0, 0])
  r = cm.compute_metrics("cola", labels, np.eye(2)[preds], is_regression=False)
  # TP 2, TN 3, FP 1, FN 2: (2*3 - 1*2) / sqrt(3 * 4 * 5 * 4) = 4 / sqrt(240).
  assert r["eval_mcc"] == pytest.approx(4 / math.sqrt(240), rel=1e-6)
  assert set(r) == {"eval_accuracy", "eval_loss", "eval_mcc"}


def test_pearson_spearman_and_mse_for_stsb():
  labels = np.array([1.0, 2.0, 3.0, 4.0, 0.0])
  preds = np.array([[1.0], [3.0], [2.0], [4.0], [9.0]])
  r = cm.compute_metrics("sts-b", labels, preds, [1, 1, 1, 1, 0], is_regression=True)
  assert set(r) == {"eval_loss", "eval_pearson", "eval_spearman"}
  assert r["eval_loss"] == pytest.approx(0.5)  # errors 0, 1, 1, 0 over four
  # x = y = {1,2,3,4} as sets, means 2.5; sum of products of deviations = 4, variances 5.
  assert r["eval_pearson"] == pytest.approx(0.8, rel=1e-6)
  # Ranks equal the values; Spearman of a swap of 2 and 3: 1 - 6*2 / (4*15) = 0.8.
  assert r["eval_spearman"] == pytest.approx(0.8, rel=1e-6)
  noisy = np.array([0.3, 2.2, 2.9, 4.4, 1.0, 3.7])
  truth = np.array([0.0, 2.0, 3.5, 4.0, 1.5, 3.0])
  r = cm.compute_metrics("STSB", truth, noisy, is_regression=True)
  assert r["eval_pearson"] == pytest.approx(scipy.stats.pearsonr(noisy, truth)[0], rel=1e-6)
  assert r["eval_spearman"] == pytest.approx(scipy.stats.spearmanr(noisy, truth)[0], rel=1e-6)


def test_regression_is_the_callers_flag_not_the_task_name():
  # The processor owns the decision; the metrics follow the flag they are given.
  assert processors.get_processor("stsb").is_regression
  assert not processors.get_processor("mrpc").is_regression
  labels = np.array([1.0, 2.0, 3.0, 4.0])
  scores = np.array([1.0, 3.0, 2.0, 4.0])
  r = cm.compute_metrics("my-scores", labels, scores, is_regression=True)
  assert set(r) == {"eval_loss", "eval_pearson", "eval_spearman"}
  assert r["eval_pearson"] == pytest.approx(0.8, rel=1e-6)
  # eval_results passes it on: squared errors 0, 1, 1, 0 in batches of 3 and 1
  # -> "loss" (mean of batch means) = (2/3 + 0) / 2; eval_loss over examples = 0.5.
  outputs = {"logits": scores[:, None], "labels": labels,
             "is_real_example": np.ones([4], np.int64)}
  r = classifier_task.eval_results("sts-b", outputs, 3, 7,
                                   processors.get_processor("sts-b").is_regression)
  assert set(r) == {"eval_loss", "eval_pearson", "eval_spearman", "loss", "global_step"}
  assert r["eval_loss"] == pytest.approx(0.5)
  assert r["loss"] == pytest.approx(1 / 3) and r["global_step"] == 7
  outputs = {"logits": LOGITS[:4], "labels": np.array([0, 1, 0, 1]),
             "is_real_example": np.ones([4], np.int64)}
  r = classifier_task.eval_results("mrpc", outputs, 4, 7,
                                   processors.get_processor("mrpc").is_regression)
  assert set(r) == {"eval_accuracy", "eval_loss", "eval_f1", "loss", "global_step"}
  assert r["eval_accuracy"] == np.float32(0.5)
  assert r["loss"] == pytest.approx(r["eval_loss"], rel=1e-6)  # one batch, no padding


def test_bad_inputs():
  with pytest.raises(ValueError, match="no real examples"):
    cm.compute_metrics("mrpc", [0], [[1.0, 0.0]], [0], is_regression=False)
  with pytest.raises(ValueError, match="one score per example"):
    cm.compute_metrics("sts-b", [1.0], [[1.0, 0.0]], is_regression=True)


def test_eval_results_file_and_log(tmp_path, caplog):
  caplog.set_level(logging.INFO, logger="absl")
  path = str(tmp_path / "eval_results.txt")
  results = {"eval_loss": np.float32(0.41730323), "eval_accuracy": np.float32(0.8627451),
             "global_step": 343, "loss": np.float32(0.5)}
  cm.write_eval_results(path, results)
  with open(path, "rb") as f:
    assert f.read() == (b"eval_accuracy = 0.8627451\neval_loss = 0.41730323\n"
                        b"global_step = 343\nloss = 0.5\n")
  assert caplog.messages == ["***** Eval results *****", "  eval_accuracy = 0.8627451",
                             "  eval_loss = 0.41730323", "  global_step = 343", "  loss = 0.5"]
  assert os.listdir(tmp_path) == ["eval_results.txt"]


def test_test_results_file(tmp_path):
  path = str(tmp_path / "test_results.tsv")
  probabilities = np.array([[0.25, 0.75], [0.1, 0.9], [0.5, 0.5]], dtype=np.float32)
  assert cm.write_test_results(path, probabilities, [1, 1, 0]) == 2
  with open(path, "rb") as f:
    assert f.read() == b"0.25\t0.75\n0.1\t0.9\n"
  three = np.array([[0.2, 0.3, 0.5]])
  cm.write_test_results(path, three)
  with open(path, "rb") as f:
    assert f.read() == b"0.2\t0.3\t0.5\n"


def test_stsb_test_results_one_score_per_line():
  path = "ram://metrics_test/test_results.tsv"
  tf.io.gfile.makedirs("ram://metrics_test")
  cm.write_test_results(path, np.array([3.5, 0.25, 4.0]), [1, 1, 0])
  with tf.io.gfile.GFile(path, "rb") as f:
    assert f.read() == b"3.5\n0.25\n"
  cm.write_test_results(path, np.array([[1.5], [2.0]]))
  with tf.io.gfile.GFile(path, "rb") as f:
    assert f.read() == b"1.5\n2.0\n"
