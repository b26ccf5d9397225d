"""A run that collapsed to chance: how to tell, and when in training it happened.

A classifier that has lost every trace of its input can do no better than
predict the labels' prior, which on the WordNet tasks (balanced classes) is
the uniform distribution: its loss is ln(number of labels) on train and dev
alike, and it stays there (nothing flows back through a constant output).
`collapsed` reads that from a run's dev loss; `timeline` reads the training
loss the run logged to TensorBoard (runtime/loop.py, one mean per host call;
through experiments/run_summary.py) and says how low it got before the
collapse, at what learning rate (also logged), and from which step on it sat
at ln(labels), to set beside the step where warm-up ends;
run_summary.prediction_spread checks that the collapsed model's dev
predictions are indeed the same for every input.
"""

import dataclasses
import math
import os
from typing import Optional

from experiments import run_summary
from experiments import tables

# Dev loss this close to ln(labels) (in nats) is chance. A run that learned
# anything sits far below: 0.8-1.1 against ln 4 = 1.386 on wordnet_relation.
DEV_TOLERANCE = 0.01
# A training-loss mean (over a host call's few steps) this close is at chance.
TRAIN_TOLERANCE = 0.02


def collapsed(eval_loss: Optional[float], num_labels: int) -> bool:
  return eval_loss is not None and eval_loss >= math.log(num_labels) - DEV_TOLERANCE


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
