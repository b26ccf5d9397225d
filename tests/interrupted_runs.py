"""The harness of the tests of interrupted runs (test_interruptions) and diverging
ones (test_divergence): run_classifier.py in a subprocess under WRAPPER, whose hook
holds it at the point under test and prints a marker, so that a signal arrives
there and not wherever the timing puts it; the steps a run's checkpoints hold;
and a device lost in the middle of a host call (losing_the_device_at), injected
in this process around the real training loop. conftest.command is the training
command they share: NUM_STEPS steps on MRPC, a checkpoint every SAVE_EVERY."""

import glob
import os
import re
import shutil
import select
import subprocess
import sys
import time

import tensorflow as tf

from adapter_bert.checkpoints import run_checkpoints
from adapter_bert.runtime import loop

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MRPC = os.path.join(REPO, "data", "glue", "MRPC")  # 8 training examples: 2 steps an epoch.
NUM_STEPS, SAVE_EVERY = 20, 4

# Runs run_classifier.py (arguments as given) with the hook named by
# INTERRUPT_HOOK; markers go to stdout, the log to stderr. The frameworks load as
# run_classifier.py's first statement loads them (launch.start), before the hooks'
# imports: a plain `import tensorflow` first would load Keras with every optional
# package it finds (launch.py), ~1.7 CPU-s more for each run.
WRAPPER = r'''
import os, runpy, sys, time
sys.argv = [os.path.join({repo!r}, "run_classifier.py")] + sys.argv[1:]
from adapter_bert.cli import launch
launch.start(sys.argv)
import tensorflow as tf
from adapter_bert.classification import features
from adapter_bert.runtime import progress

hook, _, arg = os.environ["INTERRUPT_HOOK"].partition(":")

def marker(text):
  print(text, flush=True)

if hook == "slow_steps_from":  # Host calls from step `arg` on take 0.5 s more.
  record = progress.Progress.record
  def slow_record(self, step, *args, **kwargs):
    line = record(self, step, *args, **kwargs)
    if step >= int(arg):
      marker(f"STEP {{step}}")
      time.sleep(0.5)
    return line
  progress.Progress.record = slow_record

elif hook == "tear_checkpoint":  # The save of step `arg` stops halfway; waits for the kill.
  save = tf.train.CheckpointManager.save
  def torn_save(self, checkpoint_number=None, **kwargs):
    if checkpoint_number != int(arg):
      return save(self, checkpoint_number=checkpoint_number, **kwargs)
    prefix = f"{{self._prefix}}-{{checkpoint_number}}"
    self.checkpoint.write(prefix)  # The files, without the state file update.
    with open(prefix + ".index", "r+b") as f:  # The index half written,
      f.truncate(os.path.getsize(prefix + ".index") // 2)
    os.makedirs(prefix + "_temp", exist_ok=True)  # and the next shard begun.
    with open(prefix + "_temp/part-00000-of-00001.data-00000-of-00001", "wb") as f:
      f.write(b"partial")
    marker("MID_CHECKPOINT_WRITE")
    time.sleep(300)
  tf.train.CheckpointManager.save = torn_save

elif hook == "damage_checkpoint":  # The save of step `arg` is named, its data cut short.
  save = tf.train.CheckpointManager.save
  def damaged_save(self, checkpoint_number=None, **kwargs):
    path = save(self, checkpoint_number=checkpoint_number, **kwargs)
    if checkpoint_number == int(arg):  # As a power loss leaves it: the state file and
      data = path + ".data-00000-of-00001"  # index reached the disk, the data did not.
      with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) // 2)
      marker("CHECKPOINT_NAMED_DATA_CUT")
      time.sleep(300)
    return path
  tf.train.CheckpointManager.save = damaged_save

elif hook == "slow_predict":  # Each eval/predict batch takes 0.3 s.
  make_dataset = features.make_dataset
  def slow(*batch):
    marker("PREDICT_BATCH")
    time.sleep(0.3)
    return 0
  def slow_make_dataset(*args, **kwargs):
    dataset = make_dataset(*args, **kwargs)
    if kwargs.get("is_training"):
      return dataset
    def delay(features, labels):
      with tf.control_dependencies([tf.py_function(slow, [], tf.int32)]):
        return {{k: tf.identity(v) for k, v in features.items()}}, tf.identity(labels)
    return dataset.map(delay)
  features.make_dataset = slow_make_dataset

runpy.run_path(sys.argv[0], run_name="__main__")
'''


def flag_argv(flag_values):
  """A command line's flags: `--name` for True, else `--name=value`."""
  return [f"--{k}" if v is True else f"--{k}={v}" for k, v in flag_values.items()]


def read_file(path):
  """The text of the file at `path`."""
  with open(path) as f:
    return f.read()


def result_files(output_dir):
  """The texts of a run's eval_results.txt and test_results.tsv, by name."""
  return {name: read_file(os.path.join(output_dir, name))
          for name in ("eval_results.txt", "test_results.tsv")}


def temporaries(output_dir):
  """file_io's temporaries and AtomicDirectory backups anywhere under output_dir."""
  return [os.path.join(d, n) for d, dirs, files in os.walk(output_dir)
          for n in dirs + files if re.match(r"\..*\.(tmp|old)-", n)]


def point_log(sweep_dir):
  """The run.log of the sweep's one point ("" before it starts)."""
  logs = glob.glob(str(sweep_dir / "runs" / "*" / "run.log"))
  return read_file(logs[0]) if logs else ""


def resumable_copy(uninterrupted, out):
  """The uninterrupted run's output_dir without its results: as a rerun finds it."""
  shutil.copytree(uninterrupted, out)
  for name in ("eval_results.txt", "test_results.tsv"):
    os.remove(os.path.join(out, name))


def saved_steps(output_dir):
  """The steps the `checkpoint` state file lists (what a restart can resume from)."""
  state = tf.train.get_checkpoint_state(output_dir)
  return sorted(run_checkpoints.step_of(p) for p in state.all_model_checkpoint_paths)


class Subprocess:
  """The command under the WRAPPER hook; stdout carries the hook's markers."""

  def __init__(self, tmp_path, flag_values, hook):
    tmp_path.mkdir(parents=True, exist_ok=True)
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(WRAPPER.format(repo=REPO))
    self.log_path = tmp_path / "log.txt"
    self._log = open(self.log_path, "w")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", INTERRUPT_HOOK=hook)
    self.proc = subprocess.Popen([sys.executable, str(wrapper)] + flag_argv(flag_values),
                                 cwd=REPO, env=env, stdout=subprocess.PIPE,
                                 stderr=self._log, text=True)

  def wait_for(self, pattern, timeout=120):
    """Reads markers until one matches `pattern`; returns the match."""
    deadline = time.time() + timeout
    while time.time() < deadline:
      ready, _, _ = select.select([self.proc.stdout], [], [], deadline - time.time())
      line = self.proc.stdout.readline() if ready else ""
      if not line and self.proc.poll() is not None:
        break
      match = re.fullmatch(pattern, line.strip())
      if match:
        return match
    raise AssertionError(f"no marker {pattern!r} (exit status {self.proc.poll()}):\n"
                         + self.log()[-3000:])

  def finish(self, timeout=120):
    """Waits for the exit; returns the exit status."""
    try:
      self.proc.communicate(timeout=timeout)
    finally:
      if self.proc.poll() is None:
        self.proc.kill()
        self.proc.communicate()
      self._log.close()
    return self.proc.returncode

  def log(self):
    if not self._log.closed:
      self._log.flush()
    return self.log_path.read_text()


def losing_the_device_at(lost_at):
  """loop.make_train_loop whose loop, on the host call that would pass step
  `lost_at`, runs the steps up to it and then fails as a preempted TPU Node's
  does: the weights stand past the host's step, at a step it never learns."""
  make_train_loop = loop.make_train_loop

  def make(*args, **kwargs):
    train_loop, done = make_train_loop(*args, **kwargs), [0]

    def failing(iterator, num_steps):
      if done[0] + int(num_steps) >= lost_at:
        if lost_at > done[0]:
          train_loop(iterator, tf.constant(lost_at - done[0]))
        raise tf.errors.UnavailableError(
            None, None, "Socket closed\nAdditional GRPC error information: ...")
      done[0] += int(num_steps)
      return train_loop(iterator, num_steps)

    return failing

  return make
