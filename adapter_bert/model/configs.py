"""The model's two configs: BertConfig (the original's bert_config.json) and
AdapterConfig (the adapters' hyperparameters, saved with every model).

AdapterConfig asks the design registry (designs/registry.py) for its design;
the registry imports no config, and the built-in designs register when
adapter_bert.model is imported (its __init__), so no AdapterConfig is made at
the import of this module or of any module the designs import.
"""

import dataclasses
import json
import math
import numbers
from typing import Callable, Optional, Tuple

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


def _design_selectable(name) -> bool:
  design = registry.lookup(name)
  return design is not None and design.selectable


def _positive(value) -> bool:
  return (not isinstance(value, bool) and isinstance(value, numbers.Real)
          and math.isfinite(value) and value > 0)


# The one rule of each of AdapterConfig's fields that a value alone decides:
# field -> (ok(value), what is allowed). __post_init__ checks them, and the
# command line's checks at parse time (cli/flags.py) are these same rules.
FIELD_RULES = {
    "design": (_design_selectable,
               lambda: "one of " + ", ".join(registry.design_names())),
    "size": (lambda v: not isinstance(v, bool) and isinstance(v, int) and v >= 0,
             lambda: "an integer >= 0 (0: no adapters)"),
    "init_scale": (_positive, lambda: "a positive number"),
    "activation": (lambda v: v in ACTIVATION_NAMES,
                   lambda: "one of " + ", ".join(ACTIVATION_NAMES)),
    "placement": (lambda v: v in PLACEMENTS, lambda: "one of " + ", ".join(PLACEMENTS)),
    "layer_norm": (lambda v: isinstance(v, bool), lambda: "true or false"),
    "scaling": (_positive, lambda: "a positive number"),
}


def field_rule(field: str) -> Tuple[Callable[[object], bool], str]:
  """(ok(value), what is allowed) of AdapterConfig's `field` (FIELD_RULES)."""
  ok, allowed = FIELD_RULES[field]
  return ok, allowed()


class AdapterConfigError(ValueError):
  """An AdapterConfig refused: the field at fault and its value, for a message
  naming what set it (the command line's: runtime/model_setup.checked_adapter_config).

  Attributes:
    field, value: the field and the value refused.
    allowed: what the field may be, or None where another field decides
      (`needs`) or the design refused the config (the message says why).
    needs: (other field, its values that allow this value), e.g. a LayerNorm
      of the adapter's own only with ("design", ("houlsby",)); else None.
  """

  def __init__(self, message, field, value, allowed=None, needs=None):
    super().__init__(message)
    self.field, self.value, self.allowed, self.needs = field, value, allowed, needs


def check_field(field: str, value) -> None:
  """Raises AdapterConfigError if `value` breaks `field`'s rule (FIELD_RULES)."""
  ok, allowed = field_rule(field)
  if not ok(value):
    raise AdapterConfigError(f"adapter {field} must be {allowed}, got {value!r}", field,
                             value, allowed)


@dataclasses.dataclass(frozen=True)
class AdapterConfig:
  """Validated adapter hyperparameters, saved with every model: the one shape
  of the adapter settings (the --adapter_* flags are its fields).

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

  Raises:
    AdapterConfigError (a ValueError): a field's value is refused.
  """
  size: int = 64  # The paper's, and --adapter_size's default (model_setup takes it from here).
  init_scale: float = 1e-3
  activation: str = "gelu"
  placement: Optional[str] = None
  layer_norm: bool = False
  design: str = DEFAULT_DESIGN
  scaling: Optional[float] = None

  def __post_init__(self):
    check_field("design", self.design)
    design = registry.get_design(self.design)
    if self.placement is None:
      object.__setattr__(self, "placement", design.default_placement)
    if self.scaling is None:
      object.__setattr__(self, "scaling", design.default_scaling)
    for field in ("size", "init_scale", "activation", "placement", "layer_norm"):
      check_field(field, getattr(self, field))
    try:
      design.validate(self)
    except ValueError as e:
      if self.layer_norm and not design.own_layer_norm:
        raise AdapterConfigError(str(e), "layer_norm", self.layer_norm, needs=(
            "design", registry.names_with("own_layer_norm"))) from e
      raise AdapterConfigError(str(e), "design", self.design) from e
    check_field("scaling", self.scaling)

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
    """The places (ADAPTER_PLACES' names) of every layer where the model has its adapters' weights."""
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
