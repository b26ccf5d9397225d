"""Fusion tasks in a SavedModel of many tasks (serving/stacked_tasks.py), beside other tasks.

Every example of a batch runs through the one encoder with its own task's
weights, gathered along a task axis. A fusion task adds no adapters of its own
(its slot of the stacked adapters is zeros, which add exactly 0) and, at each
place where it fuses, a FusionWeights (adapter_bert/model/layers/fusion.py): its
query, key and value, stacked along the task axis like every task's
LayerNorms, and a mask over the place's fused adapters. Those adapters (every
adapter any exported fusion task fuses there, read from the bank and checked
unchanged) are shared by the batch, as the fusion model applies them.

A task that does not fuse at a place gets query, key and value 0 and a mask
of ones there: its attention is uniform over finite outputs, times V = 0, so
the fusion adds exactly 0 and its results are those of a SavedModel without
fusion tasks. The shared adapters are computed for every example of a batch
that holds a fusion task's place: the cost of serving fusion in one pass.
"""

import dataclasses
from typing import Dict, List, Mapping, NamedTuple, Sequence, Tuple

import numpy as np
import tensorflow as tf

from adapter_bert.model.adapter_layers import AdapterConfig, AdapterWeights
from adapter_bert.bank import adapter_bank
from adapter_bert.checkpoints import fusion_weights
from adapter_bert import errors
from adapter_bert.fusion import fused_tasks
from adapter_bert.model.layers.fusion import FusionWeights
from adapter_bert.model import modeling

# LayerTaskWeights' adapter fields and the AdapterConfig sub-layer each follows.
PLACES = (("attention_adapters", "attention"), ("feed_forward_adapters", "feed_forward"))


class ServedFusion(NamedTuple):
  """A fusion task of an export: its fused tasks and its fusion layers' arrays."""
  fusion: fused_tasks.Fusion
  arrays: Mapping[str, np.ndarray]  # Its fusion variables by TF1 name.


def split_fusion_tasks(bank_dir: str, tasks: Sequence) -> Tuple[list, Dict[str, ServedFusion]]:
  """The bank's tasks as serving stacks them, and the fusion tasks' fusions by name.

  A fusion task becomes a task without adapters (its LayerNorms and head); its
  fusion layers and fused tasks (fused_tasks.recorded_fusion: refused if one
  was removed or changed) are returned apart.
  """
  served, fusions = [], {}
  for task in tasks:
    if not fused_tasks.is_fusion_task(task.metadata):
      served.append(task)
      continue
    fusion = fused_tasks.recorded_fusion(bank_dir, adapter_bank.task_dir(bank_dir, task.name))
    own = {n: a for n, a in task.arrays.items() if modeling.variable_role(n) != "adapter"}
    fusions[task.name] = ServedFusion(fusion, {n: a for n, a in task.arrays.items()
                                               if n not in own})
    served.append(dataclasses.replace(task, arrays=own, adapter_config=AdapterConfig(
        size=0, activation=task.adapter_config.activation)))
  return served, fusions


def stack_fusions(config: modeling.BertConfig, tasks: Sequence,
                  fusions: Mapping[str, ServedFusion], activation: str
                  ) -> Dict[Tuple[int, str], Tuple[FusionWeights, Tuple[AdapterWeights, ...]]]:
  """(layer, LayerTaskWeights field) -> (FusionWeights of [num_tasks, ...] arrays
  with no adapters, the place's shared fused adapters), where any task fuses.

  Raises:
    errors.UserError: fused adapters of another activation than `activation`,
      the one the encoder applies.
  """
  union = {}  # Fused task name -> (FusedTask, its adapter config), in first-seen order.
  for served in fusions.values():
    for fused in served.fusion.tasks:
      union.setdefault(fused.name, (fused, served.fusion.adapter_config))
  other = sorted({c.activation for _, c in union.values()} - {activation})
  if other:
    raise errors.UserError(f"fused adapters with activation {', '.join(other)} beside tasks "
                           f"whose adapters use {activation}: export them separately")
  hidden = config.hidden_size
  places = {}
  for i in range(config.num_hidden_layers):
    for field, sublayer in PLACES:
      members = [name for name, (_, c) in union.items() if sublayer in c.sublayers]
      if not members:
        continue
      scope = f"bert/encoder/layer_{i}/{modeling.ADAPTER_PLACES[sublayer].scope}"
      shared = tuple(_adapter(union[n][0].arrays, scope, union[n][1]) for n in members)
      rows = [_fusion_row(fusions.get(t.name), scope, sublayer, members, hidden)
              for t in tasks]
      stacked = [np.stack(column).astype(np.float32) for column in zip(*rows)]
      places[(i, field)] = (FusionWeights((), *stacked), shared)
  return places


def _fusion_row(served, scope: str, sublayer: str, members: List[str], hidden: int):
  """One task's query, query_bias, key, key_bias, value and mask at a place."""
  if served is None or sublayer not in served.fusion.adapter_config.sublayers:
    zeros = lambda *shape: np.zeros(shape, np.float32)
    return (zeros(hidden, hidden), zeros(hidden), zeros(hidden, hidden), zeros(hidden),
            zeros(hidden, hidden), np.ones(len(members), np.float32))
  get = lambda name: served.arrays[f"{scope}/{fusion_weights.FUSION_SCOPE}/{name}"]
  fused = set(served.fusion.task_names)
  # The fusion model's order of its fused tasks is theirs in `members`: softmax
  # and the weighted sum do not depend on the order.
  return (get("query/kernel"), get("query/bias"), get("key/kernel"), get("key/bias"),
          get("value/kernel"), np.array([m in fused for m in members], np.float32))


def _adapter(arrays: Mapping[str, np.ndarray], scope: str,
             adapter_config: AdapterConfig) -> AdapterWeights:
  return tf.nest.map_structure(lambda a: np.asarray(a, np.float32),
                               AdapterWeights.from_tf1_names(arrays, scope,
                                                             adapter_config.layer_norm))
