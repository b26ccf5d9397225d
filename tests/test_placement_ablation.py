"""Adapter placement (after attention, after the feed-forward sub-layer, or both) and
the ablation of trained adapters (experiments/ablation.py).

Models are the tiny BERT of tiny_bert.py; three MRPC runs (one per placement,
4 steps each, all added to one adapter bank) are trained once for the module.
"""

import csv
import json
import logging as py_logging
import os

import keras
import matplotlib.image
import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.bank import adapter_bank
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import checkpoint_io
from adapter_bert.classification import task as classifier_task
from adapter_bert.cli import options as cli_options
from adapter_bert.cli import flag_checks
from adapter_bert import errors
from experiments import ablation
from adapter_bert.model import modeling
import run_classifier
from adapter_bert.runtime import model_setup
from adapter_bert.runtime import startup
from adapter_bert.runtime import trainable
from adapter_bert.bank import bank_tasks
from adapter_bert.serving import stacked_tasks
from run_harness import GLUE, RUN_FLAGS, classifier_flags, read_eval_results, run_main
import tiny_bert

H, L, I, V, P, T = 32, 2, 37, 99, 64, 2  # tiny_bert.TINY_CONFIG
M, LABELS = 8, 3  # adapter size; a 3-class head
CONFIG = modeling.BertConfig.from_dict(tiny_bert.TINY_CONFIG)
_ADAPTER_VARIABLES = ("weights1", "biases1", "weights2", "biases2")
_SCOPES = {"both": ("attention/output", "output"), "attention": ("attention/output",),
           "feed_forward": ("output",)}


def _inputs():
  return {"input_ids": tf.constant([[2, 7, 9, 3, 0, 0], [2, 11, 12, 3, 13, 3]], tf.int32),
          "input_mask": tf.constant([[1, 1, 1, 1, 0, 0], [1] * 6], tf.int32),
          "segment_ids": tf.constant([[0] * 6, [0, 0, 0, 0, 1, 1]], tf.int32)}


def _model(adapter_config, seed=3, randomize=False):
  keras.utils.set_random_seed(seed)
  model = modeling.BertClassifier(CONFIG, LABELS, adapter_config)
  model.ensure_built()
  if randomize:  # Adapters far from the identity, so that removing one shows.
    values = tiny_bert.random_weights({v.path: tuple(v.shape) for v in model.weights}, seed)
    for v in model.weights:
      v.assign(values[v.path])
  return model


def _adapter_names(placement, layers=range(L)):
  return sorted(f"bert/encoder/layer_{i}/{scope}/adapters/{v}" for i in layers
                for scope in _SCOPES[placement] for v in _ADAPTER_VARIABLES)


def test_placement_both_is_the_default_model_bit_for_bit():
  default = _model(AdapterConfig(M))
  both = _model(AdapterConfig(M, placement="both"))
  assert both.adapter_config == default.adapter_config
  assert [(v.path, v.shape) for v in both.weights] == [
      (v.path, v.shape) for v in default.weights]
  assert list(both.tf1_variable_map()) == list(default.tf1_variable_map())
  for a, b in zip(both.weights, default.weights):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  np.testing.assert_array_equal(both(_inputs()).numpy(), default(_inputs()).numpy())
  # What run_config.json and adapter files record of a two-adapter model is
  # what they recorded before placement existed; such records load as "both".
  old = {"size": M, "init_scale": 1e-3, "activation": "gelu"}
  assert both.adapter_config.to_dict() == old
  assert AdapterConfig.from_dict(old).placement == "both"
  attention = AdapterConfig(M, placement="attention")
  assert attention.to_dict() == dict(old, placement="attention")
  assert AdapterConfig.from_dict(attention.to_dict()) == attention
  with pytest.raises(ValueError, match="placement must be one of"):
    AdapterConfig(M, placement="ffn")


@pytest.mark.parametrize("placement", ["attention", "feed_forward", "both"])
def test_parameter_counts_and_variable_names_of_each_placement(placement):
  model = _model(AdapterConfig(M, placement=placement))
  names = model.tf1_variable_map()
  assert sorted(n for n in names if modeling.variable_role(n) == "adapter") == (
      _adapter_names(placement))
  assert tuple(modeling.ADAPTER_PLACES[s].scope.rsplit("/", 1)[0]
               for s in model.adapter_config.sublayers) == _SCOPES[placement]
  block = model.bert.transformer_layers[0]
  assert (block.attention_adapters is None) == (placement == "feed_forward")
  assert (block.output_adapters is None) == (placement == "attention")
  keras_names = sorted({v.path.split("/")[-2] for v in model.weights if "adapters" in v.path})
  assert keras_names == sorted({"attention": ["attention_adapters"],
                                "feed_forward": ["output_adapters"],
                                "both": ["attention_adapters", "output_adapters"]}[placement])

  trainable.set_trainable(model, trainable.TrainMode("adapters"))
  counts = trainable.parameter_counts(model)
  # weights1 [H, m], biases1 [1, m], weights2 [m, H], biases2 [1, H]
  per_adapter = 2 * H * M + M + H
  adapters = {"both": 2, "attention": 1, "feed_forward": 1}[placement] * L * per_adapter
  layer_norms = 2 * H + L * 2 * 2 * H
  head = LABELS * H + LABELS
  embeddings = (V + P + T) * H
  layer = 4 * (H * H + H) + (H * I + I) + (I * H + H)
  plain = embeddings + L * layer + layer_norms + (H * H + H) + head  # (H * H + H): pooler
  assert counts == {"total": plain + adapters, "adapter": adapters,
                    "trainable": adapters + layer_norms + head}


def test_original_checkpoint_loads_the_adapters_a_placement_has(caplog):
  """An adapter-bert checkpoint has both adapters; a one-adapter model takes its own."""
  weights = tiny_bert.random_weights(tiny_bert.google_variable_shapes(
      tiny_bert.TINY_CONFIG, adapter_size=M), seed=4)
  model = modeling.BertEncoder(CONFIG, AdapterConfig(M, placement="attention"))
  with caplog.at_level(py_logging.WARNING):
    checkpoint_io.load_arrays(model, weights, "adapter-bert checkpoint")
  for name, variable in model.tf1_variable_map().items():
    np.testing.assert_array_equal(variable.numpy(), weights[name])
  assert "bert/encoder/layer_0/output/adapters/weights1" in caplog.text  # Not used.


def _parse(define, argv):
  """The flags parsed, each checked alone by absl, then together (main's first step)."""
  fv = flags.FlagValues()
  define(fv)
  fv(["prog", "--task_name=MRPC", "--data_dir=d", "--output_dir=o"] + argv)
  flag_checks.validate(fv)
  return fv


def test_placement_flag():
  fv = _parse(run_classifier.define_flags, ["--do_eval", "--adapter_placement=attention"])
  assert cli_options.model_options(fv).adapter_config() == AdapterConfig(
      64, placement="attention")
  fv = _parse(run_classifier.define_flags, ["--do_eval"])
  assert cli_options.model_options(fv).adapter_config().placement == "both"
  for argv, refused, message in [
      (["--adapter_placement=ffn"], flags.IllegalFlagValueError,
       "flag --adapter_placement=ffn: must be one of both, attention, feed_forward"),
      (["--adapter_placement=attention", "--train_mode=layer_norm"], errors.UserError,
       "--adapter_placement=attention places adapters, but the model has none"),
      (["--adapter_placement=feed_forward", "--adapter_size=0"], errors.UserError,
       "--adapter_placement=feed_forward places adapters, but the model has none")]:
    with pytest.raises(refused, match=message):
      _parse(run_classifier.define_flags, ["--do_eval"] + argv)
  with pytest.raises(errors.UserError, match="leave --do_train and --do_predict"):
    _parse(ablation.define_flags, ["--do_train"])
  assert _parse(ablation.define_flags, []).do_eval


@pytest.fixture(scope="module")
def runs(base, tmp_path_factory):
  """(placement -> output_dir of an MRPC run that trained and evaluated, bank).

  The bank holds both runs and a feed_forward task of random weights (saved as
  a run saves them: training it would only cost time here).
  """
  root = tmp_path_factory.mktemp("placement")
  bank = str(root / "bank")
  outputs = {}
  for placement in ("both", "attention"):
    out = str(root / placement)
    # A learning rate that moves the adapters well away from the identity.
    run_main(**classifier_flags(base, task_name="MRPC", data_dir=os.path.join(GLUE, "MRPC"),
                                output_dir=out, do_train=True, do_eval=True, num_train_epochs=2,
                                learning_rate=0.05, adapter_bank=bank, bank_task=placement,
                                adapter_placement=None if placement == "both" else placement))
    outputs[placement] = out
  model = modeling.BertClassifier(CONFIG, 2, AdapterConfig(M, placement="feed_forward"))
  model.ensure_built()
  checkpoint_io.load_checkpoint(model, base["init_checkpoint"])
  trained = trainable.set_trainable(model, trainable.TrainMode("adapters"))
  values = tiny_bert.random_weights({v.path: tuple(v.shape) for v in trained}, seed=7)
  for v in trained:
    v.assign(values[v.path])
  saved = adapter_weights.save_adapter_weights(model, str(root / "feed_forward"), dict(
      task="mrpc", labels=["0", "1"], is_regression=False, max_seq_length=32,
      do_lower_case=True, train_mode="adapters", global_step=4))
  adapter_bank.add_task(bank, "feed_forward", os.path.dirname(saved))
  return outputs, bank


def test_attention_task_round_trips_through_adapter_only_files(base, runs, tmp_path):
  out = runs[0]["attention"]
  with open(os.path.join(out, "run_config.json")) as f:
    recorded = json.load(f)["adapter_config"]
  assert recorded == {"size": M, "init_scale": 1e-3, "activation": "gelu",
                      "placement": "attention"}
  header = adapter_weights.read_adapter_header(os.path.join(out, "adapter_model"))
  assert header["adapter_config"] == recorded
  assert sorted(n for n in header["variables"] if "/adapters/" in n) == (
      _adapter_names("attention"))

  common = classifier_flags(base, task_name="MRPC", data_dir=os.path.join(GLUE, "MRPC"),
                            do_eval=True, adapter_checkpoint=os.path.join(out, "adapter_model"))
  run_main(**dict(common, output_dir=str(tmp_path / "eval"), adapter_placement="attention"))
  assert (read_eval_results(str(tmp_path / "eval" / "eval_results.txt")) ==
          read_eval_results(os.path.join(out, "eval_results.txt")))
  # Into a model of another placement (--adapter_placement left out): refused.
  with pytest.raises(errors.UserError, match="'placement': 'attention'"):
    _keras_model(base, "both", os.path.join(out, "adapter_model"))


def _keras_model(base, placement, adapter_model):
  model = modeling.BertClassifier(modeling.BertConfig.from_json_file(base["bert_config_file"]),
                                  2, AdapterConfig(M, placement=placement))
  model.ensure_built()
  checkpoint_io.load_checkpoint(model, base["init_checkpoint"])
  adapter_weights.load_adapter_weights(model, adapter_model)
  return model


def test_bank_serves_tasks_of_every_placement(base, runs):
  """One SavedModel's multi-task model: a missing adapter is an all-zero one."""
  bank_dir = runs[1]
  bank = adapter_bank.open_bank(bank_dir)
  tasks = bank_tasks.read_tasks(bank_dir, bank)
  assert [t.name for t in tasks] == ["attention", "both", "feed_forward"]
  assert [t.adapter_config.placement for t in tasks] == ["attention", "both", "feed_forward"]
  served = bank_tasks.read_base_weights(bank_dir, bank)
  bank_tasks.check_fingerprints(served, tasks)
  model = stacked_tasks.StackedTasksBert(served.bert_config, served.arrays, tasks)
  rng = np.random.default_rng(0)
  inputs = {"input_ids": rng.integers(0, 99, (6, 12), np.int32),
            "input_mask": (np.arange(12)[None, :] < rng.integers(3, 13, (6, 1))).astype(np.int32),
            "segment_ids": np.zeros((6, 12), np.int32)}
  task_index = np.array([0, 1, 2, 2, 1, 0], np.int32)
  logits = model(inputs, task_index).numpy()
  for i, task in enumerate(tasks):
    expected = _keras_model(base, task.name, os.path.dirname(task.path))(inputs).numpy()
    np.testing.assert_allclose(logits[task_index == i], expected[task_index == i], atol=1e-5)


def test_removing_adapters_skips_them_and_nothing_else():
  model = _model(AdapterConfig(M), randomize=True)
  full = model(_inputs()).numpy()
  # Every layer's adapters removed: the same model built without adapters.
  plain = _model(modeling.NO_ADAPTERS)
  trained = model.tf1_variable_map()
  for name, variable in plain.tf1_variable_map().items():
    variable.assign(trained[name])
  with ablation.adapters_removed(model, range(L)):
    ablated = model(_inputs()).numpy()
    traced = tf.function(lambda x: model(x))(_inputs()).numpy()
  np.testing.assert_array_equal(ablated, plain(_inputs()).numpy())
  # Traced, the same graph as the model without adapters (the graph optimizer
  # fuses differently from eager ops, so compare graph with graph).
  np.testing.assert_array_equal(traced, tf.function(lambda x: plain(x))(_inputs()).numpy())
  assert np.abs(ablated - full).max() > 1e-2  # The adapters matter.
  np.testing.assert_array_equal(model(_inputs()).numpy(), full)  # Switched back on.
  # One layer's adapters removed: as if their up-projections were zero (identity).
  with ablation.adapters_removed(model, [1]):
    one = model(_inputs()).numpy()
  for scope in ("attention_adapters", "output_adapters"):
    adapter = getattr(model.bert.transformer_layers[1], scope)
    adapter.weights2.assign(tf.zeros_like(adapter.weights2))
    adapter.biases2.assign(tf.zeros_like(adapter.biases2))
  np.testing.assert_array_equal(one, model(_inputs()).numpy())
  with pytest.raises(ValueError, match="layer 2"):
    with ablation.adapters_removed(model, [2]):
      pass


def _run_ablation(**flag_values):
  argv = ["ablation"] + [f"--{k}" if v is True else f"--{k}={v}"
                         for k, v in flag_values.items() if v is not None]
  fv = flags.FlagValues()
  ablation.define_flags(fv)
  fv(argv)
  ablation.main([], fv)


@pytest.fixture(scope="module")
def ablated(base, runs):
  out = runs[0]["both"]
  _run_ablation(**classifier_flags(base, task_name="MRPC", data_dir=os.path.join(GLUE, "MRPC"),
                                   output_dir=out))
  directory = os.path.join(out, "ablation")
  with open(os.path.join(directory, ablation.RESULTS_FILE)) as f:
    return json.load(f), directory


def test_ablation_of_no_span_is_the_full_model_and_files_agree(runs, ablated):
  result, directory = ablated
  # run_classifier.py's own eval of the trained model, digit for digit.
  assert result["full_model"] == read_eval_results(os.path.join(runs[0]["both"],
                                                                "eval_results.txt"))
  assert result["metric"] == "eval_accuracy" and result["num_layers"] == L
  assert [(s["first_layer"], s["last_layer"]) for s in result["spans"]] == [
      (0, 0), (0, 1), (1, 1)]
  for name, matrix in result["matrices"].items():
    for s in result["spans"]:
      assert matrix[s["first_layer"]][s["last_layer"]] == s["metrics"][name]
    assert matrix[1][0] is None
  assert result["matrices"]["eval_loss"][0][1] != result["full_model"]["eval_loss"]

  with open(os.path.join(directory, ablation.TABLE_FILE)) as f:
    rows = list(csv.DictReader(f))
  assert len(rows) == 1 + len(result["spans"]) and rows[0]["layers_removed"] == "0"
  assert float(rows[0]["eval_loss"]) == result["full_model"]["eval_loss"]
  assert float(rows[2]["eval_accuracy"]) == result["matrices"]["eval_accuracy"][0][1]
  with open(os.path.join(directory, ablation.HEATMAP_DATA_FILE)) as f:
    assert ablation.read_heatmap_csv(f.read()) == result["matrices"]["eval_accuracy"]
  with open(os.path.join(directory, ablation.HEATMAP_FILE), "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  image = matplotlib.image.imread(os.path.join(directory, ablation.HEATMAP_FILE))
  assert image.ndim == 3 and min(image.shape[:2]) > 100
  assert not [n for n in os.listdir(directory) if n.startswith(".")]  # No temporaries.


def test_ablating_every_layer_is_the_encoder_without_adapters(base, runs, ablated):
  """The span 0..L-1 of the command equals a model built without adapters that
  has the trained LayerNorms and head, evaluated by run_classifier's eval path."""
  result, directory = ablated
  options = model_setup.ModelOptions(adapter={"size": M}, init_checkpoint=base["init_checkpoint"])
  bert = options.read_checked_base(base["bert_config_file"], base["vocab_file"], True, 32)
  strategy = tf.distribute.get_strategy()
  trained, step = model_setup.create_model(
      strategy, lambda config, adapters: modeling.BertClassifier(config, 2, adapters),
      options, bert, runs[0]["both"])
  plain = modeling.BertClassifier(bert.bert_config, 2, modeling.NO_ADAPTERS)
  plain.ensure_built()
  names = trained.tf1_variable_map()
  for name, variable in plain.tf1_variable_map().items():
    variable.assign(names[name])
  inputs = _inputs()
  with ablation.adapters_removed(trained, range(L)):
    np.testing.assert_array_equal(trained(inputs).numpy(), plain(inputs).numpy())
  outputs = classifier_task.predict_record(
      strategy, plain, startup.RunOptions(output_dir=directory, max_seq_length=32),
      os.path.join(directory, "eval.tf_record"), RUN_FLAGS["eval_batch_size"], False)
  expected = classifier_task.eval_results("MRPC", outputs, RUN_FLAGS["eval_batch_size"], step,
                                          False)
  for name, matrix in result["matrices"].items():
    assert matrix[0][L - 1] == ablation._number(expected[name])  # pylint: disable=protected-access
