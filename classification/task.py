"""The pieces of run_classifier.py that are not flag wiring: losses, results, labels.

  loss_fn / per_example_loss   the original's classifier (softmax cross-entropy)
                               and regression (squared error) losses
  eval_results                 what the original's Estimator.evaluate returned
  probabilities                what the original's predict wrote per example
  write_eval_summaries         the eval metrics for TensorBoard
  MODEL_KEYS                   the run_config.json keys that, beside the encoder's
                               (model_setup.check_run_config), fix a classifier

What both scripts share (flags, base encoder, model, weights, run_config.json)
is in runtime/model_setup.py. `is_regression` is always the task processor's
(classification/processors.py): no function here decides it from a task name.
"""

from typing import Dict, Mapping

import numpy as np
import scipy.special
import tensorflow as tf

from classification import metrics as classifier_metrics

# Keys of run_config.json that fix the head's variables and the meaning of its
# outputs: a checkpoint in output_dir is only usable if they match.
MODEL_KEYS = ("num_labels", "label_list")


def loss_fn(is_regression: bool):
  """(labels [B], logits [B, num_labels]) -> float32 per-example loss [B]."""
  def classification(labels, logits):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)

  def regression(labels, logits):
    return tf.square(logits[:, 0] - tf.cast(labels, tf.float32))

  return regression if is_regression else classification


def per_example_loss(logits: np.ndarray, labels: np.ndarray, is_regression: bool) -> np.ndarray:
  """NumPy twin of `loss_fn`, float64 [N]."""
  logits = np.asarray(logits, np.float64)
  if is_regression:
    return (logits[:, 0] - np.asarray(labels, np.float64)) ** 2
  log_probs = scipy.special.log_softmax(logits, axis=-1)
  return -log_probs[np.arange(len(labels)), np.asarray(labels, np.int64)]


def eval_results(task_name: str, outputs: Mapping[str, np.ndarray], batch_size: int,
                 global_step: int, is_regression: bool) -> Dict[str, object]:
  """The keys of the original's eval_results.txt for `loop.predict` outputs.

  eval_* come from classifier_metrics (real examples only). "loss" is what
  Estimator.evaluate reported: the mean over eval batches of each batch's mean
  loss, padding included (the original's total_loss did not weight examples).
  `is_regression` is the processor's; it picks the loss and the metrics.
  """
  logits, labels = outputs["logits"], outputs["labels"]
  results = dict(classifier_metrics.compute_metrics(
      task_name, labels, logits if not is_regression else logits[:, 0],
      outputs["is_real_example"], is_regression=is_regression))
  losses = per_example_loss(logits, labels, is_regression)
  batch_means = [losses[i:i + batch_size].mean() for i in range(0, len(losses), batch_size)]
  results["loss"] = np.float32(np.mean(batch_means))
  results["global_step"] = int(global_step)
  return results


def probabilities(logits: np.ndarray, is_regression: bool) -> np.ndarray:
  """Class probabilities [N, num_labels], or scores [N] for regression."""
  if is_regression:
    return np.asarray(logits)[:, 0]
  return scipy.special.softmax(np.asarray(logits, np.float64), axis=-1).astype(np.float32)


def write_eval_summaries(log_dir: str, results: Mapping[str, object], step: int) -> None:
  """TensorBoard scalars of the eval metrics, as Estimator wrote to model_dir/eval."""
  writer = tf.summary.create_file_writer(log_dir)
  with writer.as_default(step=step):
    for key, value in sorted(results.items()):
      if key != "global_step":
        tf.summary.scalar(key, float(value))
  writer.flush()
  writer.close()
