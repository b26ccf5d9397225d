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

Finding and reaching the TPU, with the machine and TensorFlow's TPU calls
injected: which TPU each kind of machine gets (flag, TPU VM, TPU Node), that
its name reaches TPUClusterResolver, that the connection and initialization
run in the main thread (the connection's device scope is the calling
thread's), that a watchdog ends a connection that never returns, that a TPU
Node (grpc://) refuses every local path flag of each entry point, and that
--use_xla under --use_tpu is ignored with one line.
"""

import dataclasses
import logging as py_logging
import os
import socket
import threading
import time

import pytest

import numpy as np
import tensorflow as tf
from absl import flags

from adapter_bert import errors
import run_classifier
import run_multitask
import run_squad
from adapter_bert.cli import options as cli_options
from adapter_bert.cli import path_flags
from adapter_bert.runtime import distribution
from adapter_bert.storage import path_checks
from adapter_bert.runtime import startup
from run_harness import GLUE, classifier_flags, multitask_flags, read_test_results, run_main


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
    run_main(**classifier_flags(base, task_name="SST-2", data_dir=os.path.join(GLUE, "SST-2"),
                                output_dir=out, do_train=True, train_batch_size=8, do_eval=True,
                                use_tpu=True))
  assert not os.path.exists(out)  # Nothing written.


def test_float16_on_tpu_is_refused_before_the_tpu_is_looked_up(base, tmp_path, monkeypatch):
  def no_tpu(*args):
    raise AssertionError("the TPU was looked up")
  monkeypatch.setattr(distribution, "create_strategy", no_tpu)
  out = str(tmp_path / "out")
  with pytest.raises(errors.UserError) as error:
    run_main(**classifier_flags(base, task_name="SST-2", data_dir=os.path.join(GLUE, "SST-2"),
                                output_dir=out, do_train=True, use_tpu=True,
                                mixed_precision="float16"))
  assert str(error.value) == ("flags mixed_precision=float16, use_tpu=True: TPUs compute in "
                              "bfloat16, not float16: use --mixed_precision=bfloat16")
  assert not os.path.exists(out)


def test_a_given_num_tpu_cores_that_the_tpu_does_not_have_is_a_warning(monkeypatch, caplog):
  caplog.set_level(py_logging.INFO, logger="absl")
  monkeypatch.setattr(distribution, "create_strategy", _one_device_for_the_tpu)
  for given, warned in ((None, []), (1, []), (8, ["--num_tpu_cores=8 but the TPU has 1 "
                                                  "cores; using 1"])):
    caplog.clear()
    startup.create_strategy(startup.RunOptions(output_dir="unused", use_tpu=True,
                                               num_tpu_cores=given))
    assert [r.getMessage() for r in caplog.records if r.name == "absl"] == (
        ["TPU cores found: 1"] + warned)


def _eval_results(path):
  with tf.io.gfile.GFile(path) as f:
    return {k: float(v) for k, v in (line.split(" = ") for line in f.read().splitlines())
            if k != "checkpoint_path"}  # A path, not a number (test_eval_only).


def _one_device_for_the_tpu(*args):
  del args
  return tf.distribute.get_strategy()


@pytest.mark.parametrize("script", [run_classifier, run_multitask],
                         ids=["classifier", "multitask"])
def test_eval_and_predict_on_tpu_keep_every_example(base, tmp_path, monkeypatch, script):
  if script is run_classifier:
    flags = classifier_flags(base, task_name="SST-2", data_dir=os.path.join(GLUE, "SST-2"))
    tasks = [""]
  else:
    flags = multitask_flags(base, task_name="sst-2,sts-b", data_dir=",".join(
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
                      read_test_results(os.path.join(out, t, "test_results.tsv")))
                     for t in tasks]
    padded = sum("Num examples = 8 (6 actual, 2 padding)" in line for line in logs)
    assert padded == (2 * len(tasks) if use_tpu else 0), logs
    # --num_tpu_cores unset: a one-core TPU (a v5e-1) is an ordinary run, logged.
    assert [line for line in logs if "TPU cores" in line or "num_tpu_cores" in line] == (
        ["TPU cores found: 1"] if use_tpu else [])
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


# Finding the TPU (distribution.find_tpu): the machine's environment and
# device files are arguments, so every kind of machine is one call here.
_NOWHERE = dict(env={}, devices=[])


@pytest.mark.parametrize("flags, env, devices, tpu, found_by", [
    (dict(tpu_name="my-tpu"), {"TPU_NAME": "other", "COLAB_TPU_1VM": "1"}, ["/dev/accel0"],
     "my-tpu", "--tpu_name"),
    (dict(master="grpc://10.0.0.3:8470"), {"TPU_NAME": "other"}, [],
     "grpc://10.0.0.3:8470", "--master"),
    ({}, {"TPU_NAME": "other"}, ["/dev/accel0", "/dev/accel1"], "local",
     "a TPU VM, /dev/accel0"),
    ({}, {}, ["/dev/vfio/0"], "local", "a TPU VM, /dev/vfio/0"),
    ({}, {"COLAB_TPU_1VM": "1", "TPU_NAME": "other"}, [], "local",
     "a TPU VM, COLAB_TPU_1VM=1"),
    ({}, {"TPU_ACCELERATOR_TYPE": "v5litepod-8"}, [], "local",
     "a TPU VM, TPU_ACCELERATOR_TYPE=v5litepod-8"),
    ({}, {"TPU_NAME": "my-node", "COLAB_TPU_ADDR": "10.0.0.2:8470"}, [], "my-node",
     "TPU_NAME"),
    ({}, {"COLAB_TPU_ADDR": "10.0.0.2:8470"}, [], "grpc://10.0.0.2:8470", "COLAB_TPU_ADDR"),
], ids=["flag", "master", "accel", "vfio", "colab-vm", "accelerator-type", "tpu-name",
        "colab-node"])
def test_the_tpu_is_the_flags_else_this_tpu_vm_else_the_tpu_node(flags, env, devices, tpu,
                                                                  found_by):
  target = distribution.find_tpu(flags.get("tpu_name"), flags.get("master"), env, devices)
  assert (target.tpu, target.found_by) == (tpu, found_by)
  assert target.remote == tpu.startswith("grpc://")


def test_no_tpu_anywhere_is_one_line_naming_tpu_name():
  with pytest.raises(errors.UserError) as error:
    distribution.find_tpu(None, "", {"TPU_NAME": "", "PATH": "/bin"}, [])
  assert str(error.value) == (
      "--use_tpu: no TPU found (not a TPU VM: no /dev/accel* or /dev/vfio/N, no "
      "COLAB_TPU_1VM or TPU_ACCELERATOR_TYPE; no TPU_NAME or COLAB_TPU_ADDR): give "
      "--tpu_name=local on a TPU VM, or the TPU Node's name or grpc://HOST:8470")


def test_tpu_device_files_are_accel_and_numbered_vfio(tmp_path):
  dev = tmp_path / "dev"
  (dev / "vfio").mkdir(parents=True)
  (dev / "vfio" / "vfio").touch()  # The VFIO driver's own: on machines without a TPU too.
  (dev / "null").touch()
  assert distribution.device_files(str(dev)) == []
  for name in ("accel0", "vfio/0", "vfio/1"):
    (dev / name).touch()
  assert distribution.device_files(str(dev)) == [
      str(dev / "accel0"), str(dev / "vfio" / "0"), str(dev / "vfio" / "1")]


class _FakeResolver:
  """TPUClusterResolver as connect_tpu uses it; records what it was made with."""
  made = []

  def __init__(self, tpu=None, zone=None, project=None):
    self.tpu, self.zone, self.project = tpu, zone, project
    _FakeResolver.made.append(self)

  def master(self):
    return "" if self.tpu == "local" else self.tpu


@pytest.fixture
def tpu_node_address():
  """A loopback "host:port" that accepts connections, as a TPU Node's would."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    yield "%s:%d" % s.getsockname()


@pytest.fixture
def fake_tpu(monkeypatch):
  """TensorFlow's TPU calls replaced by recorders: (call name, resolver, thread name)."""
  _FakeResolver.made = []
  calls = []

  def recorder(name):
    return lambda resolver: calls.append((name, resolver, threading.current_thread().name))
  monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", _FakeResolver)
  monkeypatch.setattr(tf.config, "experimental_connect_to_cluster", recorder("connect"))
  monkeypatch.setattr(tf.tpu.experimental, "initialize_tpu_system", recorder("initialize"))
  monkeypatch.setattr(tf.distribute, "TPUStrategy", lambda resolver: ("strategy", resolver))
  for name in ("TPU_NAME", "COLAB_TPU_ADDR", "COLAB_TPU_1VM", "TPU_ACCELERATOR_TYPE"):
    monkeypatch.delenv(name, raising=False)
  monkeypatch.setattr(distribution, "device_files", lambda: [])
  return calls


def _absl_records(caplog):
  return [r.getMessage() for r in caplog.records if r.name == "absl"]


def test_colab_tpu_node_is_connected_and_initialized_in_the_main_thread(
    fake_tpu, tpu_node_address, monkeypatch, caplog):
  caplog.set_level(py_logging.INFO, logger="absl")
  monkeypatch.setenv("COLAB_TPU_ADDR", tpu_node_address)
  strategy = distribution.create_strategy(use_tpu=True)
  resolver, = _FakeResolver.made
  assert (resolver.tpu, resolver.zone, resolver.project) == (
      "grpc://" + tpu_node_address, None, None)
  assert strategy == ("strategy", resolver)
  main = threading.main_thread().name
  assert fake_tpu == [("connect", resolver, main), ("initialize", resolver, main)]
  assert _absl_records(caplog) == [f"TPU: grpc://{tpu_node_address} (COLAB_TPU_ADDR)",
                                   "TPU devices: []"]


def test_tpu_vm_is_initialized_without_a_connection(fake_tpu, monkeypatch, caplog):
  # As Model Garden's distribute_utils: a TPU VM's own TPU ("local") is not a cluster.
  caplog.set_level(py_logging.INFO, logger="absl")
  monkeypatch.setattr(distribution, "device_files", lambda: ["/dev/accel0"])
  strategy = distribution.create_strategy(use_tpu=True, tpu_zone="us-central1-b")
  resolver, = _FakeResolver.made
  assert (resolver.tpu, resolver.zone) == ("local", "us-central1-b")
  assert strategy == ("strategy", resolver)
  assert fake_tpu == [("initialize", resolver, threading.main_thread().name)]
  assert _absl_records(caplog) == ["TPU: local (a TPU VM, /dev/accel0)", "TPU devices: []"]


def test_no_tpu_found_names_tpu_name_before_any_lookup(fake_tpu):
  with pytest.raises(errors.UserError, match=r"^--use_tpu: no TPU found .* give "
                     r"--tpu_name=local on a TPU VM"):
    distribution.create_strategy(use_tpu=True)
  assert _FakeResolver.made == [] and fake_tpu == []


def test_watchdog_ends_a_tpu_connection_that_never_returns(tpu_node_address, monkeypatch,
                                                           capsys):
  # The connection blocks until the (injected) exit releases it: the line and
  # the exit must come from the watchdog while the connection still blocks.
  released, exits, calls = threading.Event(), [], []

  def hang(resolver):
    calls.append(("connect", threading.current_thread().name))
    returned_in_time = released.wait(timeout=60)  # Bounded: a broken watchdog fails below.
    calls.append(("connect returned", returned_in_time))

  def exit_fn(status):
    exits.append((status, list(calls)))
    released.set()
  monkeypatch.setattr(distribution, "_INITIALIZE_TIMEOUT_S", 0.2)
  target = distribution.TpuTarget("grpc://" + tpu_node_address, "--tpu_name")
  distribution.connect_tpu(target, resolver_class=_FakeResolver, connect=hang,
                           initialize=lambda resolver: calls.append(("initialize",)),
                           exit_fn=exit_fn)
  main = threading.main_thread().name
  assert exits == [(2, [("connect", main)])]  # Status 2, while connect still blocked.
  assert calls[1] == ("connect returned", True)
  assert capsys.readouterr().err == (
      f"ERROR: --tpu_name=grpc://{tpu_node_address}: could not reach the TPU (--tpu_zone="
      "None, --gcp_project=None): initializing it: no answer within 0.2 s\n")


def test_watchdog_is_off_once_the_tpu_is_initialized(monkeypatch, capsys):
  monkeypatch.setattr(distribution, "_RESOLVE_TIMEOUT_S", 0.05)
  monkeypatch.setattr(distribution, "_INITIALIZE_TIMEOUT_S", 0.05)
  exits = []
  distribution.connect_tpu(distribution.TpuTarget("local", "--tpu_name"),
                           resolver_class=_FakeResolver, connect=None,
                           initialize=lambda resolver: None, exit_fn=exits.append)
  time.sleep(0.3)  # Well past both limits.
  assert exits == [] and capsys.readouterr().err == ""


# A TPU Node (grpc://) reads and writes buckets only: each entry point refuses
# every local path flag it has, first thing, in one line.
_GS = "gs://no-such-bucket/run"
_PATH_FLAGS = {
    run_classifier: ("bert_config_file", "vocab_file", "output_dir", "init_checkpoint",
                     "adapter_checkpoint", "bert_hub_module_handle", "data_dir",
                     "adapter_bank"),
    run_multitask: ("bert_config_file", "vocab_file", "output_dir", "init_checkpoint",
                    "adapter_checkpoint", "bert_hub_module_handle", "data_dir"),
    run_squad: ("bert_config_file", "vocab_file", "output_dir", "init_checkpoint",
                "adapter_checkpoint", "bert_hub_module_handle", "train_file",
                "predict_file"),
}
_TASK_FLAGS = {run_classifier: dict(task_name="SST-2", do_train=True),
               run_multitask: dict(task_name="sst-2", do_train=True),
               run_squad: dict(do_train=True, do_predict=True)}


@pytest.mark.parametrize("script, flag", [(s, f) for s, names in _PATH_FLAGS.items()
                                          for f in names],
                         ids=lambda v: getattr(v, "__name__", v))
def test_tpu_node_refuses_a_local_path(script, flag, monkeypatch):
  monkeypatch.setattr(distribution, "device_files", lambda: [])
  for name in ("TPU_NAME", "COLAB_TPU_1VM", "TPU_ACCELERATOR_TYPE"):
    monkeypatch.delenv(name, raising=False)
  monkeypatch.setenv("COLAB_TPU_ADDR", "10.0.0.2:8470")
  checked = []
  monkeypatch.setattr(path_flags.path_checks, "check", lambda *a: checked.append(a))
  # A hub encoder or an initial checkpoint, not both.
  other_source = ("init_checkpoint" if flag == "bert_hub_module_handle"
                  else "bert_hub_module_handle")
  values = dict({f: f"{_GS}/{f}" for f in _PATH_FLAGS[script] if f != other_source},
                **_TASK_FLAGS[script])
  values[flag] = "local/" + flag
  with pytest.raises(errors.UserError) as error:
    run_main(script=script, use_tpu=True, **values)
  assert str(error.value) == (
      f"flag --{flag}=local/{flag}: a local path, but the TPU is a TPU Node (--tpu_name "
      "(not given; COLAB_TPU_ADDR: grpc://10.0.0.2:8470)), which reads and writes gs:// "
      "buckets only: copy it to a bucket and give its gs:// path, or run on a TPU VM "
      "(--tpu_name=local)")
  assert checked == []  # Before any path is looked at.


@pytest.mark.parametrize("machine", ["tpu_vm", "tpu_node_by_name", "no_tpu"])
def test_local_paths_pass_on_a_tpu_vm(machine, tmp_path, monkeypatch):
  # Checked as run_classifier checks them; on a TPU VM, or where the TPU's
  # address is not known before it is looked up, the paths' own checks follow.
  monkeypatch.setattr(distribution, "device_files",
                      lambda: ["/dev/vfio/0"] if machine == "tpu_vm" else [])
  for name in ("TPU_NAME", "COLAB_TPU_ADDR", "COLAB_TPU_1VM", "TPU_ACCELERATOR_TYPE"):
    monkeypatch.delenv(name, raising=False)
  if machine == "tpu_node_by_name":
    monkeypatch.setenv("TPU_NAME", "my-node")
  fv = flags.FlagValues()
  run_classifier.define_flags(fv)
  fv(["script", "--use_tpu", "--task_name=SST-2", "--do_train",
      "--data_dir=" + os.path.join(GLUE, "SST-2"), "--output_dir=" + str(tmp_path / "out")])
  path_flags.check_path_flags(fv, {"data_dir": path_checks.INPUT_DIR,
                                   "output_dir": path_checks.OUTPUT_DIR})
  fv["tpu_name"].value = "grpc://10.0.0.2:8470"  # The flag names a TPU Node.
  with pytest.raises(errors.UserError, match=r"^flag --data_dir=.*: a local path, but the "
                     r"TPU is a TPU Node \(--tpu_name=grpc://10.0.0.2:8470\)"):
    path_flags.check_path_flags(fv, {"data_dir": path_checks.INPUT_DIR})


@pytest.mark.parametrize("use_tpu", [True, False])
def test_use_xla_is_ignored_with_one_line_under_use_tpu(use_tpu, caplog):
  def options(*use_xla):
    fv = flags.FlagValues()
    run_classifier.define_flags(fv)
    fv(["script", "--task_name=SST-2", "--data_dir=d", "--output_dir=o", "--do_train",
        "--use_tpu" if use_tpu else "--nouse_tpu", *use_xla])
    return cli_options.run_options(fv)
  without_xla = options()
  caplog.set_level(py_logging.INFO, logger="absl")
  with_xla = options("--use_xla")
  assert (with_xla.use_tpu, with_xla.use_xla) == (use_tpu, not use_tpu)
  if use_tpu:  # The run is the one without --use_xla, and says so.
    assert with_xla == without_xla
    assert _absl_records(caplog) == [
        "--use_xla is ignored with --use_tpu: the TPU compiles every step with XLA anyway"]
  else:
    assert _absl_records(caplog) == []
