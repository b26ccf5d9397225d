"""The sequence classifier of run_classifier.py."""

import keras
import tensorflow as tf

from adapter_bert.model.configs import AdapterConfig, BertConfig
from adapter_bert.model.layers.head import ClassifierHead, HeadWeightsFirst
from adapter_bert.model.models.task_model import TaskModel
from adapter_bert.model.networks.bert_encoder import EXAMPLE_IDS, NO_ADAPTERS
from adapter_bert.model.serialization import KERAS_PACKAGE as _PACKAGE


@keras.saving.register_keras_serializable(package=_PACKAGE)
class BertClassifier(HeadWeightsFirst, TaskModel):
  """Sequence classifier of run_classifier.py: the encoder and a ClassifierHead.

  Call arguments:
    inputs: dict of int32 Tensors [batch_size, seq_length] as for BertEncoder
      (a packed batch too).
  Returns:
    float32 logits of shape [batch_size, num_labels] (num_labels 1: regression);
    [batch_size, max_examples, num_labels] for a packed batch, each example's
    from its own [CLS] (an empty slot's are the padding's: ignore them).
  """

  _init_args = ("config", "num_labels", "adapter_config")

  def __init__(self, config: BertConfig, num_labels: int,
               adapter_config: AdapterConfig = NO_ADAPTERS, **kwargs):
    kwargs.setdefault("name", "bert_classifier")
    super().__init__(config, adapter_config, **kwargs)
    self.num_labels = num_labels
    self.head = ClassifierHead(num_labels)

  def build(self, input_shape=None):
    self.head.build((None, self.config.hidden_size))

  def call(self, inputs, training=None):
    pooled = self.bert(inputs, training=training)["pooled_output"]
    if EXAMPLE_IDS in inputs:  # [B, K, hidden]: the head's one 2-D product, reshaped.
      logits = self.head(tf.reshape(pooled, [-1, self.config.hidden_size]),
                         training=training)
      logits = tf.reshape(logits, tf.concat([tf.shape(pooled)[:2], [self.num_labels]], 0))
    else:
      logits = self.head(pooled, training=training)
    return tf.cast(logits, tf.float32)  # The loss and metrics in float32 always.

  def head_variable_map(self):
    return self.head.tf1_variable_names()
