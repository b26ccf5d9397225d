"""BERT's activations and those adapters choose from, by name (get_activation).

The bottom of the model: it imports no other module of it.
"""

import functools
import math

import keras
import tensorflow as tf


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@tf.custom_gradient
def gelu(x):
  """BERT's GELU: the tanh approximation, as in google-research/bert.

  0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with its derivative computed
  in the forward pass: the gradient then keeps one tensor of x's shape alive
  until the backward pass, where differentiating the formula op by op keeps
  about five. The feed-forward GELU is the widest activation of a Transformer
  layer ([tokens, intermediate_size]): this cuts the training step's peak
  memory by about a third (`git show ce1ce3d^:benchmarks/README.md`, "Memory"), at the same speed.
  Inference (no gradient taken in a compiled function) prunes the derivative.
  A large tensor of a static shape (a packed or padded-to-max batch, as the
  benchmarks' equal-work step) is computed by one XLA kernel (`_gelu_fused`,
  the same formula): its ~20 element-wise passes over [tokens,
  intermediate_size] cost a fifth of a CPU's adapter step. XLA compiles once
  per shape, which pays only where shapes repeat; tiny tensors never gain.
  """
  return _with_derivative(x, _gelu_fused, _gelu)


def _with_derivative(x, fused, unfused):
  """(y, its gradient function) from `fused` or `unfused`(x) -> (y, dy/dx)."""
  fuse_from = _FUSE_16_BIT_FROM_ELEMENTS if is_16_bit(x.dtype) else _FUSE_FROM_ELEMENTS
  if static_size_at_least(x, fuse_from):
    y, derivative = fused(x)
  else:
    y, derivative = unfused(x)

  def gradient(dy):
    with tf.name_scope("gelu_gradient"):  # Named for profiles (benchmarks/op_profile.py).
      return dy * derivative

  return y, gradient


@tf.custom_gradient
def gelu_erf(x):
  """The exact GELU x Phi(x) (PyTorch's and Hugging Face BERT's "gelu"), computed as
  `gelu` is (its docstring says why): its derivative Phi(x) + x phi(x) in the
  forward pass, and one XLA kernel for a large static shape."""
  return _with_derivative(x, _gelu_erf_fused, _gelu_erf)


def is_16_bit(dtype) -> bool:
  """bfloat16 or float16: --mixed_precision's compute dtypes."""
  return tf.as_dtype(dtype) in (tf.bfloat16, tf.float16)


def static_size_at_least(x, elements: int) -> bool:
  """Whether x's shape is static with at least `elements` elements: where one XLA
  kernel (compiled once per shape) replaces element-wise ops (here and
  ops.LayerNorm); x may be a NumPy array when called eagerly."""
  shape = tf.TensorShape(x.shape)
  return shape.is_fully_defined() and shape.num_elements() >= elements


def _gelu_erf_and_derivative(x):
  cdf = 0.5 * (1.0 + tf.math.erf(x * _SQRT_HALF))
  pdf = _INV_SQRT_2PI * tf.exp(-0.5 * x * x)
  return x * cdf, cdf + x * pdf


def _in_float32(formula):
  """`formula`(x) -> (y, dy/dx) computed in float32, returned in x's dtype.

  A 16-bit x (--mixed_precision) is computed in float32 and y and dy/dx are
  rounded to x's dtype once: TensorFlow's and XLA's CPU kernels of tanh, erf
  and exp in bfloat16 convert element by element, and the float32 formula is
  the more accurate (`git show ce1ce3d^:benchmarks/README.md`, "bfloat16 on a CPU with AMX").
  """

  @functools.wraps(formula)  # Keeps its name: the XLA function's, in a graph.
  def computed(x):
    x = tf.convert_to_tensor(x)
    if not is_16_bit(x.dtype):
      return formula(x)
    return tuple(tf.cast(t, x.dtype) for t in formula(tf.cast(x, tf.float32)))

  return computed


_gelu_erf = _in_float32(_gelu_erf_and_derivative)
_gelu_erf_fused = tf.function(_gelu_erf, jit_compile=True)
_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _gelu_and_derivative(x):
  x2 = x * x
  t = tf.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x2 * x))
  half_x = 0.5 * x
  derivative = (0.5 * (1.0 + t)
                + half_x * (1.0 - t * t) * (_SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * x2)))
  return half_x * (1.0 + t), derivative


_gelu = _in_float32(_gelu_and_derivative)
_gelu_fused = tf.function(_gelu, jit_compile=True)
# Static shapes of at least this many elements take _gelu_fused: MiniLM's
# [2048, 1536] at batch 32, seq 64 does; the tests' tiny models do not.
_FUSE_FROM_ELEMENTS = 2 ** 20
# A 16-bit GELU op by op also casts to float32 and back (_in_float32), which the
# kernel folds in: from 2^17 elements, an adapter's [2048, 64] bottleneck too, the
# bfloat16 step took 0.95x the time, where float32 from 2^17 took 1.07x
# (`git show ce1ce3d^:benchmarks/README.md`, "bfloat16 on a CPU with AMX").
_FUSE_16_BIT_FROM_ELEMENTS = 2 ** 17


# The names google-research/bert modeling.py `get_activation` accepts for
# `hidden_act`; adapters choose from the same list, and from the non-linearities
# AdapterHub's adapters use (adapter_bert/checkpoints/adapterhub.py): swish
# (x sigmoid(x), its Houlsby default), gelu_erf (the exact erf GELU, PyTorch's
# and AdapterHub's "gelu") and leaky_relu (PyTorch's slope 0.01). Each maps 0
# to 0, which a SavedModel's zero-padded bottlenecks rely on (Design.stack).
_ACTIVATIONS = {"gelu": gelu, "relu": keras.activations.relu,
                "tanh": keras.activations.tanh, "linear": keras.activations.linear,
                "swish": tf.nn.silu,
                "gelu_erf": gelu_erf,
                "leaky_relu": lambda x: tf.nn.leaky_relu(x, alpha=0.01)}
ACTIVATION_NAMES = tuple(_ACTIVATIONS)


def get_activation(name: str):
  """Maps an activation name (ACTIVATION_NAMES: "gelu", "relu", ...) to a function.

  Raises:
    ValueError: `name` is none of those.
  """
  if name not in _ACTIVATIONS:
    raise ValueError(f"unknown activation {name!r}; known: {list(ACTIVATION_NAMES)}")
  return _ACTIVATIONS[name]
