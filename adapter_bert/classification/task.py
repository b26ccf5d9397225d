"""The classifier's pipeline pieces that every classification task uses (tasks/
sentence_prediction.py, run_classifier.py's, and tasks/multitask.py): inputs,
losses, results.

  make_processor / read_examples  the task's processor and every split the run needs
  set_up                       the classifier run: startup.set_up with the task's model
  predict_record               the model's outputs over a feature record
  loss_fn / per_example_loss   the original's classifier (softmax cross-entropy)
                               and regression (squared error) losses
  eval_results                 what the original's Estimator.evaluate returned
  probabilities                what the original's predict wrote per example
  write_eval_summaries         the eval metrics for TensorBoard
  MODEL_KEYS                   the run_config.json keys that, beside the encoder's
                               (run_config.check), fix a classifier

What the entry points share (base encoder, strategy, model, weights,
run_config.json) is in runtime/startup.py, the run's order in runtime/task_run.py,
their flags in cli/. `is_regression` is always the task processor's
(classification/processors.py): no function here decides it from a task name.
"""

import os
from typing import Dict, Mapping, Optional, Protocol

import numpy as np
import tensorflow as tf

from adapter_bert.classification import features as classifier_features
from adapter_bert.classification import metrics as classifier_metrics
from adapter_bert.classification import processors
from adapter_bert import errors
from adapter_bert.model import modeling
from adapter_bert.runtime import prediction
from adapter_bert.runtime import records
from adapter_bert.runtime import startup

# Keys of run_config.json that fix the head's variables and the meaning of its
# outputs: a checkpoint in output_dir is only usable if they match.
MODEL_KEYS = ("num_labels", "label_list")


class ClassifierOverTasks(Protocol):
  """A classifier built over other tasks' weights (fusion/fused_tasks.Fusion): what
  `set_up` needs of it. A protocol, so that this pipeline imports no command
  built on it (the layer rule in pyproject.toml)."""

  def make_model(self, config: modeling.BertConfig,
                 num_labels: int) -> modeling.BertClassifier: ...

  def metadata(self) -> dict:
    """What its adapter file and run_config.json record of those tasks."""


def make_processor(task_name: str, data_dir: str,
                   tsv_options: Mapping[str, object]) -> processors.DataProcessor:
  """The task's processor; `tsv_options` are the tsv task's flags that were given."""
  name = processors.canonical_task_name(task_name)
  if name == "tsv":
    return processors.get_processor(name, data_dir=data_dir, **tsv_options)
  if tsv_options:
    raise errors.UserError(
        f"--{', --'.join(sorted(tsv_options))} apply to --task_name=tsv only, not "
        f"--task_name={task_name}")
  return processors.get_processor(task_name)


def check_data_dir(data_dir: str) -> None:
  if not tf.io.gfile.isdir(data_dir):
    raise errors.UserError(f"--data_dir={data_dir} is not a directory")


def read_examples(processor: processors.DataProcessor, data_dir: str, do_train: bool,
                  do_eval: bool, do_predict: bool) -> Dict[str, Optional[list]]:
  """Reads every split the run needs up front, so bad data fails before any output."""
  check_data_dir(data_dir)
  return {
      "train": processor.get_train_examples(data_dir) if do_train else None,
      "eval": processor.get_dev_examples(data_dir) if do_eval else None,
      "predict": processor.get_test_examples(data_dir) if do_predict else None,
  }


def set_up(options: startup.RunOptions, base, processor: processors.DataProcessor,
           task_name: str, num_train_examples: Optional[int],
           fusion: Optional[ClassifierOverTasks] = None) -> startup.Run:
  """startup.set_up for a classifier of the processor's labels (or a regression);
  with `fusion`, an AdapterFusion classifier over those fused tasks (fusion/)."""
  is_regression, label_list = processor.is_regression, processor.get_labels()
  # What adapters loaded from a file must have been trained for (a regression
  # head has no labels: None in older files, [] since).
  adapter_metadata = {"is_regression": is_regression}
  if not is_regression:
    adapter_metadata["labels"] = label_list
  if fusion is None:
    make_model = lambda bert, adapters: modeling.BertClassifier(
        bert, processor.num_labels(), adapters)
    fusion_keys = {}
  else:  # Its adapter config is the fused tasks' (options.model took it).
    make_model = lambda bert, adapters: fusion.make_model(bert, processor.num_labels())
    fusion_keys = fusion.metadata()
    adapter_metadata.update(fusion_keys)
  # A tsv task's columns: which text is read as what (a resume compares them).
  columns = {k: getattr(processor, k) for k in ("text_a_column", "text_b_column",
                                                "label_column") if hasattr(processor, k)}
  return startup.set_up(
      options, base, make_model, num_train_examples, adapter_metadata,
      MODEL_KEYS + tuple(fusion_keys), weights_flags=("--adapter_bank/--bank_task",),
      task_name=task_name, **columns,
      num_labels=processor.num_labels(), label_list=label_list, is_regression=is_regression,
      **fusion_keys)


def predict_record(strategy: tf.distribute.Strategy, model, options: startup.RunOptions,
                   record_file: str, batch_size: int,
                   is_regression: bool) -> Dict[str, np.ndarray]:
  """`prediction.predict` over a feature record of classifier_features, in record order,
  its batches as `options` make them (padding: records.read_batches; full batches
  on TPU). Packed, a batch is the rows that hold `batch_size` examples on
  average (measured on the record), one entry per example comes back all the same."""
  max_seq_length = options.max_seq_length
  if options.pack_sequences:
    batch_size, _ = records.packed_batch_rows(record_file, max_seq_length, batch_size,
                                              strategy.num_replicas_in_sync)
  dataset = classifier_features.make_dataset(record_file, max_seq_length, batch_size,
                                             is_training=False, drop_remainder=options.use_tpu,
                                             is_regression=is_regression,
                                             pad_to_multiple_of=options.pad_to_multiple_of,
                                             pack_sequences=options.pack_sequences)
  return prediction.predict(strategy, model, dataset, jit_compile=options.use_xla,
                            iterations_per_loop=options.iterations_per_loop)


def loss_fn(is_regression: bool):
  """(labels [B], logits [B, num_labels]) -> float32 per-example loss [B]; or
  [rows, K] of a packed batch's [rows, K] and [rows, K, num_labels]."""
  def classification(labels, logits):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)

  def regression(labels, logits):
    return tf.square(logits[..., 0] - tf.cast(labels, tf.float32))

  return regression if is_regression else classification


def per_example_loss(logits: np.ndarray, labels: np.ndarray, is_regression: bool) -> np.ndarray:
  """NumPy twin of `loss_fn`, float64 [N]."""
  logits = np.asarray(logits, np.float64)
  if is_regression:
    return (logits[:, 0] - np.asarray(labels, np.float64)) ** 2
  import scipy.special  # pylint: disable=g-import-not-at-top,import-outside-toplevel  # ~15 MiB: on use.
  log_probs = scipy.special.log_softmax(logits, axis=-1)
  return -log_probs[np.arange(len(labels)), np.asarray(labels, np.int64)]


def eval_results(task_name: str, outputs: Mapping[str, np.ndarray], batch_size: int,
                 global_step: int, is_regression: bool) -> Dict[str, object]:
  """The keys of the original's eval_results.txt for `prediction.predict` outputs.

  eval_* come from classifier_metrics (real examples only). "loss" is what
  Estimator.evaluate reported: the mean over eval batches of each batch's mean
  loss, padding included (the original's total_loss did not weight examples).
  `is_regression` is the processor's; it picks the loss and the metrics.
  """
  logits, labels = outputs["logits"], outputs["labels"]
  results = dict(classifier_metrics.compute_metrics(
      task_name, labels, logits if not is_regression else logits[:, 0],
      outputs["is_real_example"], is_regression=is_regression))
  losses = per_example_loss(logits, labels, is_regression)
  batch_means = [losses[i:i + batch_size].mean() for i in range(0, len(losses), batch_size)]
  results["loss"] = np.float32(np.mean(batch_means))
  results["global_step"] = int(global_step)
  return results


def probabilities(logits: np.ndarray, is_regression: bool) -> np.ndarray:
  """Class probabilities [N, num_labels], or scores [N] for regression."""
  if is_regression:
    return np.asarray(logits)[:, 0]
  import scipy.special  # pylint: disable=g-import-not-at-top,import-outside-toplevel  # ~15 MiB: on use.
  return scipy.special.softmax(np.asarray(logits, np.float64), axis=-1).astype(np.float32)


def write_eval_predictions(directory: str, outputs: Mapping[str, np.ndarray],
                           is_regression: bool) -> None:
  """--eval_predictions: each dev example's probabilities (or score) in
  test_results.tsv's format and the dev set's order, as directory/eval_predictions.tsv."""
  classifier_metrics.write_test_results(
      os.path.join(directory, classifier_metrics.EVAL_PREDICTIONS_FILE),
      probabilities(outputs["logits"], is_regression), outputs["is_real_example"])


def write_eval_summaries(log_dir: str, results: Mapping[str, object], step: int) -> None:
  """TensorBoard scalars of the eval metrics, as Estimator wrote to model_dir/eval."""
  writer = tf.summary.create_file_writer(log_dir)
  with writer.as_default(step=step):
    for key, value in sorted(results.items()):
      if key != "global_step":
        tf.summary.scalar(key, float(value))
  writer.flush()
  writer.close()
