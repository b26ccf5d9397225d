r"""BERT with adapters on SQuAD v1.1 / v2.0: train, predict, score.

The flags and output files of google-research/bert `run_squad.py`, plus the
adapter flags of run_classifier.py (cli/flags.py). E.g.

  python run_squad.py --vocab_file=$BERT/vocab.txt \
    --bert_config_file=$BERT/bert_config.json --init_checkpoint=$BERT/bert_model.ckpt \
    --do_train --train_file=train-v1.1.json --do_predict --predict_file=dev-v1.1.json \
    --learning_rate=1e-4 --num_train_epochs=2 --adapter_size=64 --output_dir=/tmp/squad

Writes to output_dir: run_config.json (bert, adapter and run settings),
train.tf_record / eval.tf_record (features), model.ckpt-N
(the last 5), adapter_model/ (adapter-only weights, after training),
predictions.json, nbest_predictions.json, null_odds.json (v2) and, when
--predict_file has answers, eval_results.json (the official metrics, then the
global_step and checkpoint_path of the weights that predicted).
"""

import posixpath
import random
import sys
from typing import Dict, List, Optional

# First, before anything imports TensorFlow: a TPU VM's runtime, then the frameworks.
from adapter_bert.cli import launch  # pylint: disable=g-bad-import-order
launch.start(sys.argv if __name__ == "__main__" else None)

from absl import app
from absl import flags
from absl import logging
import tensorflow as tf

from adapter_bert.cli import flag_checks
from adapter_bert.cli import flags as cli_flags
from adapter_bert.cli import options as cli_options
from adapter_bert.cli import path_flags
from adapter_bert import errors
from adapter_bert.model import modeling
from adapter_bert.runtime import model_setup
from adapter_bert.runtime import prediction
from adapter_bert.runtime import records
from adapter_bert.runtime import startup
from adapter_bert.squad import examples as squad_examples
from adapter_bert.squad import features as squad_features
from adapter_bert.squad import evaluate as squad_metrics
from adapter_bert.squad import postprocess
from adapter_bert.storage import file_io
from adapter_bert.storage import path_checks
from adapter_bert import tokenization

# The original seeds its pre-conversion shuffle of the training examples with this.
_TRAIN_SHUFFLE_SEED = 12345
# Unique id of the features that pad the last prediction batch (real ids are >= 1e9).
_PADDING_UNIQUE_ID = -1


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """The original run_squad.py flags (same names and defaults) + the adapter flags."""
  fv = dict(flag_values=flag_values)
  s, i, f, b = (flags.DEFINE_string, flags.DEFINE_integer, flags.DEFINE_float,
                flags.DEFINE_bool)
  cli_flags.define_encoder_flags(flag_values, max_seq_length=384, optional_with_hub=False)
  s("train_file", None, "SQuAD json for training, e.g. train-v1.1.json.", **fv)
  s("predict_file", None, "SQuAD json for predictions, e.g. dev-v1.1.json; scored "
    "(eval_results.json) when it has answers.", **fv)
  i("doc_stride", 128, "How far apart consecutive document chunks start.", **fv)
  i("max_query_length", 64, "Questions are truncated to this many tokens.", **fv)
  cli_flags.define_action_flags(flag_values, eval_split=False, predict_help="Whether to "
                                "run prediction on --predict_file.")
  cli_flags.define_training_flags(flag_values, splits=("train", "predict"),
                                  predict_help="Total batch size for predictions.")
  cli_flags.define_packing_flag(flag_values)
  i("n_best_size", 20, "Candidates per question in nbest_predictions.json.", **fv)
  i("max_answer_length", 30, "Longest answer that can be predicted, in tokens.", **fv)
  cli_flags.define_tpu_flags(flag_values)
  b("verbose_logging", False, "Log warnings about answer text alignment.", **fv)
  b("version_2_with_negative", False, "SQuAD 2.0: some questions have no answer.", **fv)
  f("null_score_diff_threshold", 0.0, "v2: predict no answer if null score - best "
    "non-null score > this.", **fv)
  cli_flags.define_adapter_flags(flag_values)
  for name in ("bert_config_file", "vocab_file", "output_dir"):
    flags.mark_flag_as_required(name, **fv)
    flag_checks.check_flag(flag_values, name, bool, "given, not empty")
  check, together = flag_checks.check_flag, flag_checks.check_flags_together
  cli_flags.check_training_flags(flag_values, (
      "train_batch_size", "predict_batch_size", "doc_stride", "max_query_length",
      "n_best_size", "max_answer_length"))
  check(flag_values, "max_seq_length", lambda v: v >= 3, "at least 3")
  check(flag_values, "null_score_diff_threshold", lambda v: v == v, "a number (not nan)")
  together(flag_values, ("do_train", "do_predict"), _action_problem)
  together(flag_values, ("do_train", "train_file"), _train_file_problem)
  together(flag_values, ("do_predict", "predict_file"), _predict_file_problem)
  together(flag_values, ("max_seq_length", "max_query_length"), _length_problem)


# The original's validate_flags_or_throw, one rule at a time: None if the
# values fit together, else what is wrong.

def _action_problem(do_train, do_predict):
  if not do_train and not do_predict:
    return "at least one of --do_train or --do_predict must be given"
  return None


def _train_file_problem(do_train, train_file):
  return "--do_train needs --train_file" if do_train and not train_file else None


def _predict_file_problem(do_predict, predict_file):
  return "--do_predict needs --predict_file" if do_predict and not predict_file else None


def _length_problem(max_seq_length, max_query_length):
  """The one check of the two length flags, as parsed (define_flags) or set (validate).

  squad/features.convert_examples_to_features still refuses a question that leaves no
  room for its document (it also serves callers without flags).
  """
  if max_seq_length <= max_query_length + 3:
    # [CLS] query [SEP] document [SEP]: at least one document token.
    return ("--max_seq_length must be greater than --max_query_length + 3 "
            f"({max_query_length} + 3)")
  return None


def span_loss(labels: Dict[str, tf.Tensor], outputs: Dict[str, tf.Tensor]) -> tf.Tensor:
  """Per-example (start + end) / 2 softmax cross-entropy, as the original; [B] float32."""
  def cross_entropy(logits, positions):
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot = tf.one_hot(positions, depth=tf.shape(logits)[-1], dtype=log_probs.dtype)
    return -tf.reduce_sum(one_hot * log_probs, axis=-1)
  return (cross_entropy(outputs["start_logits"], labels["start_positions"]) +
          cross_entropy(outputs["end_logits"], labels["end_positions"])) / 2.0


def validate(do_train, do_predict, train_file, predict_file, max_seq_length,
             max_query_length, doc_stride) -> None:
  """The original's validate_flags_or_throw, less what ModelOptions.read_checked_base checks.

  The flag validators of define_flags run the same rules when the flags are
  parsed; this is for flags set otherwise.

  Raises:
    errors.UserError: naming the flags, their values and the rule.
  """
  named = errors.flags_named
  for values, message in (
      (dict(do_train=do_train, do_predict=do_predict), _action_problem(do_train, do_predict)),
      (dict(do_train=do_train, train_file=train_file),
       _train_file_problem(do_train, train_file)),
      (dict(do_predict=do_predict, predict_file=predict_file),
       _predict_file_problem(do_predict, predict_file)),
      (dict(max_seq_length=max_seq_length, max_query_length=max_query_length),
       _length_problem(max_seq_length, max_query_length)),
      (dict(doc_stride=doc_stride), None if doc_stride >= 1 else "must be a positive integer")):
    if message:
      raise errors.UserError(f"{named(**values)}: {message}")


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


def train(run: startup.Run, examples, writer: squad_features.FeatureWriter) -> None:
  """Trains on the examples' features (writer's record); writes adapter_model/."""
  options = run.options
  logging.info("***** Running training *****")
  logging.info("  Num orig examples = %d", len(examples))
  logging.info("  Num split examples = %d", writer.num_features)
  logging.info("  Batch size = %d", options.train_batch_size)
  logging.info("  Num steps = %d", run.settings.num_train_steps)
  batch_size = options.train_batch_size
  if options.pack_sequences:
    batch_size = packed_rows_per_batch(run, writer.filename, batch_size)
  dataset = train_dataset(writer.filename, options.max_seq_length, batch_size,
                          model_setup.shuffle_seed(options.seed),
                          options.pad_to_multiple_of, options.group_by_length,
                          options.pack_sequences)
  version_2 = run.config["version_2_with_negative"]
  startup.train(run, span_loss, dataset, {"task": "squad", "version_2_with_negative": version_2})


def predict(run: startup.Run, examples, writer: squad_features.FeatureWriter, batch_size: int,
            n_best_size: int, max_answer_length: int, null_score_diff_threshold: float,
            verbose_logging: bool):
  """predictions.json, nbest_predictions.json (and null_odds.json for v2).

  Returns:
    The predictions and the null odds (postprocess.write_predictions).
  """
  options, features = run.options, writer.features
  logging.info("***** Running predictions *****")
  logging.info("  Num orig examples = %d", len(examples))
  logging.info("  Num split examples = %d", len(features))
  logging.info("  Batch size = %d", batch_size)
  if options.pack_sequences:
    batch_size = packed_rows_per_batch(run, writer.filename, batch_size)
  dataset = predict_dataset(writer.filename, options.max_seq_length, batch_size, len(features),
                            pad_last_batch=options.use_tpu or options.use_xla,
                            pad_to_multiple_of=options.pad_to_multiple_of,
                            pack_sequences=options.pack_sequences)
  outputs = prediction.predict(run.strategy, run.model, dataset, jit_compile=options.use_xla,
                               iterations_per_loop=options.iterations_per_loop)
  output_dir = options.output_dir
  predictions, _, null_odds = postprocess.write_predictions(
      examples, features, raw_results(outputs, features), n_best_size, max_answer_length,
      options.do_lower_case,
      posixpath.join(output_dir, "predictions.json"),
      posixpath.join(output_dir, "nbest_predictions.json"),
      posixpath.join(output_dir, "null_odds.json"),
      version_2_with_negative=run.config["version_2_with_negative"],
      null_score_diff_threshold=null_score_diff_threshold, verbose_logging=verbose_logging)
  return predictions, null_odds


def main(argv, flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Runs what the flags ask for (returns None: app.run exits with main's result)."""
  del argv
  fv = flag_values
  logging.set_verbosity(logging.INFO)
  path_flags.check_path_flags(fv, dict(
      cli_flags.ENCODER_PATH_FLAGS, **cli_flags.ADAPTER_PATH_FLAGS,
      train_file=path_checks.INPUT_FILE, predict_file=path_checks.INPUT_FILE))
  validate(fv.do_train, fv.do_predict, fv.train_file, fv.predict_file,
           fv.max_seq_length, fv.max_query_length, fv.doc_stride)
  options = cli_options.run_options(fv)
  base = startup.read_base(options)
  tokenizer = tokenization.FullTokenizer(base.vocab_file, fv.do_lower_case)

  # Every input file is read and the model loaded before anything is written,
  # so that a bad file or checkpoint fails fast and leaves output_dir as it was.
  version_2 = fv.version_2_with_negative
  train_examples = read_train_examples(fv.train_file, version_2) if fv.do_train else None
  eval_examples = (squad_examples.read_squad_examples(fv.predict_file, False, version_2)
                   if fv.do_predict else None)
  score = fv.do_predict and has_answers(fv.predict_file, version_2)
  run = startup.set_up(
      options, base, modeling.BertSpanLabeler, len(train_examples) if fv.do_train else None,
      adapter_metadata={"task": "squad"}, task_name="squad",
      version_2_with_negative=version_2, doc_stride=fv.doc_stride,
      max_query_length=fv.max_query_length)

  startup.write_run_config(run)
  convert = dict(tokenizer=tokenizer, max_seq_length=fv.max_seq_length,
                 doc_stride=fv.doc_stride, max_query_length=fv.max_query_length)
  if fv.do_train:
    train_writer = write_features(train_examples, path=posixpath.join(
        fv.output_dir, "train.tf_record"), is_training=True, **convert)
  if fv.do_predict:
    eval_writer = write_features(eval_examples, path=posixpath.join(
        fv.output_dir, "eval.tf_record"), is_training=False, **convert)
  if fv.do_train:
    train(run, train_examples, train_writer)
  if not fv.do_predict:
    return
  predictions, null_odds = predict(
      run, eval_examples, eval_writer, fv.predict_batch_size, n_best_size=fv.n_best_size,
      max_answer_length=fv.max_answer_length, verbose_logging=fv.verbose_logging,
      null_score_diff_threshold=fv.null_score_diff_threshold)
  if not score:
    logging.info("%s has no gold answers: not scored.", fv.predict_file)
    return
  write_eval_results(posixpath.join(fv.output_dir, "eval_results.json"), fv.predict_file,
                     predictions, null_odds, version_2, run.global_step, run.checkpoint_path)


if __name__ == "__main__":
  define_flags()
  app.run(errors.exit_on_user_error(main), flags_parser=flag_checks.parse_flags)
