"""LoRA (Hu et al. 2022): low-rank updates of the query and value projections."""

import numpy as np

from adapter_bert.model.designs.registry import Design, pad
from adapter_bert.model.layers.adapters import LowRankUpdate, LowRankWeights, apply_low_rank


class LoRA(Design):
  """x W + b + s (x A) B on the query and value projections (Hu et al. 2022),
  A [hidden, r] random, B [r, hidden] zero (LowRankUpdate: TF1 names lora_a,
  lora_b); `size` is the rank r, and s = alpha / r (alpha = r: Keras' default)."""
  name = "lora"
  summary = "rank --adapter_size updates of the query and value projections, Hu et al. 2022"
  weights_types = (LowRankWeights,)
  takes_placement = False
  merges_into_projections = True

  def places(self, config):
    return ("query", "value")

  def make_layer(self, config, units, name):
    return LowRankUpdate(config.size, units, config.scaling, name=name)

  def apply_layer(self, layer, h, inputs):
    return h + layer(inputs.sublayer_input)

  def task_weights(self, layer, config):
    return layer.low_rank_weights()

  def apply(self, h, weights, inputs):
    return h + apply_low_rank(inputs.sublayer_input, weights, inputs.batch_size)

  def stack(self, items, hidden):
    # Ranks zero-padded to the largest; a task without LoRA adds a 0 update.
    rank = max(w.a.shape[-1] for w in items if w is not None)
    a = [pad(w.a, (hidden, rank)) if w is not None else np.zeros((hidden, rank), np.float32)
         for w in items]
    b = [pad(w.b, (rank, hidden)) if w is not None else np.zeros((rank, hidden), np.float32)
         for w in items]
    return (LowRankWeights(np.stack(a), np.stack(b)),)
