"""A finished run's summary: what the study's page reads from a run directory,
small enough to keep in the repository (experiments/study/record.py).

The page reads a run's dev predictions (which label it chose for each
example, and how much its predicted probabilities vary over examples) and the
scalars it logged to TensorBoard (training loss, learning rate). Those live in
eval_predictions.tsv (one probability per label and example: 21 KB for 1,000
dev examples of 2 labels) and the events files (10 KB for a 3-epoch point);
`write` keeps what is read of them in run_summary.json (6 KB there).
The readers below answer from the run's own files where they are, else from
its summary, the same either way (tests/test_study_record.py).
"""

import json
import os
from typing import Dict, List, Optional, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from adapter_bert.classification import metrics as classifier_metrics
from adapter_bert import errors
from adapter_bert.storage import file_io
from adapter_bert.storage import input_files

SUMMARY_FILE = "run_summary.json"


def _probabilities(run_dir: str) -> Optional[np.ndarray]:
  """[examples, labels] from eval_predictions.tsv; None where the run has none."""
  path = os.path.join(run_dir, classifier_metrics.EVAL_PREDICTIONS_FILE)
  if not tf.io.gfile.exists(path):
    return None
  rows = [[float(p) for p in line.split("\t")]
          for line in input_files.read_text(path).splitlines() if line]
  return np.array(rows)


def _event_files(run_dir: str) -> List[str]:
  if not tf.io.gfile.isdir(run_dir):
    return []
  return [os.path.join(run_dir, n) for n in sorted(tf.io.gfile.listdir(run_dir))
          if n.startswith("events.out.tfevents")]


def _logged_curves(run_dir: str) -> Dict[str, List[Tuple[int, float]]]:
  """Every scalar the run logged to TensorBoard: tag -> (step, value), in step order."""
  points: Dict[str, Dict[int, float]] = {}
  for path in _event_files(run_dir):
    for event in _events(path):
      for value in event.summary.value:
        points.setdefault(value.tag, {})[int(event.step)] = float(
            tf.make_ndarray(value.tensor))
  return {tag: sorted(values.items()) for tag, values in points.items()}


def _events(path: str):
  """The events of a TensorBoard events file, read by TensorFlow's record reader
  (tf.compat.v1.train.summary_iterator), which checks each record's lengths and
  CRCs. A file cut short or corrupt (a run killed while it wrote) gives the
  events before the bad record, with a warning naming the file."""
  try:
    yield from tf.compat.v1.train.summary_iterator(path)
  except tf.errors.DataLossError as e:
    logging.warning("%s: the events after a bad record are left out: %s", path, e)


def _spread(probabilities: np.ndarray) -> float:
  return float(np.std(probabilities, axis=0).mean())


def write(run_dir: str) -> bool:
  """Writes run_dir/run_summary.json from the run's files; False where it has
  neither predictions nor logged scalars (nothing to keep)."""
  probabilities = _probabilities(run_dir)
  curves = _logged_curves(run_dir)
  if probabilities is None and not curves:
    return False
  summary = {"curves": {tag: [[s, v] for s, v in values] for tag, values in curves.items()}}
  if probabilities is not None:
    summary["eval_predicted"] = " ".join(map(str, np.argmax(probabilities, axis=1)))
    summary["prediction_spread"] = _spread(probabilities)
  file_io.atomic_write(os.path.join(run_dir, SUMMARY_FILE), json.dumps(summary) + "\n")
  return True


def _summary(run_dir: str) -> Optional[dict]:
  path = os.path.join(run_dir, SUMMARY_FILE)
  return input_files.read_json(path) if tf.io.gfile.exists(path) else None


def has_predictions(run_dir: str) -> bool:
  """Whether the run's dev predictions can be read (its file, or its summary)."""
  if tf.io.gfile.exists(os.path.join(run_dir, classifier_metrics.EVAL_PREDICTIONS_FILE)):
    return True
  summary = _summary(run_dir)
  return summary is not None and "eval_predicted" in summary


def _missing(run_dir: str) -> errors.UserError:
  return errors.UserError(f"no {classifier_metrics.EVAL_PREDICTIONS_FILE} and no "
                          f"{SUMMARY_FILE} with its predictions", run_dir)


def predicted_labels(run_dir: str) -> np.ndarray:
  """The label id the run predicted for each dev example (its most probable)."""
  probabilities = _probabilities(run_dir)
  if probabilities is not None:
    return np.argmax(probabilities, axis=1)
  summary = _summary(run_dir)
  if summary is None or "eval_predicted" not in summary:
    raise _missing(run_dir)
  return np.array([int(v) for v in summary["eval_predicted"].split()])


def prediction_spread(run_dir: str) -> float:
  """How much the run's dev predictions depend on the input: the standard
  deviation over examples of each label's predicted probability, averaged over
  labels. About 0 for a model that ignores its input."""
  probabilities = _probabilities(run_dir)
  if probabilities is not None:
    return _spread(probabilities)
  summary = _summary(run_dir)
  if summary is None or "prediction_spread" not in summary:
    raise _missing(run_dir)
  return float(summary["prediction_spread"])


def curve(run_dir: str, tag: str = "loss") -> List[Tuple[int, float]]:
  """(step, value) of a TensorBoard scalar (`loss`, `learning_rate`) as the run
  logged it, in step order."""
  if _event_files(run_dir):
    return _logged_curves(run_dir).get(tag, [])
  summary = _summary(run_dir)
  if summary is None:
    return []
  return [(int(s), float(v)) for s, v in summary["curves"].get(tag, [])]
