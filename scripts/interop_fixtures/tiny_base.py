r"""The tiny random BERT that every adapter fixture under tests/fixtures/interop/ sits on.

Run in the PyTorch venv (make.sh), never by the test suite:

  benchmarks/.venv-adapterhub/bin/python scripts/interop_fixtures/tiny_base.py

Writes tests/fixtures/interop/base/: config.json, model.safetensors (a seeded
random `BertModel`, pooler included, saved with `save_pretrained`) and vocab.txt
(a small WordPiece vocabulary). hidden_act is "gelu_new" (the tanh GELU that
Google's BERT computes), so that this project's conversion of the base
(convert_checkpoint.py --hf_dir) computes the same encoder to float32 rounding
and the fixtures' logits can be compared to 1e-5.

and tests/fixtures/interop/inputs.json: the fixed inputs every fixture's logits
are recorded on, with the base's pooled and [CLS] outputs on them.

Other fixture scripts import `load_base()` and `fixed_inputs()` from here.
"""

import json
import os

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(REPO, "tests", "fixtures", "interop")
BASE_DIR = os.path.join(FIXTURES, "base")
SEED = 1234

# Real words first so that test sentences tokenize to something other than [UNK].
_WORDS = ("the a an is was it this that of and to in on for with not good bad "
          "movie film great terrible man woman dog cat runs ran who what where when "
          "he she they we you i . , ! ? ' \" - ( ) cold hot yes no paris france "
          "capital city river water book read reads story").split()


def vocab(size=99):
  """A small uncased WordPiece vocabulary of `size` entries."""
  words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + _WORDS
  words += [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"]
  words += [f"tok{i}" for i in range(size - len(words))]
  return words[:size]


def config():
  """2 layers, hidden 32, 4 heads, intermediate 37: small files, every shape distinct."""
  return transformers.BertConfig(
      vocab_size=len(vocab()), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
      intermediate_size=37, hidden_act="gelu_new", hidden_dropout_prob=0.1,
      attention_probs_dropout_prob=0.1, max_position_embeddings=64, type_vocab_size=2,
      initializer_range=0.02, layer_norm_eps=1e-12)


def fixed_inputs():
  """Three rows of [CLS] a [SEP] b [SEP] with padding: ids, mask and segments (lists)."""
  rows = [
      [2, 5, 22, 8, 11, 3, 40, 41, 3, 0, 0, 0],
      [2, 60, 61, 62, 63, 64, 3, 0, 0, 0, 0, 0],
      [2, 7, 9, 20, 30, 35, 36, 3, 25, 26, 27, 3],
  ]
  sep_first = [r.index(3) for r in rows]
  mask = [[int(t != 0) for t in r] for r in rows]
  segments = [[int(i > s and t != 0) for i, t in enumerate(r)] for r, s in zip(rows, sep_first)]
  return {"input_ids": rows, "input_mask": mask, "segment_ids": segments}


def torch_inputs(inputs):
  return dict(input_ids=torch.tensor(inputs["input_ids"]),
              attention_mask=torch.tensor(inputs["input_mask"]),
              token_type_ids=torch.tensor(inputs["segment_ids"]))


def load_base(model_class=transformers.BertModel):
  """The saved base as `model_class` (e.g. adapters.BertAdapterModel), in eval mode.

  Loaded by its path from the repository's root (the libraries write the path
  they loaded from into adapter_config.json as model_name: no machine's path).
  """
  os.chdir(REPO)
  model = model_class.from_pretrained(os.path.relpath(BASE_DIR, REPO))
  model.eval()
  return model


def main():
  torch.manual_seed(SEED)
  model = transformers.BertModel(config())
  # Random, not the initializer's zeros/ones: LayerNorms and biases then matter too.
  with torch.no_grad():
    for name, param in model.named_parameters():
      if name.endswith("bias") or "LayerNorm" in name:
        param.add_(0.1 * torch.randn_like(param))
  os.makedirs(BASE_DIR, exist_ok=True)
  model.save_pretrained(BASE_DIR, safe_serialization=True)
  with open(os.path.join(BASE_DIR, "vocab.txt"), "w") as f:
    f.write("\n".join(vocab()) + "\n")
  # The base's own outputs on the fixed inputs: a check of the conversion alone.
  model.eval()
  with torch.no_grad():
    out = model(**torch_inputs(fixed_inputs()))
  record = dict(fixed_inputs(), pooled_output=out.pooler_output.tolist(),
                cls_output=out.last_hidden_state[:, 0].tolist())
  with open(os.path.join(FIXTURES, "inputs.json"), "w") as f:
    json.dump(record, f, indent=1)
    f.write("\n")
  print("wrote", os.path.relpath(BASE_DIR, REPO))


if __name__ == "__main__":
  main()
