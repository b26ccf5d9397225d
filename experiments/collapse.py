"""A run that collapsed to chance: how to tell, and when in training it happened.

A classifier that has lost every trace of its input can do no better than
predict the labels' prior, which on the WordNet tasks (balanced classes) is
the uniform distribution: its loss is ln(number of labels) on train and dev
alike, and it stays there (nothing flows back through a constant output).
`collapsed` reads that from a run's dev loss; `curve` reads the training loss
the run logged to TensorBoard (runtime/loop.py, one mean per host call), and
`timeline` says how low it got before the collapse, at what learning rate
(also logged), and from which step on it sat at ln(labels), to set beside the
step where warm-up ends; `prediction_spread` checks that the collapsed
model's dev predictions are indeed the same for every input.
"""

import dataclasses
import math
import os
import struct
from typing import List, Optional, Tuple

import numpy as np
import tensorflow as tf
from tensorflow.core.util import event_pb2

from classification import metrics as classifier_metrics
from experiments import tables
from storage import input_files

# Dev loss this close to ln(labels) (in nats) is chance. A run that learned
# anything sits far below: 0.8-1.1 against ln 4 = 1.386 on wordnet_relation.
DEV_TOLERANCE = 0.01
# A training-loss mean (over a host call's few steps) this close is at chance.
TRAIN_TOLERANCE = 0.02


def collapsed(eval_loss: Optional[float], num_labels: int) -> bool:
  return eval_loss is not None and eval_loss >= math.log(num_labels) - DEV_TOLERANCE


def prediction_spread(run_dir: str) -> float:
  """How much the run's dev predictions depend on the input: the standard
  deviation over examples of each label's predicted probability, averaged over
  labels (eval_predictions.tsv). About 0 for a model that ignores its input."""
  text = input_files.read_text(os.path.join(run_dir, classifier_metrics.EVAL_PREDICTIONS_FILE))
  rows = [[float(p) for p in line.split("\t")] for line in text.splitlines() if line]
  return float(np.std(np.array(rows), axis=0).mean())


def curve(run_dir: str, tag: str = "loss") -> List[Tuple[int, float]]:
  """(step, value) of a TensorBoard scalar (`loss`, `learning_rate`) as the run
  logged it, in step order."""
  points = {}
  for name in sorted(tf.io.gfile.listdir(run_dir)):
    if not name.startswith("events.out.tfevents"):
      continue
    for record in _records(os.path.join(run_dir, name)):
      event = event_pb2.Event.FromString(record)
      for value in event.summary.value:
        if value.tag == tag:
          points[int(event.step)] = float(tf.make_ndarray(value.tensor))
  return sorted(points.items())


def _records(path: str):
  """The records of a TFRecord file: each is its length (8 bytes, little-endian),
  that length's CRC (4), the data, the data's CRC (4). Read here rather than
  with tf.data, which logs an end-of-sequence line per file."""
  with tf.io.gfile.GFile(path, "rb") as f:
    data = f.read()
  at = 0
  while at + 12 <= len(data):
    length, = struct.unpack("<Q", data[at:at + 8])
    yield data[at + 12:at + 12 + length]
    at += 12 + length + 4


@dataclasses.dataclass(frozen=True)
class Timeline:
  num_labels: int
  warmup_steps: int
  lowest_loss: Optional[float]  # The lowest logged training loss, and its step.
  lowest_step: Optional[int]
  lowest_learning_rate: Optional[float]  # The rate logged at that step.
  # From this logged step to the end the training loss is ln(labels); None if
  # it never settles there.
  chance_from: Optional[int]


def timeline(run_dir: str) -> Timeline:
  config = tables.read_json(os.path.join(run_dir, "run_config.json"))
  num_labels = len(config["label_list"])
  losses = curve(run_dir)
  chance = math.log(num_labels)
  chance_from = None
  for step, loss in reversed(losses):
    if abs(loss - chance) > TRAIN_TOLERANCE:
      break
    chance_from = step
  lowest = min(losses, key=lambda p: p[1]) if losses else (None, None)
  rate = dict(curve(run_dir, "learning_rate")).get(lowest[0])
  return Timeline(num_labels, int(config["num_warmup_steps"]), lowest[1], lowest[0], rate,
                  chance_from)
