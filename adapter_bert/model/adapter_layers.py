"""The adapters' public module: the adapter layers (Houlsby et al., ICML 2019;
LoRA's updates), AdapterConfig, the activations and the registry of adapter
designs, each one entry (a Design) which modeling.TransformerBlock, the
checkpoints and a multi-task SavedModel ask.

Their homes: layers/adapters.py (the layers, their weights and the functions
that apply them), configs.py (AdapterConfig), activations.py, designs/ (the
registry and one module per design). This module re-exports them under the
names they always had; no module of the model imports it.
"""

# pylint: disable=unused-import
from adapter_bert.model.activations import (
    _FUSE_FROM_ELEMENTS, ACTIVATION_NAMES, gelu, gelu_erf, get_activation)
from adapter_bert.model.configs import (
    DEFAULT_DESIGN, PLACEMENTS, AdapterConfig, AdapterConfigError, field_rule)
from adapter_bert.model.designs import (
    DEFAULT_PLACEMENTS, DESIGNS, Bottleneck, Design, Houlsby, LoRA, Parallel,
    ParallelAdapterWeights, Pfeiffer, PfeifferAdapterWeights, PlaceInputs, design_names,
    design_of, designs, get_design, names_with, register_design)
from adapter_bert.model.layers.adapters import (
    ADAPTER_LAYER_NORM_EPSILON, Adapter, AdapterWeights, LowRankUpdate, LowRankWeights,
    apply_adapter, apply_low_rank)
from adapter_bert.model.serialization import KERAS_PACKAGE

