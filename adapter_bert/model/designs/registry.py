"""The registry of adapter designs: the Design base class (what a design is and
can do), what designs read where they act (PlaceInputs), and
register_design / get_design / designs / design_names / names_with / design_of.

The dependency direction: this module imports nothing of the model; configs
(AdapterConfig) asks it, the adapter layers (layers/adapters.py) know no design,
and each design module (houlsby.py, ...) imports this module and the layers.
The package's __init__ registers the built-in designs, in one fixed order.
"""

from typing import Callable, Dict, Mapping, NamedTuple, Optional, Sequence, Tuple

import keras
import numpy as np
import tensorflow as tf


# Where a design's weights act in a Transformer layer is a place, data, not
# code: layers/transformer.py's ADAPTER_PLACES (built in: on the query and value
# projections, and after the attention and the feed-forward sub-layers) maps
# each to a site of the block (its SITES) and a TF1 scope, and its
# register_place adds a place at any site (e.g. the feed-forward's intermediate
# activation), which a design's `places` may then name.


class PlaceInputs(NamedTuple):
  """What the weights at one place of a layer may read (what each site of the
  block gives: layers/transformer.py's SITES).

  sublayer_input: the sub-layer's input, [tokens, hidden]: the residual r
    after a sub-layer, the tokens x at a projection.
  sublayer_output: the sub-layer's output h (after its dropout) as it came,
    before any adapter, [tokens, out].
  norm: the sub-layer's LayerNorm (the gamma and beta in use); None at a projection.
  activation: the bottleneck non-linearity (the block's AdapterConfig.activation).
  batch_size: scalar, for weights with a leading batch axis (each example's own).
  """
  sublayer_input: tf.Tensor
  sublayer_output: tf.Tensor
  norm: Optional[Callable]
  activation: str
  batch_size: tf.Tensor


class Design:
  """An adapter design: its equation (the class docstring), where it sits
  (`places`), its weights (`make_layer`, whose `tf1_variable_names()` are their
  TF1 names under the place's adapter scope), how they apply (`apply_layer`,
  `apply`) and their serving form (`stack`). A TransformerBlock asks its
  design and the registry (`design_of`) and knows no design by name.

  What it can do are its capabilities (the attributes below): code outside
  the registry asks them, never a design's name.

  Attributes:
    name: AdapterConfig.design's value.
    summary: one line for --adapter_design's help: what it is, whose it is.
    default_placement, default_scaling: the paper's, where a config gives none.
    weights_types: the classes of its weights as a block's call takes them
      (modeling.LayerTaskWeights' items), which tell its weights from others'.
    selectable: a model's AdapterConfig may name it (it owns such weights);
      False for a design that is only given (AdapterFusion).
    takes_placement: AdapterConfig.placement chooses its places; False: its
      places are fixed (`places`), and a config must leave placement out.
    own_layer_norm: it may normalize its output with a LayerNorm of its own
      (AdapterConfig.layer_norm, HyperFormer++'s adapter).
    fusable: its adapters are the plain bottleneck LN(h + A(h) + r) that
      AdapterFusion fuses and run_multitask.py's shared and generated adapters
      are (at scaling 1).
    merges_into_projections: its weights are updates of projection kernels,
      which merge into them (modeling.merge_lora; PEFT's LoRA format holds them).
    adapterhub_form: None (no AdapterHub equivalent), or the AdapterHub
      (`adapters` library) BnConfig options, by value, that make its equation
      there: an export writes them, and an import reads a config whose options
      match them as this design (adapterhub.adapter_config_from_adapterhub).
  """
  name = ""
  summary = ""
  default_placement = "both"
  default_scaling = 1.0
  weights_types: tuple = ()
  selectable = True
  takes_placement = True
  own_layer_norm = False
  fusable = False
  merges_into_projections = False
  adapterhub_form: Optional[Mapping[str, object]] = None

  def validate(self, config: "AdapterConfig") -> None:
    """Raises ValueError for a config the design cannot take (what its
    capabilities exclude; a design may check more)."""
    if not self.takes_placement and config.placement != self.default_placement:
      raise ValueError(f"adapter placement does not apply to design {self.name} (its weights "
                       f"are at every layer's {' and '.join(self.places(config))}), got "
                       f"{config.placement!r}")
    if config.layer_norm and not self.own_layer_norm:
      raise ValueError("an adapter's own LayerNorm (HyperFormer++'s) needs design "
                       f"{' or '.join(names_with('own_layer_norm'))}, got {config.design!r}")

  def places(self, config: "AdapterConfig") -> Tuple[str, ...]:
    """The places (ADAPTER_PLACES' names) of every layer where a model of
    `config` has its weights."""
    return ("attention", "feed_forward") if config.placement == "both" else (config.placement,)

  # Each design defines those it needs (a design only given needs `apply`):
  def make_layer(self, config: "AdapterConfig", units: int, name: str) -> keras.layers.Layer:
    """The Keras layer of a model's own weights at a place whose output has `units`."""
    raise NotImplementedError

  def apply_layer(self, layer, h, inputs: PlaceInputs):
    """h after the model's own layer at a place (its scaling applied by the layer)."""
    raise NotImplementedError

  def task_weights(self, layer, config: "AdapterConfig"):
    """A layer's weights as a block's call takes them, the scaling folded in."""
    raise NotImplementedError

  def apply(self, h, weights, inputs: PlaceInputs):
    """h after given `weights` (one of weights_types) at a place."""
    raise NotImplementedError

  def stack(self, items: Sequence, hidden: int) -> tuple:
    """The serving form: `items`, one per task (its weights at a place as NumPy
    arrays, or None), as weights with a leading task axis, applied in turn;
    zero-padded so that padding and a task without them add exactly 0.
    `hidden`: the width of the tensor at the place (transformer.place_units)."""
    raise NotImplementedError


def pad(value, shape) -> np.ndarray:
  """`value` as float32, zero-padded at the end of every axis to `shape`."""
  value = np.asarray(value, np.float32)
  out = np.zeros(shape, np.float32)
  out[tuple(slice(0, d) for d in value.shape)] = value
  return out


_REGISTRY: Dict[str, Design] = {}


def register_design(design: Design) -> Design:
  """Adds `design` to the registry (AdapterConfig.design names it); returns it.

  Raises:
    ValueError: a design of that name is registered already.
  """
  if design.name in _REGISTRY:
    raise ValueError(f"adapter design {design.name!r} is registered already")
  _REGISTRY[design.name] = design
  return design


def get_design(name: str) -> Design:
  """The registered design `name` (KeyError if none)."""
  return _REGISTRY[name]



def lookup(name: str) -> Optional[Design]:
  """The registered design `name`, or None."""
  return _REGISTRY.get(name)


def designs() -> Tuple[Design, ...]:
  """Every registered design, in registration order (a SavedModel stacks in it)."""
  return tuple(_REGISTRY.values())


def design_names() -> Tuple[str, ...]:
  """The registered designs a model can have (selectable), in registration
  order: as now, with designs registered after import (DESIGNS is at import)."""
  return tuple(n for n, d in _REGISTRY.items() if d.selectable)


def names_with(capability: str) -> Tuple[str, ...]:
  """The selectable designs whose `capability` (a Design attribute) is true:
  what an error message offers instead."""
  return tuple(n for n, d in _REGISTRY.items() if d.selectable and getattr(d, capability))


def design_of(weights) -> Design:
  """The design whose weights_types holds the class of `weights`.

  Raises:
    TypeError: no registered design has such weights.
  """
  for design in _REGISTRY.values():
    if type(weights) in design.weights_types:
      return design
  raise TypeError(f"no adapter design has weights of type {type(weights).__name__}")
