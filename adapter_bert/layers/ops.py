"""Three Keras layers BERT is made of, each faster than Keras' own on a CPU.

modeling.py re-exports them (modeling.Dropout, modeling.TokenDense, modeling.LayerNorm).
"""

import keras
import tensorflow as tf

from adapter_layers import KERAS_PACKAGE as _PACKAGE


@keras.saving.register_keras_serializable(package=_PACKAGE)
class Dropout(keras.layers.Dropout):
  """keras.layers.Dropout with masks drawn from 16 random bits an element.

  An element is kept when its 16 bits, read as an integer, are at least
  k = round(rate * 2^16): kept with probability (2^16 - k) / 2^16 and scaled
  by the inverse of that, so the expected output is the input exactly (the
  keep probability is within 2^-17 of 1 - rate: 0.1 drops 6554 / 65536 =
  0.100006). One 32-bit random word gives two elements' bits, where Keras'
  Dropout draws a float32 per element: twice the random numbers. Dropout was
  about 10% of an adapter-training step on a CPU; this saves about half of
  that (benchmarks/README.md, "Per-op work"). `noise_shape` is not supported.
  The random state is Keras' (`seed_generator`, the variable that training
  checkpoints keep), so a resumed run draws the same masks; each replica of a
  strategy folds its id into the seed (`_replica_seed`) for masks of its own.
  """

  def __init__(self, rate, noise_shape=None, **kwargs):
    if noise_shape is not None:
      raise ValueError("modeling.Dropout draws one mask bit an element: no noise_shape")
    super().__init__(rate, **kwargs)

  def call(self, inputs, training=False):
    if not training or self.rate <= 0:
      return inputs
    if self.rate >= 1:
      return tf.zeros_like(inputs)
    threshold = int(round(self.rate * _DROPOUT_LEVELS))
    size = tf.size(inputs)
    seed = tf.cast(tf.math.floormod(self.seed_generator.next(), tf.int32.max - 1), tf.int32)
    seed = _replica_seed(seed)
    words = tf.random.stateless_uniform([(size + 1) // 2], seed, minval=None, maxval=None,
                                        dtype=tf.uint32)
    bits = tf.reshape(tf.bitcast(words, tf.uint16), [-1])[:size]
    keep = tf.reshape(bits >= tf.constant(threshold, tf.uint16), tf.shape(inputs))
    scale = _DROPOUT_LEVELS / (_DROPOUT_LEVELS - threshold)
    return inputs * (tf.cast(keep, inputs.dtype) * scale)


_DROPOUT_LEVELS = 2 ** 16  # The values 16 random bits take.


def _replica_seed(seed: tf.Tensor) -> tf.Tensor:
  """`seed` with the replica's id folded in, so that each replica of a strategy
  (each TPU core) draws its own masks from the random state they share: the
  replica's own, and the same on a rerun. Replica 0 (and one device) keeps
  `seed` itself: its masks are those of a run without a strategy."""
  context = tf.distribute.get_replica_context()
  if context is None or context.num_replicas_in_sync == 1:
    return seed
  replica = tf.cast(context.replica_id_in_sync_group, tf.int32)
  folded = tf.cast(tf.random.experimental.stateless_fold_in(seed, replica), tf.int32)
  return tf.where(tf.equal(replica, 0), seed, folded)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class TokenDense(keras.layers.Dense):
  """keras.layers.Dense over a [tokens, features] matrix, with a fused bias add.

  Dense's own MatMul + AddV2 becomes MatMul + BiasAdd, which TensorFlow's graph
  optimizer fuses into one kernel (with the activation where it can).
  """

  def call(self, inputs, training=None):
    del training
    y = tf.matmul(inputs, self.kernel)
    if self.bias is not None:
      y = tf.nn.bias_add(y, self.bias)
    return self.activation(y) if self.activation is not None else y


@keras.saving.register_keras_serializable(package=_PACKAGE)
class LayerNorm(keras.layers.LayerNormalization):
  """keras.layers.LayerNormalization over the last axis, with its gradient written out.

  The forward pass is Keras' own, op for op (the same float32 results). The
  backward pass is the closed form, dx = s (g - mean(g) - x^ mean(g x^)) with
  g = dy gamma, x^ = (x - mean) s and s = 1 / sqrt(var + epsilon), recomputing
  x^ from x: it keeps x and two [..., 1] statistics for the backward pass where
  differentiating Keras' ops one by one keeps two more tensors of x's shape, and
  runs about 13 element-wise passes instead of about 20: a [2048, 384]
  LayerNorm's forward and backward take 0.69x the time; the adapter step took
  0.84x and 0.98x in two interleaved runs, with 28-40 MiB less peak RSS
  (benchmarks/README.md, "One step, op by op"). The gradient differs from
  the op-by-op one by float32 rounding only (relative 1e-6). Any other axis,
  or rms_scaling, is Keras' own.
  """

  def call(self, inputs):
    if self.rms_scaling or not (self.center and self.scale) or list(self.axis) not in (
        [-1], [len(inputs.shape) - 1]):
      return super().call(inputs)
    # As keras.ops.layer_normalization: at least float32 inside.
    dtype = keras.backend.result_type(inputs.dtype, "float32")
    x = tf.cast(inputs, dtype)
    outputs = _layer_norm(x, tf.cast(self.gamma, dtype), tf.cast(self.beta, dtype),
                          self.epsilon)
    return tf.cast(outputs, self.compute_dtype)


def _layer_norm(x, gamma, beta, epsilon: float):
  """Keras' layer normalization over the last axis (ops.nn._layer_normalization)."""

  @tf.custom_gradient
  def normalize(x, gamma, beta):
    mean, variance = tf.nn.moments(x, [-1], keepdims=True)
    scale = tf.math.rsqrt(variance + epsilon)
    inv = scale * gamma
    outputs = x * inv + (-mean * inv + beta)

    def grad(dy):
      with tf.name_scope("LayerNorm_gradient"):  # Named for benchmarks/op_profile.py.
        normalized = (x - mean) * scale
        g = dy * gamma
        dx = scale * (g - tf.reduce_mean(g, -1, keepdims=True)
                      - normalized * tf.reduce_mean(g * normalized, -1, keepdims=True))
        axes = list(range(len(x.shape) - 1))
        return dx, tf.reduce_sum(dy * normalized, axes), tf.reduce_sum(dy, axes)

    return outputs, grad

  return normalize(x, gamma, beta)
