"""What BERT's layers share: the initializer, BERT's LayerNorm, and a LayerNorm
applied with given gamma and beta instead of its own."""

import keras
import tensorflow as tf

from adapter_bert.model.layers.ops import LayerNorm


def initializer(config):
  # TF1's truncated_normal_initializer and Keras' TruncatedNormal both cut at 2 stddev.
  return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


def bert_layer_norm(name: str):
  return LayerNorm(epsilon=1e-12, name=name)  # Keras' forward, a closed-form gradient.


def normalize(layer: keras.layers.LayerNormalization, x, gamma_beta: tuple, shape=None):
  """`layer(x)`, or with the gamma and beta given instead of the layer's own.

  Args:
    x: float Tensor [batch_size, seq_length, hidden] or [tokens, hidden].
    gamma_beta: () for the layer's own; (gamma, beta) of shape [hidden], or
      [batch_size, hidden] for each example's own.
    shape: x as [batch_size, seq_length, hidden], where x is 2-D and gamma
      and beta are per example.
  """
  if not gamma_beta:
    return layer(x)
  gamma, beta = gamma_beta
  y = x
  if len(gamma.shape) == 2:  # Per example: broadcast over its tokens.
    y = tf.reshape(x, shape) if shape is not None else x
    gamma, beta = gamma[:, tf.newaxis, :], beta[:, tf.newaxis, :]
  y = keras.ops.layer_normalization(y, gamma, beta, axis=-1, epsilon=layer.epsilon)
  return tf.cast(tf.reshape(y, tf.shape(x)), layer.compute_dtype)
