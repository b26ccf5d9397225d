"""One frozen BERT encoder, several classification tasks: HyperFormer++ or shared adapters.

adapter_type "hyperformer": the encoder has no adapters of its own; for each
batch a hypernetwork (multitask/hypernetwork.py) generates the batch's task's
adapters for every layer and position (Mahabadi et al., 2021).
adapter_type "shared": one set of Houlsby adapters (modeling.py's) that every
task shares, trained on all tasks at once: the paper's multi-task baseline.

Either way each task has its own classifier head (modeling.ClassifierHead,
BertClassifier's, with a task axis). The heads are stacked along a task axis and padded
to the widest task; a narrower task's padded logits are masked out. A batch
holds examples of one task (the batches are sampled per task, as in the
paper): the hypernetwork runs once per step, and the encoder's products stay
2-D. Mixed batches are for the exported SavedModel (serving/), whose task
adapters are generated once at export. Packed batches (runtime/packing.py)
stay one task's: run_multitask.py packs each task's examples apart, so the
task ids follow the examples exactly at no cost.

Checkpoint names: the encoder's are the original's (bert/...); the
hypernetwork's are under "hyperformer/", the heads are
"multitask/output_weights" [num_tasks, max_labels, hidden] and
"multitask/output_bias" [num_tasks, max_labels]. Outside "bert/", every
variable trains (modeling.variable_role "head").
"""

import dataclasses
from typing import Dict, Optional, Sequence

import keras
import tensorflow as tf

from adapter_bert.model.adapter_layers import KERAS_PACKAGE, AdapterConfig
from adapter_bert import label_lists
from adapter_bert.model import modeling
from adapter_bert.multitask.hypernetwork import AdapterHyperNetwork, HyperFormerConfig

ADAPTER_TYPES = ("hyperformer", "shared")

HYPERNETWORK_PREFIX = "hyperformer"
HEAD_PREFIX = "multitask"

# Added to a padded class's logit: softmax gives it exactly 0, the loss stays finite.
_MASKED_LOGIT = -1e9


@dataclasses.dataclass(frozen=True)
class TaskHead:
  """What a task's head is: its name, its width and what its outputs mean."""
  name: str
  labels: tuple  # Index = label id; () for regression.
  is_regression: bool = False

  def __post_init__(self):
    label_lists.check_labels(self.labels, f"task {self.name!r}")

  @property
  def num_outputs(self) -> int:
    return 1 if self.is_regression else len(self.labels)

  def to_dict(self) -> dict:
    return {"name": self.name, "labels": list(self.labels),
            "is_regression": self.is_regression}

  @classmethod
  def from_dict(cls, d: dict) -> "TaskHead":
    return cls(d["name"], tuple(d["labels"]), bool(d["is_regression"]))


@keras.saving.register_keras_serializable(package=KERAS_PACKAGE)
class MultiTaskClassifier(modeling.HeadWeightsFirst, keras.Model):
  """BERT, per-task heads and HyperFormer++ or shared adapters.

  Call arguments:
    inputs: dict of int32 Tensors: "input_ids", "input_mask", "segment_ids"
      [batch_size, seq_length] as for modeling.BertEncoder, and "task_index"
      [batch_size], the same task for every example of the batch. Or a
      packed batch of one task (modeling.EXAMPLE_IDS present; "task_index"
      [batch_size, max_examples]).
  Returns:
    dict: "logits" float32 [batch_size, max_outputs], the task's head, its
    padded classes at -1e9 ([batch_size, max_examples, max_outputs] packed,
    each example's from its own [CLS]); "task_index", as given.
  """

  def __init__(self, config: modeling.BertConfig, tasks: Sequence[TaskHead],
               adapter_type: str, adapter_config: AdapterConfig = modeling.NO_ADAPTERS,
               hyperformer_config: Optional[HyperFormerConfig] = None, **kwargs):
    kwargs.setdefault("name", "multi_task_classifier")
    super().__init__(**kwargs)
    if adapter_type not in ADAPTER_TYPES:
      raise ValueError(f"adapter_type must be one of {list(ADAPTER_TYPES)}, got "
                       f"{adapter_type!r}")
    if (adapter_type == "hyperformer") != (hyperformer_config is not None):
      raise ValueError("a hyperformer config is needed with adapter_type hyperformer, "
                       "and only then")
    if adapter_type == "hyperformer" and adapter_config.enabled:
      raise ValueError("HyperFormer++ generates the adapters: the encoder has none of its own")
    if not tasks:
      raise ValueError("a multi-task model needs at least one task")
    self.config = config
    self.tasks = tuple(tasks)
    self.adapter_type = adapter_type
    self.adapter_config = adapter_config
    self.hyperformer_config = hyperformer_config
    self.bert = modeling.BertEncoder(config, adapter_config)
    self.hypernetwork = (
        AdapterHyperNetwork(hyperformer_config, len(self.tasks), config.num_hidden_layers,
                            config.hidden_size, name=HYPERNETWORK_PREFIX)
        if hyperformer_config else None)
    self.max_outputs = max(t.num_outputs for t in self.tasks)
    self.head = modeling.ClassifierHead(self.max_outputs, len(self.tasks))
    self._num_outputs = tf.constant([t.num_outputs for t in self.tasks], tf.int32)

  def build(self, input_shape=None):
    self.head.build((None, self.config.hidden_size))

  def ensure_built(self) -> None:
    if not self.built or not self.weights:
      self(dict(modeling.dummy_inputs(), task_index=tf.zeros([1], tf.int32)))

  def build_from_config(self, build_config):
    del build_config
    self.ensure_built()

  def call(self, inputs, training=None):
    task_index = tf.convert_to_tensor(inputs["task_index"], tf.int32)
    # One task per batch (the class docstring), packed or not.
    task = tf.reshape(task_index, [-1])[0]
    generated = (modeling.EncoderTaskWeights(tuple(self.hypernetwork(task)))
                 if self.hypernetwork is not None else None)
    pooled = self.bert(inputs, training=training, task_weights=generated)["pooled_output"]
    if modeling.EXAMPLE_IDS in inputs:  # [B, K, hidden]: the head's 2-D product, reshaped.
      logits = self.head(tf.reshape(pooled, [-1, self.config.hidden_size]),
                         training=training, task=task)
      logits = tf.reshape(logits, tf.concat([tf.shape(pooled)[:2], [self.max_outputs]], 0))
    else:
      logits = self.head(pooled, training=training, task=task)
    logits = tf.cast(logits, tf.float32)
    real = tf.range(self.max_outputs) < tf.gather(self._num_outputs, task)
    logits = tf.where(real, logits, _MASKED_LOGIT)  # Over the last axis, packed or not.
    return {"logits": logits, "task_index": task_index}

  def generated_adapter_config(self) -> AdapterConfig:
    """The config of a Houlsby-style model whose adapters are this model's
    generated ones: the size of the generated adapters, GeLU, their own LayerNorm."""
    return AdapterConfig(size=self.hyperformer_config.adapter_size, layer_norm=True)

  def generate_adapters(self, task: int):
    """The task's generated adapters (HyperFormer++), as NumPy arrays by checkpoint name:
    the names of a model of `generated_adapter_config()`'s adapters
    (bert/encoder/layer_N/{attention/output,output}/adapters/...)."""
    if self.hypernetwork is None:
      raise ValueError("only a HyperFormer++ model generates adapters")
    arrays = {}
    for i, layer in enumerate(self.hypernetwork(tf.constant(task, tf.int32))):
      for position, adapters in (("attention", layer.attention_adapters),
                                 ("feed_forward", layer.feed_forward_adapters)):
        prefix = f"bert/encoder/layer_{i}/{modeling.ADAPTER_PLACES[position].scope}"
        for name, value in adapters[0].by_tf1_name().items():
          value = keras.ops.convert_to_numpy(value)
          # The Adapter layer's biases are [1, n], as adapter-bert's.
          arrays[f"{prefix}/{name}"] = value[None] if name.startswith("biases") else value
    return arrays

  @property
  def task_row_variables(self):
    """Variables whose first axis is the task (optimization.AdamWeightDecay)."""
    rows = [self.head.output_weights, self.head.output_bias]
    if self.hypernetwork is not None:
      rows.append(self.hypernetwork.task_embeddings)
    return rows

  def head_variable_map(self) -> Dict[str, keras.Variable]:
    return {f"{HEAD_PREFIX}/{n}": v for n, v in self.head.tf1_variable_names().items()}

  def tf1_variable_map(self) -> Dict[str, keras.Variable]:
    self.ensure_built()
    names = self.bert.tf1_variable_map()
    if self.hypernetwork is not None:
      names.update(self.hypernetwork.variable_map(HYPERNETWORK_PREFIX))
    names.update(self.head_variable_map())
    return names

  def get_config(self):
    config = super().get_config()
    config.update(
        config=self.config.to_dict(), tasks=[t.to_dict() for t in self.tasks],
        adapter_type=self.adapter_type, adapter_config=self.adapter_config.to_dict(),
        hyperformer_config=(self.hyperformer_config.to_dict()
                            if self.hyperformer_config else None))
    return config

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    config["config"] = modeling.BertConfig.from_dict(config["config"])
    config["tasks"] = [TaskHead.from_dict(t) for t in config["tasks"]]
    config["adapter_config"] = AdapterConfig.from_dict(config["adapter_config"])
    if config.get("hyperformer_config"):
      config["hyperformer_config"] = HyperFormerConfig.from_dict(config["hyperformer_config"])
    return cls(**config)


def loss_fn(tasks: Sequence[TaskHead]):
  """(labels float32 [B], outputs) -> per-example loss [B]: each task's own loss
  ([B, K] for a packed batch).

  Softmax cross-entropy over the task's classes (its padding masked), or the
  squared error of a regression task: modeling.BertClassifier's losses.
  """
  is_regression = tf.constant([t.is_regression for t in tasks])
  max_class = max(t.num_outputs for t in tasks) - 1

  def loss(labels, outputs):
    logits, task_index = outputs["logits"], outputs["task_index"]
    labels = tf.cast(labels, tf.float32)
    # Regression labels must not index a class (out of range on CPU).
    class_ids = tf.clip_by_value(tf.cast(labels, tf.int32), 0, max_class)
    cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=class_ids,
                                                                   logits=logits)
    squared_error = tf.square(logits[..., 0] - labels)
    return tf.where(tf.gather(is_regression, task_index), squared_error, cross_entropy)

  return loss
