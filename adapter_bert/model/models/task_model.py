"""The base of the task models (an encoder and a head whose variables carry the
original names), and merge_lora: a model with its LoRA updates merged into its kernels."""

from typing import Dict

import keras
import tensorflow as tf

from adapter_bert.model.configs import AdapterConfig, BertConfig
from adapter_bert.model.networks.bert_encoder import NO_ADAPTERS, BertEncoder
from adapter_bert.model.serialization import BuiltByCalling, Serializable


class TaskModel(Serializable, BuiltByCalling, keras.Model):
  """A BERT encoder with a task head whose variables carry the original names."""

  # Variables the task's output does not depend on (no gradient ever reaches them).
  unused_variable_prefixes = ()

  def __init__(self, config: BertConfig, adapter_config: AdapterConfig, **kwargs):
    super().__init__(**kwargs)
    self.config = config
    self.adapter_config = adapter_config
    self.bert = BertEncoder(config, adapter_config)

  def head_variable_map(self) -> Dict[str, keras.Variable]:
    raise NotImplementedError

  def tf1_variable_map(self) -> Dict[str, keras.Variable]:
    self.ensure_built()
    names = self.bert.tf1_variable_map()
    names.update(self.head_variable_map())
    return names


def merge_lora(model):
  """A copy of `model` (an encoder or task model with design lora) without LoRA
  layers, each query and value kernel W replaced by W + s A B: the same
  function at the cost of plain BERT, for inference.

  Returns `model`'s class with NO_ADAPTERS; every other weight copied.
  Raises:
    ValueError: `model`'s adapters are not LoRA.
  """
  if not model.adapter_config.lora:
    raise ValueError(f"only LoRA merges into the kernels; the model's adapter design is "
                     f"{model.adapter_config.design} (size {model.adapter_config.size})")
  model.ensure_built()
  merged = type(model).from_config({**model.get_config(),
                                    "adapter_config": NO_ADAPTERS.to_dict()})
  merged.ensure_built()
  names = model.tf1_variable_map()
  for name, variable in merged.tf1_variable_map().items():
    value = names[name]
    lora_prefix = name[:-len("kernel")] + "adapters/"
    if lora_prefix + "lora_a" in names:
      a, b = names[lora_prefix + "lora_a"], names[lora_prefix + "lora_b"]
      value = value + model.adapter_config.scaling * tf.matmul(a, b)
    variable.assign(value)
  return merged
