"""An independent NumPy forward pass of BERT with adapters, from TF1-named weights.

Written from google-research/bert modeling.py (`embedding_postprocessor`,
`attention_layer`, `transformer_model`, `gelu` (tanh form), `layer_norm` (epsilon
1e-12 of tf.contrib.layers.layer_norm) and the pooler in `BertModel.__init__`) and
google-research/adapter-bert modeling.py (`feedforward_adapter`, applied in
`transformer_model` after each output projection and dropout, before the residual
LayerNorm). It shares no code with modeling.py, so it checks placement and numerics.
"""

import numpy as np


def gelu(x):
  return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


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


def bert_forward(w, num_heads, input_ids, input_mask, segment_ids):
  """Returns (sequence_output [B,S,H], pooled_output [B,H]) in float64."""
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
    dense = lambda t, name: t @ w[p + name + "/kernel"] + w[p + name + "/bias"]
    heads = lambda t: t.reshape(b, s, num_heads, d).transpose(0, 2, 1, 3)
    q = heads(dense(x, "attention/self/query"))
    k = heads(dense(x, "attention/self/key"))
    v = heads(dense(x, "attention/self/value"))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d) + bias
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, h)
    a = adapter(dense(context, "attention/output/dense"), w, p + "attention/output/adapters/")
    a = layer_norm(a + x, w[p + "attention/output/LayerNorm/gamma"],
                   w[p + "attention/output/LayerNorm/beta"])
    f = dense(gelu(dense(a, "intermediate/dense")), "output/dense")
    f = adapter(f, w, p + "output/adapters/")
    x = layer_norm(f + a, w[p + "output/LayerNorm/gamma"], w[p + "output/LayerNorm/beta"])
    n += 1
  pooled = np.tanh(x[:, 0] @ w["bert/pooler/dense/kernel"] + w["bert/pooler/dense/bias"])
  return x, pooled
