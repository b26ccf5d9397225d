"""Pfeiffer et al. 2021's design (AdapterHub's SeqBnConfig)."""

from adapter_bert.model.designs.bottleneck import Bottleneck
from adapter_bert.model.layers.adapters import AdapterWeights


class PfeifferAdapterWeights(AdapterWeights):
  """AdapterWeights of the Pfeiffer design (the design_of them)."""


class Pfeiffer(Bottleneck):
  """LN(h + A(LN(h + r)) + r): Pfeiffer et al. 2021, as the PyTorch `adapters`
  library's SeqBnConfig: the adapter reads the sub-layer's normalized output,
  its residual is h, and the same LayerNorm is applied again after it; one per
  layer, after the feed-forward sub-layer."""
  name = "pfeiffer"
  summary = "one adapter reading the normalized feed-forward output, Pfeiffer et al. 2021"
  default_placement = "feed_forward"
  weights_types = (PfeifferAdapterWeights,)
  # original_ln_before with residual_before_ln: the residual is h (seq_bn, pfeiffer).
  adapterhub_form = {"original_ln_before": True, "residual_before_ln": True,
                     "is_parallel": False}

  def reads(self, inputs):
    return inputs.norm(inputs.sublayer_output + inputs.sublayer_input)
