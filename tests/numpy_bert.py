"""An independent NumPy forward pass of BERT with adapters, from TF1-named weights.

Written from google-research/bert modeling.py (`embedding_postprocessor`,
`attention_layer`, `transformer_model`, `gelu` (tanh form), `layer_norm` (epsilon
1e-12 of tf.contrib.layers.layer_norm) and the pooler in `BertModel.__init__`) and
google-research/adapter-bert modeling.py (`feedforward_adapter`, applied in
`transformer_model` after each output projection and dropout, before the residual
LayerNorm). It shares no code with modeling.py, so it checks placement and numerics.

The other adapter designs follow their papers' equations, with h a sub-layer's
output, r its input and LN its LayerNorm: Pfeiffer et al. (2021)
LN(h + A(LN(h + r)) + r) (the `adapters` library's SeqBnConfig), He et al.
(2022) parallel LN(h + A(r) + r), and LoRA (Hu et al., 2022) x W + b + s x A B
on the query and value projections.
"""

import numpy as np
from scipy import special


def gelu(x):
  return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):
  """The exact GELU x Phi(x) (Hendrycks & Gimpel, 2016), Hugging Face's "gelu"."""
  return 0.5 * x * (1.0 + special.erf(x / np.sqrt(2.0)))


def layer_norm(x, gamma, beta, eps=1e-12):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * gamma + beta


def adapter(x, w, prefix):
  """A Houlsby adapter; with prefix + "LayerNorm/{gamma,beta}", HyperFormer's
  A(x) = LN(U(GeLU(D x))) + x (Mahabadi et al., 2021; torch's epsilon 1e-5)."""
  if prefix + "weights1" not in w:
    return x
  h = gelu(x @ w[prefix + "weights1"] + w[prefix + "biases1"])
  up = h @ w[prefix + "weights2"] + w[prefix + "biases2"]
  if prefix + "LayerNorm/gamma" in w:
    up = layer_norm(up, w[prefix + "LayerNorm/gamma"], w[prefix + "LayerNorm/beta"], eps=1e-5)
  return x + up


def bottleneck(a, w, prefix):
  """W2 gelu(W1 a + b1) + b2, without the residual."""
  return gelu(a @ w[prefix + "weights1"] + w[prefix + "biases1"]) @ w[prefix + "weights2"] \
      + w[prefix + "biases2"]


def adapted_sublayer(h, r, w, prefix, norm, design, scaling):
  """What a sub-layer adds to its input before its LayerNorm, adapter included:
  the design's equation (module docstring) before the final `LN(. + r)`."""
  if prefix + "weights1" not in w:
    return h
  if design == "houlsby":
    return h + scaling * (adapter(h, w, prefix) - h)
  if design == "pfeiffer":
    return h + scaling * bottleneck(norm(h + r), w, prefix)
  if design == "parallel":
    return h + scaling * bottleneck(r, w, prefix)
  raise ValueError(design)


def bert_forward(w, num_heads, input_ids, input_mask, segment_ids, design="houlsby",
                 scaling=1.0, hidden_act=gelu):
  """Returns (sequence_output [B,S,H], pooled_output [B,H]) in float64; `hidden_act`
  is the feed-forward layers' non-linearity (the adapters' stays the tanh GELU)."""
  w = {k: np.asarray(v, np.float64) for k, v in w.items()}
  b, s = input_ids.shape
  x = (w["bert/embeddings/word_embeddings"][input_ids]
       + w["bert/embeddings/token_type_embeddings"][segment_ids]
       + w["bert/embeddings/position_embeddings"][:s][None])
  x = layer_norm(x, w["bert/embeddings/LayerNorm/gamma"], w["bert/embeddings/LayerNorm/beta"])
  h = x.shape[-1]
  d = h // num_heads
  bias = (1.0 - input_mask[:, None, None, :].astype(np.float64)) * -10000.0
  n = 0
  while f"bert/encoder/layer_{n}/attention/self/query/kernel" in w:
    p = f"bert/encoder/layer_{n}/"
    def dense(t, name):
      y = t @ w[p + name + "/kernel"] + w[p + name + "/bias"]
      lora = p + name + "/adapters/lora_"
      if lora + "a" in w:
        y = y + scaling * (t @ w[lora + "a"]) @ w[lora + "b"]
      return y
    heads = lambda t: t.reshape(b, s, num_heads, d).transpose(0, 2, 1, 3)
    q = heads(dense(x, "attention/self/query"))
    k = heads(dense(x, "attention/self/key"))
    v = heads(dense(x, "attention/self/value"))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d) + bias
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, h)
    norm = lambda t, scope: layer_norm(t, w[p + scope + "/LayerNorm/gamma"],
                                       w[p + scope + "/LayerNorm/beta"])
    attention_norm = lambda t: norm(t, "attention/output")
    a = adapted_sublayer(dense(context, "attention/output/dense"), x, w,
                         p + "attention/output/adapters/", attention_norm, design, scaling)
    a = attention_norm(a + x)
    output_norm = lambda t: norm(t, "output")
    f = dense(hidden_act(dense(a, "intermediate/dense")), "output/dense")
    f = adapted_sublayer(f, a, w, p + "output/adapters/", output_norm, design, scaling)
    x = output_norm(f + a)
    n += 1
  pooled = np.tanh(x[:, 0] @ w["bert/pooler/dense/kernel"] + w["bert/pooler/dense/bias"])
  return x, pooled
