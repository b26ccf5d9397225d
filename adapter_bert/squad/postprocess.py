"""SQuAD post-processing: start/end logits -> answer texts and JSON files.

The algorithm is google-research/bert `run_squad.py` `write_predictions`
(unchanged in adapter-bert). Model Garden's `squad_lib.postprocess_output`
is a fork of it that, with `xlnet_format=False`, computes the same n-best
lists, probabilities, null scores and predictions (same candidate order,
same filters, same `get_final_text` and `_compute_softmax`), so we call it
and only wrap the edges where it differs:

* results: the original crashed on a feature without a result, Model Garden
  silently skips it; we raise a clear error instead (a missing result is a
  bug in the prediction loop, and skipping would lower scores quietly).
  Logits are converted to Python floats first, as the original's `main` did,
  so numpy arrays can be passed and the JSON holds plain numbers.
* v2 with no non-null candidate at all: the original crashed (None has no
  start_logit); Model Garden predicts "" with score_diff = null score. We keep
  Model Garden's behaviour.
* writing: same format as the original (json.dumps(..., indent=4) + "\\n",
  OrderedDicts in example order, n-best keys text/probability/start_logit/
  end_logit), but each file is written atomically.
"""

import collections
import json
from typing import Dict, List, Tuple

from absl import logging

from official.nlp.data import squad_lib as _mg

from adapter_bert.storage import file_io

# The original's names, kept for callers and tests; the implementations are
# Model Garden's copies of the original functions.
get_final_text = _mg.get_final_text
_compute_softmax = _mg._compute_softmax  # pylint: disable=protected-access

RawResult = collections.namedtuple("RawResult",
                                   ["unique_id", "start_logits", "end_logits"])


def _as_python_results(all_results, all_features, all_examples) -> List[RawResult]:
  """Checks every example has a feature and every feature a result; converts
  logits to float lists."""
  results = [
      RawResult(unique_id=int(r.unique_id),
                start_logits=[float(x) for x in r.start_logits],
                end_logits=[float(x) for x in r.end_logits])
      for r in all_results
  ]
  featured = {f.example_index for f in all_features}
  if len(featured) < len(all_examples):  # Model Garden would fail on it with an IndexError.
    lacking = next(e for i, e in enumerate(all_examples) if i not in featured)
    raise ValueError("question %r has no feature; convert_examples_to_features gives "
                     "every example one" % (lacking.qas_id,))
  have = {r.unique_id for r in results}
  missing = [f.unique_id for f in all_features if f.unique_id not in have]
  if missing:
    raise ValueError(
        "%d of %d features have no model result (first missing unique_id: "
        "%d); every feature needs one" %
        (len(missing), len(all_features), missing[0]))
  return results


def compute_predictions(all_examples, all_features, all_results,
                        n_best_size: int, max_answer_length: int,
                        do_lower_case: bool,
                        version_2_with_negative: bool = False,
                        null_score_diff_threshold: float = 0.0,
                        verbose_logging: bool = False
                        ) -> Tuple[Dict[str, str], Dict[str, list],
                                   Dict[str, float]]:
  """The original's prediction logic, without writing files.

  Args:
    all_examples: `SquadExample`s, in the order used for the features.
    all_features: `InputFeatures` of those examples (prediction mode).
    all_results: `RawResult`s (any order), one per feature; logits may be
      lists or numpy arrays of length max_seq_length.
    n_best_size: candidates per example kept in the n-best list.
    max_answer_length: longest answer, in word pieces.
    do_lower_case: the tokenizer's setting (used to map answers back onto
      the original text).
    version_2_with_negative: consider the null answer ([CLS]).
    null_score_diff_threshold: predict "" when null score minus the best
      non-null score exceeds this.
    verbose_logging: log why answer text alignment fails.

  Returns:
    (predictions {qid: text}, nbest {qid: [OrderedDict(text, probability,
    start_logit, end_logit)]}, null score diffs {qid: float}, empty for v1.1),
    all OrderedDicts in example order.
  """
  results = _as_python_results(all_results, all_features, all_examples)
  return _mg.postprocess_output(
      all_examples=all_examples,
      all_features=all_features,
      all_results=results,
      n_best_size=n_best_size,
      max_answer_length=max_answer_length,
      do_lower_case=do_lower_case,
      version_2_with_negative=version_2_with_negative,
      null_score_diff_threshold=null_score_diff_threshold,
      xlnet_format=False,
      verbose=verbose_logging)


def _to_json(obj) -> str:
  """The original's exact file format."""
  return json.dumps(obj, indent=4) + "\n"


def write_predictions(all_examples, all_features, all_results,
                      n_best_size: int, max_answer_length: int,
                      do_lower_case: bool, output_prediction_file: str,
                      output_nbest_file: str, output_null_log_odds_file: str,
                      version_2_with_negative: bool = False,
                      null_score_diff_threshold: float = 0.0,
                      verbose_logging: bool = False
                      ) -> Tuple[Dict[str, str], Dict[str, list],
                                 Dict[str, float]]:
  """Writes predictions.json, nbest_predictions.json and (v2) null_odds.json.

  Arguments as `compute_predictions` plus the three output paths (any gfile
  path; the null-odds file is only written for v2, as in the original).
  Everything is computed before the first file is written, and each file is
  written atomically, so an error leaves no half-written outputs. The file a
  scorer reads, predictions.json, comes last: if it is this run's, so are
  the others, even after a kill between two of the writes.

  Returns:
    What `compute_predictions` returns, for callers that evaluate directly.
  """
  logging.info("Writing predictions to: %s", output_prediction_file)
  logging.info("Writing nbest to: %s", output_nbest_file)
  all_predictions, all_nbest_json, scores_diff_json = compute_predictions(
      all_examples, all_features, all_results, n_best_size, max_answer_length,
      do_lower_case, version_2_with_negative, null_score_diff_threshold,
      verbose_logging)
  outputs = [(output_nbest_file, _to_json(all_nbest_json), "the n-best predictions")]
  if version_2_with_negative:
    outputs.append((output_null_log_odds_file, _to_json(scores_diff_json), "the null odds"))
  outputs.append((output_prediction_file, _to_json(all_predictions), "the predictions"))
  for path, text, what in outputs:
    file_io.atomic_write(path, text, what=what)
  return all_predictions, all_nbest_json, scores_diff_json
