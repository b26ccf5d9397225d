"""run_classifier.py's task: a sentence (pair) classifier or regression, with its
adapter bank and AdapterFusion (Model Garden's official/nlp/tasks/sentence_prediction).

The classification pipeline (processors, features, losses, metrics) is in
classification/; this task adds what is above it: the adapter bank the
adapters go to or come from (bank/), and a fusion over a bank's tasks
(fusion/). runtime/task_run.run calls it.
"""

import dataclasses
import os
from typing import Callable, Mapping, Optional

from absl import logging

from adapter_bert.bank import adapter_bank
from adapter_bert.classification import features as classifier_features
from adapter_bert.classification import metrics as classifier_metrics
from adapter_bert.classification import processors
from adapter_bert.classification import task as classifier_task
from adapter_bert import errors
from adapter_bert.fusion import attentions as fusion_attentions
from adapter_bert.fusion import fused_tasks
from adapter_bert.fusion import model as fusion_model
from adapter_bert.runtime import model_setup
from adapter_bert.runtime import startup
from adapter_bert import tokenization


@dataclasses.dataclass
class ClassifierTask:
  """The flags of run_classifier.py that are not RunOptions, and what is read of them.

  `bank_model_options(adapter_file)` and `fusion_model_options(adapter_config,
  source)` are the adapter flags as ModelOptions once the adapters come from
  a file (cli/options.py: flags left unset take what the file records).
  Constructing it makes the processor and checks --data_dir (before the base
  is read, as the original).
  """
  task_name: str
  data_dir: str
  tsv_options: Mapping[str, object]
  bank_model_options: Callable[[str], model_setup.ModelOptions]
  fusion_model_options: Callable[..., model_setup.ModelOptions]
  adapter_bank: Optional[str] = None
  bank_task: Optional[str] = None
  fusion_tasks: Optional[list] = None
  fusion_regularization: float = 0.0
  fusion_attentions: bool = False
  eval_predictions: bool = False

  def __post_init__(self):
    self.processor = classifier_task.make_processor(self.task_name, self.data_dir,
                                                    self.tsv_options)
    classifier_task.check_data_dir(self.data_dir)
    self.canonical_name = processors.canonical_task_name(self.task_name)
    self.bank_task = self.bank_task or self.canonical_name
    self.bank = self.fusion = self.fingerprint = None

  def read_inputs(self, options: startup.RunOptions, base) -> startup.RunOptions:
    options = self._bank_and_fusion(options, base)
    self.examples = classifier_task.read_examples(self.processor, self.data_dir,
                                                  options.do_train, options.do_eval,
                                                  options.do_predict)
    self.tokenizer = tokenization.FullTokenizer(vocab_file=base.vocab_file,
                                                do_lower_case=options.do_lower_case)
    return options

  def set_up(self, options: startup.RunOptions, base) -> startup.Run:
    run = classifier_task.set_up(
        options, base, self.processor, self.canonical_name,
        len(self.examples["train"]) if options.do_train else None, self.fusion)
    if self.fusion is not None:
      fusion_model.log_parameter_counts(run.model)
    if self.adapter_bank and options.do_train:
      # The loaded base must be the bank's before hours of training, not after.
      self.fingerprint = adapter_bank.frozen_fingerprint(run.model.tf1_variable_map())
      if self.bank is not None:
        adapter_bank.check_base(self.adapter_bank, self.bank, self.fingerprint,
                                base.bert_config.to_dict(), options.do_lower_case,
                                "this run's base")
    return run

  def train(self, run: startup.Run) -> None:
    """Trains on the train split; the adapter-only weights then go to the bank."""
    options, processor = run.options, self.processor
    examples = self.examples["train"]
    is_regression, label_list = processor.is_regression, processor.get_labels()
    train_file = os.path.join(options.output_dir, "train.tf_record")
    classifier_features.ensure_feature_record(examples, label_list, options.max_seq_length,
                                              self.tokenizer, train_file)
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
        pad_to_multiple_of=options.pad_to_multiple_of,
        group_by_length=options.group_by_length, pack_sequences=options.pack_sequences)
    saved = startup.train(run, classifier_task.loss_fn(is_regression), dataset, dict(
        task=self.canonical_name, labels=[] if is_regression else label_list,
        is_regression=is_regression, **(self.fusion.metadata() if self.fusion else {})))
    if self.adapter_bank and run.strategy.extended.should_checkpoint:
      self._add_to_bank(run, saved)

  def evaluate(self, run: startup.Run) -> None:
    """eval_results.txt and the eval summaries (output_dir/eval), as the original's;
    with --eval_predictions also eval_predictions.tsv; a fusion model's attentions
    where it returns them."""
    logging.info("***** Running evaluation *****")
    outputs = self._outputs(run, "eval", run.options.eval_batch_size)
    results = classifier_task.eval_results(self.task_name, outputs,
                                           run.options.eval_batch_size, run.global_step,
                                           self.processor.is_regression)
    output_dir = run.options.output_dir
    classifier_metrics.write_eval_results(os.path.join(output_dir, "eval_results.txt"),
                                          results, run.checkpoint_path)
    classifier_task.write_eval_summaries(os.path.join(output_dir, "eval"), results,
                                         run.global_step)
    self._write_fusion_attentions(run, "eval", outputs, self.task_name)
    if self.eval_predictions:
      classifier_task.write_eval_predictions(output_dir, outputs,
                                             self.processor.is_regression)

  def predict(self, run: startup.Run) -> None:
    """test_results.tsv: a line of probabilities (or a score) per test example (and
    a fusion model's attentions, as `evaluate`)."""
    logging.info("***** Running prediction*****")
    examples = self.examples["predict"]
    outputs = self._outputs(run, "predict", run.options.predict_batch_size)
    written = classifier_metrics.write_test_results(
        os.path.join(run.options.output_dir, "test_results.tsv"),
        classifier_task.probabilities(outputs["logits"], self.processor.is_regression),
        outputs["is_real_example"])
    if written != len(examples):  # A bug, not a user mistake.
      raise RuntimeError(f"wrote {written} predictions for {len(examples)} test examples")
    self._write_fusion_attentions(run, "predict", outputs, run.config["task_name"])

  def _outputs(self, run: startup.Run, split: str, batch_size: int):
    """Writes the split's feature record (padded on TPU) and runs the model over it."""
    options = run.options
    if self.fusion is not None:  # Returned beside the logits (not in training).
      run.model.output_attentions = self.fusion_attentions
    padded = classifier_features.pad_examples_for_tpu(self.examples[split],
                                                      batch_size if options.use_tpu else 1)
    logging.info("  Batch size = %d", batch_size)
    record = os.path.join(options.output_dir, f"{split}.tf_record")
    classifier_features.ensure_feature_record(padded, self.processor.get_labels(),
                                              options.max_seq_length, self.tokenizer, record)
    return classifier_task.predict_record(
        run.strategy, run.model, record, options.max_seq_length, batch_size, options.use_tpu,
        self.processor.is_regression, options.use_xla, options.pad_to_multiple_of,
        options.iterations_per_loop, options.pack_sequences)

  def _write_fusion_attentions(self, run: startup.Run, split, outputs, task_name) -> None:
    """With --fusion_attentions (the model then returns them): fusion/attentions.py,
    named by the bank task where there is a bank."""
    if fusion_attentions.OUTPUT_KEY in outputs:
      model = run.model
      fusion_attentions.write(run.options.output_dir, split, outputs,
                              fusion_model.place_names(model.config, model.adapter_config),
                              model.fused_task_names,
                              self.bank_task if self.adapter_bank else task_name)

  def _bank_and_fusion(self, options: startup.RunOptions, base) -> startup.RunOptions:
    """The run's adapter bank and its fusion, checked against the other settings;
    the options with the bank task's recorded or the fusion's adapters."""
    bank_dir = self.adapter_bank
    if bank_dir:
      self.bank = self._check_bank(options, base)
      if not options.do_train:
        # The task's adapters, with the settings recorded with them.
        checkpoint = adapter_bank.task_checkpoint(bank_dir, self.bank_task)
        options = dataclasses.replace(options, model=self.bank_model_options(checkpoint))
        self.fusion = fused_tasks.recorded_fusion(bank_dir, checkpoint)
      elif self.fusion_tasks:
        if self.bank_task in self.fusion_tasks:
          raise errors.UserError(f"--bank_task={self.bank_task} is one of --fusion_tasks: a "
                                 f"fusion task is a bank task of its own; give it another "
                                 f"name")
        self.fusion = fused_tasks.read_fusion(bank_dir, self.fusion_tasks,
                                              self.fusion_regularization)
        options = dataclasses.replace(options, model=self.fusion_model_options(
            self.fusion.adapter_config, f"adapter bank {bank_dir}'s tasks "
            f"{','.join(self.fusion_tasks)}"))
    if options.pack_sequences and self.fusion is not None:
      raise errors.UserError("--pack_sequences: a fusion task's model reads unpacked "
                             "batches only; leave --pack_sequences out")
    if self.fusion_attentions and self.fusion is None:
      raise errors.UserError("--fusion_attentions: this run has no fusion task (train one "
                             "with --fusion_tasks, or give a fusion --bank_task of "
                             "--adapter_bank)")
    return options

  def _check_bank(self, options: startup.RunOptions, base):
    """The bank of --adapter_bank (None if training creates it), checked against this run.

    The frozen weights are compared once loaded (set_up); the config and casing here.
    """
    bank_dir, do_train = self.adapter_bank, options.do_train
    bank = adapter_bank.find_bank(bank_dir) if do_train else adapter_bank.open_bank(bank_dir)
    if bank is not None:
      adapter_bank.check_base(bank_dir, bank, None, base.bert_config.to_dict(),
                              options.do_lower_case, "this run's base")
      if do_train and self.bank_task in adapter_bank.task_names(bank_dir):
        logging.info("Adapter bank %s holds task %s: this run replaces it when it ends",
                     bank_dir, self.bank_task)
    return bank

  def _add_to_bank(self, run: startup.Run, saved: str) -> None:
    """Adds the trained adapters to the bank, which is created for this base if new."""
    options, bank_dir = run.options, self.adapter_bank
    sources = model_setup.base_reference(run.model, options.model, options.output_dir) or {}
    base = adapter_bank.BankBase.of_run(
        self.fingerprint, run.base.bert_config.to_dict(), sources.get("init_checkpoint"),
        sources.get("bert_hub_module_handle"), run.base.vocab_file, options.do_lower_case)
    existing = adapter_bank.find_bank(bank_dir)
    if existing is not None:
      adapter_bank.check_base(bank_dir, existing, base.fingerprint, base.bert_config,
                              base.do_lower_case, "this run's base")
    # A new bank is created only once the file is checked: a refusal leaves none.
    adapter_bank.add_task(bank_dir, self.bank_task, os.path.dirname(saved),
                          None if existing is not None else base)
