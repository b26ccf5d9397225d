"""A write the file system refuses is one line (exit 2) and loses nothing.

No space left, a directory made read-only, a bucket that fails: every output
goes through storage/file_io (and checkpoints through run_checkpoints), so the
faults are injected there, mid-write, for each kind of file; then once for real
on a 4 MB tmpfs that fills up at a checkpoint of run_classifier.
"""

import json
import os
import posixpath
import subprocess

import pytest
import tensorflow as tf

from adapter_bert.tasks import question_answering

from adapter_bert import errors
from adapter_bert.bank import adapter_bank
from adapter_bert.checkpoints import run_checkpoints
from adapter_bert.classification import metrics
from adapter_bert.runtime import run_config
from adapter_bert.squad import postprocess
from adapter_bert.storage import file_io

NO_SPACE = tf.errors.ResourceExhaustedError(None, None, "No space left on device")
READ_ONLY = tf.errors.PermissionDeniedError(None, None, "Read-only file system")


def _inject(monkeypatch, where, error):
  """Makes the next writes fail with `error`: while writing data, or at the rename
  that puts a complete temporary in place."""
  def fail(*args, **kwargs):
    raise error
  if where == "write":
    monkeypatch.setattr(tf.io.gfile.GFile, "write", fail)
  else:
    monkeypatch.setattr(tf.io.gfile, "rename", fail)


def _files(root):
  """{relative path: bytes} of every file under root, hidden ones included."""
  found = {}
  for d, _, names in tf.io.gfile.walk(root):
    for n in names:
      with tf.io.gfile.GFile(os.path.join(d, n), "rb") as f:
        found[os.path.relpath(os.path.join(d, n), root)] = f.read()
  return found


def _bank_base():
  return adapter_bank.BankBase("f" * 64, {"hidden_size": 32}, None, None, "vocab.txt", True)


# Each kind of file: (write it with a version number, read that number back, what the line says).
KINDS = {
    "eval results": (
        lambda d, v: metrics.write_eval_results(os.path.join(d, "eval_results.txt"),
                                                {"eval_accuracy": v}),
        lambda d: open(os.path.join(d, "eval_results.txt")).read(),
        "cannot write the eval results"),
    "test results": (
        lambda d, v: metrics.write_test_results(os.path.join(d, "test_results.tsv"),
                                                [[v, 1 - v]]),
        lambda d: open(os.path.join(d, "test_results.tsv")).read(),
        "cannot write the test results"),
    "bank index": (
        lambda d, v: adapter_bank.create_bank(os.path.join(d, f"bank{v}"), _bank_base()),
        lambda d: sorted(os.listdir(d)),
        "cannot write the adapter bank's index"),
    "run settings": (
        lambda d, v: run_config.write(d, {"learning_rate": v}, training_run=True),
        lambda d: open(os.path.join(d, run_config.RUN_CONFIG_FILE)).read(),
        "cannot write the run's settings"),
    "adapter directory": (  # As save_adapter_weights, add_task and export write theirs.
        lambda d, v: _write_directory(os.path.join(d, "adapter_model"), v),
        lambda d: _files(os.path.join(d, "adapter_model")),
        "cannot write the adapter weights"),
}


def _write_directory(path, version):
  with file_io.AtomicDirectory(path, what="the adapter weights") as tmp:
    for name in ("adapter_weights.safetensors", "adapter_config.json"):
      with tf.io.gfile.GFile(os.path.join(tmp, name), "w") as f:
        f.write(f"{name} {version}")


@pytest.mark.parametrize("where", ["write", "rename"])
@pytest.mark.parametrize("error", [NO_SPACE, READ_ONLY], ids=["no_space", "read_only"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_refused_write_is_one_line_and_keeps_the_old_file(tmp_path, monkeypatch, kind,
                                                          error, where):
  write, read, says = KINDS[kind]
  d = str(tmp_path)
  write(d, 0.25)
  before, listing = read(d), _files(d)
  with monkeypatch.context() as m:
    _inject(m, where, error)
    with pytest.raises(errors.UserError) as raised:
      write(d, 0.75)
  message = str(raised.value)
  assert "\n" not in message and says in message and error.message in message
  assert message.startswith(str(tmp_path))  # Names the path written.
  assert read(d) == before and _files(d) == listing  # Old file intact, no temporary left.
  write(d, 0.75)  # The fault gone, the same write succeeds.
  assert read(d) != before


# run_squad.py's outputs, in the order it writes them, and what a refused write names.
SQUAD_OUTPUTS = {"nbest_predictions.json": "the n-best predictions",
                 "null_odds.json": "the null odds", "predictions.json": "the predictions",
                 "eval_results.json": "the eval results"}
SQUAD_DEV = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         "data", "squad", "dev-v1.1.json")


def _write_squad_outputs(d):
  """What run_squad.py writes after predicting (of no answers: the writes are tested)."""
  postprocess.write_predictions(
      [], [], [], 20, 30, True, *(os.path.join(d, n) for n in (
          "predictions.json", "nbest_predictions.json", "null_odds.json")),
      version_2_with_negative=True)
  question_answering.write_eval_results(os.path.join(d, "eval_results.json"), SQUAD_DEV, {}, None,
                               False)


@pytest.mark.parametrize("name", sorted(SQUAD_OUTPUTS))
def test_a_refused_squad_output_names_what_it_is(tmp_path, monkeypatch, name):
  d = str(tmp_path)
  _write_squad_outputs(d)
  with open(os.path.join(d, name), "w") as f:
    f.write("the earlier run's")
  listing = sorted(os.listdir(d))
  rename = tf.io.gfile.rename

  def refuse_one(src, dst, *args, **kwargs):
    if posixpath.basename(dst) == name:
      raise NO_SPACE
    return rename(src, dst, *args, **kwargs)
  monkeypatch.setattr(tf.io.gfile, "rename", refuse_one)
  with pytest.raises(errors.UserError) as raised:
    _write_squad_outputs(d)
  message = str(raised.value)
  assert message.startswith(os.path.join(d, name) + ": cannot write "
                            + SQUAD_OUTPUTS[name] + ": No space left on device"), message
  assert "\n" not in message
  assert open(os.path.join(d, name)).read() == "the earlier run's"  # Kept.
  assert sorted(os.listdir(d)) == listing  # No temporary left.


def test_a_write_failure_ends_the_command_with_status_2(tmp_path, monkeypatch, capsys):
  _inject(monkeypatch, "rename", NO_SPACE)
  path = str(tmp_path / "eval_results.txt")
  main = errors.exit_on_user_error(lambda argv: metrics.write_eval_results(path, {"a": 1}))
  with pytest.raises(SystemExit) as exited:
    main([])
  assert exited.value.code == 2
  err = capsys.readouterr().err
  assert err == (f"ERROR: {path}: cannot write the eval results: No space left on device "
                 f"(nothing was replaced; free space or fix the permissions and run the "
                 f"same command again)\n")


def test_a_bug_is_not_reported_as_a_write_failure(tmp_path):
  with pytest.raises(tf.errors.InvalidArgumentError):
    with file_io.AtomicFile(str(tmp_path / "x")):
      raise tf.errors.InvalidArgumentError(None, None, "a bug")
  assert os.listdir(tmp_path) == []


def test_refused_checkpoint_save_leaves_the_previous_one_latest(tmp_path, monkeypatch):
  d = str(tmp_path)
  v = tf.Variable(1.0)
  checkpoint = tf.train.Checkpoint(v=v)
  manager = run_checkpoints._Manager(checkpoint, d, max_to_keep=5,
                                     checkpoint_name=run_checkpoints.CHECKPOINT_NAME)
  manager.save(checkpoint_number=2)
  listing = _files(d)
  real_write = checkpoint._write

  def fill_then_fail(prefix, options=None):  # As SaveV2 on a full disk: staging left behind.
    os.makedirs(prefix + "_temp/part-00000-of-00001")
    open(prefix + ".index", "w").write("partial")
    raise NO_SPACE
  monkeypatch.setattr(checkpoint, "_write", fill_then_fail)
  v.assign(2.0)
  with pytest.raises(errors.UserError) as raised:
    manager.save(checkpoint_number=4)
  assert str(raised.value) == (
      f"{d}/model.ckpt-4: cannot write the checkpoint at step 4: No space left on device "
      f"(nothing was replaced; free space or fix the permissions and run the same command "
      f"again)")
  assert _files(d) == listing and sorted(os.listdir(d)) == sorted(
      ["checkpoint", "model.ckpt-2.index", "model.ckpt-2.data-00000-of-00001"])
  assert run_checkpoints.latest(d) == f"{d}/model.ckpt-2"
  tf.train.Checkpoint(v=v).read(f"{d}/model.ckpt-2").assert_existing_objects_matched()
  assert float(v) == 1.0  # The previous checkpoint loads.
  monkeypatch.setattr(checkpoint, "_write", real_write)
  manager.save(checkpoint_number=4)
  assert run_checkpoints.latest(d) == f"{d}/model.ckpt-4"


@pytest.fixture
def tiny_tmpfs(tmp_path):
  """A 4 MB tmpfs mounted at tmp_path/disk (root only); unmounted afterwards."""
  disk = tmp_path / "disk"
  disk.mkdir()
  if os.geteuid() != 0:
    pytest.skip("mounting a tmpfs needs root")
  mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
                           capture_output=True, text=True)
  if mounted.returncode != 0:
    pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
  try:
    yield str(disk)
  finally:
    # Lazy: the run's summary writers may still hold a file open there.
    subprocess.run(["umount", "--lazy", str(disk)], check=True)


def test_full_disk_at_a_checkpoint_stops_cleanly_and_the_rerun_resumes(base, tiny_tmpfs,
                                                                       monkeypatch):
  from run_harness import (  # pylint: disable=import-outside-toplevel
      GLUE, classifier_flags, run_main)
  out = os.path.join(tiny_tmpfs, "out")
  ballast = os.path.join(tiny_tmpfs, "ballast")
  real_save = run_checkpoints._Manager.save

  def save_then_fill(self, checkpoint_number=None, **kwargs):
    path = real_save(self, checkpoint_number=checkpoint_number, **kwargs)
    if checkpoint_number == 2:  # After the first checkpoint the disk fills up.
      with open(ballast, "wb") as f:
        try:
          while True:
            f.write(b"\0" * 65536)
            f.flush()
        except OSError:
          pass
    return path
  monkeypatch.setattr(run_checkpoints._Manager, "save", save_then_fill)
  flags = classifier_flags(base, task_name="MRPC", data_dir=os.path.join(GLUE, "MRPC"),
                           output_dir=out, do_train=True, do_eval=True, num_train_epochs=2,
                           save_checkpoints_steps=2)
  with pytest.raises(errors.UserError) as raised:
    run_main(**flags)
  message = str(raised.value)
  assert "\n" not in message
  assert message.startswith(f"{out}/model.ckpt-4: cannot write the checkpoint at step 4: ")
  assert not [n for n in os.listdir(out) if "_temp" in n or ".tmp-" in n]
  assert run_checkpoints.latest(out) == f"{out}/model.ckpt-2"
  os.remove(ballast)  # Space freed: the same command resumes from step 2.
  logs = run_main(**flags)
  assert f"Resuming from {out}/model.ckpt-2" in logs
  assert run_checkpoints.latest(out) == f"{out}/model.ckpt-4"
  assert os.path.exists(os.path.join(out, "eval_results.txt"))
  assert json.load(open(os.path.join(out, "run_config.json")))["num_train_steps"] == 4
