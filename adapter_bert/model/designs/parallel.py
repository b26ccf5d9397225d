"""He et al. 2022's parallel design."""

from adapter_bert.model.designs.bottleneck import Bottleneck
from adapter_bert.model.layers.adapters import AdapterWeights


class ParallelAdapterWeights(AdapterWeights):
  """AdapterWeights of the parallel design (the design_of them)."""


class Parallel(Bottleneck):
  """LN(h + A(r) + r): He et al. 2022, the adapter reads the sub-layer's input,
  beside the sub-layer; after the feed-forward one, scaled by 4 (theirs)."""
  name = "parallel"
  summary = "beside the sub-layer, He et al. 2022"
  default_placement = "feed_forward"
  default_scaling = 4.0
  weights_types = (ParallelAdapterWeights,)
  # original_ln_before and residual_before_ln do not apply; init_weights as theirs (par_bn).
  adapterhub_form = {"is_parallel": True, "init_weights": "mam_adapter"}

  def reads(self, inputs):
    return inputs.sublayer_input
