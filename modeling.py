"""BERT with Houlsby adapters in Keras 3: config, Transformer block, encoder, task models.

Numerics follow google-research/bert: tanh-approximated GELU, LayerNorm epsilon
1e-12, -10000 added to masked attention scores, truncated-normal initialisers,
dropout only when `training=True`. Adapters sit where google-research/adapter-bert
put them: after each sub-layer's output projection and dropout, before the
residual add and LayerNorm (AdapterConfig.placement: after both sub-layers, or
one of them). `adapters_removed` switches trained adapters off for an ablation.

Every variable has a name in Google's TF1 checkpoints; `tf1_variable_map()` on
each model is the one table from Keras variables to those names, used for
checkpoint loading, adapter-only files and, through `variable_role`, for deciding
what trains.

Every layer and model is Keras-serializable (`get_config`/`from_config`, package
"adapter_bert"); BertConfig and AdapterConfig travel as their plain dicts.
"""

import contextlib
import dataclasses
import json
import math
from typing import Dict, Iterable, Tuple

import keras
import tensorflow as tf

from adapter_layers import Adapter, AdapterConfig, generated_adapter, get_activation
import errors
from storage import input_files

_PACKAGE = "adapter_bert"

NO_ADAPTERS = AdapterConfig(size=0)

# The TF1 scope of the adapter after each sub-layer (adapter-bert's names).
_ADAPTER_SCOPES = {"attention": "attention/output", "feed_forward": "output"}


def adapter_scopes(adapter_config: AdapterConfig) -> Tuple[str, ...]:
  """The TF1 scopes, under each `bert/encoder/layer_N`, of a model's adapters."""
  return tuple(_ADAPTER_SCOPES[s] for s in adapter_config.sublayers)


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


def _initializer(config: BertConfig):
  # TF1's truncated_normal_initializer and Keras' TruncatedNormal both cut at 2 stddev.
  return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


def _layer_norm(name: str):
  return keras.layers.LayerNormalization(epsilon=1e-12, name=name)


# Constructor arguments that are config dataclasses, serialized as plain dicts.
_CONFIG_CLASSES = {"config": BertConfig, "adapter_config": AdapterConfig}


class _Serializable:
  """`get_config`/`from_config` from the constructor arguments in `_init_args`.

  Each argument is read back from the attribute of the same name; BertConfig and
  AdapterConfig become their `to_dict()` so the config stays JSON.
  """
  _init_args = ("config", "adapter_config")

  def get_config(self):
    config = super().get_config()
    for arg in self._init_args:
      value = getattr(self, arg)
      config[arg] = value.to_dict() if arg in _CONFIG_CLASSES else value
    return config

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    for arg, config_class in _CONFIG_CLASSES.items():
      if isinstance(config.get(arg), dict):
        config[arg] = config_class.from_dict(config[arg])
    return super().from_config(config)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class BertEmbeddings(_Serializable, keras.layers.Layer):
  """Word + position + token-type embeddings, LayerNorm, dropout.

  Call arguments:
    input_ids: int32 Tensor of shape [batch_size, seq_length].
    segment_ids: int32 Tensor of shape [batch_size, seq_length].
  Returns:
    float32 Tensor of shape [batch_size, seq_length, hidden_size].
  """

  _init_args = ("config",)

  def __init__(self, config: BertConfig, **kwargs):
    kwargs.setdefault("name", "embeddings")
    # Under a mixed-precision policy the rows are gathered from the float32
    # tables and summed in float32 (the LayerNorm computes in float32 anyway);
    # autocasting would cast the whole tables every step.
    kwargs.setdefault("autocast", False)
    super().__init__(**kwargs)
    self.config = config
    self.layer_norm = _layer_norm("LayerNorm")
    self.dropout = keras.layers.Dropout(config.hidden_dropout_prob)

  def build(self, input_shape):
    c, init = self.config, _initializer(self.config)
    self.word_embeddings = self.add_weight(
        name="word_embeddings", shape=(c.vocab_size, c.hidden_size), initializer=init)
    self.token_type_embeddings = self.add_weight(
        name="token_type_embeddings", shape=(c.type_vocab_size, c.hidden_size),
        initializer=init)
    self.position_embeddings = self.add_weight(
        name="position_embeddings", shape=(c.max_position_embeddings, c.hidden_size),
        initializer=init)
    self.layer_norm.build((None, None, c.hidden_size))

  def call(self, input_ids, segment_ids, training=None):
    seq_length = tf.shape(input_ids)[1]
    x = tf.gather(self.word_embeddings, input_ids)
    x += tf.gather(self.token_type_embeddings, segment_ids)
    x += self.position_embeddings[tf.newaxis, :seq_length, :]
    x = tf.cast(self.layer_norm(x), self.compute_dtype)
    return self.dropout(x, training=training)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class TokenDense(keras.layers.Dense):
  """keras.layers.Dense over a [tokens, features] matrix, with a fused bias add.

  Dense's own MatMul + AddV2 becomes MatMul + BiasAdd, which TensorFlow's graph
  optimizer fuses into one kernel (with the activation where it can).
  """

  def call(self, inputs, training=None):
    del training
    y = tf.matmul(inputs, self.kernel)
    if self.bias is not None:
      y = tf.nn.bias_add(y, self.bias)
    return self.activation(y) if self.activation is not None else y


@keras.saving.register_keras_serializable(package=_PACKAGE)
class TransformerBlock(_Serializable, keras.layers.Layer):
  """One post-LayerNorm Transformer layer of BERT, with optional adapters.

  attention: dense -> dropout -> adapter -> LayerNorm(. + layer_input)
  feed-forward: dense -> dropout -> adapter -> LayerNorm(. + attention_output)
  Each adapter is there if adapter_config.placement puts one after that sub-layer.

  Every token-wise product (projections, feed-forward, adapters) runs as one
  2-D MatMul over all batch_size * seq_length tokens, its bias add fused
  (TokenDense); only the attention scores are 4-D.

  Call arguments:
    x: float32 Tensor of shape [batch_size, seq_length, hidden_size].
    attention_bias: float32 Tensor of shape [batch_size, 1, 1, seq_length],
      0 for real tokens and -10000 for padding.
    generated_adapters: optional {"attention" | "feed_forward": GeneratedAdapter},
      adapters made by a hypernetwork (HyperFormer++), applied at those places
      in addition to the layer's own (a model has one kind or the other).
  Returns:
    float32 Tensor of shape [batch_size, seq_length, hidden_size].
  """

  def __init__(self, config: BertConfig, adapter_config: AdapterConfig, **kwargs):
    super().__init__(**kwargs)
    self.config = config
    self.adapter_config = adapter_config
    h, init = config.hidden_size, _initializer(config)
    self.num_heads = config.num_attention_heads
    self.head_size = h // self.num_heads
    dense = lambda units, name, **kw: TokenDense(
        units, kernel_initializer=init, name=name, **kw)
    self.query = dense(h, "query")
    self.key = dense(h, "key")
    self.value = dense(h, "value")
    self.attention_output = dense(h, "attention_output")
    self.attention_layer_norm = _layer_norm("attention_LayerNorm")
    self.intermediate = dense(config.intermediate_size, "intermediate",
                              activation=get_activation(config.hidden_act))
    self.output_dense = dense(h, "output")
    self.output_layer_norm = _layer_norm("output_LayerNorm")
    self.attention_dropout = keras.layers.Dropout(config.attention_probs_dropout_prob)
    self.hidden_dropout = keras.layers.Dropout(config.hidden_dropout_prob)
    a = adapter_config
    adapter = lambda sublayer, name: (
        Adapter(a.size, a.init_scale, a.activation, name=name)
        if sublayer in a.sublayers else None)
    self.attention_adapters = adapter("attention", "attention_adapters")
    self.output_adapters = adapter("feed_forward", "output_adapters")
    # False: this layer's adapters are skipped (the identity), for an ablation
    # (adapters_removed). Read when the call is traced; no part of the config.
    self.adapters_enabled = True

  def call(self, x, attention_bias, training=None, generated_adapters=None):
    generated = generated_adapters if self.adapters_enabled else None
    shape = tf.shape(x)
    heads = [shape[0], shape[1], self.num_heads, self.head_size]
    tokens = tf.reshape(x, [-1, self.config.hidden_size])  # [batch * seq, hidden]
    q = tf.reshape(self.query(tokens), heads)
    k = tf.reshape(self.key(tokens), heads)
    v = tf.reshape(self.value(tokens), heads)
    scores = tf.einsum("bqnd,bknd->bnqk", q, k) * (1.0 / math.sqrt(self.head_size))
    # Softmax in float32 under mixed precision (no-op casts otherwise): its
    # exponentials and sums are where 16-bit formats lose the most.
    scores = tf.cast(scores, tf.float32) + tf.cast(attention_bias, tf.float32)
    probs = tf.cast(tf.nn.softmax(scores, axis=-1), x.dtype)
    probs = self.attention_dropout(probs, training=training)
    context = tf.einsum("bnqk,bknd->bqnd", probs, v)
    context = tf.reshape(context, [-1, self.config.hidden_size])
    h = self.hidden_dropout(self.attention_output(context), training=training)
    if self.attention_adapters is not None and self.adapters_enabled:
      h = self.attention_adapters(h)
    if generated and "attention" in generated:
      h = generated_adapter(h, generated["attention"])
    attention_output = self.attention_layer_norm(h + tokens)

    h = self.output_dense(self.intermediate(attention_output))
    h = self.hidden_dropout(h, training=training)
    if self.output_adapters is not None and self.adapters_enabled:
      h = self.output_adapters(h)
    if generated and "feed_forward" in generated:
      h = generated_adapter(h, generated["feed_forward"])
    return tf.reshape(self.output_layer_norm(h + attention_output), shape)

  def tf1_variable_map(self, prefix: str) -> Dict[str, keras.Variable]:
    """Keras variables of this layer by their TF1 names under `prefix`."""
    sublayers = {
        "attention/self/query": self.query,
        "attention/self/key": self.key,
        "attention/self/value": self.value,
        "attention/output/dense": self.attention_output,
        "attention/output/adapters": self.attention_adapters,
        "attention/output/LayerNorm": self.attention_layer_norm,
        "intermediate/dense": self.intermediate,
        "output/dense": self.output_dense,
        "output/adapters": self.output_adapters,
        "output/LayerNorm": self.output_layer_norm,
    }
    return {f"{prefix}/{scope}/{v.name}": v
            for scope, layer in sublayers.items() if layer is not None
            for v in layer.weights}


@contextlib.contextmanager
def adapters_removed(model: keras.Model, layers: Iterable[int]):
  """Within it, the adapters of Transformer layers `layers` (indices) are skipped.

  For the ablation of Houlsby et al. (2019, Figure 6): a skipped adapter is the
  identity, so the layer computes what it would without adapters; no weight
  changes. The switch is read when a call is traced: a tf.function traced
  before keeps what it traced (loop.predict traces afresh on every call).

  Args:
    model: a task model of this module or a BertEncoder.
  Raises:
    ValueError: a layer index the model does not have.
  """
  blocks = (model if isinstance(model, BertEncoder) else model.bert).transformer_layers
  layers = sorted(set(layers))
  bad = [i for i in layers if not 0 <= i < len(blocks)]
  if bad:
    raise ValueError(f"the model has layers 0..{len(blocks) - 1}, not layer "
                     f"{', '.join(map(str, bad))}")
  previous = [block.adapters_enabled for block in blocks]
  try:
    for i in layers:
      blocks[i].adapters_enabled = False
    yield
  finally:
    for block, enabled in zip(blocks, previous):
      block.adapters_enabled = enabled


def variable_role(tf1_name: str) -> str:
  """The part of BERT a TF1 variable name belongs to.

  Returns:
    One of "adapter", "layer_norm", "head", "embeddings", "layer", "pooler".
  """
  if "/adapters/" in tf1_name:
    return "adapter"
  if "LayerNorm" in tf1_name:
    return "layer_norm"
  if not tf1_name.startswith("bert/"):
    return "head"
  if tf1_name.startswith("bert/embeddings/"):
    return "embeddings"
  if tf1_name.startswith("bert/pooler/"):
    return "pooler"
  return "layer"


def dummy_inputs(batch_size: int = 1, seq_length: int = 2) -> Dict[str, tf.Tensor]:
  """Inputs that build a model's weights on first call."""
  ones = tf.ones([batch_size, seq_length], tf.int32)
  return {"input_ids": ones, "input_mask": ones, "segment_ids": ones * 0}


class _BuiltByCalling:
  """For models whose sublayers create their variables on the first call."""

  def ensure_built(self) -> None:
    if not self.built or not self.weights:
      self(dummy_inputs())

  def build_from_config(self, build_config):
    # Keras' default (used by load_model) replays `build(input_shape)`, which
    # creates only the head's variables; load_model then silently skips the
    # unbuilt encoder's saved weights. Shapes follow from the config alone.
    del build_config
    self(dummy_inputs())


@keras.saving.register_keras_serializable(package=_PACKAGE)
class BertEncoder(_Serializable, _BuiltByCalling, keras.Model):
  """BERT encoder: embeddings, `num_hidden_layers` Transformer blocks, tanh pooler.

  Call arguments:
    inputs: dict of int32 Tensors of shape [batch_size, seq_length]:
      "input_ids", "input_mask" (1 real, 0 padding), "segment_ids".
    generated_adapters: optional, one TransformerBlock `generated_adapters`
      per layer.
  Returns:
    dict with "sequence_output" float32 [batch_size, seq_length, hidden_size],
    "pooled_output" float32 [batch_size, hidden_size] and "encoder_outputs",
    a list of every layer's [batch_size, seq_length, hidden_size] output.
  """

  def __init__(self, config: BertConfig, adapter_config: AdapterConfig = NO_ADAPTERS,
               **kwargs):
    kwargs.setdefault("name", "bert")
    super().__init__(**kwargs)
    self.config = config
    self.adapter_config = adapter_config
    self.embeddings = BertEmbeddings(config)
    self.transformer_layers = [
        TransformerBlock(config, adapter_config, name=f"layer_{i}")
        for i in range(config.num_hidden_layers)]
    self.pooler = keras.layers.Dense(
        config.hidden_size, activation="tanh", kernel_initializer=_initializer(config),
        name="pooler")

  def call(self, inputs, training=None, generated_adapters=None):
    input_mask = tf.cast(inputs["input_mask"], tf.float32)
    attention_bias = (1.0 - input_mask[:, tf.newaxis, tf.newaxis, :]) * -10000.0
    x = self.embeddings(inputs["input_ids"], inputs["segment_ids"], training=training)
    encoder_outputs = []
    for i, layer in enumerate(self.transformer_layers):
      x = layer(x, attention_bias, training=training,
                generated_adapters=generated_adapters[i] if generated_adapters else None)
      encoder_outputs.append(x)
    return {"sequence_output": x, "pooled_output": self.pooler(x[:, 0, :]),
            "encoder_outputs": encoder_outputs}

  def tf1_variable_map(self) -> Dict[str, keras.Variable]:
    """Every variable by its name in Google's (and adapter-bert's) checkpoints."""
    self.ensure_built()
    e = self.embeddings
    names = {
        "bert/embeddings/word_embeddings": e.word_embeddings,
        "bert/embeddings/token_type_embeddings": e.token_type_embeddings,
        "bert/embeddings/position_embeddings": e.position_embeddings,
        "bert/embeddings/LayerNorm/gamma": e.layer_norm.gamma,
        "bert/embeddings/LayerNorm/beta": e.layer_norm.beta,
    }
    for i, layer in enumerate(self.transformer_layers):
      names.update(layer.tf1_variable_map(f"bert/encoder/layer_{i}"))
    names["bert/pooler/dense/kernel"] = self.pooler.kernel
    names["bert/pooler/dense/bias"] = self.pooler.bias
    return names


class _TaskModel(_Serializable, _BuiltByCalling, keras.Model):
  """A BERT encoder with a task head whose variables carry the original names."""

  # Variables the task's output does not depend on (no gradient ever reaches them).
  unused_variable_prefixes = ()

  def __init__(self, config: BertConfig, adapter_config: AdapterConfig, **kwargs):
    super().__init__(**kwargs)
    self.config = config
    self.adapter_config = adapter_config
    self.bert = BertEncoder(config, adapter_config)

  def head_variable_map(self) -> Dict[str, keras.Variable]:
    raise NotImplementedError

  def tf1_variable_map(self) -> Dict[str, keras.Variable]:
    self.ensure_built()
    names = self.bert.tf1_variable_map()
    names.update(self.head_variable_map())
    return names


@keras.saving.register_keras_serializable(package=_PACKAGE)
class BertClassifier(_TaskModel):
  """Sequence classifier of run_classifier.py: pooled output -> dropout -> logits.

  Call arguments:
    inputs: dict of int32 Tensors [batch_size, seq_length] as for BertEncoder.
  Returns:
    float32 logits of shape [batch_size, num_labels] (num_labels 1: regression).
  """

  _init_args = ("config", "num_labels", "adapter_config")

  def __init__(self, config: BertConfig, num_labels: int,
               adapter_config: AdapterConfig = NO_ADAPTERS, **kwargs):
    kwargs.setdefault("name", "bert_classifier")
    super().__init__(config, adapter_config, **kwargs)
    self.num_labels = num_labels
    self.dropout = keras.layers.Dropout(0.1)

  def build(self, input_shape=None):
    # Shapes as the original: output_weights [num_labels, hidden_size].
    self.output_weights = self.add_weight(
        name="output_weights", shape=(self.num_labels, self.config.hidden_size),
        initializer=keras.initializers.TruncatedNormal(stddev=0.02))
    self.output_bias = self.add_weight(
        name="output_bias", shape=(self.num_labels,), initializer="zeros")

  def call(self, inputs, training=None):
    pooled = self.bert(inputs, training=training)["pooled_output"]
    pooled = self.dropout(pooled, training=training)
    logits = tf.matmul(pooled, self.output_weights, transpose_b=True) + self.output_bias
    return tf.cast(logits, tf.float32)  # The loss and metrics in float32 always.

  def head_variable_map(self):
    return {"output_weights": self.output_weights, "output_bias": self.output_bias}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class BertSpanLabeler(_TaskModel):
  """SQuAD span head of run_squad.py: one linear layer over every token.

  Call arguments:
    inputs: dict of int32 Tensors [batch_size, seq_length] as for BertEncoder.
  Returns:
    dict with "start_logits" and "end_logits", float32 [batch_size, seq_length].
  """

  # The span head reads the sequence output; the pooler never gets a gradient.
  unused_variable_prefixes = ("bert/pooler/",)

  def __init__(self, config: BertConfig, adapter_config: AdapterConfig = NO_ADAPTERS,
               **kwargs):
    kwargs.setdefault("name", "bert_span_labeler")
    super().__init__(config, adapter_config, **kwargs)

  def build(self, input_shape=None):
    self.output_weights = self.add_weight(
        name="output_weights", shape=(2, self.config.hidden_size),
        initializer=keras.initializers.TruncatedNormal(stddev=0.02))
    self.output_bias = self.add_weight(
        name="output_bias", shape=(2,), initializer="zeros")

  def call(self, inputs, training=None):
    sequence = self.bert(inputs, training=training)["sequence_output"]
    logits = tf.einsum("bsh,nh->nbs", sequence, self.output_weights)
    logits += self.output_bias[:, tf.newaxis, tf.newaxis]
    logits = tf.cast(logits, tf.float32)  # The loss and metrics in float32 always.
    return {"start_logits": logits[0], "end_logits": logits[1]}

  def head_variable_map(self):
    return {"cls/squad/output_weights": self.output_weights,
            "cls/squad/output_bias": self.output_bias}
