"""A stop during evaluation or prediction acts within seconds, whatever --iterations_per_loop.

runtime/prediction.predict checks the stop signals between its compiled host
calls. Off a TPU those calls are sized by time, as training's
(progress.CallSizes): about progress.PREDICT_CALL_SECONDS of batches each, not
--iterations_per_loop (1000) of them, which on a CPU ran for minutes before a
SIGTERM was seen. The batches here are made slow with a sleep in the input
pipeline, which no machine's load can make faster: a call then holds at most
PREDICT_CALL_SECONDS / SLOW_BATCH_SECONDS batches, however the machine times
them, and the batches read after the signal are counted against that.
The signal is real (os.kill of this process, from the input pipeline's thread
while a call runs), and is handled as a scheduler's would be.
"""

import os
import shutil
import signal
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from adapter_bert.classification import features
from adapter_bert.runtime import prediction
from adapter_bert.runtime import progress
from adapter_bert.runtime import records
from adapter_bert.runtime import stop_signals
from interrupted_runs import MRPC, read_file, temporaries
from run_harness import run_main

SLOW_BATCH_SECONDS = 0.1  # Of each slowed batch: a sleep, its least.
SIGNAL_AT_BATCH = 4  # The batch whose reading sends the signal: in the first paced call.


class SlowBatches:
  """A map that makes each batch read by the prediction loop take `seconds` and
  sends this process `signum` as the loop reads batch `signal_at`. Batches
  read before the loop begins (prediction.count_batches, once it is patched by
  `after_counting`) pass at once."""

  def __init__(self, seconds, signum, signal_at):
    self.seconds, self.signum, self.signal_at = seconds, signum, signal_at
    self.counted = False
    self.read = 0  # Batches the loop read.
    self.signal_time = None
    self.read_at_signal = None

  def after_counting(self, monkeypatch):
    count_batches = prediction.count_batches

    def count_then_slow_down(dataset):
      n = count_batches(dataset)
      self.counted = True
      return n
    monkeypatch.setattr(prediction, "count_batches", count_then_slow_down)

  def _batch(self):
    if not self.counted:
      return np.int32(0)
    self.read += 1
    if self.read == self.signal_at:
      self.signal_time, self.read_at_signal = time.monotonic(), self.read
      os.kill(os.getpid(), self.signum)
    time.sleep(self.seconds)
    return np.int32(0)

  def __call__(self, dataset):
    def slow(batch_features, labels):
      done = tf.numpy_function(self._batch, [], tf.int32, stateful=True)
      with tf.control_dependencies([done]):
        return tf.nest.map_structure(tf.identity, (batch_features, labels))
    return dataset.map(slow)


@pytest.fixture
def caught_signals():
  """SIGINT and SIGTERM reach a handler of the test's outside prediction's (a signal
  sent too late must not end the test run); asserts none did."""
  reached = []
  before = {s: signal.signal(s, lambda signum, frame: reached.append(signum))
            for s in stop_signals.SIGNALS}
  try:
    yield
  finally:
    for s, handler in before.items():
      signal.signal(s, handler)
  assert not reached, f"signals seen outside prediction: {reached}"


class Doubler(keras.Model):
  """Outputs of each shape a model gives: per token ("doubled") and per example."""

  def call(self, inputs, training=False):
    x = tf.cast(inputs["input_ids"], tf.float32)
    return {"doubled": 2 * x, "total": tf.reduce_sum(x, axis=-1)}


def _dataset(num_examples, batch_size, seed=0):
  """Batches of their own widths (1-12 tokens), each example carrying a shuffled
  records.INPUT_INDEX, by which predict returns them: (features, labels)."""
  rng = np.random.default_rng(seed)
  lengths = rng.integers(1, 13, num_examples)
  ids = [rng.integers(1, 100, n).astype(np.int32) for n in lengths]
  order = rng.permutation(num_examples).astype(np.int32)

  def examples():
    for i in range(num_examples):
      yield {"input_ids": ids[i], records.INPUT_INDEX: order[i]}, order[i]

  dataset = tf.data.Dataset.from_generator(examples, output_signature=(
      {"input_ids": tf.TensorSpec([None], tf.int32),
       records.INPUT_INDEX: tf.TensorSpec([], tf.int32)},
      tf.TensorSpec([], tf.int32)))
  return dataset.padded_batch(batch_size), ids, order


def _counting_calls(monkeypatch, slow=None):
  """The batches of each host call predict makes (and, with `slow`, whether the
  signal had been sent when it began)."""
  calls = []
  made = prediction.predict_function

  def counted(*args, **kwargs):
    function = made(*args, **kwargs)

    def call(iterator, num_steps):
      calls.append((int(num_steps), slow is not None and slow.signal_time is not None))
      return function(iterator, num_steps)
    return call
  monkeypatch.setattr(prediction, "predict_function", counted)
  return calls


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_acts_after_a_call_of_about_predict_call_seconds(
    signum, monkeypatch, caught_signals):
  """600 slow batches and iterations_per_loop=1000: the call in progress when the
  signal arrives ends within a call's time (here 0.5 s: 25 batches of 20 ms), and
  no other call begins. A call of --iterations_per_loop batches would read all 600."""
  del caught_signals
  monkeypatch.setattr(progress, "PREDICT_CALL_SECONDS", 0.5)
  slow = SlowBatches(0.02, signum, SIGNAL_AT_BATCH)
  slow.after_counting(monkeypatch)
  calls = _counting_calls(monkeypatch, slow)
  dataset, _, _ = _dataset(1200, 2)
  dataset = slow(dataset.cache())  # Generated once, at the count.
  with pytest.raises(stop_signals.Stopped) as stopped:
    prediction.predict(tf.distribute.get_strategy(), Doubler(), dataset,
                       iterations_per_loop=1000)
  assert stopped.value.code == stop_signals.exit_status(signum)
  assert slow.read_at_signal == SIGNAL_AT_BATCH
  assert not [n for n, after_signal in calls if after_signal], calls
  per_call = int(0.5 / 0.02)  # The most a call of 0.5 s holds.
  assert slow.read <= SIGNAL_AT_BATCH + per_call + 2, (slow.read, calls)  # 2: read ahead.


@pytest.fixture(scope="module")
def long_eval(command, tmp_path_factory):
  """MRPC with its dev set 100 times over (600 examples, 150 batches of 4) and the
  run of `command` on it, trained and evaluated without interruption, with
  --iterations_per_loop=1000: (flags, output_dir)."""
  data_dir = tmp_path_factory.mktemp("mrpc_long_dev")
  for name in ("train.tsv", "test.tsv"):
    shutil.copy(os.path.join(MRPC, name), data_dir / name)
  header, *rows = read_file(os.path.join(MRPC, "dev.tsv")).splitlines()
  (data_dir / "dev.tsv").write_text("\n".join([header] + rows * 100) + "\n")
  flags = dict(command, data_dir=str(data_dir), iterations_per_loop=1000, do_predict=False)
  out = str(tmp_path_factory.mktemp("uninterrupted") / "out")
  run_main(**flags, output_dir=out)
  return flags, out


def test_sigterm_during_a_long_evaluation_acts_within_seconds_and_writes_nothing(
    long_eval, tmp_path, monkeypatch, caught_signals):
  """run_classifier.py --do_eval over 150 batches of 0.1 s each, --iterations_per_loop=
  1000: SIGTERM at the 4th batch ends the run within about PREDICT_CALL_SECONDS (a
  call of 1000 batches: after all 150, 15 s on); nothing of the evaluation is
  written, and the same command then writes the uninterrupted run's results."""
  del caught_signals
  flags, uninterrupted = long_eval
  out = str(tmp_path / "out")
  shutil.copytree(uninterrupted, out)
  os.remove(os.path.join(out, "eval_results.txt"))
  eval_only = dict(flags, do_train=False, output_dir=out)

  slow = SlowBatches(SLOW_BATCH_SECONDS, signal.SIGTERM, SIGNAL_AT_BATCH)
  slow.after_counting(monkeypatch)
  make_dataset = features.make_dataset
  monkeypatch.setattr(features, "make_dataset",
                      lambda *args, **kwargs: slow(make_dataset(*args, **kwargs)))
  calls = _counting_calls(monkeypatch, slow)
  with pytest.raises(SystemExit) as exit_info:
    run_main(**eval_only)
  stop_delay = time.monotonic() - slow.signal_time
  assert exit_info.value.code == stop_signals.TERMINATED_EXIT_STATUS
  # The call under way ends within about PREDICT_CALL_SECONDS; none begins after.
  assert not [n for n, after_signal in calls if after_signal], calls
  per_call = int(progress.PREDICT_CALL_SECONDS / SLOW_BATCH_SECONDS)
  assert slow.read <= SIGNAL_AT_BATCH + per_call + 2, (slow.read, calls)  # 2: read ahead.
  # Generous for a loaded machine: the batches left when the signal came take 14.6 s.
  assert stop_delay < 4 * progress.PREDICT_CALL_SECONDS, (stop_delay, calls)
  assert not os.path.exists(os.path.join(out, "eval_results.txt"))
  assert not temporaries(out)

  monkeypatch.undo()
  run_main(**eval_only)
  assert read_file(os.path.join(out, "eval_results.txt")) == read_file(
      os.path.join(uninterrupted, "eval_results.txt"))


def test_a_whole_prediction_is_the_same_whatever_the_calls(monkeypatch):
  """The batches' outputs, of every width, in record order: the same arrays from
  calls of --iterations_per_loop batches (before calls were sized by time), from
  time-sized calls, and from calls of one batch."""
  calls = _counting_calls(monkeypatch)
  strategy, model = tf.distribute.get_strategy(), Doubler()
  dataset, ids, order = _dataset(100, 3)  # 34 batches, the last of 1.

  def predict():
    calls.clear()
    out = prediction.predict(strategy, model, dataset, iterations_per_loop=1000)
    return out, [n for n, _ in calls]

  with monkeypatch.context() as m:  # As before: iterations_per_loop batches a call.
    m.setattr(progress.CallSizes, "steps_for_next_call",
              lambda self, at_most: min(self._iterations_per_loop, at_most))  # pylint: disable=protected-access
    whole, whole_calls = predict()
  paced, paced_calls = predict()
  with monkeypatch.context() as m:
    m.setattr(progress, "PREDICT_CALL_SECONDS", 0.0)  # Calls of one batch.
    single, single_calls = predict()
  # Time-sized: [1, 1, 32] unless a batch of this model took over 2 s / 32.
  assert whole_calls == [34] and single_calls == [1] * 34
  assert paced_calls[:2] == [1, 1] and sum(paced_calls) == 34, paced_calls

  widest = max(len(i) for i in ids)
  want = np.zeros([100, widest], np.float32)
  for i, example_ids in enumerate(ids):
    want[order[i], :len(example_ids)] = 2 * example_ids
  np.testing.assert_array_equal(whole[records.INPUT_INDEX], np.arange(100))
  np.testing.assert_array_equal(whole["doubled"], want)
  for other in (paced, single):
    assert sorted(other) == sorted(whole)
    for key, value in whole.items():
      assert other[key].dtype == value.dtype
      np.testing.assert_array_equal(other[key], value, err_msg=key)


def test_calls_per_device():
  """How long a stop can wait, per device: the batches of each call of 1000
  batches, each 0.05 s, with iterations_per_loop=300. Off a TPU about
  PREDICT_CALL_SECONDS a call, whatever iterations_per_loop; on a TPU
  iterations_per_loop batches; on several machines (which must agree) up to 100."""
  def calls(one_call_per_loop, pace_by_time):
    sizes = progress.CallSizes(300, one_call_per_loop, pace_by_time,
                               call_seconds=progress.PREDICT_CALL_SECONDS)
    done, made = 0, []
    while done < 1000:
      n = min(sizes.steps_for_next_call(at_most=1000 - done), 1000 - done)  # As predict.
      sizes.record(n, n * 0.05 + (3.0 if not made else 0.0))  # The first call compiles.
      done += n
      made.append(n)
    return made

  per_call = int(progress.PREDICT_CALL_SECONDS / 0.05)
  cpu = calls(one_call_per_loop=False, pace_by_time=True)
  assert cpu[:3] == [1, 1, per_call] and max(cpu) == per_call and sum(cpu) == 1000
  assert calls(one_call_per_loop=True, pace_by_time=False) == [300, 300, 300, 100]
  assert calls(one_call_per_loop=False, pace_by_time=False) == [1, 1] + [100] * 9 + [98]
