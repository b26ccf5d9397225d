r"""Scores SQuAD predictions like the official evaluate-v1.1.py / v2.0.py.

  python squad_evaluate.py --version=1.1 dev-v1.1.json predictions.json
  python squad_evaluate.py --version=2.0 dev-v2.0.json predictions.json \
      --na_prob_file=null_odds.json [--out_file=eval.json]

Prints the result JSON as the official scripts do (v1.1: one line; v2.0:
indent 2, or written to --out_file instead). Paths may be any gfile path.
"""

from absl import app
from absl import flags
from absl import logging

import file_io
import squad_data
import squad_metrics

_VERSION = flags.DEFINE_enum("version", None, ["1.1", "2.0"],
                             "SQuAD version of the dataset file.")
_NA_PROB_FILE = flags.DEFINE_string(
    "na_prob_file", None,
    "v2.0: JSON {qid: no-answer score} (run_squad's null_odds.json); adds "
    "the best_* threshold results.")
_NA_PROB_THRESH = flags.DEFINE_float(
    "na_prob_thresh", 1.0,
    "v2.0: predict no-answer when the na_prob_file score is above this.")
_OUT_FILE = flags.DEFINE_string(
    "out_file", None, "Write the result JSON here (v2.0: instead of printing).")


def run(version, data_file, pred_file, na_prob_file=None, na_prob_thresh=1.0,
        out_file=None) -> dict:
  """Evaluates files; returns the result dict and writes/prints the JSON."""
  dataset_json = squad_data.load_squad_json(data_file)
  predictions = squad_data.read_json(pred_file)
  if not isinstance(predictions, dict):
    raise ValueError("%s: expected a JSON object {question id: answer}" %
                     pred_file)
  if version == "1.1":
    if na_prob_file:
      raise ValueError("--na_prob_file only applies to --version=2.0")
    # The official v1.1 script warns (and goes on) on other versions.
    if dataset_json.get("version") != "1.1":
      logging.warning("Evaluation expects v-1.1, but got dataset with v-%s",
                      dataset_json.get("version"))
    results = squad_metrics.evaluate_v1_1(dataset_json["data"], predictions)
  else:
    na_probs = squad_data.read_json(na_prob_file) if na_prob_file else None
    results = squad_metrics.evaluate_v2_0(dataset_json["data"], predictions,
                                          na_probs, na_prob_thresh)
  if out_file:
    file_io.atomic_write(
        out_file, squad_metrics.format_results(results, version, for_file=True))
  if version == "1.1" or not out_file:
    print(squad_metrics.format_results(results, version))
  return results


def main(argv):
  if len(argv) != 3:
    raise app.UsageError(
        "usage: squad_evaluate.py --version=1.1|2.0 data.json predictions.json "
        "[--na_prob_file=null_odds.json] [--out_file=eval.json]")
  if _VERSION.value is None:
    raise app.UsageError("--version=1.1 or --version=2.0 is required")
  run(_VERSION.value, argv[1], argv[2], _NA_PROB_FILE.value,
      _NA_PROB_THRESH.value, _OUT_FILE.value)


if __name__ == "__main__":
  app.run(main)
