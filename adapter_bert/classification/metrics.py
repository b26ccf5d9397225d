"""GLUE metrics and the result files of run_classifier.py.

Metrics are computed over real examples only (`is_real_example` == 1), as the
original's weighted tf.metrics did for TPU padding. Keys per task:

  every classification task: eval_accuracy, eval_loss (mean softmax
                             cross-entropy, as the original's metric_fn)
  mrpc, qqp:                 + eval_f1 (binary F1, positive class = label id 1)
  cola:                      + eval_mcc (Matthews correlation)
  regression (sts-b):        eval_loss (mean squared error), eval_pearson,
                             eval_spearman; no eval_accuracy, which a float
                             score does not have.

Whether a task is a regression is the processor's `is_regression`
(classification/processors.py); callers pass it in, this module keeps no list
of regression tasks.

Values are numpy float32, as the original's tf.metrics returned, so
`eval_results.txt` prints them the same way (str(np.float32) = "0.8627451").
"""

import posixpath
from typing import Dict, Mapping, Optional

from absl import logging
import numpy as np

from adapter_bert.classification.processors import canonical_task_name
from adapter_bert.storage import file_io

F1_TASKS = frozenset({"mrpc", "qqp"})
MCC_TASKS = frozenset({"cola"})
# Each dev example's probabilities (or score), test_results.tsv's format: run_classifier.py
# and run_multitask.py --eval_predictions write it, the study's bootstrap reads it.
EVAL_PREDICTIONS_FILE = "eval_predictions.tsv"


def _real_mask(is_real_example, n: int) -> np.ndarray:
  if is_real_example is None:
    return np.ones([n], dtype=bool)
  mask = np.asarray(is_real_example).reshape([-1]) > 0
  if mask.shape[0] != n:
    raise ValueError(f"is_real_example has {mask.shape[0]} entries for {n} examples")
  return mask


def _regression_metrics(name: str, label_ids, logits, mask) -> Dict[str, np.float32]:
  """STS-B's: mean squared error as the loss, Pearson's and Spearman's correlation."""
  scores = logits.reshape([logits.shape[0], -1])
  if scores.shape[1] != 1:
    raise ValueError(f"task {name} is a regression: expected one score per example, "
                     f"got shape {logits.shape}")
  predictions = scores[:, 0][mask]
  labels = label_ids.astype(np.float64)[mask]
  import scipy.stats  # pylint: disable=g-import-not-at-top,import-outside-toplevel  # On use: below.
  return {
      "eval_loss": np.float32(np.mean((predictions - labels) ** 2)),
      "eval_pearson": np.float32(scipy.stats.pearsonr(predictions, labels)[0]),
      "eval_spearman": np.float32(scipy.stats.spearmanr(predictions, labels)[0]),
  }


def compute_metrics(task_name: str, label_ids, logits, is_real_example=None, *,
                    is_regression: bool) -> Dict[str, np.float32]:
  """Computes the eval metrics of one task.

  Args:
    task_name: task name or alias (see processors.get_processor); picks the
      extra classification metrics (eval_f1, eval_mcc).
    label_ids: int [N] label ids (float [N] scores for a regression).
    logits: float [N, num_labels] classifier logits (float [N] or [N, 1]
      predicted scores for a regression). Logits rather than probabilities so
      the loss is an exact log-softmax, as the original computed it.
    is_real_example: optional [N] 0/1 weights; padding (0) is ignored.
    is_regression: the task's processor's `is_regression`.

  Returns:
    {"eval_accuracy", "eval_loss", ...} as listed in the module docstring.
  """
  name = canonical_task_name(task_name)
  label_ids = np.asarray(label_ids).reshape([-1])
  logits = np.asarray(logits, dtype=np.float64)
  mask = _real_mask(is_real_example, label_ids.shape[0])
  if not mask.any():
    raise ValueError("no real examples to compute metrics on")
  if logits.shape[0] != label_ids.shape[0]:
    raise ValueError(f"{logits.shape[0]} predictions for {label_ids.shape[0]} labels")

  if is_regression:
    return _regression_metrics(name, label_ids, logits, mask)
  if logits.ndim != 2:
    raise ValueError(f"expected logits [N, num_labels], got shape {logits.shape}")
  labels = label_ids.astype(np.int64)
  # Imported on use: SciPy adds ~15 MiB to the process, scikit-learn (with the pandas
  # it imports) ~120 more, and a run that only trains needs neither (adapter_bert/cli/launch.py).
  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  import scipy.special
  log_probs = scipy.special.log_softmax(logits, axis=-1)
  per_example_loss = -log_probs[np.arange(labels.shape[0]), labels]
  predictions = np.argmax(logits, axis=-1)
  labels, predictions = labels[mask], predictions[mask]
  results = {
      "eval_accuracy": np.float32(np.mean(predictions == labels)),
      "eval_loss": np.float32(np.mean(per_example_loss[mask])),
  }
  if name in F1_TASKS or name in MCC_TASKS:
    import sklearn.metrics
  if name in F1_TASKS:
    results["eval_f1"] = np.float32(sklearn.metrics.f1_score(
        labels, predictions, pos_label=1, average="binary", zero_division=0.0))
  if name in MCC_TASKS:
    results["eval_mcc"] = np.float32(sklearn.metrics.matthews_corrcoef(labels, predictions))
  return results


# eval_results.txt's one key whose value is not a number: the checkpoint evaluated
# (its step is global_step's). A reader of the original's files that takes every
# value as a number skips it (as experiments/points/runs.parse_eval_results does).
CHECKPOINT_KEY = "checkpoint_path"


def write_eval_results(path: str, results: Mapping[str, object],
                       checkpoint_path: Optional[str] = None) -> None:
  """Writes `eval_results.txt`: one "%s = %s" line per key, keys sorted.

  With `checkpoint_path` (the weights evaluated: startup.Run.checkpoint_path)
  also "checkpoint_path = PATH", as the log names what it restored (a base name
  when it is in the file's directory: file_io.name_from). Also logs
  them under "***** Eval results *****" with a two-space indent, as the
  original. The file is replaced atomically (any tf.io.gfile path).
  """
  if checkpoint_path:
    results = dict(results, **{CHECKPOINT_KEY: file_io.name_from(
        posixpath.dirname(path), checkpoint_path)})
  logging.info("***** Eval results *****")
  lines = []
  for key in sorted(results.keys()):
    logging.info("  %s = %s", key, str(results[key]))
    lines.append("%s = %s\n" % (key, str(results[key])))
  file_io.atomic_write(path, "".join(lines), what="the eval results")


def write_test_results(path: str, probabilities, is_real_example: Optional[object] = None) -> int:
  """Writes `test_results.tsv`: no header, one line per real example, in order.

  Args:
    path: output file (any tf.io.gfile path), replaced atomically.
    probabilities: float [N, num_labels] class probabilities, written
      tab-separated as the original: "\\t".join(str(p) for p in row) + "\\n";
      or float [N] scores (sts-b), one per line. Cast to float32, the model's
      output type, so numbers print as the original's did.
    is_real_example: optional [N] 0/1; padding rows (0) are not written.

  Returns:
    The number of lines written.
  """
  probabilities = np.asarray(probabilities, dtype=np.float32)
  mask = _real_mask(is_real_example, probabilities.shape[0])
  logging.info("***** Predict results *****")
  lines = []
  for row in probabilities[mask]:
    if row.ndim == 0:
      lines.append(str(row) + "\n")
    else:
      lines.append("\t".join(str(class_probability) for class_probability in row) + "\n")
  file_io.atomic_write(path, "".join(lines), what="the test results")
  return len(lines)
