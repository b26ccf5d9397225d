"""The SQuAD span labeler of run_squad.py."""

import keras
import tensorflow as tf

from adapter_bert.model.configs import AdapterConfig, BertConfig
from adapter_bert.model.models.task_model import TaskModel
from adapter_bert.model.networks.bert_encoder import (EXAMPLE_IDS, EXAMPLE_LENGTHS,
                                                      EXAMPLE_STARTS, NO_ADAPTERS)
from adapter_bert.model.serialization import KERAS_PACKAGE as _PACKAGE


@keras.saving.register_keras_serializable(package=_PACKAGE)
class BertSpanLabeler(TaskModel):
  """SQuAD span head of run_squad.py: one linear layer over every token.

  Call arguments:
    inputs: dict of int32 Tensors [batch_size, seq_length] as for BertEncoder;
      or a packed batch (runtime/packing.py: EXAMPLE_IDS present), whose
      rows hold several features each.
  Returns:
    dict with "start_logits" and "end_logits", float32 [batch_size, seq_length];
    for a packed batch [batch_size, max_examples, seq_length]: each feature's
    logits realigned to its own positions (its token j at j, as unpacked),
    SPAN_MASKED_LOGIT past its length. The labels' start and end positions
    are then the feature's own, as written, and post-processing reads the
    logits as it reads an unpacked feature's.
  """

  # The span head reads the sequence output; the pooler never gets a gradient.
  unused_variable_prefixes = ("bert/pooler/",)
  # A packed feature's logit past its own tokens: softmax gives it exactly 0.
  SPAN_MASKED_LOGIT = -1e9

  def __init__(self, config: BertConfig, adapter_config: AdapterConfig = NO_ADAPTERS,
               **kwargs):
    kwargs.setdefault("name", "bert_span_labeler")
    super().__init__(config, adapter_config, **kwargs)

  def build(self, input_shape=None):
    self.output_weights = self.add_weight(
        name="output_weights", shape=(2, self.config.hidden_size),
        initializer=keras.initializers.TruncatedNormal(stddev=0.02))
    self.output_bias = self.add_weight(
        name="output_bias", shape=(2,), initializer="zeros")

  def call(self, inputs, training=None):
    sequence = self.bert(inputs, training=training)["sequence_output"]
    if EXAMPLE_IDS in inputs:
      return self._per_example_logits(sequence, inputs[EXAMPLE_STARTS],
                                      inputs[EXAMPLE_LENGTHS])
    logits = tf.einsum("bsh,nh->nbs", sequence, self.output_weights)
    logits += self.output_bias[:, tf.newaxis, tf.newaxis]
    logits = tf.cast(logits, tf.float32)  # The loss and metrics in float32 always.
    return {"start_logits": logits[0], "end_logits": logits[1]}

  def _per_example_logits(self, sequence, starts, lengths):
    """A packed batch's logits, per feature at its own positions (the class docstring).

    Realigned here rather than in the loss: prediction needs them realigned
    too, so the labels, the loss and post-processing all stay the unpacked ones.
    """
    logits = tf.einsum("bsh,nh->bsn", sequence, self.output_weights) + self.output_bias
    logits = tf.cast(logits, tf.float32)  # [B, L, 2]
    seq_length = tf.shape(logits)[1]
    own = tf.range(seq_length)  # A feature's own positions j: row position start + j.
    rows = tf.minimum(starts[:, :, tf.newaxis] + own, seq_length - 1)  # [B, K, L]
    logits = tf.gather(logits, rows, axis=1, batch_dims=1)  # [B, K, L, 2]
    inside = own < lengths[:, :, tf.newaxis]
    logits = tf.where(inside[..., tf.newaxis], logits, self.SPAN_MASKED_LOGIT)
    return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}

  def head_variable_map(self):
    return {"cls/squad/output_weights": self.output_weights,
            "cls/squad/output_bias": self.output_bias}
