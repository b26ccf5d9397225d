"""benchmarks/run_classifier_timing.py reads a packed run's real-token share from its log."""

import os

import pytest

from adapter_bert.runtime import packing

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "benchmarks")


@pytest.fixture
def timing(monkeypatch):
  monkeypatch.syspath_prepend(BENCHMARKS)
  import run_classifier_timing  # pylint: disable=import-outside-toplevel
  return run_classifier_timing


def test_packed_variant_and_its_logged_share(timing):
  assert timing.PROJECT_VARIANTS["packed"] == ["--pack_sequences"]
  # 4000 examples in 646 rows of 128 tokens, 81,117 of them real: 98.1%.
  stats = packing.PackingStats(num_examples=4000, num_rows=646, real_tokens=81117,
                               max_seq_length=128)
  log = "I1129 01:02:03.456 startup.py:257] " + stats.describe(6) + "\nother lines\n"
  found = timing.packing_logged(log)
  assert found == {"real_token_share": 0.981, "packed_rows_per_batch": 6, "packed_rows": 646}
  assert found["real_token_share"] == pytest.approx(81117 / (646 * 128), abs=5e-4)
  assert timing.packing_logged("I1129 startup.py] Num steps = 375\n") == {}
  assert timing._packing_note(found) == "; packed 6 rows a batch, 98.1% real tokens"
  assert timing._packing_note({"seconds": 1.0}) == ""
