"""run_classifier.py's task: a sentence (pair) classifier or regression, with its
adapter bank and AdapterFusion (Model Garden's official/nlp/tasks/sentence_prediction).

The classification pipeline (processors, features, losses, metrics) is in
classification/; this task adds what is above it: the adapter bank the
adapters go to or come from (bank/), and a fusion over a bank's tasks
(fusion/). runtime/task_run.run calls it.
"""

import os

from absl import logging
import tensorflow as tf

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
from adapter_bert.tasks import configs
from adapter_bert import tokenization


class ClassifierTask:
  """run_classifier.py's task, of its RunConfig (task: configs.ClassifierConfig).

  The config's model options are final: where the adapters come from the bank
  (its task's, or the fused tasks') cli/parse.py resolved them. Constructing
  it makes the processor and checks --data_dir (before the base is read, as
  the original).
  """

  def __init__(self, config: configs.RunConfig):
    self.config = config
    self.settings = settings = config.task
    self.processor = classifier_task.make_processor(settings.task_name, settings.data_dir,
                                                    settings.tsv_options)
    classifier_task.check_data_dir(settings.data_dir)
    self.canonical_name = processors.canonical_task_name(settings.task_name)
    self.bank_task = settings.bank_task or self.canonical_name
    self.bank = self.fusion = self.fingerprint = None

  @property
  def options(self) -> startup.RunOptions:
    return self.config.options

  def read_inputs(self, base) -> None:
    options = self.options
    self._bank_and_fusion(base)
    self.examples = classifier_task.read_examples(self.processor, self.settings.data_dir,
                                                  options.do_train, options.do_eval,
                                                  options.do_predict)
    self.tokenizer = tokenization.FullTokenizer(vocab_file=base.vocab_file,
                                                do_lower_case=options.do_lower_case)

  def set_up(self, base) -> startup.Run:
    options = self.options
    run = classifier_task.set_up(
        options, base, self.processor, self.canonical_name,
        len(self.examples["train"]) if options.do_train else None, self.fusion)
    if self.fusion is not None:
      fusion_model.log_parameter_counts(run.model)
    if self.settings.adapter_bank and options.do_train:
      # The loaded base must be the bank's before hours of training, not after.
      self.fingerprint = adapter_bank.frozen_fingerprint(run.model.tf1_variable_map())
      if self.bank is not None:
        adapter_bank.check_base(self.settings.adapter_bank, self.bank, self.fingerprint,
                                base.bert_config.to_dict(), options.do_lower_case,
                                "this run's base")
    return run

  def train_inputs(self, run: startup.Run) -> tf.data.Dataset:
    """The train split's feature record, written (or reused), as training batches;
    packed, a batch of rows holding --train_batch_size examples on average."""
    options, processor = run.options, self.processor
    examples = self.examples["train"]
    train_file = os.path.join(options.output_dir, "train.tf_record")
    classifier_features.ensure_feature_record(examples, processor.get_labels(),
                                              options.max_seq_length, self.tokenizer,
                                              train_file)
    batch_size = (startup.pack_training(run, train_file) if options.pack_sequences
                  else options.train_batch_size)
    return classifier_features.make_dataset(
        train_file, options.max_seq_length, batch_size, is_training=True,
        drop_remainder=True, is_regression=processor.is_regression,
        seed=model_setup.shuffle_seed(options.seed),
        pad_to_multiple_of=options.pad_to_multiple_of,
        group_by_length=options.group_by_length, pack_sequences=options.pack_sequences)

  def train(self, run: startup.Run, dataset: tf.data.Dataset) -> None:
    """Trains on the train split; the adapter-only weights then go to the bank."""
    options, processor = run.options, self.processor
    is_regression, label_list = processor.is_regression, processor.get_labels()
    logging.info("***** Running training *****")
    logging.info("  Num examples = %d", len(self.examples["train"]))
    logging.info("  Batch size = %d", options.train_batch_size)
    logging.info("  Num steps = %d", run.settings.num_train_steps)
    saved = startup.train(run, classifier_task.loss_fn(is_regression), dataset, dict(
        task=self.canonical_name, labels=[] if is_regression else label_list,
        is_regression=is_regression, **(self.fusion.metadata() if self.fusion else {})))
    if self.settings.adapter_bank and run.strategy.extended.should_checkpoint:
      self._add_to_bank(run, saved)

  def evaluate(self, run: startup.Run) -> None:
    """eval_results.txt and the eval summaries (output_dir/eval), as the original's;
    with --eval_predictions also eval_predictions.tsv; a fusion model's attentions
    where it returns them."""
    logging.info("***** Running evaluation *****")
    outputs = self._outputs(run, "eval", run.options.eval_batch_size)
    results = classifier_task.eval_results(self.settings.task_name, outputs,
                                           run.options.eval_batch_size, run.global_step,
                                           self.processor.is_regression)
    output_dir = run.options.output_dir
    classifier_metrics.write_eval_results(os.path.join(output_dir, "eval_results.txt"),
                                          results, run.checkpoint_path)
    classifier_task.write_eval_summaries(os.path.join(output_dir, "eval"), results,
                                         run.global_step)
    self._write_fusion_attentions(run, "eval", outputs, self.settings.task_name)
    if self.settings.eval_predictions:
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
      run.model.output_attentions = self.settings.fusion_attentions
    padded = classifier_features.pad_examples_for_tpu(self.examples[split],
                                                      batch_size if options.use_tpu else 1)
    logging.info("  Batch size = %d", batch_size)
    record = os.path.join(options.output_dir, f"{split}.tf_record")
    classifier_features.ensure_feature_record(padded, self.processor.get_labels(),
                                              options.max_seq_length, self.tokenizer, record)
    return classifier_task.predict_record(run.strategy, run.model, options, record,
                                          batch_size, self.processor.is_regression)

  def _write_fusion_attentions(self, run: startup.Run, split, outputs, task_name) -> None:
    """With --fusion_attentions (the model then returns them): fusion/attentions.py,
    named by the bank task where there is a bank."""
    if fusion_attentions.OUTPUT_KEY in outputs:
      model = run.model
      fusion_attentions.write(run.options.output_dir, split, outputs,
                              fusion_model.place_names(model.config, model.adapter_config),
                              model.fused_task_names,
                              self.bank_task if self.settings.adapter_bank else task_name)

  def _bank_and_fusion(self, base) -> None:
    """The run's adapter bank and its fusion, checked against the other settings."""
    options, settings = self.options, self.settings
    bank_dir = settings.adapter_bank
    if bank_dir:
      self.bank = self._check_bank(base)
      if not options.do_train:  # The model options name the bank task's adapters.
        self.fusion = fused_tasks.recorded_fusion(bank_dir, options.model.adapter_checkpoint)
      elif settings.fusion_tasks:
        self.fusion = fused_tasks.read_fusion(bank_dir, settings.fusion_tasks,
                                              settings.fusion_regularization)
    if options.pack_sequences and self.fusion is not None:
      raise errors.UserError("--pack_sequences: a fusion task's model reads unpacked "
                             "batches only; leave --pack_sequences out")
    if settings.fusion_attentions and self.fusion is None:
      raise errors.UserError("--fusion_attentions: this run has no fusion task (train one "
                             "with --fusion_tasks, or give a fusion --bank_task of "
                             "--adapter_bank)")

  def _check_bank(self, base):
    """The bank of --adapter_bank (None if training creates it), checked against this run.

    The frozen weights are compared once loaded (set_up); the config and casing here.
    """
    options, bank_dir = self.options, self.settings.adapter_bank
    do_train = options.do_train
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
    options, bank_dir = run.options, self.settings.adapter_bank
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
