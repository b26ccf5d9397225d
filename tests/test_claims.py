"""experiments/study/claims.py: the paired bootstrap of a claim and its verdict.

The bootstrap is checked against cases whose answer is known in closed form.
"""

import math

import numpy as np
import pytest

from experiments.study import claims


def test_bootstrap_of_equal_runs_is_exactly_zero():
  # The same runs (every seed alike): the paired draws of examples cancel.
  correct = np.stack([np.random.default_rng(1).random(500) < 0.8] * 3)
  estimate, low, high = claims.bootstrap_difference(
      [{"method": correct, "reference": correct}] * 2, samples=300)
  assert estimate == low == high == 0.0


def test_bootstrap_interval_is_the_binomial_one_for_a_sure_method():
  # The method is always right; full fine-tuning right on 90% of 1,000
  # examples in every seed: the difference is 0.1 and its sampling std over
  # examples sqrt(0.9 * 0.1 / 1000) (seeds add nothing: they agree).
  n = 1000
  full = np.arange(n) % 10 != 0
  pair = {"method": np.ones((3, n), bool), "reference": np.stack([full] * 3)}
  estimate, low, high = claims.bootstrap_difference([pair], samples=4000)
  sigma = math.sqrt(0.9 * 0.1 / n)
  assert estimate == pytest.approx(0.1)
  assert low == pytest.approx(0.1 - 1.96 * sigma, abs=0.003)
  assert high == pytest.approx(0.1 + 1.96 * sigma, abs=0.003)


def test_bootstrap_counts_the_spread_between_seeds():
  # Two seeds of the method: one right everywhere, one wrong everywhere
  # (mean 0.5); resampling seeds gives draws of 0, 0.5 and 1 with
  # probabilities 1/4, 1/2, 1/4, so the 95% interval spans [-0.5, 0.5]
  # around full fine-tuning's 0.5.
  n = 200
  pair = {"method": np.stack([np.ones(n, bool), np.zeros(n, bool)]),
          "reference": np.stack([np.arange(n) % 2 == 0] * 2)}
  estimate, low, high = claims.bootstrap_difference([pair], samples=2000)
  assert estimate == pytest.approx(0.0)
  assert low == pytest.approx(-0.5, abs=0.08) and high == pytest.approx(0.5, abs=0.08)


@pytest.mark.parametrize("kind,low,high,expected", [
    ("within", -0.005, 0.01, "holds"), ("within", -0.03, -0.02, "fails"),
    ("within", -0.02, 0.0, "undecided"), ("below", -0.2, -0.1, "holds"),
    ("below", 0.0, 0.01, "fails"), ("below", -0.05, 0.0, "undecided")])
def test_verdicts(kind, low, high, expected):
  claim = claims.Claim("m", kind, 0.01, "")
  assert claims.verdict(claim, low, high) == expected
