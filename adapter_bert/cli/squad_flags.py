"""run_squad.py's flags: the original's names, defaults and validate_flags_or_throw.

  define_squad_flags  the original run_squad.py flags and the adapter flags, with
                      validators that refuse a bad value when the flags are parsed
  validate            the same rules for flags set otherwise (in-process callers)
"""

from absl import flags

from adapter_bert.cli import flag_checks
from adapter_bert.cli import flags as cli_flags
from adapter_bert import errors


def define_squad_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
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


def validate(do_train, do_predict, train_file, predict_file, max_seq_length,
             max_query_length, doc_stride) -> None:
  """The original's validate_flags_or_throw, less what
  ModelOptions.read_checked_base checks (runtime/model_setup.py).

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
