r"""Official SQuAD v1.1 and v2.0 evaluation (exact match and F1).

Definitions: answers are normalised (lower-case, punctuation removed, the
articles a/an/the removed, whitespace collapsed); exact match and token F1
take the max over the gold answers; scores are percentages. SQuAD v2.0 also
scores unanswerable questions (gold "" -> only "" is right) and, given
per-question null odds, the best threshold for answering "".

Model Garden's `official/nlp/tools/squad_evaluate_v1_1.py` / `v2_0.py` are
copies of the official per-question functions, which we reuse. Their
`evaluate` functions are not the official output, so the aggregation is
written here:
* v1.1: Model Garden returns fractions under "exact_match" / "final_f1";
  the official script returns percentages under "exact_match" / "f1"
  (computed as 100.0 * sum / total, which we keep for identical floats).
* v2.0: Model Garden drops questions without a prediction from the totals,
  always adds best-threshold results (as "final_*") and precision-recall
  "pr_*" entries; the official script counts every question, adds
  best_exact / best_exact_thresh / best_f1 / best_f1_thresh only with a
  null-odds file, and has no pr_* entries without an image directory.

As a command, it prints what the official scripts print:

  python -m adapter_bert.squad.evaluate --version=1.1 dev-v1.1.json predictions.json
  python -m adapter_bert.squad.evaluate --version=2.0 dev-v2.0.json predictions.json \
      --na-prob-file=null_odds.json [--out-file=eval.json]

The options are the official v2.0 script's (`--out-file/-o`,
`--na-prob-file/-n`, `--na-prob-thresh/-t`), also spelt as this project's
other flags are (`--out_file`, `--na_prob_file`, `--na_prob_thresh`);
`--version` says which of the two official scripts to follow.

Prints the result JSON as the official scripts do (v1.1: one line; v2.0:
indent 2, or written to --out-file instead). Paths may be any gfile path.
"""

import argparse
import collections
import json
from typing import Dict, List, Mapping, Optional

from absl import logging
import tensorflow as tf

from official.nlp.tools import squad_evaluate_v1_1 as _mg_v1
from official.nlp.tools import squad_evaluate_v2_0 as _mg_v2
from adapter_bert import errors
from adapter_bert.squad import examples as squad_examples
from adapter_bert.storage import file_io
from adapter_bert.storage import input_files
from adapter_bert.storage import path_checks

# Per-question definitions, identical to the official scripts.
normalize_answer = _mg_v1._normalize_answer  # pylint: disable=protected-access
exact_match_score = _mg_v1._exact_match_score  # pylint: disable=protected-access
f1_score = _mg_v1._f1_score  # pylint: disable=protected-access
# v2.0 differs from v1.1 only for empty answers: F1 is 1 if both are empty.
compute_exact = _mg_v2._compute_exact  # pylint: disable=protected-access
compute_f1 = _mg_v2._compute_f1  # pylint: disable=protected-access


def _questions(dataset):
  for article in dataset:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        yield qa


def evaluate_v1_1(dataset, predictions: Mapping[str, str]) -> Dict[str, float]:
  """The official v1.1 `evaluate`.

  Args:
    dataset: the "data" list of a SQuAD file.
    predictions: {question id: answer text}. Missing questions score 0
      (logged, as the official script prints them).

  Returns:
    {"exact_match": %, "f1": %}.
  """
  f1 = exact_match = total = 0
  for qa in _questions(dataset):
    total += 1
    if qa["id"] not in predictions:
      logging.error("Unanswered question %s will receive score 0.", qa["id"])
      continue
    ground_truths = [answer["text"] for answer in qa["answers"]]
    if not ground_truths:
      # The official script fails here with max() of an empty list.
      raise ValueError(
          "question %r has no gold answers; SQuAD v2.0 files need "
          "version 2.0 evaluation" % (qa["id"],))
    prediction = predictions[qa["id"]]
    exact_match += _mg_v1._metric_max_over_ground_truths(  # pylint: disable=protected-access
        exact_match_score, prediction, ground_truths)
    f1 += _mg_v1._metric_max_over_ground_truths(  # pylint: disable=protected-access
        f1_score, prediction, ground_truths)
  if total == 0:
    raise ValueError("the dataset has no questions")
  exact_match = 100.0 * exact_match / total
  f1 = 100.0 * f1 / total
  return {"exact_match": exact_match, "f1": f1}


def evaluate_v2_0(dataset, predictions: Mapping[str, str],
                  na_probs: Optional[Mapping[str, float]] = None,
                  na_prob_thresh: float = 1.0) -> Dict[str, float]:
  """The official v2.0 evaluation (its `main` without plots).

  Args:
    dataset: the "data" list of a SQuAD file.
    predictions: {question id: answer text, "" for no answer}; must cover
      every question (the official script fails with a KeyError otherwise).
    na_probs: optional {question id: no-answer score}, e.g. run_squad's
      null_odds.json; questions scoring above `na_prob_thresh` count as
      answered "". When given, the best thresholds are reported too.
    na_prob_thresh: see `na_probs` (official default 1.0).

  Returns:
    OrderedDict exact, f1, total, HasAns_exact, HasAns_f1, HasAns_total,
    NoAns_exact, NoAns_f1, NoAns_total (the HasAns/NoAns groups only when the
    dataset has such questions), and with `na_probs` best_exact,
    best_exact_thresh, best_f1, best_f1_thresh.
  """
  qid_to_has_ans = _mg_v2._make_qid_to_has_ans(dataset)  # pylint: disable=protected-access
  if not qid_to_has_ans:
    raise ValueError("the dataset has no questions")
  missing = [qid for qid in qid_to_has_ans if qid not in predictions]
  if missing:
    raise ValueError("%d of %d questions have no prediction (first: %r)" %
                     (len(missing), len(qid_to_has_ans), missing[0]))
  have_na_probs = na_probs is not None
  if have_na_probs:
    missing = [qid for qid in qid_to_has_ans if qid not in na_probs]
    if missing:
      raise ValueError("%d questions have no null odds (first: %r)" %
                       (len(missing), missing[0]))
  else:
    na_probs = {k: 0.0 for k in predictions}

  has_ans_qids = [k for k, v in qid_to_has_ans.items() if v]
  no_ans_qids = [k for k, v in qid_to_has_ans.items() if not v]
  exact_raw, f1_raw = _mg_v2._get_raw_scores(dataset, predictions)  # pylint: disable=protected-access
  exact_thresh = _mg_v2._apply_no_ans_threshold(  # pylint: disable=protected-access
      exact_raw, na_probs, qid_to_has_ans, na_prob_thresh)
  f1_thresh = _mg_v2._apply_no_ans_threshold(  # pylint: disable=protected-access
      f1_raw, na_probs, qid_to_has_ans, na_prob_thresh)
  out_eval = _mg_v2._make_eval_dict(exact_thresh, f1_thresh)  # pylint: disable=protected-access
  if has_ans_qids:
    _mg_v2._merge_eval(  # pylint: disable=protected-access
        out_eval, _mg_v2._make_eval_dict(  # pylint: disable=protected-access
            exact_thresh, f1_thresh, qid_list=has_ans_qids), "HasAns")
  if no_ans_qids:
    _mg_v2._merge_eval(  # pylint: disable=protected-access
        out_eval, _mg_v2._make_eval_dict(  # pylint: disable=protected-access
            exact_thresh, f1_thresh, qid_list=no_ans_qids), "NoAns")
  if have_na_probs:
    best_exact, exact_t = _mg_v2._find_best_thresh(  # pylint: disable=protected-access
        predictions, exact_raw, na_probs, qid_to_has_ans)
    best_f1, f1_t = _mg_v2._find_best_thresh(  # pylint: disable=protected-access
        predictions, f1_raw, na_probs, qid_to_has_ans)
    out_eval["best_exact"] = best_exact
    out_eval["best_exact_thresh"] = exact_t
    out_eval["best_f1"] = best_f1
    out_eval["best_f1_thresh"] = f1_t
  return out_eval


def evaluate_predictions(dataset_file: str, predictions: Mapping[str, str],
                         version_2_with_negative: bool,
                         null_odds: Optional[Mapping[str, float]] = None
                         ) -> Dict[str, float]:
  """Scores predictions against a SQuAD file (for run_squad --predict_file).

  Args:
    dataset_file: SQuAD JSON with answers (any gfile path).
    predictions: {question id: text}, as written to predictions.json.
    version_2_with_negative: use the v2.0 evaluation.
    null_odds: v2 only: {question id: null score diff} (null_odds.json),
      which adds the best_* thresholds.

  Returns:
    The official result dict (see `evaluate_v1_1` / `evaluate_v2_0`).
  """
  dataset = squad_examples.load_squad_json(dataset_file)["data"]
  if version_2_with_negative:
    return evaluate_v2_0(dataset, predictions, na_probs=null_odds)
  if null_odds is not None:
    raise ValueError("null_odds only apply to SQuAD v2.0 evaluation")
  return evaluate_v1_1(dataset, predictions)


def format_results(results: Mapping[str, float], version: str,
                   for_file: bool = False) -> str:
  """The official scripts' output text.

  v1.1 prints json.dumps(result); v2.0 prints json.dumps(result, indent=2)
  and writes json.dump(result) (no indent) to --out-file.
  """
  if version == "2.0" and not for_file:
    return json.dumps(collections.OrderedDict(results), indent=2)
  return json.dumps(collections.OrderedDict(results))


def run(version, data_file, pred_file, na_prob_file=None, na_prob_thresh=1.0,
        out_file=None) -> dict:
  """Evaluates files; returns the result dict and writes/prints the JSON."""
  dataset_json = squad_examples.load_squad_json(data_file)
  predictions = input_files.read_json(pred_file)
  if not isinstance(predictions, dict):
    raise errors.UserError("expected a JSON object {question id: answer}", pred_file)
  if version == "1.1":
    if na_prob_file:
      raise ValueError("--na_prob_file only applies to --version=2.0")
    # The official v1.1 script warns (and goes on) on other versions.
    if dataset_json.get("version") != "1.1":
      logging.warning("Evaluation expects v-1.1, but got dataset with v-%s",
                      dataset_json.get("version"))
    results = evaluate_v1_1(dataset_json["data"], predictions)
  else:
    na_probs = input_files.read_json(na_prob_file) if na_prob_file else None
    results = evaluate_v2_0(dataset_json["data"], predictions,
                                          na_probs, na_prob_thresh)
  if out_file:
    file_io.atomic_write(
        out_file, format_results(results, version, for_file=True), what="the eval results")
  if version == "1.1" or not out_file:
    print(format_results(results, version))
  return results


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="python -m adapter_bert.squad.evaluate",
      description="Official evaluation for SQuAD v1.1 or v2.0 (as evaluate-v1.1.py / "
                  "evaluate-v2.0.py).")
  parser.add_argument("--version", required=True, choices=["1.1", "2.0"],
                      help="SQuAD version of the dataset file: which official script to follow.")
  parser.add_argument("data_file", metavar="data.json", help="Input data JSON file.")
  parser.add_argument("pred_file", metavar="pred.json",
                      help="Model predictions: JSON {question id: answer text}.")
  parser.add_argument("--out-file", "--out_file", "-o", dest="out_file", metavar="eval.json",
                      help="Write the result JSON to this file (v2.0: instead of stdout).")
  parser.add_argument("--na-prob-file", "--na_prob_file", "-n", dest="na_prob_file",
                      metavar="na_prob.json",
                      help="v2.0: model estimates of the probability of no answer, JSON "
                           "{question id: score} (run_squad's null_odds.json); adds the "
                           "best_* threshold results.")
  parser.add_argument("--na-prob-thresh", "--na_prob_thresh", "-t", dest="na_prob_thresh",
                      type=float, default=1.0,
                      help='v2.0: predict "" if the no-answer probability exceeds this '
                           "(default = 1.0).")
  return parser


def main(argv: Optional[List[str]] = None) -> dict:
  """Parses `argv` (default: sys.argv[1:]) and runs `run`.

  A usage mistake prints the usage and exits 2 (argparse's convention); a path
  or file that is not what it should be ends as the other commands' user
  errors do: one `ERROR:` line, exit status 2.
  """
  parser = _parser()
  args = parser.parse_args(argv)
  if args.na_prob_file and args.version != "2.0":
    parser.error("--na-prob-file only applies to --version=2.0")
  try:
    for what, path, kind in (("argument data.json", args.data_file, path_checks.INPUT_FILE),
                             ("argument pred.json", args.pred_file, path_checks.INPUT_FILE),
                             ("flag --na-prob-file", args.na_prob_file, path_checks.INPUT_FILE),
                             ("flag --out-file", args.out_file, path_checks.OUTPUT_FILE)):
      if path:
        path_checks.check(path, kind, f"{what}={path}" if what.startswith("flag") else
                          f"{what} {path}")
    return run(args.version, args.data_file, args.pred_file, args.na_prob_file,
               args.na_prob_thresh, args.out_file)
  except (errors.UserError, ValueError, OSError, tf.errors.OpError) as e:
    errors.exit_with_message(" ".join(str(e).split("\n")))


if __name__ == "__main__":
  main()
