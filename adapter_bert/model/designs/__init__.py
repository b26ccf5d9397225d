"""The adapter designs, one module each, and their registry (registry.py).

houlsby.py (the paper's), pfeiffer.py, parallel.py (both on bottleneck.py's
shared base), lora.py, and fusion.py (AdapterFusion, only given). Importing
this package registers them, here and only here, in this fixed order (a
multi-task SavedModel stacks its tasks' weights in registration order);
adapter_bert.model's __init__ imports it first, so every module of the model
finds them registered.

The dependency direction, bottom up: registry (no model import) <- configs
(AdapterConfig asks the registry) <- layers/adapters.py (the Adapter and
LowRankUpdate layers, which validate with AdapterConfig) <- each design module
(registry + layers) <- this package. No module below a design makes an
AdapterConfig at import, so none needs a design registered before this
package has run.
"""

from adapter_bert.model.designs.registry import (  # pylint: disable=unused-import
    Design, PlaceInputs, design_names, design_of, designs, get_design, lookup,
    names_with, register_design)
from adapter_bert.model.designs.bottleneck import Bottleneck
from adapter_bert.model.designs.houlsby import Houlsby
from adapter_bert.model.designs.pfeiffer import Pfeiffer, PfeifferAdapterWeights
from adapter_bert.model.designs.parallel import Parallel, ParallelAdapterWeights
from adapter_bert.model.designs.lora import LoRA
from adapter_bert.model.designs.fusion import Fusion

for _design in (Houlsby(), Pfeiffer(), Parallel(), LoRA(), Fusion()):
  register_design(_design)
del _design

# The built-in designs a model can have (the --adapter_design flag's values),
# and each one's placement where none is given.
DESIGNS = design_names()
DEFAULT_PLACEMENTS = {n: get_design(n).default_placement for n in DESIGNS}
