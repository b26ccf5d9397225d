"""Houlsby bottleneck adapters (Houlsby et al., ICML 2019) as Keras 3 layers."""

import dataclasses
import json
from typing import NamedTuple, Tuple

import keras
import tensorflow as tf


def gelu(x):
  """BERT's GELU: the tanh approximation, as in google-research/bert."""
  return keras.activations.gelu(x, approximate=True)


# The names google-research/bert modeling.py `get_activation` accepts for
# `hidden_act`; adapters choose from the same list.
_ACTIVATIONS = {"gelu": gelu, "relu": keras.activations.relu,
                "tanh": keras.activations.tanh, "linear": keras.activations.linear}
ACTIVATION_NAMES = tuple(_ACTIVATIONS)

# Where a Transformer layer's adapters go: after both sub-layers (the paper's
# model and the default), or after one of them only (the paper also tried
# adapters after the attention sub-layer alone, and found two per layer best).
PLACEMENTS = ("both", "attention", "feed_forward")


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
    size: bottleneck width m; 0 means no adapters (plain BERT).
    init_scale: stddev of the truncated-normal init of both projections
      (1e-3 in the paper, so a fresh adapter is near the identity).
    activation: non-linearity of the bottleneck; the original uses BERT's
      tanh-approximated GELU.
    placement: "both" (an adapter after the attention and one after the
      feed-forward sub-layer of every layer), "attention" or "feed_forward"
      (after that sub-layer only).
  """
  size: int = 64
  init_scale: float = 1e-3
  activation: str = "gelu"
  placement: str = "both"

  def __post_init__(self):
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

  @property
  def enabled(self) -> bool:
    return self.size > 0

  @property
  def sublayers(self) -> Tuple[str, ...]:
    """The sub-layers an adapter follows ("attention", "feed_forward"); () without adapters."""
    if not self.enabled:
      return ()
    return ("attention", "feed_forward") if self.placement == "both" else (self.placement,)

  def to_dict(self) -> dict:
    d = dataclasses.asdict(self)
    # Only where it is not the default: run_config.json and adapter files of
    # two-adapter models stay as they were before placement existed, so they
    # compare equal to older ones (from_dict reads a missing key as "both").
    if d["placement"] == "both":
      del d["placement"]
    return d

  @classmethod
  def from_dict(cls, d: dict) -> "AdapterConfig":
    unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
      raise ValueError(f"unknown adapter config keys: {sorted(unknown)}")
    return cls(**d)

  def to_json_string(self) -> str:
    return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


# The package every Keras object of the project is registered under (saved models name it).
KERAS_PACKAGE = "adapter_bert"


@keras.saving.register_keras_serializable(package=KERAS_PACKAGE)
class Adapter(keras.layers.Layer):
  """`x + W2 · act(W1 · x + b1) + b2`: the bottleneck adapter of Houlsby et al.

  No dropout and no normalization inside, as in google-research/adapter-bert.
  Weight names follow the original checkpoints
  (`.../adapters/{weights1,biases1,weights2,biases2}`).

  Call arguments:
    inputs: float Tensor of shape [batch_size, seq_length, hidden_size].
  Returns:
    float Tensor of the same shape.
  """

  def __init__(self, size: int = 64, init_scale: float = 1e-3,
               activation: str = "gelu", **kwargs):
    kwargs.setdefault("name", "adapters")
    super().__init__(**kwargs)
    AdapterConfig(size, init_scale, activation)  # Validates the arguments.
    if size == 0:
      raise ValueError("an Adapter layer needs size > 0; size 0 means no adapter layer")
    self.size = size
    self.init_scale = init_scale
    self.activation = activation
    self._activation_fn = get_activation(activation)

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

  def call(self, inputs):
    # One 2-D product over all tokens: tf.matmul of a [batch, seq, hidden]
    # tensor by a 2-D kernel broadcasts into BatchMatMulV2, whose gradients
    # took about twice as long on the project's 2-core CPU.
    x = tf.reshape(inputs, [-1, self.weights1.shape[0]])
    h = self._activation_fn(tf.matmul(x, self.weights1) + self.biases1)
    y = x + tf.matmul(h, self.weights2) + self.biases2
    return tf.reshape(y, tf.shape(inputs))

  def get_config(self):
    config = super().get_config()
    config.update(size=self.size, init_scale=self.init_scale,
                  activation=self.activation)
    return config


class GeneratedAdapter(NamedTuple):
  """One adapter's weights made by a hypernetwork (multitask/hypernetwork.py).

  weights1 [hidden, m], biases1 [m], weights2 [m, hidden], biases2 [hidden]:
  the down and up projections; gamma, beta [hidden]: the adapter's own
  task-conditional LayerNorm.
  """
  weights1: tf.Tensor
  biases1: tf.Tensor
  weights2: tf.Tensor
  biases2: tf.Tensor
  gamma: tf.Tensor
  beta: tf.Tensor


# The adapter LayerNorm's epsilon: torch's default, as HyperFormer's code. The
# generated gamma starts near 0, so the adapter starts near the identity.
GENERATED_ADAPTER_EPSILON = 1e-5


def generated_adapter(inputs, weights: GeneratedAdapter):
  """`x + LN(W2 · gelu(W1 · x + b1) + b2; gamma, beta)`: HyperFormer's adapter.

  Mahabadi et al. (2021), A(x) = LN_t(U(GeLU(D(x)))) + x, with weights that are
  tensors (generated per task), not variables of a layer.

  Args:
    inputs: float Tensor [..., hidden].
  Returns:
    float Tensor of the shape of `inputs`.
  """
  hidden = weights.weights1.shape[0]
  x = tf.reshape(inputs, [-1, hidden])  # 2-D products, as Adapter.call.
  h = gelu(tf.nn.bias_add(tf.matmul(x, weights.weights1),
                                                weights.biases1))
  up = tf.nn.bias_add(tf.matmul(h, weights.weights2), weights.biases2)
  normalized = keras.ops.layer_normalization(up, weights.gamma, weights.beta, axis=-1,
                                             epsilon=GENERATED_ADAPTER_EPSILON)
  return tf.reshape(x + normalized, tf.shape(inputs))
