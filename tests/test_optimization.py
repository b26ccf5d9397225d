"""Tests for optimization.py against hand-computed / NumPy references.

The same steps under MirroredStrategy (a fresh interpreter with two logical CPUs):
test_distribution.py::test_mirrored_optimizer_steps_match_one_device_with_clipping."""

import copy
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from adapter_bert.model import optimization
from optimizer_problem import batch, make_variables, scoped_variable, train_step_fn


def _bert_adam_np(p, g, m, v, lr, rate, b1=0.9, b2=0.999, eps=1e-6):
  """The original AdamWeightDecayOptimizer.apply_gradients for one variable."""
  m = b1 * m + (1.0 - b1) * g
  v = b2 * v + (1.0 - b2) * g * g
  return p - lr * (m / (np.sqrt(v) + eps) + rate * p), m, v


def _slots(opt, var):
  i = opt._get_variable_index(var)
  return opt._adam_m[i].numpy(), opt._adam_v[i].numpy()


def test_original_bert_optimizer_test():
  # google-research/bert optimization_test.py: class defaults there are
  # weight_decay_rate=0.0 and no clipping (apply_gradients is called directly).
  w = scoped_variable("w", [0.1, -0.2, -0.1])
  x = tf.constant([0.4, 0.2, -0.5])
  opt = optimization.AdamWeightDecay(
      learning_rate=0.2, weight_decay_rate=0.0, global_clipnorm=None)

  @tf.function
  def step():
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.square(x - w))
    opt.apply_gradients([(tape.gradient(loss, w), w)])

  for _ in range(100):
    step()
  np.testing.assert_allclose(w.numpy(), [0.4, 0.2, -0.5], rtol=1e-2, atol=1e-2)


def test_two_steps_match_numpy_with_per_variable_decay():
  rng = np.random.default_rng(0)
  # path -> decay rate the original would use (adapter rate 0.05, else 0.01).
  cases = {
      "bert/encoder/layer_0/output/dense/kernel": 0.01,
      "bert/encoder/layer_0/output/dense/bias": 0.0,
      "bert/encoder/layer_0/output/LayerNorm/gamma": 0.0,
      "bert/encoder/layer_0/output/adapters/weights1": 0.05,
      "bert/encoder/layer_0/output/adapters/biases1": 0.0,  # "bias" matches
      "output_weights": 0.01,
  }
  values = {k: rng.normal(size=(3, 2)).astype(np.float32) for k in cases}
  variables = {k: scoped_variable(k, values[k]) for k in cases}
  opt = optimization.AdamWeightDecay(
      learning_rate=0.1, weight_decay_rate=0.01,
      adapter_weight_decay_rate=0.05, global_clipnorm=None)
  ref = {k: (values[k], 0.0, 0.0) for k in cases}
  # Small gradients so that epsilon and the decay term both matter.
  history = [{k: rng.normal(scale=1e-3, size=(3, 2)).astype(np.float32)
              for k in cases} for _ in range(2)]
  for grads in history:
    opt.apply_gradients([(grads[k], variables[k]) for k in cases])
    ref = {k: _bert_adam_np(*ref[k][:1], grads[k], *ref[k][1:], 0.1, cases[k])
           for k in cases}
  for k, rate in cases.items():
    assert opt.decay_rate_for(variables[k].path) == rate, k
    np.testing.assert_allclose(variables[k].numpy(), ref[k][0], rtol=1e-6,
                               atol=1e-7, err_msg=k)
    m, v = _slots(opt, variables[k])
    np.testing.assert_allclose(m, ref[k][1], rtol=1e-6, err_msg=k)
    np.testing.assert_allclose(v, ref[k][2], rtol=1e-6, err_msg=k)

  # Keras' AdamW bias-corrects: a different trajectory (the test can fail).
  kernel = "bert/encoder/layer_0/output/dense/kernel"
  w = scoped_variable("kernel", values[kernel])
  adamw = keras.optimizers.AdamW(learning_rate=0.1, weight_decay=0.01,
                                 epsilon=1e-6)
  for grads in history:
    adamw.apply_gradients([(grads[kernel], w)])
  assert np.abs(w.numpy() - ref[kernel][0]).max() > 1e-3


def _adamw_np(p, g, m, v, t, lr, rate, b1=0.9, b2=0.999, eps=1e-6):
  """PyTorch's AdamW (torch.optim.AdamW's documented algorithm) for one variable,
  at its t-th update."""
  p = p * (1.0 - lr * rate)
  m = b1 * m + (1.0 - b1) * g
  v = b2 * v + (1.0 - b2) * g * g
  m_hat, v_hat = m / (1.0 - b1 ** t), v / (1.0 - b2 ** t)
  return p - lr * m_hat / (np.sqrt(v_hat) + eps), m, v


def test_bias_correction_is_adamw_and_the_original_has_none():
  """--optimizer=adamw: three steps equal PyTorch's AdamW algorithm in NumPy and
  Keras' own AdamW (epsilon made negligible: Keras adds it to sqrt(v) before the
  correction); the original's first update is 1 / sqrt(1 - 0.999) / (1 / (1 - 0.9))
  = 3.16 times larger for a constant gradient."""
  rng = np.random.default_rng(1)
  value = rng.normal(size=(4, 3)).astype(np.float32)
  grads = [rng.normal(scale=1e-2, size=(4, 3)).astype(np.float32) for _ in range(3)]
  ref = (value.astype(np.float64), 0.0, 0.0)
  w = scoped_variable("bert/encoder/layer_0/output/dense/kernel", value)
  opt = optimization.AdamWeightDecay(learning_rate=0.1, weight_decay_rate=0.01,
                                     global_clipnorm=None, bias_correction=True)
  for t, g in enumerate(grads, start=1):
    opt.apply_gradients([(g, w)])
    ref = _adamw_np(*ref[:1], g, *ref[1:], t, 0.1, 0.01)
  np.testing.assert_allclose(w.numpy(), ref[0], rtol=1e-5, atol=1e-6)

  tiny_eps = [optimization.AdamWeightDecay(learning_rate=0.1, weight_decay_rate=0.01,
                                           global_clipnorm=None, bias_correction=True,
                                           epsilon=1e-12),
              keras.optimizers.AdamW(learning_rate=0.1, weight_decay=0.01, epsilon=1e-12)]
  results = []
  for optimizer in tiny_eps:
    v = scoped_variable("bert/encoder/layer_0/output/dense/kernel", value)
    for g in grads:
      optimizer.apply_gradients([(g, v)])
    results.append(v.numpy())
  np.testing.assert_allclose(results[0], results[1], rtol=1e-5, atol=1e-6)

  first = {}
  for name, corrected in optimization.OPTIMIZERS.items():
    v = scoped_variable("w", np.zeros(3, np.float32))
    optimization.AdamWeightDecay(learning_rate=1.0, weight_decay_rate=0.0,
                                 global_clipnorm=None, epsilon=0.0,
                                 bias_correction=corrected).apply_gradients(
                                     [(np.full(3, 0.5, np.float32), v)])
    first[name] = -v.numpy()[0]
  assert first["adamw"] == pytest.approx(1.0, rel=1e-5)
  assert first["bert"] == pytest.approx(0.1 / np.sqrt(0.001), rel=1e-5)
  # The schedule's optimizer carries the name's correction, and its config keeps it.
  made = optimization.create_optimizer(1e-3, 10, 1, optimizer="adamw")
  assert made.bias_correction and not optimization.create_optimizer(1e-3, 10, 1).bias_correction
  assert optimization.AdamWeightDecay.from_config(made.get_config()).bias_correction


def test_global_norm_clipping():
  a = scoped_variable("a/kernel", np.zeros((2, 2)))
  b = scoped_variable("b/kernel", np.zeros((3,)))
  ga = np.array([[3.0, 0.0], [0.0, 4.0]], np.float32)
  gb = np.array([0.0, 12.0, 0.0], np.float32)  # global norm 13
  opt = optimization.AdamWeightDecay(learning_rate=0.1)  # clip 1.0 default
  opt.apply_gradients([(ga, a), (gb, b)])
  # m = 0.1 * clipped gradient, v = 0.001 * clipped^2.
  for var, g in ((a, ga / 13.0), (b, gb / 13.0)):
    m, v = _slots(opt, var)
    np.testing.assert_allclose(m, 0.1 * g, rtol=1e-6)
    np.testing.assert_allclose(v, 0.001 * g * g, rtol=1e-5)
  # Below the threshold nothing is scaled.
  opt = optimization.AdamWeightDecay(learning_rate=0.1)
  opt.apply_gradients([(ga / 10.0, a), (gb / 100.0, b)])
  np.testing.assert_allclose(_slots(opt, a)[0], 0.01 * ga, rtol=1e-6)


@pytest.mark.parametrize("step, expected", [
    (0, 0.0),                 # warmup starts at 0
    (4, 0.1 * 4 / 10),        # mid-warmup
    (9, 0.1 * 9 / 10),        # last warmup step
    (10, 0.1 * (1 - 10 / 100)),  # decay on the global step, not restarted
    (55, 0.1 * (1 - 55 / 100)),
    (100, 0.0),
    (150, 0.0),               # min(step, T): clipped at 0, never negative
])
def test_schedule_values(step, expected):
  schedule = optimization.WarmupLinearDecay(0.1, 100, 10)
  np.testing.assert_allclose(float(schedule(step)), expected, rtol=1e-6,
                             atol=1e-9)


def test_schedule_without_warmup_starts_at_init_lr():
  schedule = optimization.WarmupLinearDecay(0.1, 100, 0)
  np.testing.assert_allclose(float(schedule(0)), 0.1)
  np.testing.assert_allclose(float(schedule(25)), 0.075)


def test_schedule_is_read_before_iterations_increment():
  # As the original (lr from global_step, then global_step += 1): the first
  # update uses lr(0) = 0, leaving weights unchanged; the second uses lr(1).
  w = scoped_variable("w", [1.0, -2.0])
  g = np.array([0.3, 0.4], np.float32)
  opt = optimization.create_optimizer(0.1, num_train_steps=100,
                                      num_warmup_steps=10)
  opt.apply_gradients([(g, w)])
  np.testing.assert_array_equal(w.numpy(), [1.0, -2.0])
  assert int(opt.iterations.numpy()) == 1
  ref, m, v = _bert_adam_np(np.array([1.0, -2.0]), g, 0.0, 0.0, 0.0, 0.01)
  opt.apply_gradients([(g, w)])
  ref, _, _ = _bert_adam_np(ref, g, m, v, 0.1 * 1 / 10, 0.01)
  np.testing.assert_allclose(w.numpy(), ref, rtol=1e-6)


def test_slots_only_for_built_variables():
  trained = [scoped_variable("adapters/weights1", np.ones((2, 2))),
             scoped_variable("LayerNorm/gamma", np.ones((2,)))]
  scoped_variable("dense/kernel", np.ones((2, 2)))  # frozen: never passed
  opt = optimization.create_optimizer(1e-3, 10, 1)
  opt.build(trained)
  names = sorted(v.name for v in opt.variables)
  assert names == ["LayerNorm_gamma_adam_m", "LayerNorm_gamma_adam_v",
                   "adapters_weights1_adam_m", "adapters_weights1_adam_v",
                   "iteration"]


def test_config_round_trip():
  opt = optimization.create_optimizer(3e-4, 500, 50, weight_decay_rate=0.02,
                                      adapter_weight_decay_rate=0.03)
  config = opt.get_config()
  json.dumps(config)  # serializable
  # from_config replaces the schedule's dict in place: give it a copy.
  clone = optimization.AdamWeightDecay.from_config(copy.deepcopy(config))
  assert clone.get_config() == config
  assert config["adapter_weight_decay_rate"] == 0.03
  assert config["global_clipnorm"] == 1.0
  restored = keras.optimizers.deserialize(keras.optimizers.serialize(opt))
  assert isinstance(restored, optimization.AdamWeightDecay)
  assert isinstance(restored.learning_rate, tf.Tensor)  # schedule evaluated
  np.testing.assert_allclose(float(restored.learning_rate), 0.0)  # step 0
  assert restored._learning_rate.get_config() == {
      "init_lr": 3e-4, "num_train_steps": 500, "num_warmup_steps": 50}


def test_schedule_config_round_trip_gives_the_same_rates():
  schedule = optimization.WarmupLinearDecay(2e-4, 100, 10)
  config = schedule.get_config()
  assert config == {"init_lr": 2e-4, "num_train_steps": 100, "num_warmup_steps": 10}
  assert (keras.saving.get_registered_name(optimization.WarmupLinearDecay)
          == "adapter_bert>WarmupLinearDecay")
  for clone in (optimization.WarmupLinearDecay.from_config(config),
                keras.optimizers.schedules.deserialize(
                    keras.optimizers.schedules.serialize(schedule))):
    assert type(clone) is optimization.WarmupLinearDecay
    assert clone.get_config() == config
    for step in (0, 5, 9, 10, 55, 100, 150):
      assert float(clone(step)) == float(schedule(step)), step


def test_restored_optimizer_takes_the_same_steps():
  """Every hyperparameter survives serialization: the trajectories are identical."""
  # Every argument off its default, and gradient norms on both sides of the clip
  # norm, so that any argument lost in the round trip changes the result.
  opt = optimization.AdamWeightDecay(
      learning_rate=optimization.WarmupLinearDecay(0.1, 10, 2),
      weight_decay_rate=0.2, adapter_weight_decay_rate=0.5, beta_1=0.8, beta_2=0.99,
      epsilon=1e-3, exclude_from_weight_decay=("kernel",), adapter_pattern="dense/",
      global_clipnorm=5.0)
  assert (keras.saving.get_registered_name(optimization.AdamWeightDecay)
          == "adapter_bert>AdamWeightDecay")
  restored = keras.optimizers.deserialize(keras.optimizers.serialize(opt))
  rng = np.random.default_rng(3)
  grads = [[(scale * rng.normal(size=v.shape)).astype(np.float32)
            for v in make_variables()] for scale in (0.3, 10.0, 1.0, 20.0)]
  results = []
  for optimizer in (opt, restored):
    variables = make_variables()
    for step_grads in grads:
      optimizer.apply_gradients(zip(step_grads, variables))
    results.append([v.numpy() for v in variables])
  for got, want in zip(results[1], results[0]):
    np.testing.assert_array_equal(got, want)
  assert np.abs(results[0][0] - make_variables()[0].numpy()).max() > 1e-2  # It moved.


def test_rejects_keras_clipping_and_decay():
  with pytest.raises(ValueError, match="clipnorm"):
    optimization.AdamWeightDecay(0.1, clipnorm=1.0)


def test_jit_compiled_step_matches_eager():
  x, y = batch()
  results = []
  for jit in (None, True):
    variables = make_variables()
    opt = optimization.create_optimizer(0.1, num_train_steps=10,
                                        num_warmup_steps=1)
    opt.build(variables)
    step = lambda: train_step_fn(opt, variables, x, y, 8.0)
    if jit:
      step = tf.function(step, jit_compile=True)
    for _ in range(3):
      step()
    results.append([v.numpy() for v in variables])
  for eager, jitted in zip(*results):
    np.testing.assert_allclose(jitted, eager, rtol=1e-5, atol=1e-6)


def test_decay_rates_on_the_real_model_follow_the_original_names():
  """Keras paths must carry the names the decay rules look for."""
  from adapter_bert.model import modeling
  import tiny_bert
  from adapter_bert.model.adapter_layers import AdapterConfig

  model = modeling.BertClassifier(modeling.BertConfig.from_dict(tiny_bert.TINY_CONFIG), 2,
                                  AdapterConfig(size=4))
  optimizer = optimization.create_optimizer(1e-3, 10, 1, weight_decay_rate=0.01,
                                            adapter_weight_decay_rate=0.02)
  for tf1_name, variable in model.tf1_variable_map().items():
    # The original decides on its TF1 names; ours on Keras paths.
    if "LayerNorm" in tf1_name or "bias" in tf1_name:
      expected = 0.0
    elif "/adapters/" in tf1_name:
      expected = 0.02
    else:
      expected = 0.01
    assert optimizer.decay_rate_for(variable.path) == expected, (tf1_name, variable.path)
