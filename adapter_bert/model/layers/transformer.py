"""One post-LayerNorm Transformer layer of BERT with adapters (TransformerBlock),
its sites (SITES), the places of a layer where adapters act (ADAPTER_PLACES,
register_place) and the weights its call may be given (LayerTaskWeights;
../modeling.py's docstring says how).

A site is a fixed point of the block's computation where it hands a tensor to
adapters; a place is data: a name (what Design.places returns), the site it
acts at, the TF1 scope of its weights and the attribute holding a model's own
layer there. The block applies, at each site, the places registered there (in
registration order), each by its design. So a design at a new place is that
design plus one register_place call: the block, the checkpoints (the scope), the
adapter files and bank (variable_role: a scope with `adapters`) and the
serving stack (LayerTaskWeights.at, place_units) read the places, none by name.
Why sites are fixed and places registered (not one or the other): a site is
where the block's code can stop, with what it can read there (PlaceInputs);
a place is only a naming of a site, which a test or a user can add without
editing the block, and the four built-in places keep their attributes, Keras
names and TF1 scopes (so the built-in designs' numerics and checkpoints are
the same as before places were data).

A block asks its design (designs.registry.get_design) and, for given weights,
the registry (design_of): it knows no design by name.
"""

from typing import Dict, Mapping, NamedTuple, Optional

import keras
import tensorflow as tf

from adapter_bert.model.activations import get_activation
from adapter_bert.model.configs import AdapterConfig, BertConfig
from adapter_bert.model.designs.registry import PlaceInputs, design_of, get_design
from adapter_bert.model.layers.common import bert_layer_norm, initializer, normalize
from adapter_bert.model.layers.ops import Dropout, TokenDense, attention
from adapter_bert.model.serialization import (KERAS_PACKAGE as _PACKAGE, Serializable,
                                              SublayersBuiltOnCall)


# The block's sites, in call order, each with the BertConfig field that is the
# width of its tensor h, and what PlaceInputs(sublayer_input, sublayer_output=h,
# norm) a place there reads:
#   query_projection, value_projection: h the projection of the tokens x
#     (before the heads split), sublayer_input x, norm None.
#   attention_output: h the attention's output projection after its dropout,
#     sublayer_input the layer's input r, norm the attention LayerNorm (the
#     block then computes norm(h + r)).
#   intermediate_activation: h the feed-forward's intermediate activation
#     (act(x W_i + b_i), [tokens, intermediate_size]), sublayer_input its
#     input (the attention's output), norm None.
#   feed_forward_output: h the feed-forward's output after its dropout,
#     sublayer_input its residual, norm the output LayerNorm.
#   layer_output: h the layer's output (after the output LayerNorm),
#     sublayer_input the feed-forward's input, norm None.
SITES = {
    "query_projection": "hidden_size",
    "value_projection": "hidden_size",
    "attention_output": "hidden_size",
    "intermediate_activation": "intermediate_size",
    "feed_forward_output": "hidden_size",
    "layer_output": "hidden_size",
}


class AdapterPlace(NamedTuple):
  """A place of a layer where adapters act (Design.places' names): the
  attribute (and Keras name) of a model's own weights there, the field of
  LayerTaskWeights that gives weights there (None: its `other_places` entry),
  the TF1 scope of its weights under `bert/encoder/layer_N` (adapter-bert's
  for the built-in places) and the site of the block it acts at (SITES)."""
  attribute: str
  field: Optional[str]
  scope: str
  site: str


# In the order the layers are made (that of their weights and random seeds).
ADAPTER_PLACES = {
    "attention": AdapterPlace("attention_adapters", "attention_adapters",
                              "attention/output/adapters", "attention_output"),
    "feed_forward": AdapterPlace("output_adapters", "feed_forward_adapters", "output/adapters",
                                 "feed_forward_output"),
    "query": AdapterPlace("query_lora", "query_adapters", "attention/self/query/adapters",
                          "query_projection"),
    "value": AdapterPlace("value_lora", "value_adapters", "attention/self/value/adapters",
                          "value_projection"),
}


def register_place(name: str, site: str, scope: str,
                   attribute: Optional[str] = None) -> AdapterPlace:
  """Adds the place `name` (a design's places may then name it) at `site`,
  its weights under the TF1 scope `bert/encoder/layer_N/{scope}`, a model's own
  layer there as `attribute` (default `{name}_adapters`); returns it. Given
  weights there are LayerTaskWeights.other_places[name]. A scope holds
  `adapters` as a path component, so that its variables are adapters
  (variable_role), and the attribute holds `adapters` (the optimizer's
  adapter_pattern).

  Raises:
    ValueError: the name, scope or attribute is taken, or the site is unknown,
      or the scope or attribute does not say `adapters`.
  """
  attribute = attribute or f"{name}_adapters"
  taken = [(w.scope, w.attribute) for w in ADAPTER_PLACES.values()]
  if name in ADAPTER_PLACES or any(scope == s or attribute == a for s, a in taken):
    raise ValueError(f"adapter place {name!r} (scope {scope!r}, attribute {attribute!r}) "
                     "is registered already")
  if site not in SITES:
    raise ValueError(f"adapter site must be one of {list(SITES)}, got {site!r}")
  if "adapters" not in scope.split("/") or "adapters" not in attribute:
    raise ValueError(f"an adapter place's scope and attribute say 'adapters', got "
                     f"{scope!r}, {attribute!r}")
  ADAPTER_PLACES[name] = AdapterPlace(attribute, None, scope, site)
  return ADAPTER_PLACES[name]


def place_units(config: BertConfig, place: str) -> int:
  """The width of the tensor at `place` (its site's, SITES)."""
  return getattr(config, SITES[ADAPTER_PLACES[place].site])


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
  other_places: {place: weights} at the places register_place added (those
  without a field), as the fields' tuples; a place absent has none.
  Every array has shape [...] (the whole batch) or [batch_size, ...] (each example).
  """
  attention_adapters: tuple = ()
  feed_forward_adapters: tuple = ()
  attention_layer_norm: tuple = ()
  output_layer_norm: tuple = ()
  query_adapters: tuple = ()
  value_adapters: tuple = ()
  other_places: Mapping[str, tuple] = {}  # Never mutated: a NamedTuple's default.

  def at(self, place: str) -> tuple:
    """The given weights at `place` (ADAPTER_PLACES' key)."""
    field = ADAPTER_PLACES[place].field
    return getattr(self, field) if field else self.other_places.get(place, ())

  @classmethod
  def of(cls, by_place: Mapping[str, tuple], **layer_norms) -> "LayerTaskWeights":
    """The weights `by_place` ({place: tuple}) at their places' fields, or in
    other_places (only those with weights), with `layer_norms`' fields."""
    fields = {ADAPTER_PLACES[p].field: w for p, w in by_place.items()
              if ADAPTER_PLACES[p].field}
    others = {p: w for p, w in by_place.items() if not ADAPTER_PLACES[p].field and w}
    return cls(**fields, **layer_norms, other_places=others)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class TransformerBlock(Serializable, SublayersBuiltOnCall, keras.layers.Layer):
  """One post-LayerNorm Transformer layer of BERT, with optional adapters.

  attention: dense -> dropout -> adapter -> LayerNorm(. + layer_input)
  feed-forward: dense -> dropout -> adapter -> LayerNorm(. + attention_output)
  Adapters act at the places (ADAPTER_PLACES) their design (adapter_layers.Design,
  adapter_config.design) puts them, as it says: e.g. after a sub-layer's dropout
  (Houlsby's, Pfeiffer's, parallel) or on the query and value projections (LoRA);
  each place at its site of the block (SITES, the module docstring).

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
    unknown = [p for p in adapter_config.places if p not in ADAPTER_PLACES]
    if unknown:
      raise ValueError(f"adapter design {adapter_config.design} acts at places {unknown} "
                       f"that are not registered (transformer.register_place)")
    for place, where in ADAPTER_PLACES.items():
      setattr(self, where.attribute,
              self._design.make_layer(adapter_config, place_units(config, place),
                                      where.attribute)
              if place in adapter_config.places else None)
    # False: this layer's adapters are skipped (the identity), for an ablation
    # (experiments/ablation.adapters_removed). Read when the call is traced; no
    # part of the config.
    self.adapters_enabled = True

  def call(self, x, attention_bias, training=None, task_weights=None):
    given = task_weights or LayerTaskWeights()
    shape = tf.shape(x)
    site = lambda name, h, r, norm=None: self._at_site(name, h, r, given, shape, norm)
    heads = [shape[0], shape[1], self.num_heads, self.head_size]
    # [batch, seq, heads, head_size] -> [batch, heads, seq, head_size]: the two
    # attention products are then plain batched MatMuls (and so are their
    # gradients, with transposed operands), 1.7x faster forward and backward on
    # a CPU than the same einsums, with the same float32 results.
    split = lambda t: tf.transpose(tf.reshape(t, heads), [0, 2, 1, 3])
    tokens = tf.reshape(x, [-1, self.config.hidden_size])  # [batch * seq, hidden]
    q = split(site("query_projection", self.query(tokens), tokens))
    k = split(self.key(tokens))
    v = split(site("value_projection", self.value(tokens), tokens))
    context = attention(q, k, v, attention_bias, self.attention_dropout, training)
    context = tf.transpose(context, [0, 2, 1, 3])  # [batch, seq, heads, size]
    context = tf.reshape(context, [-1, self.config.hidden_size])
    h = self.hidden_dropout(self.attention_output(context), training=training)
    norm = lambda y: normalize(self.attention_layer_norm, y, given.attention_layer_norm, shape)
    h = site("attention_output", h, tokens, norm)
    attention_output = norm(h + tokens)

    h = site("intermediate_activation", self.intermediate(attention_output), attention_output)
    h = self.hidden_dropout(self.output_dense(h), training=training)
    norm = lambda y: normalize(self.output_layer_norm, y, given.output_layer_norm, shape)
    h = site("feed_forward_output", h, attention_output, norm)
    h = site("layer_output", norm(h + attention_output), attention_output)
    return tf.reshape(h, shape)

  def _at_site(self, site: str, h, sublayer_input, given: LayerTaskWeights, shape, norm):
    """h after the places at `site` in turn (ADAPTER_PLACES' order); h itself
    where none is."""
    for place, where in ADAPTER_PLACES.items():
      if where.site == site:
        h = self._adapt(place, h, sublayer_input, given, shape, norm)
    return h

  def _adapt(self, place: str, h, sublayer_input, given: LayerTaskWeights, shape, norm=None):
    """h, a site's tensor, after the layer's own adapter at `place` and then
    the given ones in turn, each applied by its design; unless removed.

    sublayer_input, norm: what the site reads besides h (SITES). A design reads
    the site's tensor as it came, not another adapter's output, unless it reads
    h (adapter_layers.PlaceInputs).
    """
    own, items = getattr(self, ADAPTER_PLACES[place].attribute, None), given.at(place)
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
    own = {where.scope: getattr(self, where.attribute, None)
           for where in ADAPTER_PLACES.values()}
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
    by_place = {place: (self._design.task_weights(layer, self.adapter_config),)
                for place, where in ADAPTER_PLACES.items()
                if (layer := getattr(self, where.attribute, None)) is not None}
    norm = lambda n: (n.gamma, n.beta)
    return LayerTaskWeights.of(by_place, attention_layer_norm=norm(self.attention_layer_norm),
                               output_layer_norm=norm(self.output_layer_norm))
