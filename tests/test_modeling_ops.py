"""The model's own ops against their formulas and against the ops TensorFlow and Keras
differentiate one by one: GELU (tanh and erf, with their derivatives, and the fused
XLA kernel of a large static shape), LayerNorm, attention (recomputed for its
gradient) and dropout (keep rate, scaling, and masks drawn from the seed generator's
state)."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from adapter_bert.model.layers import ops as modeling_ops
from adapter_bert.model import modeling
import numpy_bert
import tiny_bert
from adapter_bert.model.adapter_layers import get_activation


def test_gelu_gradient_is_the_tanh_gelu_derivative():
  x64 = np.linspace(-6.0, 6.0, 241)
  c = np.sqrt(2 / np.pi)
  t = np.tanh(c * (x64 + 0.044715 * x64 ** 3))
  by_hand = 0.5 * (1 + t) + 0.5 * x64 * (1 - t ** 2) * c * (1 + 3 * 0.044715 * x64 ** 2)
  x = tf.constant(x64, tf.float32)
  gelu = get_activation("gelu")

  @tf.function
  def value_and_gradient(x):
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = gelu(x)
    return y, tape.gradient(y, x)

  for y, dy_dx in (value_and_gradient(x), value_and_gradient.python_function(x)):
    np.testing.assert_allclose(y.numpy(), numpy_bert.gelu(x64), atol=1e-6)
    # float32: tanh rounds to -1 below x = -4.5, where the derivative is < 1e-5.
    np.testing.assert_allclose(dy_dx.numpy(), by_hand, atol=1e-5)
  with tf.GradientTape() as tape:  # Keras' own tanh GELU, differentiated op by op.
    tape.watch(x)
    y = keras.activations.gelu(x, approximate=True)
  np.testing.assert_allclose(value_and_gradient(x)[1].numpy(),
                             tape.gradient(y, x).numpy(), atol=1e-5)
  half = value_and_gradient(tf.cast(x, tf.float16))[1]
  assert half.dtype == tf.float16
  np.testing.assert_allclose(half.numpy(), by_hand, atol=2e-2)


@pytest.mark.parametrize("rows", [3, 2048])  # Below and above adapter_layers._FUSE_FROM_ELEMENTS.
def test_gelu_erf_value_and_gradient_are_the_exact_gelus(rows):
  """gelu_erf (Hugging Face BERT's "gelu"), with its derivative from the forward pass
  as BERT's gelu: the formula's values, and TensorFlow's erf GELU differentiated op by op."""
  x64 = np.random.default_rng(0).normal(0.0, 3.0, (rows, 512))
  x = tf.constant(x64, tf.float32)
  gelu_erf = get_activation("gelu_erf")

  @tf.function
  def value_and_gradient(x, exact):
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = gelu_erf(x) if exact else tf.nn.gelu(x, approximate=False)
    return y, tape.gradient(y, x)

  y, dy_dx = value_and_gradient(x, True)
  np.testing.assert_allclose(y.numpy(), numpy_bert.gelu_erf(x64), atol=1e-5)
  by_hand = (0.5 * (1 + np.vectorize(math.erf)(x64 / np.sqrt(2)))
             + x64 * np.exp(-x64 ** 2 / 2) / np.sqrt(2 * np.pi))
  np.testing.assert_allclose(dy_dx.numpy(), by_hand, atol=1e-5)
  np.testing.assert_allclose(dy_dx.numpy(), value_and_gradient(x, False)[1].numpy(), atol=1e-5)


def test_gelu_of_a_large_static_shape_is_one_xla_kernel_with_the_same_values():
  from adapter_bert.model import adapter_layers
  rows = adapter_layers._FUSE_FROM_ELEMENTS // 512
  x = tf.constant(np.random.default_rng(0).normal(0.0, 3.0, (rows, 512)), tf.float32)
  dy = tf.constant(np.random.default_rng(1).normal(size=(rows, 512)), tf.float32)

  def value_and_gradient(x):
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = adapter_layers.gelu(x)
    return y, tape.gradient(y, x, dy)

  def calls_fused(concrete):  # The XLA function is called from the step's graph.
    return any("_gelu_and_derivative" in f.signature.name
               for f in concrete.graph.as_graph_def().library.function)

  static = tf.function(value_and_gradient).get_concrete_function(x)
  dynamic = tf.function(value_and_gradient).get_concrete_function(
      tf.TensorSpec([None, 512], tf.float32))
  assert calls_fused(static) and not calls_fused(dynamic)
  x64 = x.numpy().astype(np.float64)
  c = np.sqrt(2 / np.pi)
  t = np.tanh(c * (x64 + 0.044715 * x64 ** 3))
  gradient = (0.5 * (1 + t) + 0.5 * x64 * (1 - t ** 2) * c * (1 + 3 * 0.044715 * x64 ** 2)
              ) * dy.numpy()
  # Both paths are float32 roundings of the float64 values (XLA's tanh rounds
  # differently, and keeps GELU's tail where float32 tanh is -1).
  for y, dy_dx in (static(x), dynamic(x)):
    np.testing.assert_allclose(y.numpy(), numpy_bert.gelu(x64), atol=1e-6)
    np.testing.assert_allclose(dy_dx.numpy(), gradient, atol=2e-5)


def test_layer_norm_is_keras_forward_with_a_closed_form_gradient():
  rng = np.random.default_rng(0)
  for shape in ((64, 48), (3, 20, 48)):
    x = tf.constant(rng.normal(1.0, 3.0, shape), tf.float32)
    dy = tf.constant(rng.normal(size=shape), tf.float32)
    ours, keras_own = (modeling.LayerNorm(epsilon=1e-12),
                       keras.layers.LayerNormalization(epsilon=1e-12))
    for layer in (ours, keras_own):
      layer.build((None, 48))
      layer.gamma.assign(rng.normal(size=48) if layer is ours else ours.gamma)
      layer.beta.assign(rng.normal(size=48) if layer is ours else ours.beta)

    def outputs_and_gradients(layer):
      with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
      return [y] + tape.gradient(y, [x, layer.gamma, layer.beta], dy)

    got, want = outputs_and_gradients(ours), outputs_and_gradients(keras_own)
    np.testing.assert_array_equal(got[0], want[0])  # Keras' forward ops, unchanged.
    for g, w in zip(got[1:], want[1:]):  # Keras' ops differentiated one by one.
      np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-5)
  block = modeling.TransformerBlock(modeling.BertConfig(**tiny_bert.TINY_CONFIG),
                                    modeling.NO_ADAPTERS)
  assert type(block.attention_layer_norm) is modeling.LayerNorm


def test_attention_recomputes_the_op_by_op_attention_for_its_gradient():
  rng = np.random.default_rng(1)
  q, k, v = (tf.constant(rng.normal(size=(2, 3, 6, 4)), tf.float32) for _ in range(3))
  dy = tf.constant(rng.normal(size=(2, 3, 6, 4)), tf.float32)
  padding = np.zeros((2, 1, 1, 6), np.float32)
  padding[1, ..., 4:] = -10000.0
  packed = np.where(np.array([0, 0, 0, 1, 1, 2])[:, None] == np.array([0, 0, 0, 1, 1, 2]),
                    0.0, -10000.0).astype(np.float32)[None, None].repeat(2, 0)

  def op_by_op(q, k, v, bias, dropout, training):  # TransformerBlock's ops before.
    scores = tf.matmul(q, k, transpose_b=True) * (1.0 / 2.0) + bias
    return tf.matmul(dropout(tf.nn.softmax(scores, -1), training=training), v)

  def outputs_and_gradients(fn, bias, training, seed):
    dropout = modeling.Dropout(0.3, seed=seed)

    @tf.function  # A graph, as training runs it (the recomputation's control dependency).
    def run():
      with tf.GradientTape() as tape:
        tape.watch([q, k, v])
        y = fn(q, k, v, tf.constant(bias), dropout, training)
      return [y] + tape.gradient(y, [q, k, v], dy)

    return [t.numpy() for t in run()] + [dropout.seed_generator.state.numpy()]

  for bias in (padding, packed):
    for training in (True, False):
      got = outputs_and_gradients(modeling_ops.attention, bias, training, seed=4)
      want = outputs_and_gradients(op_by_op, bias, training, seed=4)
      np.testing.assert_array_equal(got[0], want[0])  # The same ops, the same mask.
      for g, w in zip(got[1:4], want[1:4]):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
      np.testing.assert_array_equal(got[4], want[4])  # One mask drawn, as the layer's.
  # The mask is the dropout's: another seed gives other outputs and gradients.
  other = outputs_and_gradients(modeling_ops.attention, padding, True, seed=5)
  assert not np.allclose(other[3], outputs_and_gradients(op_by_op, padding, True, 4)[3])


def _dropout_outputs(rate, shape, seed=3, calls=1):
  layer = modeling.Dropout(rate, seed=seed)
  x = tf.ones(shape)
  return layer, [layer(x, training=True).numpy() for _ in range(calls)]


def test_dropout_keep_rate_and_scaling():
  # rate 0.1: drop when 16 random bits < round(0.1 * 65536) = 6554.
  keep, scale = (65536 - 6554) / 65536, 65536 / (65536 - 6554)
  _, (y,) = _dropout_outputs(0.1, [1000, 1001])  # An odd size: half a word unused.
  assert y.shape == (1000, 1001)
  assert set(np.unique(y)) == {np.float32(0.0), np.float32(scale)}
  kept = np.mean(y > 0)
  # Binomial: 5 standard deviations of the kept fraction of 1,001,000 elements.
  assert abs(kept - keep) < 5 * np.sqrt(keep * (1 - keep) / y.size), kept
  assert abs(np.mean(y) - 1.0) < 5 * scale * np.sqrt(keep * (1 - keep) / y.size)
  # Elements are independent: neighbours (the two halves of one random word)
  # are both kept with probability keep^2.
  both = np.mean((y[:, 0:-1:2] > 0) & (y[:, 1::2] > 0))
  assert abs(both - keep ** 2) < 5 * np.sqrt(keep ** 2 * (1 - keep ** 2) / (y.size / 2))
  _, (half,) = _dropout_outputs(0.5, [200_000])  # Exactly representable: keep 1/2, scale 2.
  assert set(np.unique(half)) == {0.0, 2.0}
  assert abs(np.mean(half > 0) - 0.5) < 5 * np.sqrt(0.25 / half.size)


def test_dropout_gradient_off_training_and_edge_rates():
  layer = modeling.Dropout(0.3, seed=1)
  x = tf.constant(np.random.default_rng(0).normal(size=(7, 9)), tf.float32)
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = layer(x, training=True)
  grad = tape.gradient(y, x).numpy()
  mask = grad != 0
  np.testing.assert_allclose(grad[mask], 65536 / (65536 - round(0.3 * 65536)), rtol=1e-6)
  np.testing.assert_allclose(y.numpy(), x.numpy() * grad, rtol=1e-6)
  np.testing.assert_array_equal(layer(x, training=False), x)
  np.testing.assert_array_equal(modeling.Dropout(0.0)(x, training=True), x)
  np.testing.assert_array_equal(modeling.Dropout(1.0)(x, training=True), np.zeros((7, 9)))
  with pytest.raises(ValueError, match="noise_shape"):
    modeling.Dropout(0.1, noise_shape=(1, 9))


def test_dropout_masks_follow_the_seed_generator_state():
  layer, (first, second) = _dropout_outputs(0.1, [64, 64], seed=5, calls=2)
  assert not np.array_equal(first, second)  # The state advances with each mask.
  _, (again, _) = _dropout_outputs(0.1, [64, 64], seed=5, calls=2)
  np.testing.assert_array_equal(first, again)
  # Setting the state back (what restoring a training checkpoint does) redraws.
  other = modeling.Dropout(0.1, seed=99)
  other(tf.ones([64, 64]), training=True)
  other.seed_generator.state.assign(layer.seed_generator.state.numpy())
  state = layer.seed_generator.state.numpy()
  np.testing.assert_array_equal(other(tf.ones([64, 64]), training=True),
                                layer(tf.ones([64, 64]), training=True))
  assert not np.array_equal(state, layer.seed_generator.state.numpy())
