"""Where training runs: one device, MirroredStrategy, MultiWorkerMirroredStrategy, XLA, TPU.

The same tiny adapter training (tests/distributed_run.py: every weight from a
checkpoint, no dropout, fixed data in two TFRecord files, global batch 8, 6
steps) runs under each strategy and must reach the same losses, weights and
predictions as on one device; prediction computes each example once, on one
replica of one worker, and every worker gets all results. Each replica draws
its own dropout masks. The optimizer's own steps (tests/optimizer_problem.py)
under MirroredStrategy match one device's too. The runs need fresh interpreters (logical
devices, TF_CONFIG and XLA_FLAGS are read when TensorFlow starts): the module
starts the subprocesses its selected tests need all at once, each with a time
limit, and the tests wait for their results.
"""

import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import distributed_run as run
from adapter_bert import errors
from adapter_bert.runtime import distribution

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SCRIPT = os.path.join(_ROOT, "tests", "distributed_run.py")
_TIMEOUT_S = 300


class _Job:
  """A subprocess with a deadline whose last stdout line is JSON."""

  def __init__(self, args, directory, name, **env):
    self.name = name
    self.deadline = time.time() + _TIMEOUT_S
    os.makedirs(env.get("TMPDIR", directory), exist_ok=True)
    self._out = os.path.join(directory, f"{name}.stdout")
    self._err = os.path.join(directory, f"{name}.stderr")
    base = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    base.update(PYTHONPATH=os.pathsep.join([_ROOT, os.path.join(_ROOT, "tests")]),
                TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    base.update(env)
    with open(self._out, "w") as out, open(self._err, "w") as err:
      self.proc = subprocess.Popen([sys.executable] + args, cwd=_ROOT, env=base,
                                   stdout=out, stderr=err)
    self._result = None

  def result(self):
    if self._result is None:
      try:
        self.proc.wait(timeout=max(self.deadline - time.time(), 1))
      except subprocess.TimeoutExpired:
        self.proc.kill()
        self.proc.wait()
        pytest.fail(f"{self.name} did not finish in {_TIMEOUT_S} s; stderr:\n"
                    + self._stderr_tail())
      assert self.proc.returncode == 0, (
          f"{self.name} exited with {self.proc.returncode}:\n" + self._stderr_tail())
      with open(self._out) as f:
        self._result = json.loads(f.read().strip().splitlines()[-1])
    return self._result

  def _stderr_tail(self):
    with open(self._err) as f:
      return f.read()[-4000:]


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  directory = str(tmp_path_factory.mktemp("data"))
  run.write_checkpoint(directory)
  run.write_examples(directory)
  return directory


@pytest.fixture(scope="module")
def jobs(request, data_dir, tmp_path_factory):
  """Starts, all at once, the subprocesses of the selected tests of this module."""
  selected = {item.name for item in request.session.items
              if item.module is request.module}
  work = str(tmp_path_factory.mktemp("runs"))
  started = {}
  # One device, XLA and MirroredStrategy in one process; its single-device run
  # is also the reference of the multi-worker run.
  if selected & {"test_mirrored_strategy_matches_one_device",
                 "test_xla_compiles_train_and_predict_steps",
                 "test_multi_worker_matches_one_device",
                 "test_dropout_masks_differ_between_replicas_and_repeat",
                 "test_mirrored_optimizer_steps_match_one_device_with_clipping"}:
    dump = os.path.join(work, "xla_dump")
    started["machine"] = _Job([_SCRIPT, "machine", data_dir, work], work, "machine",
                              XLA_FLAGS=f"--xla_dump_to={dump}")
    started["machine"].xla_dump = dump
  if "test_multi_worker_matches_one_device" in selected:
    cluster = {"worker": [f"127.0.0.1:{_free_port()}" for _ in range(2)]}
    for i in range(2):
      # Own output_dir and TMPDIR per worker, to see which worker writes what.
      job = _Job([_SCRIPT, "worker", data_dir, os.path.join(work, f"worker{i}")],
                 work, f"worker{i}", TMPDIR=os.path.join(work, f"tmp{i}"),
                 TF_CONFIG=json.dumps({"cluster": cluster,
                                       "task": {"type": "worker", "index": i}}))
      job.output_dir = os.path.join(work, f"worker{i}")
      job.tmp = os.path.join(work, f"tmp{i}")
      started[f"worker{i}"] = job
  yield started
  for job in started.values():
    if job.proc.poll() is None:
      job.proc.kill()
      job.proc.wait()


def _assert_same_run(actual, expected, tol):
  """Losses (scaled by LOSS_SCALE, so relative), trainable weights, predictions."""
  assert actual["global_step"] == expected["global_step"] == run.NUM_STEPS
  # Loops of iterations_per_loop=2 steps, cut at the checkpoint at step 3.
  assert sorted(expected["losses"], key=int) == ["1", "2", "3", "5", "6"]
  assert actual["losses"].keys() == expected["losses"].keys()
  for step, loss in expected["losses"].items():
    np.testing.assert_allclose(actual["losses"][step], loss, rtol=tol, err_msg=step)
  assert actual["weights"].keys() == expected["weights"].keys()
  for name, value in expected["weights"].items():
    np.testing.assert_allclose(actual["weights"][name], value, rtol=0, atol=tol,
                               err_msg=name)
  if "predictions" in actual:
    for key, value in expected["predictions"].items():
      np.testing.assert_allclose(actual["predictions"][key], value, rtol=0, atol=tol,
                                 err_msg=key)


def _examples_in_order(data_dir):
  features, labels = zip(*run.dataset(
      [os.path.join(data_dir, f"train-{i}.tf_record") for i in range(2)], repeat=False))
  return np.concatenate([f["input_ids"] for f in features]), np.concatenate(labels)


def _sorted_rows(rows):
  return sorted(map(tuple, np.asarray(rows).tolist()))


def test_mirrored_strategy_matches_one_device(jobs, data_dir):
  result = jobs["machine"].result()
  single, mirrored = result["single"], result["mirrored"]
  _assert_same_run(mirrored, single, tol=1e-5)
  # Predictions cover every example once, in dataset order; metrics agree.
  input_ids, labels = _examples_in_order(data_dir)
  for r in (single, mirrored):
    np.testing.assert_array_equal(r["predictions"]["input_ids"], input_ids)
    np.testing.assert_array_equal(r["predictions"]["labels"], labels)
    # The model computed each example once (the replicas, each its share).
    assert _sorted_rows(r["computed"]) == _sorted_rows(input_ids)
  accuracy = [np.mean(np.argmax(r["predictions"]["logits"], -1) == labels)
              for r in (single, mirrored)]
  assert accuracy[0] == accuracy[1]
  # Training moved the weights (adapters, LayerNorms, head) from the checkpoint.
  reader = tf.train.load_checkpoint(os.path.join(data_dir, "bert_model.ckpt"))
  moved = [np.abs(np.subtract(v, reader.get_tensor(n))).max()
           for n, v in single["weights"].items()]
  assert len(moved) == 28 and min(moved) > 1e-3

  # Clipping engaged: the first step's global gradient norm is above the clip
  # norm 1.0, and so is each replica's share, so clipping those shares (Keras'
  # own global_clipnorm placement) instead of their sum gives another result.
  norms = result["grad_norms"]
  assert min(norms.values()) > 10.0, norms
  per_replica_clip = result["per_replica_clip"]
  assert max(np.abs(np.subtract(per_replica_clip["weights"][n], v)).max()
             for n, v in single["weights"].items()) > 1e-3


def test_mirrored_optimizer_steps_match_one_device_with_clipping(jobs):
  """The optimizer alone (tests/optimizer_problem.py, three steps of a batch whose
  gradient norm is far above the clip norm, each replica half of it): the variables
  and Adam slots of one device under MirroredStrategy. Run by the "machine" process,
  whose two logical CPUs it needs (test_optimization.py holds the rest of the
  optimizer's tests)."""
  result = jobs["machine"].result()["optimizer_steps"]
  for single, mirrored in zip(result["single"], result["mirrored"]):
    np.testing.assert_allclose(mirrored, single, rtol=1e-6, atol=1e-6)
  # Clipping each replica's half-batch gradient gives another result, so the
  # comparison above does see where the clip happens.
  diffs = [np.abs(np.subtract(a, b)).max()
           for a, b in zip(result["single"], result["per_replica_clip"])]
  assert max(diffs) > 1e-3


def test_multi_worker_matches_one_device(jobs, data_dir):
  workers = [jobs["worker0"], jobs["worker1"]]
  results = [w.result()["worker"] for w in workers]
  single = jobs["machine"].result()["single"]
  # Each worker holds the all-reduced weights: bitwise the same.
  for name, value in results[0]["weights"].items():
    np.testing.assert_array_equal(results[1]["weights"][name], value, err_msg=name)
  # The global batch is the single device's (DATA sharding, not by file).
  _assert_same_run(results[0], single, tol=1e-5)
  # Each example is predicted once, on one worker: each computed its half of
  # every batch (4 of 8). Every worker gets the whole set's results, in order,
  # and the metrics of one device.
  input_ids, labels = _examples_in_order(data_dir)
  assert [len(r["computed"]) for r in results] == [run.NUM_EXAMPLES // 2] * 2
  assert _sorted_rows(results[0]["computed"] + results[1]["computed"]) == _sorted_rows(
      input_ids)
  for r in results:
    for key, value in single["predictions"].items():
      np.testing.assert_allclose(r["predictions"][key], value, atol=1e-5, err_msg=key)
    np.testing.assert_array_equal(r["predictions"]["input_ids"], input_ids)
    assert (np.mean(np.argmax(r["predictions"]["logits"], -1) == labels)
            == np.mean(np.argmax(single["predictions"]["logits"], -1) == labels))
  # Only the chief (worker 0) writes checkpoints and summaries; the other saved
  # into a temporary directory and removed it.
  chief = sorted(os.listdir(workers[0].output_dir))
  events = [f for f in chief if f.startswith("events.out.tfevents")]
  assert len(events) == 1
  assert [f for f in chief if f not in events] == [
      "checkpoint", "model.ckpt-3.data-00000-of-00001", "model.ckpt-3.index",
      "model.ckpt-6.data-00000-of-00001", "model.ckpt-6.index"]
  assert not os.path.exists(workers[1].output_dir) or not os.listdir(workers[1].output_dir)
  assert os.listdir(workers[1].tmp) == []


def test_dropout_masks_differ_between_replicas_and_repeat(jobs):
  masks = jobs["machine"].result()["dropout_masks"]
  mirrored, single = np.array(masks["mirrored"]), np.array(masks["single"])
  assert mirrored.shape == (2, 2, 4, 16)  # [step, replica, ...]
  for step in mirrored:  # Each replica draws its own masks.
    assert (step[0] != step[1]).mean() > 0.25
  assert (mirrored[0] != mirrored[1]).any()  # And new ones each step.
  np.testing.assert_array_equal(masks["mirrored_rerun"], mirrored)  # Seeded.
  # Replica 0 draws the masks of one device: runs without a strategy keep theirs.
  np.testing.assert_array_equal(mirrored[:, 0], single[:, 0])
  assert 0.3 < mirrored.mean() < 0.7  # Dropout(0.5).


def test_xla_compiles_train_and_predict_steps(jobs):
  result = jobs["machine"].result()
  xla, single = result["xla"], result["single"]
  _assert_same_run(xla, single, tol=1e-4)
  # XLA compiled the whole train step (forward, gradients, clip, update) and
  # the predict step (forward only): their HLO modules as XLA dumped them.
  dump = jobs["machine"].xla_dump
  modules = {}
  for name in os.listdir(dump):
    if "replica_step" in name and name.endswith(".before_optimizations.txt"):
      with open(os.path.join(dump, name)) as f:
        modules[name] = f.read()
  train = [m for m in modules.values() if "gradient_tape/" in m]
  predict = [m for m in modules.values() if "gradient_tape/" not in m]
  assert len(train) == 1 and len(predict) == 1, sorted(modules)
  # HLO metadata names the TF op each instruction came from.
  for op in ('op_name="AdamWeightDecay/clip_by_global_norm',
             'op_type="Sqrt" op_name="AdamWeightDecay/',
             'op_type="AssignSubVariableOp" op_name="AdamWeightDecay/',
             'op_type="SparseSoftmaxCrossEntropyWithLogits"', "/layer_1", "/pooler"):
    assert op in train[0], op
  assert "/layer_1" in predict[0] and "/pooler" in predict[0]
  assert "AdamWeightDecay" not in predict[0]


def test_tpu_flag_without_tpu_fails_fast(monkeypatch):
  # Nothing listens at this loopback port. A TPU name is looked up through the
  # GCE metadata server; pointing that at the port makes the test the same on
  # and off Google Cloud.
  closed = f"127.0.0.1:{_free_port()}"
  monkeypatch.setenv("GCE_METADATA_HOST", closed)
  monkeypatch.delenv("TPU_NAME", raising=False)
  for tpu_name, reason in (
      ("no-such-tpu", f"GCE metadata server {closed}, which does not answer"),
      (f"grpc://{closed}", f"nothing answers at grpc://{closed}")):
    start = time.time()
    with pytest.raises(errors.UserError) as error:
      distribution.create_strategy(use_tpu=True, tpu_name=tpu_name)
    message = str(error.value)
    assert message.startswith(f"--tpu_name={tpu_name}: could not reach the TPU (")
    assert reason in message
    assert time.time() - start < 30
