"""run_squad.py's task: SQuAD v1.1 / v2.0 extractive question answering
(Model Garden's official/nlp/tasks/question_answering).

  SquadTask            read, set up, train, predict and score: runtime/task_run.run
  span_loss            the original's start/end cross-entropy
  write_features       examples -> a feature record (squad/features.py)
  train_dataset, predict_dataset
                       the record as batches for training and for prediction
  raw_results          model outputs -> postprocess.RawResult, padding dropped
  write_eval_results   the official metrics of predictions.json, eval_results.json
"""

import posixpath
import random
from typing import Dict, List, Optional

from absl import logging
import tensorflow as tf

from adapter_bert.model import modeling
from adapter_bert.runtime import model_setup
from adapter_bert.runtime import prediction
from adapter_bert.runtime import records
from adapter_bert.runtime import startup
from adapter_bert.squad import examples as squad_examples
from adapter_bert.squad import features as squad_features
from adapter_bert.squad import evaluate as squad_metrics
from adapter_bert.squad import postprocess
from adapter_bert.tasks import configs
from adapter_bert.storage import file_io
from adapter_bert import tokenization

# The original seeds its pre-conversion shuffle of the training examples with this.
_TRAIN_SHUFFLE_SEED = 12345
# Unique id of the features that pad the last prediction batch (real ids are >= 1e9).
_PADDING_UNIQUE_ID = -1


class SquadTask:
  """run_squad.py's task, of its RunConfig (task: configs.SquadConfig)."""

  def __init__(self, config: configs.RunConfig):
    self.config, self.settings = config, config.task

  @property
  def options(self) -> startup.RunOptions:
    return self.config.options

  def read_inputs(self, base) -> None:
    """Every input file is read before anything is written, so that a bad file
    fails fast and leaves output_dir as it was."""
    options, settings = self.options, self.settings
    self.tokenizer = tokenization.FullTokenizer(base.vocab_file, options.do_lower_case)
    version_2 = settings.version_2_with_negative
    self.train_examples = (read_train_examples(settings.train_file, version_2)
                           if options.do_train else None)
    self.eval_examples = (squad_examples.read_squad_examples(settings.predict_file, False,
                                                             version_2)
                          if options.do_predict else None)
    self.score = options.do_predict and has_answers(settings.predict_file, version_2)

  def set_up(self, base) -> startup.Run:
    options, settings = self.options, self.settings
    return startup.set_up(
        options, base, modeling.BertSpanLabeler,
        len(self.train_examples) if options.do_train else None,
        adapter_metadata={"task": "squad"}, task_name="squad",
        version_2_with_negative=settings.version_2_with_negative,
        doc_stride=settings.doc_stride, max_query_length=settings.max_query_length)

  def _write_features(self, run: startup.Run, examples, split: str, is_training: bool):
    options = run.options
    return write_features(examples, self.tokenizer,
                          posixpath.join(options.output_dir, f"{split}.tf_record"),
                          is_training, options.max_seq_length, self.settings.doc_stride,
                          self.settings.max_query_length)

  def train_inputs(self, run: startup.Run) -> tf.data.Dataset:
    """The training examples' feature record, written, as training batches."""
    options, examples = run.options, self.train_examples
    writer = self._write_features(run, examples, "train", is_training=True)
    self.num_train_features = writer.num_features
    batch_size = options.train_batch_size
    if options.pack_sequences:
      batch_size = packed_rows_per_batch(run, writer.filename, batch_size)
    return train_dataset(writer.filename, options.max_seq_length, batch_size,
                         model_setup.shuffle_seed(options.seed),
                         options.pad_to_multiple_of, options.group_by_length,
                         options.pack_sequences)

  def train(self, run: startup.Run, dataset: tf.data.Dataset) -> None:
    """Trains on the training examples' features; writes adapter_model/."""
    logging.info("***** Running training *****")
    logging.info("  Num orig examples = %d", len(self.train_examples))
    logging.info("  Num split examples = %d", self.num_train_features)
    logging.info("  Batch size = %d", run.options.train_batch_size)
    logging.info("  Num steps = %d", run.settings.num_train_steps)
    startup.train(run, span_loss, dataset, {
        "task": "squad", "version_2_with_negative": self.settings.version_2_with_negative})

  def evaluate(self, run: startup.Run) -> None:
    """run_squad.py has no --do_eval: `predict` scores a --predict_file with answers."""
    raise ValueError("run_squad.py evaluates in predict")

  def predict(self, run: startup.Run) -> None:
    """predictions.json, nbest_predictions.json (and null_odds.json for v2); then,
    where the file has gold answers, eval_results.json."""
    options, examples = run.options, self.eval_examples
    writer = self._write_features(run, examples, "eval", is_training=False)
    features, batch_size = writer.features, options.predict_batch_size
    logging.info("***** Running predictions *****")
    logging.info("  Num orig examples = %d", len(examples))
    logging.info("  Num split examples = %d", len(features))
    logging.info("  Batch size = %d", batch_size)
    if options.pack_sequences:
      batch_size = packed_rows_per_batch(run, writer.filename, batch_size)
    dataset = predict_dataset(writer.filename, options.max_seq_length, batch_size,
                              len(features), pad_last_batch=options.use_tpu or options.use_xla,
                              pad_to_multiple_of=options.pad_to_multiple_of,
                              pack_sequences=options.pack_sequences)
    outputs = prediction.predict(run.strategy, run.model, dataset,
                                 jit_compile=options.use_xla,
                                 iterations_per_loop=options.iterations_per_loop)
    settings = self.settings
    output_dir, version_2 = options.output_dir, settings.version_2_with_negative
    predictions, _, null_odds = postprocess.write_predictions(
        examples, features, raw_results(outputs, features), settings.n_best_size,
        settings.max_answer_length, options.do_lower_case,
        posixpath.join(output_dir, "predictions.json"),
        posixpath.join(output_dir, "nbest_predictions.json"),
        posixpath.join(output_dir, "null_odds.json"),
        version_2_with_negative=version_2,
        null_score_diff_threshold=settings.null_score_diff_threshold,
        verbose_logging=settings.verbose_logging)
    if not self.score:
      logging.info("%s has no gold answers: not scored.", settings.predict_file)
      return
    write_eval_results(posixpath.join(output_dir, "eval_results.json"), settings.predict_file,
                       predictions, null_odds, version_2, run.global_step,
                       run.checkpoint_path)


def span_loss(labels: Dict[str, tf.Tensor], outputs: Dict[str, tf.Tensor]) -> tf.Tensor:
  """Per-example (start + end) / 2 softmax cross-entropy, as the original; [B] float32."""
  def cross_entropy(logits, positions):
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot = tf.one_hot(positions, depth=tf.shape(logits)[-1], dtype=log_probs.dtype)
    return -tf.reduce_sum(one_hot * log_probs, axis=-1)
  return (cross_entropy(outputs["start_logits"], labels["start_positions"]) +
          cross_entropy(outputs["end_logits"], labels["end_positions"])) / 2.0


def write_features(examples, tokenizer, path, is_training, max_seq_length, doc_stride,
                   max_query_length) -> squad_features.FeatureWriter:
  """Converts examples into a record file (atomic: no partial file on error)."""
  with squad_features.FeatureWriter(path, is_training=is_training,
                                keep_features=not is_training) as writer:
    squad_features.convert_examples_to_features(
        examples, tokenizer, max_seq_length, doc_stride, max_query_length,
        is_training=is_training, output_fn=writer.process_feature)
  return writer


def train_dataset(path, max_seq_length, batch_size, seed, pad_to_multiple_of=None,
                  group_by_length=False, pack_sequences=False) -> tf.data.Dataset:
  """(features, start and end positions) batches; packed, `batch_size` rows."""
  labels = ("start_positions", "end_positions")
  d = squad_features.make_dataset(path, max_seq_length, batch_size, is_training=True,
                              drop_remainder=True, seed=seed,
                              pad_to_multiple_of=pad_to_multiple_of,
                              group_by_length=group_by_length, pack_sequences=pack_sequences)
  return d.map(lambda x: ({k: v for k, v in x.items() if k not in labels},
                          {k: x[k] for k in labels}))


def predict_dataset(path, max_seq_length, batch_size, num_features,
                    pad_last_batch: bool, pad_to_multiple_of=None,
                    pack_sequences=False) -> tf.data.Dataset:
  """(features, unique_ids) batches, grouped by length unless padded to the maximum
  (prediction.predict returns the results in record order either way).

  With `pad_last_batch` (TPU, XLA: static shapes), all-zero features with
  unique id -1 fill the last batch; their results are dropped before
  post-processing, as the original classifier's is_real_example=0 examples.
  Every batch is then full, and the batch dimension static (drop_remainder
  drops nothing), also where the features are an exact multiple of the batch.

  Packed (`batch_size` rows), every batch is full and static anyway: empty
  rows fill the last one, and prediction.predict returns only real features.
  """
  if pack_sequences:
    d = squad_features.make_dataset(path, max_seq_length, batch_size, is_training=False,
                                drop_remainder=True, pack_sequences=True)
    return d.map(lambda x: (x, x["unique_ids"]))
  fill = None
  if pad_last_batch and num_features % batch_size:
    fill = {"unique_ids": _PADDING_UNIQUE_ID}
    num_padding = batch_size - num_features % batch_size
    logging.info("  Num split examples = %d (%d actual, %d padding)",
                 num_features + num_padding, num_features, num_padding)
  d = squad_features.make_dataset(path, max_seq_length, batch_size, is_training=False,
                              drop_remainder=pad_last_batch,
                              pad_to_multiple_of=pad_to_multiple_of,
                              fill_last_batch=fill)
  return d.map(lambda x: (x, x["unique_ids"]))


def raw_results(outputs, features) -> List[postprocess.RawResult]:
  """Model outputs of the real features (padding dropped), as RawResults.

  Each feature's logits stop at its own tokens. Post-processing ranks the n
  best starts and ends over the logits it gets and then drops positions past
  the tokens. The original gave it the padding positions too, so a padding
  position could take a place of the n best: a feature's answers then depended
  on how far it was padded, which here depends on the batch it falls in.
  """
  tokens = {f.unique_id: len(f.tokens) for f in features}
  return [postprocess.RawResult(int(uid), start[:tokens[int(uid)]], end[:tokens[int(uid)]])
          for uid, start, end in zip(outputs["unique_ids"], outputs["start_logits"],
                                     outputs["end_logits"]) if int(uid) in tokens]


def has_answers(predict_file: str, version_2_with_negative: bool) -> bool:
  """Whether every question of the file carries gold answers (so it can be scored)."""
  questions = [qa for article in squad_examples.load_squad_json(predict_file)["data"]
               for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
  # v2.0 marks unanswerable questions by an empty answer list.
  return bool(questions) and all(
      "answers" in qa and (version_2_with_negative or qa["answers"]) for qa in questions)


def write_eval_results(path, predict_file, predictions, null_odds,
                       version_2_with_negative, global_step: int = 0,
                       checkpoint_path: Optional[str] = None) -> Dict[str, object]:
  """Scores predictions with the official metrics; writes and logs them, followed by
  the weights' global_step and checkpoint_path (startup.Run's, as eval_results.txt)."""
  results = squad_metrics.evaluate_predictions(
      predict_file, predictions, version_2_with_negative,
      null_odds if version_2_with_negative else None)
  results["global_step"] = global_step
  if checkpoint_path:
    results["checkpoint_path"] = file_io.name_from(posixpath.dirname(path), checkpoint_path)
  version = "2.0" if version_2_with_negative else "1.1"
  file_io.atomic_write(
      path, squad_metrics.format_results(results, version, for_file=True) + "\n",
      what="the eval results")
  logging.info("***** Eval results *****")
  for key, value in results.items():
    logging.info("  %s = %s", key, value)
  return results


def read_train_examples(train_file: str, version_2_with_negative: bool):
  """The training examples, shuffled as the original shuffles them before conversion."""
  examples = squad_examples.read_squad_examples(train_file, True, version_2_with_negative)
  random.Random(_TRAIN_SHUFFLE_SEED).shuffle(examples)
  return examples


def packed_rows_per_batch(run: startup.Run, record_file: str, batch_size: int) -> int:
  """The packed rows that hold `batch_size` features on average (measured on
  the record, rounded up to a multiple of the replicas): --*_batch_size keeps
  counting features, and training keeps the original's steps (a SQuAD epoch is
  counted in questions, not features), each over as many features as unpacked."""
  return records.packed_batch_rows(record_file, run.options.max_seq_length, batch_size,
                                   run.strategy.num_replicas_in_sync)[0]
