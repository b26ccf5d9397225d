"""The model's two configs: BertConfig (the original's bert_config.json) and
AdapterConfig (the adapters' hyperparameters, saved with every model).

AdapterConfig asks the design registry (designs/registry.py) for its design;
the registry imports no config, and the built-in designs register when
adapter_bert.model is imported (its __init__), so no AdapterConfig is made at
the import of this module or of any module the designs import.
"""

import dataclasses
import json
from typing import Optional, Tuple

from adapter_bert import errors
from adapter_bert.model.activations import ACTIVATION_NAMES, get_activation
from adapter_bert.model.designs import registry
from adapter_bert.storage import input_files


@dataclasses.dataclass
class BertConfig:
  """The original `bert_config.json`, read and written unchanged.

  Keys the original does not know (e.g. `directionality` in multilingual
  releases) are kept in `extra` and written back.
  """
  vocab_size: int
  hidden_size: int = 768
  num_hidden_layers: int = 12
  num_attention_heads: int = 12
  intermediate_size: int = 3072
  hidden_act: str = "gelu"
  hidden_dropout_prob: float = 0.1
  attention_probs_dropout_prob: float = 0.1
  max_position_embeddings: int = 512
  type_vocab_size: int = 16
  initializer_range: float = 0.02
  extra: dict = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    if self.hidden_size % self.num_attention_heads:
      raise ValueError(
          f"hidden_size ({self.hidden_size}) is not a multiple of "
          f"num_attention_heads ({self.num_attention_heads})")

  @classmethod
  def from_dict(cls, d: dict) -> "BertConfig":
    known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
    return cls(**{k: v for k, v in d.items() if k in known},
               extra={k: v for k, v in d.items() if k not in known})

  # The file a config was read from (from_json_file), for error messages that
  # must name it; not a field, so it is neither compared nor written.
  source = None

  @classmethod
  def from_json_file(cls, path: str, require_all: bool = False) -> "BertConfig":
    """Reads bert_config.json; any fault is an errors.UserError naming the file.

    Args:
      require_all: every field must be in the file (a converter's source
        config); otherwise only vocab_size, the rest defaulting as the original.
    """
    d = input_files.read_json(path)
    if not isinstance(d, dict):
      raise errors.UserError(f"not a BERT config: expected a JSON object, got "
                             f"{type(d).__name__}", path)
    fields = [f for f in dataclasses.fields(cls) if f.name != "extra"]
    missing = [f.name for f in fields if f.name not in d and
               (require_all or f.default is dataclasses.MISSING)]
    if missing:
      raise errors.UserError(f"not a BERT config: lacks {', '.join(missing)}", path)
    for f in fields:
      value = d.get(f.name, f.default)
      if f.type is int and not (type(value) is int and value > 0):
        raise errors.UserError(f"{f.name} must be a positive integer, got {value!r}", path)
      if f.type is float and (type(value) not in (int, float) or value < 0):
        raise errors.UserError(f"{f.name} must be a number >= 0, got {value!r}", path)
      if f.type is str and not isinstance(value, str):
        raise errors.UserError(f"{f.name} must be a string, got {value!r}", path)
    try:
      get_activation(d.get("hidden_act", "gelu"))
      config = cls.from_dict(d)
    except ValueError as e:
      raise errors.UserError(str(e), path) from e
    config.source = path
    return config

  def to_dict(self) -> dict:
    d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
         if f.name != "extra"}
    d.update(self.extra)
    return d

  def to_json_string(self) -> str:
    """As the original: indent 2, sorted keys, trailing newline."""
    return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


# Where a Transformer layer's adapters go: after both sub-layers (the paper's
# model and the default), or after one of them only (the paper also tried
# adapters after the attention sub-layer alone, and found two per layer best).
PLACEMENTS = ("both", "attention", "feed_forward")


# AdapterConfig.design where none is given (the paper's; plain BERT records it).
DEFAULT_DESIGN = "houlsby"


@dataclasses.dataclass(frozen=True)
class AdapterConfig:
  """Validated adapter hyperparameters, saved with every model.

  Attributes:
    size: bottleneck width m (LoRA's rank r); 0 means no adapters (plain BERT).
    init_scale: stddev of the truncated-normal init of both projections
      (1e-3 in the paper, so a fresh adapter is near the identity); LoRA's A
      is He-uniform and B zero instead, so a fresh LoRA is the identity.
    activation: non-linearity of the bottleneck; the original uses BERT's
      tanh-approximated GELU.
    placement: "both" (an adapter after the attention and one after the
      feed-forward sub-layer of every layer), "attention" or "feed_forward"
      (after that sub-layer only); None: the design's (Design.default_placement).
    layer_norm: the adapter normalizes its up-projection with a LayerNorm of
      its own before the residual add (HyperFormer++'s adapter, Mahabadi et
      al. 2021, whose weights a hypernetwork makes); Houlsby's has none.
    design: how the adapter is wired into a layer: a registered Design's name.
    scaling: s, the factor of the adapter's output; None: the design's
      (Design.default_scaling).
  """
  size: int = 64
  init_scale: float = 1e-3
  activation: str = "gelu"
  placement: Optional[str] = None
  layer_norm: bool = False
  design: str = DEFAULT_DESIGN
  scaling: Optional[float] = None

  def __post_init__(self):
    design = registry.lookup(self.design)
    if design is None or not design.selectable:
      raise ValueError(f"adapter design must be one of {list(registry.design_names())}, "
                       f"got {self.design!r}")
    if self.placement is None:
      object.__setattr__(self, "placement", design.default_placement)
    if self.scaling is None:
      object.__setattr__(self, "scaling", design.default_scaling)
    if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0:
      raise ValueError(f"adapter size must be an integer >= 0, got {self.size!r}")
    if not self.init_scale > 0:
      raise ValueError(f"adapter init_scale must be > 0, got {self.init_scale!r}")
    if self.activation not in ACTIVATION_NAMES:
      raise ValueError(f"adapter activation must be one of {list(ACTIVATION_NAMES)}, "
                       f"got {self.activation!r}")
    if self.placement not in PLACEMENTS:
      raise ValueError(f"adapter placement must be one of {list(PLACEMENTS)}, "
                       f"got {self.placement!r}")
    if not isinstance(self.layer_norm, bool):
      raise ValueError(f"adapter layer_norm must be true or false, got {self.layer_norm!r}")
    design.validate(self)
    if not self.scaling > 0:
      raise ValueError(f"adapter scaling must be > 0, got {self.scaling!r}")

  @property
  def enabled(self) -> bool:
    return self.size > 0

  @property
  def lora(self) -> bool:
    """Low-rank updates of projections instead of bottlenecks: weights that
    merge into the projections' kernels (Design.merges_into_projections)."""
    return self.enabled and registry.get_design(self.design).merges_into_projections

  @property
  def places(self) -> Tuple[str, ...]:
    """The PLACES of every layer where the model has its adapters' weights."""
    return registry.get_design(self.design).places(self) if self.enabled else ()

  @property
  def sublayers(self) -> Tuple[str, ...]:
    """The sub-layers an adapter follows ("attention", "feed_forward");
    () without adapters and for a design on the projections (LoRA's)."""
    return tuple(p for p in ("attention", "feed_forward") if p in self.places)

  def to_dict(self) -> dict:
    d = dataclasses.asdict(self)
    # Only where they are not the default: run_config.json and adapter files
    # of Houlsby models stay as they were before these keys existed, so they
    # compare equal to older ones (from_dict reads a missing key as the default).
    design = registry.get_design(self.design)
    defaults = (("design", DEFAULT_DESIGN), ("placement", design.default_placement),
                ("layer_norm", False), ("scaling", design.default_scaling))
    for key, default in defaults:
      if d[key] == default:
        del d[key]
    return d

  @classmethod
  def from_dict(cls, d: dict) -> "AdapterConfig":
    unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
      raise ValueError(f"unknown adapter config keys: {sorted(unknown)}")
    return cls(**d)

  def to_json_string(self) -> str:
    return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"
