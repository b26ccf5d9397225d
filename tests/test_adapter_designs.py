"""The adapter designs (adapter_layers' Design registry) against their papers'
equations recomputed in NumPy (numpy_bert.py), their parameter counts against
hand arithmetic, and LoRA's merge into the base kernels; a design added in a
test, without touching modeling.py."""

import json
import os
import types
from typing import NamedTuple

import keras
import numpy as np
import pytest
import tensorflow as tf

from adapter_bert.model import adapter_layers
from adapter_bert.model.designs import registry as design_registry
from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.checkpoints import adapter_weights
from adapter_bert import errors
from adapter_bert.model import modeling
import numpy_bert
from adapter_bert.runtime import trainable
import tiny_bert
from run_harness import GLUE, classifier_flags, read_test_results, read_text, run_main

CONFIG = modeling.BertConfig.from_dict(tiny_bert.TINY_CONFIG)
H, L = CONFIG.hidden_size, CONFIG.num_hidden_layers


def _adapter_parameters(config, h, layers):
  """By hand: a bottleneck of width m on hidden h is W1 h*m + b1 m + W2 m*h + b2 h,
  one per sub-layer it follows; LoRA of rank r is A h*r + B r*h on each of the
  query and value projections."""
  m = config.size
  if config.design == "lora":
    return layers * 2 * (h * m + m * h)
  return layers * len(config.sublayers) * (h * m + m + m * h + h)


def _random_encoder(adapter_config, seed=3):
  """An encoder whose every weight (LoRA's zero B and the adapters included) is
  large and random, so a mis-wired design shows; and those weights by TF1 name."""
  keras.utils.set_random_seed(0)
  encoder = modeling.BertEncoder(CONFIG, adapter_config)
  names = encoder.tf1_variable_map()
  values = tiny_bert.random_weights({n: tuple(v.shape) for n, v in names.items()}, seed)
  for n, v in names.items():
    v.assign(values[n])
  return encoder, values


@pytest.mark.parametrize("design,placement,scaling", [
    ("houlsby", "both", 1.0), ("houlsby", "both", 2.5),
    ("pfeiffer", None, None), ("pfeiffer", "both", 1.0),
    ("parallel", None, None), ("parallel", "attention", 0.5),
    ("lora", None, None), ("lora", None, 2.0)])
def test_each_design_is_its_papers_equation(design, placement, scaling):
  config = AdapterConfig(size=5, design=design, placement=placement, scaling=scaling)
  encoder, weights = _random_encoder(config)
  inputs = tiny_bert.random_inputs()
  ours = encoder(inputs, training=False)
  seq, pooled = numpy_bert.bert_forward(weights, CONFIG.num_attention_heads, **inputs,
                                        design=design, scaling=config.scaling)
  np.testing.assert_allclose(ours["sequence_output"].numpy(), seq, atol=3e-5)
  np.testing.assert_allclose(ours["pooled_output"].numpy(), pooled, atol=3e-5)
  # The equations differ: the other designs' reading of the same weights does not match.
  for other in ("houlsby", "pfeiffer", "parallel"):
    if other != design and design != "lora":
      wrong, _ = numpy_bert.bert_forward(weights, CONFIG.num_attention_heads, **inputs,
                                         design=other, scaling=config.scaling)
      assert np.abs(wrong - seq).max() > 1e-2, other
  plain, _ = numpy_bert.bert_forward({k: v for k, v in weights.items() if "/adapters/" not in k},
                                     CONFIG.num_attention_heads, **inputs)
  assert np.abs(plain - seq).max() > 1e-2


class ScaledIdentityWeights(NamedTuple):
  """The toy design's weights as a block's call takes them: its scalar s."""
  scale: tf.Tensor


class _Scale(keras.layers.Layer):
  """s h, s one weight (TF1 name "scale"), starting at 1."""

  def build(self, input_shape):
    self.scale = self.add_weight(name="scale", shape=(), initializer="ones")

  def call(self, h):
    return self.scale * h

  def tf1_variable_names(self):
    return {"scale": self.scale}


class ScaledIdentity(adapter_layers.Design):
  """LN(h + s h + r): a scaled-identity adapter, after the feed-forward sub-layer."""
  name = "scaled_identity"
  default_placement = "feed_forward"
  weights_types = (ScaledIdentityWeights,)

  def make_layer(self, config, units, name):
    return _Scale(name=name)

  def apply_layer(self, layer, h, inputs):
    return h + layer(h)

  def task_weights(self, layer, config):
    return ScaledIdentityWeights(layer.scale)

  def apply(self, h, weights, inputs):
    return h + weights.scale * h


@pytest.fixture
def scaled_identity(monkeypatch):
  """The toy design, registered for one test (the registry restored after it)."""
  registry = design_registry._REGISTRY  # pylint: disable=protected-access
  monkeypatch.setattr(design_registry, "_REGISTRY", dict(registry))
  return adapter_layers.register_design(ScaledIdentity())


def test_a_design_added_in_one_entry_is_its_numpy_equation(scaled_identity, monkeypatch):
  """One Design entry, registered here, is all a TransformerBlock needs: it
  makes the design's weights at its place with their TF1 names, applies them
  as the NumPy equation says, and takes them as given weights (serving's way)."""
  config = AdapterConfig(size=1, design="scaled_identity")
  assert config.places == ("feed_forward",) and config.to_dict()["design"] == "scaled_identity"
  block = modeling.TransformerBlock(CONFIG, config, name="layer_0")
  x = np.random.default_rng(0).normal(size=(2, 5, H)).astype(np.float32)
  block(x, np.zeros((2, 1, 1, 5), np.float32))
  assert block.output_adapters is not None and block.attention_adapters is None
  assert "prefix/output/adapters/scale" in block.tf1_variable_map("prefix")

  encoder, weights = _random_encoder(config)
  assert {n for n in weights if "/adapters/" in n} == {
      f"bert/encoder/layer_{i}/output/adapters/scale" for i in range(L)}
  original = numpy_bert.adapted_sublayer
  def adapted_sublayer(h, r, w, prefix, norm, design, scaling):
    if design != scaled_identity.name:
      return original(h, r, w, prefix, norm, design, scaling)
    return h + w[prefix + "scale"] * h if prefix + "scale" in w else h
  monkeypatch.setattr(numpy_bert, "adapted_sublayer", adapted_sublayer)
  inputs = tiny_bert.random_inputs()
  ours = encoder(inputs, training=False)["sequence_output"].numpy()
  seq, _ = numpy_bert.bert_forward(weights, CONFIG.num_attention_heads, **inputs,
                                   design=scaled_identity.name)
  np.testing.assert_allclose(ours, seq, atol=3e-5)
  plain, _ = numpy_bert.bert_forward({k: v for k, v in weights.items() if "/adapters/" not in k},
                                     CONFIG.num_attention_heads, **inputs)
  assert np.abs(plain - seq).max() > 1e-2
  # Its weights given to an encoder without adapters: the same function.
  bare = modeling.BertEncoder(CONFIG)
  bare(inputs)
  for n, v in bare.tf1_variable_map().items():
    v.assign(weights[n])
  given = bare(inputs, task_weights=encoder.own_task_weights(), training=False)
  np.testing.assert_allclose(given["sequence_output"].numpy(), ours, atol=1e-6)
  with pytest.raises(ValueError, match="registered already"):
    adapter_layers.register_design(ScaledIdentity())
  with pytest.raises(TypeError, match="no adapter design"):
    adapter_layers.design_of(("not", "weights"))


def test_design_defaults_validation_and_recorded_dict():
  assert AdapterConfig(design="pfeiffer").sublayers == ("feed_forward",)
  assert AdapterConfig(design="parallel").scaling == 4.0  # He et al.
  assert AdapterConfig(design="lora").sublayers == () and AdapterConfig(design="lora").lora
  assert AdapterConfig(size=0, design="lora").sublayers == ()
  # Houlsby's dict is as before designs existed; others record what is not their default.
  assert AdapterConfig().to_dict() == {"size": 64, "init_scale": 1e-3, "activation": "gelu"}
  assert AdapterConfig(size=8, design="parallel").to_dict() == {
      "size": 8, "init_scale": 1e-3, "activation": "gelu", "design": "parallel"}
  pf = AdapterConfig(size=8, design="pfeiffer", placement="both", scaling=2.0)
  assert pf.to_dict()["placement"] == "both" and pf.to_dict()["scaling"] == 2.0
  assert AdapterConfig.from_dict(pf.to_dict()) == pf
  for bad in ({"design": "prefix"}, {"design": "lora", "placement": "attention"},
              {"design": "pfeiffer", "layer_norm": True}, {"scaling": 0.0}):
    with pytest.raises(ValueError):
      AdapterConfig.from_dict(bad)


@pytest.mark.parametrize("design,placement,per_layer", [
    # A bottleneck of width m on hidden h: W1 h*m + b1 m + W2 m*h + b2 h.
    ("houlsby", None, 2 * (2 * H * 5 + 5 + H)),
    ("houlsby", "attention", 2 * H * 5 + 5 + H),
    ("pfeiffer", None, 2 * H * 5 + 5 + H),
    ("parallel", None, 2 * H * 5 + 5 + H),
    ("parallel", "both", 2 * (2 * H * 5 + 5 + H)),
    # LoRA of rank r on the query and on the value projection: A h*r + B r*h each.
    ("lora", None, 2 * (H * 5 + 5 * H))])
def test_parameter_counts_are_the_hand_arithmetic(design, placement, per_layer):
  config = AdapterConfig(size=5, design=design, placement=placement)
  model = modeling.BertClassifier(CONFIG, 3, config)
  model.ensure_built()
  counts = trainable.parameter_counts(model)
  assert counts["adapter"] == L * per_layer == _adapter_parameters(config, H, L)
  trainable.set_trainable(model, trainable.TrainMode("adapters"))
  layer_norms = (1 + 2 * L) * 2 * H
  head = H * 3 + 3
  assert trainable.parameter_counts(model)["trainable"] == L * per_layer + layer_norms + head


def test_lora_merged_into_the_kernels_equals_the_unmerged_model():
  encoder, _ = _random_encoder(AdapterConfig(size=4, design="lora", scaling=1.5))
  inputs = tiny_bert.random_inputs()
  expected = encoder(inputs, training=False)["sequence_output"].numpy()
  merged = modeling.merge_lora(encoder)
  assert merged.adapter_config == modeling.NO_ADAPTERS
  assert not any("/adapters/" in n for n in merged.tf1_variable_map())
  got = merged(inputs, training=False)["sequence_output"].numpy()
  np.testing.assert_allclose(got, expected, atol=2e-5)
  # The kernels changed by exactly s A B; nothing else changed.
  names, merged_names = encoder.tf1_variable_map(), merged.tf1_variable_map()
  p = "bert/encoder/layer_1/attention/self/value/"
  update = 1.5 * names[p + "adapters/lora_a"].numpy() @ names[p + "adapters/lora_b"].numpy()
  np.testing.assert_allclose(merged_names[p + "kernel"].numpy(),
                             names[p + "kernel"].numpy() + update, atol=1e-5)
  key = "bert/encoder/layer_1/attention/self/key/kernel"
  np.testing.assert_array_equal(merged_names[key].numpy(), names[key].numpy())


@pytest.mark.parametrize("design", ["pfeiffer", "parallel", "lora"])
def test_a_design_trains_logs_its_count_and_its_adapter_file_reproduces_predictions(
    base, design, tmp_path):
  """run_classifier.py --adapter_design: the parameter-count lines are the hand
  arithmetic, run_config.json and the adapter-only file record the design, and
  evaluating from the adapter file alone (no design flag) gives the trained
  run's predictions."""
  out, again = str(tmp_path / "train"), str(tmp_path / "again")
  data = dict(task_name="MRPC", data_dir=os.path.join(GLUE, "MRPC"))
  logs = run_main(**classifier_flags(base, **data, output_dir=out, do_train=True, do_predict=True,
                                     num_train_epochs=1, adapter_size=3, adapter_design=design))
  config = modeling.BertConfig.from_json_file(base["bert_config_file"])
  h, layers = config.hidden_size, config.num_hidden_layers
  adapters = _adapter_parameters(AdapterConfig(size=3, design=design), h, layers)
  trained = adapters + (1 + 2 * layers) * 2 * h + 2 * h + 2
  assert f"***** Total Trainable Parameters = {trained} *****" in logs
  recorded = json.loads(read_text(os.path.join(out, "run_config.json")))["adapter_config"]
  assert recorded["design"] == design
  header, _ = adapter_weights.read_adapter_shapes(
      os.path.join(out, "adapter_model", "adapter_weights.safetensors"))
  assert AdapterConfig.from_dict(header["adapter_config"]) == AdapterConfig(
      size=3, design=design)
  run_main(**classifier_flags(base, **data, output_dir=again, do_predict=True, adapter_size=None,
                              adapter_checkpoint=os.path.join(out, "adapter_model")))
  np.testing.assert_allclose(read_test_results(os.path.join(again, "test_results.tsv")),
                             read_test_results(os.path.join(out, "test_results.tsv")), atol=1e-6)
  # Another design's model refuses the file in one line.
  with pytest.raises(errors.UserError, match="adapter_design"):
    run_main(**classifier_flags(base, **data, output_dir=str(tmp_path / "wrong"), do_predict=True,
                                adapter_size=None, adapter_design="houlsby",
                                adapter_checkpoint=os.path.join(out, "adapter_model")))


def test_one_savedmodel_serves_every_design_in_a_mixed_batch(tmp_path):
  """serving/stacked_tasks.StackedTasksBert (what the SavedModel runs) over tasks of
  every design, different sizes and scalings, and a LayerNorm-only task: each
  example of one mixed batch gets its own task model's logits, in Python and
  from the exported SavedModel."""
  import tensorflow as tf
  from adapter_bert.bank import bank_tasks
  from adapter_bert.serving import export
  from adapter_bert.serving import stacked_tasks
  keras.utils.set_random_seed(0)
  configs = {"houlsby": AdapterConfig(size=4, scaling=1.5),
             "pfeiffer": AdapterConfig(size=6, design="pfeiffer", placement="both"),
             "parallel": AdapterConfig(size=3, design="parallel"),
             "lora": AdapterConfig(size=5, design="lora", scaling=2.0),
             "lora_small": AdapterConfig(size=2, design="lora"),
             "layer_norm": AdapterConfig(size=0)}
  base = None
  models, tasks = {}, []
  for i, (name, config) in enumerate(configs.items()):
    model = modeling.BertClassifier(CONFIG, 2 + i % 2, config)
    model.ensure_built()
    names = model.tf1_variable_map()
    values = tiny_bert.random_weights({n: tuple(v.shape) for n, v in names.items()}, seed=i)
    trained = {n for n in names if modeling.variable_role(n) in ("adapter", "layer_norm",
                                                                 "head")}
    if base is None:  # Every task's frozen weights (and base LayerNorms) are the first one's.
      base = {n: values[n] for n in names if modeling.variable_role(n) not in
              ("adapter", "head")}
    for n, v in names.items():
      v.assign(values[n] if n in trained else base[n])
    models[name] = model
    arrays = {n: v.numpy() for n, v in names.items() if n in trained}
    tasks.append(types.SimpleNamespace(name=name, path=name, arrays=arrays,
                                       adapter_config=config))
  served = stacked_tasks.StackedTasksBert(CONFIG, base, tasks)
  inputs = tiny_bert.random_inputs(seed=4, batch=12)
  task_index = np.arange(12) % len(tasks)
  logits = served(inputs, task_index).numpy()
  for i, (name, model) in enumerate(models.items()):
    own = model(inputs, training=False).numpy()
    for row in np.flatnonzero(task_index == i):
      width = own.shape[1]
      np.testing.assert_allclose(logits[row, :width], own[row], atol=2e-5, err_msg=name)
      assert not logits[row, width:].any()
  # The same through the SavedModel that serving.export writes (token ids in).
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(tiny_bert.tiny_vocab(CONFIG.vocab_size)) + "\n")
  base_info = bank_tasks.Base(CONFIG, base, str(vocab), True, "test base")
  bank = [bank_tasks.BankTask(t.name, t.path, t.adapter_config, t.arrays,
                          tuple(f"l{k}" for k in range(t.arrays["output_weights"].shape[0])),
                          False, 9, "", {}) for t in tasks]
  module = export.build_module(base_info, bank, str(tmp_path / "asset.txt"),
                               token_ids_only=True)
  tf.saved_model.save(module, str(tmp_path / "saved"), signatures=module.signatures())
  signature = tf.saved_model.load(str(tmp_path / "saved")).signatures["serving_default"]
  outputs = signature(task=tf.constant([bank[i].name for i in task_index]),
                      **{k: tf.constant(v) for k, v in inputs.items()})
  np.testing.assert_allclose(outputs["logits"].numpy(), logits, atol=1e-5)


def test_design_flags_become_the_config_and_contradictions_are_one_line():
  from absl import flags
  import run_classifier
  from adapter_bert.cli import flag_checks
  from adapter_bert.cli import options as cli_options

  def parse(*argv):
    fv = flags.FlagValues()
    run_classifier.define_flags(fv)
    fv(["prog", "--task_name=MRPC", "--data_dir=d", "--output_dir=o", "--do_eval", *argv])
    return fv
  config = cli_options.model_options(parse("--adapter_design=pfeiffer")).adapter_config()
  assert config == AdapterConfig(64, design="pfeiffer", placement="feed_forward")
  config = cli_options.model_options(
      parse("--adapter_design=lora", "--adapter_size=8", "--adapter_scaling=2")).adapter_config()
  assert (config.design, config.size, config.scaling, config.sublayers) == ("lora", 8, 2.0, ())
  # A flag alone is checked as absl parses it; flags together in main's first step.
  for argv, refused, message in [
      (["--adapter_design=prefix"], flags.IllegalFlagValueError, "flag --adapter_design=prefix"),
      (["--adapter_scaling=0"], flags.IllegalFlagValueError,
       "flag --adapter_scaling=0.0: must be a positive number"),
      (["--adapter_design=lora", "--adapter_placement=attention"], errors.UserError,
       r"design lora takes no placement \(rank --adapter_size updates of the query and "
       r"value projections, Hu et al. 2022\); leave --adapter_placement=attention out"),
      (["--adapter_design=parallel", "--train_mode=layer_norm"], errors.UserError,
       "--adapter_design=parallel needs adapters, but the model has none")]:
    with pytest.raises(refused, match=message):
      flag_checks.validate(parse(*argv))
