"""AdapterFusion's design (Pfeiffer et al. 2021): only given, never a model's own.
Its layer and weights are ../fusion.py's."""

from adapter_bert.model.designs.registry import Design
from adapter_bert.model.layers.fusion import FusedAdapters, FusionWeights


class Fusion(Design):
  """AdapterFusion (Pfeiffer et al. 2021): a composition of Houlsby adapters,
  frozen, and the attention over their outputs (apply_fusion). Only given: a
  fusion model passes FusedAdapters (its AdapterFusion layer with them), a
  multi-task SavedModel each example's FusionWeights, stacked with the fused
  adapters shared by the batch (fusion/serving.py)."""
  name = "fusion"
  weights_types = (FusedAdapters, FusionWeights)
  selectable = False

  def apply(self, h, weights, inputs):
    return weights(h, inputs.activation, inputs.batch_size)
