"""What trains: adapter tuning, full fine-tuning and the paper's baselines.

The choice follows from each variable's place in the model, read off its name
in the original checkpoints (`tf1_variable_map()`), not from global collections.
Frozen variables get `trainable = False`, so `model.trainable_variables` holds
exactly what the optimizer updates: frozen weights get neither gradients nor
optimizer state.
"""

import dataclasses
import re
from typing import Dict, List

import keras
import numpy as np
from absl import logging

from adapter_bert.model.modeling import variable_role

_LAYER_INDEX = re.compile(r"^bert/encoder/layer_(\d+)/")


@dataclasses.dataclass(frozen=True)
class TrainMode:
  """Which variables train.

  Modes (Houlsby et al. 2019 and its baselines):
    adapters: adapters, every LayerNorm and the task head (the paper's method).
    adapters_only: adapters and the task head, the LayerNorms frozen (as
      AdapterHub's train_adapter: such a task exports to its format).
    full: everything (full fine-tuning).
    layer_norm: every LayerNorm and the head.
    head: the task head only (frozen features).
    top_layers:K: the top K Transformer layers, the pooler and the head (the
      paper's "variable fine-tuning"); K = 0 trains pooler and head.
  """
  name: str
  top_layers: int = 0

  NAMES = ("adapters", "adapters_only", "full", "layer_norm", "head", "top_layers")

  @classmethod
  def parse(cls, text: str) -> "TrainMode":
    name, _, k = text.partition(":")
    if name not in cls.NAMES or (name == "top_layers") != bool(k):
      raise ValueError(f"unknown train mode {text!r}; expected one of adapters, "
                       "adapters_only, full, layer_norm, head, top_layers:K")
    if not k:
      return cls(name)
    if not k.isdigit():
      raise ValueError(f"train mode {text!r}: K must be a non-negative integer")
    return cls(name, int(k))

  def __str__(self):
    return f"top_layers:{self.top_layers}" if self.name == "top_layers" else self.name

  @property
  def trains_adapters(self) -> bool:
    """Whether a model's adapters, where it has them, train in this mode."""
    return self.name in ("adapters", "adapters_only", "full")

  def trains(self, tf1_name: str, num_layers: int) -> bool:
    role = variable_role(tf1_name)
    if self.name == "full" or role == "head":
      return True
    if self.name == "adapters":
      return role in ("adapter", "layer_norm")
    if self.name == "adapters_only":
      return role == "adapter"
    if self.name == "layer_norm":
      return role == "layer_norm"
    if self.name == "top_layers":
      if role == "pooler":
        return True
      match = _LAYER_INDEX.match(tf1_name)
      return bool(match) and int(match.group(1)) >= num_layers - self.top_layers
    return False


def default_train_mode(adapter_size: int) -> TrainMode:
  return TrainMode("adapters" if adapter_size > 0 else "full")


def set_trainable(model: keras.Model, mode: TrainMode) -> List[keras.Variable]:
  """Marks the variables of `model` (a task model or encoder) as trainable or frozen.

  Returns:
    The trainable variables, in the model's variable order.
  """
  names = model.tf1_variable_map()
  num_layers = model.config.num_hidden_layers
  if mode.name in ("adapters", "adapters_only") and not any(
      variable_role(n) == "adapter" for n in names):
    raise ValueError(f"train mode '{mode}' needs adapter_size > 0")
  if mode.name == "top_layers" and mode.top_layers > num_layers:
    raise ValueError(f"train mode {mode}: the model has only {num_layers} layers")
  unused = getattr(model, "unused_variable_prefixes", ())
  for name, variable in names.items():
    variable.trainable = mode.trains(name, num_layers) and not name.startswith(unused)
  return list(model.trainable_variables)


def _size(variable) -> int:
  return int(np.prod(variable.shape))


def parameter_counts(model: keras.Model) -> Dict[str, int]:
  """Total, adapter and trainable parameter counts of `model`."""
  names = model.tf1_variable_map()
  return {
      "total": sum(_size(v) for v in names.values()),
      "adapter": sum(_size(v) for n, v in names.items() if variable_role(n) == "adapter"),
      "trainable": sum(_size(v) for v in names.values() if v.trainable),
  }


def log_parameter_counts(model: keras.Model) -> Dict[str, int]:
  """Logs the adapter-bert parameter lines and returns the counts."""
  counts = parameter_counts(model)
  logging.info("***** Total Parameters = %d *****", counts["total"])
  logging.info("***** Adapter Parameters = %d *****", counts["adapter"])
  logging.info("***** Total Trainable Parameters = %d *****", counts["trainable"])
  return counts
