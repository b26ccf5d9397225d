"""Google's BERT release format: the target of every converter (convert_checkpoint.py).

A release directory, as google-research/bert published them and as
`checkpoint_io.load_checkpoint` reads them:

  bert_config.json    the original BertConfig keys (indent 2, sorted keys)
  vocab.txt           WordPiece vocabulary
  bert_model.ckpt.*   name-based checkpoint (`bert/embeddings/...`, float32)

This module knows the names and shapes such a checkpoint holds
(`google_variable_shapes`), checks that converted tensors are exactly those
(`check_complete`), and writes and reads the directory's files. A source
that is not such an encoder is an errors.UserError naming it.
"""

import posixpath
from typing import Dict, Mapping, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from adapter_bert.checkpoints import checkpoint_io
from adapter_bert import errors
from adapter_bert.model import modeling
from adapter_bert.storage import file_io
from adapter_bert.storage import path_checks
from adapter_bert import tokenization

CONFIG_NAME = "bert_config.json"
VOCAB_NAME = "vocab.txt"
CHECKPOINT_NAME = "bert_model.ckpt"

# The fields of the original BertConfig, in its JSON spelling.
BERT_CONFIG_KEYS = tuple(sorted(modeling.BertConfig.from_dict({"vocab_size": 1}).to_dict()))

POOLER_NAMES = ("bert/pooler/dense/kernel", "bert/pooler/dense/bias")
MISSING_POOLER_CHOICES = ("random", "identity", "error")
_POOLER_SEED = 12345

# The target: Google's variable names and shapes.


def google_variable_shapes(config: Mapping[str, object]) -> Dict[str, Tuple[int, ...]]:
  """Returns {TF1 variable name: shape} of a Google BERT encoder incl. pooler."""
  h, i = int(config["hidden_size"]), int(config["intermediate_size"])
  shapes = {
      "bert/embeddings/word_embeddings": (int(config["vocab_size"]), h),
      "bert/embeddings/token_type_embeddings": (int(config["type_vocab_size"]), h),
      "bert/embeddings/position_embeddings": (int(config["max_position_embeddings"]), h),
      "bert/embeddings/LayerNorm/gamma": (h,),
      "bert/embeddings/LayerNorm/beta": (h,),
  }
  for n in range(int(config["num_hidden_layers"])):
    layer = "bert/encoder/layer_%d/" % n
    for proj in ("query", "key", "value"):
      shapes[layer + "attention/self/%s/kernel" % proj] = (h, h)
      shapes[layer + "attention/self/%s/bias" % proj] = (h,)
    for dense, (n_in, n_out) in (("attention/output/dense", (h, h)),
                                 ("intermediate/dense", (h, i)),
                                 ("output/dense", (i, h))):
      shapes[layer + dense + "/kernel"] = (n_in, n_out)
      shapes[layer + dense + "/bias"] = (n_out,)
    for norm in ("attention/output/LayerNorm", "output/LayerNorm"):
      shapes[layer + norm + "/gamma"] = (h,)
      shapes[layer + norm + "/beta"] = (h,)
  shapes[POOLER_NAMES[0]] = (h, h)
  shapes[POOLER_NAMES[1]] = (h,)
  return shapes


def _make_pooler(config: Mapping[str, object], how: str) -> Dict[str, np.ndarray]:
  """Creates a pooler for a source that has none (sentence encoders often drop it).

  "random" gives what the original would have used for a variable missing from
  `init_checkpoint`: truncated normal (2 stddev) with stddev `initializer_range`,
  zero bias; the seed is fixed so conversions are reproducible. "identity" gives
  pooled = tanh([CLS] vector), which keeps the encoder's information when the
  pooler stays frozen (as with adapters).
  """
  h = int(config["hidden_size"])
  if how == "identity":
    kernel = np.eye(h, dtype=np.float32)
  elif how == "random":
    rng = np.random.default_rng(_POOLER_SEED)
    kernel = rng.standard_normal((h, h))
    outside = np.abs(kernel) > 2.0
    while outside.any():  # Resample like tf.random.truncated_normal.
      kernel[outside] = rng.standard_normal(int(outside.sum()))
      outside = np.abs(kernel) > 2.0
    kernel = (kernel * float(config["initializer_range"])).astype(np.float32)
  else:
    raise errors.UserError("checkpoint has no pooler (bert/pooler/dense) and "
                           "missing_pooler=%r; use one of %s" % (how, MISSING_POOLER_CHOICES))
  init = ("identity" if how == "identity" else "truncated normal(stddev=%s, seed=%d)"
          % (config["initializer_range"], _POOLER_SEED))
  logging.warning("Checkpoint has no pooler: created bert/pooler/dense as %s, zero "
                  "bias. pooled_output is not pre-trained.", init)
  return {POOLER_NAMES[0]: kernel, POOLER_NAMES[1]: np.zeros((h,), np.float32)}


def check_complete(tensors: Dict[str, np.ndarray], config: Mapping[str, object],
                    source: str, missing_pooler: str) -> Dict[str, np.ndarray]:
  """Asserts `tensors` is exactly a Google BERT encoder; fills a missing pooler."""
  expected = google_variable_shapes(config)
  if not any(name in tensors for name in expected):
    raise errors.UserError(
        "not a BERT checkpoint: %s has none of the BERT encoder tensors" % source)
  if all(p not in tensors for p in POOLER_NAMES):
    tensors = dict(tensors, **_make_pooler(config, missing_pooler))
  missing = sorted(set(expected) - set(tensors))
  if missing:
    raise errors.UserError(
        "not a BERT checkpoint: %s lacks %d BERT tensors (config: %d layers): %s" % (
            source, len(missing), config["num_hidden_layers"], missing))
  extra = sorted(set(tensors) - set(expected))
  if extra:
    raise errors.UserError("%s has tensors beyond its config (%d layers): %s" % (
        source, config["num_hidden_layers"], extra))
  wrong = [(n, tensors[n].shape, s) for n, s in expected.items() if tensors[n].shape != s]
  if wrong:
    raise errors.UserError("%s: shapes (name, shape, expected) differ from its config: %s" % (
        source, wrong))
  return tensors


def as_float32(name: str, array: np.ndarray) -> np.ndarray:
  if not np.issubdtype(array.dtype, np.floating):
    raise errors.UserError("tensor %s has dtype %s, expected floating point" % (
        name, array.dtype))
  # Google's checkpoints are float32 and the loader checks dtypes.
  return np.ascontiguousarray(array, dtype=np.float32)


# The release directory.


def bert_config_json(config: Mapping[str, object]) -> str:
  """As the original `BertConfig.to_json_string`: indent 2, sorted, newline."""
  return modeling.BertConfig.from_dict({k: config[k] for k in BERT_CONFIG_KEYS}).to_json_string()


def read_bert_config(path: str) -> Dict[str, object]:
  """Reads an original-format bert_config.json, every field required, into a
  dict of BERT_CONFIG_KEYS (errors.UserError naming the file if it is not one)."""
  config = modeling.BertConfig.from_json_file(path, require_all=True).to_dict()
  return {k: config[k] for k in BERT_CONFIG_KEYS}


# What a converted directory holds of the converter's: replaced by --overwrite
# (a checkpoint of other shards too); other files there are the user's, kept.
OWNED = (CONFIG_NAME, VOCAB_NAME, CHECKPOINT_NAME + ".*", "checkpoint")


def write_google_checkpoint(output_dir: str, config: Mapping[str, object],
                            tensors: Mapping[str, np.ndarray], vocab_file: str,
                            overwrite: bool = False) -> None:
  """Writes bert_config.json, vocab.txt and bert_model.ckpt.* into output_dir.

  Everything is written into a temporary directory that then replaces
  output_dir (file_io.AtomicDirectory), so a failed conversion leaves no
  half-written output_dir; files of output_dir that are not OWNED are kept.
  """
  path_checks.check_output_dir(output_dir, overwrite)
  vocab_lines = max(tokenization.load_vocab(vocab_file).values()) + 1
  if vocab_lines > int(config["vocab_size"]):  # Ids beyond the embedding table.
    raise errors.UserError("has %d entries > vocab_size %s" % (vocab_lines,
                                                              config["vocab_size"]), vocab_file)
  if vocab_lines < int(config["vocab_size"]):
    logging.warning("%s has %d entries < vocab_size %s (padded embedding table).",
                    vocab_file, vocab_lines, config["vocab_size"])
  with file_io.AtomicDirectory(output_dir, what="the converted model",
                               owned=OWNED) as tmp_dir:
    with tf.io.gfile.GFile(posixpath.join(tmp_dir, CONFIG_NAME), "w") as f:
      f.write(bert_config_json(config))
    tf.io.gfile.copy(vocab_file, posixpath.join(tmp_dir, VOCAB_NAME))
    checkpoint_io.write_tf1_checkpoint(posixpath.join(tmp_dir, CHECKPOINT_NAME), tensors)
  n_params = sum(int(np.prod(t.shape)) for t in tensors.values())
  logging.info("Wrote %s: %d tensors, %d parameters, %d layers, hidden %s.", output_dir,
               len(tensors), n_params, config["num_hidden_layers"], config["hidden_size"])

