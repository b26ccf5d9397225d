"""AdapterFusion (Pfeiffer et al., EACL 2021): an attention over frozen adapters.

The layer (AdapterFusion), its equation (apply_fusion) and its weights as a
TransformerBlock's call takes them (FusedAdapters in a fusion model,
FusionWeights in a multi-task SavedModel). The adapter design "fusion", a
composition of Houlsby adapters and the attention, is designs/fusion.py's.
Only given, never a model's own.
"""

from typing import NamedTuple, Tuple

import keras
import tensorflow as tf

from adapter_bert.model.layers.adapters import AdapterWeights, apply_adapter
from adapter_bert.model.layers.ops import token_matmul
from adapter_bert.model.serialization import KERAS_PACKAGE


def apply_fusion(tokens, adapters: Tuple[AdapterWeights, ...], query, query_bias, key,
                 key_bias, value, activation: str = "gelu", mask=None, batch_size=None):
  """AdapterFusion at one place of a layer: an attention over frozen adapters.

  With h a token's input to the adapters (the sub-layer's output) and z_n =
  adapter_n(h) - h the n-th adapter's output before its residual add, the
  paper's equations (Sec. 3.2) are
    s = softmax_n((h Q + b_Q) · (z_n K + b_K)),   o = h + (sum_n s_n z_n) V.
  V is applied after the weighted sum: by linearity the same as weighting
  the z_n V (the paper), with one product instead of N.

  Args:
    tokens: float Tensor [batch_size * seq_length, hidden] (or [batch_size,
      seq_length, hidden]).
    adapters: the N frozen adapters' weights, shared by the batch.
    query, key, value: [hidden, hidden]; query_bias, key_bias: [hidden]; or
      each with a leading batch axis: each example's own fusion.
    activation: the adapters' non-linearity.
    mask: None, or float [batch_size, N]: 1 where an example fuses that
      adapter, 0 where it leaves it out (at least one 1 a row).
    batch_size: scalar, needed for per-example weights.
  Returns:
    (o, the shape of `tokens`; s, float32 [tokens, N]: each token's attention
    over the adapters, in `adapters` order).
  """
  hidden = query.shape[-1]
  h = tf.reshape(tokens, [-1, hidden])
  z = tf.stack([apply_adapter(h, w, activation) - h for w in adapters], axis=1)  # [t, N, H]
  if len(query.shape) == 2:  # One fusion for the batch: 2-D products over all tokens.
    q = token_matmul(h, query) + query_bias
    k = tf.reshape(token_matmul(tf.reshape(z, [-1, hidden]), key) + key_bias, tf.shape(z))
    scores = tf.einsum("th,tnh->tn", q, k)
  else:  # Each example its own: [batch, seq, ...] against [batch, hidden, hidden].
    hb = tf.reshape(h, [batch_size, -1, hidden])
    zb = tf.reshape(z, [batch_size, -1, len(adapters), hidden])
    q = tf.einsum("bsh,bhk->bsk", hb, query) + query_bias[:, tf.newaxis, :]
    k = tf.einsum("bsnh,bhk->bsnk", zb, key) + key_bias[:, tf.newaxis, tf.newaxis, :]
    scores = tf.reshape(tf.einsum("bsk,bsnk->bsn", q, k), [-1, len(adapters)])
  scores = tf.cast(scores, tf.float32)
  if mask is not None:
    per_token = tf.reshape(tf.repeat(tf.cast(mask, tf.float32)[:, tf.newaxis, :],
                                     tf.shape(h)[0] // batch_size, axis=1), tf.shape(scores))
    scores = tf.where(per_token > 0, scores, -1e9)
  probs = tf.nn.softmax(scores, axis=-1)
  mixed = tf.einsum("tn,tnh->th", tf.cast(probs, z.dtype), z)
  if len(value.shape) == 2:
    fused = tf.matmul(mixed, value)
  else:
    fused = tf.reshape(tf.einsum("bsh,bhk->bsk", tf.reshape(mixed, [batch_size, -1, hidden]),
                                 value), [-1, hidden])
  return tf.reshape(h + fused, tf.shape(tokens)), probs


@keras.saving.register_keras_serializable(package=KERAS_PACKAGE)
class AdapterFusion(keras.layers.Layer):
  """The fusion weights of one place of one layer: query and key [hidden, hidden]
  with biases, value [hidden, hidden] without, initialised to the identity (a new
  fusion passes the mean of the adapters' outputs through unchanged).

  The query and key start as BERT's dense layers (truncated normal, stddev
  `initializer_range`, zero bias). `fuse` applies it (apply_fusion) and keeps
  the last attention probabilities in `last_attention` (read within the same
  trace: the fusion model returns them as an output).
  """

  def __init__(self, initializer_range: float = 0.02, **kwargs):
    kwargs.setdefault("name", "adapter_fusion")
    super().__init__(**kwargs)
    self.initializer_range = initializer_range
    self.last_attention = None

  def build(self, input_shape):
    hidden = input_shape[-1]
    init = keras.initializers.TruncatedNormal(stddev=self.initializer_range)
    self.query = self.add_weight(name="query_kernel", shape=(hidden, hidden), initializer=init)
    self.query_bias = self.add_weight(name="query_bias", shape=(hidden,), initializer="zeros")
    self.key = self.add_weight(name="key_kernel", shape=(hidden, hidden), initializer=init)
    self.key_bias = self.add_weight(name="key_bias", shape=(hidden,), initializer="zeros")
    self.value = self.add_weight(name="value_kernel", shape=(hidden, hidden),
                                 initializer="identity")

  def fuse(self, tokens, adapters: Tuple[AdapterWeights, ...], activation: str = "gelu"):
    # In the tokens' dtype (16 bits under mixed precision), as Keras' autocast
    # would in a call: the float32 variables, and the fused adapters too.
    cast = lambda t: tf.cast(t, tokens.dtype)
    output, self.last_attention = apply_fusion(
        tokens, tf.nest.map_structure(cast, tuple(adapters)),
        *(cast(v) for v in (self.query, self.query_bias, self.key, self.key_bias, self.value)),
        activation)
    return output

  def regularization(self):
    """||I - V||^2 (squared Frobenius norm): the paper's term that keeps V near the identity."""
    return tf.reduce_sum(tf.square(tf.eye(self.value.shape[0]) - self.value))

  def tf1_variable_names(self) -> dict:
    """Its variables by their names under its TF1 scope."""
    return {"query/kernel": self.query, "query/bias": self.query_bias,
            "key/kernel": self.key, "key/bias": self.key_bias, "value/kernel": self.value}

  def get_config(self):
    config = super().get_config()
    config.update(initializer_range=self.initializer_range)
    return config


class FusionWeights(NamedTuple):
  """An AdapterFusion as tensors, each with a leading batch axis (each example's
  own, as a multi-task SavedModel gathers them): an item of the adapter tuples a
  TransformerBlock's call takes (modeling.LayerTaskWeights), in place of one
  adapter. `adapters` are shared by the batch; mask [batch_size, N] (apply_fusion).
  """
  adapters: tuple
  query: tf.Tensor
  query_bias: tf.Tensor
  key: tf.Tensor
  key_bias: tf.Tensor
  value: tf.Tensor
  mask: tf.Tensor

  def __call__(self, tokens, activation: str, batch_size):
    return apply_fusion(tokens, self.adapters, self.query, self.query_bias, self.key,
                        self.key_bias, self.value, activation, self.mask, batch_size)[0]


class FusedAdapters:
  """Frozen adapters combined by an AdapterFusion layer: an item of the adapter
  tuples a TransformerBlock's call takes (modeling.LayerTaskWeights), in place
  of one adapter. A plain object, not a tuple: Keras passes a call argument
  that holds it (with a layer inside) as it is, where it refuses tensors
  mixed with other values.
  """

  def __init__(self, adapters: Tuple[AdapterWeights, ...], fusion: AdapterFusion):
    self.adapters = tuple(adapters)  # One per fused task.
    self.fusion = fusion

  def __call__(self, tokens, activation: str, batch_size=None):
    del batch_size  # Shared by the batch.
    return self.fusion.fuse(tokens, self.adapters, activation)

