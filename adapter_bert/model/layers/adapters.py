"""Houlsby bottleneck adapters (Houlsby et al., ICML 2019) and LoRA's low-rank
updates (Hu et al., 2022) as Keras 3 layers, and their weights as tensors
(AdapterWeights, LowRankWeights) with the functions that apply them.

The designs (../designs/) wire these into a Transformer layer; this module
knows no design.
"""

from typing import NamedTuple

import keras
import tensorflow as tf

from adapter_bert.model.activations import get_activation
from adapter_bert.model.configs import AdapterConfig
from adapter_bert.model.layers.ops import token_matmul
from adapter_bert.model.serialization import KERAS_PACKAGE


# The epsilon of an adapter's own LayerNorm: torch's default, as HyperFormer's
# code. A generated gamma starts near 0, so such an adapter starts near the identity.
ADAPTER_LAYER_NORM_EPSILON = 1e-5


class AdapterWeights(NamedTuple):
  """One adapter's weights, as a layer's variables or as tensors made elsewhere.

  weights1 [hidden, m], biases1 [m] or [1, m], weights2 [m, hidden], biases2
  [hidden] or [1, hidden]: the down and up projections; layer_norm: () or
  (gamma [hidden], beta [hidden]), the adapter's own LayerNorm
  (AdapterConfig.layer_norm). With a leading batch axis on every array
  (weights1 [batch_size, hidden, m], biases1 [batch_size, m], ...), each
  example of a batch has its own adapter: how one model serves many tasks.
  """
  weights1: tf.Tensor
  biases1: tf.Tensor
  weights2: tf.Tensor
  biases2: tf.Tensor
  layer_norm: tuple = ()

  @property
  def per_example(self) -> bool:
    return len(self.weights1.shape) == 3

  def by_tf1_name(self) -> dict:
    """Its arrays by their names under the adapter's TF1 scope (adapter-bert's
    `.../adapters/weights1`, ...; the own LayerNorm's `.../adapters/LayerNorm/gamma`)."""
    names = {"weights1": self.weights1, "biases1": self.biases1,
             "weights2": self.weights2, "biases2": self.biases2}
    if self.layer_norm:
      names.update({"LayerNorm/gamma": self.layer_norm[0], "LayerNorm/beta": self.layer_norm[1]})
    return names

  @classmethod
  def from_tf1_names(cls, arrays, scope: str, layer_norm: bool = False) -> "AdapterWeights":
    """The inverse of by_tf1_name: an adapter's arrays, read from `arrays` (TF1
    name -> array) by their names under `scope`, as they are there."""
    get = lambda name: arrays[f"{scope}/{name}"]
    norm = (get("LayerNorm/gamma"), get("LayerNorm/beta")) if layer_norm else ()
    return cls(get("weights1"), get("biases1"), get("weights2"), get("biases2"), norm)

  def scaled(self, scaling: float) -> "AdapterWeights":
    """The same adapter with its output factor s folded into its last weights
    (s (W2 a + b2) = (s W2) a + s b2; s LN(u) = LN(u) with s gamma and s beta),
    so it applies with scaling 1: how a task's weights travel without its config."""
    if scaling == 1.0:
      return self
    if self.layer_norm:
      return self._replace(layer_norm=tuple(v * scaling for v in self.layer_norm))
    return self._replace(weights2=self.weights2 * scaling, biases2=self.biases2 * scaling)


class LowRankWeights(NamedTuple):
  """One LoRA update's weights, its scaling folded into b: a [in, r], b [r, out],
  or with a leading batch axis each example's own (as AdapterWeights)."""
  a: tf.Tensor
  b: tf.Tensor


def apply_low_rank(tokens, weights: LowRankWeights, batch_size=None):
  """`(x a) b` for tokens [batch_size * seq_length, in]; per example where the
  weights have a batch axis (then `batch_size` is needed)."""
  if len(weights.a.shape) == 2:
    return tf.matmul(tf.matmul(tokens, weights.a), weights.b)
  x = tf.reshape(tokens, [batch_size, -1, weights.a.shape[-2]])
  return tf.reshape(tf.matmul(tf.matmul(x, weights.a), weights.b), [-1, weights.b.shape[-1]])


def apply_adapter(tokens, weights: AdapterWeights, activation: str = "gelu",
                  batch_size=None, adapter_input=None, scaling: float = 1.0):
  """`x + s (W2 · act(W1 · a + b1) + b2)`, with a = x unless `adapter_input`
  is given (the Pfeiffer and parallel designs read another tensor than the one
  they add to); the up-projection first normalized where the adapter has its
  own LayerNorm (`x + s LN(W2 · act(W1 · a + b1) + b2)`).

  Args:
    tokens: float Tensor [batch_size, seq_length, hidden] or [batch_size *
      seq_length, hidden]. Shared weights multiply it as one [tokens, hidden]
      matrix: a 3-D tensor times a 2-D kernel broadcasts into BatchMatMulV2,
      whose gradients took about twice as long on the project's 2-core CPU.
    weights: AdapterWeights, per example (leading batch axis) or not.
    activation: the bottleneck's non-linearity (get_activation).
    batch_size: scalar, needed for per-example weights.
    adapter_input: the adapter's input a, of the shape of `tokens`; None: tokens.
    scaling: s (AdapterConfig.scaling).
  Returns:
    float Tensor of the shape of `tokens`.
  """
  hidden = weights.weights1.shape[-2]
  if weights.per_example:  # [batch, seq, hidden] times [batch, hidden, m].
    flat = lambda t: tf.reshape(t, [batch_size, -1, hidden])
    bias = lambda b: b[:, tf.newaxis, :] if len(b.shape) == 2 else b
  else:
    flat = lambda t: tf.reshape(t, [-1, hidden])
    bias = lambda b: b
  x = flat(tokens)
  a = x if adapter_input is None else flat(adapter_input)
  h = get_activation(activation)(token_matmul(a, weights.weights1) + bias(weights.biases1))
  up = token_matmul(h, weights.weights2) + bias(weights.biases2)
  if weights.layer_norm:
    gamma, beta = (bias(v) for v in weights.layer_norm)
    up = keras.ops.layer_normalization(up, gamma, beta, axis=-1,
                                       epsilon=ADAPTER_LAYER_NORM_EPSILON)
  y = x + (up * scaling if scaling != 1.0 else up)
  return tf.reshape(y, tf.shape(tokens))



@keras.saving.register_keras_serializable(package=KERAS_PACKAGE)
class Adapter(keras.layers.Layer):
  """`x + W2 · act(W1 · x + b1) + b2`: the bottleneck adapter of Houlsby et al.

  No dropout and no normalization inside, as in google-research/adapter-bert
  (unless `layer_norm`: HyperFormer++'s adapter, see AdapterConfig).
  Weight names follow the original checkpoints
  (`.../adapters/{weights1,biases1,weights2,biases2}`, and
  `.../adapters/LayerNorm/{gamma,beta}` for the adapter's own LayerNorm).

  Call arguments:
    inputs: float Tensor of shape [..., hidden_size].
    adapter_input: what the bottleneck reads, of the same shape; None: inputs
      (apply_adapter).
  Returns:
    float Tensor of the same shape.
  """

  # The defaults are AdapterConfig's, which checks the values too.
  def __init__(self, size: int = AdapterConfig.size,
               init_scale: float = AdapterConfig.init_scale,
               activation: str = AdapterConfig.activation, layer_norm: bool = False,
               scaling: float = 1.0,
               **kwargs):
    kwargs.setdefault("name", "adapters")
    super().__init__(**kwargs)
    AdapterConfig(size, init_scale, activation, layer_norm=layer_norm,
                  scaling=scaling)  # Validates them.
    if size == 0:
      raise ValueError("an Adapter layer needs size > 0; size 0 means no adapter layer")
    self.size = size
    self.init_scale = init_scale
    self.activation = activation
    self.layer_norm = layer_norm
    self.scaling = scaling

  def build(self, input_shape):
    hidden_size = input_shape[-1]
    init = keras.initializers.TruncatedNormal(stddev=self.init_scale)
    self.weights1 = self.add_weight(
        name="weights1", shape=(hidden_size, self.size), initializer=init)
    self.biases1 = self.add_weight(
        name="biases1", shape=(1, self.size), initializer="zeros")
    self.weights2 = self.add_weight(
        name="weights2", shape=(self.size, hidden_size), initializer=init)
    self.biases2 = self.add_weight(
        name="biases2", shape=(1, hidden_size), initializer="zeros")
    if self.layer_norm:
      # gamma 0: a new adapter is the identity, as HyperFormer++'s generated
      # gamma starts near 0 (Houlsby's adapter starts near it by init_scale).
      self.gamma = self.add_weight(name="gamma", shape=(hidden_size,), initializer="zeros")
      self.beta = self.add_weight(name="beta", shape=(hidden_size,), initializer="zeros")

  def adapter_weights(self) -> AdapterWeights:
    """Its variables as AdapterWeights."""
    return AdapterWeights(self.weights1, self.biases1, self.weights2, self.biases2,
                          (self.gamma, self.beta) if self.layer_norm else ())

  def call(self, inputs, adapter_input=None):
    return apply_adapter(inputs, self.adapter_weights(), self.activation,
                         adapter_input=adapter_input, scaling=self.scaling)

  def tf1_variable_names(self) -> dict:
    """Its variables by their names under the adapter's TF1 scope."""
    return self.adapter_weights().by_tf1_name()

  def get_config(self):
    config = super().get_config()
    config.update(size=self.size, init_scale=self.init_scale,
                  activation=self.activation, layer_norm=self.layer_norm,
                  scaling=self.scaling)
    return config


@keras.saving.register_keras_serializable(package=KERAS_PACKAGE)
class LowRankUpdate(keras.layers.Layer):
  """`s (x A) B`: LoRA's update of a projection x W + b (Hu et al. 2022).

  A [in, r] starts He-uniform and B [r, out] zero, as Keras' Dense.enable_lora
  and PEFT, so a new update is 0. Written here rather than through
  Dense.enable_lora because its weights must carry adapter-bert's TF1 scope
  names (`.../adapters/lora_a`) for adapter-only files, banks and the
  trainable-variable rules, and because Keras' layer rebuilds the merged kernel
  whenever it is read.

  Call arguments:
    inputs: float Tensor [tokens, in].
  Returns:
    float Tensor [tokens, out].
  """

  def __init__(self, rank: int, units: int, scaling: float = 1.0, **kwargs):
    kwargs.setdefault("name", "lora")
    super().__init__(**kwargs)
    if rank < 1:
      raise ValueError(f"a LoRA update needs rank >= 1, got {rank!r}")
    self.rank = rank
    self.units = units
    self.scaling = scaling

  def build(self, input_shape):
    self.lora_a = self.add_weight(name="lora_a", shape=(input_shape[-1], self.rank),
                                  initializer="he_uniform")
    self.lora_b = self.add_weight(name="lora_b", shape=(self.rank, self.units),
                                  initializer="zeros")

  def call(self, inputs):
    y = tf.matmul(tf.matmul(inputs, self.lora_a), self.lora_b)
    return y * self.scaling if self.scaling != 1.0 else y

  def low_rank_weights(self) -> LowRankWeights:
    """Its variables as LowRankWeights (s folded into b)."""
    return LowRankWeights(self.lora_a, self.lora_b * self.scaling
                          if self.scaling != 1.0 else self.lora_b)

  def tf1_variable_names(self) -> dict:
    """Its variables by their names under the projection's `adapters` scope."""
    return {"lora_a": self.lora_a, "lora_b": self.lora_b}

  def get_config(self):
    config = super().get_config()
    config.update(rank=self.rank, units=self.units, scaling=self.scaling)
    return config
