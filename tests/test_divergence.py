"""Training that blows up stops at the step and keeps no non-finite weights: a NaN or
Inf loss ends the run with one line naming the step and the last checkpoint, which
is intact; weights that turn NaN while the loss stays finite are never saved.
Interrupted runs: test_interruptions.py.
"""

import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.checkpoints import run_checkpoints
from adapter_bert import errors
from adapter_bert.model import modeling
import run_classifier
from adapter_bert.runtime import loop
from adapter_bert.runtime import trainable
from interrupted_runs import flag_argv, saved_steps
import tiny_bert


def test_nan_loss_stops_with_the_step_and_keeps_finite_checkpoints(command, tmp_path, capsys):
  """run_classifier.py's main as its entry point runs it (errors.exit_on_user_error), in
  this process: the stop and the files are under test here, not the process."""
  out = str(tmp_path / "out")
  fv = flags.FlagValues()
  run_classifier.define_flags(fv)
  fv(["run_classifier.py"] + flag_argv(dict(command, output_dir=out, learning_rate=1e30,
                                            save_checkpoints_steps=1, do_eval=False,
                                            do_predict=False)))
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    errors.exit_on_user_error(lambda argv: run_classifier.main(argv, fv))(["run_classifier.py"])
  stderr = capsys.readouterr().err
  assert exit_info.value.code == errors.USER_ERROR_EXIT_STATUS, stderr[-3000:]
  assert "Traceback" not in stderr
  message = [l for l in stderr.splitlines() if l.startswith("ERROR: ")]
  assert len(message) == 1, stderr[-3000:]
  match = re.match(r"ERROR: training diverged: the loss is (nan|inf|-inf) at step (\d+)\. "
                   r"Nothing after step (\d+) was saved: the last checkpoint, (\S+), is "
                   r"intact\..*lower --learning_rate \(now 1e\+30\)", message[0])
  assert match, message[0]
  step, last = int(match.group(2)), int(match.group(3))
  # A checkpoint every step, none from the step that went wrong or after.
  assert last == step - 1 >= 1
  assert saved_steps(out)[-1] == last
  assert match.group(4) == run_checkpoints.latest(out) == os.path.join(out, f"model.ckpt-{last}")
  reader = tf.train.load_checkpoint(match.group(4))
  values = [reader.get_tensor(n) for n, dtype in reader.get_variable_to_dtype_map().items()
            if dtype.is_floating]
  assert values and all(np.isfinite(v).all() for v in values)


def test_nonfinite_weights_are_never_saved(tmp_path):
  """A loss that stays finite while its gradients are NaN: the save refuses."""
  keras.utils.set_random_seed(3)
  model = modeling.BertClassifier(modeling.BertConfig(**tiny_bert.TINY_CONFIG), 2,
                                  AdapterConfig(size=8))
  model.ensure_built()
  trainable.set_trainable(model, trainable.TrainMode.parse("adapters"))
  ids = np.random.default_rng(0).integers(5, 99, size=(8, 16)).astype(np.int32)
  dataset = tf.data.Dataset.from_tensor_slices((
      {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids)},
      np.zeros(8, np.int32))).repeat().batch(4, drop_remainder=True)

  def loss_fn(labels, logits):  # 0, with a NaN gradient: d sqrt(u) at u = 0 times 0.
    del labels
    return tf.sqrt(tf.square(logits[:, 0] - tf.stop_gradient(logits[:, 0])))

  out = str(tmp_path / "out")
  settings = loop.TrainSettings(output_dir=out, train_batch_size=4, num_train_steps=3,
                                num_warmup_steps=0, learning_rate=1e-3,
                                save_checkpoints_steps=1, iterations_per_loop=1)
  with pytest.raises(errors.UserError, match=r"training diverged: the weights hold NaN or "
                     r"Inf values \(the loss was still finite\) at step 1\. No checkpoint "
                     r"was saved\."):
    loop.train(tf.distribute.get_strategy(), model, loss_fn, dataset, settings)
  assert run_checkpoints.latest(out) is None
  assert not tf.io.gfile.glob(os.path.join(out, "model.ckpt-*"))
