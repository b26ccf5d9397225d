"""The papers' claims as comparisons of two methods, decided by a bootstrap.

A claim says how a method's dev accuracy stands to a reference method's: to
full fine-tuning's (CLAIMS, Houlsby et al.'s Table 1 and figures), or to
per-task adapters' (MULTITASK_CLAIMS, HyperFormer++'s). `bootstrap_difference`
gives the mean difference over tasks with a 95% interval from a paired
bootstrap over dev examples and seeds, from which `verdict` reads "holds",
"fails" or "undecided". The per-example correctness comes from the runs'
eval_predictions.tsv (run_classifier.py and run_multitask.py
--eval_predictions) or from its summary (experiments/points/run_summary.py), read once
each by a `Predictions` reader.
"""

import dataclasses
import os
from typing import Dict, Mapping, Sequence

import numpy as np

from adapter_bert.classification import processors
from adapter_bert import errors
from experiments.points import run_summary


FULL = "full"
HOULSBY = "houlsby"  # experiments.multitask_comparison's per-task adapters.


@dataclasses.dataclass(frozen=True)
class Claim:
  """Method vs `reference`: `kind` "within" (no more than `margin` below) or
  "below" (more than `margin` below, as the paper finds for the weak baselines)."""
  method: str
  kind: str
  margin: float
  paper: str
  reference: str = FULL

  def describe(self) -> str:
    """E.g. "adapters_64 within 1 point of full"."""
    points = f"{100 * self.margin:g} point"
    return (f"{self.method} within {points} of {self.reference}" if self.kind == "within"
            else f"{self.method} more than {points} below {self.reference}")


CLAIMS = (
    Claim("adapters_64", "within", 0.01, "Table 1: adapters 80.0 vs full fine-tuning 80.4 "
          "(GLUE test), i.e. within about half a point"),
    Claim("adapters_8", "within", 0.01, "Figure 3: small adapters (8-64) stay near full "
          "fine-tuning on most tasks"),
    Claim("layer_norm", "below", 0.01, "Figures 3-5: training only the LayerNorms "
          "performs clearly worse"),
    Claim("head", "below", 0.01, "Section 3.4: a frozen encoder with a trained head "
          "(feature extraction) is far behind"),
)

# HyperFormer++ against one adapter set per task, all on one frozen encoder
# (experiments.multitask_comparison's methods).
_HYPERFORMER = ("Mahabadi et al. 2021, abstract: \"improved performance in multi-task "
                "learning\" on GLUE, adding 0.29% parameters per task")
MULTITASK_CLAIMS = (
    Claim("hyperformer", "within", 0.01, _HYPERFORMER + "; here with the encoder frozen",
          reference=HOULSBY),
    Claim("hyperformer_ln", "within", 0.01, _HYPERFORMER + "; here with BERT's LayerNorms "
          "trained, as the per-task adapters train them", reference=HOULSBY),
)


def bootstrap_difference(pairs: Sequence[Mapping[str, np.ndarray]], samples: int = 2000,
                         seed: int = 0):
  """The mean over tasks of accuracy(method) - accuracy(reference), with a 95% interval.

  Args:
    pairs: per task {"method": bool [seeds, examples], "reference": bool [seeds,
      examples]}: whether each seed's run got each dev example right (the same
      examples, in the same order, for both).
  Returns:
    (estimate, low, high). A bootstrap sample redraws each task's dev
    examples (the same draw for both methods: the comparison is paired) and,
    independently per method, its seeds.
  """
  rng = np.random.default_rng(seed)
  estimate = float(np.mean([p["method"].mean() - p["reference"].mean() for p in pairs]))
  draws = np.zeros(samples)
  for pair in pairs:
    n = pair["reference"].shape[1]
    idx = rng.integers(0, n, size=(samples, n))
    task = np.zeros(samples)
    for sign, key in ((1.0, "method"), (-1.0, "reference")):
      correct = pair[key].astype(np.uint8)
      # [seeds, samples]: each seed's accuracy on each redrawn set of examples. The
      # count of right answers in bytes, exact, then / n: the float64 mean's value,
      # with an eighth of its memory traffic.
      per_seed = np.stack([c[idx].sum(axis=1, dtype=np.int64) for c in correct]) / n
      seeds = rng.integers(0, correct.shape[0], size=(samples, correct.shape[0]))
      task += sign * np.take_along_axis(per_seed.T, seeds, axis=1).mean(axis=1)
    draws += task / len(pairs)
  low, high = np.percentile(draws, [2.5, 97.5])
  return estimate, float(low), float(high)


def in_points(estimate: float, low: float, high: float) -> str:
  """A difference and its 95% interval in points of accuracy: "+1.00 [-0.80, +2.87]"."""
  return f"{100 * estimate:+.2f} [{100 * low:+.2f}, {100 * high:+.2f}]"


def verdict(claim: Claim, low: float, high: float) -> str:
  """"holds", "fails" or "undecided" for the 95% interval [low, high] of the difference."""
  if claim.kind == "within":
    if low >= -claim.margin:
      return "holds"
    return "fails" if high < -claim.margin else "undecided"
  if high < -claim.margin:
    return "holds"
  return "fails" if low >= -claim.margin else "undecided"


def _processor(task_dir: str, fixed: Mapping[str, object]) -> processors.TsvProcessor:
  return processors.TsvProcessor(
      data_dir=task_dir, text_a_column=fixed["text_a_column"],
      text_b_column=fixed.get("text_b_column"), label_column=fixed["label_column"])


def labels(task_dir: str, fixed: Mapping[str, object]) -> list:
  """The task's labels, in run_classifier.py's order."""
  return _processor(task_dir, fixed).get_labels()


def dev_labels(task_dir: str, fixed: Mapping[str, object]) -> np.ndarray:
  """The dev examples' label ids, as run_classifier.py numbers them."""
  processor = _processor(task_dir, fixed)
  names = processor.get_labels()
  return np.array([names.index(e.label) for e in processor.get_dev_examples(task_dir)])


def correctness(run_dir: str, labels: np.ndarray) -> np.ndarray:
  """bool [examples]: which dev examples the run's predictions (eval_predictions.tsv,
  or its run_summary.json) get right."""
  predicted = run_summary.predicted_labels(run_dir)
  if predicted.shape != labels.shape:
    raise errors.UserError(f"{len(predicted)} predictions for {len(labels)} dev examples",
                           run_dir)
  return predicted == labels


class Predictions:
  """Reads which dev examples runs got right, each run's file and each task's
  labels once (a report compares the same full fine-tuning runs with every method)."""

  def __init__(self):
    self._labels: Dict[str, np.ndarray] = {}
    self._correct: Dict[str, np.ndarray] = {}

  def correct(self, runs_dir: str, points: Sequence[str],
              fixed: Mapping[str, object]) -> np.ndarray:
    """bool [runs, dev examples] for the points under `runs_dir`, whose grid fixed `fixed`."""
    task_dir = fixed["data_dir"]
    if task_dir not in self._labels:
      self._labels[task_dir] = dev_labels(task_dir, fixed)
    for point in points:
      run_dir = os.path.join(runs_dir, point)
      if run_dir not in self._correct:
        self._correct[run_dir] = correctness(run_dir, self._labels[task_dir])
    return np.stack([self._correct[os.path.join(runs_dir, p)] for p in points])
