"""Three Keras layers BERT is made of, each faster than Keras' own on a CPU, and
its attention core, which keeps less memory for the backward pass.

modeling.py re-exports the layers (modeling.Dropout, modeling.TokenDense,
modeling.LayerNorm).
"""

import math

import keras
import tensorflow as tf

from adapter_bert.model.activations import is_16_bit, static_size_at_least
from adapter_bert.model.serialization import KERAS_PACKAGE as _PACKAGE


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
  that (`git show ce1ce3d^:benchmarks/README.md`, "Per-op work"). `noise_shape` is not supported.
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
    return inputs * self.mask(tf.shape(inputs), self.next_seed(), inputs.dtype)

  def next_seed(self) -> tf.Tensor:
    """The seed of the next mask: [2] int32, from the random state (advanced)."""
    seed = tf.cast(tf.math.floormod(self.seed_generator.next(), tf.int32.max - 1), tf.int32)
    return _replica_seed(seed)

  def mask(self, shape, seed: tf.Tensor, dtype) -> tf.Tensor:
    """The scaled keep mask (0 or 1 / keep probability) of `shape` for `seed`."""
    return self.scaled(self.keep(shape, seed), dtype)

  def keep(self, shape, seed: tf.Tensor) -> tf.Tensor:
    """Which elements of `shape` the mask of `seed` keeps: bool, the same for the same seed."""
    size = tf.reduce_prod(shape)
    words = tf.random.stateless_uniform([(size + 1) // 2], seed, minval=None, maxval=None,
                                        dtype=tf.uint32)
    bits = tf.reshape(tf.bitcast(words, tf.uint16), [-1])[:size]
    return tf.reshape(bits >= tf.constant(self._threshold(), tf.uint16), shape)

  def scaled(self, keep: tf.Tensor, dtype) -> tf.Tensor:
    """`keep` as the mask the input is multiplied by: 0, or 1 over the keep probability."""
    threshold = self._threshold()
    return tf.cast(keep, dtype) * (_DROPOUT_LEVELS / (_DROPOUT_LEVELS - threshold))

  def _threshold(self) -> int:
    return int(round(self.rate * _DROPOUT_LEVELS))


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


def token_matmul(x, kernel):
  """x [tokens, in] times kernel [in, out] (or a batch of each), as the CPU
  kernel that runs it fastest when a bias add follows.

  TensorFlow's oneDNN graph rewrite fuses a MatMul and the bias add after it
  into one inner-product kernel: in float32 the fastest. In bfloat16, oneDNN
  v3.7.3 (TensorFlow 2.20's) runs that inner product as its gemm without AMX:
  2048x384x384 took 2.0 ms against 0.8 in its matmul kernel, which a MatMul
  alone gets (`git show ce1ce3d^:benchmarks/README.md`, "bfloat16 on a CPU with AMX"). A bfloat16
  product is therefore a 2-D BatchMatMulV2, which the rewrite leaves apart
  from the add (one element-wise pass); on a TPU both are the same XLA dot.
  """
  if x.dtype == tf.bfloat16:
    return tf.raw_ops.BatchMatMulV2(x=x, y=tf.cast(kernel, x.dtype))
  return tf.matmul(x, kernel)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class TokenDense(keras.layers.Dense):
  """keras.layers.Dense over a [tokens, features] matrix, with a fused bias add.

  Dense's own MatMul + AddV2 becomes MatMul + BiasAdd, which TensorFlow's graph
  optimizer fuses into one kernel (with the activation where it can); a
  bfloat16 product runs apart from its bias add (token_matmul).
  """

  def call(self, inputs, training=None):
    del training
    y = token_matmul(inputs, self.kernel)
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
  (`git show ce1ce3d^:benchmarks/README.md`, "One step, op by op"). The gradient differs from
  the op-by-op one by float32 rounding only (relative 1e-6). A 16-bit input of
  a large static shape takes two XLA kernels of the same formulas instead
  (_layer_norm_fused). Any other axis, or rms_scaling, is Keras' own.
  """

  def call(self, inputs):
    if self.rms_scaling or not (self.center and self.scale) or list(self.axis) not in (
        [-1], [len(inputs.shape) - 1]):
      return super().call(inputs)
    if is_16_bit(inputs.dtype) and static_size_at_least(inputs, _FUSE_FROM_ELEMENTS):
      return tf.cast(_layer_norm_fused(inputs, tf.cast(self.gamma, tf.float32),
                                       tf.cast(self.beta, tf.float32), self.epsilon),
                     self.compute_dtype)
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
      # Held until dy exists, as attention's recomputation (below) is, or every
      # LayerNorm's x^ would be computed as soon as the forward pass made x.
      with tf.name_scope("LayerNorm_gradient"), tf.control_dependencies([dy]):
        normalized = (x - mean) * scale
        g = dy * gamma
        dx = scale * (g - tf.reduce_mean(g, -1, keepdims=True)
                      - normalized * tf.reduce_mean(g * normalized, -1, keepdims=True))
        axes = list(range(len(x.shape) - 1))
        return dx, tf.reduce_sum(dy * normalized, axes), tf.reduce_sum(dy, axes)

    return outputs, grad

  return normalize(x, gamma, beta)


# A 16-bit LayerNorm of a static shape of at least this many elements runs as
# _layer_norm_fused: MiniLM's [2048, 384] (batch 32, seq 64), and the [512, 384]
# of 4 packed rows of 128 tokens, a whole run's batch on short text, which from
# 2^18 ran op by op: its LayerNorms took 24.4 ms of a 133 ms bfloat16 step
# (`git show ce1ce3d^:benchmarks/README.md`, "Packed batches' LayerNorm"). The tests' tiny models
# stay below it, as do per-batch padded shapes (unknown when traced: no compile
# per length).
_FUSE_FROM_ELEMENTS = 2 ** 16


def _layer_norm_fused(x, gamma, beta, epsilon: float):
  """_layer_norm of a 16-bit x as two XLA kernels, forward and backward, each of
  which reads x in 16 bits, computes in float32 and rounds its result once.

  Op by op, a 16-bit LayerNorm is a cast to float32, about six passes and a cast
  back each way (with mixed_bfloat16: 87 ms of a MiniLM adapter step, against
  PyTorch's 12); a kernel each way reads x once: the bfloat16 step took
  0.91-0.99x the time (`git show ce1ce3d^:benchmarks/README.md`, "bfloat16 on a CPU with AMX").
  Float32 keeps the op-by-op path: as XLA kernels there the step was level
  (the same page, "One step, op by op").
  """
  epsilon = tf.constant(epsilon, tf.float32)

  @tf.custom_gradient
  def normalize(x, gamma, beta):
    outputs, mean, scale = _layer_norm_forward(x, gamma, beta, epsilon)

    def grad(dy):
      # Held until dy exists, as in _layer_norm.
      with tf.name_scope("LayerNorm_gradient"), tf.control_dependencies([dy]):
        return _layer_norm_backward(x, mean, scale, gamma, dy)

    return outputs, grad

  return normalize(x, gamma, beta)


@tf.function(jit_compile=True)
def _layer_norm_forward(x, gamma, beta, epsilon):
  """(x normalized, in x's dtype; its float32 mean and 1 / sqrt(var + epsilon))."""
  x32 = tf.cast(x, tf.float32)
  mean, variance = tf.nn.moments(x32, [-1], keepdims=True)
  scale = tf.math.rsqrt(variance + epsilon)
  inv = scale * gamma
  return tf.cast(x32 * inv + (-mean * inv + beta), x.dtype), mean, scale


@tf.function(jit_compile=True)
def _layer_norm_backward(x, mean, scale, gamma, dy):
  """(dx in x's dtype, dgamma, dbeta): _layer_norm's closed form, in float32."""
  normalized = (tf.cast(x, tf.float32) - mean) * scale
  dy32 = tf.cast(dy, tf.float32)
  g = dy32 * gamma
  dx = scale * (g - tf.reduce_mean(g, -1, keepdims=True)
                - normalized * tf.reduce_mean(g * normalized, -1, keepdims=True))
  axes = list(range(len(x.shape) - 1))
  return (tf.cast(dx, x.dtype), tf.reduce_sum(dy32 * normalized, axes),
          tf.reduce_sum(dy32, axes))


def attention(q, k, v, bias, dropout: Dropout, training=None):
  """Scaled dot-product attention with dropout on the probabilities, as BERT's:
  dropout(softmax(q k^T / sqrt(size) + bias)) v, every tensor [batch, heads, seq, size]
  and bias [batch, 1, 1 or seq, seq]. The softmax runs in float32 under mixed
  precision (no-op casts otherwise): its exponentials and sums are where 16-bit
  formats lose the most. bias gets no gradient.

  The forward pass is the op-by-op one (the same results) and draws its mask
  from `dropout`'s random state, as the layer would. For the backward pass it
  keeps only the mask's bits (bool): the probabilities are computed again from
  q and k, where differentiating the ops one by one keeps the probabilities,
  the float mask and the dropped probabilities of every layer, [batch, heads,
  seq, seq] each, until the backward pass reaches it. Adapter training at seq
  64, batch 32 peaked 140-160 MiB lower, at 0.99-1.01x the step time on a
  quiet machine and 1.03-1.05x on a busy one (`git show ce1ce3d^:benchmarks/README.md`, "Memory").
  16-bit q keeps its 16-bit probabilities too (2 bytes an element): recomputing
  them took 4-6% of a bfloat16 step, for 14-22 MiB at seq 64, batch 32
  (`git show ce1ce3d^:benchmarks/README.md`, "bfloat16 on a CPU with AMX").
  """
  scale = 1.0 / math.sqrt(q.shape[-1])
  drop = bool(training) and dropout.rate > 0
  if drop and dropout.rate >= 1:
    return tf.zeros_like(v)
  seed = dropout.next_seed() if drop else None

  @tf.custom_gradient
  def context(q, k, v, bias):
    probs = tf.cast(_attention_probabilities(q, k, bias, scale), q.dtype)
    kept_probs = probs if is_16_bit(q.dtype) else None
    keep = None
    if drop:
      with tf.name_scope(dropout.name):  # As the layer's own ops (benchmarks/op_profile.py).
        keep = dropout.keep(tf.shape(probs), seed)
        probs *= dropout.scaled(keep, probs.dtype)

    def grad(dcontext):
      # The control dependency holds the recomputation until this layer's turn in
      # the backward pass: a graph runs an op once its inputs exist, and q and k
      # exist since the forward pass (every layer's float32 probabilities would
      # be alive; in 16 bits, the float32 copies and masks made from those kept).
      with tf.name_scope("attention_gradient"), tf.control_dependencies([dcontext]):
        if kept_probs is not None:
          kept, probs = kept_probs, tf.cast(kept_probs, tf.float32)
        else:
          probs = _attention_probabilities(q, k, bias, scale)
          kept = tf.cast(probs, q.dtype)
        dkept = tf.matmul(dcontext, v, transpose_b=True)
        if drop:
          with tf.name_scope(dropout.name):
            mask = dropout.scaled(keep, kept.dtype)
            kept *= mask
            dkept *= mask
        dv = tf.matmul(kept, dcontext, transpose_a=True)
        dscores = tf.cast(_softmax_gradient(probs, dkept) * scale, q.dtype)
        return tf.matmul(dscores, k), tf.matmul(dscores, q, transpose_a=True), dv, None

    return tf.matmul(probs, v), grad

  return context(q, k, v, bias)


def _attention_probabilities(q, k, bias, scale: float):
  """softmax(q k^T scale + bias) in float32."""
  scores = tf.matmul(q, k, transpose_b=True) * scale
  return tf.nn.softmax(tf.cast(scores, tf.float32) + tf.cast(bias, tf.float32), axis=-1)


def _softmax_gradient(probs, dprobs):
  """The gradient of softmax's input from its float32 output `probs` and the
  gradient `dprobs` of that output: p (dp - sum(dp p)), in float32 as the
  forward pass."""
  dprobs = tf.cast(dprobs, tf.float32)
  return probs * (dprobs - tf.reduce_sum(dprobs * probs, -1, keepdims=True))
