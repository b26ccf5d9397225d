"""One post-LayerNorm Transformer layer of BERT with adapters (TransformerBlock),
the places of a layer where adapters act (ADAPTER_PLACES) and the weights its
call may be given (LayerTaskWeights; ../modeling.py's docstring says how).

A block asks its design (designs.registry.get_design) and, for given weights,
the registry (design_of): it knows no design by name.
"""

from typing import Dict, NamedTuple

import keras
import tensorflow as tf

from adapter_bert.model.activations import get_activation
from adapter_bert.model.configs import AdapterConfig, BertConfig
from adapter_bert.model.designs.registry import PlaceInputs, design_of, get_design
from adapter_bert.model.layers.common import bert_layer_norm, initializer, normalize
from adapter_bert.model.ops import Dropout, TokenDense, attention
from adapter_bert.model.serialization import KERAS_PACKAGE as _PACKAGE, Serializable


class AdapterPlace(NamedTuple):
  """A place of a layer where adapters act (adapter_layers.PLACES): the
  attribute (and Keras name) of a model's own weights there, the field of
  LayerTaskWeights that gives weights there, and the TF1 scope of its weights
  under `bert/encoder/layer_N` (adapter-bert's)."""
  attribute: str
  field: str
  scope: str


# In the order the layers are made (that of their weights and random seeds).
ADAPTER_PLACES = {
    "attention": AdapterPlace("attention_adapters", "attention_adapters",
                              "attention/output/adapters"),
    "feed_forward": AdapterPlace("output_adapters", "feed_forward_adapters", "output/adapters"),
    "query": AdapterPlace("query_lora", "query_adapters", "attention/self/query/adapters"),
    "value": AdapterPlace("value_lora", "value_adapters", "attention/self/value/adapters"),
}


class LayerTaskWeights(NamedTuple):
  """Weights passed to a TransformerBlock's call (the module docstring).

  attention_adapters, feed_forward_adapters, query_adapters, value_adapters:
  weights of any design (adapter_layers.design_of tells which by their class)
  applied in turn at that place (ADAPTER_PLACES), after the layer's own: e.g.
  AdapterWeights of Houlsby's design, LowRankWeights of LoRA's at a projection,
  an AdapterFusion over frozen adapters (FusedAdapters, FusionWeights). Their
  scaling is folded in (AdapterWeights.scaled).
  attention_layer_norm, output_layer_norm: () for the layer's own, or
  (gamma, beta) to use instead.
  Every array has shape [...] (the whole batch) or [batch_size, ...] (each example).
  """
  attention_adapters: tuple = ()
  feed_forward_adapters: tuple = ()
  attention_layer_norm: tuple = ()
  output_layer_norm: tuple = ()
  query_adapters: tuple = ()
  value_adapters: tuple = ()


@keras.saving.register_keras_serializable(package=_PACKAGE)
class TransformerBlock(Serializable, keras.layers.Layer):
  """One post-LayerNorm Transformer layer of BERT, with optional adapters.

  attention: dense -> dropout -> adapter -> LayerNorm(. + layer_input)
  feed-forward: dense -> dropout -> adapter -> LayerNorm(. + attention_output)
  Adapters act at the places (ADAPTER_PLACES) their design (adapter_layers.Design,
  adapter_config.design) puts them, as it says: e.g. after a sub-layer's dropout
  (Houlsby's, Pfeiffer's, parallel) or on the query and value projections (LoRA).

  Every token-wise product (projections, feed-forward, adapters) runs as one
  2-D MatMul over all batch_size * seq_length tokens, its bias add fused
  (TokenDense); only the attention's two products are batched (4-D) MatMuls.

  Call arguments:
    x: float32 Tensor of shape [batch_size, seq_length, hidden_size].
    attention_bias: float32 Tensor of shape [batch_size, 1, 1, seq_length],
      0 for real tokens and -10000 for padding.
    task_weights: optional LayerTaskWeights: adapters after the layer's own,
      LayerNorm weights instead of its own (the module docstring).
  Returns:
    float32 Tensor of shape [batch_size, seq_length, hidden_size].
  """

  def __init__(self, config: BertConfig, adapter_config: AdapterConfig, **kwargs):
    super().__init__(**kwargs)
    self.config = config
    self.adapter_config = adapter_config
    h, init = config.hidden_size, initializer(config)
    self.num_heads = config.num_attention_heads
    self.head_size = h // self.num_heads
    dense = lambda units, name, **kw: TokenDense(
        units, kernel_initializer=init, name=name, **kw)
    self.query = dense(h, "query")
    self.key = dense(h, "key")
    self.value = dense(h, "value")
    self.attention_output = dense(h, "attention_output")
    self.attention_layer_norm = bert_layer_norm("attention_LayerNorm")
    self.intermediate = dense(config.intermediate_size, "intermediate",
                              activation=get_activation(config.hidden_act))
    self.output_dense = dense(h, "output")
    self.output_layer_norm = bert_layer_norm("output_LayerNorm")
    self.attention_dropout = Dropout(config.attention_probs_dropout_prob)
    self.hidden_dropout = Dropout(config.hidden_dropout_prob)
    # The design's own weights at each of its places; None at the others.
    self._design = get_design(adapter_config.design)
    for place, where in ADAPTER_PLACES.items():
      setattr(self, where.attribute,
              self._design.make_layer(adapter_config, h, where.attribute)
              if place in adapter_config.places else None)
    # False: this layer's adapters are skipped (the identity), for an ablation
    # (experiments/ablation.adapters_removed). Read when the call is traced; no
    # part of the config.
    self.adapters_enabled = True

  def call(self, x, attention_bias, training=None, task_weights=None):
    given = task_weights or LayerTaskWeights()
    shape = tf.shape(x)
    heads = [shape[0], shape[1], self.num_heads, self.head_size]
    # [batch, seq, heads, head_size] -> [batch, heads, seq, head_size]: the two
    # attention products are then plain batched MatMuls (and so are their
    # gradients, with transposed operands), 1.7x faster forward and backward on
    # a CPU than the same einsums, with the same float32 results.
    split = lambda t: tf.transpose(tf.reshape(t, heads), [0, 2, 1, 3])
    tokens = tf.reshape(x, [-1, self.config.hidden_size])  # [batch * seq, hidden]
    q = split(self._adapt("query", self.query(tokens), tokens, given, shape))
    k = split(self.key(tokens))
    v = split(self._adapt("value", self.value(tokens), tokens, given, shape))
    context = attention(q, k, v, attention_bias, self.attention_dropout, training)
    context = tf.transpose(context, [0, 2, 1, 3])  # [batch, seq, heads, size]
    context = tf.reshape(context, [-1, self.config.hidden_size])
    h = self.hidden_dropout(self.attention_output(context), training=training)
    norm = lambda y: normalize(self.attention_layer_norm, y, given.attention_layer_norm, shape)
    h = self._adapt("attention", h, tokens, given, shape, norm)
    attention_output = norm(h + tokens)

    h = self.output_dense(self.intermediate(attention_output))
    h = self.hidden_dropout(h, training=training)
    norm = lambda y: normalize(self.output_layer_norm, y, given.output_layer_norm, shape)
    h = self._adapt("feed_forward", h, attention_output, given, shape, norm)
    return tf.reshape(norm(h + attention_output), shape)

  def _adapt(self, place: str, h, sublayer_input, given: LayerTaskWeights, shape, norm=None):
    """h, a sub-layer's output, after the layer's own adapter at `place` and
    then the given ones in turn, each applied by its design; unless removed.

    sublayer_input: the tokens the sub-layer read (at a projection) or its
    residual; norm: its LayerNorm (None at a projection). A design reads the
    sub-layer's output as it came, not another adapter's output, unless it reads
    h (adapter_layers.PlaceInputs).
    """
    where = ADAPTER_PLACES[place]
    own, items = getattr(self, where.attribute), getattr(given, where.field)
    if not self.adapters_enabled or (own is None and not items):
      return h
    inputs = PlaceInputs(sublayer_input, h, norm, self.adapter_config.activation, shape[0])
    if own is not None:
      h = self._design.apply_layer(own, h, inputs)
    for weights in items:
      h = design_of(weights).apply(h, weights, inputs)
    return h

  def tf1_variable_map(self, prefix: str) -> Dict[str, keras.Variable]:
    """Keras variables of this layer by their TF1 names under `prefix`."""
    own = {where.scope: getattr(self, where.attribute) for where in ADAPTER_PLACES.values()}
    sublayers = {  # In the order of the original's variables.
        "attention/self/query": self.query,
        "attention/self/query/adapters": None,
        "attention/self/key": self.key,
        "attention/self/value": self.value,
        "attention/self/value/adapters": None,
        "attention/output/dense": self.attention_output,
        "attention/output/adapters": None,
        "attention/output/LayerNorm": self.attention_layer_norm,
        "intermediate/dense": self.intermediate,
        "output/dense": self.output_dense,
        "output/adapters": None,
        "output/LayerNorm": self.output_layer_norm,
    }
    sublayers.update(own)  # Its adapter scopes keep their places.
    return {f"{prefix}/{scope}/{name}": v
            for scope, layer in sublayers.items() if layer is not None
            for name, v in (layer.tf1_variable_names().items() if scope in own else
                            ((v.name, v) for v in layer.weights))}

  def own_task_weights(self) -> LayerTaskWeights:
    """Its own adapters (of its design, the scaling folded in) and LayerNorms,
    as the weights its call takes."""
    fields = {where.field: (self._design.task_weights(layer, self.adapter_config),)
              for where in ADAPTER_PLACES.values()
              if (layer := getattr(self, where.attribute)) is not None}
    norm = lambda n: (n.gamma, n.beta)
    return LayerTaskWeights(**fields, attention_layer_norm=norm(self.attention_layer_norm),
                            output_layer_norm=norm(self.output_layer_norm))
