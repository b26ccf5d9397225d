"""A new adapter design, defined and registered in this file alone, is all the
project needs: an AdapterConfig names it, a model builds, trains and saves its
weights under adapter-bert's TF1 names, validation honours its capabilities
(Design's attributes) and nothing else asks for its name; its weights are found
by design_of and served beside another design's in one batch. A design at a
new place: tests/test_new_place.py."""


import keras
import numpy as np
import pytest
import tensorflow as tf

from adapter_bert.model import adapter_layers
from adapter_bert.model.designs import registry as design_registry
from adapter_bert.model.adapter_layers import AdapterConfig, PlaceInputs
from adapter_bert import errors
from adapter_bert.checkpoints import adapterhub
from adapter_bert.checkpoints import checkpoint_io
from adapter_bert.runtime import model_setup
from adapter_bert.runtime import trainable
from adapter_bert.model import modeling
from design_checks import CONFIG, L, run_bank_and_export, served_beside_houlsby, train_step
import numpy_bert
from adapter_bert.model import optimization
import tiny_bert


class SumReadingWeights(adapter_layers.AdapterWeights):
  """AdapterWeights of the sum-reading design (the design_of them)."""


class SumReading(adapter_layers.Bottleneck):
  """LN(h + s A(h + r) + r): the bottleneck reads the attention sub-layer's output
  and input summed (before their LayerNorm), and is scaled by 1/2."""
  name = "sum_reading"
  summary = "reads the attention output plus its input, halved"
  default_placement = "attention"
  default_scaling = 0.5
  weights_types = (SumReadingWeights,)
  # Every capability at Design's default: no own LayerNorm, not fusable, no
  # AdapterHub form, not merged into projections; takes a placement.

  def reads(self, inputs):
    return inputs.sublayer_output + inputs.sublayer_input


@pytest.fixture
def sum_reading(monkeypatch):
  """The design, registered for one test; the registry restored after it."""
  registry = design_registry._REGISTRY  # pylint: disable=protected-access
  monkeypatch.setattr(design_registry, "_REGISTRY", dict(registry))
  return adapter_layers.register_design(SumReading())


def _gelu(x):
  return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def test_the_registry_sees_it_for_one_test_only(sum_reading):
  assert adapter_layers.get_design("sum_reading") is sum_reading
  assert "sum_reading" in adapter_layers.design_names()
  assert "sum_reading" not in adapter_layers.DESIGNS  # The built-ins, as at import.
  config = AdapterConfig(size=3, design="sum_reading")
  assert (config.placement, config.scaling, config.places, config.sublayers) == (
      "attention", 0.5, ("attention",), ("attention",))
  assert not config.lora
  assert config.to_dict() == {"size": 3, "init_scale": 1e-3, "activation": "gelu",
                              "design": "sum_reading"}
  assert AdapterConfig.from_dict(config.to_dict()) == config


def test_its_registration_is_gone_after_the_test():
  assert "sum_reading" not in adapter_layers.design_names()
  with pytest.raises(ValueError, match="adapter design must be one of"):
    AdapterConfig(design="sum_reading")


def test_one_place_is_the_hand_computed_equation(sum_reading):
  """h + s (W2 gelu(W1 (h + r) + b1) + b2) on numbers small enough to check by
  hand, through the layer the design makes and through its given weights."""
  config = AdapterConfig(size=2, design="sum_reading")
  layer = sum_reading.make_layer(config, 3, "adapters")
  h = np.array([[1.0, -2.0, 0.5], [0.0, 1.0, 2.0]], np.float32)
  r = np.array([[0.5, 0.5, -1.0], [2.0, -1.0, 0.0]], np.float32)
  layer.build(h.shape)
  w1 = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, -1.0]], np.float32)
  b1 = np.array([[0.5, -0.5]], np.float32)
  w2 = np.array([[1.0, 2.0, 0.0], [0.0, -1.0, 1.0]], np.float32)
  b2 = np.array([[0.0, 0.25, -0.25]], np.float32)
  for variable, value in zip((layer.weights1, layer.biases1, layer.weights2, layer.biases2),
                             (w1, b1, w2, b2)):
    variable.assign(value)
  inputs = PlaceInputs(tf.constant(r), tf.constant(h), None, "gelu", None)
  # Row 0: a = h + r = (1.5, -1.5, -0.5); W1 a + b1 = (1.5 - 0.5 + 0.5, -1.5 + 0.5 - 0.5).
  a = h + r
  pre = a @ w1 + b1
  np.testing.assert_allclose(pre[0], [1.5, -1.5])
  expected = h + 0.5 * (_gelu(pre) @ w2 + b2)
  ours = sum_reading.apply_layer(layer, tf.constant(h), inputs).numpy()
  np.testing.assert_allclose(ours, expected, rtol=1e-6, atol=1e-6)
  # Houlsby's reading of the same weights (a = h, scaling 1) is another function.
  houlsby = h + _gelu(h @ w1 + b1) @ w2 + b2
  assert np.abs(houlsby - expected).max() > 0.1
  # Given as task weights (serving's way): its own type, found by design_of,
  # the scaling folded in; the same output.
  weights = sum_reading.task_weights(layer, config)
  assert type(weights) is SumReadingWeights
  assert adapter_layers.design_of(weights) is sum_reading
  np.testing.assert_allclose(weights.weights2.numpy(), 0.5 * w2)
  given = sum_reading.apply(tf.constant(h), weights, inputs).numpy()
  np.testing.assert_allclose(given, expected, rtol=1e-6, atol=1e-6)


def _adapter_shapes(model):
  return {n: tuple(v.shape) for n, v in model.tf1_variable_map().items()
          if modeling.variable_role(n) == "adapter"}


def test_a_model_is_the_numpy_equation_and_its_weights_have_houlsbys_tf1_names(
    sum_reading, monkeypatch):
  """Its weights are Houlsby's at the same placement, name for name and shape
  for shape; the encoder computes the NumPy BERT with the design's equation."""
  config = AdapterConfig(size=3, design="sum_reading")
  keras.utils.set_random_seed(0)
  encoder = modeling.BertEncoder(CONFIG, config)
  encoder.ensure_built()
  names = encoder.tf1_variable_map()
  houlsby = modeling.BertEncoder(CONFIG, AdapterConfig(size=3, placement="attention"))
  houlsby.ensure_built()
  ours = {n: tuple(v.shape) for n, v in names.items() if "/adapters/" in n}
  assert ours == {n: tuple(v.shape) for n, v in houlsby.tf1_variable_map().items()
                  if "/adapters/" in n}
  assert set(ours) == {f"bert/encoder/layer_{i}/attention/output/adapters/{p}"
                       for i in range(L) for p in ("weights1", "biases1", "weights2",
                                                   "biases2")}
  values = tiny_bert.random_weights({n: tuple(v.shape) for n, v in names.items()}, 3)
  for n, v in names.items():
    v.assign(values[n])
  original = numpy_bert.adapted_sublayer
  def adapted_sublayer(h, r, w, prefix, norm, design, scaling):
    if design != "sum_reading":
      return original(h, r, w, prefix, norm, design, scaling)
    if prefix + "weights1" not in w:
      return h
    return h + scaling * numpy_bert.bottleneck(h + r, w, prefix)
  monkeypatch.setattr(numpy_bert, "adapted_sublayer", adapted_sublayer)
  inputs = tiny_bert.random_inputs(batch=2, seq=7, padded_from=5, second_segment_from=3)
  seq, pooled = numpy_bert.bert_forward(values, CONFIG.num_attention_heads, **inputs,
                                        design="sum_reading", scaling=0.5)
  out = encoder(inputs, training=False)
  np.testing.assert_allclose(out["sequence_output"].numpy(), seq, atol=3e-5)
  np.testing.assert_allclose(out["pooled_output"].numpy(), pooled, atol=3e-5)
  # Houlsby's equation on the same weights differs: the design is not Houlsby's.
  other, _ = numpy_bert.bert_forward(values, CONFIG.num_attention_heads, **inputs,
                                     design="houlsby", scaling=0.5)
  assert np.abs(other - seq).max() > 1e-2
  # design_of finds its weights among a block's task weights.
  for layer_weights in encoder.own_task_weights().layers:
    assert [adapter_layers.design_of(w) for w in layer_weights.attention_adapters] == [
        sum_reading]
    assert layer_weights.feed_forward_adapters == ()


def test_a_classifier_trains_a_step_and_its_tf1_checkpoint_restores_it(sum_reading, tmp_path):
  """--train_mode=adapters trains its adapters (and LayerNorms and head) only;
  a TF1 checkpoint of its variables under their names restores the function."""
  config = AdapterConfig(size=3, design="sum_reading")
  keras.utils.set_random_seed(0)
  model = modeling.BertClassifier(CONFIG, 2, config)
  model.ensure_built()
  trainable.set_trainable(model, trainable.TrainMode.parse("adapters"))
  names = model.tf1_variable_map()
  trained = {n for n, v in names.items() if v.trainable}
  houlsby = modeling.BertClassifier(CONFIG, 2, AdapterConfig(size=3, placement="attention"))
  houlsby.ensure_built()
  trainable.set_trainable(houlsby, trainable.TrainMode.parse("adapters"))
  assert trained == {n for n, v in houlsby.tf1_variable_map().items() if v.trainable}
  assert _adapter_shapes(model) == _adapter_shapes(houlsby)
  before = {n: v.numpy().copy() for n, v in names.items()}
  optimizer = optimization.create_optimizer(1e-2, num_train_steps=10, num_warmup_steps=0)
  inputs = tiny_bert.random_inputs(batch=2, seq=7, padded_from=5, second_segment_from=3)
  train_step(model, optimizer, inputs, np.array([0, 1]))
  changed = {n for n, v in names.items() if not np.array_equal(v.numpy(), before[n])}
  adapters = {n for n in names if modeling.variable_role(n) == "adapter"}
  assert adapters and adapters <= changed <= trained
  # Its variables as a TF1 checkpoint, under the names; a fresh model restores them.
  prefix = str(tmp_path / "model.ckpt")
  checkpoint_io.write_tf1_checkpoint(prefix, {n: v.numpy() for n, v in names.items()})
  listed = dict(tf.train.list_variables(prefix))
  assert {n: tuple(listed[n]) for n in adapters} == _adapter_shapes(model)
  keras.utils.set_random_seed(1)
  fresh = modeling.BertClassifier(CONFIG, 2, config)
  checkpoint_io.load_checkpoint(fresh, prefix)
  np.testing.assert_allclose(fresh(inputs, training=False).numpy(),
                             model(inputs, training=False).numpy(), atol=1e-6)


def test_validation_honours_its_capabilities(sum_reading):
  """What it lacks is refused, each in the words of the capability and naming
  the designs that have it, by code that never names it."""
  with pytest.raises(ValueError, match=r"own LayerNorm \(HyperFormer\+\+'s\) needs design "
                     r"houlsby, got 'sum_reading'"):
    AdapterConfig(size=3, design="sum_reading", layer_norm=True)
  AdapterConfig(size=3, design="sum_reading", placement="both")  # It takes a placement.
  options = model_setup.ModelOptions(adapter={"design": "sum_reading", "layer_norm": True})
  with pytest.raises(errors.UserError, match="^flag --adapter_layer_norm=True: only with "
                     "--adapter_design=houlsby$"):
    options.validate(do_lower_case=True)
  model_setup.ModelOptions(adapter={"design": "sum_reading"}).validate(do_lower_case=True)
  model_setup.ModelOptions(adapter={"design": "sum_reading", "placement": "feed_forward"}
                           ).validate(do_lower_case=True)
  with pytest.raises(errors.UserError, match="--adapter_design=sum_reading needs adapters"):
    model_setup.ModelOptions(adapter={"design": "sum_reading", "size": 0}).validate(True)
  # No AdapterHub form: the export refuses it (and does not point to PEFT).
  with pytest.raises(errors.UserError) as refused:
    adapterhub._bn_config(AdapterConfig(size=4, design="sum_reading"), 32, "f")  # pylint: disable=protected-access
  assert str(refused.value).endswith("adapter design sum_reading (size 4) has no AdapterHub "
                                     "bottleneck equivalent")
  # Not fusable: the multitask runner's shared adapters refuse it.
  from adapter_bert.cli import multitask_flags
  settings = dict(multitask_adapters="shared", train_mode=None, adapter_placement=None,
                  adapter_design="sum_reading")
  with pytest.raises(errors.UserError, match="--adapter_design=sum_reading: run_multitask.py "
                     "trains adapters of design houlsby"):
    multitask_flags.model_options(settings)
  # Not merged into projections: merge_lora refuses its model.
  model = modeling.BertEncoder(CONFIG, AdapterConfig(size=3, design="sum_reading"))
  with pytest.raises(ValueError, match="only LoRA merges into the kernels"):
    modeling.merge_lora(model)


def test_its_capabilities_change_what_is_refused(sum_reading, monkeypatch):
  """The same design with an own LayerNorm and fusable: the validation and the
  messages follow the attributes, not the name."""
  monkeypatch.setattr(sum_reading, "own_layer_norm", True)
  monkeypatch.setattr(sum_reading, "fusable", True)
  config = AdapterConfig(size=3, design="sum_reading", layer_norm=True)
  assert config.layer_norm
  model_setup.ModelOptions(adapter={"design": "sum_reading", "layer_norm": True}
                           ).validate(do_lower_case=True)
  with pytest.raises(ValueError, match="needs design houlsby or sum_reading, got 'pfeiffer'"):
    AdapterConfig(design="pfeiffer", layer_norm=True)
  with pytest.raises(errors.UserError, match="only with --adapter_design=houlsby or sum_reading"):
    model_setup.ModelOptions(adapter={"design": "parallel", "layer_norm": True}).validate(True)
  from adapter_bert.cli import multitask_flags
  settings = dict(
      multitask_adapters="shared", train_mode=None, adapter_placement=None,
      adapter_design="sum_reading", adapter_size=8, adapter_init_scale=1e-3,
      init_checkpoint=None, bert_hub_module_handle=None, adapter_checkpoint=None,
      mixed_precision="none")
  assert multitask_flags.model_options(settings).adapter_config() == AdapterConfig(
      size=8, design="sum_reading")


def test_its_tasks_are_served_beside_houlsbys_in_one_batch(sum_reading):
  """serving/stacked_tasks.StackedTasksBert (what an exported SavedModel runs) over a
  task of the new design and a Houlsby task: each example gets its own task
  model's logits (Design.stack pads and stacks the new design's weights)."""
  served_beside_houlsby(AdapterConfig(size=4, design="sum_reading"))


def test_a_run_of_it_fills_a_bank_task_that_the_exported_savedmodel_serves(
    base, sum_reading, tmp_path):
  """run_classifier.py --adapter_design=sum_reading --adapter_bank: the bank task
  records the design and its weights under their TF1 names, and the SavedModel
  that serving.export writes of the bank gives the run's test predictions."""
  run_bank_and_export(base, tmp_path, "sum_reading", "attention/output/adapters")
