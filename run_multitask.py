r"""Several classification tasks at once on one frozen BERT: HyperFormer++ or shared adapters.

run_classifier.py's flags, with the task flags as lists (task i is
--task_name[i] on --data_dir[i]), plus the multi-task ones:

  python run_multitask.py --multitask_adapters=hyperformer \
    --task_name=tsv,tsv,tsv,tsv \
    --data_dir=data/wordnet/wordnet_lexname,data/wordnet/wordnet_pos,... \
    --text_a_column=sentence,sentence,gloss,word_a \
    --text_b_column=,,example,word_b \
    --do_train --do_eval --vocab_file=... --bert_config_file=... \
    --init_checkpoint=... --adapter_size=64 --learning_rate=1e-3 \
    --num_train_epochs=1 --output_dir=/tmp/multitask

--multitask_adapters=hyperformer: one hypernetwork generates every task's adapters
(Mahabadi et al., ACL 2021, HyperFormer++; multitask/hypernetwork.py); the
encoder stays frozen (--train_mode=head, the default; layer_norm also trains
BERT's LayerNorms, as the authors' --unfreeze_layer_norms).
--multitask_adapters=shared: one set of Houlsby adapters for all tasks
(--train_mode=adapters: they, the LayerNorms and the heads train).
Each task has its own head either way. Every training batch is one task's,
task t drawn with probability proportional to n_t^(1/--sampling_temperature);
an epoch is the sum of the tasks' training examples.

Files in output_dir: run_config.json, model.ckpt-STEP.* (trained variables
only), adapter_model/ (them alone: the hypernetwork or the shared adapters,
the task embeddings and the heads), eval_results.txt (every task's metrics,
prefixed with its name); per task, TASK/{train,eval,predict}.tf_record,
TASK/eval_results.txt, TASK/test_results.tsv, TASK/eval (TensorBoard) and
with --eval_predictions TASK/eval_predictions.tsv.
`python -m adapter_bert.serving.export --multitask_run=OUTPUT_DIR` serves the tasks from
raw text.
"""

import os
import sys

# First, before anything imports TensorFlow: a TPU VM's runtime, then the frameworks.
from adapter_bert.cli import launch  # pylint: disable=g-bad-import-order
launch.start(sys.argv if __name__ == "__main__" else None)

from absl import app
from absl import flags
from absl import logging
import tensorflow as tf

from adapter_bert.model import adapter_layers
from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.classification import features as classifier_features
from adapter_bert.classification import metrics as classifier_metrics
from adapter_bert.classification import task as classifier_task
from adapter_bert.cli import flag_checks
from adapter_bert.cli import flags as cli_flags
from adapter_bert.cli import options as cli_options
from adapter_bert.cli import path_flags
from adapter_bert.cli import renamed_flags
from adapter_bert import errors
from adapter_bert.multitask import accounting
from adapter_bert.multitask import model as multitask_model
from adapter_bert.multitask import sampling
from adapter_bert.multitask import tasks as multitask_tasks
from adapter_bert.multitask.hypernetwork import HyperFormerConfig
from adapter_bert.runtime import model_setup
from adapter_bert.runtime import prediction
from adapter_bert.runtime import records
from adapter_bert.runtime import startup
from adapter_bert.storage import path_checks
from adapter_bert import tokenization

# What trains, per --multitask_adapters: the default first.
TRAIN_MODES = {"hyperformer": ("head", "layer_norm"), "shared": ("adapters",)}

# run_config.json keys that fix the model's variables beside the encoder's.
MODEL_KEYS = ("multitask_adapters", "hyperformer_config", "tasks")


def define_flags(flag_values=flags.FLAGS):
  fv = dict(flag_values=flag_values)
  flags.DEFINE_list("task_name", None, "The tasks, a comma list: cola, sst-2, mrpc, sts-b, "
                    "qqp, mnli, qnli, rte, wnli, xnli or tsv (any case).", **fv)
  flags.DEFINE_list("data_dir", None, "Each task's data directory, a comma list in "
                    "--task_name order.", **fv)
  # --adapter_size against --train_mode is checked in model_options: with
  # HyperFormer++ it is the size of the generated adapters.
  cli_flags.define_model_and_run_flags(flag_values, check_adapter_size=False)
  cli_flags.define_eval_predictions_flag(flag_values)  # TASK/eval_predictions.tsv
  cli_flags.define_packing_flag(flag_values)
  flags.DEFINE_list("text_a_column", ["sentence"], "tsv tasks: header name of the first "
                    "text, one for all tsv tasks or one each.", **fv)
  flags.DEFINE_list("text_b_column", None, "tsv tasks: header name of the second text, one "
                    "for all or one each (an empty entry: none).", **fv)
  flags.DEFINE_list("label_column", ["label"], "tsv tasks: header name of the label, one for "
                    "all or one each.", **fv)
  flags.DEFINE_enum("multitask_adapters", "hyperformer", list(multitask_model.ADAPTER_TYPES),
                    "How the tasks get their adapters: hyperformer, a hypernetwork generates "
                    "each task's (HyperFormer++); shared, one set for all tasks. Either way "
                    "they are Houlsby adapters (--adapter_design=houlsby).", **fv)
  renamed_flags.define_renamed("adapter_type", "multitask_adapters", flag_values)
  flags.DEFINE_float("sampling_temperature", 10.0, "A batch comes from task t with "
                     "probability proportional to n_t^(1/T) (1: in proportion to the data; "
                     "larger: closer to uniform; the paper: 10).", **fv)
  flags.DEFINE_integer("task_embedding_dim", 64, "HyperFormer++: width of the task, "
                       "layer and position embeddings.", **fv)
  flags.DEFINE_integer("projector_hidden_dim", 128, "HyperFormer++: hidden width of the "
                       "task projector.", **fv)
  flags.DEFINE_integer("projected_dim", 64, "HyperFormer++: width of the projected task "
                       "embedding that the generators read.", **fv)
  flags.DEFINE_float("generator_init_stddev", 1e-2, "HyperFormer++: std of the task "
                     "projector's and the generators' initial kernels (the authors': 0.01).",
                     **fv)
  flags.DEFINE_float("task_embedding_init_stddev", 1.0, "HyperFormer++: std of the initial "
                     "task embeddings (the authors': 1).", **fv)
  check = flag_checks.check_flag
  for name in ("task_name", "data_dir", "output_dir"):
    flags.mark_flag_as_required(name, flag_values=flag_values)
    check(flag_values, name, lambda v: bool(v) and all(v) if isinstance(v, list) else bool(v),
          "given, no empty entry")
  check(flag_values, "sampling_temperature", *flag_checks.POSITIVE)
  for name in ("task_embedding_dim", "projector_hidden_dim", "projected_dim"):
    check(flag_values, name, *flag_checks.POSITIVE_INT)
  for name in ("generator_init_stddev", "task_embedding_init_stddev"):
    check(flag_values, name, *flag_checks.POSITIVE)
  cli_flags.check_model_and_run_flags(flag_values)


def take_recorded_settings(F) -> None:
  """With --adapter_checkpoint, the model flags left unset take the values its file
  records (--multitask_adapters, HyperFormer++'s widths, the shared adapters' config), as
  run_classifier.py's do (cli/options); a flag given with another value is refused.

  The flags are set in place: the model flags are read from F throughout main.
  """
  if not F.adapter_checkpoint:
    return
  header = adapter_weights.read_adapter_header(F.adapter_checkpoint)
  metadata = header.get("metadata", {})
  recorded = {k: metadata[k] for k in ("multitask_adapters",) if k in metadata}
  hyper = metadata.get("hyperformer_config")
  if hyper:
    recorded.update((name, hyper[name]) for name in HYPERFORMER_FLAGS if name in hyper)
  elif recorded.get("multitask_adapters") == "shared":
    config = AdapterConfig.from_dict(header["adapter_config"])
    recorded.update((flag, getattr(config, key))
                    for key, flag in cli_options.ADAPTER_CONFIG_FLAGS.items())
  given = {name for name in recorded if flag_checks.flag_given(F[name])}
  for name, value in cli_options.take_recorded(
      F.adapter_checkpoint, recorded, {n: F[n].value for n in recorded}, given).items():
    F[name].value = value


# HyperFormer++'s flags, named as its config's fields.
HYPERFORMER_FLAGS = ("adapter_size", "task_embedding_dim", "projector_hidden_dim",
                     "projected_dim", "generator_init_stddev", "task_embedding_init_stddev")


def model_options(F) -> model_setup.ModelOptions:
  """The run's ModelOptions; errors.UserError for a train mode --multitask_adapters refuses."""
  allowed = TRAIN_MODES[F.multitask_adapters]
  train_mode = F.train_mode or allowed[0]
  if train_mode not in allowed:
    named = errors.flags_named(train_mode=train_mode, multitask_adapters=F.multitask_adapters)
    raise errors.UserError(
        f"{named}: must be {' or '.join(allowed)}: "
        + ("the hypernetwork makes the adapters, and the encoder stays frozen"
           if F.multitask_adapters == "hyperformer" else "the shared adapters train"))
  if F.multitask_adapters == "hyperformer" and F.adapter_placement not in (None, "both"):
    raise errors.UserError(f"{errors.flags_named(adapter_placement=F.adapter_placement)}"
                           ": HyperFormer++ puts its adapters after both sub-layers")
  if not adapter_layers.get_design(F.adapter_design).fusable:
    raise errors.UserError(f"{errors.flags_named(adapter_design=F.adapter_design)}: "
                           "run_multitask.py trains adapters of design "
                           + " or ".join(adapter_layers.names_with("fusable")))
  # HyperFormer++'s --adapter_size is the generated adapters' (hyperformer_config).
  shared = F.multitask_adapters == "shared"
  return model_setup.ModelOptions(
      adapter_size=F.adapter_size if shared else 0, adapter_init_scale=F.adapter_init_scale,
      adapter_placement=F.adapter_placement, train_mode=train_mode,
      adapter_design=F.adapter_design if shared else adapter_layers.DEFAULT_DESIGN,
      init_checkpoint=F.init_checkpoint, bert_hub_module_handle=F.bert_hub_module_handle,
      adapter_checkpoint=F.adapter_checkpoint, mixed_precision=F.mixed_precision)


def hyperformer_config(F):
  if F.multitask_adapters != "hyperformer":
    return None
  return HyperFormerConfig(adapter_size=F.adapter_size,
                           task_embedding_dim=F.task_embedding_dim,
                           projector_hidden_dim=F.projector_hidden_dim,
                           projected_dim=F.projected_dim,
                           generator_init_stddev=F.generator_init_stddev,
                           task_embedding_init_stddev=F.task_embedding_init_stddev)


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


def train(run: startup.Run, tasks, heads, examples, tokenizer, sampling_temperature,
          model_facts) -> None:
  """Trains on batches of the tasks, drawn by sampling.task_probabilities."""
  options = run.options
  probabilities = sampling.task_probabilities(
      [len(examples[t.name]["train"]) for t in tasks], sampling_temperature)
  logging.info("***** Running training *****")
  for task, p in zip(tasks, probabilities):
    logging.info("  Task %s: %d examples, sampled with probability %.4f", task.name,
                 len(examples[task.name]["train"]), p)
  logging.info("  Batch size = %d", options.train_batch_size)
  record_files = train_records(options, tasks, examples, tokenizer)
  # Packed: one number of rows a batch for every task, measured on all their
  # records (one static shape); a batch of a task of shorter texts holds more
  # examples, --train_batch_size of them on average over the tasks.
  rows = startup.pack_training(run, record_files) if options.pack_sequences else None
  logging.info("  Num steps = %d", run.settings.num_train_steps)
  dataset = train_dataset(options, tasks, examples, tokenizer, probabilities,
                          rows_per_batch=rows, record_files=record_files)
  startup.train(run, multitask_model.loss_fn(heads), dataset, model_facts)


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


def _outputs(run: startup.Run, task, index, head, split, examples, tokenizer, batch_size):
  """The model's outputs for one task's split, its own classes only."""
  options = run.options
  dataset = task_dataset(options, task, index, split, examples, tokenizer, batch_size,
                         run.strategy.num_replicas_in_sync)
  outputs = prediction.predict(run.strategy, run.model, dataset, jit_compile=options.use_xla,
                               iterations_per_loop=options.iterations_per_loop)
  # The task's own classes; labels back to the task's type.
  outputs["logits"] = outputs["logits"][:, :head.num_outputs]
  if not task.is_regression:
    outputs["labels"] = outputs["labels"].astype("int64")
  return outputs


def evaluate(run: startup.Run, tasks, heads, examples, tokenizer, batch_size,
             write_predictions: bool = False) -> None:
  """Each task's eval_results.txt and summaries, and every task's in output_dir's;
  with `write_predictions` also each task's eval_predictions.tsv (as
  run_classifier.py's, in the task's directory)."""
  logging.info("***** Running evaluation *****")
  output_dir, summary = run.options.output_dir, {}
  for index, task in enumerate(tasks):
    logging.info("  Task %s", task.name)
    outputs = _outputs(run, task, index, heads[index], "eval", examples[task.name]["eval"],
                       tokenizer, batch_size)
    results = classifier_task.eval_results(task.task_name, outputs, batch_size,
                                           run.global_step, task.is_regression)
    task_dir = os.path.join(output_dir, task.name)
    classifier_metrics.write_eval_results(os.path.join(task_dir, "eval_results.txt"),
                                          results, run.checkpoint_path)
    classifier_task.write_eval_summaries(os.path.join(task_dir, "eval"), results,
                                         run.global_step)
    if write_predictions:
      classifier_task.write_eval_predictions(task_dir, outputs, task.is_regression)
    summary.update((f"{task.name}/{k}", v) for k, v in results.items()
                   if k != "global_step")
  summary["global_step"] = run.global_step
  classifier_metrics.write_eval_results(os.path.join(output_dir, "eval_results.txt"),
                                        summary, run.checkpoint_path)


def predict(run: startup.Run, tasks, heads, examples, tokenizer, batch_size) -> None:
  """Each task's test_results.tsv."""
  logging.info("***** Running prediction*****")
  for index, task in enumerate(tasks):
    test_examples = examples[task.name]["predict"]
    outputs = _outputs(run, task, index, heads[index], "predict", test_examples, tokenizer,
                       batch_size)
    written = classifier_metrics.write_test_results(
        os.path.join(run.options.output_dir, task.name, "test_results.tsv"),
        classifier_task.probabilities(outputs["logits"], task.is_regression),
        outputs["is_real_example"])
    if written != len(test_examples):  # A bug, not a user mistake.
      raise RuntimeError(f"wrote {written} predictions for {len(test_examples)} "
                         f"{task.name} test examples")


def main(argv, flag_values=None):
  del argv
  F = flag_values or flags.FLAGS
  logging.set_verbosity(logging.INFO)

  # Start-up checks: each fails before anything is written.
  # The task flags' agreement first: a wrong count or name explains a missing --data_dir.
  tasks = multitask_tasks.tasks_from_flags(F.task_name, F.data_dir, F.text_a_column,
                                           F.text_b_column, F.label_column)
  path_flags.check_path_flags(F, dict(cli_flags.ENCODER_PATH_FLAGS,
                                      **cli_flags.ADAPTER_PATH_FLAGS,
                                      data_dir=path_checks.INPUT_DIR))
  for task in tasks:
    classifier_task.check_data_dir(task.data_dir)
  take_recorded_settings(F)
  options = cli_options.run_options(F, model=model_options(F))
  hyper_config = hyperformer_config(F)
  base = startup.read_base(options)
  examples = {t.name: classifier_task.read_examples(t.processor, t.data_dir, F.do_train,
                                                   F.do_eval, F.do_predict)
              for t in tasks}
  heads = [t.head() for t in tasks]
  tokenizer = tokenization.FullTokenizer(vocab_file=base.vocab_file,
                                         do_lower_case=F.do_lower_case)
  model_facts = dict(multitask_adapters=F.multitask_adapters,
                     hyperformer_config=hyper_config and hyper_config.to_dict(),
                     tasks=[h.to_dict() for h in heads])
  run = startup.set_up(
      options, base, lambda bert, adapters: multitask_model.MultiTaskClassifier(
          bert, heads, F.multitask_adapters, adapters, hyper_config),
      sum(len(examples[t.name]["train"]) for t in tasks) if F.do_train else None,
      adapter_metadata=model_facts, model_keys=MODEL_KEYS, **model_facts,
      task_names=[t.task_name for t in tasks], data_dirs=[t.data_dir for t in tasks],
      sampling_temperature=F.sampling_temperature)
  accounting.log_accounting(accounting.parameter_accounting(run.model))

  # From here on files are written.
  startup.write_run_config(run)
  if F.do_train:
    train(run, tasks, heads, examples, tokenizer, F.sampling_temperature, model_facts)
  if F.do_eval:
    evaluate(run, tasks, heads, examples, tokenizer, F.eval_batch_size, F.eval_predictions)
  if F.do_predict:
    predict(run, tasks, heads, examples, tokenizer, F.predict_batch_size)


if __name__ == "__main__":
  define_flags()
  app.run(errors.exit_on_user_error(main), flags_parser=flag_checks.parse_flags)
