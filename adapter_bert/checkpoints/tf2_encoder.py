"""TF2 Model Garden `BertEncoder` (TF Hub's BERT encoders) -> Google's names and layouts.

Sources: a SavedModel (a TF Hub BERT encoder, or any export of Model Garden's
BertEncoder) or an object-based `tf.train` checkpoint holding one.
`read_tf2_encoder` is the one entry point: the converter writes what it
returns as a Google-format directory (convert_checkpoint.py), and the scripts
load it straight into a model for --bert_hub_module_handle (checkpoints/base_model.py).
A source that is missing, unreadable or not a BERT encoder is an
errors.UserError naming it.
"""

import dataclasses
import os
import re
from typing import Dict, Mapping, Optional

from absl import logging
import numpy as np
import tensorflow as tf
# Only the TF1 <-> TF2 name table; this module imports no tf_keras at top level.
from official.nlp.tools import tf1_bert_checkpoint_converter_lib

from adapter_bert.checkpoints import checkpoint_io
from adapter_bert.checkpoints import google_release
from adapter_bert import errors

# Skipped TF2 variables: pre-training heads of BertPretrainerV2 exports.
_TF2_SKIP = re.compile(r"(.*/)?(cls|predictions|masked_lm|next_sentence)/.*")


def model_garden_name(google_name: str) -> str:
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
    raise errors.UserError("not a BERT checkpoint: expected one %s variable, found %s" % (
        anchor, hits))
  prefix = hits[0][:-len(anchor)]
  return {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in variables.items()}


def infer_bert_config(variables: Mapping[str, np.ndarray]) -> Dict[str, object]:
  """Infers a BertConfig dict from Model Garden BertEncoder variable shapes.

  Shapes fix every size. hidden_act, dropout rates and initializer_range are not
  stored in the weights: BERT's defaults are assumed and logged.
  """
  variables = _strip_prefix(variables)
  def dim(name, axis):
    if name not in variables:
      raise errors.UserError("not a BERT checkpoint: no variable %s" % name)
    return int(variables[name].shape[axis])

  layers = {int(m.group(1)) for k in variables
            for m in [re.match(r"transformer/layer_(\d+)/", k)] if m}
  if layers != set(range(len(layers))):
    raise errors.UserError("not a BERT checkpoint: layers %s are not 0..N-1" % sorted(layers))
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
  # The weights do not say which function they were trained with: one line says
  # what is assumed (issue 62: a conversion keeps the function, or says where it cannot).
  logging.warning("No bert_config_file: sizes inferred from the weights; the activation "
                  "is not stored in them: assumed hidden_act=gelu (the tanh GELU of Google's "
                  "BERT and Model Garden's 'gelu'), dropout 0.1, initializer_range 0.02; give "
                  "--bert_config_file to name another (e.g. gelu_erf).")
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
  for name, shape in google_release.google_variable_shapes(config).items():
    source = model_garden_name(name)
    if source not in variables:
      continue  # check_complete reports it.
    array = google_release.as_float32(source, variables[source])
    if array.size != int(np.prod(shape)):
      raise errors.UserError("%s has shape %s, cannot be %s %s" % (
          source, array.shape, name, shape))
    out[name] = array.reshape(shape)
    used.add(source)
  unknown = [n for n in sorted(set(variables) - used) if not _TF2_SKIP.fullmatch(n)]
  for name in sorted(set(variables) - used - set(unknown)):
    logging.info("Skipped %s (pre-training head, not in the encoder).", name)
  if unknown:
    raise errors.UserError("TF2 encoder has %d variables that are not part of a BERT "
                           "encoder with this config: %s" % (len(unknown), unknown))
  return google_release.check_complete(out, config, "TF2 encoder", missing_pooler="error")


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
      # Restoring weights computes nothing: any activation builds the same variables,
      # and Model Garden knows no "gelu_erf" (nor "swish" as BERT's hidden_act here).
      activation=tf_utils.get_activation("gelu"),
      max_sequence_length=config["max_position_embeddings"],
      type_vocab_size=config["type_vocab_size"],
      initializer=tf_keras.initializers.TruncatedNormal(stddev=config["initializer_range"]))
  roots = sorted({key.split("/")[0] for key in
                  checkpoint_io.checkpoint_reader(checkpoint).get_variable_to_shape_map()})
  if model_name not in roots:
    raise errors.UserError("checkpoint %s has no object %r (checkpoint_model_name); its "
                           "top-level objects: %s" % (checkpoint, model_name, roots))
  try:
    status = tf.train.Checkpoint(**{model_name: encoder}).read(checkpoint)
    # Optimizer slots and heads in the checkpoint may be left over, but every
    # encoder variable must come from it.
    status.expect_partial()
    status.assert_existing_objects_matched()
  except (AssertionError, ValueError, tf.errors.InvalidArgumentError) as e:
    raise errors.UserError("not a BERT checkpoint matching bert_config_file: %s: %s" % (
        checkpoint, str(e)[:500])) from e
  except (tf.errors.OpError, IndexError) as e:
    raise errors.UserError("cannot read checkpoint %s (corrupt or truncated?): %s" % (
        checkpoint, str(e).strip().split("\n")[0]), checkpoint_io.data_files(checkpoint)) from e
  return {v.name: v.numpy() for v in encoder.weights}



@dataclasses.dataclass(frozen=True)
class Tf2Encoder:
  """A TF2 BERT encoder's weights under Google's names, and what its files state."""
  config: Dict[str, object]        # bert_config.json keys
  tensors: Dict[str, np.ndarray]   # Google name -> float32 array, pooler included
  vocab_file: Optional[str]        # as given, else the SavedModel's own; None if neither
  do_lower_case: Optional[bool]    # as the SavedModel states it, if it does


def read_tf2_encoder(saved_model_dir: Optional[str] = None, checkpoint: Optional[str] = None,
                     bert_config_file: Optional[str] = None, vocab_file: Optional[str] = None,
                     checkpoint_model_name: str = "encoder") -> Tf2Encoder:
  """Reads a TF2 BERT encoder into memory under Google's names.

  Args:
    saved_model_dir: a SavedModel of a BertEncoder (e.g. a TF Hub BERT encoder).
    checkpoint: or a `tf.train.Checkpoint` prefix holding a BertEncoder under
      `checkpoint_model_name` (Model Garden's converter uses "encoder").
    bert_config_file: original-format bert_config.json; required with
      `checkpoint`, otherwise sizes are inferred from the weights.
    vocab_file: vocab.txt; defaults to the SavedModel's `vocab_file` asset or
      assets/vocab.txt (as run_classifier_with_tfhub.py took it from the module).
  Raises:
    errors.UserError: for unknown, missing or mis-shaped variables (the message
      names them), or a checkpoint that does not fit bert_config_file.
  """
  if (saved_model_dir is None) == (checkpoint is None):
    raise ValueError("give exactly one of saved_model_dir and checkpoint")
  config = google_release.read_bert_config(bert_config_file) if bert_config_file else None
  do_lower_case = None
  if checkpoint is not None:
    if config is None:
      raise errors.UserError("a tf.train checkpoint needs bert_config_file")
    variables = _restore_model_garden_encoder(checkpoint, config, checkpoint_model_name)
  else:
    try:
      loaded = tf.saved_model.load(saved_model_dir)
    except (OSError, tf.errors.OpError, ValueError) as e:  # no saved_model.pb, corrupt
      raise errors.UserError("not a readable SavedModel: %s" % str(e).strip().split("\n")[0],
                             saved_model_dir) from e
    variables = {v.name: v.numpy() for v in loaded.variables}
    vocab_file = vocab_file or _saved_model_vocab(loaded, saved_model_dir)
    if getattr(loaded, "do_lower_case", None) is not None:
      do_lower_case = bool(loaded.do_lower_case.numpy())
  try:
    config = config or infer_bert_config(variables)
    tensors = tf2_variables_to_google(variables, config)
  except errors.UserError as e:  # Those name variables; add whose they are.
    raise errors.UserError(str(e), saved_model_dir or checkpoint) from e
  return Tf2Encoder(config, tensors, vocab_file, do_lower_case)


def _saved_model_vocab(loaded, saved_model_dir: str) -> Optional[str]:
  asset = getattr(loaded, "vocab_file", None)
  if asset is not None:
    return asset.asset_path.numpy().decode()
  path = os.path.join(saved_model_dir, "assets", google_release.VOCAB_NAME)
  return path if tf.io.gfile.exists(path) else None
