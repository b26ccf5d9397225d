"""A run that collapsed to chance: how to tell, and when in training it happened.

A classifier that has lost every trace of its input can do no better than
predict the labels' prior, which on the WordNet tasks (balanced classes) is
the uniform distribution: its loss is ln(number of labels) on train and dev
alike, and it stays there (nothing flows back through a constant output).
`collapsed` reads that from a run's dev loss and its dev predictions; `timeline` reads the training
loss the run logged to TensorBoard (runtime/loop.py, one mean per host call;
through experiments/points/run_summary.py) and says how low it got before the
collapse, at what learning rate (also logged), and from which step on it sat
at ln(labels), to set beside the step where warm-up ends.
"""

import dataclasses
import math
import os
from typing import Optional

import numpy as np

from experiments.points import run_summary
from experiments.points import tables

# Dev loss this close to ln(labels) (in nats) is chance's. A run that learned
# well sits far below (0.8-1.1 against ln 4 = 1.386 on wordnet_relation), but on
# the pair task one that learned little sits there too: the head alone, 0.55-0.58
# dev accuracy at dev loss 0.68-0.71 against ln 2 = 0.693.
DEV_TOLERANCE = 0.01
# So a collapsed run must also give one label to (nearly) every dev example. In
# the study's first 102 points the collapsed runs gave one label to 98.8-100% of
# theirs, the others to at most 72.5%.
ONE_LABEL_SHARE = 0.95
# A training-loss mean (over a host call's few steps) this close is at chance.
TRAIN_TOLERANCE = 0.02


def collapsed(eval_loss: Optional[float], run_dir: str, num_labels: int) -> bool:
  """Whether the run's dev loss is chance's and it answers (nearly) every dev
  example with one label (its dev predictions, run_summary.predicted_labels)."""
  if eval_loss is None or eval_loss < math.log(num_labels) - DEV_TOLERANCE:
    return False
  predicted = run_summary.predicted_labels(run_dir)
  return np.bincount(predicted).max() >= ONE_LABEL_SHARE * len(predicted)


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
  losses = run_summary.curve(run_dir)
  chance = math.log(num_labels)
  chance_from = None
  for step, loss in reversed(losses):
    if abs(loss - chance) > TRAIN_TOLERANCE:
      break
    chance_from = step
  lowest = min(losses, key=lambda p: p[1]) if losses else (None, None)
  rate = dict(run_summary.curve(run_dir, "learning_rate")).get(lowest[0])
  return Timeline(num_labels, int(config["num_warmup_steps"]), lowest[1], lowest[0], rate,
                  chance_from)
