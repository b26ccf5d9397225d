"""The task model of AdapterFusion: a classifier over frozen adapters of other tasks.

At every place where the fused tasks have adapters (after the attention and/or
the feed-forward sub-layer of each layer, their AdapterConfig.placement), an
AdapterFusion layer (adapter_bert/model/layers/fusion.py) computes a per-token
attention over those adapters' outputs (the paper's Sec. 3.2). The base
encoder and the fused adapters stay frozen; what trains is what a bank task
trains, with the fusion layers in the place of its adapters: the fusion
layers, every LayerNorm (starting from the base's) and the classifier head.

The fusion layers' variables carry adapter names under their place,
`bert/encoder/layer_N/{attention/output,output}/adapters/fusion/{query,key,value}/...`,
so modeling.variable_role calls them "adapter": they train with
--train_mode=adapters, are counted as the task's adapter parameters, are
stored in its adapter-only file and are left out of the bank's fingerprint,
as any task's adapters. The fused adapters come from the bank: non-trainable
variables of the model (so a step reads them where the model lives, as any
weight, instead of capturing constants that are copied to the device on every
call), but none of its TF1 variables: neither trained, nor checkpointed, nor
counted as its own.
"""

from typing import Dict, Mapping, NamedTuple, Sequence

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from adapter_bert.model.adapter_layers import AdapterConfig, AdapterWeights
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import fusion_weights
from adapter_bert.model.layers.fusion import AdapterFusion, FusedAdapters
from adapter_bert.model import modeling

# The paper's (and the PyTorch adapters library's) weight of ||I - V||^2.
DEFAULT_REGULARIZATION = 0.01


class FusedTask(NamedTuple):
  """One fused task: its name and its adapters' arrays by TF1 name (no LayerNorms, no head)."""
  name: str
  arrays: Mapping[str, np.ndarray]


def place_names(config: modeling.BertConfig, adapter_config: AdapterConfig) -> list:
  """Each fusion place as people read it ("layer_0/attention", ...), in call order."""
  return [f"layer_{i}/{s}" for i, s in fusion_weights.places(config, adapter_config)]


def fused_fingerprint(tasks: Sequence[FusedTask]) -> str:
  """SHA-256 over the fused tasks' names and adapter arrays (in the order fused):
  a fusion task recorded it; another value means a fused task changed."""
  return adapter_weights.base_fingerprint(
      {f"{t.name}/{n}": a for t in tasks for n, a in t.arrays.items()}, ())


class FusionClassifier(modeling.BertClassifier):
  """BertClassifier whose encoder applies AdapterFusion over frozen fused adapters.

  Its `adapter_config` is the fused tasks' (what its adapter-only file and
  run_config.json record, and where its fusion layers sit); its encoder has no
  adapters of its own.

  Call arguments, returns: as BertClassifier; with `output_attentions` set,
  a dict with "logits" and "fusion_attentions", float32 [batch_size, places,
  N]: each example's attention over the N fused tasks at each place
  (place_names), the mean over its real tokens (input_mask).
  """

  _init_args = ("config", "num_labels", "adapter_config")

  def __init__(self, config: modeling.BertConfig, num_labels: int,
               adapter_config: AdapterConfig, fused: Sequence[FusedTask],
               regularization: float = DEFAULT_REGULARIZATION, **kwargs):
    kwargs.setdefault("name", "bert_classifier")
    # No adapters of its own; the block applies the fused ones with their activation.
    super().__init__(config, num_labels,
                     AdapterConfig(size=0, activation=adapter_config.activation), **kwargs)
    if not adapter_config.enabled or not fused:
      raise ValueError("a fusion model needs fused tasks with adapters")
    self.adapter_config = adapter_config
    self.fused_task_names = tuple(t.name for t in fused)
    self.regularization = regularization
    self.output_attentions = False
    self._places = fusion_weights.places(config, adapter_config)
    self.fusion_layers = [AdapterFusion(config.initializer_range,
                                        name=f"layer_{i}_{s}_fusion")
                          for i, s in self._places]
    # Frozen, and none of its TF1 variables (module docstring).
    self._fused_adapters = [tuple(self._fused_variables(t.arrays, scope, adapter_config)
                                  for t in fused) for scope in self._places.values()]

  def _fused_variables(self, arrays: Mapping[str, np.ndarray], scope: str,
                       adapter_config: AdapterConfig) -> AdapterWeights:
    """A fused task's adapter at `scope`, as non-trainable variables holding its arrays."""
    def variable(array):
      v = self.add_weight(shape=np.shape(array), initializer="zeros", trainable=False,
                          name="fused_adapter")
      v.assign(array)
      return v

    return tf.nest.map_structure(variable, AdapterWeights.from_tf1_names(
        arrays, scope, adapter_config.layer_norm))

  def build(self, input_shape=None):
    super().build(input_shape)
    for fusion in self.fusion_layers:
      fusion.build((None, self.config.hidden_size))

  def _task_weights(self) -> modeling.EncoderTaskWeights:
    fused = {place: FusedAdapters(adapters, fusion)
             for place, adapters, fusion in zip(self._places, self._fused_adapters,
                                                self.fusion_layers)}
    at = lambda i, s: (fused[(i, s)],) if (i, s) in fused else ()
    return modeling.EncoderTaskWeights(tuple(
        modeling.LayerTaskWeights(at(i, "attention"), at(i, "feed_forward"))
        for i in range(self.config.num_hidden_layers)))

  def call(self, inputs, training=None):
    pooled = self.bert(inputs, training=training,
                       task_weights=self._task_weights())["pooled_output"]
    logits = tf.cast(self.head(pooled, training=training), tf.float32)
    if not self.output_attentions:
      return logits
    return {"logits": logits, "fusion_attentions": self._mean_attentions(inputs)}

  def _mean_attentions(self, inputs):
    """[batch_size, places, N]: each place's last attention, averaged over real tokens."""
    mask = tf.cast(inputs["input_mask"], tf.float32)  # [B, S]
    shape = tf.shape(mask)
    means = []
    for fusion in self.fusion_layers:
      probs = tf.reshape(fusion.last_attention, [shape[0], shape[1], -1])
      means.append(tf.einsum("bsn,bs->bn", probs, mask)
                   / tf.reduce_sum(mask, axis=1, keepdims=True))
    return tf.stack(means, axis=1)

  def regularization_loss(self):
    """The paper's term, `regularization` * sum over fusion layers of ||I - V||^2;
    the training loop adds it to the loss (runtime/loop.make_train_step)."""
    return self.regularization * tf.add_n([f.regularization() for f in self.fusion_layers])

  def tf1_variable_map(self) -> Dict[str, keras.Variable]:
    names = super().tf1_variable_map()
    for scope, fusion in zip(self._places.values(), self.fusion_layers):
      names.update({f"{scope}/{fusion_weights.FUSION_SCOPE}/{n}": v
                    for n, v in fusion.tf1_variable_names().items()})
    return names

  def fused_parameters(self) -> int:
    """Floats of the frozen fused adapters it applies (none of its TF1 variables)."""
    return sum(int(np.prod(a.shape)) for adapters in self._fused_adapters
               for weights in adapters for a in tf.nest.flatten(tuple(weights)))


def log_parameter_counts(model: FusionClassifier) -> None:
  """What a fusion model adds to the adapter-bert parameter lines (trainable's),
  which count its fusion layers as its adapters."""
  fusion = sum(int(np.prod(v.shape)) for f in model.fusion_layers for v in f.weights)
  logging.info("***** Fusion Parameters = %d (%d places x 3 [%d, %d] matrices and 2 "
               "biases) over %d fused tasks (%s) *****", fusion, len(model.fusion_layers),
               model.config.hidden_size, model.config.hidden_size,
               len(model.fused_task_names), ", ".join(model.fused_task_names))
  logging.info("***** Fused Adapter Parameters (frozen, from the bank) = %d *****",
               model.fused_parameters())
