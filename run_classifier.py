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
import sys
from typing import Optional

# First, before anything imports TensorFlow: a TPU VM's runtime, then the frameworks.
from adapter_bert.cli import launch  # pylint: disable=g-bad-import-order
launch.start(sys.argv if __name__ == "__main__" else None)

from absl import app
from absl import flags
from absl import logging

from adapter_bert.bank import adapter_bank
from adapter_bert.classification import features as classifier_features
from adapter_bert.classification import metrics as classifier_metrics
from adapter_bert.classification import processors
from adapter_bert.classification import task as classifier_task
from adapter_bert.cli import flag_checks
from adapter_bert.cli import flags as cli_flags
from adapter_bert.cli import options as cli_options
from adapter_bert.cli import path_flags
from adapter_bert import errors
from adapter_bert.fusion import attentions as fusion_attentions
from adapter_bert.fusion import fused_tasks
from adapter_bert.fusion import model as fusion_model
from adapter_bert.runtime import model_setup
from adapter_bert.runtime import startup
from adapter_bert import tokenization


def define_flags(flag_values=flags.FLAGS):
  """Defines the flags; called by `__main__` (and by tests on their own FlagValues)
  rather than at import, so other scripts' same-named flags never clash."""
  cli_flags.define_classifier_flags(flag_values)


def _check_bank(bank_dir, task, base, do_lower_case, do_train):
  """The bank of --adapter_bank (None if training creates it), checked against this run.

  The frozen weights are compared once loaded (_check_bank_weights); the config
  and casing here.
  """
  bank = adapter_bank.find_bank(bank_dir) if do_train else adapter_bank.open_bank(bank_dir)
  if bank is not None:
    adapter_bank.check_base(bank_dir, bank, None, base.bert_config.to_dict(), do_lower_case,
                            "this run's base")
    if do_train and task in adapter_bank.task_names(bank_dir):
      logging.info("Adapter bank %s holds task %s: this run replaces it when it ends",
                   bank_dir, task)
  return bank


def _check_bank_weights(run: startup.Run, bank_dir: str, bank) -> str:
  """The fingerprint of the loaded base, checked against the bank's (if there is one)."""
  # The loaded base must be the bank's before hours of training, not after.
  fingerprint = adapter_bank.frozen_fingerprint(run.model.tf1_variable_map())
  if bank is not None:
    adapter_bank.check_base(bank_dir, bank, fingerprint, run.base.bert_config.to_dict(),
                            run.options.do_lower_case, "this run's base")
  return fingerprint


def _add_to_bank(run: startup.Run, bank_dir: str, bank_task: str, fingerprint: str,
                 saved: str) -> None:
  """Adds the trained adapters to the bank, which is created for this base if new."""
  options = run.options
  sources = model_setup.base_reference(run.model, options.model, options.output_dir) or {}
  base = adapter_bank.BankBase.of_run(
      fingerprint, run.base.bert_config.to_dict(), sources.get("init_checkpoint"),
      sources.get("bert_hub_module_handle"), run.base.vocab_file, options.do_lower_case)
  existing = adapter_bank.find_bank(bank_dir)
  if existing is not None:
    adapter_bank.check_base(bank_dir, existing, base.fingerprint, base.bert_config,
                            base.do_lower_case, "this run's base")
  # A new bank is created only once the file is checked: a refusal leaves none.
  adapter_bank.add_task(bank_dir, bank_task, os.path.dirname(saved),
                        None if existing is not None else base)


def train(run: startup.Run, processor, task_name, examples, tokenizer,
          fusion_metadata=None) -> Optional[str]:
  """Trains on the examples; returns where the adapter-only weights went (startup.train).
  `fusion_metadata`: a fusion task's record of its fused tasks (fused_tasks.Fusion)."""
  options = run.options
  is_regression, label_list = processor.is_regression, processor.get_labels()
  train_file = os.path.join(options.output_dir, "train.tf_record")
  classifier_features.ensure_feature_record(examples, label_list, options.max_seq_length,
                                            tokenizer, train_file)
  # Packed: a batch of rows holding --train_batch_size examples on average.
  batch_size = (startup.pack_training(run, train_file) if options.pack_sequences
                else options.train_batch_size)
  logging.info("***** Running training *****")
  logging.info("  Num examples = %d", len(examples))
  logging.info("  Batch size = %d", options.train_batch_size)
  logging.info("  Num steps = %d", run.settings.num_train_steps)
  dataset = classifier_features.make_dataset(
      train_file, options.max_seq_length, batch_size, is_training=True,
      drop_remainder=True, is_regression=is_regression,
      seed=model_setup.shuffle_seed(options.seed),
      pad_to_multiple_of=options.pad_to_multiple_of, group_by_length=options.group_by_length,
      pack_sequences=options.pack_sequences)
  return startup.train(run, classifier_task.loss_fn(is_regression), dataset, dict(
      task=task_name, labels=[] if is_regression else label_list,
      is_regression=is_regression, **(fusion_metadata or {})))


def _outputs(run: startup.Run, processor, split, examples, tokenizer, batch_size):
  """Writes the split's feature record (padded on TPU) and runs the model over it."""
  options = run.options
  padded = classifier_features.pad_examples_for_tpu(examples,
                                                    batch_size if options.use_tpu else 1)
  logging.info("  Batch size = %d", batch_size)
  record = os.path.join(options.output_dir, f"{split}.tf_record")
  classifier_features.ensure_feature_record(padded, processor.get_labels(),
                                            options.max_seq_length, tokenizer, record)
  return classifier_task.predict_record(
      run.strategy, run.model, record, options.max_seq_length, batch_size, options.use_tpu,
      processor.is_regression, options.use_xla, options.pad_to_multiple_of,
      options.iterations_per_loop, options.pack_sequences)


def evaluate(run: startup.Run, processor, task_name, examples, tokenizer, batch_size,
             write_predictions: bool = False, bank_task: Optional[str] = None):
  """eval_results.txt and the eval summaries (output_dir/eval), as the original's;
  with `write_predictions` also eval_predictions.tsv (--eval_predictions); a
  fusion model's attentions where it returns them (named by `bank_task`)."""
  logging.info("***** Running evaluation *****")
  outputs = _outputs(run, processor, "eval", examples, tokenizer, batch_size)
  results = classifier_task.eval_results(task_name, outputs, batch_size, run.global_step,
                                         processor.is_regression)
  output_dir = run.options.output_dir
  classifier_metrics.write_eval_results(os.path.join(output_dir, "eval_results.txt"),
                                        results, run.checkpoint_path)
  classifier_task.write_eval_summaries(os.path.join(output_dir, "eval"), results,
                                       run.global_step)
  _write_fusion_attentions(run, "eval", outputs, bank_task or task_name)
  if write_predictions:
    classifier_task.write_eval_predictions(output_dir, outputs, processor.is_regression)


def predict(run: startup.Run, processor, examples, tokenizer, batch_size,
            bank_task: Optional[str] = None):
  """test_results.tsv: a line of probabilities (or a score) per test example (and
  a fusion model's attentions, as `evaluate`)."""
  logging.info("***** Running prediction*****")
  outputs = _outputs(run, processor, "predict", examples, tokenizer, batch_size)
  written = classifier_metrics.write_test_results(
      os.path.join(run.options.output_dir, "test_results.tsv"),
      classifier_task.probabilities(outputs["logits"], processor.is_regression),
      outputs["is_real_example"])
  if written != len(examples):  # A bug, not a user mistake.
    raise RuntimeError(f"wrote {written} predictions for {len(examples)} test examples")
  _write_fusion_attentions(run, "predict", outputs, bank_task or run.config["task_name"])


def _write_fusion_attentions(run: startup.Run, split, outputs, task_name) -> None:
  """With --fusion_attentions (the model then returns them): fusion/attentions.py."""
  if fusion_attentions.OUTPUT_KEY in outputs:
    model = run.model
    fusion_attentions.write(run.options.output_dir, split, outputs,
                            fusion_model.place_names(model.config, model.adapter_config),
                            model.fused_task_names, task_name)


def _bank_and_fusion(F, options, base, task_name):
  """The run's adapter bank and its task, and its fusion, checked against the
  other flags; the options of the bank task's recorded or the fusion's adapters.

  Returns:
    (options, bank_task, bank, fusion); bank and fusion None where not asked for.
  """
  bank_task, bank, fusion = F.bank_task or task_name, None, None
  if F.adapter_bank:
    bank = _check_bank(F.adapter_bank, bank_task, base, F.do_lower_case, F.do_train)
    if not F.do_train:
      # The task's adapters, with the settings recorded with them.
      checkpoint = adapter_bank.task_checkpoint(F.adapter_bank, bank_task)
      options = dataclasses.replace(options, model=cli_options.model_options(F, checkpoint))
      fusion = fused_tasks.recorded_fusion(F.adapter_bank, checkpoint)
    elif F.fusion_tasks:
      if bank_task in F.fusion_tasks:
        raise errors.UserError(f"--bank_task={bank_task} is one of --fusion_tasks: a fusion "
                               f"task is a bank task of its own; give it another name")
      fusion = fused_tasks.read_fusion(F.adapter_bank, F.fusion_tasks,
                                       F.fusion_regularization)
      options = dataclasses.replace(options, model=cli_options.fusion_model_options(
          F, fusion.adapter_config, f"adapter bank {F.adapter_bank}'s tasks "
          f"{','.join(F.fusion_tasks)}"))
  if options.pack_sequences and fusion is not None:
    raise errors.UserError("--pack_sequences: a fusion task's model reads unpacked batches "
                           "only; leave --pack_sequences out")
  if F.fusion_attentions and fusion is None:
    raise errors.UserError("--fusion_attentions: this run has no fusion task (train one "
                           "with --fusion_tasks, or give a fusion --bank_task of "
                           "--adapter_bank)")
  return options, bank_task, bank, fusion


def main(argv, flag_values=None):
  del argv
  F = flag_values or flags.FLAGS
  logging.set_verbosity(logging.INFO)
  path_flags.check_path_flags(F, cli_flags.classifier_path_flags(F.do_train))
  options = cli_options.run_options(F)

  # Start-up checks: each fails before anything is written (the flags' own
  # values were checked when they were parsed; these need files or presence).
  processor = classifier_task.make_processor(F.task_name, F.data_dir,
                                             cli_options.tsv_options(F))
  classifier_task.check_data_dir(F.data_dir)
  base = startup.read_base(options)
  task_name = processors.canonical_task_name(F.task_name)
  options, bank_task, bank, fusion = _bank_and_fusion(F, options, base, task_name)
  examples = classifier_task.read_examples(processor, F.data_dir, F.do_train, F.do_eval,
                                           F.do_predict)
  tokenizer = tokenization.FullTokenizer(vocab_file=base.vocab_file,
                                         do_lower_case=F.do_lower_case)
  run = classifier_task.set_up(options, base, processor, task_name,
                               len(examples["train"]) if F.do_train else None, fusion)
  if fusion is not None:
    fusion_model.log_parameter_counts(run.model)
  if F.adapter_bank and F.do_train:
    fingerprint = _check_bank_weights(run, F.adapter_bank, bank)

  # From here on files are written.
  startup.write_run_config(run)
  if F.do_train:
    saved = train(run, processor, task_name, examples["train"], tokenizer,
                  fusion.metadata() if fusion else {})
    if F.adapter_bank and run.strategy.extended.should_checkpoint:
      _add_to_bank(run, F.adapter_bank, bank_task, fingerprint, saved)
  if fusion is not None:  # Returned beside the logits from here on (not in training).
    run.model.output_attentions = F.fusion_attentions
  if F.do_eval:
    evaluate(run, processor, F.task_name, examples["eval"], tokenizer, F.eval_batch_size,
             F.eval_predictions, bank_task if F.adapter_bank else None)
  if F.do_predict:
    predict(run, processor, examples["predict"], tokenizer, F.predict_batch_size,
            bank_task if F.adapter_bank else None)


if __name__ == "__main__":
  define_flags()
  app.run(errors.exit_on_user_error(main), flags_parser=flag_checks.parse_flags)
