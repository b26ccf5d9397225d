"""The paper's design (Houlsby et al. 2019)."""

from adapter_bert.model.designs.bottleneck import Bottleneck
from adapter_bert.model.layers.adapters import AdapterWeights


class Houlsby(Bottleneck):
  """LN(h + A(h) + r): Houlsby et al. 2019 (adapter-bert), after both sub-layers,
  with h a sub-layer's output, r its input, LN its LayerNorm. With its own
  LayerNorm (AdapterConfig.layer_norm): HyperFormer++'s, s LN'(W2 ... + b2)."""
  name = "houlsby"
  summary = "the paper"
  weights_types = (AdapterWeights,)
  own_layer_norm = True
  fusable = True
  adapterhub_form = {"original_ln_before": False, "is_parallel": False}
