"""Houlsby bottleneck adapters (Houlsby et al., ICML 2019) as Keras 3 layers."""

import dataclasses
import json
import math
from typing import NamedTuple, Optional, Tuple

import keras
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
  """
  x2 = x * x
  t = tf.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x2 * x))
  half_x = 0.5 * x
  derivative = (0.5 * (1.0 + t)
                + half_x * (1.0 - t * t) * (_SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * x2)))
  return half_x * (1.0 + t), lambda dy: dy * derivative


# The names google-research/bert modeling.py `get_activation` accepts for
# `hidden_act`; adapters choose from the same list.
_ACTIVATIONS = {"gelu": gelu, "relu": keras.activations.relu,
                "tanh": keras.activations.tanh, "linear": keras.activations.linear}
ACTIVATION_NAMES = tuple(_ACTIVATIONS)

# Where a Transformer layer's adapters go: after both sub-layers (the paper's
# model and the default), or after one of them only (the paper also tried
# adapters after the attention sub-layer alone, and found two per layer best).
PLACEMENTS = ("both", "attention", "feed_forward")

# The adapter designs, each wired into the same Transformer block
# (modeling.TransformerBlock), with h a sub-layer's output (after its
# dropout), r its input, LN its LayerNorm and A(x) = s (W2 act(W1 x + b1) + b2):
#   houlsby:  LN(h + A(h) + r)          Houlsby et al. 2019 (adapter-bert)
#   pfeiffer: LN(h + A(LN(h + r)) + r)  Pfeiffer et al. 2021, as the PyTorch
#             `adapters` library's SeqBnConfig: the adapter reads the
#             sub-layer's normalized output, its residual is h, and the same
#             LayerNorm is applied again after it; one per layer, after the
#             feed-forward sub-layer.
#   parallel: LN(h + A(r) + r)          He et al. 2022: the adapter reads the
#             sub-layer's input, beside the sub-layer; after the feed-forward one.
#   lora:     x W + b + s (x A) B on the query and value projections, A random,
#             B zero (Hu et al. 2022); `size` is the rank r, and s = alpha / r.
DESIGNS = ("houlsby", "pfeiffer", "parallel", "lora")
# Each design's placement and scaling s where none is given: the papers'
# (He et al. scale the parallel adapter by 4; alpha = r, Keras' LoRA default).
DEFAULT_PLACEMENTS = {"houlsby": "both", "pfeiffer": "feed_forward",
                      "parallel": "feed_forward", "lora": "both"}
DEFAULT_SCALING = {"houlsby": 1.0, "pfeiffer": 1.0, "parallel": 4.0, "lora": 1.0}


def get_activation(name: str):
  """Maps an activation name ("gelu", "relu", "tanh", "linear") to a function.

  Raises:
    ValueError: `name` is none of those.
  """
  if name not in _ACTIVATIONS:
    raise ValueError(f"unknown activation {name!r}; known: {list(ACTIVATION_NAMES)}")
  return _ACTIVATIONS[name]


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
      (after that sub-layer only); None: the design's (DEFAULT_PLACEMENTS).
    layer_norm: the adapter normalizes its up-projection with a LayerNorm of
      its own before the residual add (HyperFormer++'s adapter, Mahabadi et
      al. 2021, whose weights a hypernetwork makes); Houlsby's has none.
    design: how the adapter is wired into a layer (DESIGNS).
    scaling: s, the factor of the adapter's output; None: the design's
      (DEFAULT_SCALING).
  """
  size: int = 64
  init_scale: float = 1e-3
  activation: str = "gelu"
  placement: Optional[str] = None
  layer_norm: bool = False
  design: str = "houlsby"
  scaling: Optional[float] = None

  def __post_init__(self):
    if self.design not in DESIGNS:
      raise ValueError(f"adapter design must be one of {list(DESIGNS)}, got {self.design!r}")
    if self.placement is None:
      object.__setattr__(self, "placement", DEFAULT_PLACEMENTS[self.design])
    if self.scaling is None:
      object.__setattr__(self, "scaling", DEFAULT_SCALING[self.design])
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
    if self.design == "lora" and self.placement != "both":
      raise ValueError("adapter placement does not apply to design lora (it adapts "
                       f"every layer's query and value projections), got {self.placement!r}")
    if not isinstance(self.layer_norm, bool):
      raise ValueError(f"adapter layer_norm must be true or false, got {self.layer_norm!r}")
    if self.layer_norm and self.design != "houlsby":
      raise ValueError("an adapter's own LayerNorm (HyperFormer++'s) needs design houlsby, "
                       f"got {self.design!r}")
    if not self.scaling > 0:
      raise ValueError(f"adapter scaling must be > 0, got {self.scaling!r}")

  @property
  def enabled(self) -> bool:
    return self.size > 0

  @property
  def lora(self) -> bool:
    """Low-rank updates of the query and value projections instead of bottlenecks."""
    return self.enabled and self.design == "lora"

  @property
  def sublayers(self) -> Tuple[str, ...]:
    """The sub-layers a bottleneck adapter follows ("attention", "feed_forward");
    () without adapters and for LoRA."""
    if not self.enabled or self.lora:
      return ()
    return ("attention", "feed_forward") if self.placement == "both" else (self.placement,)

  def to_dict(self) -> dict:
    d = dataclasses.asdict(self)
    # Only where they are not the default: run_config.json and adapter files
    # of Houlsby models stay as they were before these keys existed, so they
    # compare equal to older ones (from_dict reads a missing key as the default).
    defaults = (("design", "houlsby"), ("placement", DEFAULT_PLACEMENTS[self.design]),
                ("layer_norm", False), ("scaling", DEFAULT_SCALING[self.design]))
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


# --- AdapterFusion (Pfeiffer et al., EACL 2021) ------------------------------

def apply_fusion(tokens, adapters: Tuple[AdapterWeights, ...], query, query_bias, key,
                 key_bias, value, activation: str = "gelu", mask=None, batch_size=None):
  """AdapterFusion at one place of a layer: an attention over frozen adapters.

  With h a token's input to the adapters (the sub-layer's output) and z_n =
  adapter_n(h) - h the n-th adapter's output before its residual add, the
  paper's equations (Sec. 3.2) are
    s = softmax_n((h Q + b_Q) · (z_n K + b_K)),   o = h + (sum_n s_n z_n) V.
  V is applied after the weighted sum: by linearity the same as weighting
  the z_n V (the paper), with one product instead of N.

  Args:
    tokens: float Tensor [batch_size * seq_length, hidden] (or [batch_size,
      seq_length, hidden]).
    adapters: the N frozen adapters' weights, shared by the batch.
    query, key, value: [hidden, hidden]; query_bias, key_bias: [hidden]; or
      each with a leading batch axis: each example's own fusion.
    activation: the adapters' non-linearity.
    mask: None, or float [batch_size, N]: 1 where an example fuses that
      adapter, 0 where it leaves it out (at least one 1 a row).
    batch_size: scalar, needed for per-example weights.
  Returns:
    (o, the shape of `tokens`; s, float32 [tokens, N]: each token's attention
    over the adapters, in `adapters` order).
  """
  hidden = query.shape[-1]
  h = tf.reshape(tokens, [-1, hidden])
  z = tf.stack([apply_adapter(h, w, activation) - h for w in adapters], axis=1)  # [t, N, H]
  if len(query.shape) == 2:  # One fusion for the batch: 2-D products over all tokens.
    q = tf.matmul(h, query) + query_bias
    k = tf.reshape(tf.matmul(tf.reshape(z, [-1, hidden]), key) + key_bias, tf.shape(z))
    scores = tf.einsum("th,tnh->tn", q, k)
  else:  # Each example its own: [batch, seq, ...] against [batch, hidden, hidden].
    hb = tf.reshape(h, [batch_size, -1, hidden])
    zb = tf.reshape(z, [batch_size, -1, len(adapters), hidden])
    q = tf.einsum("bsh,bhk->bsk", hb, query) + query_bias[:, tf.newaxis, :]
    k = tf.einsum("bsnh,bhk->bsnk", zb, key) + key_bias[:, tf.newaxis, tf.newaxis, :]
    scores = tf.reshape(tf.einsum("bsk,bsnk->bsn", q, k), [-1, len(adapters)])
  scores = tf.cast(scores, tf.float32)
  if mask is not None:
    per_token = tf.reshape(tf.repeat(tf.cast(mask, tf.float32)[:, tf.newaxis, :],
                                     tf.shape(h)[0] // batch_size, axis=1), tf.shape(scores))
    scores = tf.where(per_token > 0, scores, -1e9)
  probs = tf.nn.softmax(scores, axis=-1)
  mixed = tf.einsum("tn,tnh->th", tf.cast(probs, z.dtype), z)
  if len(value.shape) == 2:
    fused = tf.matmul(mixed, value)
  else:
    fused = tf.reshape(tf.einsum("bsh,bhk->bsk", tf.reshape(mixed, [batch_size, -1, hidden]),
                                 value), [-1, hidden])
  return tf.reshape(h + fused, tf.shape(tokens)), probs


@keras.saving.register_keras_serializable(package=KERAS_PACKAGE)
class AdapterFusion(keras.layers.Layer):
  """The fusion weights of one place of one layer: query and key [hidden, hidden]
  with biases, value [hidden, hidden] without, initialised to the identity (a new
  fusion passes the mean of the adapters' outputs through unchanged).

  The query and key start as BERT's dense layers (truncated normal, stddev
  `initializer_range`, zero bias). `fuse` applies it (apply_fusion) and keeps
  the last attention probabilities in `last_attention` (read within the same
  trace: the fusion model returns them as an output).
  """

  def __init__(self, initializer_range: float = 0.02, **kwargs):
    kwargs.setdefault("name", "adapter_fusion")
    super().__init__(**kwargs)
    self.initializer_range = initializer_range
    self.last_attention = None

  def build(self, input_shape):
    hidden = input_shape[-1]
    init = keras.initializers.TruncatedNormal(stddev=self.initializer_range)
    self.query = self.add_weight(name="query_kernel", shape=(hidden, hidden), initializer=init)
    self.query_bias = self.add_weight(name="query_bias", shape=(hidden,), initializer="zeros")
    self.key = self.add_weight(name="key_kernel", shape=(hidden, hidden), initializer=init)
    self.key_bias = self.add_weight(name="key_bias", shape=(hidden,), initializer="zeros")
    self.value = self.add_weight(name="value_kernel", shape=(hidden, hidden),
                                 initializer="identity")

  def fuse(self, tokens, adapters: Tuple[AdapterWeights, ...], activation: str = "gelu"):
    # In the tokens' dtype (16 bits under mixed precision), as Keras' autocast
    # would in a call: the float32 variables, and the fused adapters too.
    cast = lambda t: tf.cast(t, tokens.dtype)
    output, self.last_attention = apply_fusion(
        tokens, tf.nest.map_structure(cast, tuple(adapters)),
        *(cast(v) for v in (self.query, self.query_bias, self.key, self.key_bias, self.value)),
        activation)
    return output

  def regularization(self):
    """||I - V||^2 (squared Frobenius norm): the paper's term that keeps V near the identity."""
    return tf.reduce_sum(tf.square(tf.eye(self.value.shape[0]) - self.value))

  def tf1_variable_names(self) -> dict:
    """Its variables by their names under its TF1 scope."""
    return {"query/kernel": self.query, "query/bias": self.query_bias,
            "key/kernel": self.key, "key/bias": self.key_bias, "value/kernel": self.value}

  def get_config(self):
    config = super().get_config()
    config.update(initializer_range=self.initializer_range)
    return config


class FusionWeights(NamedTuple):
  """An AdapterFusion as tensors, each with a leading batch axis (each example's
  own, as a multi-task SavedModel gathers them): an item of the adapter tuples a
  TransformerBlock's call takes (modeling.LayerTaskWeights), in place of one
  adapter. `adapters` are shared by the batch; mask [batch_size, N] (apply_fusion).
  """
  adapters: tuple
  query: tf.Tensor
  query_bias: tf.Tensor
  key: tf.Tensor
  key_bias: tf.Tensor
  value: tf.Tensor
  mask: tf.Tensor

  def __call__(self, tokens, activation: str, batch_size):
    return apply_fusion(tokens, self.adapters, self.query, self.query_bias, self.key,
                        self.key_bias, self.value, activation, self.mask, batch_size)[0]


class FusedAdapters:
  """Frozen adapters combined by an AdapterFusion layer: an item of the adapter
  tuples a TransformerBlock's call takes (modeling.LayerTaskWeights), in place
  of one adapter. A plain object, not a tuple: Keras passes a call argument
  that holds it (with a layer inside) as it is, where it refuses tensors
  mixed with other values.
  """

  def __init__(self, adapters: Tuple[AdapterWeights, ...], fusion: AdapterFusion):
    self.adapters = tuple(adapters)  # One per fused task.
    self.fusion = fusion

  def __call__(self, tokens, activation: str, batch_size=None):
    del batch_size  # Shared by the batch.
    return self.fusion.fuse(tokens, self.adapters, activation)
