r"""Scores SQuAD predictions like the official evaluate-v1.1.py / v2.0.py.

  python -m squad.evaluate --version=1.1 dev-v1.1.json predictions.json
  python -m squad.evaluate --version=2.0 dev-v2.0.json predictions.json \
      --na-prob-file=null_odds.json [--out-file=eval.json]

The options are the official v2.0 script's (`--out-file/-o`,
`--na-prob-file/-n`, `--na-prob-thresh/-t`), also spelt as this project's
other flags are (`--out_file`, `--na_prob_file`, `--na_prob_thresh`);
`--version` says which of the two official scripts to follow.

Prints the result JSON as the official scripts do (v1.1: one line; v2.0:
indent 2, or written to --out-file instead). Paths may be any gfile path.
"""

import argparse
from typing import List, Optional

from absl import logging
import tensorflow as tf

import errors
from storage import file_io
from squad import data as squad_data
from squad import metrics as squad_metrics
from storage import input_files
from storage import path_checks


def run(version, data_file, pred_file, na_prob_file=None, na_prob_thresh=1.0,
        out_file=None) -> dict:
  """Evaluates files; returns the result dict and writes/prints the JSON."""
  dataset_json = squad_data.load_squad_json(data_file)
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
    results = squad_metrics.evaluate_v1_1(dataset_json["data"], predictions)
  else:
    na_probs = input_files.read_json(na_prob_file) if na_prob_file else None
    results = squad_metrics.evaluate_v2_0(dataset_json["data"], predictions,
                                          na_probs, na_prob_thresh)
  if out_file:
    file_io.atomic_write(
        out_file, squad_metrics.format_results(results, version, for_file=True))
  if version == "1.1" or not out_file:
    print(squad_metrics.format_results(results, version))
  return results


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="python -m squad.evaluate",
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
