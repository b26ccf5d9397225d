"""The pieces of run_classifier.py that are not flag wiring: losses, results, run config, hub.

  loss_fn / per_example_loss   the original's classifier (softmax cross-entropy)
                               and regression (squared error) losses
  eval_results                 what the original's Estimator.evaluate returned
  probabilities                what the original's predict wrote per example
  run_config / check_run_config
                               the settings saved with every model in output_dir
                               (`run_config.json`), and the guard that refuses to
                               mix an output_dir's checkpoints with another model
  read_hub_encoder / assign_encoder
                               a TF Hub (TF2 SavedModel) BERT encoder as the
                               starting point instead of a Google checkpoint
"""

import dataclasses
import json
import os
from typing import Dict, Mapping, Optional

import numpy as np
import scipy.special
import tensorflow as tf
from absl import logging

import classifier_features
import classifier_metrics

RUN_CONFIG_FILE = "run_config.json"

# Keys of run_config.json that fix the model's variables and the meaning of its
# outputs: a checkpoint in output_dir is only usable if they match.
_MODEL_KEYS = ("bert_config", "adapter_config", "num_labels", "label_list")


def loss_fn(is_regression: bool):
  """(labels [B], logits [B, num_labels]) -> float32 per-example loss [B]."""
  def classification(labels, logits):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)

  def regression(labels, logits):
    return tf.square(logits[:, 0] - tf.cast(labels, tf.float32))

  return regression if is_regression else classification


def per_example_loss(logits: np.ndarray, labels: np.ndarray, is_regression: bool) -> np.ndarray:
  """NumPy twin of `loss_fn`, float64 [N]."""
  logits = np.asarray(logits, np.float64)
  if is_regression:
    return (logits[:, 0] - np.asarray(labels, np.float64)) ** 2
  log_probs = scipy.special.log_softmax(logits, axis=-1)
  return -log_probs[np.arange(len(labels)), np.asarray(labels, np.int64)]


def eval_results(task_name: str, outputs: Mapping[str, np.ndarray], batch_size: int,
                 global_step: int, is_regression: bool) -> Dict[str, object]:
  """The keys of the original's eval_results.txt for `training.predict` outputs.

  eval_* come from classifier_metrics (real examples only). "loss" is what
  Estimator.evaluate reported: the mean over eval batches of each batch's mean
  loss, padding included (the original's total_loss did not weight examples).
  """
  logits, labels = outputs["logits"], outputs["labels"]
  results = dict(classifier_metrics.compute_metrics(
      task_name, labels, logits if not is_regression else logits[:, 0],
      outputs["is_real_example"]))
  losses = per_example_loss(logits, labels, is_regression)
  batch_means = [losses[i:i + batch_size].mean() for i in range(0, len(losses), batch_size)]
  results["loss"] = np.float32(np.mean(batch_means))
  results["global_step"] = int(global_step)
  return results


def probabilities(logits: np.ndarray, is_regression: bool) -> np.ndarray:
  """Class probabilities [N, num_labels], or scores [N] for regression."""
  if is_regression:
    return np.asarray(logits)[:, 0]
  return scipy.special.softmax(np.asarray(logits, np.float64), axis=-1).astype(np.float32)


def write_eval_summaries(log_dir: str, results: Mapping[str, object], step: int) -> None:
  """TensorBoard scalars of the eval metrics, as Estimator wrote to model_dir/eval."""
  writer = tf.summary.create_file_writer(log_dir)
  with writer.as_default(step=step):
    for key, value in sorted(results.items()):
      if key != "global_step":
        tf.summary.scalar(key, float(value))
  writer.flush()
  writer.close()


def run_config(**settings) -> dict:
  """The run's settings as JSON-able data; `bert_config` / `adapter_config` as dicts."""
  return {k: (v.to_dict() if hasattr(v, "to_dict") else v) for k, v in settings.items()}


def check_run_config(output_dir: str, config: Mapping[str, object], also=()) -> None:
  """Refuses an output_dir whose checkpoints belong to another model.

  Restoring e.g. a 3-label checkpoint into a 2-label model fails deep inside
  tf.train with a shape error, and a same-sized label list in another order
  would not fail at all, so compare the saved settings first.

  Args:
    also: further keys to compare (e.g. "train_mode" when resuming training,
      whose optimizer slots exist only for the variables that train).
  """
  path = os.path.join(output_dir, RUN_CONFIG_FILE)
  if not tf.train.latest_checkpoint(output_dir) or not tf.io.gfile.exists(path):
    return
  with tf.io.gfile.GFile(path, "r") as f:
    saved = json.load(f)
  for key in _MODEL_KEYS + tuple(also):
    if key in saved and saved[key] != config.get(key):
      raise ValueError(
          f"{output_dir} holds checkpoints of another run: {key} was {saved[key]!r} there "
          f"(see {path}) but is {config.get(key)!r} now; use a fresh --output_dir or the "
          f"same settings")


def write_run_config(output_dir: str, config: Mapping[str, object]) -> None:
  classifier_features.write_text_atomically(
      os.path.join(output_dir, RUN_CONFIG_FILE),
      json.dumps(config, indent=2, sort_keys=True) + "\n")


@dataclasses.dataclass
class HubEncoder:
  """A BERT encoder read from a TF Hub handle, mapped to Google's variable names."""
  handle: str
  config: dict                   # bert_config.json keys
  vocab_file: str
  do_lower_case: Optional[bool]  # as the SavedModel states it, if it does
  tensors: Dict[str, np.ndarray]  # Google name -> value


def _resolve_hub_handle(handle: str) -> str:
  if handle.startswith(("http://", "https://")):
    import tensorflow_hub as hub  # pylint: disable=g-import-not-at-top
    return hub.resolve(handle)  # Downloads into TFHUB_CACHE_DIR once.
  if not tf.io.gfile.isdir(handle):
    raise FileNotFoundError(f"--bert_hub_module_handle: no SavedModel directory {handle}")
  return handle


def read_hub_encoder(handle: str, bert_config_file: Optional[str] = None,
                     vocab_file: Optional[str] = None) -> HubEncoder:
  """Reads a TF2 BERT encoder SavedModel (TF Hub / Model Garden export).

  Args:
    handle: https:// URL of a TF Hub model, or a local or gs:// SavedModel dir.
    bert_config_file: original-format config; without it the sizes are
      inferred from the weights (dropout etc. get BERT's defaults).
    vocab_file: without it, the SavedModel's own vocab (`vocab_file` asset or
      assets/vocab.txt), as run_classifier_with_tfhub.py took it from the module.
  """
  # convert_checkpoint holds the Model Garden -> Google name table.
  import convert_checkpoint  # pylint: disable=g-import-not-at-top
  path = _resolve_hub_handle(handle)
  loaded = tf.saved_model.load(path)
  variables = {v.name: v.numpy() for v in loaded.variables}
  if bert_config_file:
    config = convert_checkpoint.read_bert_config(bert_config_file)
  else:
    config = convert_checkpoint.infer_bert_config(
        convert_checkpoint._strip_prefix(variables))  # pylint: disable=protected-access
  tensors = convert_checkpoint.tf2_variables_to_google(variables, config)
  if not vocab_file:
    asset = getattr(loaded, "vocab_file", None)
    vocab_file = (asset.asset_path.numpy().decode() if asset is not None
                  else os.path.join(path, "assets", "vocab.txt"))
    if not tf.io.gfile.exists(vocab_file):
      raise FileNotFoundError(f"{handle} has no vocabulary ({vocab_file}); pass --vocab_file")
  lower = getattr(loaded, "do_lower_case", None)
  lower = None if lower is None else bool(lower.numpy())
  logging.info("Read TF Hub encoder %s (%d tensors, vocab %s)", handle, len(tensors),
               vocab_file)
  return HubEncoder(handle, config, vocab_file, lower, tensors)


def assign_encoder(model, hub_encoder: HubEncoder) -> None:
  """Copies the hub encoder's weights into `model`; adapters and head keep their init."""
  names = model.tf1_variable_map()
  for name, value in hub_encoder.tensors.items():
    if name not in names:
      raise ValueError(f"{hub_encoder.handle}: {name} is not a variable of the model")
    if tuple(value.shape) != tuple(names[name].shape):
      raise ValueError(f"{hub_encoder.handle}: {name} has shape {tuple(value.shape)} but "
                       f"{tuple(names[name].shape)} in the model (does bert_config_file "
                       f"match the encoder?)")
    names[name].assign(value)
  logging.info("Initialized %d encoder variables from %s", len(hub_encoder.tensors),
               hub_encoder.handle)
