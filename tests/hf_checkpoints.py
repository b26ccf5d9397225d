"""Tiny Hugging Face BERT directories for tests, as convert_checkpoint.py reads them.

hf_state is a random BertModel state dict (torch layouts: Linear [out, in]) of the
sizes in TINY; write_hf_dir writes it as model.safetensors beside config.json and
vocab.txt.
"""

import json
import os

import numpy as np
from safetensors.numpy import save_file

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=37, max_position_embeddings=40, type_vocab_size=2,
            hidden_act="gelu", hidden_dropout_prob=0.1,
            attention_probs_dropout_prob=0.1, initializer_range=0.02)


def hf_state(prefix="", pooler=True, seed=0):
  """A random HF BertModel state dict for TINY (torch layouts: Linear [out, in])."""
  rng = np.random.default_rng(seed)
  h, i = 32, 37
  r = lambda *s: rng.standard_normal(s).astype(np.float32)
  state = {
      "embeddings.word_embeddings.weight": r(99, h),
      "embeddings.position_embeddings.weight": r(40, h),
      "embeddings.token_type_embeddings.weight": r(2, h),
      "embeddings.LayerNorm.weight": r(h), "embeddings.LayerNorm.bias": r(h),
      "embeddings.position_ids": np.arange(40, dtype=np.int64)[None],
  }
  for n in range(2):
    p = "encoder.layer.%d." % n
    for name, (n_out, n_in) in [("attention.self.query", (h, h)),
                                ("attention.self.key", (h, h)),
                                ("attention.self.value", (h, h)),
                                ("attention.output.dense", (h, h)),
                                ("intermediate.dense", (i, h)),
                                ("output.dense", (h, i))]:
      state[p + name + ".weight"] = r(n_out, n_in)
      state[p + name + ".bias"] = r(n_out)
    for name in ("attention.output.LayerNorm", "output.LayerNorm"):
      state[p + name + ".weight"] = r(h)
      state[p + name + ".bias"] = r(h)
  if pooler:
    state["pooler.dense.weight"] = r(h, h)
    state["pooler.dense.bias"] = r(h)
  return {prefix + k: v for k, v in state.items()}


def write_hf_dir(path, state, **config_overrides):
  """`state` as a Hugging Face BERT directory at `path` (config: TINY, then
  `config_overrides`); returns the directory."""
  os.makedirs(path, exist_ok=True)
  config = {k: v for k, v in TINY.items()}
  config.update(model_type="bert", layer_norm_eps=1e-12, architectures=["BertModel"])
  config.update(config_overrides)
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(config, f)
  with open(os.path.join(path, "vocab.txt"), "w") as f:
    f.write("".join("tok%d\n" % n for n in range(99)))
  save_file(state, os.path.join(path, "model.safetensors"))
  return str(path)
