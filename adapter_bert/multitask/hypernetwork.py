"""HyperFormer++ (Mahabadi et al., ACL 2021): one hypernetwork generates every task's adapters.

For task t, Transformer layer i and adapter position j (after the attention or
after the feed-forward sub-layer), a task projector h_I maps the concatenation
of a task embedding z_t, a layer-id embedding l_i and a position embedding p_j
to a small vector I = h_I([z_t; l_i; p_j]) (two dense layers with a ReLU
between). Shared linear generators turn I into the adapter of that place:

    D = W_D I + b_D  (hidden x m), its bias  B_D I + c_D  (m),
    U = W_U I + b_U  (m x hidden), its bias  B_U I + c_U  (hidden),
    gamma = W_g I + b_g, beta = W_b I + b_b  (hidden),

for the adapter A(x) = LN_t(U(GeLU(D x))) + x of the paper, whose LayerNorm
has the generated, task-conditional gamma and beta (an adapter_layers.Adapter
with its own LayerNorm, AdapterConfig.layer_norm). Everything here is shared by all tasks except the rows of
the task-embedding table.

Initialisation follows the authors' code by default: generators and projector
dense layers N(0, 0.01^2) with zero biases, embeddings N(0, 1); the generated
adapters then start near the identity, as a Houlsby adapter at init scale 1e-3.
"""

import dataclasses
import math
from typing import Dict, List, Tuple

import keras
import tensorflow as tf

from adapter_bert.model.adapter_layers import KERAS_PACKAGE, AdapterWeights
from adapter_bert.model.modeling import LayerTaskWeights

# Adapter positions in a layer, in the order of their position embeddings.
POSITIONS = ("attention", "feed_forward")


@dataclasses.dataclass(frozen=True)
class HyperFormerConfig:
  """Validated HyperFormer++ hyperparameters, saved with the model.

  Attributes:
    adapter_size: bottleneck width m of the generated adapters.
    task_embedding_dim: width of z_t, l_i and p_j.
    projector_hidden_dim: hidden width of the task projector h_I.
    projected_dim: width of I, the generators' input.
    generator_init_stddev: std of the projector's and generators' initial kernels.
    task_embedding_init_stddev: std of the initial task embeddings z_t.
  The adapters' non-linearity is BERT's GeLU, as the paper's. The two initial
  scales are the authors' (0.01 and 1) by default; they are settings because
  the spread of HyperFormer++ between seeds is tested against them.
  """
  adapter_size: int = 64
  task_embedding_dim: int = 64
  projector_hidden_dim: int = 128
  projected_dim: int = 64
  generator_init_stddev: float = 1e-2
  task_embedding_init_stddev: float = 1.0

  def __post_init__(self):
    for f in ("adapter_size", "task_embedding_dim", "projector_hidden_dim", "projected_dim"):
      value = getattr(self, f)
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"hyperformer {f} must be a positive integer, got {value!r}")
    for f in ("generator_init_stddev", "task_embedding_init_stddev"):
      value = getattr(self, f)
      if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"hyperformer {f} must be a positive number, got {value!r}")

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, d: dict) -> "HyperFormerConfig":
    unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
      raise ValueError(f"unknown hyperformer config keys: {sorted(unknown)}")
    return cls(**d)


def _normal(stddev: float):
  return keras.initializers.RandomNormal(stddev=stddev)


@keras.saving.register_keras_serializable(package=KERAS_PACKAGE)
class AdapterHyperNetwork(keras.layers.Layer):
  """Generates one task's adapters for every layer and position.

  Call arguments:
    task_index: int32 scalar Tensor, the task.
  Returns:
    A list, one per Transformer layer, of modeling.LayerTaskWeights holding
    the task's adapter for each position (POSITIONS), with its own LayerNorm.
  """

  def __init__(self, config: HyperFormerConfig, num_tasks: int, num_layers: int,
               hidden_size: int, **kwargs):
    kwargs.setdefault("name", "hyperformer")
    super().__init__(**kwargs)
    if isinstance(config, dict):
      config = HyperFormerConfig.from_dict(config)
    self.config = config
    self.num_tasks = num_tasks
    self.num_layers = num_layers
    self.hidden_size = hidden_size
    c = config
    dense = lambda units, name, activation=None: keras.layers.Dense(
        units, activation=activation, kernel_initializer=_normal(c.generator_init_stddev),
        name=name)
    self.projector_hidden = dense(c.projector_hidden_dim, "projector_hidden", "relu")
    self.projector_output = dense(c.projected_dim, "projector_output")
    self._shapes = generated_shapes(config, hidden_size)
    # One linear generator per generated array, its output the array flattened.
    self.generators = {name: dense(math.prod(shape), f"{name}_generator")
                       for name, shape in self._shapes.items()}

  def build(self, input_shape=None):
    c = self.config
    self.task_embeddings = self.add_weight(
        name="task_embeddings", shape=(self.num_tasks, c.task_embedding_dim),
        initializer=_normal(c.task_embedding_init_stddev))
    self.layer_embeddings = self.add_weight(
        name="layer_embeddings", shape=(self.num_layers, c.task_embedding_dim),
        initializer=_normal(1.0))
    self.position_embeddings = self.add_weight(
        name="position_embeddings", shape=(len(POSITIONS), c.task_embedding_dim),
        initializer=_normal(1.0))
    self.projector_hidden.build((None, 3 * c.task_embedding_dim))
    self.projector_output.build((None, c.projector_hidden_dim))
    for generator in self.generators.values():
      generator.build((None, c.projected_dim))

  def projected(self, task_index) -> tf.Tensor:
    """I for every (layer, position) of the task: [num_layers * 2, projected_dim]."""
    d, n, p = self.config.task_embedding_dim, self.num_layers, len(POSITIONS)
    z = tf.gather(self.task_embeddings, task_index)
    # Rows in (layer, position) order: layer i's two positions are rows 2i, 2i + 1.
    inputs = tf.concat([
        tf.broadcast_to(z[tf.newaxis, tf.newaxis, :], [n, p, d]),
        tf.broadcast_to(self.layer_embeddings[:, tf.newaxis, :], [n, p, d]),
        tf.broadcast_to(self.position_embeddings[tf.newaxis, :, :], [n, p, d])], axis=-1)
    return self.projector_output(self.projector_hidden(tf.reshape(inputs, [n * p, 3 * d])))

  def call(self, task_index) -> List[LayerTaskWeights]:
    projected = self.projected(task_index)
    g = {name: tf.reshape(self.generators[name](projected),
                          (self.num_layers, len(POSITIONS)) + shape)
         for name, shape in self._shapes.items()}
    adapter = lambda i, j: AdapterWeights(g["weights1"][i, j], g["biases1"][i, j],
                                          g["weights2"][i, j], g["biases2"][i, j],
                                          (g["gamma"][i, j], g["beta"][i, j]))
    # POSITIONS order: attention, feed_forward.
    return [LayerTaskWeights(attention_adapters=(adapter(i, 0),),
                             feed_forward_adapters=(adapter(i, 1),))
            for i in range(self.num_layers)]

  def variable_map(self, prefix: str) -> Dict[str, keras.Variable]:
    """Every variable by a checkpoint name under `prefix`."""
    names = {f"{prefix}/{w}": getattr(self, w)
             for w in ("task_embeddings", "layer_embeddings", "position_embeddings")}
    for layer in [self.projector_hidden, self.projector_output, *self.generators.values()]:
      names[f"{prefix}/{layer.name}/kernel"] = layer.kernel
      names[f"{prefix}/{layer.name}/bias"] = layer.bias
    return names

  def get_config(self):
    config = super().get_config()
    config.update(config=self.config.to_dict(), num_tasks=self.num_tasks,
                  num_layers=self.num_layers, hidden_size=self.hidden_size)
    return config


def generated_shapes(config: HyperFormerConfig, hidden_size: int) -> Dict[str, Tuple[int, ...]]:
  """The shape of each generated array of one adapter."""
  m, h = config.adapter_size, hidden_size
  return {"weights1": (h, m), "biases1": (m,), "weights2": (m, h), "biases2": (h,),
          "gamma": (h,), "beta": (h,)}
