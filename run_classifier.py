r"""BERT with adapters for sequence (pair) classification: GLUE tasks and your own TSV data.

The command line of google-research/bert `run_classifier.py` (same flags, same
defaults, same output files and log lines), plus adapter-bert's settings:

  python run_classifier.py --task_name=MRPC --do_train --do_eval \
    --data_dir=$GLUE_DIR/MRPC --vocab_file=$BERT_BASE_DIR/vocab.txt \
    --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --max_seq_length=128 \
    --train_batch_size=32 --learning_rate=3e-4 --num_train_epochs=5 \
    --adapter_size=64 --output_dir=/tmp/mrpc_output/

Files in output_dir: run_config.json (bert, adapter and run settings),
{train,eval,predict}.tf_record (+ .meta.json), model.ckpt-STEP.*, checkpoint,
events for TensorBoard (training in output_dir, eval in output_dir/eval),
adapter_model/ (the task's adapter-only weights, after training),
eval_results.txt and test_results.tsv. With --adapter_bank the adapter-only
weights also go to (or, without --do_train, come from) an adapter bank:
BANK/tasks/<--bank_task> (bank/adapter_bank.py).
"""

import dataclasses
import os

from absl import app
from absl import flags
from absl import logging
import tensorflow as tf

import adapter_layers
from bank import adapter_bank
from classification import features as classifier_features
from classification import metrics as classifier_metrics
from classification import processors
from classification import task as classifier_task
import errors
from errors import flag_checks
import modeling
from runtime import distribution
from runtime import loop
from runtime import model_setup
from runtime import run_config
import tokenization

WEIGHT_DECAY_RATE = 0.01  # Fixed in the original; adapters have their own flag.


def check_training_flags(flag_values, positive_ints):
  """The checks both scripts share: the original's training and TPU flags."""
  check, fc = flag_checks.check_flag, flag_checks
  for name in positive_ints + ("save_checkpoints_steps", "iterations_per_loop",
                               "num_tpu_cores"):
    check(flag_values, name, *fc.POSITIVE_INT)
  check(flag_values, "learning_rate", *fc.POSITIVE)
  check(flag_values, "num_train_epochs", *fc.POSITIVE)
  check(flag_values, "warmup_proportion", *fc.PROPORTION)


def define_adapter_flags(flag_values=flags.FLAGS, check_adapter_size=True):
  """The flags adapter-bert adds to the original scripts, plus this project's.

  run_squad.py defines the same ones by calling this (as the original
  run_classifier_with_tfhub.py built on run_classifier.py's flags).

  Args:
    check_adapter_size: check --adapter_size against --train_mode and
      --adapter_placement (False: the caller does; in run_multitask.py it
      can also be the size of generated adapters).
  """
  fv = dict(flag_values=flag_values)
  flags.DEFINE_integer("adapter_size", model_setup.DEFAULT_ADAPTER_SIZE, "Bottleneck size "
                       "of the adapters; 0 = no adapters. Left out with a --train_mode "
                       "other than adapters: 0.", **fv)
  flags.DEFINE_float("adapter_init_scale", 1e-3, "Stddev of the adapters' initial weights "
                     "(truncated normal).", **fv)
  flags.DEFINE_string("adapter_placement", "both", "Where each layer's adapters go: both "
                      "(after the attention and after the feed-forward sub-layer, as the "
                      "paper), attention or feed_forward (after that sub-layer only).", **fv)
  flags.DEFINE_float("adapter_weight_decay_rate", 0.01, "Weight decay of adapter "
                     "variables (other weights: 0.01, as the original).", **fv)
  flags.DEFINE_string("train_mode", None, "What trains: adapters | full | layer_norm | head "
                      "| top_layers:K. Default: adapters, or full with --adapter_size=0.",
                      **fv)
  flags.DEFINE_string("adapter_checkpoint", None, "Adapter-only weights (a run's "
                      "output_dir/adapter_model) loaded on top of the base weights.", **fv)
  flags.DEFINE_string("bert_hub_module_handle", None, "Start from this TF Hub BERT encoder "
                      "(TF2 SavedModel: URL, local or gs:// dir) instead of "
                      "--init_checkpoint.", **fv)
  flags.DEFINE_integer("seed", None, "Random seed of initialization, dropout and shuffling "
                       "(None: not seeded, as the original).", **fv)
  flags.DEFINE_bool("use_xla", False, "Compile the train/eval/predict steps with XLA "
                    "(jit_compile).", **fv)
  flags.DEFINE_enum("mixed_precision", "none", ["none", "bfloat16", "float16"],
                    "Compute in 16 bits, keep weights in float32: bfloat16 (TPU, recent "
                    "CPUs) or float16 with dynamic loss scaling (GPU).", **fv)
  check, fc = flag_checks.check_flag, flag_checks
  check(flag_values, "adapter_size", lambda v: v >= 0, model_setup.ADAPTER_SIZES_ALLOWED)
  check(flag_values, "adapter_init_scale", *fc.POSITIVE)
  check(flag_values, "adapter_placement", lambda v: v in adapter_layers.PLACEMENTS,
        model_setup.PLACEMENTS_ALLOWED)
  check(flag_values, "adapter_weight_decay_rate", *fc.NON_NEGATIVE)
  check(flag_values, "train_mode", model_setup.train_mode_ok,
        model_setup.TRAIN_MODES_ALLOWED)
  # keras.utils.set_random_seed's range.
  check(flag_values, "seed", lambda v: 0 <= v < 2**32, "in [0, 2**32 - 1]")
  fc.check_flags_together(flag_values, ("init_checkpoint", "bert_hub_module_handle"),
                          model_setup.sources_conflict)
  if not check_adapter_size:
    return

  def adapters_problem(train_mode, adapter_size):
    # Adapters of the default size where the train mode does not train them
    # are dropped (ModelOptions); given explicitly, they are a contradiction.
    if (not model_setup.flag_given(flag_values["adapter_size"]) or adapter_size < 0
        or not model_setup.train_mode_ok(train_mode)):
      return None
    mode = model_setup.ModelOptions(adapter_size=adapter_size, train_mode=train_mode).mode()
    return model_setup.adapter_conflict(mode, adapter_size)
  fc.check_flags_together(flag_values, ("train_mode", "adapter_size"), adapters_problem)

  def placement_problem(placement, train_mode, adapter_size):
    if (placement not in adapter_layers.PLACEMENTS or adapter_size < 0
        or not model_setup.train_mode_ok(train_mode)):
      return None  # Reported by the flags' own checks.
    given = model_setup.flag_given(flag_values["adapter_size"])
    options = model_setup.ModelOptions(adapter_size=adapter_size if given else None,
                                       train_mode=train_mode)
    return model_setup.placement_conflict(placement, options.adapter_size)
  fc.check_flags_together(flag_values, ("adapter_placement", "train_mode", "adapter_size"),
                          placement_problem)


def define_flags(flag_values=flags.FLAGS):
  """Defines the flags; called by `__main__` (and by tests on their own FlagValues)
  rather than at import, so other scripts' same-named flags never clash."""
  fv = dict(flag_values=flag_values)
  # Required parameters.
  flags.DEFINE_string("data_dir", None, "The input data dir. Should contain the .tsv files "
                      "(or other data files) for the task.", **fv)
  flags.DEFINE_string("task_name", None, "The name of the task to train: cola, sst-2, mrpc, "
                      "sts-b, qqp, mnli, mnli-mm, qnli, rte, wnli, xnli, ax, or tsv.", **fv)
  define_model_and_run_flags(flag_values)
  # --task_name=tsv (your own data).
  flags.DEFINE_string("text_a_column", "sentence", "tsv task: header name of the first text.",
                      **fv)
  flags.DEFINE_string("text_b_column", None, "tsv task: header name of the second text, if "
                      "any.", **fv)
  flags.DEFINE_string("label_column", "label", "tsv task: header name of the label.", **fv)
  flags.DEFINE_list("labels", None, "tsv task: the labels in id order (comma list); default: "
                    "the sorted labels of train.tsv.", **fv)
  define_bank_flags(flag_values)
  check = flag_checks.check_flag
  for name in ("data_dir", "task_name", "output_dir"):
    flags.mark_flag_as_required(name, flag_values=flag_values)
    check(flag_values, name, bool, "given, not empty")
  check(flag_values, "labels", lambda v: v and len(set(v)) == len(v),
        "a comma list of distinct labels")
  check(flag_values, "task_name",
        lambda v: processors.canonical_task_name(v) in processors.PROCESSORS,
        "one of " + ", ".join(sorted(processors.PROCESSORS)) + " (any case)")
  check_model_and_run_flags(flag_values)


def define_model_and_run_flags(flag_values=flags.FLAGS, check_adapter_size=True):
  """The original's flags other than the task's (--task_name, --data_dir, tsv
  columns), with the adapter flags (define_adapter_flags): run_multitask.py
  shares them."""
  fv = dict(flag_values=flag_values)
  flags.DEFINE_string("bert_config_file", None, "The config json file corresponding to the "
                      "pre-trained BERT model. This specifies the model architecture. "
                      "Optional with --bert_hub_module_handle.", **fv)
  flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was "
                      "trained on. Optional with --bert_hub_module_handle.", **fv)
  flags.DEFINE_string("output_dir", None, "The output directory where the model "
                      "checkpoints will be written.", **fv)
  # Other parameters.
  flags.DEFINE_string("init_checkpoint", None, "Initial checkpoint (usually from a "
                      "pre-trained BERT model).", **fv)
  flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text. Should be "
                    "True for uncased models and False for cased models.", **fv)
  flags.DEFINE_integer("max_seq_length", 128, "The maximum total input sequence length after "
                       "WordPiece tokenization. Sequences longer than this will be truncated, "
                       "and sequences shorter than this will be padded.", **fv)
  flags.DEFINE_bool("do_train", False, "Whether to run training.", **fv)
  flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set.", **fv)
  flags.DEFINE_bool("do_predict", False, "Whether to run the model in inference mode on the "
                    "test set.", **fv)
  flags.DEFINE_integer("train_batch_size", 32, "Total batch size for training.", **fv)
  flags.DEFINE_integer("eval_batch_size", 8, "Total batch size for eval.", **fv)
  flags.DEFINE_integer("predict_batch_size", 8, "Total batch size for predict.", **fv)
  flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for Adam.", **fv)
  flags.DEFINE_float("num_train_epochs", 3.0, "Total number of training epochs to perform.",
                     **fv)
  flags.DEFINE_float("warmup_proportion", 0.1, "Proportion of training to perform linear "
                     "learning rate warmup for. E.g., 0.1 = 10% of training.", **fv)
  flags.DEFINE_integer("save_checkpoints_steps", 1000, "How often to save the model "
                       "checkpoint.", **fv)
  flags.DEFINE_integer("iterations_per_loop", 1000, "How many steps to make in each "
                       "compiled loop call.", **fv)
  flags.DEFINE_bool("use_tpu", False, "Whether to use TPU or GPU/CPU.", **fv)
  flags.DEFINE_string("tpu_name", None, "The Cloud TPU to use for training. This should be "
                      "either the name used when creating the Cloud TPU, or a "
                      "grpc://ip.address.of.tpu:8470 url.", **fv)
  flags.DEFINE_string("tpu_zone", None, "[Optional] GCE zone where the Cloud TPU is located "
                      "in.", **fv)
  flags.DEFINE_string("gcp_project", None, "[Optional] Project name for the Cloud "
                      "TPU-enabled project.", **fv)
  flags.DEFINE_string("master", None, "[Optional] TensorFlow master URL.", **fv)
  flags.DEFINE_integer("num_tpu_cores", 8, "Only used if `use_tpu` is True. Total number of "
                       "TPU cores to use (the TPU system reports its own count; a "
                       "different one is logged).", **fv)
  define_adapter_flags(flag_values, check_adapter_size)  # Adapters, what trains, hub, seed, XLA.


def check_model_and_run_flags(flag_values):
  """The checks of define_model_and_run_flags' flags that need several of them."""
  check = flag_checks.check_flag
  # [CLS] text [SEP] (text [SEP]): room for the special tokens at least.
  check(flag_values, "max_seq_length", lambda v: v >= 3, "at least 3")
  check_training_flags(flag_values, ("train_batch_size", "eval_batch_size",
                                     "predict_batch_size"))
  flag_checks.check_flags_together(
      flag_values, ("do_train", "do_eval", "do_predict"),
      lambda *actions: None if any(actions) else
      "at least one of --do_train, --do_eval or --do_predict must be given")


def define_bank_flags(flag_values):
  """--adapter_bank and --bank_task: many tasks' adapters over one base (bank/)."""
  fv = dict(flag_values=flag_values)
  flags.DEFINE_string("adapter_bank", None, "An adapter bank directory. With --do_train the "
                      "task's adapter-only weights are added to it as --bank_task (the bank "
                      "is created for this run's base if there is none); without, "
                      "--bank_task's weights are loaded, as --adapter_checkpoint="
                      "BANK/tasks/NAME would.", **fv)
  flags.DEFINE_string("bank_task", None, "The task's name in --adapter_bank. Default: "
                      "--task_name in lower case (mrpc, sst-2, ...); needed with "
                      "--task_name=tsv.", **fv)
  fc = flag_checks
  fc.check_flag(flag_values, "bank_task", adapter_bank.is_valid_task_name,
                adapter_bank.TASK_NAMES_ALLOWED)

  def name_problem(bank, bank_task, task_name):
    if not bank:
      return "--bank_task needs --adapter_bank" if bank_task else None
    if not bank_task and task_name and processors.canonical_task_name(task_name) == "tsv":
      return "--task_name=tsv needs --bank_task=NAME with --adapter_bank"
    return None
  fc.check_flags_together(flag_values, ("adapter_bank", "bank_task", "task_name"),
                          name_problem)

  def train_mode_problem(bank, do_train, train_mode, adapter_size):
    # A bank's fingerprint covers what these modes leave frozen (bank/adapter_bank.py).
    if (not (bank and do_train) or not model_setup.train_mode_ok(train_mode)
        or adapter_size < 0):
      return None
    given = model_setup.flag_given(flag_values["adapter_size"])
    mode = model_setup.ModelOptions(adapter_size=adapter_size if given else None,
                                    train_mode=train_mode).mode()
    if mode.name in adapter_bank.TRAIN_MODES:
      return None
    what = "freezes the LayerNorms" if mode.name == "head" else "trains encoder weights"
    return (f"--train_mode={mode} {what} that the tasks of a bank share; a bank holds "
            f"--train_mode={' or '.join(adapter_bank.TRAIN_MODES)} tasks")
  fc.check_flags_together(flag_values, ("adapter_bank", "do_train", "train_mode",
                                        "adapter_size"), train_mode_problem)
  fc.check_flags_together(
      flag_values, ("adapter_bank", "do_train", "adapter_checkpoint"),
      lambda bank, do_train, checkpoint: "without --do_train, --adapter_bank gives the "
      "adapters: leave --adapter_checkpoint out" if bank and checkpoint and not do_train
      else None)


_TSV_FLAGS = ("text_a_column", "text_b_column", "label_column", "labels")


def make_processor(task_name, data_dir, tsv_options):
  """The task's processor; `tsv_options` are the tsv task's flags that were given."""
  name = processors.canonical_task_name(task_name)
  if name == "tsv":
    return processors.get_processor(name, data_dir=data_dir, **tsv_options)
  if tsv_options:
    raise errors.UserError(
        f"--{', --'.join(sorted(tsv_options))} apply to --task_name=tsv only, not "
        f"--task_name={task_name}")
  return processors.get_processor(task_name)


def check_data_dir(data_dir):
  if not tf.io.gfile.isdir(data_dir):
    raise errors.UserError(f"--data_dir={data_dir} is not a directory")


def read_examples(processor, data_dir, do_train, do_eval, do_predict):
  """Reads every split the run needs up front, so bad data fails before any output."""
  check_data_dir(data_dir)
  return {
      "train": processor.get_train_examples(data_dir) if do_train else None,
      "eval": processor.get_dev_examples(data_dir) if do_eval else None,
      "predict": processor.get_test_examples(data_dir) if do_predict else None,
  }


def _check_bank(bank_dir, task, base, do_lower_case, do_train):
  """The bank of --adapter_bank (None if training creates it), checked against this run.

  The frozen weights are compared once loaded (main); the config and casing here.
  """
  bank = adapter_bank.find_bank(bank_dir) if do_train else adapter_bank.open_bank(bank_dir)
  if bank is not None:
    adapter_bank.check_base(bank_dir, bank, None, base.bert_config.to_dict(), do_lower_case,
                            "this run's base")
    if do_train and task in adapter_bank.task_names(bank_dir):
      logging.info("Adapter bank %s holds task %s: this run replaces it when it ends",
                   bank_dir, task)
  return bank


def run_model(strategy, model, record_file, seq_length, batch_size, drop_remainder,
              is_regression, jit_compile):
  dataset = classifier_features.make_dataset(record_file, seq_length, batch_size,
                                         is_training=False, drop_remainder=drop_remainder,
                                         is_regression=is_regression)
  return loop.predict(strategy, model, dataset, jit_compile=jit_compile)


def main(argv, flag_values=None):
  del argv
  F = flag_values or flags.FLAGS
  logging.set_verbosity(logging.INFO)
  model_setup.set_seed(F.seed)

  # Start-up checks: each fails before anything is written (the flags' own
  # values were checked when they were parsed; these need files or presence).
  processor = make_processor(F.task_name, F.data_dir,
                             {k: F[k].value for k in _TSV_FLAGS if F[k].present})
  check_data_dir(F.data_dir)
  options = model_setup.ModelOptions.from_flags(F)
  base = options.read_base(F.bert_config_file, F.vocab_file, F.do_lower_case,
                           F.max_seq_length)
  is_regression = processor.is_regression
  label_list = processor.get_labels()
  bank_task = F.bank_task or processors.canonical_task_name(F.task_name)
  bank = None
  if F.adapter_bank:
    bank = _check_bank(F.adapter_bank, bank_task, base, F.do_lower_case, F.do_train)
    if not F.do_train:
      options = dataclasses.replace(
          options, adapter_checkpoint=adapter_bank.task_checkpoint(F.adapter_bank, bank_task))
  examples = read_examples(processor, F.data_dir, F.do_train, F.do_eval, F.do_predict)
  tokenizer = tokenization.FullTokenizer(vocab_file=base.vocab_file,
                                         do_lower_case=F.do_lower_case)
  output_dir = F.output_dir
  settings = None
  if F.do_train:
    settings = loop.TrainSettings.for_epochs(
        len(examples["train"]), F.num_train_epochs, F.warmup_proportion,
        output_dir=output_dir, train_batch_size=F.train_batch_size,
        learning_rate=F.learning_rate,
        weight_decay_rate=WEIGHT_DECAY_RATE,
        adapter_weight_decay_rate=F.adapter_weight_decay_rate,
        save_checkpoints_steps=F.save_checkpoints_steps,
        iterations_per_loop=F.iterations_per_loop, jit_compile=F.use_xla)
  task_name = processors.canonical_task_name(F.task_name)
  config = run_config.build(
      options, base, settings, task_name=task_name, num_labels=processor.num_labels(),
      label_list=label_list, is_regression=is_regression, max_seq_length=F.max_seq_length,
      do_lower_case=F.do_lower_case, num_train_epochs=F.num_train_epochs,
      warmup_proportion=F.warmup_proportion, seed=F.seed, use_tpu=F.use_tpu)
  run_config.check(output_dir, config, also=classifier_task.MODEL_KEYS + (
      ("train_mode",) if F.do_train else ()))

  strategy = distribution.create_strategy(F.use_tpu, F.tpu_name, F.tpu_zone, F.gcp_project,
                                          F.master)
  if F.use_tpu and strategy.num_replicas_in_sync != F.num_tpu_cores:
    logging.warning("--num_tpu_cores=%d but the TPU has %d cores; using %d", F.num_tpu_cores,
                    strategy.num_replicas_in_sync, strategy.num_replicas_in_sync)
  # What adapters loaded from a file must have been trained for (a regression
  # head has no labels: None in older files, [] since).
  adapter_metadata = {"is_regression": is_regression}
  if not is_regression:
    adapter_metadata["labels"] = label_list
  model, global_step = model_setup.create_model(
      strategy, lambda bert, adapters: modeling.BertClassifier(
          bert, processor.num_labels(), adapters),
      options, base, output_dir, adapter_metadata=adapter_metadata)
  if F.adapter_bank and F.do_train:
    # The loaded base must be the bank's before hours of training, not after.
    fingerprint = adapter_bank.frozen_fingerprint(model.tf1_variable_map())
    if bank is not None:
      adapter_bank.check_base(F.adapter_bank, bank, fingerprint, base.bert_config.to_dict(),
                              F.do_lower_case, "this run's base")

  # From here on files are written.
  tf.io.gfile.makedirs(output_dir)
  run_config.write(output_dir, config, training_run=F.do_train)

  if F.do_train:
    train_file = os.path.join(output_dir, "train.tf_record")
    classifier_features.ensure_feature_record(examples["train"], label_list, F.max_seq_length,
                                          tokenizer, train_file)
    logging.info("***** Running training *****")
    logging.info("  Num examples = %d", len(examples["train"]))
    logging.info("  Batch size = %d", F.train_batch_size)
    logging.info("  Num steps = %d", settings.num_train_steps)
    dataset = classifier_features.make_dataset(
        train_file, F.max_seq_length, F.train_batch_size, is_training=True,
        drop_remainder=True, is_regression=is_regression,
        seed=model_setup.shuffle_seed(F.seed))
    global_step = loop.train(
        strategy, model, classifier_task.loss_fn(is_regression), dataset, settings,
        model_setup.base_reference(model, options, output_dir))["global_step"]
    saved = model_setup.save_adapter_model(model, options, output_dir, metadata=dict(
        task=task_name, labels=[] if is_regression else label_list,
        is_regression=is_regression, max_seq_length=F.max_seq_length,
        do_lower_case=F.do_lower_case, train_mode=config["train_mode"],
        global_step=global_step))
    if F.adapter_bank and strategy.extended.should_checkpoint:
      sources = model_setup.base_reference(model, options, output_dir) or {}
      adapter_bank.create_bank(F.adapter_bank, adapter_bank.BankBase.of_run(
          fingerprint, base.bert_config.to_dict(), sources.get("init_checkpoint"),
          sources.get("bert_hub_module_handle"), base.vocab_file, F.do_lower_case))
      adapter_bank.add_task(F.adapter_bank, bank_task, os.path.dirname(saved))

  def features(split, batch_size):
    """Writes the split's feature record (padded on TPU) and returns its path."""
    padded = classifier_features.pad_examples_for_tpu(examples[split],
                                                  batch_size if F.use_tpu else 1)
    logging.info("  Batch size = %d", batch_size)
    record = os.path.join(output_dir, f"{split}.tf_record")
    classifier_features.ensure_feature_record(padded, label_list, F.max_seq_length, tokenizer,
                                          record)
    return record

  if F.do_eval:
    logging.info("***** Running evaluation *****")
    record = features("eval", F.eval_batch_size)
    outputs = run_model(strategy, model, record, F.max_seq_length, F.eval_batch_size,
                        F.use_tpu, is_regression, F.use_xla)
    results = classifier_task.eval_results(F.task_name, outputs, F.eval_batch_size,
                                           global_step, is_regression)
    classifier_metrics.write_eval_results(os.path.join(output_dir, "eval_results.txt"),
                                          results)
    classifier_task.write_eval_summaries(os.path.join(output_dir, "eval"), results,
                                         global_step)

  if F.do_predict:
    logging.info("***** Running prediction*****")
    record = features("predict", F.predict_batch_size)
    outputs = run_model(strategy, model, record, F.max_seq_length, F.predict_batch_size,
                        F.use_tpu, is_regression, F.use_xla)
    written = classifier_metrics.write_test_results(
        os.path.join(output_dir, "test_results.tsv"),
        classifier_task.probabilities(outputs["logits"], is_regression),
        outputs["is_real_example"])
    if written != len(examples["predict"]):  # A bug, not a user mistake.
      raise RuntimeError(f"wrote {written} predictions for {len(examples['predict'])} "
                         "test examples")


if __name__ == "__main__":
  define_flags()
  app.run(errors.exit_on_user_error(main), flags_parser=flag_checks.parse_flags)
