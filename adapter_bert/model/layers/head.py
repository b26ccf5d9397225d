"""run_classifier.py's classifier head, as one Keras layer every classifier uses.

modeling.py re-exports it (modeling.ClassifierHead, modeling.classifier_logits):
BertClassifier and AdapterFusion's classifier have one head, a multi-task
classifier one per task (a task axis), and a multi-task SavedModel applies
classifier_logits to each example's task's rows. HeadWeightsFirst keeps a
model's variables in the order they had before the head was a layer.
"""

from typing import Dict, Optional

import keras
import tensorflow as tf

from adapter_bert.model.serialization import KERAS_PACKAGE as _PACKAGE
from adapter_bert.model.layers.ops import Dropout


def classifier_logits(pooled, output_weights, output_bias):
  """`pooled W^T + b`: the classifier head's equation (ClassifierHead).

  Args:
    pooled: float Tensor [batch_size, hidden_size].
    output_weights, output_bias: [num_labels, hidden_size] and [num_labels],
      shared by the batch; or [batch_size, num_labels, hidden_size] and
      [batch_size, num_labels], each example's own (a multi-task SavedModel's
      heads, gathered along their task axis: serving/stacked_tasks.py).
  Returns:
    Tensor [batch_size, num_labels] of pooled's dtype.
  """
  if len(output_weights.shape) == 2:
    return tf.matmul(pooled, output_weights, transpose_b=True) + output_bias
  return tf.einsum("bh,bch->bc", pooled, output_weights) + output_bias


@keras.saving.register_keras_serializable(package=_PACKAGE)
class ClassifierHead(keras.layers.Layer):
  """run_classifier.py's head: pooled output -> dropout -> logits; or one per task.

  Weights, by their TF1 names (`tf1_variable_names`, the original's):
    output_weights float32 [num_labels, hidden_size], truncated normal
      (stddev `initializer_stddev`); output_bias float32 [num_labels], zeros.
    With `num_tasks`, each has a leading task axis ([num_tasks, num_labels,
    hidden_size], [num_tasks, num_labels]): one head per task, a narrower
    task's rows padded (multitask/model.py).

  Call arguments:
    pooled: float Tensor [batch_size, hidden_size], the encoder's pooled output.
    task: with `num_tasks`, int32 scalar: the batch's task; else None.
  Returns:
    logits [batch_size, num_labels], in the layer's compute dtype.
  """

  def __init__(self, num_labels: int, num_tasks: Optional[int] = None,
               dropout_rate: float = 0.1, initializer_stddev: float = 0.02, **kwargs):
    kwargs.setdefault("name", "classifier_head")
    super().__init__(**kwargs)
    self.num_labels = num_labels
    self.num_tasks = num_tasks
    self.dropout_rate = dropout_rate
    self.initializer_stddev = initializer_stddev
    self.dropout = Dropout(dropout_rate)

  def build(self, input_shape):
    tasks = () if self.num_tasks is None else (self.num_tasks,)
    self.output_weights = self.add_weight(
        name="output_weights", shape=tasks + (self.num_labels, input_shape[-1]),
        initializer=keras.initializers.TruncatedNormal(stddev=self.initializer_stddev))
    self.output_bias = self.add_weight(
        name="output_bias", shape=tasks + (self.num_labels,), initializer="zeros")

  def call(self, pooled, training=None, task=None):
    pooled = self.dropout(pooled, training=training)
    if self.num_tasks is None:
      return classifier_logits(pooled, self.output_weights, self.output_bias)
    return classifier_logits(pooled, tf.gather(self.output_weights, task),
                             tf.gather(self.output_bias, task))

  def tf1_variable_names(self) -> Dict[str, keras.Variable]:
    """Its variables by their names in the original's checkpoints (under a
    model's head prefix: none for run_classifier's, "multitask/" for many tasks)."""
    return {"output_weights": self.output_weights, "output_bias": self.output_bias}

  def get_config(self):
    config = super().get_config()
    config.update(num_labels=self.num_labels, num_tasks=self.num_tasks,
                  dropout_rate=self.dropout_rate,
                  initializer_stddev=self.initializer_stddev)
    return config


class HeadWeightsFirst:
  """For a model with a `head` layer made after its encoder (so its random
  seeds, dropout's and the initializer's, are drawn after the encoder's, as
  before heads were layers): the head's weights lead `weights` and `variables`
  (and so `trainable_variables`), as the model's own did: the order of the
  optimizer's slots in training checkpoints and of the global-norm sum. The
  seed states stay in the order made (the head's dropout last): their order
  in training checkpoints (run_checkpoints.seed_states)."""

  @property
  def weights(self):
    return _head_first(super().weights, self.head)

  @property
  def variables(self):
    return _head_first(super().variables, self.head)


def _head_first(variables, head):
  ids = {id(w) for w in head.weights}
  return ([v for v in variables if id(v) in ids] +
          [v for v in variables if id(v) not in ids])
