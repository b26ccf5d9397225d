"""HyperFormer++ and shared adapters over several tasks (multitask/, run_multitask.py).

References: the formulas of Mahabadi et al. (ACL 2021), section 2 (task
projector h_I over [task; layer; position] embeddings, linear generators,
A(x) = LN_t(U(GeLU(D x))) + x), recomputed in NumPy; tests/numpy_bert.py for
the encoder; hand arithmetic for sampling proportions and parameter counts.
"""

import json
import os
import re
import shutil

import numpy as np
import pytest
import safetensors.numpy
import tensorflow as tf
from absl import flags

from adapter_bert import label_lists
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import run_checkpoints
from adapter_bert import errors
from adapter_bert.model import modeling
from adapter_bert.multitask import accounting
from adapter_bert.multitask import sampling
from adapter_bert.multitask.hypernetwork import AdapterHyperNetwork, HyperFormerConfig
from adapter_bert.multitask import model as multitask_model
from adapter_bert.multitask.model import MultiTaskClassifier, TaskHead
from adapter_bert.serving import multitask_run
import numpy_bert
from adapter_bert.model import optimization
import run_harness
from run_harness import GLUE, MULTITASK_TASKS, TINY_HYPER, multitask_flags
import run_multitask
from adapter_bert.cli import multitask_flags as multitask_cli
from adapter_bert.multitask import tasks as multitask_tasks
import tiny_bert

TASK_NAMES = ("mrpc", "sst-2", "sts-b", "tsv_example")


def run_main(**flag_values):
  """run_multitask.main with these flags, as run_harness.run_main runs run_classifier.py."""
  return run_harness.run_main(script=run_multitask, **flag_values)


@pytest.fixture(scope="module")
def hyperformer_run(base, tmp_path_factory):
  out = str(tmp_path_factory.mktemp("hyperformer"))
  logs = run_main(**multitask_flags(base, multitask_adapters="hyperformer", do_train=True,
                                    do_eval=True, do_predict=True, output_dir=out))
  return out, logs


def _tiny_config():
  return modeling.BertConfig.from_dict(tiny_bert.TINY_CONFIG)


def _heads():
  return [TaskHead("a", ("x", "y")), TaskHead("b", ("p", "q", "r")),
          TaskHead("c", (), is_regression=True)]


def _hyper_model(seed=0, **config):
  tf.keras.utils.set_random_seed(seed)
  model = MultiTaskClassifier(_tiny_config(), _heads(), "hyperformer",
                              hyperformer_config=HyperFormerConfig(adapter_size=4,
                                                                   **TINY_HYPER, **config))
  model.ensure_built()
  return model


def _generated_in_numpy(model, task):
  """Section 2 of the paper in NumPy: I = h_I([z_t; l_i; p_j]), then the linear generators."""
  w = {n: np.asarray(v, np.float64) for n, v in model.tf1_variable_map().items()
       if n.startswith("hyperformer/")}
  dense = lambda x, name: x @ w[f"hyperformer/{name}/kernel"] + w[f"hyperformer/{name}/bias"]
  h, m = model.config.hidden_size, model.hyperformer_config.adapter_size
  shapes = {"weights1": (h, m), "biases1": (m,), "weights2": (m, h), "biases2": (h,),
            "gamma": (h,), "beta": (h,)}
  out = {}
  for i in range(model.config.num_hidden_layers):
    for j, scope in enumerate(("attention/output", "output")):
      x = np.concatenate([w["hyperformer/task_embeddings"][task],
                          w["hyperformer/layer_embeddings"][i],
                          w["hyperformer/position_embeddings"][j]])
      projected = dense(np.maximum(dense(x, "projector_hidden"), 0.0), "projector_output")
      for name, shape in shapes.items():
        key = f"LayerNorm/{name}" if name in ("gamma", "beta") else name
        out[f"bert/encoder/layer_{i}/{scope}/adapters/{key}"] = (
            dense(projected, f"{name}_generator").reshape(shape))
  return out


def test_generated_weights_follow_the_paper_and_differ_by_task_layer_and_position():
  model = _hyper_model()
  h, m = model.config.hidden_size, 4
  for task in range(3):
    generated = model.generate_adapters(task)
    expected = _generated_in_numpy(model, task)
    assert sorted(generated) == sorted(expected)
    for name, value in generated.items():
      # Biases [1, m] as an adapter layer's (adapter-bert's shapes).
      want = expected[name][None] if "/biases" in name else expected[name]
      np.testing.assert_allclose(value, want, rtol=1e-4, atol=1e-7)
  g = model.generate_adapters(0)
  assert g["bert/encoder/layer_0/attention/output/adapters/weights1"].shape == (h, m)
  assert g["bert/encoder/layer_0/attention/output/adapters/biases1"].shape == (1, m)
  assert g["bert/encoder/layer_0/output/adapters/weights2"].shape == (m, h)
  assert g["bert/encoder/layer_1/output/adapters/LayerNorm/gamma"].shape == (h,)
  # One hypernetwork, different weights for every task, layer and position.
  key = "bert/encoder/layer_{}/{}/adapters/weights1"
  variants = [model.generate_adapters(t)[key.format(i, s)]
              for t in range(3) for i in range(2) for s in ("attention/output", "output")]
  for a in range(len(variants)):
    for b in range(a):
      assert np.abs(variants[a] - variants[b]).max() > 1e-6
  # Near the identity at initialisation, as a Houlsby adapter at init scale 1e-3.
  assert np.abs(g[key.format(0, "output")]).max() < 0.05


def test_hyperformer_forward_matches_numpy_bert_with_the_generated_adapters():
  model = _hyper_model(seed=3)
  # Larger hypernetwork weights, so that the adapters change the output measurably.
  for name, v in model.tf1_variable_map().items():
    if name.startswith("hyperformer/") and name.endswith("_generator/kernel"):
      v.assign(v * 300.0)
  rng = np.random.default_rng(0)
  ids = rng.integers(1, 99, size=(3, 7)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 5:] = 0
  segments = np.zeros_like(ids)
  segments[:, 4:] = 1
  weights = {n: v.numpy() for n, v in model.tf1_variable_map().items()}
  _, plain = numpy_bert.bert_forward(weights, 2, ids, mask, segments)
  for task in range(3):
    inputs = dict(input_ids=ids, input_mask=mask, segment_ids=segments,
                  task_index=np.full([3], task, np.int32))
    logits = model(inputs, training=False)["logits"].numpy()
    w = dict(weights, **model.generate_adapters(task))
    _, pooled = numpy_bert.bert_forward(w, 2, ids, mask, segments)
    head = _heads()[task].num_outputs
    expected = pooled @ weights["multitask/output_weights"][task, :head].T + \
        weights["multitask/output_bias"][task, :head]
    np.testing.assert_allclose(logits[:, :head], expected, rtol=1e-4, atol=1e-5)
    assert (logits[:, head:] == -1e9).all()  # Padded classes masked.
    assert np.abs(pooled - plain).max() > 1e-3  # The adapters did something.


def test_shared_adapters_forward_matches_numpy_bert():
  tf.keras.utils.set_random_seed(0)
  model = MultiTaskClassifier(_tiny_config(), _heads(), "shared",
                              adapter_config=modeling.AdapterConfig(size=4, init_scale=0.5))
  model.ensure_built()
  ids = np.array([[5, 6, 7, 8]], np.int32)
  ones = np.ones_like(ids)
  weights = {n: v.numpy() for n, v in model.tf1_variable_map().items()}
  _, pooled = numpy_bert.bert_forward(weights, 2, ids, ones, ones * 0)
  logits = model(dict(input_ids=ids, input_mask=ones, segment_ids=ones * 0,
                      task_index=np.array([1], np.int32)))["logits"].numpy()
  expected = pooled @ weights["multitask/output_weights"][1].T + weights["multitask/output_bias"][1]
  np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("sizes,temperature,expected", [
    ([100, 400], 1.0, [0.2, 0.8]),
    ([100, 400], 2.0, [1 / 3, 2 / 3]),  # sqrt: 10 and 20.
    ([1, 8, 27], 3.0, [1 / 6, 2 / 6, 3 / 6]),  # cube roots: 1, 2, 3.
    ([10, 10000], float("inf"), [0.5, 0.5]),
    ([10 ** 9, 1], 0.01, [1.0, 0.0]),  # No overflow at low temperature.
])
def test_task_probabilities(sizes, temperature, expected):
  np.testing.assert_allclose(sampling.task_probabilities(sizes, temperature), expected,
                             atol=1e-12)


def test_sampled_batches_have_the_expected_proportions():
  sizes, temperature = [50, 200, 800], 2.0
  p = sampling.task_probabilities(sizes, temperature)  # sqrt: 7.07, 14.1, 28.3.
  np.testing.assert_allclose(p, np.sqrt(sizes) / np.sqrt(sizes).sum())
  datasets = [tf.data.Dataset.from_tensors(tf.fill([4], t)).repeat() for t in range(3)]
  draws = 20000
  # Each batch's task (its first element), read 5,000 at a time.
  tasks = np.concatenate(list(sampling.sample_batches(datasets, p, seed=7).take(draws)
                              .map(lambda b: b[0]).batch(5000).as_numpy_iterator()))
  assert tasks.shape == (draws,)
  frequencies = np.bincount(tasks, minlength=3) / draws
  # Within 4 binomial standard deviations.
  np.testing.assert_array_less(np.abs(frequencies - p), 4 * np.sqrt(p * (1 - p) / draws))
  again = [int(b[0]) for b in sampling.sample_batches(datasets, p, seed=7)
           .take(200).as_numpy_iterator()]
  assert again == list(tasks[:200])  # Seeded: a resumed run skips the same stream.


def test_optimizer_leaves_rows_of_tasks_not_in_the_batch_alone():
  rows = tf.Variable(np.ones([3, 2], np.float32), name="rows")
  dense = tf.Variable(np.ones([3, 2], np.float32), name="dense")
  opt = optimization.AdamWeightDecay(1e-1, weight_decay_rate=0.01, global_clipnorm=None,
                                     task_row_variables=["rows"])
  opt.build([rows, dense])
  grad = tf.constant([[0.0, 0.0], [1.0, -1.0], [0.0, 0.0]])
  opt.apply_gradients([(grad, rows), (grad, dense)])
  opt.apply_gradients([(grad * 0.0, rows), (grad * 0.0, dense)])
  r, d = rows.numpy(), dense.numpy()
  np.testing.assert_array_equal(r[[0, 2]], 1.0)  # Untouched: no decay, no momentum.
  assert (d[[0, 2]] < 1.0).all()  # A plain variable decays.
  # The sampled row: step 1 from the gradient, step 2 from momentum (the row
  # had no gradient then, so it stayed, as its task was not in the batch).
  m = 0.1 * np.array([1.0, -1.0])
  v = 0.001 * np.array([1.0, 1.0])
  expected = 1.0 - 0.1 * (m / (np.sqrt(v) + 1e-6) + 0.01 * 1.0)
  np.testing.assert_allclose(r[1], expected, rtol=1e-5)


def test_parameter_accounting_by_hand():
  model = _hyper_model()
  from adapter_bert.runtime import trainable
  trainable.set_trainable(model, trainable.TrainMode("head"))
  c = tiny_bert.TINY_CONFIG
  h, L, V, P, T, I = (c["hidden_size"], c["num_hidden_layers"], c["vocab_size"],
                      c["max_position_embeddings"], c["type_vocab_size"], c["intermediate_size"])
  base = (V + P + T) * h + 2 * h + L * (4 * (h * h + h) + 2 * (h * I) + I + h + 4 * h) + h * h + h
  e, k, t, m = 8, 16, 8, 4  # TINY_HYPER and the adapter size.
  # Task (3), layer (2) and position (2) embeddings, the projector's two layers.
  hyper = 3 * e + L * e + 2 * e + (3 * e * k + k) + (k * t + t)
  generators = sum(t * n + n for n in (h * m, m, m * h, h, h, h))
  heads = 2 * (h + 1) + 3 * (h + 1) + 1 * (h + 1)  # Padding not counted.
  counts = accounting.parameter_accounting(model)
  assert counts["base"] == base
  assert counts["trained"] == hyper + generators + heads
  assert counts["total"] == base + hyper + generators + heads
  assert counts["hypernetwork"] == hyper + generators
  assert counts["trained_per_task"] == pytest.approx((hyper + generators + heads) / 3)
  assert counts["total_multiple"] == pytest.approx(1 + (hyper + generators + heads) / base)


def test_training_changes_only_the_hypernetwork_task_embeddings_and_heads(tmp_path):
  from adapter_bert.runtime import loop
  from adapter_bert.runtime import trainable
  model = _hyper_model(seed=2)
  trainable.set_trainable(model, trainable.TrainMode("head"))
  before = {n: v.numpy().copy() for n, v in model.tf1_variable_map().items()}
  rng = np.random.default_rng(0)

  def batches(task):
    features = dict(input_ids=rng.integers(1, 99, size=(16, 4, 6)).astype(np.int32),
                    input_mask=np.ones((16, 4, 6), np.int32),
                    segment_ids=np.zeros((16, 4, 6), np.int32),
                    task_index=np.full((16, 4), task, np.int32))
    labels = rng.integers(0, 2, size=(16, 4)).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices((features, labels)).repeat()
  # Tasks 0 and 2 only: task 1's rows must not move.
  dataset = sampling.sample_batches([batches(0), batches(2)], [0.5, 0.5], seed=1)
  settings = loop.TrainSettings(output_dir=str(tmp_path), train_batch_size=4,
                                num_train_steps=6, num_warmup_steps=0, learning_rate=1e-2)
  loop.train(tf.distribute.get_strategy(), model, multitask_model.loss_fn(_heads()), dataset,
             settings)
  after = {n: v.numpy() for n, v in model.tf1_variable_map().items()}
  changed = {n for n in before if not np.array_equal(before[n], after[n])}
  assert changed and all(n.startswith(("hyperformer/", "multitask/")) for n in changed)
  assert "hyperformer/weights1_generator/kernel" in changed
  assert "hyperformer/projector_hidden/kernel" in changed
  assert "hyperformer/task_embeddings" in changed
  for name in ("hyperformer/task_embeddings", "multitask/output_weights",
               "multitask/output_bias"):
    np.testing.assert_array_equal(after[name][1], before[name][1], err_msg=name)
    assert not np.array_equal(after[name][0], before[name][0]), name
  # The layer and position embeddings are shared by every task and train too.
  assert "hyperformer/layer_embeddings" in changed


def test_run_trains_only_the_hypernetwork_and_heads(base, hyperformer_run):
  out, logs = hyperformer_run
  # The encoder is bit-identical to the base checkpoint after training.
  model_file = os.path.join(out, "adapter_model", adapter_weights.WEIGHTS_FILE)
  header = adapter_weights.read_adapter_header(model_file)
  assert header["variables"] and all(not n.startswith("bert/") for n in header["variables"])
  fresh = _fresh_model_from(out, base)
  for name, variable in fresh.tf1_variable_map().items():
    if name.startswith("bert/"):
      np.testing.assert_array_equal(variable.numpy(), base["weights"][name], err_msg=name)
  trained = [n for n, v in fresh.tf1_variable_map().items() if v.trainable]
  assert trained and all(n.startswith(("hyperformer/", "multitask/")) for n in trained)
  # Every task evaluated into its own directory, and their summary.
  for task in TASK_NAMES:
    assert os.path.exists(os.path.join(out, task, "eval_results.txt"))
    assert os.path.exists(os.path.join(out, task, "test_results.tsv"))
  summary = open(os.path.join(out, "eval_results.txt")).read()
  assert "mrpc/eval_accuracy" in summary and "sts-b/eval_pearson" in summary
  assert any(line.startswith("***** Parameters for 4 Tasks") for line in logs)
  assert any("sampled with probability 0.2500" in line for line in logs)


def _fresh_model_from(out, base):
  """The run's model restored the way run_multitask does (its latest checkpoint)."""
  from adapter_bert.runtime import model_setup
  fv = flags.FlagValues()
  run_multitask.define_flags(fv)
  fv(["x"] + [f"--{k}={v}" for k, v in multitask_flags(base, multitask_adapters="hyperformer",
                                                 output_dir=out, do_eval=True).items()])
  tasks = [t.head() for t in multitask_tasks.tasks_from_flags(
      fv.task_name, fv.data_dir, fv.text_a_column, fv.text_b_column, fv.label_column)]
  settings = multitask_cli.settings(fv)
  options = multitask_cli.model_options(settings)
  base_encoder = options.read_checked_base(fv.bert_config_file, fv.vocab_file, True, 32)
  model, _ = model_setup.create_model(
      tf.distribute.get_strategy(), lambda bert, adapters: MultiTaskClassifier(
          bert, tasks, "hyperformer", adapters, multitask_cli.hyperformer_config(settings)),
      options, base_encoder, out)
  return model


def test_adapter_model_round_trip_reproduces_every_tasks_predictions(base, hyperformer_run,
                                                                     tmp_path):
  out, _ = hyperformer_run
  again = str(tmp_path / "eval_only")
  adapters = os.path.join(out, "adapter_model")
  # No model flags: the adapter file gives the type, the sizes and HyperFormer++'s widths.
  recorded = dict(multitask_adapters=None, adapter_size=None,
                  **{k: None for k in TINY_HYPER})
  run_main(**multitask_flags(base, do_predict=True, do_eval=True, adapter_checkpoint=adapters,
                             output_dir=again, eval_predictions=True, **recorded))
  for task in TASK_NAMES:
    assert open(os.path.join(again, task, "test_results.tsv")).read() == \
        open(os.path.join(out, task, "test_results.tsv")).read(), task
    # The same numbers, each naming the weights evaluated: the adapter file, the
    # trained run's last checkpoint (a task's file is in a directory of its own).
    evaluated, trained = (open(os.path.join(d, task, "eval_results.txt")).read().splitlines()
                          for d in (again, out))
    assert evaluated[1:] == trained[1:], task
    assert evaluated[0] == "checkpoint_path = " + adapters
    assert trained[0] == "checkpoint_path = " + run_checkpoints.latest(out)
  assert open(os.path.join(again, "eval_results.txt")).read().startswith(
      "checkpoint_path = " + adapters + "\n")
  _check_eval_predictions(again)
  assert not os.path.exists(os.path.join(out, TASK_NAMES[0], "eval_predictions.tsv"))
  # A flag that contradicts the file is refused, naming both.
  with pytest.raises(errors.UserError) as e:
    run_main(**multitask_flags(base, do_eval=True, adapter_checkpoint=adapters,
                               output_dir=str(tmp_path / "refused"),
                               **dict(recorded, adapter_size=16)))
  assert str(e.value) == (f"--adapter_size=16: the adapters at {adapters} were trained with "
                          "adapter_size 8; leave --adapter_size out to take it from them")


def _assert_same_task_results(got_dir, want_dir):
  """Each task's test_results.tsv and eval_results.txt values equal to 1e-5."""
  for task in TASK_NAMES:
    np.testing.assert_allclose(
        np.loadtxt(os.path.join(got_dir, task, "test_results.tsv"), ndmin=2),
        np.loadtxt(os.path.join(want_dir, task, "test_results.tsv"), ndmin=2), atol=1e-5)
    want, got = (dict(line.split(" = ") for line in open(
        os.path.join(d, task, "eval_results.txt")).read().splitlines())
                 for d in (want_dir, got_dir))
    assert got.keys() == want.keys()
    for key in set(want) - {"checkpoint_path"}:  # The weights' paths: tested on their own.
      assert float(got[key]) == pytest.approx(float(want[key]), abs=1e-5), (task, key)


def _check_eval_predictions(out):
  """Each task's eval_predictions.tsv, one row per dev example in the dev set's
  order, gives the task's eval_results.txt: accuracy of the argmax against the dev
  labels, Pearson's r of the scores (STS-B)."""
  tasks = multitask_tasks.tasks_from_flags(
      MULTITASK_TASKS["task_name"].split(","), MULTITASK_TASKS["data_dir"].split(","),
      ["sentence"], None, ["label"])
  for task in tasks:
    dev = task.processor.get_dev_examples(task.data_dir)
    predictions = np.loadtxt(os.path.join(out, task.name, "eval_predictions.tsv"), ndmin=2)
    assert predictions.shape[0] == len(dev), task.name
    results = dict(line.split(" = ") for line in open(
        os.path.join(out, task.name, "eval_results.txt")).read().splitlines())
    if task.is_regression:
      r = np.corrcoef(predictions[:, 0], [float(e.label) for e in dev])[0, 1]
      assert r == pytest.approx(float(results["eval_pearson"]), abs=1e-5), task.name
    else:
      labels = task.processor.get_labels()
      right = predictions.argmax(axis=1) == [labels.index(e.label) for e in dev]
      assert right.mean() == pytest.approx(float(results["eval_accuracy"]), abs=1e-6), task.name


def test_padding_to_the_maximum_gives_the_same_results(base, hyperformer_run, tmp_path):
  # The trained run padded each batch to its longest example, as by default.
  out, _ = hyperformer_run
  again = str(tmp_path / "padded")
  run_main(**multitask_flags(base, multitask_adapters="hyperformer", do_predict=True,
                             do_eval=True, adapter_checkpoint=os.path.join(out, "adapter_model"),
                             output_dir=again, pad_to_max_seq_length=True))
  _assert_same_task_results(again, out)


def test_packed_evaluation_and_prediction_give_the_same_results(base, hyperformer_run,
                                                                tmp_path, caplog):
  # Each task's examples packed apart (a row, and so a batch, holds one task's).
  out, _ = hyperformer_run
  packed = str(tmp_path / "packed")
  with caplog.at_level("INFO"):
    run_main(**multitask_flags(base, multitask_adapters="hyperformer", do_predict=True,
                               do_eval=True, eval_predictions=True,
                               adapter_checkpoint=os.path.join(out, "adapter_model"),
                               output_dir=packed, pack_sequences=True))
  counts = [(int(a), int(b)) for a, b in re.findall(r"packed (\d+) examples into (\d+) rows",
                                                     caplog.text)]
  assert counts and any(examples > rows for examples, rows in counts)
  _assert_same_task_results(packed, out)
  _check_eval_predictions(packed)  # One row per dev example, in the dev set's order.


def test_shared_adapters_run(base, tmp_path):
  out = str(tmp_path / "shared")
  logs = run_main(**multitask_flags(base, multitask_adapters="shared", do_train=True, do_eval=True,
                                    output_dir=out, num_train_epochs=1))
  header = adapter_weights.read_adapter_header(
      os.path.join(out, "adapter_model", adapter_weights.WEIGHTS_FILE))
  names = header["variables"]
  assert any("/adapters/" in n for n in names) and any("LayerNorm" in n for n in names)
  assert not any(n.startswith("hyperformer/") for n in names)
  assert any(line == "***** Adapter Parameters = %d *****" % (
      2 * 2 * (2 * 32 * 8 + 8 + 32)) for line in logs)
  for task in TASK_NAMES:
    assert os.path.exists(os.path.join(out, task, "eval_results.txt"))


@pytest.mark.parametrize("overrides,message", [
    (dict(data_dir="a,b"), "names 4 tasks but --data_dir gives 2"),
    (dict(multitask_adapters="hyperformer", train_mode="adapters"),
     "train_mode=adapters, multitask_adapters=hyperformer: must be head or layer_norm"),
    (dict(multitask_adapters="shared", train_mode="head"), "must be adapters"),
    (dict(task_name="mrpc,mrpc", data_dir=f"{GLUE}/MRPC,{GLUE}/MRPC"),
     "two tasks are named 'mrpc'"),
    (dict(task_name="tsv,tsv", data_dir="x/a,x/b", text_a_column="s,t,u"),
     "--text_a_column has 3 values for 2 tsv tasks"),
    (dict(task_name="mrpc,nope", data_dir="a,b"), "unknown task 'nope'"),
])
def test_bad_flags_are_one_clear_error(base, tmp_path, overrides, message):
  out = tmp_path / "out"
  with pytest.raises(errors.UserError, match=message.replace("(", r"\(")):
    run_main(**multitask_flags(base, do_train=True, output_dir=str(out), **overrides))
  assert not out.exists()


def test_hypernetwork_round_trips_through_keras_config():
  model = _hyper_model()
  layer = model.hypernetwork
  clone = AdapterHyperNetwork.from_config(layer.get_config())
  clone.build()
  for a, b in zip(clone.weights, layer.weights):
    a.assign(b)
  for x, y in zip(tf.nest.flatten(clone(tf.constant(1))), tf.nest.flatten(layer(tf.constant(1)))):
    np.testing.assert_array_equal(x.numpy(), y.numpy())


@pytest.mark.parametrize("generator,task", [(1e-2, 1.0), (0.1, 0.05)])
def test_initial_scales_are_the_configured_ones(generator, task):
  # The authors' scales by default (N(0, 0.01^2) kernels, N(0, 1) embeddings);
  # the spread study sets them. Std over 1,000s of draws: within 10%.
  config = HyperFormerConfig(adapter_size=4, task_embedding_dim=32, projector_hidden_dim=32,
                             projected_dim=16, generator_init_stddev=generator,
                             task_embedding_init_stddev=task)
  if (generator, task) == (1e-2, 1.0):
    assert config == HyperFormerConfig(adapter_size=4, task_embedding_dim=32,
                                       projector_hidden_dim=32, projected_dim=16)
  layer = AdapterHyperNetwork(config, num_tasks=50, num_layers=2, hidden_size=24)
  layer.build()
  for kernel in (layer.projector_hidden.kernel, layer.projector_output.kernel,
                 layer.generators["weights1"].kernel):
    assert np.std(kernel.numpy()) == pytest.approx(generator, rel=0.1)
  assert np.std(layer.task_embeddings.numpy()) == pytest.approx(task, rel=0.1)
  assert np.std(layer.layer_embeddings.numpy()) == pytest.approx(1.0, rel=0.5)
  # Saved with the model; a config saved before these fields reads as the defaults.
  assert HyperFormerConfig.from_dict(config.to_dict()) == config
  old = {k: v for k, v in config.to_dict().items() if "stddev" not in k}
  assert HyperFormerConfig.from_dict(old).generator_init_stddev == 1e-2
  with pytest.raises(ValueError, match="generator_init_stddev must be a positive number"):
    HyperFormerConfig(generator_init_stddev=0.0)


def test_a_resume_with_another_sampling_temperature_is_refused(base, hyperformer_run, tmp_path):
  """As every recorded setting (tests/test_resume_settings.py): the batches' tasks
  would be drawn otherwise from the checkpoint's step on."""
  out = str(tmp_path / "out")
  shutil.copytree(hyperformer_run[0], out)
  with open(os.path.join(out, "run_config.json")) as f:
    config = f.read()
  with pytest.raises(errors.UserError, match=(
      r"^--sampling_temperature: .* trained with sampling_temperature=10\.0 \(see .*\), "
      r"not 1\.0; ")):
    run_main(**multitask_flags(base, multitask_adapters="hyperformer", do_train=True,
                               output_dir=out, sampling_temperature=1))
  with open(os.path.join(out, "run_config.json")) as f:
    assert f.read() == config


def test_the_tasks_labels_are_checked_by_the_one_owner(base, hyperformer_run, tmp_path):
  """A task's labels recorded otherwise, or twice: refused in one line by their one
  owner (label_lists.check_recorded_labels), resuming the run (its run_config.json's
  tasks) and serving it (serving/multitask_run.read_run: the adapter file's tasks
  against run_config.json's)."""
  out = str(tmp_path / "out")
  shutil.copytree(hyperformer_run[0], out)
  config_path = os.path.join(out, "run_config.json")
  with open(config_path) as f:
    config = json.load(f)
  task = next(t for t in config["tasks"] if len(t["labels"]) > 1)
  labels = list(task["labels"])
  task["labels"] = labels[::-1]
  with open(config_path, "w") as f:
    json.dump(config, f)
  with pytest.raises(errors.UserError) as e:
    run_main(**multitask_flags(base, multitask_adapters="hyperformer", do_train=True,
                               output_dir=out))
  assert str(e.value) == (
      f"{config_path}: task {task['name']!r} of this run gives the labels {labels!r}, but "
      f"the run whose checkpoints {out} holds has {labels[::-1]!r} (label ids are "
      f"positions): give the same labels in the same order, or use a fresh --output_dir")

  weights = os.path.join(out, "adapter_model", adapter_weights.WEIGHTS_FILE)
  with pytest.raises(errors.UserError) as e:
    multitask_run.read_run(out)
  assert str(e.value) == (
      f"{weights}: task {task['name']!r} of {config_path} (another run's weights?) gives "
      f"the labels {labels[::-1]!r}, but its metadata has {labels!r} (label ids are "
      f"positions): serve the run whose adapter_model this is")

  # The adapter file's record of a task with a label twice.
  shutil.copy(os.path.join(hyperformer_run[0], "run_config.json"), config_path)
  path, header, arrays = adapter_weights.read_adapter_file(weights)
  recorded = next(t for t in header["metadata"]["tasks"] if t["name"] == task["name"])
  recorded["labels"] = [labels[0]] * len(labels)
  with open(weights, "wb") as f:
    f.write(safetensors.numpy.save(arrays, metadata={"header": json.dumps(header)}))
  with pytest.raises(errors.UserError) as e:
    multitask_run.read_run(out)
  assert str(e.value) == (
      f"{path}: task {task['name']!r} of its metadata: label {labels[0]!r} is given twice "
      f"in {recorded['labels']!r}: each label names one class")
