"""One frozen BERT encoder, every task's adapters, LayerNorms and head at once.

Each task of a bank trained its own adapters, LayerNorms (gamma and beta of
every one, the embeddings' included) and classifier head on the same frozen
encoder; a task of a multi-task run (run_multitask.py) has its own head and
its HyperFormer++ adapters, generated once at export, or the run's shared
ones. Here those are stacked along a leading task axis, and every example
of a batch gathers its own task's slice, e.g. an adapter's down-projection is

    einsum("bsh,bhm->bsm", x, gather(weights1, task_index))

so one batch of fixed shape mixes tasks in any order: no splitting into
per-task sub-batches, no shapes that depend on the data (the same graph runs
on CPU, GPU and TPU, and compiles with XLA).

Stacking is exact:
  * adapters of different sizes are zero-padded to the largest: the padded
    bottleneck units get 0 in, act(0) = 0 out for every adapter activation
    (gelu, relu, tanh, linear), and their rows of weights2 are 0;
  * a task without adapters (--train_mode=layer_norm), or without one of a
    layer's two (--adapter_placement=attention or feed_forward), gets
    all-zero adapters there, which add exactly 0; an adapter no task has is
    left out;
  * a HyperFormer++ adapter normalizes its up-projection with its own
    LayerNorm before the residual add (adapter_layers.generated_adapter,
    epsilon 1e-5); a Houlsby adapter has none, and takes the up-projection
    as it is: each example selects one or the other by its task;
  * heads are zero-padded to the widest; the caller masks the padded logits;
  * a LayerNorm a task did not train keeps the base's values.

The frozen computation is modeling.TransformerBlock's, op for op (token-wise
2-D MatMul + BiasAdd, the same attention einsums, Keras' LayerNorm and
activation ops), in float32; only adapters and LayerNorms read per-example
weights. Results equal BertClassifier's per task to float32 rounding.
"""

import math
from typing import Dict, Mapping, Sequence

import keras
import numpy as np
import tensorflow as tf

from adapter_layers import GENERATED_ADAPTER_EPSILON, get_activation
import modeling

_EPSILON = 1e-12  # modeling._layer_norm's, as google-research/bert.
_ADAPTER_SCOPES = ("attention/output", "output")
_ADAPTER_VARIABLES = ("weights1", "biases1", "weights2", "biases2")


def _variable(value, name: str) -> tf.Variable:
  return tf.Variable(np.asarray(value, np.float32), trainable=False, name=name)


class _Layer(tf.Module):
  """One Transformer layer: its frozen weights, and per-task LayerNorms and adapters."""

  def __init__(self, frozen: Dict[str, np.ndarray], stacked: Dict[str, np.ndarray],
               adapter_layer_norm: Dict[str, np.ndarray], name: str):
    super().__init__(name=name)
    # name -> (kernel, bias) of the shared dense layers.
    self.dense = {k: (_variable(frozen[f"{k}/kernel"], f"{k}_kernel"),
                      _variable(frozen[f"{k}/bias"], f"{k}_bias"))
                  for k in ("query", "key", "value", "attention_output", "intermediate",
                            "output")}
    # [num_tasks, ...] per-task weights, see MultiTaskBert.
    self.stacked = {k: _variable(v, k) for k, v in stacked.items()}
    # scope -> bool [num_tasks]: whose adapter there has its own LayerNorm
    # (a constant of the graph, as MultiTaskBert._task_activation); only
    # scopes where some task's has one.
    self.adapter_layer_norm = adapter_layer_norm


class MultiTaskBert(tf.Module):
  """BertClassifier for many tasks at once (see the module docstring).

  Call arguments:
    inputs: dict of int32 Tensors [batch_size, seq_length], "input_ids",
      "input_mask", "segment_ids", as for modeling.BertEncoder.
    task_index: int32 Tensor [batch_size], each example's task (index into
      `task_names`); must be in range (checked by the caller).
  Returns:
    float32 logits [batch_size, num_outputs]: the example's task head, zeros
    beyond its width (`num_outputs[task]`).
  """

  def __init__(self, config: modeling.BertConfig, base: Mapping[str, np.ndarray],
               tasks: Sequence, name: str = "multi_task_bert"):
    """Args:
      config: the encoder's BertConfig.
      base: every encoder variable (no adapters) by original name.
      tasks: bank_tasks.Task-like objects (name, arrays, adapter_config), in
        task-index order; arrays by original name, an adapter's own LayerNorm
        (if any) as .../adapters/LayerNorm/{gamma,beta}.
    """
    super().__init__(name=name)
    if not tasks:
      raise ValueError("MultiTaskBert needs at least one task")
    self.task_names = tuple(t.name for t in tasks)
    self.num_outputs = tuple(int(t.arrays["output_weights"].shape[0]) for t in tasks)
    self._hidden_size = config.hidden_size
    self._num_heads = config.num_attention_heads
    self._head_size = config.hidden_size // config.num_attention_heads
    self._hidden_act = config.hidden_act
    sizes = [t.adapter_config.size for t in tasks]
    self.adapter_size = max(sizes)
    # Activation of each task's adapters; tasks without adapters take the
    # first one's (they add zeros whatever it is).
    with_adapters = [t for t in tasks if t.adapter_config.enabled]
    self._activations = tuple(sorted({t.adapter_config.activation for t in with_adapters}))
    self._task_activation = np.array(
        [self._activations.index(t.adapter_config.activation)
         if t.adapter_config.enabled else 0 for t in tasks], np.int32)

    def stack(name, shape, default=None):
      """[num_tasks, *shape]: each task's value of `name`, zero-padded to `shape`."""
      out = np.zeros((len(tasks),) + tuple(shape), np.float32)
      for i, t in enumerate(tasks):
        value = t.arrays.get(name, default)
        if value is not None:
          value = np.asarray(value, np.float32)
          value = value.reshape(value.shape[value.ndim - len(shape):])  # biases (1, n) -> (n,)
          out[(i,) + tuple(slice(0, d) for d in value.shape)] = value
      return out

    h, m, c = config.hidden_size, self.adapter_size, max(self.num_outputs)
    e = "bert/embeddings/"
    self.word_embeddings = _variable(base[e + "word_embeddings"], "word_embeddings")
    self.token_type_embeddings = _variable(base[e + "token_type_embeddings"],
                                           "token_type_embeddings")
    self.position_embeddings = _variable(base[e + "position_embeddings"],
                                         "position_embeddings")
    self.embeddings_layer_norm = [
        _variable(stack(e + f"LayerNorm/{v}", (h,), base[e + f"LayerNorm/{v}"]),
                  f"LayerNorm_{v}") for v in ("gamma", "beta")]
    self.layers = []
    for i in range(config.num_hidden_layers):
      p = f"bert/encoder/layer_{i}/"
      frozen = {"query": p + "attention/self/query", "key": p + "attention/self/key",
                "value": p + "attention/self/value",
                "attention_output": p + "attention/output/dense",
                "intermediate": p + "intermediate/dense", "output": p + "output/dense"}
      frozen = {f"{k}/{v}": base[f"{n}/{v}"] for k, n in frozen.items()
                for v in ("kernel", "bias")}
      stacked, adapter_layer_norm = {}, {}
      for scope in _ADAPTER_SCOPES:
        key = scope.replace("/", "_")
        for v in ("gamma", "beta"):
          name = p + f"{scope}/LayerNorm/{v}"
          stacked[f"{key}_LayerNorm_{v}"] = stack(name, (h,), base[name])
        if any(p + f"{scope}/adapters/weights1" in t.arrays for t in tasks):
          shapes = {"weights1": (h, m), "biases1": (m,), "weights2": (m, h),
                    "biases2": (h,)}
          for v in _ADAPTER_VARIABLES:
            stacked[f"{key}_adapters_{v}"] = stack(p + f"{scope}/adapters/{v}", shapes[v])
        # The adapter's own LayerNorm, where some task's has one (HyperFormer++);
        # the others' rows stay 0 and are never selected.
        inner = np.array([p + f"{scope}/adapters/LayerNorm/gamma" in t.arrays
                          for t in tasks])
        if inner.any():
          adapter_layer_norm[key] = inner
          for v in ("gamma", "beta"):
            stacked[f"{key}_adapters_LayerNorm_{v}"] = stack(
                p + f"{scope}/adapters/LayerNorm/{v}", (h,))
      self.layers.append(_Layer(frozen, stacked, adapter_layer_norm, name=f"layer_{i}"))
    self.pooler = (_variable(base["bert/pooler/dense/kernel"], "pooler_kernel"),
                   _variable(base["bert/pooler/dense/bias"], "pooler_bias"))
    self.output_weights = _variable(stack("output_weights", (c, h)), "output_weights")
    self.output_bias = _variable(stack("output_bias", (c,)), "output_bias")

  def __call__(self, inputs: Mapping[str, tf.Tensor], task_index: tf.Tensor) -> tf.Tensor:
    input_ids = tf.convert_to_tensor(inputs["input_ids"], tf.int32)
    segment_ids = tf.convert_to_tensor(inputs["segment_ids"], tf.int32)
    input_mask = tf.cast(inputs["input_mask"], tf.float32)
    task_index = tf.convert_to_tensor(task_index, tf.int32)
    attention_bias = (1.0 - input_mask[:, tf.newaxis, tf.newaxis, :]) * -10000.0

    # modeling.BertEmbeddings, then the task's LayerNorm.
    seq_length = tf.shape(input_ids)[1]
    x = tf.gather(self.word_embeddings, input_ids)
    x += tf.gather(self.token_type_embeddings, segment_ids)
    x += self.position_embeddings[tf.newaxis, :seq_length, :]
    x = self._layer_norm(x, *self.embeddings_layer_norm, task_index)
    for layer in self.layers:
      x = self._transformer_block(layer, x, attention_bias, task_index)
    kernel, bias = self.pooler
    pooled = tf.math.tanh(tf.matmul(x[:, 0, :], kernel) + bias)
    logits = tf.einsum("bh,bch->bc", pooled, tf.gather(self.output_weights, task_index))
    return logits + tf.gather(self.output_bias, task_index)

  def _transformer_block(self, layer: _Layer, x, attention_bias, task_index):
    """modeling.TransformerBlock.call (inference), adapters and LayerNorms per task."""
    shape = tf.shape(x)
    heads = [shape[0], shape[1], self._num_heads, self._head_size]
    dense = lambda name, t: tf.nn.bias_add(tf.matmul(t, layer.dense[name][0]),
                                           layer.dense[name][1])
    tokens = tf.reshape(x, [-1, self._hidden_size])
    q = tf.reshape(dense("query", tokens), heads)
    k = tf.reshape(dense("key", tokens), heads)
    v = tf.reshape(dense("value", tokens), heads)
    scores = tf.einsum("bqnd,bknd->bnqk", q, k) * (1.0 / math.sqrt(self._head_size))
    probs = tf.nn.softmax(scores + attention_bias, axis=-1)
    context = tf.einsum("bnqk,bknd->bqnd", probs, v)
    context = tf.reshape(context, [-1, self._hidden_size])
    h = tf.reshape(dense("attention_output", context), shape)
    h = self._adapter(layer, "attention_output", h, task_index)
    s = layer.stacked
    attention_output = self._layer_norm(
        h + x, s["attention_output_LayerNorm_gamma"], s["attention_output_LayerNorm_beta"],
        task_index)

    flat = tf.reshape(attention_output, [-1, self._hidden_size])
    h = dense("output", get_activation(self._hidden_act)(dense("intermediate", flat)))
    h = self._adapter(layer, "output", tf.reshape(h, shape), task_index)
    return self._layer_norm(h + attention_output, s["output_LayerNorm_gamma"],
                            s["output_LayerNorm_beta"], task_index)

  def _adapter(self, layer: _Layer, scope: str, h, task_index):
    """adapter_layers.Adapter (or generated_adapter, for a task whose adapter has its own
    LayerNorm) with each example's task weights; h: [batch, seq, hidden]."""
    if f"{scope}_adapters_weights1" not in layer.stacked:  # No task has this adapter.
      return h
    w1, b1, w2, b2 = (tf.gather(layer.stacked[f"{scope}_adapters_{v}"], task_index)
                      for v in _ADAPTER_VARIABLES)
    a = self._activation(tf.einsum("bsh,bhm->bsm", h, w1) + b1[:, tf.newaxis, :],
                         task_index)
    projected = tf.einsum("bsm,bmh->bsh", a, w2)
    houlsby = h + projected + b2[:, tf.newaxis, :]
    if scope not in layer.adapter_layer_norm:  # No task's adapter has its own LayerNorm.
      return houlsby
    # adapter_layers.generated_adapter: the up-projection normalized, then added.
    s = layer.stacked
    up = projected + b2[:, tf.newaxis, :]
    normalized = keras.ops.layer_normalization(
        up, tf.gather(s[f"{scope}_adapters_LayerNorm_gamma"], task_index)[:, tf.newaxis, :],
        tf.gather(s[f"{scope}_adapters_LayerNorm_beta"], task_index)[:, tf.newaxis, :],
        axis=-1, epsilon=GENERATED_ADAPTER_EPSILON)
    # A select, not arithmetic: a Houlsby task's rows stay as they were, bit for bit.
    mine = tf.gather(layer.adapter_layer_norm[scope], task_index)
    return tf.where(mine[:, tf.newaxis, tf.newaxis], h + normalized, houlsby)

  def _activation(self, x, task_index):
    """Each example's adapter activation (one op where all tasks share one)."""
    y = get_activation(self._activations[0])(x)
    for i, name in enumerate(self._activations[1:], 1):
      mine = tf.equal(tf.gather(self._task_activation, task_index), i)
      y = tf.where(mine[:, tf.newaxis, tf.newaxis], get_activation(name)(x), y)
    return y

  @staticmethod
  def _layer_norm(x, gamma, beta, task_index):
    """keras.layers.LayerNormalization(epsilon=1e-12) with each example's gamma, beta."""
    return keras.ops.layer_normalization(
        x, tf.gather(gamma, task_index)[:, tf.newaxis, :],
        tf.gather(beta, task_index)[:, tf.newaxis, :], axis=-1, epsilon=_EPSILON)
