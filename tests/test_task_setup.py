"""task_setup: the one weight-loading policy of run_classifier.py and run_squad.py."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import adapter_checkpoint
import modeling
import task_setup
import tiny_bert
import training

CONFIG = modeling.BertConfig.from_dict(tiny_bert.TINY_CONFIG)
INPUTS = {"input_ids": np.array([[2, 7, 9, 3, 0]], np.int32),
          "input_mask": np.array([[1, 1, 1, 1, 0]], np.int32),
          "segment_ids": np.zeros((1, 5), np.int32)}


def _model(options, output_dir, seed=0, **kwargs):
  keras.utils.set_random_seed(seed)
  base = task_setup.Base(CONFIG, vocab_file="unused", hub_encoder=None)
  return task_setup.create_model(
      tf.distribute.get_strategy(),
      lambda bert, adapters: modeling.BertClassifier(bert, 2, adapters),
      options, base, output_dir, **kwargs)


def test_latest_checkpoint_wins_then_init_checkpoint_then_adapters(tmp_path, caplog):
  _, _, ckpt, weights = tiny_bert.write_google_dir(str(tmp_path / "base"))
  options = task_setup.ModelOptions(adapter_size=4, init_checkpoint=ckpt)
  out = str(tmp_path / "out")
  model, step = _model(options, out)
  assert step == 0
  np.testing.assert_array_equal(
      model.tf1_variable_map()["bert/embeddings/word_embeddings"].numpy(),
      weights["bert/embeddings/word_embeddings"])

  # Adapters of a task on top of the same base: their step, their labels.
  for name, variable in model.tf1_variable_map().items():
    if "adapters" in name:  # Fresh adapters are near identity: make them count.
      variable.assign(variable + 0.5)
  expected = model(INPUTS).numpy()
  adapter_dir = str(tmp_path / "adapter_model")
  adapter_checkpoint.save_adapter_weights(model, adapter_dir,
                                          {"labels": ["0", "1"], "global_step": 7})
  with_adapters = dict(init_checkpoint=ckpt, adapter_checkpoint=adapter_dir)
  restored, step = _model(task_setup.ModelOptions(adapter_size=4, **with_adapters), out,
                          seed=3, adapter_metadata={"labels": ["0", "1"]})
  assert step == 7
  np.testing.assert_array_equal(restored(INPUTS).numpy(), expected)
  with pytest.raises(ValueError, match=r"was trained with labels \['0', '1'\], this run "
                                       r"has \['1', '0'\]"):
    _model(task_setup.ModelOptions(adapter_size=4, **with_adapters), out,
           adapter_metadata={"labels": ["1", "0"]})

  # A checkpoint in output_dir (as training writes it) wins over both flags.
  training.checkpoint_manager(model, out).save(checkpoint_number=12)
  with caplog.at_level("WARNING"):
    resumed, step = _model(task_setup.ModelOptions(adapter_size=4, **with_adapters), out,
                           seed=5)
  assert step == 12
  np.testing.assert_array_equal(resumed(INPUTS).numpy(), expected)
  assert "wins over --init_checkpoint, --adapter_checkpoint" in caplog.text
