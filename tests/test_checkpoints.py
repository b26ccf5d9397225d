"""Checkpoints in (Google, adapter-bert, own) and adapter-only weights out and back."""

import logging as py_logging
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import checkpoint_io
from adapter_bert import errors
from adapter_bert.model import modeling
import numpy_bert
import tiny_bert
from adapter_bert.runtime import trainable
from adapter_bert.model.adapter_layers import AdapterConfig

CONFIG = modeling.BertConfig.from_dict(tiny_bert.TINY_CONFIG)


def _inputs():
  rng = np.random.default_rng(7)
  ids = rng.integers(0, 99, size=(2, 9)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 6:] = 0
  return {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}


def test_loads_google_checkpoint_and_logs_init_from_ckpt(tmp_path, caplog):
  _, _, ckpt, weights = tiny_bert.write_google_dir(
      str(tmp_path), extra={
          # Pre-training heads and TF1 bookkeeping that fine-tuning skips.
          "cls/predictions/output_bias": np.zeros(99, np.float32),
          "cls/seq_relationship/output_weights": np.zeros((2, 32), np.float32),
          "global_step": np.int64(5)})
  keras.utils.set_random_seed(0)
  model = modeling.BertClassifier(CONFIG, 2, AdapterConfig(size=4))
  trainable.set_trainable(model, trainable.TrainMode("adapters"))
  with caplog.at_level(py_logging.INFO):
    loaded = checkpoint_io.load_checkpoint(model, ckpt)
  names = model.tf1_variable_map()
  for name, value in weights.items():
    if name.startswith("bert/"):
      np.testing.assert_array_equal(names[name].numpy(), value)
  assert set(loaded) == {n for n in weights if n.startswith("bert/")}
  log = caplog.text
  assert ("name = bert/encoder/layer_0/attention/output/LayerNorm/gamma:0, shape = (32,), "
          "*INIT_FROM_CKPT*") in log
  # Fresh adapters and head are listed without the marker.
  assert "name = bert/encoder/layer_1/output/adapters/weights1:0, shape = (32, 4)\n" in log
  assert "name = output_weights:0, shape = (2, 32)\n" in log
  assert "not used by the model" not in log


def test_missing_encoder_variable_and_shape_mismatch_are_clear_errors(tmp_path):
  _, _, ckpt, weights = tiny_bert.write_google_dir(str(tmp_path / "a"))
  del weights["bert/encoder/layer_1/intermediate/dense/kernel"]
  partial = str(tmp_path / "partial" / "model.ckpt")
  checkpoint_io.write_tf1_checkpoint(partial, weights)
  model = modeling.BertEncoder(CONFIG)
  with pytest.raises(errors.UserError, match="lacks 1 encoder variable.*layer_1/intermediate/dense/kernel"):
    checkpoint_io.load_checkpoint(model, partial)

  other = modeling.BertConfig.from_dict(dict(tiny_bert.TINY_CONFIG, max_position_embeddings=32))
  with pytest.raises(errors.UserError, match=r"position_embeddings has shape \(64, 32\) in the "
                                       r"checkpoint but \(32, 32\) in the model"):
    checkpoint_io.load_checkpoint(modeling.BertEncoder(other), ckpt)
  with pytest.raises(errors.UserError, match="checkpoint not found"):
    checkpoint_io.load_checkpoint(model, str(tmp_path / "nope.ckpt"))


def test_original_adapter_bert_fine_tuned_checkpoint(tmp_path):
  """Adapters, output_weights/bias, Adam slots and global_step of the original."""
  shapes = tiny_bert.google_variable_shapes(tiny_bert.TINY_CONFIG, adapter_size=6)
  shapes.update({"output_weights": (3, 32), "output_bias": (3,)})
  weights = tiny_bert.random_weights(shapes, seed=11)
  slots = {f"{n}/adam_{s}": np.ones_like(v) for n, v in weights.items() for s in "mv"}
  ckpt = str(tmp_path / "model.ckpt-300")
  checkpoint_io.write_tf1_checkpoint(ckpt, {**weights, **slots, "global_step": np.int64(300)})
  model = modeling.BertClassifier(CONFIG, 3, AdapterConfig(size=6))
  checkpoint_io.load_checkpoint(model, ckpt)
  inputs = _inputs()
  _, pooled = numpy_bert.bert_forward(weights, 4, **inputs)
  expected = pooled @ weights["output_weights"].T + weights["output_bias"]
  np.testing.assert_allclose(model(inputs).numpy(), expected, atol=3e-5)


def test_squad_head_names(tmp_path):
  _, _, ckpt, _ = tiny_bert.write_google_dir(str(tmp_path), extra={
      "cls/squad/output_weights": np.full((2, 32), 0.5, np.float32),
      "cls/squad/output_bias": np.array([1.0, -1.0], np.float32)})
  model = modeling.BertSpanLabeler(CONFIG)
  checkpoint_io.load_checkpoint(model, ckpt)
  np.testing.assert_array_equal(model.output_bias.numpy(), [1.0, -1.0])


def test_own_object_based_checkpoint_from_a_directory(tmp_path):
  keras.utils.set_random_seed(1)
  model = modeling.BertClassifier(CONFIG, 2, AdapterConfig(size=4))
  model.ensure_built()
  manager = tf.train.CheckpointManager(
      tf.train.Checkpoint(model=checkpoint_io.trackable_variables(model)), str(tmp_path), 5)
  manager.save()
  keras.utils.set_random_seed(2)
  other = modeling.BertClassifier(CONFIG, 2, AdapterConfig(size=4))
  checkpoint_io.load_checkpoint(other, str(tmp_path))
  inputs = _inputs()
  np.testing.assert_array_equal(model(inputs).numpy(), other(inputs).numpy())
  mismatched = modeling.BertClassifier(CONFIG, 5, AdapterConfig(size=4))
  with pytest.raises(errors.UserError, match="does not fit the model"):
    checkpoint_io.load_checkpoint(mismatched, str(tmp_path))


def _trained_model(ckpt, mode="adapters", seed=0):
  keras.utils.set_random_seed(seed)
  model = modeling.BertClassifier(CONFIG, 2, AdapterConfig(size=4))
  checkpoint_io.load_checkpoint(model, ckpt)
  trainable.set_trainable(model, trainable.TrainMode.parse(mode))
  return model


def _train(model, steps=3):
  from adapter_bert.model import optimization
  optimizer = optimization.create_optimizer(1e-2, num_train_steps=10, num_warmup_steps=0)
  inputs, labels = _inputs(), np.array([0, 1])
  for _ in range(steps):
    with tf.GradientTape() as tape:
      logits = model(inputs, training=True)
      loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
  return optimizer


@pytest.mark.parametrize("mode", ["adapters", "full", "layer_norm", "head", "top_layers:1"])
def test_only_the_chosen_variables_change_in_training(tmp_path, mode):
  _, _, ckpt, _ = tiny_bert.write_google_dir(str(tmp_path))
  model = _trained_model(ckpt, mode)
  before = {n: v.numpy().copy() for n, v in model.tf1_variable_map().items()}
  optimizer = _train(model)
  expect_change = {
      "adapters": lambda n: "adapters" in n or "LayerNorm" in n or not n.startswith("bert/"),
      "full": lambda n: True,
      "layer_norm": lambda n: "LayerNorm" in n or not n.startswith("bert/"),
      "head": lambda n: not n.startswith("bert/"),
      "top_layers:1": lambda n: "layer_1/" in n or "pooler" in n or not n.startswith("bert/"),
  }[mode]
  for name, variable in model.tf1_variable_map().items():
    changed = not np.array_equal(before[name], variable.numpy())
    if mode == "full" and "adapters/biases" in name:
      continue  # Zero-initialised and may stay tiny; covered by other modes.
    assert changed == expect_change(name), (name, changed)
  # Optimizer state exists only for what trains.
  # The step counter, then m and v for each trainable variable (the learning
  # rate is a schedule, not a variable).
  assert len(optimizer.variables) == 1 + 2 * len(model.trainable_variables)


def test_parameter_counts_of_bert_base_with_mrpc_head(caplog, zero_initializers):  # pylint: disable=unused-argument
  """The adapter-bert numbers for BERT-base, adapter size 64, two labels (what is
  counted and saved are the weights' shapes: zero_initializers)."""
  base = dict(attention_probs_dropout_prob=0.1, hidden_act="gelu", hidden_dropout_prob=0.1,
              hidden_size=768, initializer_range=0.02, intermediate_size=3072,
              max_position_embeddings=512, num_attention_heads=12, num_hidden_layers=12,
              type_vocab_size=2, vocab_size=30522)
  model = modeling.BertClassifier(modeling.BertConfig.from_dict(base), 2, AdapterConfig(64))
  trainable.set_trainable(model, trainable.TrainMode("adapters"))
  with caplog.at_level(py_logging.INFO):
    counts = trainable.log_parameter_counts(model)
  assert counts == {"total": 111863042, "adapter": 2379264, "trainable": 2419202}
  assert "***** Total Parameters = 111863042 *****" in caplog.text
  assert "***** Adapter Parameters = 2379264 *****" in caplog.text
  assert "***** Total Trainable Parameters = 2419202 *****" in caplog.text
  assert sum(int(np.prod(v.shape)) for v in model.trainable_variables) == 2419202
  # The adapter-only file of this model holds those 2.4M floats, not 110M.
  path = adapter_weights.save_adapter_weights(model, "ram://bert_base/adapters")
  assert tf.io.gfile.stat(path).length < 2419202 * 4 + 100_000


def test_train_mode_parsing():
  assert trainable.TrainMode.parse("top_layers:3") == trainable.TrainMode("top_layers", 3)
  assert str(trainable.TrainMode.parse("top_layers:3")) == "top_layers:3"
  for bad in ("top_layers", "top_layers:x", "everything", "head:2"):
    with pytest.raises(ValueError):
      trainable.TrainMode.parse(bad)
  with pytest.raises(ValueError, match="adapter_size > 0"):
    trainable.set_trainable(modeling.BertClassifier(CONFIG, 2), trainable.TrainMode("adapters"))


# What save_adapter_weights leaves in its output directory, and nothing else.
_SAVED_FILES = ["adapter_config.json", "adapter_weights.safetensors"]


def test_adapter_only_weights_restore_exactly_and_refuse_another_base(tmp_path):
  _, _, ckpt, _ = tiny_bert.write_google_dir(str(tmp_path / "base"))
  model = _trained_model(ckpt)
  _train(model)
  inputs = _inputs()
  expected = model(inputs).numpy()
  out = str(tmp_path / "adapter_model")
  adapter_weights.save_adapter_weights(model, out, metadata={"task": "mrpc"})
  header = adapter_weights.read_adapter_header(out)
  assert header["metadata"] == {"task": "mrpc"}
  assert all("adapters" in n or "LayerNorm" in n or not n.startswith("bert/")
             for n in header["variables"])
  assert sorted(os.listdir(out)) == _SAVED_FILES

  fresh = _trained_model(ckpt, seed=5)  # Same base, other random adapters/head.
  assert not np.array_equal(fresh(inputs).numpy(), expected)
  adapter_weights.load_adapter_weights(fresh, out)
  np.testing.assert_array_equal(fresh(inputs).numpy(), expected)

  _, _, other_ckpt, _ = tiny_bert.write_google_dir(str(tmp_path / "other"), seed=9)
  wrong = _trained_model(other_ckpt)
  with pytest.raises(errors.UserError, match="trained on another base model"):
    adapter_weights.load_adapter_weights(wrong, out)
  bigger = modeling.BertClassifier(CONFIG, 2, AdapterConfig(size=8))
  with pytest.raises(errors.UserError, match="adapter config"):
    adapter_weights.load_adapter_weights(bigger, out)


def test_adapter_weights_on_ram_filesystem(tmp_path):
  _, _, ckpt, _ = tiny_bert.write_google_dir(str(tmp_path))
  model = _trained_model(ckpt)
  adapter_weights.save_adapter_weights(model, "ram://adapters/task")
  # Exactly the two outputs, and no temporary (`.NAME.tmp-<random>`) beside the directory.
  assert sorted(tf.io.gfile.listdir("ram://adapters/task")) == _SAVED_FILES
  assert [n.rstrip("/") for n in tf.io.gfile.listdir("ram://adapters")] == ["task"]
  fresh = _trained_model(ckpt, seed=3)
  adapter_weights.load_adapter_weights(fresh, "ram://adapters/task")
  inputs = _inputs()
  np.testing.assert_array_equal(fresh(inputs).numpy(), model(inputs).numpy())


class _FailingWrite:
  """tf.io.gfile.GFile that, for the weights file in the temporary directory, writes
  half and fails."""

  real = tf.io.gfile.GFile
  temporaries = []

  def __init__(self, path, mode="r"):
    self._file = self.real(path, mode)
    parent = os.path.dirname(path)
    self._fail = (os.path.basename(path) == "adapter_weights.safetensors" and
                  os.path.basename(parent).startswith(".adapter_model.tmp-"))
    if self._fail:
      self.temporaries.append(parent)

  def write(self, data):
    if self._fail:
      self._file.write(data[:len(data) // 2])
      self._file.flush()
      raise tf.errors.ResourceExhaustedError(None, None, "disk full (test)")
    return self._file.write(data)

  def __getattr__(self, name):
    return getattr(self._file, name)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    return self._file.__exit__(*exc)


@pytest.mark.parametrize("fail_at", ["write", "rename"])
def test_failed_adapter_weights_save_keeps_the_old_files_and_no_temporary(
    tmp_path, monkeypatch, fail_at):
  _, _, ckpt, _ = tiny_bert.write_google_dir(str(tmp_path / "base"))
  out = str(tmp_path / "adapter_model")
  model = _trained_model(ckpt)
  adapter_weights.save_adapter_weights(model, out, metadata={"run": 1})
  assert sorted(os.listdir(out)) == _SAVED_FILES
  before = {n: open(os.path.join(out, n), "rb").read() for n in _SAVED_FILES}

  other = _trained_model(ckpt, seed=3)  # Other adapters: a full save would change the bytes.
  _FailingWrite.temporaries = []
  if fail_at == "write":
    monkeypatch.setattr(tf.io.gfile, "GFile", _FailingWrite)
  else:  # The temporary directory is complete; moving it into place fails.
    def failing_rename(src, dst, overwrite=False):
      assert os.path.exists(src)
      raise OSError("rename failed (test)")
    monkeypatch.setattr(tf.io.gfile, "rename", failing_rename)
  # The environment refused the write: one line naming the directory (errors.md).
  with pytest.raises(errors.UserError, match=r"adapter_model: cannot write the adapter "
                                             r"weights: (disk full|rename failed) \(test\)"):
    adapter_weights.save_adapter_weights(other, out, metadata={"run": 2})
  monkeypatch.undo()

  # Both files went to a `.adapter_model.tmp-<random>` sibling, which is gone again.
  if fail_at == "write":
    assert len(_FailingWrite.temporaries) == 1
    assert os.path.dirname(_FailingWrite.temporaries[0]) == str(tmp_path)
  assert sorted(n for n in os.listdir(tmp_path) if "adapter_model" in n) == ["adapter_model"]
  assert sorted(os.listdir(out)) == _SAVED_FILES
  assert {n: open(os.path.join(out, n), "rb").read() for n in _SAVED_FILES} == before
  assert adapter_weights.read_adapter_header(out)["metadata"] == {"run": 1}
  adapter_weights.save_adapter_weights(other, out, metadata={"run": 2})
  assert open(os.path.join(out, _SAVED_FILES[1]), "rb").read() != before[_SAVED_FILES[1]]
  assert sorted(os.listdir(out)) == _SAVED_FILES


def test_google_checkpoint_on_ram_filesystem(tmp_path):
  """ram:// stands in for gs://: prefixes there also look like directories."""
  _, _, ckpt, weights = tiny_bert.write_google_dir(str(tmp_path))
  checkpoint_io.write_tf1_checkpoint("ram://google/bert_model.ckpt", weights)
  model = modeling.BertEncoder(CONFIG)
  checkpoint_io.load_checkpoint(model, "ram://google/bert_model.ckpt")
  np.testing.assert_array_equal(
      model.tf1_variable_map()["bert/pooler/dense/kernel"].numpy(),
      weights["bert/pooler/dense/kernel"])


def test_span_labeler_never_trains_the_pooler_it_does_not_use():
  model = modeling.BertSpanLabeler(CONFIG)
  trainable.set_trainable(model, trainable.TrainMode("full"))
  frozen = [n for n, v in model.tf1_variable_map().items() if not v.trainable]
  assert frozen == ["bert/pooler/dense/kernel", "bert/pooler/dense/bias"]


def test_in_memory_arrays_load_with_the_checks_of_a_checkpoint(tmp_path):
  """load_arrays (e.g. a TF Hub encoder read into memory) and load_checkpoint of the
  same weights fill the model alike, and refuse the same mistakes alike."""
  _, _, ckpt, weights = tiny_bert.write_google_dir(str(tmp_path))
  from_file, from_arrays = (modeling.BertEncoder(CONFIG) for _ in range(2))
  checkpoint_io.load_checkpoint(from_file, ckpt)
  loaded = checkpoint_io.load_arrays(from_arrays, weights, "test arrays")
  assert set(loaded) == set(weights)
  inputs = _inputs()
  np.testing.assert_array_equal(from_arrays(inputs)["sequence_output"].numpy(),
                                from_file(inputs)["sequence_output"].numpy())
  partial = {k: v for k, v in weights.items() if "layer_1/output/dense" not in k}
  with pytest.raises(errors.UserError, match="test arrays lacks 2 encoder variable"):
    checkpoint_io.load_arrays(modeling.BertEncoder(CONFIG), partial, "test arrays")
  other = modeling.BertConfig.from_dict(dict(tiny_bert.TINY_CONFIG, max_position_embeddings=32))
  with pytest.raises(errors.UserError, match=r"test arrays: variable bert/embeddings/position_"
                                       r"embeddings has shape \(64, 32\)"):
    checkpoint_io.load_arrays(modeling.BertEncoder(other), weights, "test arrays")
