"""Interruptions lose nothing: Ctrl-C, SIGTERM, SIGKILL, a lost device, torn checkpoints.

The interrupted runs are the real command line in a subprocess, stopped by a
real signal from the test. A small wrapper (interrupted_runs.WRAPPER, written to a
temporary file) runs run_classifier.py with one hook that holds the process at
the point under test and prints a marker, so that the signal arrives there
and not wherever the timing puts it; the product code has no test switch.
Every interrupted run is then finished by the same command again, which must
resume and end with the eval results of an uninterrupted run. NaN losses and
weights: test_divergence.py.
"""

import glob
import logging as py_logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import keras
import pytest
import tensorflow as tf
from absl import flags

from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import checkpoint_io
from adapter_bert.checkpoints import run_checkpoints
from adapter_bert import errors
from adapter_bert.runtime import loop
from adapter_bert.runtime import prediction
from adapter_bert.runtime import progress
from adapter_bert.runtime import stop_signals
from interrupted_runs import (NUM_STEPS, REPO, WRAPPER, Subprocess, flag_argv,
                              losing_the_device_at, point_log, read_file, result_files,
                              resumable_copy, saved_steps, temporaries)
from run_harness import Records, run_main


@pytest.fixture(scope="module")
def uninterrupted(command, tmp_path_factory):
  """output_dir of the command run without interruption (in this process)."""
  out = str(tmp_path_factory.mktemp("uninterrupted") / "out")

  def previous_handler(signum, frame):
    raise AssertionError("not to be called")

  before = {s: signal.signal(s, previous_handler) for s in stop_signals.SIGNALS}
  try:
    run_main(**command, output_dir=out)
    # Training and prediction put back the Ctrl-C and SIGTERM handlers they found.
    for s in stop_signals.SIGNALS:
      assert signal.getsignal(s) is previous_handler
  finally:
    for s, handler in before.items():
      signal.signal(s, handler)
  return out


STOP_SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT}


@pytest.fixture(scope="module")
def stopped_by_signal(command, tmp_path_factory):
  """The command in a subprocess for each of STOP_SIGNALS, the two started at once,
  each sent its signal at its first slow step: {name: (output_dir, status, log)}."""
  runs = {}
  try:
    for name in STOP_SIGNALS:
      d = tmp_path_factory.mktemp(name)
      out = str(d / "out")
      runs[name] = out, Subprocess(d, dict(command, output_dir=out),
                                   hook="slow_steps_from:5")
    for name, (_, run) in runs.items():
      run.wait_for(r"STEP (\d+)")  # Between checkpoints 4 and 8, or a little later.
      run.proc.send_signal(STOP_SIGNALS[name])
    return {name: (out, run.finish(), run.log()) for name, (out, run) in runs.items()}
  finally:
    for _, run in runs.values():
      if run.proc.poll() is None:
        run.proc.kill()
        run.finish()


@pytest.mark.parametrize("status_expected, name", [(143, "SIGTERM"), (130, "SIGINT")])
def test_a_stop_signal_during_training_saves_the_current_step_and_resumes(
    command, uninterrupted, stopped_by_signal, status_expected, name):
  """SIGTERM (preemption) and Ctrl-C (SIGINT) alike: the step saved, one line, the
  shell's status for the signal; the same command ends as the uninterrupted run."""
  out, status, log = stopped_by_signal[name]
  assert status == status_expected, log[-3000:]
  assert "Traceback" not in log and "KeyboardInterrupt" not in log
  stopped = re.findall(name + r": interrupted at step (\d+); the same command resumes "
                       r"from its checkpoint (\S+) \(exit status (\d+)\)", log)
  assert len(stopped) == 1, log[-3000:]
  step, path = int(stopped[0][0]), stopped[0][1]
  assert int(stopped[0][2]) == status_expected
  assert 5 <= step < NUM_STEPS
  # A checkpoint of that very step is the latest, whole; nothing was evaluated.
  assert path == os.path.join(out, f"model.ckpt-{step}")
  assert run_checkpoints.latest(out) == path and step in saved_steps(out)
  assert not os.path.exists(os.path.join(out, "eval_results.txt"))
  assert not temporaries(out)

  logs = run_main(**command, output_dir=out)  # The same command again.
  assert f"***** Running training from step {step} to {NUM_STEPS} *****" in logs
  assert saved_steps(out)[-1] == NUM_STEPS
  assert result_files(out) == result_files(uninterrupted)


def test_a_second_ctrl_c_while_stopping_is_recorded_not_raised():
  """Within StopSignals a repeated Ctrl-C (or SIGTERM) raises no KeyboardInterrupt
  and keeps the first signal; outside, Ctrl-C means KeyboardInterrupt again."""
  before = signal.signal(signal.SIGINT, signal.default_int_handler)
  try:
    with stop_signals.StopSignals() as stop_request:
      os.kill(os.getpid(), signal.SIGINT)
      assert stop_request.received == signal.SIGINT
      os.kill(os.getpid(), signal.SIGINT)  # Would raise KeyboardInterrupt here.
      os.kill(os.getpid(), signal.SIGTERM)
      assert stop_request.received == signal.SIGINT
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
      os.kill(os.getpid(), signal.SIGINT)
      time.sleep(1)  # The handler runs at the next bytecode.
  finally:
    signal.signal(signal.SIGINT, before)


def test_a_command_running_others_stops_once_and_its_clean_up_is_not_cut(capsys):
  """stop_signals.interrupts (the experiments' runners): the first Ctrl-C raises
  Interrupted where the command waits, a second one during its clean-up (waiting
  for its children) is only recorded, the handlers come back, and
  exit_on_interrupt ends the command with one line and status 130."""
  before = signal.signal(signal.SIGINT, signal.default_int_handler)
  cleaned = []

  def main(argv):
    del argv
    with stop_signals.interrupts():
      try:
        with stop_signals.interrupts():  # A comparison within a study: one handler.
          os.kill(os.getpid(), signal.SIGINT)
          time.sleep(5)  # Interrupted here, at once.
      finally:
        os.kill(os.getpid(), signal.SIGINT)  # Would raise KeyboardInterrupt here.
        time.sleep(0.2)
        cleaned.append(True)

  try:
    start = time.time()
    with pytest.raises(SystemExit) as stopped:
      stop_signals.exit_on_interrupt(main)([])
    assert time.time() - start < 4
    assert stopped.value.code == 130 and cleaned == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert capsys.readouterr().err == (
        "SIGINT: interrupted; the same command resumes (exit status 130)\n")
  finally:
    signal.signal(signal.SIGINT, before)


def test_ctrl_c_during_the_save_it_started_waits_for_the_save(command, tmp_path, monkeypatch):
  """Ctrl-C at step 5, and again while that step's checkpoint is written (in this
  process): the save completes, the run ends with status 130 and one line."""
  out = str(tmp_path / "out")
  record, save = progress.Progress.record, tf.train.CheckpointManager.save
  saved = []

  def record_then_ctrl_c(self, step, *args, **kwargs):
    if step == 5:
      os.kill(os.getpid(), signal.SIGINT)
    return record(self, step, *args, **kwargs)

  def save_with_ctrl_c(self, checkpoint_number=None, **kwargs):
    if checkpoint_number == 5:
      os.kill(os.getpid(), signal.SIGINT)
    path = save(self, checkpoint_number=checkpoint_number, **kwargs)
    saved.append(checkpoint_number)
    return path
  monkeypatch.setattr(progress.Progress, "record", record_then_ctrl_c)
  monkeypatch.setattr(tf.train.CheckpointManager, "save", save_with_ctrl_c)
  records = Records()
  logger = py_logging.getLogger("absl")
  logger.addHandler(records)
  try:
    with pytest.raises(SystemExit) as exit_info:
      run_main(**dict(command, do_eval=False, do_predict=False), output_dir=out)
  finally:
    logger.removeHandler(records)
  assert exit_info.value.code == 130
  assert saved == [4, 5]
  assert run_checkpoints.latest(out) == os.path.join(out, "model.ckpt-5")
  assert saved_steps(out) == [4, 5]
  lines = [m for m in records.messages if "interrupted at step" in m]
  assert lines == [f"SIGINT: interrupted at step 5; the same command resumes from its "
                   f"checkpoint {os.path.join(out, 'model.ckpt-5')} (exit status 130)"]


def test_sigkill_during_a_checkpoint_write_resumes_from_the_one_before(
    command, tmp_path, monkeypatch):
  """SIGKILL while step 12's checkpoint is written (its index half there, the next
  shard begun, the state file not yet naming it), in a run without --init_checkpoint,
  whose frozen random base cannot be rebuilt from files: the rerun resumes from step 8.

  The resumed run draws other random weights (as a run without --seed would), so it
  ends with the uninterrupted run's results only if the checkpoint of step 8 gave it
  everything, the frozen base included. (One killed process for both subjects, the
  torn write and the random base: a fresh interpreter costs more than its run.)
  """
  random_base = {k: v for k, v in command.items() if k != "init_checkpoint"}
  out = str(tmp_path / "out")
  # Held in the save of step 12 until the kill: it starts while the uninterrupted
  # run is made here.
  run = Subprocess(tmp_path / "killed", dict(random_base, output_dir=out),
                   hook="tear_checkpoint:12")
  try:
    uninterrupted = str(tmp_path / "uninterrupted")
    run_main(**random_base, output_dir=uninterrupted)
    run.wait_for("MID_CHECKPOINT_WRITE")
  finally:
    run.proc.send_signal(signal.SIGKILL)
  assert run.finish() == -signal.SIGKILL
  # The torn files of step 12 are there, but the state file still names step 8.
  assert os.path.exists(os.path.join(out, "model.ckpt-12.index"))
  assert saved_steps(out) == [4, 8]
  latest = run_checkpoints.latest(out)
  assert latest == os.path.join(out, "model.ckpt-8")
  saved = tf.train.load_checkpoint(latest).get_variable_to_shape_map()
  assert any("word_embeddings" in n for n in saved)  # The frozen base too.
  assert run_checkpoints.read_reference(latest) is None

  # The same command again, with --seed drawing other initial weights than before.
  set_random_seed = keras.utils.set_random_seed

  def other_weights(seed):
    set_random_seed(seed)
    random.seed(seed + 1000)  # Where Keras' initializers take their seeds from.

  monkeypatch.setattr(keras.utils, "set_random_seed", other_weights)
  logs = run_main(**random_base, output_dir=out)
  assert f"***** Running training from step 8 to {NUM_STEPS} *****" in logs
  assert saved_steps(out) == [4, 8, 12, 16, 20]
  reader = tf.train.load_checkpoint(os.path.join(out, "model.ckpt-12"))  # Rewritten whole.
  assert reader.get_variable_to_shape_map()
  assert result_files(out) == result_files(uninterrupted)
  assert not temporaries(out)


def test_sigkill_after_a_checkpoint_is_named_but_its_data_is_cut_resumes_from_the_one_before(
    command, uninterrupted, tmp_path):
  """The damaged-file point of a checkpoint write: the state file names step 12, whose
  .data file a power loss cut short, and the run is killed there. The rerun says so in
  one line, resumes from step 8 and ends as the uninterrupted run."""
  out = str(tmp_path / "out")
  run = Subprocess(tmp_path, dict(command, output_dir=out), hook="damage_checkpoint:12")
  try:
    run.wait_for("CHECKPOINT_NAMED_DATA_CUT")
  finally:
    run.proc.send_signal(signal.SIGKILL)
  assert run.finish() == -signal.SIGKILL
  assert saved_steps(out) == [4, 8, 12]  # Named, though damaged.

  logs = run_main(**command, output_dir=out)
  warnings = [m for m in logs if "model.ckpt-12 as the latest checkpoint" in m]
  assert len(warnings) == 1 and "\n" not in warnings[0], logs
  assert warnings[0].endswith(f"using {os.path.join(out, 'model.ckpt-8')}, the newest "
                              "complete one")
  assert f"***** Running training from step 8 to {NUM_STEPS} *****" in logs
  assert saved_steps(out) == [4, 8, 12, 16, 20]
  reader = tf.train.load_checkpoint(os.path.join(out, "model.ckpt-12"))  # Rewritten whole.
  for name in reader.get_variable_to_shape_map():
    reader.get_tensor(name)
  assert result_files(out) == result_files(uninterrupted)
  assert not temporaries(out)


def test_a_device_lost_mid_call_keeps_the_last_checkpoint_and_resumes(
    command, uninterrupted, tmp_path, monkeypatch):
  """A TPU Node preempted during training (UnavailableError out of the compiled
  loop), injected in this process around the real loop: one line naming the
  checkpoint to resume from, the SIGTERM status, nothing saved from the failed
  call; the same command then ends with the uninterrupted run's results."""
  out = str(tmp_path / "out")
  monkeypatch.setattr(loop, "make_train_loop", losing_the_device_at(10))
  records = Records()
  logger = py_logging.getLogger("absl")
  logger.addHandler(records)
  try:
    with pytest.raises(SystemExit) as exit_info:
      run_main(**command, output_dir=out)
  finally:
    logger.removeHandler(records)
  assert exit_info.value.code == stop_signals.TERMINATED_EXIT_STATUS
  lines = [m for m in records.messages if "unavailable" in m]
  assert len(lines) == 1 and "\n" not in lines[0], records.messages[-10:]
  # Checkpoints every 4 steps: 8 is the last; the weights of 9 and 10 are not saved.
  checkpoint = os.path.join(out, "model.ckpt-8")
  assert re.fullmatch(
      r"The TPU \(or another device of the run\) became unavailable during the steps "
      rf"after (\d+) \(Socket closed\): preempted or restarted\. Run the same command "
      rf"again to resume from {re.escape(checkpoint)} \(exit status 143\)", lines[0])
  assert saved_steps(out) == [4, 8] and run_checkpoints.latest(out) == checkpoint
  assert not os.path.exists(os.path.join(out, "eval_results.txt"))
  assert not temporaries(out)

  monkeypatch.undo()
  fingerprints = []  # Each a read of the whole frozen base (from a TPU's memory).
  base_fingerprint = adapter_weights.base_fingerprint
  monkeypatch.setattr(adapter_weights, "base_fingerprint",
                      lambda *args: fingerprints.append(args) or base_fingerprint(*args))
  logs = run_main(**command, output_dir=out)  # The same command again.
  assert f"***** Running training from step 8 to {NUM_STEPS} *****" in logs
  assert result_files(out) == result_files(uninterrupted)
  # Checked against the checkpoint's base at the model's set-up and again as training
  # resumes, recorded in new checkpoints and in adapter_model/: computed once.
  assert len(fingerprints) == 1


def test_a_device_lost_during_evaluation_is_one_line_and_the_rerun_evaluates(
    command, uninterrupted, tmp_path, monkeypatch):
  """UnavailableError out of the compiled prediction loop (a TPU preempted during
  --do_eval): one line saying what to rerun, the SIGTERM status, no result file;
  the same command then writes the uninterrupted run's eval_results.txt."""
  out = str(tmp_path / "out")
  shutil.copytree(uninterrupted, out)
  os.remove(os.path.join(out, "eval_results.txt"))
  eval_only = dict(command, do_train=False, do_predict=False, output_dir=out)

  def lost(*args, **kwargs):
    del args, kwargs

    def failing(iterator, num_steps):
      del iterator, num_steps
      raise tf.errors.UnavailableError(None, None, "Socket closed\nmore")
    return failing

  monkeypatch.setattr(prediction, "predict_function", lost)
  records = Records()
  logger = py_logging.getLogger("absl")
  logger.addHandler(records)
  try:
    with pytest.raises(SystemExit) as exit_info:
      run_main(**eval_only)
  finally:
    logger.removeHandler(records)
  assert exit_info.value.code == stop_signals.TERMINATED_EXIT_STATUS
  lines = [m for m in records.messages if "unavailable" in m]
  assert lines == [
      "The TPU (or another device of the run) became unavailable during batch 1 of 2 of an "
      "evaluation or prediction (Socket closed): preempted or restarted. Run the same "
      "command again to redo it: nothing of it was written (exit status 143)"], lines
  assert not os.path.exists(os.path.join(out, "eval_results.txt"))
  monkeypatch.undo()
  run_main(**eval_only)
  assert read_file(os.path.join(out, "eval_results.txt")) == read_file(
      os.path.join(uninterrupted, "eval_results.txt"))


def test_sigterm_during_evaluation_writes_no_results(command, uninterrupted, tmp_path):
  out = str(tmp_path / "out")
  run = Subprocess(tmp_path, dict(command, output_dir=out), hook="slow_predict")
  run.wait_for("PREDICT_BATCH")  # Training is over; evaluation has begun.
  run.proc.send_signal(signal.SIGTERM)
  status = run.finish()
  log = run.log()
  assert status == stop_signals.TERMINATED_EXIT_STATUS, log[-3000:]
  assert "Traceback" not in log
  assert re.search(r"SIGTERM: stopped predicting after \d+ batches; nothing of it is "
                   r"written: run the same command again", log), log[-3000:]
  for name in ("eval_results.txt", "test_results.tsv"):
    assert not os.path.exists(os.path.join(out, name))
  assert not temporaries(out)
  assert saved_steps(out) == [4, 8, 12, 16, 20]  # Training's work is all there.
  checkpoint_files = {n: os.path.getmtime(os.path.join(out, n))
                      for n in os.listdir(out) if n.startswith("model.ckpt-")}

  logs = run_main(**command, output_dir=out)
  assert f"***** Running training from step {NUM_STEPS} to {NUM_STEPS} *****" in logs
  assert checkpoint_files == {n: os.path.getmtime(os.path.join(out, n))
                              for n in os.listdir(out) if n.startswith("model.ckpt-")}
  assert result_files(out) == result_files(uninterrupted)


def test_a_damaged_latest_checkpoint_falls_back_to_the_one_before(
    command, uninterrupted, tmp_path):
  out = str(tmp_path / "out")
  shutil.copytree(uninterrupted, out)
  for name in ("eval_results.txt", "test_results.tsv"):
    os.remove(os.path.join(out, name))
  # The state file names step 20; its index is torn and step 16 lost a data file.
  index = os.path.join(out, "model.ckpt-20.index")
  with open(index, "r+b") as f:
    f.truncate(os.path.getsize(index) // 2)
  os.remove(os.path.join(out, "model.ckpt-16.data-00000-of-00001"))
  handler = Records()
  py_logging.getLogger("absl").addHandler(handler)
  try:
    assert run_checkpoints.latest(out) == os.path.join(out, "model.ckpt-12")
  finally:
    py_logging.getLogger("absl").removeHandler(handler)
  assert any("model.ckpt-20 as the latest checkpoint, but its .index file is unreadable"
             in m and "using " + os.path.join(out, "model.ckpt-12") in m
             for m in handler.messages), handler.messages

  logs = run_main(**command, output_dir=out)
  assert f"***** Running training from step 12 to {NUM_STEPS} *****" in logs
  assert result_files(out) == result_files(uninterrupted)
  assert run_checkpoints.latest(out) == os.path.join(out, "model.ckpt-20")


def test_ctrl_c_stops_a_sweep_in_one_line_and_its_rerun_resumes(command, uninterrupted,
                                                                 tmp_path, monkeypatch):
  """Ctrl-C at a terminal reaches the sweep and its running point: the point saves its
  step as run_classifier.py does, the sweep waits for it and ends in one line with
  status 130; the same command resumes the point to the uninterrupted run's results."""
  wrapper = tmp_path / "wrapper.py"
  wrapper.write_text(WRAPPER.format(repo=REPO))
  out = tmp_path / "sweep"
  fixed = {k: v for k, v in command.items()
           if k not in ("seed", "do_train", "do_eval", "do_predict")}
  argv = [sys.executable, "-m", "experiments.sweep", f"--output_dir={out}", "--vary=seed=1",
          f"--program={sys.executable} {wrapper}", "--"] + flag_argv(fixed)

  def sweep(hook):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", INTERRUPT_HOOK=hook)
    # A session of its own: its process group is what a terminal's Ctrl-C reaches.
    return subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)

  proc = sweep("slow_steps_from:5")
  try:
    deadline = time.time() + 120
    while not re.search(r"^STEP \d+$", point_log(out), re.M):
      assert time.time() < deadline and proc.poll() is None, point_log(out)[-3000:]
      time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
  finally:
    if proc.poll() is None:
      proc.kill()
  log = point_log(out)
  assert proc.returncode == 130, stderr[-3000:]
  for text in (stdout, stderr, log):
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-3000:]
  assert [l for l in stderr.splitlines() if "interrupted" in l] == [
      "SIGINT: interrupted; the same command resumes (exit status 130)"], stderr[-3000:]
  (step,) = re.findall(r"SIGINT: interrupted at step (\d+); the same command resumes", log)
  assert 5 <= int(step) < NUM_STEPS

  # The same command again, as a user reruns it: the sweep's main in this process (its
  # point a subprocess as ever), for what is under test here is what the rerun finds.
  from experiments import sweep as sweep_lib  # pylint: disable=import-outside-toplevel
  monkeypatch.setenv("INTERRUPT_HOOK", "")
  monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
  fv = flags.FlagValues()
  sweep_lib.define_flags(fv)
  assert sweep_lib.main(fv(["sweep"] + argv[3:]), fv) == 0
  assert f"***** Running training from step {step} to {NUM_STEPS} *****" in point_log(out)
  (point,) = glob.glob(str(out / "runs" / "*"))
  assert read_file(os.path.join(point, "eval_results.txt")) == \
      read_file(os.path.join(uninterrupted, "eval_results.txt"))


def _cut_short(path, keep):
  """Truncates a file to `keep` bytes (negative: all but that many), as a full
  disk, a killed copy or a power loss before the data reached the disk leave it."""
  size = os.path.getsize(path)
  with open(path, "r+b") as f:
    f.truncate(keep if keep >= 0 else size + keep)


def test_a_cut_short_latest_data_file_is_skipped_with_one_warning(
    command, uninterrupted, tmp_path, monkeypatch):
  """The state file names step 20 and its index is whole, but its .data file lost
  its last byte: the rerun reads every tensor, says so in one line, resumes from
  step 16 and ends as the uninterrupted run, step 20 rewritten whole."""
  out = str(tmp_path / "out")
  resumable_copy(uninterrupted, out)
  data = os.path.join(out, "model.ckpt-20.data-00000-of-00001")
  _cut_short(data, -1)
  reads = []  # The checkpoints read through: those the run found, not those it wrote.
  unreadable_tensor = checkpoint_io.unreadable_tensor
  monkeypatch.setattr(checkpoint_io, "unreadable_tensor",
                      lambda prefix: reads.append(prefix) or unreadable_tensor(prefix))

  logs = run_main(**command, output_dir=out)
  assert reads == [os.path.join(out, f"model.ckpt-{step}") for step in (20, 16)]
  warnings = [m for m in logs if "model.ckpt-20 as the latest checkpoint" in m]
  assert len(warnings) == 1, logs
  assert f"but its data ({data}) is damaged: cannot read " in warnings[0]
  assert warnings[0].endswith(f"using {os.path.join(out, 'model.ckpt-16')}, "
                              f"the newest complete one")
  assert "\n" not in warnings[0]
  assert f"***** Running training from step 16 to {NUM_STEPS} *****" in logs
  assert result_files(out) == result_files(uninterrupted)
  assert run_checkpoints.latest(out) == os.path.join(out, "model.ckpt-20")
  reader = tf.train.load_checkpoint(os.path.join(out, "model.ckpt-20"))
  for name in reader.get_variable_to_shape_map():  # Every tensor readable again.
    reader.get_tensor(name)


def _flip_a_byte(path):
  """A damaged byte, the size unchanged."""
  with open(path, "r+b") as f:
    f.seek(os.path.getsize(path) // 2)
    byte = f.read(1)
    f.seek(-1, os.SEEK_CUR)
    f.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.parametrize("damage", [lambda p: _cut_short(p, 0), lambda p: _cut_short(p, 1000),
                                    _flip_a_byte], ids=["empty", "1000 bytes", "a byte flipped"])
def test_other_damage_to_the_latest_data_file_is_found_too(uninterrupted, tmp_path, damage):
  """Every way a .data file can be damaged under a whole index makes latest()
  fall back (a flipped byte fails the tensor's checksum)."""
  out = str(tmp_path / "out")
  resumable_copy(uninterrupted, out)
  damage(os.path.join(out, "model.ckpt-20.data-00000-of-00001"))
  assert run_checkpoints.latest(out) == os.path.join(out, "model.ckpt-16")


def test_with_every_checkpoint_damaged_training_starts_over_to_the_same_result(
    command, uninterrupted, tmp_path):
  """No sound checkpoint left: one warning, training from the initial weights
  (seeded, so to the uninterrupted run's result), the damaged files replaced."""
  out = str(tmp_path / "out")
  resumable_copy(uninterrupted, out)
  for data in glob.glob(os.path.join(out, "model.ckpt-*.data-*")):
    _cut_short(data, -1)

  logs = run_main(**command, output_dir=out)
  warnings = [m for m in logs if "as the latest checkpoint" in m]
  assert len(warnings) == 1, logs
  assert warnings[0].endswith("no complete checkpoint is left: starting afresh")
  assert f"***** Running training from step 0 to {NUM_STEPS} *****" in logs
  assert result_files(out) == result_files(uninterrupted)
  assert saved_steps(out) == [4, 8, 12, 16, 20]
  for step in saved_steps(out):
    assert run_checkpoints._damaged(  # pylint: disable=protected-access
        os.path.join(out, f"model.ckpt-{step}"),
        glob.glob(os.path.join(out, f"model.ckpt-{step}.data-*"))) is None


def test_evaluating_a_damaged_run_uses_its_newest_sound_checkpoint_or_refuses(
    command, uninterrupted, tmp_path):
  """Without training: the newest sound checkpoint is evaluated (and named in the
  results); with none left, one line naming the latest, as the base's chance-level
  scores would pass for the run's."""
  out = str(tmp_path / "out")
  resumable_copy(uninterrupted, out)
  _cut_short(os.path.join(out, "model.ckpt-20.data-00000-of-00001"), -1)
  evaluate = dict(command, do_train=False, do_predict=False, output_dir=out)
  run_main(**evaluate)
  assert "checkpoint_path = model.ckpt-16\n" in read_file(os.path.join(out, "eval_results.txt"))

  os.remove(os.path.join(out, "eval_results.txt"))
  for data in glob.glob(os.path.join(out, "model.ckpt-*.data-*")):
    _cut_short(data, 0)
  with pytest.raises(errors.UserError) as refused:
    run_main(**evaluate)
  latest = os.path.join(out, "model.ckpt-20")
  assert str(refused.value).startswith(
      f"{latest}: the latest checkpoint of --output_dir={out}, and every one before it, is "
      f"damaged or incomplete (its data ({latest}.data-00000-of-00001) is damaged: ")
  assert str(refused.value).endswith("nothing of it to evaluate; train again (--do_train) or "
                                     "give another --output_dir")
  assert not os.path.exists(os.path.join(out, "eval_results.txt"))
