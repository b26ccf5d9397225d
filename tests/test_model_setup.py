"""model_setup: the one weight-loading policy of run_classifier.py and run_squad.py."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from adapter_bert import label_lists
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import base_model
from adapter_bert.checkpoints import run_checkpoints
from adapter_bert import errors
from adapter_bert.model import modeling
from adapter_bert.runtime import model_setup
import tiny_bert

CONFIG = modeling.BertConfig.from_dict(tiny_bert.TINY_CONFIG)
INPUTS = {"input_ids": np.array([[2, 7, 9, 3, 0]], np.int32),
          "input_mask": np.array([[1, 1, 1, 1, 0]], np.int32),
          "segment_ids": np.zeros((1, 5), np.int32)}


def _model(options, output_dir, seed=0, **kwargs):
  keras.utils.set_random_seed(seed)
  base = base_model.Base(CONFIG, vocab_file="unused")
  return model_setup.create_model(
      tf.distribute.get_strategy(),
      lambda bert, adapters: modeling.BertClassifier(bert, 2, adapters),
      options, base, output_dir, **kwargs)


def test_latest_checkpoint_wins_then_init_checkpoint_then_adapters(tmp_path, caplog):
  _, _, ckpt, weights = tiny_bert.write_google_dir(str(tmp_path / "base"))
  options = model_setup.ModelOptions(adapter={"size": 4}, init_checkpoint=ckpt)
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
  adapter_weights.save_adapter_weights(model, adapter_dir,
                                          {"labels": ["0", "1"], "global_step": 7})
  with_adapters = dict(init_checkpoint=ckpt, adapter_checkpoint=adapter_dir)
  restored, step = _model(model_setup.ModelOptions(adapter={"size": 4}, **with_adapters), out,
                          seed=3, adapter_metadata={"labels": ["0", "1"]})
  assert step == 7
  np.testing.assert_array_equal(restored(INPUTS).numpy(), expected)
  # Labels in another order, or recorded twice: refused by their one owner
  # (label_lists.check_recorded_labels), in one line naming the flag and both lists.
  with pytest.raises(errors.UserError) as e:
    _model(model_setup.ModelOptions(adapter={"size": 4}, **with_adapters), out,
           adapter_metadata={"labels": ["1", "0"]})
  assert str(e.value) == (
      f"--adapter_checkpoint={adapter_dir}: this run gives the labels ['1', '0'], but its "
      f"metadata has ['0', '1'] (label ids are positions): give this run the labels the "
      f"adapters were trained with, in that order (--labels of a tsv task), or adapters "
      f"trained with this run's")
  twice = str(tmp_path / "twice")
  adapter_weights.save_adapter_weights(model, twice, {"labels": ["0", "0"]})
  with pytest.raises(errors.UserError) as e:
    _model(model_setup.ModelOptions(adapter={"size": 4}, init_checkpoint=ckpt,
                                    adapter_checkpoint=twice), out,
           adapter_metadata={"labels": ["0", "1"]})
  assert str(e.value) == (f"--adapter_checkpoint={twice}: its metadata: label '0' is given "
                          f"twice in ['0', '0']: each label names one class")

  # A checkpoint in output_dir (as training writes it) wins over both flags.
  run_checkpoints.manager(model, out).save(checkpoint_number=12)
  with caplog.at_level("WARNING"):
    resumed, step = _model(model_setup.ModelOptions(adapter={"size": 4}, **with_adapters), out,
                           seed=5)
  assert step == 12
  np.testing.assert_array_equal(resumed(INPUTS).numpy(), expected)
  assert "wins over --init_checkpoint, --adapter_checkpoint" in caplog.text


def _checkpoint_variables(path):
  return [name for name, _ in tf.train.list_variables(path)]


def test_adapter_mode_checkpoints_hold_what_trains_over_a_checked_base(tmp_path, caplog):
  _, _, ckpt, _ = tiny_bert.write_google_dir(str(tmp_path / "base"))
  options = model_setup.ModelOptions(adapter={"size": 4}, init_checkpoint=ckpt)
  out = str(tmp_path / "out")
  model, _ = _model(options, out)
  for name, variable in model.tf1_variable_map().items():
    if variable.trainable:  # Stand-ins for trained values.
      variable.assign(variable + 0.25)
  expected = model(INPUTS).numpy()
  reference = model_setup.base_reference(model, options, out)
  trained = sorted(n for n, v in model.tf1_variable_map().items() if v.trainable)
  assert reference["variables"] == trained and reference["init_checkpoint"] == ckpt
  run_checkpoints.manager(model, out, reference=reference).save(checkpoint_number=3)

  # The checkpoint holds the trained variables and the reference, no encoder matrix.
  saved = _checkpoint_variables(run_checkpoints.latest(out))
  assert any("output_weights" in n for n in saved)
  assert any("adapters" in n for n in saved)
  assert not any("word_embeddings" in n or "query" in n for n in saved)

  # Eval-only without --init_checkpoint: the base comes from where the checkpoint says.
  with caplog.at_level("INFO", logger="absl"):
    restored, step = _model(model_setup.ModelOptions(adapter={"size": 4}), out, seed=7)
  assert step == 3
  assert "holds the trained variables only; loading its base from" in caplog.text
  np.testing.assert_array_equal(restored(INPUTS).numpy(), expected)

  # The same checkpoint as --init_checkpoint of another run (trained elsewhere).
  elsewhere, _ = _model(model_setup.ModelOptions(
      adapter={"size": 4}, init_checkpoint=run_checkpoints.latest(out)), str(tmp_path / "e"))
  np.testing.assert_array_equal(elsewhere(INPUTS).numpy(), expected)

  # Another base under those trained variables is refused, naming the recorded one.
  _, _, other, _ = tiny_bert.write_google_dir(str(tmp_path / "other"), seed=9)
  with pytest.raises(errors.UserError, match="holds only the trained variables of a model whose "
                                       "frozen weights came from --init_checkpoint="):
    _model(model_setup.ModelOptions(adapter={"size": 4}, init_checkpoint=other), out)


def test_full_fine_tuning_checkpoints_hold_the_whole_model(tmp_path):
  _, _, ckpt, _ = tiny_bert.write_google_dir(str(tmp_path / "base"))
  options = model_setup.ModelOptions(adapter={"size": 0}, init_checkpoint=ckpt)
  out = str(tmp_path / "out")
  model, _ = _model(options, out)
  assert model_setup.base_reference(model, options, out) is None
  run_checkpoints.manager(model, out).save(checkpoint_number=1)
  assert any("word_embeddings" in n for n in _checkpoint_variables(run_checkpoints.latest(out)))
