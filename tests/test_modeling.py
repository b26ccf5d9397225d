"""The Keras BERT against Model Garden's BertEncoder and an independent NumPy pass.

Its ops (GELU, LayerNorm, attention, dropout): test_modeling_ops.py.
"""

import json
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from adapter_bert.checkpoints import checkpoint_io
from adapter_bert import errors
from adapter_bert.model import modeling
from model_garden import model_garden_outputs
import numpy_bert
import tiny_bert
from adapter_bert.model.adapter_layers import Adapter, AdapterConfig, get_activation

NUM_HEADS = tiny_bert.TINY_CONFIG["num_attention_heads"]


def _inputs(seed=1, batch=3, seq=11, vocab=99):
  rng = np.random.default_rng(seed)
  ids = rng.integers(0, vocab, size=(batch, seq)).astype(np.int32)
  mask = np.ones((batch, seq), np.int32)
  mask[1, 7:] = 0  # Padding must be masked out of attention.
  mask[2, 4:] = 0
  segments = np.zeros((batch, seq), np.int32)
  segments[:, 5:] = 1
  return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}


@pytest.fixture(scope="module")
def google_dir(tmp_path_factory):
  return tiny_bert.write_google_dir(str(tmp_path_factory.mktemp("google")))


def _encoder(config_path, ckpt, adapter_config=modeling.NO_ADAPTERS):
  encoder = modeling.BertEncoder(modeling.BertConfig.from_json_file(config_path),
                                 adapter_config)
  checkpoint_io.load_checkpoint(encoder, ckpt)
  return encoder


def test_matches_model_garden_bert_encoder(google_dir, tmp_path):
  config_path, _, ckpt, _ = google_dir
  inputs = _inputs()
  ours = _encoder(config_path, ckpt)(inputs, training=False)
  mg_seq, mg_pooled = model_garden_outputs(config_path, ckpt, inputs, tmp_path)
  np.testing.assert_allclose(ours["sequence_output"].numpy(), mg_seq, atol=1e-5, rtol=0)
  np.testing.assert_allclose(ours["pooled_output"].numpy(), mg_pooled, atol=1e-5, rtol=0)
  assert len(ours["encoder_outputs"]) == 2
  np.testing.assert_array_equal(ours["encoder_outputs"][-1], ours["sequence_output"])


def test_matches_numpy_forward_with_adapters(tmp_path):
  """Adapter placement against an independent NumPy pass (numpy_bert.py) of
  google-research/adapter-bert modeling.py `transformer_model` / `feedforward_adapter`."""
  config_path, _, ckpt, weights = tiny_bert.write_google_dir(
      str(tmp_path), adapter_size=5, seed=3)
  # Large adapter weights (random_weights uses stddev 0.2) so misplacement shows.
  encoder = _encoder(config_path, ckpt, AdapterConfig(size=5))
  inputs = _inputs()
  ours = encoder(inputs, training=False)
  seq, pooled = numpy_bert.bert_forward(weights, NUM_HEADS, **inputs)
  np.testing.assert_allclose(ours["sequence_output"].numpy(), seq, atol=2e-5)
  np.testing.assert_allclose(ours["pooled_output"].numpy(), pooled, atol=2e-5)
  plain, _ = numpy_bert.bert_forward(
      {k: v for k, v in weights.items() if "adapters" not in k}, NUM_HEADS, **inputs)
  assert np.abs(seq - plain).max() > 0.1  # The adapters do change the result.


def test_fresh_adapters_are_near_identity_and_zeroed_up_projection_is_identity(google_dir):
  config_path, _, ckpt, _ = google_dir
  inputs = _inputs()
  plain = _encoder(config_path, ckpt)(inputs, training=False)["sequence_output"].numpy()
  keras.utils.set_random_seed(0)
  with_adapters = _encoder(config_path, ckpt, AdapterConfig(size=8))
  fresh = with_adapters(inputs, training=False)["sequence_output"].numpy()
  diff = np.abs(fresh - plain).max()
  assert 0 < diff < 1e-3, diff
  for layer in with_adapters.transformer_layers:
    for adapter in (layer.attention_adapters, layer.output_adapters):
      adapter.weights2.assign(tf.zeros_like(adapter.weights2))
  zeroed = with_adapters(inputs, training=False)["sequence_output"].numpy()
  np.testing.assert_array_equal(zeroed, plain)


def test_adapter_layer_formula_and_serialization():
  keras.utils.set_random_seed(0)
  layer = Adapter(size=3, init_scale=0.5)
  x = np.random.default_rng(0).normal(size=(2, 4, 6)).astype(np.float32)
  y = layer(x).numpy()
  w = {"a/" + v.name: v.numpy() for v in layer.weights}
  np.testing.assert_allclose(y, numpy_bert.adapter(x.astype(np.float64), w, "a/"), atol=1e-5)
  clone = Adapter.from_config(layer.get_config())
  assert clone.get_config() == layer.get_config()
  # The paper's init: truncated normal with stddev = init_scale, zero biases.
  big = Adapter(size=64, init_scale=1e-3)
  big.build((None, 768))
  w1 = big.weights1.numpy()
  assert np.abs(w1).max() <= 2e-3 and 0.7e-3 < w1.std() < 1e-3
  assert not big.biases1.numpy().any() and not big.biases2.numpy().any()


def test_weights_passed_to_the_call_are_a_models_own_per_example(google_dir):
  """One plain encoder computes every model of the same base: a model's
  LayerNorms and adapters passed as task_weights give its output; stacked with
  a batch axis, each example gets what its own model gives it. (Stacking
  models of different adapter configs: serving/stacked_tasks.py's tests.)"""
  config_path, _, ckpt, _ = google_dir
  plain = _encoder(config_path, ckpt)
  inputs = _inputs(batch=3)
  configs = [AdapterConfig(size=5), AdapterConfig(size=3, placement="attention"),
             AdapterConfig(size=4, layer_norm=True), modeling.NO_ADAPTERS]
  for adapter_config in configs:
    models = []
    for seed in range(3):  # Trained adapters and LayerNorms: random, large.
      model = _encoder(config_path, ckpt, adapter_config)
      rng = np.random.default_rng(seed)
      for name, v in model.tf1_variable_map().items():
        if modeling.variable_role(name) in ("adapter", "layer_norm"):
          v.assign(v + rng.normal(0, 0.3, v.shape).astype(np.float32))
      models.append(model)
    want = [m(inputs)["pooled_output"].numpy() for m in models]
    shared = plain(inputs, task_weights=models[0].own_task_weights())["pooled_output"]
    np.testing.assert_allclose(shared.numpy(), want[0], atol=1e-5)
    stack = lambda *values: tf.stack([tf.convert_to_tensor(v) for v in values])
    per_example = tf.nest.map_structure(stack, *[m.own_task_weights() for m in models])
    got = plain(inputs, task_weights=per_example)["pooled_output"].numpy()
    for i in range(3):
      np.testing.assert_allclose(got[i], want[i][i], atol=1e-5)
    assert np.abs(want[0] - want[1]).max() > 1e-2  # The weights do matter.


def test_adapter_config_validation():
  assert AdapterConfig().to_dict() == {"size": 64, "init_scale": 1e-3, "activation": "gelu"}
  assert AdapterConfig.from_dict({"size": 8}).size == 8
  for bad in ({"size": -1}, {"size": 2.5}, {"init_scale": 0.0}, {"activation": "nope"},
              {"unknown": 1}):
    with pytest.raises(ValueError):
      AdapterConfig.from_dict(bad)


def test_dropout_only_in_training(google_dir):
  config_path, _, ckpt, _ = google_dir
  encoder = _encoder(config_path, ckpt)
  inputs = _inputs()
  a = encoder(inputs, training=False)["sequence_output"].numpy()
  b = encoder(inputs, training=False)["sequence_output"].numpy()
  c = encoder(inputs, training=True)["sequence_output"].numpy()
  np.testing.assert_array_equal(a, b)
  assert np.abs(a - c).max() > 1e-3


def test_bert_config_round_trip(tmp_path):
  original = dict(tiny_bert.TINY_CONFIG, directionality="bidi")
  path = str(tmp_path / "bert_config.json")
  with open(path, "w") as f:
    f.write(json.dumps(original, indent=2, sort_keys=True) + "\n")
  config = modeling.BertConfig.from_json_file(path)
  assert config.hidden_size == 32 and config.extra == {"directionality": "bidi"}
  with open(path) as f:
    assert config.to_json_string() == f.read()
  with pytest.raises(errors.UserError, match=r"bad\.json:1: malformed JSON at column 3"):
    (tmp_path / "bad.json").write_text("{ nope")
    modeling.BertConfig.from_json_file(str(tmp_path / "bad.json"))


def test_task_heads_have_original_shapes_and_formulas(google_dir):
  config_path, _, ckpt, _ = google_dir
  config = modeling.BertConfig.from_json_file(config_path)
  inputs = _inputs()
  classifier = modeling.BertClassifier(config, num_labels=3)
  checkpoint_io.load_checkpoint(classifier, ckpt)
  names = classifier.tf1_variable_map()
  assert names["output_weights"].shape == (3, 32) and names["output_bias"].shape == (3,)
  pooled = classifier.bert(inputs)["pooled_output"].numpy()
  expected = pooled @ names["output_weights"].numpy().T + names["output_bias"].numpy()
  np.testing.assert_allclose(classifier(inputs).numpy(), expected, atol=1e-5)

  span = modeling.BertSpanLabeler(config)
  checkpoint_io.load_checkpoint(span, ckpt)
  names = span.tf1_variable_map()
  assert names["cls/squad/output_weights"].shape == (2, 32)
  seq = span.bert(inputs)["sequence_output"].numpy()
  logits = seq @ names["cls/squad/output_weights"].numpy().T + names["cls/squad/output_bias"].numpy()
  out = span(inputs)
  np.testing.assert_allclose(out["start_logits"].numpy(), logits[..., 0], atol=1e-5)
  np.testing.assert_allclose(out["end_logits"].numpy(), logits[..., 1], atol=1e-5)


def test_classifier_head_config_equation_and_stacked_form():
  """ClassifierHead: get_config rebuilds it; its logits are pooled W^T + b (NumPy),
  with a task axis the batch's task's rows; classifier_logits on each example's
  gathered rows (serving's form) gives each example its own task's head."""
  head = modeling.ClassifierHead(3, num_tasks=2, dropout_rate=0.2, initializer_stddev=0.5,
                                 name="heads")
  config = head.get_config()
  assert {k: config[k] for k in ("num_labels", "num_tasks", "dropout_rate",
                                 "initializer_stddev", "name")} == {
      "num_labels": 3, "num_tasks": 2, "dropout_rate": 0.2, "initializer_stddev": 0.5,
      "name": "heads"}
  assert keras.saving.get_registered_name(modeling.ClassifierHead) == \
      "adapter_bert>ClassifierHead"
  clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(head))
  assert clone.get_config() == config
  head.build((None, 5))
  names = head.tf1_variable_names()
  assert {n: tuple(v.shape) for n, v in names.items()} == {
      "output_weights": (2, 3, 5), "output_bias": (2, 3)}
  rng = np.random.default_rng(0)
  w, b = rng.normal(size=(2, 3, 5)).astype(np.float32), rng.normal(size=(2, 3)).astype(np.float32)
  names["output_weights"].assign(w)
  names["output_bias"].assign(b)
  pooled = rng.normal(size=(4, 5)).astype(np.float32)
  for task in (0, 1):
    np.testing.assert_allclose(head(pooled, task=tf.constant(task)).numpy(),
                               pooled @ w[task].T + b[task], rtol=1e-5, atol=1e-5)
  tasks = np.array([1, 0, 0, 1])
  mixed = modeling.classifier_logits(pooled, tf.gather(w, tasks), tf.gather(b, tasks))
  np.testing.assert_allclose(mixed.numpy(), np.einsum("bh,bch->bc", pooled, w[tasks]) + b[tasks],
                             rtol=1e-5, atol=1e-5)
  # Without a task axis: no task; dropout only when training.
  single = modeling.ClassifierHead(2)
  assert single(pooled).shape == (4, 2) and single.get_config()["num_tasks"] is None
  np.testing.assert_array_equal(single(pooled).numpy(), single(pooled, training=False).numpy())


def test_classifier_head_weights_lead_and_its_seed_comes_last():
  """As when the head's weights were the model's own: they lead the trainable
  variables (the optimizer's slot order in training checkpoints), and its
  dropout's seed state comes after the encoder's (the checkpoints' rng order)."""
  config = modeling.BertConfig.from_dict(tiny_bert.TINY_CONFIG)
  model = modeling.BertClassifier(config, 2, AdapterConfig(size=4))
  model.ensure_built()
  first = model.trainable_variables[:2]
  assert first[0] is model.head.output_weights and first[1] is model.head.output_bias
  seeds = [v for v in model.non_trainable_variables if v.name == "seed_generator_state"]
  assert len(seeds) == 2 * config.num_hidden_layers + 2
  assert seeds[-1] is model.head.dropout.seed_generator.state


def test_building_a_model_calls_each_block_once(monkeypatch):
  """The first call builds the encoder and its blocks: Keras' default build
  would first trace each one's call() symbolically, nested (3 calls a block)."""
  calls = []
  block_call = modeling.TransformerBlock.call

  def counted(self, *args, **kwargs):
    calls.append(self.name)
    return block_call(self, *args, **kwargs)

  monkeypatch.setattr(modeling.TransformerBlock, "call", counted)
  config = modeling.BertConfig.from_dict(tiny_bert.TINY_CONFIG)
  model = modeling.BertClassifier(config, 2, AdapterConfig(size=4))
  model.ensure_built()
  assert calls == [f"layer_{i}" for i in range(config.num_hidden_layers)]
  assert len(model.weights) == len(model.tf1_variable_map())


def test_variable_names_are_the_original_checkpoint_names():
  config = modeling.BertConfig.from_dict(tiny_bert.TINY_CONFIG)
  model = modeling.BertClassifier(config, 2, AdapterConfig(size=4))
  expected = tiny_bert.google_variable_shapes(tiny_bert.TINY_CONFIG, adapter_size=4)
  expected.update({"output_weights": (2, 32), "output_bias": (2,)})
  got = {n: tuple(v.shape) for n, v in model.tf1_variable_map().items()}
  assert got == expected
  assert len(model.weights) == len(got)  # The table covers every variable.


def test_variable_role_of_every_tf1_name():
  config = modeling.BertConfig.from_dict(tiny_bert.TINY_CONFIG)
  names = modeling.BertSpanLabeler(config, AdapterConfig(size=4)).tf1_variable_map()
  roles = {}
  for name in names:
    roles.setdefault(modeling.variable_role(name), set()).add(name)
  assert roles["head"] == {"cls/squad/output_weights", "cls/squad/output_bias"}
  assert roles["pooler"] == {"bert/pooler/dense/kernel", "bert/pooler/dense/bias"}
  assert roles["embeddings"] == {"bert/embeddings/word_embeddings",
                                 "bert/embeddings/token_type_embeddings",
                                 "bert/embeddings/position_embeddings"}
  # Embedding and per-layer LayerNorms (2 layers x 2), gamma and beta each.
  assert len(roles["layer_norm"]) == 10
  assert all("LayerNorm/" in n for n in roles["layer_norm"])
  assert len(roles["adapter"]) == 16 and all("/adapters/" in n for n in roles["adapter"])
  assert len(roles["layer"]) == 24  # q, k, v, attention output, intermediate, output.
  assert all(n.startswith("bert/encoder/layer_") for n in roles["layer"])

def test_one_activation_table_for_hidden_act_and_adapters():
  x = np.linspace(-4.0, 4.0, 17).astype(np.float32)
  # BERT's tanh GELU, not the erf GELU (they differ by up to ~5e-4).
  np.testing.assert_allclose(get_activation("gelu")(x), numpy_bert.gelu(x.astype(np.float64)),
                             atol=1e-6)
  np.testing.assert_array_equal(get_activation("relu")(x), np.maximum(x, 0.0))
  np.testing.assert_allclose(get_activation("tanh")(x), np.tanh(x), atol=1e-6)
  np.testing.assert_array_equal(get_activation("linear")(x), x)
  # AdapterHub's non-linearities (PyTorch's definitions).
  x64 = x.astype(np.float64)
  np.testing.assert_allclose(get_activation("swish")(x), x64 / (1.0 + np.exp(-x64)), atol=1e-6)
  np.testing.assert_allclose(get_activation("gelu_erf")(x),
                             0.5 * x64 * (1.0 + np.vectorize(math.erf)(x64 / np.sqrt(2.0))),
                             atol=1e-6)
  np.testing.assert_allclose(get_activation("leaky_relu")(x), np.where(x > 0, x, 0.01 * x),
                             atol=1e-7)
  with pytest.raises(ValueError, match=r"'mish'.*'gelu', 'relu', 'tanh', 'linear', 'swish'"):
    get_activation("mish")
  with pytest.raises(ValueError, match="mish"):
    AdapterConfig(activation="mish")
  mish = modeling.BertConfig.from_dict(dict(tiny_bert.TINY_CONFIG, hidden_act="mish"))
  with pytest.raises(ValueError, match="mish"):
    modeling.TransformerBlock(mish, modeling.NO_ADAPTERS)
  relu = modeling.BertConfig.from_dict(dict(tiny_bert.TINY_CONFIG, hidden_act="relu"))
  block = modeling.TransformerBlock(relu, AdapterConfig(size=2, activation="tanh"))
  assert block.intermediate.activation is get_activation("relu")
  adapter = block.output_adapters
  x = np.random.default_rng(0).normal(size=(3, relu.hidden_size)).astype(np.float32)
  adapter.build(x.shape)
  w1, b1, w2, b2 = (v.numpy() for v in (adapter.weights1, adapter.biases1, adapter.weights2,
                                          adapter.biases2))
  np.testing.assert_allclose(adapter(x), x + np.tanh(x @ w1 + b1) @ w2 + b2, atol=1e-6)


# Serialization. A config key the original does not know and a non-default adapter
# activation must both survive get_config -> from_config.
_SERIAL_CONFIG = dict(tiny_bert.TINY_CONFIG, directionality="bidi")
_SERIAL_ADAPTERS = AdapterConfig(size=4, init_scale=0.01, activation="relu")


def _flat(outputs):
  return [np.asarray(t) for t in tf.nest.flatten(outputs)]


def _serial_case(name):
  """(a fresh layer or model, a function of it returning its outputs) for `name`."""
  config = modeling.BertConfig.from_dict(_SERIAL_CONFIG)
  inputs = _inputs()
  mask = inputs["input_mask"][:, None, None, :].astype(np.float32)
  x = np.random.default_rng(2).normal(size=(3, 11, 32)).astype(np.float32)
  run_model = lambda m: _flat(m(inputs, training=False))
  return {
      "BertEmbeddings": (
          lambda: modeling.BertEmbeddings(config),
          lambda m: _flat(m(inputs["input_ids"], inputs["segment_ids"], training=False))),
      "TransformerBlock": (
          lambda: modeling.TransformerBlock(config, _SERIAL_ADAPTERS, name="layer_0"),
          lambda m: _flat(m(x, (1.0 - mask) * -10000.0, training=False))),
      "BertEncoder": (lambda: modeling.BertEncoder(config, _SERIAL_ADAPTERS), run_model),
      "BertClassifier": (
          lambda: modeling.BertClassifier(config, 3, _SERIAL_ADAPTERS), run_model),
      "BertSpanLabeler": (
          lambda: modeling.BertSpanLabeler(config, _SERIAL_ADAPTERS), run_model),
  }[name]


def _randomize(layer, seed=5):
  """Large random weights (LayerNorm gammas near 1) so that any mismatch shows."""
  values = tiny_bert.random_weights({v.path: tuple(v.shape) for v in layer.weights}, seed)
  for v in layer.weights:
    v.assign(values[v.path])


@pytest.mark.parametrize("name", ["BertEmbeddings", "TransformerBlock", "BertEncoder",
                                  "BertClassifier", "BertSpanLabeler"])
def test_from_config_rebuilds_the_same_layer(name):
  make, run = _serial_case(name)
  keras.utils.set_random_seed(0)
  layer = make()
  run(layer)
  _randomize(layer)
  expected = run(layer)
  config = layer.get_config()
  json.dumps(config)  # Plain JSON: BertConfig and AdapterConfig as dicts.
  assert config["config"] == _SERIAL_CONFIG
  if "adapter_config" in config:
    assert config["adapter_config"] == _SERIAL_ADAPTERS.to_dict()

  cls = type(layer)
  assert keras.saving.get_registered_name(cls) == f"adapter_bert>{name}"
  for clone in (cls.from_config(config),
                keras.saving.deserialize_keras_object(
                    keras.saving.serialize_keras_object(layer))):
    assert type(clone) is cls and clone.get_config() == config
    assert clone.config == layer.config
    assert getattr(clone, "adapter_config", None) == getattr(layer, "adapter_config", None)
    fresh = run(clone)  # Builds the clone, with its own initial weights.
    assert max(np.abs(a - b).max() for a, b in zip(fresh, expected)) > 1e-3
    assert [(v.path, v.shape) for v in clone.weights] == [
        (v.path, v.shape) for v in layer.weights]
    clone.set_weights(layer.get_weights())
    for got, want in zip(run(clone), expected):
      np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", ["BertClassifier", "BertSpanLabeler"])
def test_keras_file_round_trip(name, tmp_path):
  make, run = _serial_case(name)
  keras.utils.set_random_seed(0)
  model = make()
  run(model)
  _randomize(model)
  expected = run(model)
  path = str(tmp_path / "model.keras")
  model.save(path)
  loaded = keras.saving.load_model(path)
  assert type(loaded) is type(model) and loaded.get_config() == model.get_config()
  for got, want in zip(run(loaded), expected):
    np.testing.assert_array_equal(got, want)
  # Same TF1 names, values and Keras paths (weight decay is decided on paths).
  names, loaded_names = model.tf1_variable_map(), loaded.tf1_variable_map()
  assert list(loaded_names) == list(names)
  for n, v in names.items():
    assert loaded_names[n].path == v.path, n
    np.testing.assert_array_equal(loaded_names[n].numpy(), v.numpy(), err_msg=n)
