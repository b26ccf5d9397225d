"""Houlsby bottleneck adapters (Houlsby et al., ICML 2019) as Keras 3 layers,
and the adapter designs: each one entry (a Design) of one registry, which
modeling.TransformerBlock, the checkpoints and a multi-task SavedModel ask."""

import dataclasses
import json
import math
from typing import Callable, Dict, Mapping, NamedTuple, Optional, Sequence, Tuple

import keras
import numpy as np
import tensorflow as tf


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@tf.custom_gradient
def gelu(x):
  """BERT's GELU: the tanh approximation, as in google-research/bert.

  0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with its derivative computed
  in the forward pass: the gradient then keeps one tensor of x's shape alive
  until the backward pass, where differentiating the formula op by op keeps
  about five. The feed-forward GELU is the widest activation of a Transformer
  layer ([tokens, intermediate_size]): this cuts the training step's peak
  memory by about a third (benchmarks/README.md, "Memory"), at the same speed.
  Inference (no gradient taken in a compiled function) prunes the derivative.
  A large tensor of a static shape (a packed or padded-to-max batch, as the
  benchmarks' equal-work step) is computed by one XLA kernel (`_gelu_fused`,
  the same formula): its ~20 element-wise passes over [tokens,
  intermediate_size] cost a fifth of a CPU's adapter step. XLA compiles once
  per shape, which pays only where shapes repeat; tiny tensors never gain.
  """
  return _with_derivative(x, _gelu_fused, _gelu_and_derivative)


def _with_derivative(x, fused, unfused):
  """(y, its gradient function) from `fused` or `unfused`(x) -> (y, dy/dx)."""
  shape = tf.TensorShape(x.shape)  # x may be a NumPy array when called eagerly.
  if shape.is_fully_defined() and shape.num_elements() >= _FUSE_FROM_ELEMENTS:
    y, derivative = fused(x)
  else:
    y, derivative = unfused(x)

  def gradient(dy):
    with tf.name_scope("gelu_gradient"):  # Named for profiles (benchmarks/op_profile.py).
      return dy * derivative

  return y, gradient


@tf.custom_gradient
def gelu_erf(x):
  """The exact GELU x Phi(x) (PyTorch's and Hugging Face BERT's "gelu"), computed as
  `gelu` is (its docstring says why): its derivative Phi(x) + x phi(x) in the
  forward pass, and one XLA kernel for a large static shape."""
  return _with_derivative(x, _gelu_erf_fused, _gelu_erf_and_derivative)


def _gelu_erf_and_derivative(x):
  cdf = 0.5 * (1.0 + tf.math.erf(x * _SQRT_HALF))
  pdf = _INV_SQRT_2PI * tf.exp(-0.5 * x * x)
  return x * cdf, cdf + x * pdf


_gelu_erf_fused = tf.function(_gelu_erf_and_derivative, jit_compile=True)
_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _gelu_and_derivative(x):
  x2 = x * x
  t = tf.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x2 * x))
  half_x = 0.5 * x
  derivative = (0.5 * (1.0 + t)
                + half_x * (1.0 - t * t) * (_SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * x2)))
  return half_x * (1.0 + t), derivative


_gelu_fused = tf.function(_gelu_and_derivative, jit_compile=True)
# Static shapes of at least this many elements take _gelu_fused: MiniLM's
# [2048, 1536] at batch 32, seq 64 does; the tests' tiny models do not.
_FUSE_FROM_ELEMENTS = 2 ** 20


# The names google-research/bert modeling.py `get_activation` accepts for
# `hidden_act`; adapters choose from the same list, and from the non-linearities
# AdapterHub's adapters use (adapter_bert/checkpoints/adapterhub.py): swish
# (x sigmoid(x), its Houlsby default), gelu_erf (the exact erf GELU, PyTorch's
# and AdapterHub's "gelu") and leaky_relu (PyTorch's slope 0.01). Each maps 0
# to 0, which a SavedModel's zero-padded bottlenecks rely on (Design.stack).
_ACTIVATIONS = {"gelu": gelu, "relu": keras.activations.relu,
                "tanh": keras.activations.tanh, "linear": keras.activations.linear,
                "swish": tf.nn.silu,
                "gelu_erf": gelu_erf,
                "leaky_relu": lambda x: tf.nn.leaky_relu(x, alpha=0.01)}
ACTIVATION_NAMES = tuple(_ACTIVATIONS)

# Where a Transformer layer's adapters go: after both sub-layers (the paper's
# model and the default), or after one of them only (the paper also tried
# adapters after the attention sub-layer alone, and found two per layer best).
PLACEMENTS = ("both", "attention", "feed_forward")

def get_activation(name: str):
  """Maps an activation name (ACTIVATION_NAMES: "gelu", "relu", ...) to a function.

  Raises:
    ValueError: `name` is none of those.
  """
  if name not in _ACTIVATIONS:
    raise ValueError(f"unknown activation {name!r}; known: {list(ACTIVATION_NAMES)}")
  return _ACTIVATIONS[name]


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
    design = _REGISTRY.get(self.design)
    if design is None or not design.selectable:
      raise ValueError(f"adapter design must be one of {list(design_names())}, "
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
    return self.enabled and _REGISTRY[self.design].merges_into_projections

  @property
  def places(self) -> Tuple[str, ...]:
    """The PLACES of every layer where the model has its adapters' weights."""
    return _REGISTRY[self.design].places(self) if self.enabled else ()

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
    design = _REGISTRY[self.design]
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


# The epsilon of an adapter's own LayerNorm: torch's default, as HyperFormer's
# code. A generated gamma starts near 0, so such an adapter starts near the identity.
ADAPTER_LAYER_NORM_EPSILON = 1e-5


class AdapterWeights(NamedTuple):
  """One adapter's weights, as a layer's variables or as tensors made elsewhere.

  weights1 [hidden, m], biases1 [m] or [1, m], weights2 [m, hidden], biases2
  [hidden] or [1, hidden]: the down and up projections; layer_norm: () or
  (gamma [hidden], beta [hidden]), the adapter's own LayerNorm
  (AdapterConfig.layer_norm). With a leading batch axis on every array
  (weights1 [batch_size, hidden, m], biases1 [batch_size, m], ...), each
  example of a batch has its own adapter: how one model serves many tasks.
  """
  weights1: tf.Tensor
  biases1: tf.Tensor
  weights2: tf.Tensor
  biases2: tf.Tensor
  layer_norm: tuple = ()

  @property
  def per_example(self) -> bool:
    return len(self.weights1.shape) == 3

  def by_tf1_name(self) -> dict:
    """Its arrays by their names under the adapter's TF1 scope (adapter-bert's
    `.../adapters/weights1`, ...; the own LayerNorm's `.../adapters/LayerNorm/gamma`)."""
    names = {"weights1": self.weights1, "biases1": self.biases1,
             "weights2": self.weights2, "biases2": self.biases2}
    if self.layer_norm:
      names.update({"LayerNorm/gamma": self.layer_norm[0], "LayerNorm/beta": self.layer_norm[1]})
    return names

  @classmethod
  def from_tf1_names(cls, arrays, scope: str, layer_norm: bool = False) -> "AdapterWeights":
    """The inverse of by_tf1_name: an adapter's arrays, read from `arrays` (TF1
    name -> array) by their names under `scope`, as they are there."""
    get = lambda name: arrays[f"{scope}/{name}"]
    norm = (get("LayerNorm/gamma"), get("LayerNorm/beta")) if layer_norm else ()
    return cls(get("weights1"), get("biases1"), get("weights2"), get("biases2"), norm)

  def scaled(self, scaling: float) -> "AdapterWeights":
    """The same adapter with its output factor s folded into its last weights
    (s (W2 a + b2) = (s W2) a + s b2; s LN(u) = LN(u) with s gamma and s beta),
    so it applies with scaling 1: how a task's weights travel without its config."""
    if scaling == 1.0:
      return self
    if self.layer_norm:
      return self._replace(layer_norm=tuple(v * scaling for v in self.layer_norm))
    return self._replace(weights2=self.weights2 * scaling, biases2=self.biases2 * scaling)


class LowRankWeights(NamedTuple):
  """One LoRA update's weights, its scaling folded into b: a [in, r], b [r, out],
  or with a leading batch axis each example's own (as AdapterWeights)."""
  a: tf.Tensor
  b: tf.Tensor


def apply_low_rank(tokens, weights: LowRankWeights, batch_size=None):
  """`(x a) b` for tokens [batch_size * seq_length, in]; per example where the
  weights have a batch axis (then `batch_size` is needed)."""
  if len(weights.a.shape) == 2:
    return tf.matmul(tf.matmul(tokens, weights.a), weights.b)
  x = tf.reshape(tokens, [batch_size, -1, weights.a.shape[-2]])
  return tf.reshape(tf.matmul(tf.matmul(x, weights.a), weights.b), [-1, weights.b.shape[-1]])


def apply_adapter(tokens, weights: AdapterWeights, activation: str = "gelu",
                  batch_size=None, adapter_input=None, scaling: float = 1.0):
  """`x + s (W2 · act(W1 · a + b1) + b2)`, with a = x unless `adapter_input`
  is given (the Pfeiffer and parallel designs read another tensor than the one
  they add to); the up-projection first normalized where the adapter has its
  own LayerNorm (`x + s LN(W2 · act(W1 · a + b1) + b2)`).

  Args:
    tokens: float Tensor [batch_size, seq_length, hidden] or [batch_size *
      seq_length, hidden]. Shared weights multiply it as one [tokens, hidden]
      matrix: a 3-D tensor times a 2-D kernel broadcasts into BatchMatMulV2,
      whose gradients took about twice as long on the project's 2-core CPU.
    weights: AdapterWeights, per example (leading batch axis) or not.
    activation: the bottleneck's non-linearity (get_activation).
    batch_size: scalar, needed for per-example weights.
    adapter_input: the adapter's input a, of the shape of `tokens`; None: tokens.
    scaling: s (AdapterConfig.scaling).
  Returns:
    float Tensor of the shape of `tokens`.
  """
  hidden = weights.weights1.shape[-2]
  if weights.per_example:  # [batch, seq, hidden] times [batch, hidden, m].
    flat = lambda t: tf.reshape(t, [batch_size, -1, hidden])
    bias = lambda b: b[:, tf.newaxis, :] if len(b.shape) == 2 else b
  else:
    flat = lambda t: tf.reshape(t, [-1, hidden])
    bias = lambda b: b
  x = flat(tokens)
  a = x if adapter_input is None else flat(adapter_input)
  h = get_activation(activation)(tf.matmul(a, weights.weights1) + bias(weights.biases1))
  up = tf.matmul(h, weights.weights2) + bias(weights.biases2)
  if weights.layer_norm:
    gamma, beta = (bias(v) for v in weights.layer_norm)
    up = keras.ops.layer_normalization(up, gamma, beta, axis=-1,
                                       epsilon=ADAPTER_LAYER_NORM_EPSILON)
  y = x + (up * scaling if scaling != 1.0 else up)
  return tf.reshape(y, tf.shape(tokens))


# The package every Keras object of the project is registered under (saved models name it).
KERAS_PACKAGE = "adapter_bert"


@keras.saving.register_keras_serializable(package=KERAS_PACKAGE)
class Adapter(keras.layers.Layer):
  """`x + W2 · act(W1 · x + b1) + b2`: the bottleneck adapter of Houlsby et al.

  No dropout and no normalization inside, as in google-research/adapter-bert
  (unless `layer_norm`: HyperFormer++'s adapter, see AdapterConfig).
  Weight names follow the original checkpoints
  (`.../adapters/{weights1,biases1,weights2,biases2}`, and
  `.../adapters/LayerNorm/{gamma,beta}` for the adapter's own LayerNorm).

  Call arguments:
    inputs: float Tensor of shape [..., hidden_size].
    adapter_input: what the bottleneck reads, of the same shape; None: inputs
      (apply_adapter).
  Returns:
    float Tensor of the same shape.
  """

  def __init__(self, size: int = 64, init_scale: float = 1e-3,
               activation: str = "gelu", layer_norm: bool = False, scaling: float = 1.0,
               **kwargs):
    kwargs.setdefault("name", "adapters")
    super().__init__(**kwargs)
    AdapterConfig(size, init_scale, activation, layer_norm=layer_norm,
                  scaling=scaling)  # Validates them.
    if size == 0:
      raise ValueError("an Adapter layer needs size > 0; size 0 means no adapter layer")
    self.size = size
    self.init_scale = init_scale
    self.activation = activation
    self.layer_norm = layer_norm
    self.scaling = scaling

  def build(self, input_shape):
    hidden_size = input_shape[-1]
    init = keras.initializers.TruncatedNormal(stddev=self.init_scale)
    self.weights1 = self.add_weight(
        name="weights1", shape=(hidden_size, self.size), initializer=init)
    self.biases1 = self.add_weight(
        name="biases1", shape=(1, self.size), initializer="zeros")
    self.weights2 = self.add_weight(
        name="weights2", shape=(self.size, hidden_size), initializer=init)
    self.biases2 = self.add_weight(
        name="biases2", shape=(1, hidden_size), initializer="zeros")
    if self.layer_norm:
      # gamma 0: a new adapter is the identity, as HyperFormer++'s generated
      # gamma starts near 0 (Houlsby's adapter starts near it by init_scale).
      self.gamma = self.add_weight(name="gamma", shape=(hidden_size,), initializer="zeros")
      self.beta = self.add_weight(name="beta", shape=(hidden_size,), initializer="zeros")

  def adapter_weights(self) -> AdapterWeights:
    """Its variables as AdapterWeights."""
    return AdapterWeights(self.weights1, self.biases1, self.weights2, self.biases2,
                          (self.gamma, self.beta) if self.layer_norm else ())

  def call(self, inputs, adapter_input=None):
    return apply_adapter(inputs, self.adapter_weights(), self.activation,
                         adapter_input=adapter_input, scaling=self.scaling)

  def tf1_variable_names(self) -> dict:
    """Its variables by their names under the adapter's TF1 scope."""
    return self.adapter_weights().by_tf1_name()

  def get_config(self):
    config = super().get_config()
    config.update(size=self.size, init_scale=self.init_scale,
                  activation=self.activation, layer_norm=self.layer_norm,
                  scaling=self.scaling)
    return config


@keras.saving.register_keras_serializable(package=KERAS_PACKAGE)
class LowRankUpdate(keras.layers.Layer):
  """`s (x A) B`: LoRA's update of a projection x W + b (Hu et al. 2022).

  A [in, r] starts He-uniform and B [r, out] zero, as Keras' Dense.enable_lora
  and PEFT, so a new update is 0. Written here rather than through
  Dense.enable_lora because its weights must carry adapter-bert's TF1 scope
  names (`.../adapters/lora_a`) for adapter-only files, banks and the
  trainable-variable rules, and because Keras' layer rebuilds the merged kernel
  whenever it is read.

  Call arguments:
    inputs: float Tensor [tokens, in].
  Returns:
    float Tensor [tokens, out].
  """

  def __init__(self, rank: int, units: int, scaling: float = 1.0, **kwargs):
    kwargs.setdefault("name", "lora")
    super().__init__(**kwargs)
    if rank < 1:
      raise ValueError(f"a LoRA update needs rank >= 1, got {rank!r}")
    self.rank = rank
    self.units = units
    self.scaling = scaling

  def build(self, input_shape):
    self.lora_a = self.add_weight(name="lora_a", shape=(input_shape[-1], self.rank),
                                  initializer="he_uniform")
    self.lora_b = self.add_weight(name="lora_b", shape=(self.rank, self.units),
                                  initializer="zeros")

  def call(self, inputs):
    y = tf.matmul(tf.matmul(inputs, self.lora_a), self.lora_b)
    return y * self.scaling if self.scaling != 1.0 else y

  def low_rank_weights(self) -> LowRankWeights:
    """Its variables as LowRankWeights (s folded into b)."""
    return LowRankWeights(self.lora_a, self.lora_b * self.scaling
                          if self.scaling != 1.0 else self.lora_b)

  def tf1_variable_names(self) -> dict:
    """Its variables by their names under the projection's `adapters` scope."""
    return {"lora_a": self.lora_a, "lora_b": self.lora_b}

  def get_config(self):
    config = super().get_config()
    config.update(rank=self.rank, units=self.units, scaling=self.scaling)
    return config


# --- Adapter designs: each one Design, in one registry ------------------------

# Where a design's weights act in a Transformer layer (modeling.TransformerBlock),
# in call order: on the query and value projections, and after the attention
# and the feed-forward sub-layers (after their output projection and dropout,
# before the residual add and LayerNorm).
PLACES = ("query", "value", "attention", "feed_forward")


class PlaceInputs(NamedTuple):
  """What the weights at one place of a layer may read.

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
    """The PLACES of every layer where a model of `config` has its weights."""
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
    zero-padded so that padding and a task without them add exactly 0."""
    raise NotImplementedError


def _pad(value, shape) -> np.ndarray:
  """`value` as float32, zero-padded at the end of every axis to `shape`."""
  value = np.asarray(value, np.float32)
  out = np.zeros(shape, np.float32)
  out[tuple(slice(0, d) for d in value.shape)] = value
  return out


class _Bottleneck(Design):
  """h + A(a), A(a) = s (W2 act(W1 a + b1) + b2), an Adapter layer's weights
  (TF1 names weights1, biases1, weights2, biases2); a: what `reads` gives."""

  def reads(self, inputs: PlaceInputs):
    del inputs
    return None  # h itself.

  def make_layer(self, config, units, name):
    del units  # The hidden size, from the input.
    return Adapter(config.size, config.init_scale, config.activation, config.layer_norm,
                   config.scaling, name=name)

  def apply_layer(self, layer, h, inputs):
    return layer(h, adapter_input=self.reads(inputs))

  def task_weights(self, layer, config):
    return self.weights_types[0](*layer.adapter_weights().scaled(config.scaling))

  def apply(self, h, weights, inputs):
    return apply_adapter(h, weights, inputs.activation, inputs.batch_size,
                         adapter_input=self.reads(inputs))

  def stack(self, items, hidden):
    # Bottleneck widths padded to the largest (zero units: act(0) = 0 for every
    # activation, and their rows of weights2 are 0); adapters with and without
    # their own LayerNorm are two in turn (gamma = beta = 0 adds exactly 0).
    stacked = []
    for normalized in sorted({bool(w.layer_norm) for w in items if w is not None}):
      owners = [w is not None and bool(w.layer_norm) == normalized for w in items]
      size = max(w.weights1.shape[-1] for w, owner in zip(items, owners) if owner)
      shapes = [(hidden, size), (size,), (size, hidden), (hidden,)]
      shapes += [(hidden,), (hidden,)] if normalized else []
      rows = [[_pad(np.reshape(a, (-1,)) if len(shape) == 1 else a, shape)  # Biases [1, n].
               for a, shape in zip(list(w[:4]) + list(w.layer_norm), shapes)] if owner else
              [np.zeros(shape, np.float32) for shape in shapes]
              for w, owner in zip(items, owners)]
      arrays = [np.stack(column) for column in zip(*rows)]
      stacked.append(self.weights_types[0](*arrays[:4], layer_norm=tuple(arrays[4:])))
    return tuple(stacked)


class ParallelAdapterWeights(AdapterWeights):
  """AdapterWeights of the parallel design (the design_of them)."""


class PfeifferAdapterWeights(AdapterWeights):
  """AdapterWeights of the Pfeiffer design (the design_of them)."""


class Houlsby(_Bottleneck):
  """LN(h + A(h) + r): Houlsby et al. 2019 (adapter-bert), after both sub-layers,
  with h a sub-layer's output, r its input, LN its LayerNorm. With its own
  LayerNorm (AdapterConfig.layer_norm): HyperFormer++'s, s LN'(W2 ... + b2)."""
  name = "houlsby"
  summary = "the paper"
  weights_types = (AdapterWeights,)
  own_layer_norm = True
  fusable = True
  adapterhub_form = {"original_ln_before": False, "is_parallel": False}


class Pfeiffer(_Bottleneck):
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


class Parallel(_Bottleneck):
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
    a = [_pad(w.a, (hidden, rank)) if w is not None else np.zeros((hidden, rank), np.float32)
         for w in items]
    b = [_pad(w.b, (rank, hidden)) if w is not None else np.zeros((rank, hidden), np.float32)
         for w in items]
    return (LowRankWeights(np.stack(a), np.stack(b)),)


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


for _design in (Houlsby(), Pfeiffer(), Parallel(), LoRA()):
  register_design(_design)

# The built-in designs a model can have (the --adapter_design flag's values),
# and each one's placement where none is given.
DESIGNS = tuple(n for n, d in _REGISTRY.items() if d.selectable)
DEFAULT_PLACEMENTS = {n: _REGISTRY[n].default_placement for n in DESIGNS}
