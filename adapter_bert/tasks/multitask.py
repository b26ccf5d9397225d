"""run_multitask.py's task: several classification tasks at once on one frozen
encoder, HyperFormer++ or shared adapters (multitask/), a head per task.

  MultiTaskTask    read, set up, train, evaluate and predict: runtime/task_run.run
  train_dataset    the training batches, each one task's, drawn by task
  task_dataset     one task's eval or predict batches
"""

import os

from absl import logging
import tensorflow as tf

from adapter_bert.classification import features as classifier_features
from adapter_bert.classification import metrics as classifier_metrics
from adapter_bert.classification import task as classifier_task
from adapter_bert.multitask import accounting
from adapter_bert.multitask import model as multitask_model
from adapter_bert.multitask import sampling
from adapter_bert.multitask import tasks as multitask_tasks
from adapter_bert.runtime import model_setup
from adapter_bert.runtime import prediction
from adapter_bert.runtime import records
from adapter_bert.runtime import startup
from adapter_bert.tasks import configs
from adapter_bert import tokenization

# run_config.json keys that fix the model's variables beside the encoder's.
MODEL_KEYS = ("multitask_adapters", "hyperformer_config", "tasks")



def with_task_index(dataset: tf.data.Dataset, task_index: int) -> tf.data.Dataset:
  """(features, labels) batches of one task, "task_index" added, labels as float32
  (so that classification and regression tasks' batches share one structure).

  Packed, a task's examples are packed apart from the other tasks' (each task
  has its own records and dataset), so a row and a batch hold one task: the
  model keeps one task per batch (one hypernetwork pass a step) and the task
  ids follow the examples exactly, at no cost. "task_index" is then [rows, K],
  as every per-example feature."""
  def add(features, labels):
    index = tf.fill(tf.shape(labels), tf.constant(task_index, tf.int32))  # [B] or [B, K]
    return dict(features, task_index=index), tf.cast(labels, tf.float32)
  return dataset.map(add)


def _record(options: startup.RunOptions, task, split, examples, tokenizer, batch_size):
  """Writes the task's split as a feature record (padded on TPU); returns its path."""
  task_dir = os.path.join(options.output_dir, task.name)
  tf.io.gfile.makedirs(task_dir)
  if split != "train":
    examples = classifier_features.pad_examples_for_tpu(
        examples, batch_size if options.use_tpu else 1)
  path = os.path.join(task_dir, f"{split}.tf_record")
  classifier_features.ensure_feature_record(
      examples, task.processor.get_labels(), options.max_seq_length, tokenizer, path)
  return path


def train_records(options: startup.RunOptions, tasks, examples, tokenizer) -> list:
  """Each task's training record, written (or reused), in task order."""
  return [_record(options, task, "train", examples[task.name]["train"], tokenizer,
                  options.train_batch_size) for task in tasks]


def train_dataset(options: startup.RunOptions, tasks, examples, tokenizer,
                  probabilities, rows_per_batch=None, record_files=None) -> tf.data.Dataset:
  """The training batches: each task's records batched to the global batch size,
  then whole batches drawn by task (sampling.sample_batches). A global batch
  is one task's before a strategy splits it, so every replica's share of it
  holds that one task (tests/test_tpu_compile.py). With --pack_sequences,
  batches of `rows_per_batch` packed rows (startup.pack_training)."""
  seed = model_setup.shuffle_seed(options.seed)
  if options.pack_sequences and not rows_per_batch:
    raise ValueError("packed batches need their rows_per_batch (startup.pack_training)")
  batch_size = rows_per_batch if options.pack_sequences else options.train_batch_size
  record_files = record_files or train_records(options, tasks, examples, tokenizer)
  datasets = [
      with_task_index(classifier_features.make_dataset(
          record_file, options.max_seq_length, batch_size, is_training=True,
          drop_remainder=True, is_regression=task.is_regression, seed=seed + i,
          pad_to_multiple_of=options.pad_to_multiple_of,
          group_by_length=options.group_by_length,
          pack_sequences=options.pack_sequences), i)
      for i, (task, record_file) in enumerate(zip(tasks, record_files))]
  return sampling.sample_batches(datasets, probabilities, seed=seed)


def task_dataset(options: startup.RunOptions, task, index, split, examples, tokenizer,
                 batch_size, num_replicas: int = 1) -> tf.data.Dataset:
  """One task's eval or predict batches, its last batch filled on TPU (is_real_example 0).
  Packed, the rows that hold `batch_size` examples on average (the last batch
  filled with empty rows), as run_classifier.py's (classifier_task.predict_record)."""
  record_file = _record(options, task, split, examples, tokenizer, batch_size)
  if options.pack_sequences:
    batch_size, _ = records.packed_batch_rows(record_file, options.max_seq_length,
                                              batch_size, num_replicas)
  return with_task_index(classifier_features.make_dataset(
      record_file, options.max_seq_length, batch_size, is_training=False,
      drop_remainder=options.use_tpu, is_regression=task.is_regression,
      pad_to_multiple_of=options.pad_to_multiple_of,
      pack_sequences=options.pack_sequences), index)


class MultiTaskTask:
  """run_multitask.py's task, of its RunConfig (task: configs.MultiTaskConfig: the
  tasks, multitask/tasks.py, in --task_name order, and the model)."""

  def __init__(self, config: configs.RunConfig):
    self.config, self.settings = config, config.task
    self.tasks = list(self.settings.tasks)

  @property
  def options(self) -> startup.RunOptions:
    return self.config.options

  def read_inputs(self, base) -> None:
    options, settings = self.options, self.settings
    self.examples = {t.name: classifier_task.read_examples(t.processor, t.data_dir,
                                                          options.do_train, options.do_eval,
                                                          options.do_predict)
                     for t in self.tasks}
    self.heads = [t.head() for t in self.tasks]
    self.tokenizer = tokenization.FullTokenizer(vocab_file=base.vocab_file,
                                                do_lower_case=options.do_lower_case)
    hyper = settings.hyper_config
    self.model_facts = dict(multitask_adapters=settings.multitask_adapters,
                            hyperformer_config=hyper and hyper.to_dict(),
                            tasks=[h.to_dict() for h in self.heads])

  def set_up(self, base) -> startup.Run:
    options, settings, tasks = self.options, self.settings, self.tasks
    run = startup.set_up(
        options, base, lambda bert, adapters: multitask_model.MultiTaskClassifier(
            bert, self.heads, settings.multitask_adapters, adapters, settings.hyper_config),
        sum(len(self.examples[t.name]["train"]) for t in tasks) if options.do_train else None,
        adapter_metadata=self.model_facts, model_keys=MODEL_KEYS, **self.model_facts,
        task_names=[t.task_name for t in tasks], data_dirs=[t.data_dir for t in tasks],
        sampling_temperature=settings.sampling_temperature)
    accounting.log_accounting(accounting.parameter_accounting(run.model))
    return run

  def train_inputs(self, run: startup.Run) -> tf.data.Dataset:
    """Each task's training record, written (or reused), and batches of the tasks,
    drawn by sampling.task_probabilities."""
    options, tasks, examples = run.options, self.tasks, self.examples
    self.probabilities = sampling.task_probabilities(
        [len(examples[t.name]["train"]) for t in tasks], self.settings.sampling_temperature)
    record_files = train_records(options, tasks, examples, self.tokenizer)
    # Packed: one number of rows a batch for every task, measured on all their
    # records (one static shape); a batch of a task of shorter texts holds more
    # examples, --train_batch_size of them on average over the tasks.
    rows = startup.pack_training(run, record_files) if options.pack_sequences else None
    return train_dataset(options, tasks, examples, self.tokenizer, self.probabilities,
                         rows_per_batch=rows, record_files=record_files)

  def train(self, run: startup.Run, dataset: tf.data.Dataset) -> None:
    """Trains on the batches of train_inputs."""
    logging.info("***** Running training *****")
    for task, p in zip(self.tasks, self.probabilities):
      logging.info("  Task %s: %d examples, sampled with probability %.4f", task.name,
                   len(self.examples[task.name]["train"]), p)
    logging.info("  Batch size = %d", run.options.train_batch_size)
    logging.info("  Num steps = %d", run.settings.num_train_steps)
    startup.train(run, multitask_model.loss_fn(self.heads), dataset, self.model_facts)

  def evaluate(self, run: startup.Run) -> None:
    """Each task's eval_results.txt and summaries, and every task's in output_dir's;
    with --eval_predictions also each task's eval_predictions.tsv (as
    run_classifier.py's, in the task's directory)."""
    logging.info("***** Running evaluation *****")
    output_dir, batch_size, summary = run.options.output_dir, run.options.eval_batch_size, {}
    for index, task in enumerate(self.tasks):
      logging.info("  Task %s", task.name)
      outputs = self._outputs(run, index, "eval", batch_size)
      results = classifier_task.eval_results(task.task_name, outputs, batch_size,
                                             run.global_step, task.is_regression)
      task_dir = os.path.join(output_dir, task.name)
      classifier_metrics.write_eval_results(os.path.join(task_dir, "eval_results.txt"),
                                            results, run.checkpoint_path)
      classifier_task.write_eval_summaries(os.path.join(task_dir, "eval"), results,
                                           run.global_step)
      if self.settings.eval_predictions:
        classifier_task.write_eval_predictions(task_dir, outputs, task.is_regression)
      summary.update((f"{task.name}/{k}", v) for k, v in results.items()
                     if k != "global_step")
    summary["global_step"] = run.global_step
    classifier_metrics.write_eval_results(os.path.join(output_dir, "eval_results.txt"),
                                          summary, run.checkpoint_path)

  def predict(self, run: startup.Run) -> None:
    """Each task's test_results.tsv."""
    logging.info("***** Running prediction*****")
    for index, task in enumerate(self.tasks):
      test_examples = self.examples[task.name]["predict"]
      outputs = self._outputs(run, index, "predict", run.options.predict_batch_size)
      written = classifier_metrics.write_test_results(
          os.path.join(run.options.output_dir, task.name, "test_results.tsv"),
          classifier_task.probabilities(outputs["logits"], task.is_regression),
          outputs["is_real_example"])
      if written != len(test_examples):  # A bug, not a user mistake.
        raise RuntimeError(f"wrote {written} predictions for {len(test_examples)} "
                           f"{task.name} test examples")

  def _outputs(self, run: startup.Run, index: int, split: str, batch_size: int):
    """The model's outputs for one task's split, its own classes only."""
    options, task = run.options, self.tasks[index]
    dataset = task_dataset(options, task, index, split, self.examples[task.name][split],
                           self.tokenizer, batch_size, run.strategy.num_replicas_in_sync)
    outputs = prediction.predict(run.strategy, run.model, dataset,
                                 jit_compile=options.use_xla,
                                 iterations_per_loop=options.iterations_per_loop)
    # The task's own classes; labels back to the task's type.
    outputs["logits"] = outputs["logits"][:, :self.heads[index].num_outputs]
    if not task.is_regression:
      outputs["labels"] = outputs["labels"].astype("int64")
    return outputs
