"""A --use_tpu run, made without a TPU.

The set-up checks of runtime/startup.py: batch sizes against the replicas, and
the TPU's mixed precision (bfloat16, not float16). Both fail with one line
naming the flag before anything is written; the batch sizes once the strategy
says how many replicas there are, the precision before the TPU is looked up.

Evaluation and prediction under --use_tpu, with the one-device strategy in
place of the TPU: the last batch is filled with padding examples
(is_real_example 0) so that every batch has the same shape, and the results
(metrics, test_results.tsv) are those of a run without --use_tpu, every
example once. (SQuAD fills its last batch the same way under --use_xla:
tests/test_run_squad.py.)
"""

import dataclasses
import os

import pytest

import numpy as np
import tensorflow as tf

from adapter_bert import errors
import run_classifier
import run_multitask
from adapter_bert.runtime import distribution
from adapter_bert.runtime import startup
import test_multitask
from test_run_classifier import GLUE, _flags, _test_results, run_main


def test_batch_sizes_of_what_the_run_does_must_divide_between_replicas():
  options = startup.RunOptions(output_dir="unused", do_train=True, train_batch_size=32,
                             do_eval=True, eval_batch_size=8, predict_batch_size=6)
  startup.check_batch_sizes(options, 8)  # No prediction: its batch size is not used.
  startup.check_batch_sizes(options, 1)
  with pytest.raises(errors.UserError) as error:
    startup.check_batch_sizes(startup.RunOptions(output_dir="unused", do_predict=True,
                                             predict_batch_size=6, use_tpu=True), 8)
  assert str(error.value) == ("flag --predict_batch_size=6: must be a multiple of the 8 "
                              "TPU cores that each batch is split between, e.g. "
                              "--predict_batch_size=8")
  with pytest.raises(errors.UserError) as error:
    startup.check_batch_sizes(dataclasses.replace(options, train_batch_size=30), 4)
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


def _eval_results(path):
  with tf.io.gfile.GFile(path) as f:
    return {k: float(v) for k, v in (line.split(" = ") for line in f.read().splitlines())}


def _one_device_for_the_tpu(*args):
  del args
  return tf.distribute.get_strategy()


@pytest.mark.parametrize("script", [run_classifier, run_multitask],
                         ids=["classifier", "multitask"])
def test_eval_and_predict_on_tpu_keep_every_example(base, tmp_path, monkeypatch, script):
  if script is run_classifier:
    flags = _flags(base, task_name="SST-2", data_dir=os.path.join(GLUE, "SST-2"))
    tasks = [""]
  else:
    flags = test_multitask._flags(base, task_name="sst-2,sts-b", data_dir=",".join(
        [os.path.join(GLUE, "SST-2"), os.path.join(GLUE, "STS-B")]))
    tasks = ["sst-2", "sts-b"]
  # 6 dev and 6 test examples a task in batches of 4: 2 padding examples each.
  flags.update(do_eval=True, do_predict=True, eval_batch_size=4, predict_batch_size=4,
               seed=1)
  results = {}
  for name, use_tpu in (("reference", False), ("tpu", True)):
    if use_tpu:
      monkeypatch.setattr(distribution, "create_strategy", _one_device_for_the_tpu)
    out = str(tmp_path / name)
    logs = run_main(script=script, **dict(flags, output_dir=out, use_tpu=use_tpu))
    results[name] = [(_eval_results(os.path.join(out, t, "eval_results.txt")),
                      _test_results(os.path.join(out, t, "test_results.tsv")))
                     for t in tasks]
    padded = sum("Num examples = 8 (6 actual, 2 padding)" in line for line in logs)
    assert padded == (2 * len(tasks) if use_tpu else 0), logs
  for (want_eval, want_test), (got_eval, got_test) in zip(results["reference"],
                                                          results["tpu"]):
    assert got_eval.keys() == want_eval.keys()
    for key, value in want_eval.items():
      # "loss" is the original's Estimator loss: the mean of the batches' mean
      # losses, padding examples included (on a TPU too); eval_loss and the
      # other metrics count the real examples only.
      if key.split("/")[-1] != "loss":
        assert got_eval[key] == pytest.approx(value, abs=1e-5), key
    assert len(got_test) == 6
    np.testing.assert_allclose(got_test, want_test, atol=1e-5)
