"""BERT's embeddings layer: word + position + token-type embeddings, LayerNorm, dropout."""

import keras
import tensorflow as tf

from adapter_bert.model.configs import BertConfig
from adapter_bert.model.layers.common import bert_layer_norm, initializer, normalize
from adapter_bert.model.layers.ops import Dropout
from adapter_bert.model.serialization import KERAS_PACKAGE as _PACKAGE, Serializable


@keras.saving.register_keras_serializable(package=_PACKAGE)
class BertEmbeddings(Serializable, keras.layers.Layer):
  """Word + position + token-type embeddings, LayerNorm, dropout.

  Call arguments:
    input_ids: int32 Tensor of shape [batch_size, seq_length].
    segment_ids: int32 Tensor of shape [batch_size, seq_length].
    layer_norm: () or (gamma, beta) to use instead of the LayerNorm's own
      ([hidden_size], or [batch_size, hidden_size] per example).
    position_ids: None for positions 0, 1, ... of every row; or int32
      [batch_size, seq_length], each token's own (a packed row's examples
      restart at 0: runtime/packing.py).
  Returns:
    float32 Tensor of shape [batch_size, seq_length, hidden_size].
  """

  _init_args = ("config",)

  def __init__(self, config: BertConfig, **kwargs):
    kwargs.setdefault("name", "embeddings")
    # Under a mixed-precision policy the rows are gathered from the float32
    # tables and summed in float32 (the LayerNorm computes in float32 anyway);
    # autocasting would cast the whole tables every step.
    kwargs.setdefault("autocast", False)
    super().__init__(**kwargs)
    self.config = config
    self.layer_norm = bert_layer_norm("LayerNorm")
    self.dropout = Dropout(config.hidden_dropout_prob)

  def build(self, input_shape):
    c, init = self.config, initializer(self.config)
    self.word_embeddings = self.add_weight(
        name="word_embeddings", shape=(c.vocab_size, c.hidden_size), initializer=init)
    self.token_type_embeddings = self.add_weight(
        name="token_type_embeddings", shape=(c.type_vocab_size, c.hidden_size),
        initializer=init)
    self.position_embeddings = self.add_weight(
        name="position_embeddings", shape=(c.max_position_embeddings, c.hidden_size),
        initializer=init)
    self.layer_norm.build((None, None, c.hidden_size))

  def call(self, input_ids, segment_ids, training=None, layer_norm=(), position_ids=None):
    x = tf.gather(self.word_embeddings, input_ids)
    x += tf.gather(self.token_type_embeddings, segment_ids)
    if position_ids is None:
      seq_length = tf.shape(input_ids)[1]
      x += self.position_embeddings[tf.newaxis, :seq_length, :]
    else:
      x += tf.gather(self.position_embeddings, position_ids)
    x = tf.cast(normalize(self.layer_norm, x, layer_norm), self.compute_dtype)
    return self.dropout(x, training=training)
