"""A design at a new place (modeling.register_place), both registered in this
file alone, is all the project needs: here on the feed-forward's intermediate
activation and on the layer's output, as tests/test_new_design.py shows it for
a design at a built-in place (the checks both run: tests/design_checks.py)."""

from typing import NamedTuple

import keras
import numpy as np
import pytest
import tensorflow as tf

from adapter_bert.model import adapter_layers
from adapter_bert.model.designs import registry as design_registry
from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.checkpoints import checkpoint_io
from adapter_bert.runtime import trainable
from adapter_bert.model import modeling
import numpy_bert
from adapter_bert.model import optimization
from design_checks import CONFIG, L, run_bank_and_export, served_beside_houlsby, train_step
import tiny_bert


# A design at a new place, both defined here alone: a bottleneck u + A(u) on a
# tensor of the block that no built-in place uses, at a place the fixture
# registers with its TF1 scope (modeling.register_place): on the feed-forward's
# intermediate activation (site "intermediate_activation", [tokens,
# intermediate_size]) or on the layer's output after its output LayerNorm
# (site "layer_output"). No product file names either design or place.

class NewPlace(NamedTuple):
  name: str  # The place, as the design's `places` names it.
  site: str  # The block's site it acts at (modeling.SITES).
  scope: str  # Its TF1 scope under bert/encoder/layer_N.
  width: str  # The BertConfig field that is the width of its tensor.
  attribute: str  # A block's attribute (and Keras name) of its own layer there.


NEW_PLACES = {
    "intermediate": NewPlace("intermediate", "intermediate_activation",
                             "intermediate/adapters", "intermediate_size",
                             "intermediate_adapters"),
    # "output_adapters" is the feed-forward place's (adapter-bert's name).
    "output": NewPlace("output", "layer_output", "layer_output/adapters", "hidden_size",
                       "layer_output_adapters"),
}


class NewPlaceBottleneck(adapter_layers.Bottleneck):
  """u + A(u) on the tensor u at its place (`at`), before what the block does
  next with it: the feed-forward's output projection, or the next layer."""
  summary = "a bottleneck at a place that this test registers"
  takes_placement = False  # Its place is fixed.
  at = ""

  def places(self, config):
    return (self.at,)


def _register_new_place(monkeypatch, place: NewPlace):
  """Registers `place` and a design there ("<place>_bottleneck", with weights of
  its own type) for one test; the registries restored after it (the caller's
  fixture, after its yield)."""
  registry = design_registry._REGISTRY  # pylint: disable=protected-access
  monkeypatch.setattr(design_registry, "_REGISTRY", dict(registry))
  registered = modeling.register_place(place.name, site=place.site, scope=place.scope,
                                       attribute=place.attribute)
  assert registered == modeling.AdapterPlace(place.attribute, None, place.scope, place.site)
  weights_type = type(f"{place.name.title()}Weights", (adapter_layers.AdapterWeights,), {})
  design = type(f"{place.name.title()}Bottleneck", (NewPlaceBottleneck,),
                {"name": f"{place.name}_bottleneck", "at": place.name,
                 "weights_types": (weights_type,)})
  return adapter_layers.register_design(design())


@pytest.fixture(params=sorted(NEW_PLACES))
def new_place(request, monkeypatch):
  """(the design, its NewPlace), for each new place in turn."""
  before = dict(modeling.ADAPTER_PLACES)
  place = NEW_PLACES[request.param]
  yield _register_new_place(monkeypatch, place), place
  modeling.ADAPTER_PLACES.clear()
  modeling.ADAPTER_PLACES.update(before)


@pytest.fixture
def output_place(monkeypatch):
  """The design at the layer's output only (the tests of one site's equation)."""
  before = dict(modeling.ADAPTER_PLACES)
  yield _register_new_place(monkeypatch, NEW_PLACES["output"])
  modeling.ADAPTER_PLACES.clear()
  modeling.ADAPTER_PLACES.update(before)


def _new_place_names(place: NewPlace):
  return {f"bert/encoder/layer_{i}/{place.scope}/{p}"
          for i in range(L) for p in ("weights1", "biases1", "weights2", "biases2")}


def test_a_new_place_is_registered_for_one_test_only(new_place):
  design, place = new_place
  assert place.name in modeling.ADAPTER_PLACES
  config = AdapterConfig(size=3, design=design.name)
  assert (config.places, config.sublayers) == ((place.name,), ())
  assert config.to_dict() == {"size": 3, "init_scale": 1e-3, "activation": "gelu",
                              "design": design.name}
  with pytest.raises(ValueError, match="registered already"):
    modeling.register_place(place.name, "layer_output", "elsewhere/adapters")
  with pytest.raises(ValueError, match="registered already"):
    modeling.register_place("other", "layer_output", place.scope)
  with pytest.raises(ValueError, match="registered already"):  # The feed-forward's.
    modeling.register_place("other", "layer_output", "other/adapters",
                            attribute="output_adapters")
  with pytest.raises(ValueError, match="adapter site must be one of"):
    modeling.register_place("other", "attention_probabilities", "other/adapters")
  with pytest.raises(ValueError, match="say 'adapters'"):
    modeling.register_place("other", "layer_output", "layer_output/extra")


def test_the_new_places_are_gone_after_the_test():
  assert not set(NEW_PLACES) & set(modeling.ADAPTER_PLACES)
  assert not {f"{p}_bottleneck" for p in NEW_PLACES} & set(adapter_layers.design_names())


def test_a_design_at_an_unregistered_place_is_refused(output_place):
  del modeling.ADAPTER_PLACES["output"]  # The fixture restores it.
  with pytest.raises(ValueError, match=r"acts at places \['output'\] that are not "
                     "registered"):
    modeling.BertEncoder(CONFIG, AdapterConfig(size=3, design="output_bottleneck"))


def _assign_random(model, seed):
  names = model.tf1_variable_map()
  values = tiny_bert.random_weights({n: tuple(v.shape) for n, v in names.items()}, seed)
  for n, v in names.items():
    v.assign(values[n])
  return values


def test_a_model_at_the_intermediate_activation_is_the_numpy_equation(monkeypatch):
  """The encoder computes the NumPy BERT with u + A(u) as the feed-forward's
  activation; its weights under its own scope, [intermediate_size, size] first."""
  before = dict(modeling.ADAPTER_PLACES)
  try:
    design = _register_new_place(monkeypatch, NEW_PLACES["intermediate"])
    keras.utils.set_random_seed(0)
    encoder = modeling.BertEncoder(CONFIG, AdapterConfig(size=3, design=design.name))
    encoder.ensure_built()
    values = _assign_random(encoder, 3)
    scope = NEW_PLACES["intermediate"].scope
    assert tuple(values[f"bert/encoder/layer_0/{scope}/weights1"].shape) == (
        CONFIG.intermediate_size, 3)
    layers = iter(range(L))  # bert_forward calls hidden_act once per layer, in order.
    weights = {n: np.asarray(a, np.float64) for n, a in values.items()}
    def hidden_act(t):
      prefix = f"bert/encoder/layer_{next(layers)}/{scope}/"
      return numpy_bert.adapter(numpy_bert.gelu(t), weights, prefix)
    inputs = tiny_bert.random_inputs(batch=2, seq=7, padded_from=5, second_segment_from=3)
    seq, pooled = numpy_bert.bert_forward(values, CONFIG.num_attention_heads, **inputs,
                                          hidden_act=hidden_act)
    out = encoder(inputs, training=False)
    np.testing.assert_allclose(out["sequence_output"].numpy(), seq, atol=3e-5)
    np.testing.assert_allclose(out["pooled_output"].numpy(), pooled, atol=3e-5)
    plain, _ = numpy_bert.bert_forward(values, CONFIG.num_attention_heads, **inputs)
    assert np.abs(plain - seq).max() > 1e-2  # The adapters matter.
  finally:
    modeling.ADAPTER_PLACES.clear()
    modeling.ADAPTER_PLACES.update(before)


def test_a_layer_with_adapters_at_its_output_is_the_plain_layer_then_the_adapter(
    output_place):
  """TransformerBlock(x) = y + A(y), y the plain block's output on the same weights."""
  config = AdapterConfig(size=3, design="output_bottleneck")
  keras.utils.set_random_seed(0)
  ours = modeling.TransformerBlock(CONFIG, config)
  plain = modeling.TransformerBlock(CONFIG, modeling.NO_ADAPTERS)
  x = tf.random.stateless_normal([2, 5, CONFIG.hidden_size], seed=[1, 2])
  bias = tf.zeros([2, 1, 1, 5])
  ours(x, bias), plain(x, bias)  # Built.
  for v in ours.weights:
    v.assign(tf.random.stateless_normal(v.shape, seed=[3, len(v.path)]) * 0.3)
  names = ours.tf1_variable_map("p")
  for n, v in plain.tf1_variable_map("p").items():
    v.assign(names[n])
  assert set(names) - set(plain.tf1_variable_map("p")) == {
      f"p/layer_output/adapters/{w}" for w in ("weights1", "biases1", "weights2", "biases2")}
  w = {n[len("p/"):]: np.asarray(v.numpy(), np.float64) for n, v in names.items()}
  y = plain(x, bias).numpy()
  expected = numpy_bert.adapter(y, w, "layer_output/adapters/")
  np.testing.assert_allclose(ours(x, bias).numpy(), expected, atol=3e-5)
  assert np.abs(expected - y).max() > 1e-2


def test_its_own_task_weights_are_at_the_new_place(new_place):
  design, place = new_place
  encoder = modeling.BertEncoder(CONFIG, AdapterConfig(size=3, design=design.name))
  encoder.ensure_built()
  for layer_weights in encoder.own_task_weights().layers:
    assert [adapter_layers.design_of(w) for w in layer_weights.at(place.name)] == [design]
    assert layer_weights.other_places.keys() == {place.name}
    assert layer_weights.attention_adapters == layer_weights.feed_forward_adapters == ()
    assert layer_weights.at(place.name)[0].weights1.shape == (getattr(CONFIG, place.width), 3)


def test_the_new_place_trains_and_round_trips_tf1_and_adapter_only_files(new_place, tmp_path):
  """--train_mode=adapters: its adapters get gradients, the frozen weights none;
  a TF1 checkpoint under its names and the adapter-only file restore it."""
  from adapter_bert.checkpoints import adapter_weights
  design, place = new_place
  config = AdapterConfig(size=3, design=design.name)
  keras.utils.set_random_seed(0)
  model = modeling.BertClassifier(CONFIG, 2, config)
  model.ensure_built()
  trainable.set_trainable(model, trainable.TrainMode.parse("adapters"))
  names = model.tf1_variable_map()
  adapters = {n for n in names if modeling.variable_role(n) == "adapter"}
  assert adapters == _new_place_names(place)
  trained = {n for n, v in names.items() if v.trainable}
  assert trained == {n for n in names if modeling.variable_role(n) in
                     ("adapter", "layer_norm", "head")}
  before = {n: v.numpy().copy() for n, v in names.items()}
  optimizer = optimization.create_optimizer(1e-2, num_train_steps=10, num_warmup_steps=0)
  inputs = tiny_bert.random_inputs(batch=2, seq=7, padded_from=5, second_segment_from=3)
  train_step(model, optimizer, inputs, np.array([0, 1]))
  changed = {n for n, v in names.items() if not np.array_equal(v.numpy(), before[n])}
  assert adapters <= changed <= trained
  expected = model(inputs, training=False).numpy()
  # A TF1 checkpoint of every variable, under the names: a fresh model restores it.
  prefix = str(tmp_path / "model.ckpt")
  checkpoint_io.write_tf1_checkpoint(prefix, {n: v.numpy() for n, v in names.items()})
  listed = dict(tf.train.list_variables(prefix))
  assert {n: tuple(listed[n]) for n in adapters} == {
      n: tuple(names[n].shape) for n in adapters}
  keras.utils.set_random_seed(1)
  fresh = modeling.BertClassifier(CONFIG, 2, config)
  checkpoint_io.load_checkpoint(fresh, prefix)
  np.testing.assert_allclose(fresh(inputs, training=False).numpy(), expected, atol=1e-6)
  # The adapter-only file: its trained variables, onto a model of the same base.
  adapter_weights.save_adapter_weights(model, str(tmp_path / "adapter_model"))
  saved = adapter_weights.read_adapter_file(str(tmp_path / "adapter_model"))
  assert set(saved.arrays) == trained
  keras.utils.set_random_seed(2)
  other = modeling.BertClassifier(CONFIG, 2, config)
  other.ensure_built()
  for n, v in other.tf1_variable_map().items():
    if n not in trained:
      v.assign(names[n].numpy())
  adapter_weights.load_adapter_weights(other, saved)
  np.testing.assert_allclose(other(inputs, training=False).numpy(), expected, atol=1e-6)


def test_its_tasks_at_the_new_place_are_served_beside_houlsbys(new_place):
  """StackedTasksBert stacks its weights at their place (padded to the place's
  width: the intermediate size at the intermediate activation) beside a
  Houlsby task's."""
  design, _ = new_place
  served_beside_houlsby(AdapterConfig(size=4, design=design.name))


def test_a_run_at_the_new_place_fills_a_bank_that_the_export_serves(
    base, new_place, tmp_path):
  """run_classifier.py --adapter_design=<place>_bottleneck --adapter_bank, its
  adapter_model/ added again as a second task (manage_bank.py add's way), the
  bank reopened: both tasks hold its weights under its scope (the bank checks
  their shapes on a model of the place's width), and the exported SavedModel
  gives the run's test predictions for each."""
  design, place = new_place
  run_bank_and_export(base, tmp_path, design.name, place.scope, extra_task="mrpc-again")
