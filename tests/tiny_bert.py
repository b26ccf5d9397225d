"""Tiny Google-format BERT checkpoints for tests: written by name, from seeded NumPy."""

import json
import os

import numpy as np

from adapter_bert.checkpoints import checkpoint_io

TINY_CONFIG = {
    "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1, "hidden_size": 32, "initializer_range": 0.02,
    "intermediate_size": 37, "max_position_embeddings": 64, "num_attention_heads": 4,
    "num_hidden_layers": 2, "type_vocab_size": 2, "vocab_size": 99,
}

# Real words first so that test sentences tokenize to something other than [UNK].
_WORDS = ("the a an is was it this that of and to in on for with not good bad "
          "movie film great terrible man woman dog cat runs ran who what where when "
          "he she they we you i . , ! ? ' \" - ( ) cold hot yes no paris france "
          "capital city river water book read reads story").split()


def tiny_vocab(size=99):
  specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  words = specials + [w for w in _WORDS if w not in specials]
  words += [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"]
  words += [f"tok{i}" for i in range(size - len(words))]
  return words[:size]


def google_variable_shapes(config, adapter_size=0):
  """Names and shapes of a Google BERT checkpoint's variables, with adapter-bert's.

  The scopes are those of google-research/bert modeling.py `BertModel.__init__`,
  `embedding_postprocessor` and `transformer_model`; adapters are the
  "adapters/{weights,biases}{1,2}" of google-research/adapter-bert modeling.py
  `feedforward_adapter`, under attention/output and output of every layer.
  """
  h, i = config["hidden_size"], config["intermediate_size"]
  shapes = {
      "bert/embeddings/word_embeddings": (config["vocab_size"], h),
      "bert/embeddings/token_type_embeddings": (config["type_vocab_size"], h),
      "bert/embeddings/position_embeddings": (config["max_position_embeddings"], h),
      "bert/embeddings/LayerNorm/gamma": (h,), "bert/embeddings/LayerNorm/beta": (h,),
      "bert/pooler/dense/kernel": (h, h), "bert/pooler/dense/bias": (h,),
  }
  for n in range(config["num_hidden_layers"]):
    p = f"bert/encoder/layer_{n}/"
    for name in ("query", "key", "value"):
      shapes[p + f"attention/self/{name}/kernel"] = (h, h)
      shapes[p + f"attention/self/{name}/bias"] = (h,)
    shapes[p + "attention/output/dense/kernel"] = (h, h)
    shapes[p + "attention/output/dense/bias"] = (h,)
    shapes[p + "intermediate/dense/kernel"] = (h, i)
    shapes[p + "intermediate/dense/bias"] = (i,)
    shapes[p + "output/dense/kernel"] = (i, h)
    shapes[p + "output/dense/bias"] = (h,)
    for scope in ("attention/output/", "output/"):
      shapes[p + scope + "LayerNorm/gamma"] = (h,)
      shapes[p + scope + "LayerNorm/beta"] = (h,)
      if adapter_size:
        m = adapter_size
        shapes[p + scope + "adapters/weights1"] = (h, m)
        shapes[p + scope + "adapters/biases1"] = (1, m)
        shapes[p + scope + "adapters/weights2"] = (m, h)
        shapes[p + scope + "adapters/biases2"] = (1, h)
  return shapes


def random_weights(shapes, seed=0, scale=0.2):
  """Random values; LayerNorm gammas near 1 so activations stay in range."""
  rng = np.random.default_rng(seed)
  weights = {}
  for name, shape in shapes.items():
    value = rng.normal(0.0, scale, size=shape).astype(np.float32)
    if name.endswith("gamma"):
      value += 1.0
    weights[name] = value
  return weights


def write_google_dir(directory, config=None, seed=0, adapter_size=0, extra=None,
                     prefix="bert_model.ckpt"):
  """bert_config.json, vocab.txt and a name-based checkpoint in `directory`.

  Returns:
    (config path, vocab path, checkpoint prefix, weights dict).
  """
  config = dict(config or TINY_CONFIG)
  os.makedirs(directory, exist_ok=True)
  config_path = os.path.join(directory, "bert_config.json")
  with open(config_path, "w") as f:
    json.dump(config, f, indent=2, sort_keys=True)
  vocab_path = os.path.join(directory, "vocab.txt")
  with open(vocab_path, "w") as f:
    f.write("\n".join(tiny_vocab(config["vocab_size"])) + "\n")
  weights = random_weights(google_variable_shapes(config, adapter_size), seed)
  weights.update(extra or {})
  ckpt = os.path.join(directory, prefix)
  checkpoint_io.write_tf1_checkpoint(ckpt, weights)
  return config_path, vocab_path, ckpt, weights


def random_inputs(seed=1, batch=3, seq=9, padded_from=6, second_segment_from=4):
  """A batch of random token ids under TINY_CONFIG's vocab: example 1 padded from
  `padded_from` on, every example's second segment from `second_segment_from`."""
  rng = np.random.default_rng(seed)
  mask = np.ones((batch, seq), np.int32)
  mask[1, padded_from:] = 0
  return {"input_ids": rng.integers(0, TINY_CONFIG["vocab_size"], (batch, seq)).astype(np.int32),
          "input_mask": mask,
          "segment_ids": (np.arange(seq) >= second_segment_from).astype(np.int32)[None]
          .repeat(batch, 0)}
