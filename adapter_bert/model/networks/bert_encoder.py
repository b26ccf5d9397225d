"""The BERT encoder network: embeddings, Transformer blocks, tanh pooler
(BertEncoder), packed batches' features and attention bias, and the role of
each of its TF1 variable names (variable_role)."""

from typing import Dict, NamedTuple

import keras
import tensorflow as tf

from adapter_bert.model.configs import AdapterConfig, BertConfig
from adapter_bert.model.layers.common import initializer
from adapter_bert.model.layers.embeddings import BertEmbeddings
from adapter_bert.model.layers.transformer import TransformerBlock
from adapter_bert.model.serialization import KERAS_PACKAGE as _PACKAGE, BuiltByCalling, Serializable

NO_ADAPTERS = AdapterConfig(size=0)


class EncoderTaskWeights(NamedTuple):
  """Weights passed to a BertEncoder's call: one LayerTaskWeights per layer, and
  () or (gamma, beta) for the embeddings' LayerNorm."""
  layers: tuple
  embeddings_layer_norm: tuple = ()


def variable_role(tf1_name: str) -> str:
  """The part of BERT a TF1 variable name belongs to.

  Returns:
    One of "adapter", "layer_norm", "head", "embeddings", "layer", "pooler".
  """
  if "/adapters/" in tf1_name:
    return "adapter"
  if "LayerNorm" in tf1_name:
    return "layer_norm"
  if not tf1_name.startswith("bert/"):
    return "head"
  if tf1_name.startswith("bert/embeddings/"):
    return "embeddings"
  if tf1_name.startswith("bert/pooler/"):
    return "pooler"
  return "layer"


# A packed batch's features beside a plain batch's (runtime/packing.py packs
# them; their presence switches the models to the packed path).
EXAMPLE_IDS = "example_ids"  # [B, L]: 1..K, the row's example of each token; 0 padding.
POSITION_IDS = "position_ids"  # [B, L]: each token's position in its own example.
EXAMPLE_STARTS = "example_starts"  # [B, K]: the row index of each example's [CLS].
EXAMPLE_LENGTHS = "example_lengths"  # [B, K]: each example's tokens; 0 an empty slot.


def packed_attention_bias(example_ids: tf.Tensor) -> tf.Tensor:
  """The attention bias of packed rows: 0 where query and key belong to the same
  example, -10000 elsewhere (the value unpacked padding gets), so that an
  example's scores are exactly those it has alone: exp(-10000) is 0 in float32.

  Args:
    example_ids: int32 [batch_size, seq_length], 0 on padding.
  Returns:
    float32 [batch_size, 1, seq_length, seq_length].
  """
  same = tf.equal(example_ids[:, :, tf.newaxis], example_ids[:, tf.newaxis, :])
  attend = tf.logical_and(same, example_ids[:, tf.newaxis, :] > 0)
  return tf.where(attend, 0.0, -10000.0)[:, tf.newaxis, :, :]


@keras.saving.register_keras_serializable(package=_PACKAGE)
class BertEncoder(Serializable, BuiltByCalling, keras.Model):
  """BERT encoder: embeddings, `num_hidden_layers` Transformer blocks, tanh pooler.

  Call arguments:
    inputs: dict of int32 Tensors of shape [batch_size, seq_length]:
      "input_ids", "input_mask" (1 real, 0 padding), "segment_ids". A packed
      batch (runtime/packing.py) also holds EXAMPLE_IDS and POSITION_IDS
      [batch_size, seq_length] and EXAMPLE_STARTS [batch_size, max_examples]:
      each token then attends only to its own example's tokens, takes its
      example's positions, and each example is pooled from its own [CLS].
    task_weights: optional EncoderTaskWeights (the module docstring).
  Returns:
    dict with "sequence_output" float32 [batch_size, seq_length, hidden_size],
    "pooled_output" float32 [batch_size, hidden_size] ([batch_size,
    max_examples, hidden_size] for a packed batch) and "encoder_outputs",
    a list of every layer's [batch_size, seq_length, hidden_size] output.
  """

  def __init__(self, config: BertConfig, adapter_config: AdapterConfig = NO_ADAPTERS,
               **kwargs):
    kwargs.setdefault("name", "bert")
    super().__init__(**kwargs)
    self.config = config
    self.adapter_config = adapter_config
    self.embeddings = BertEmbeddings(config)
    self.transformer_layers = [
        TransformerBlock(config, adapter_config, name=f"layer_{i}")
        for i in range(config.num_hidden_layers)]
    self.pooler = keras.layers.Dense(
        config.hidden_size, activation="tanh", kernel_initializer=initializer(config),
        name="pooler")

  def call(self, inputs, training=None, task_weights=None):
    packed = EXAMPLE_IDS in inputs
    if packed:  # One bias for every layer: [batch_size, 1, seq_length, seq_length].
      attention_bias = packed_attention_bias(inputs[EXAMPLE_IDS])
    else:
      input_mask = tf.cast(inputs["input_mask"], tf.float32)
      attention_bias = (1.0 - input_mask[:, tf.newaxis, tf.newaxis, :]) * -10000.0
    x = self.embeddings(inputs["input_ids"], inputs["segment_ids"], training=training,
                        layer_norm=task_weights.embeddings_layer_norm if task_weights else (),
                        position_ids=inputs[POSITION_IDS] if packed else None)
    encoder_outputs = []
    for i, layer in enumerate(self.transformer_layers):
      x = layer(x, attention_bias, training=training,
                task_weights=task_weights.layers[i] if task_weights else None)
      encoder_outputs.append(x)
    if packed:  # Each example's own [CLS], pooled as one [examples, hidden] product.
      first = tf.gather(x, inputs[EXAMPLE_STARTS], batch_dims=1)  # [B, K, hidden]
      pooled = tf.reshape(self.pooler(tf.reshape(first, [-1, self.config.hidden_size])),
                          tf.shape(first))
    else:
      pooled = self.pooler(x[:, 0, :])
    return {"sequence_output": x, "pooled_output": pooled,
            "encoder_outputs": encoder_outputs}

  def tf1_variable_map(self) -> Dict[str, keras.Variable]:
    """Every variable by its name in Google's (and adapter-bert's) checkpoints."""
    self.ensure_built()
    e = self.embeddings
    names = {
        "bert/embeddings/word_embeddings": e.word_embeddings,
        "bert/embeddings/token_type_embeddings": e.token_type_embeddings,
        "bert/embeddings/position_embeddings": e.position_embeddings,
        "bert/embeddings/LayerNorm/gamma": e.layer_norm.gamma,
        "bert/embeddings/LayerNorm/beta": e.layer_norm.beta,
    }
    for i, layer in enumerate(self.transformer_layers):
      names.update(layer.tf1_variable_map(f"bert/encoder/layer_{i}"))
    names["bert/pooler/dense/kernel"] = self.pooler.kernel
    names["bert/pooler/dense/bias"] = self.pooler.bias
    return names

  def own_task_weights(self) -> EncoderTaskWeights:
    """Its adapters and LayerNorms as the `task_weights` its call takes: what
    one task adds to the frozen encoder, e.g. to stack many tasks' for serving."""
    self.ensure_built()
    norm = self.embeddings.layer_norm
    return EncoderTaskWeights(tuple(b.own_task_weights() for b in self.transformer_layers),
                              (norm.gamma, norm.beta))
