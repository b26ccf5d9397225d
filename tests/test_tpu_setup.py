"""The TPU set-up checks of runtime/setup.py, made without a TPU: batch sizes
against the replicas, and the TPU's mixed precision (bfloat16, not float16).

Both fail with one line naming the flag before anything is written; the batch
sizes once the strategy says how many replicas there are, the precision before
the TPU is even looked up.
"""

import dataclasses
import os

import pytest

import errors
from runtime import distribution
from runtime import setup
from test_run_classifier import GLUE, _flags, run_main


def test_batch_sizes_of_what_the_run_does_must_divide_between_replicas():
  options = setup.RunOptions(output_dir="unused", do_train=True, train_batch_size=32,
                             do_eval=True, eval_batch_size=8, predict_batch_size=6)
  setup.check_batch_sizes(options, 8)  # No prediction: its batch size is not used.
  setup.check_batch_sizes(options, 1)
  with pytest.raises(errors.UserError) as error:
    setup.check_batch_sizes(setup.RunOptions(output_dir="unused", do_predict=True,
                                             predict_batch_size=6, use_tpu=True), 8)
  assert str(error.value) == ("flag --predict_batch_size=6: must be a multiple of the 8 "
                              "TPU cores that each batch is split between, e.g. "
                              "--predict_batch_size=8")
  with pytest.raises(errors.UserError) as error:
    setup.check_batch_sizes(dataclasses.replace(options, train_batch_size=30), 4)
  assert str(error.value).startswith("flag --train_batch_size=30: must be a multiple of the "
                                     "4 devices that each batch is split between, e.g. "
                                     "--train_batch_size=32")


class _EightCores:
  """What the run sees of a TPU of 8 cores before it uses it."""
  num_replicas_in_sync = 8


def test_entry_point_refuses_a_batch_size_the_tpu_cores_do_not_divide(base, tmp_path,
                                                                      monkeypatch):
  monkeypatch.setattr(distribution, "create_strategy", lambda *args: _EightCores())
  out = str(tmp_path / "out")
  with pytest.raises(errors.UserError, match=r"^flag --eval_batch_size=4: must be a "
                     r"multiple of the 8 TPU cores"):
    run_main(**_flags(base, task_name="SST-2", data_dir=os.path.join(GLUE, "SST-2"),
                      output_dir=out, do_train=True, train_batch_size=8, do_eval=True,
                      use_tpu=True))
  assert not os.path.exists(out)  # Nothing written.


def test_float16_on_tpu_is_refused_before_the_tpu_is_looked_up(base, tmp_path, monkeypatch):
  def no_tpu(*args):
    raise AssertionError("the TPU was looked up")
  monkeypatch.setattr(distribution, "create_strategy", no_tpu)
  out = str(tmp_path / "out")
  with pytest.raises(errors.UserError) as error:
    run_main(**_flags(base, task_name="SST-2", data_dir=os.path.join(GLUE, "SST-2"),
                      output_dir=out, do_train=True, use_tpu=True,
                      mixed_precision="float16"))
  assert str(error.value) == ("flags mixed_precision=float16, use_tpu=True: TPUs compute in "
                              "bfloat16, not float16: use --mixed_precision=bfloat16")
  assert not os.path.exists(out)
