"""adapter_bert.squad.evaluate: official SQuAD scores on hand-computed cases, and its command."""

import json
import os
import subprocess
import sys
import uuid

import pytest
import tensorflow as tf

from adapter_bert import errors
from adapter_bert.squad import evaluate as squad_evaluate

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DATA = os.path.join(_ROOT, "data", "squad")


def _dataset(qas):
  return [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]


def _q(qid, *golds):
  return {"id": qid, "question": "?",
          "answers": [{"text": g, "answer_start": 0} for g in golds]}


def test_normalize_answer():
  norm = squad_evaluate.normalize_answer
  assert norm("The  Cat!") == "cat"
  assert norm("An apple, a day.") == "apple day"
  assert norm("theater\tAnd\nTHE end") == "theater and end"  # words only
  assert norm("A.B.C") == "abc"
  assert norm("the") == ""


def test_exact_and_f1_per_question():
  assert squad_evaluate.exact_match_score("the Cat", "cat!")
  # [big, red, dog] vs [red, dog, barked]: 2 common, P = R = 2/3.
  assert squad_evaluate.f1_score("the big red dog",
                                "a red dog barked") == pytest.approx(2 / 3)
  assert squad_evaluate.f1_score("", "dog") == 0
  # v2.0: empty vs empty is a match; empty vs words is not.
  assert squad_evaluate.compute_f1("", "") == 1
  assert squad_evaluate.compute_f1("dog", "") == 0
  assert squad_evaluate.compute_exact("", "the") == 1  # "the" normalises to ""


_V1 = _dataset([_q("q1", "Steve Smith", "Smith"), _q("q2", "red dog barked"),
                _q("q3", "1874", "in 1874"), _q("q4", "x")])


def test_v11_hand_computed():
  preds = {"q1": "smith", "q2": "the big red dog", "q3": "in the year 1874"}
  # q1: matches gold "Smith" (EM 1, F1 1). q2: EM 0, F1 2/3.
  # q3: [in, year, 1874] vs "1874": P 1/3 R 1 -> 0.5; vs "in 1874": P 2/3
  # R 1 -> 0.8; max 0.8. q4: no prediction -> 0 but counted.
  result = squad_evaluate.evaluate_v1_1(_V1, preds)
  assert list(result) == ["exact_match", "f1"]
  assert result["exact_match"] == 25.0
  assert result["f1"] == pytest.approx(100.0 * (1 + 2 / 3 + 0.8) / 4)


def test_v11_rejects_question_without_answers():
  with pytest.raises(ValueError, match="'n1' has no gold answers"):
    squad_evaluate.evaluate_v1_1(_dataset([_q("n1")]), {"n1": ""})


_V2 = _dataset([_q("h1", "Steve Smith", "Smith"),
                _q("h2", "red dog barked", "."),  # "." normalises to "" -> dropped
                _q("n1"), _q("n2")])
_V2_PREDS = {"h1": "Smith", "h2": "the big red dog", "n1": "", "n2": "a dog"}
_V2_KEYS = ["exact", "f1", "total", "HasAns_exact", "HasAns_f1",
            "HasAns_total", "NoAns_exact", "NoAns_f1", "NoAns_total"]


def test_v20_without_null_odds():
  # exact: h1 1, h2 0, n1 1 ("" == ""), n2 0; f1: 1, 2/3, 1, 0.
  result = squad_evaluate.evaluate_v2_0(_V2, _V2_PREDS)
  assert list(result) == _V2_KEYS
  assert result == pytest.approx({
      "exact": 50.0, "f1": 100.0 * (1 + 2 / 3 + 1) / 4, "total": 4,
      "HasAns_exact": 50.0, "HasAns_f1": 100.0 * (1 + 2 / 3) / 2,
      "HasAns_total": 2, "NoAns_exact": 50.0, "NoAns_f1": 50.0,
      "NoAns_total": 2})


def test_v20_with_null_odds_and_best_thresholds():
  na = {"h1": -5.0, "h2": 2.0, "n2": 2.5, "n1": 3.0}
  result = squad_evaluate.evaluate_v2_0(_V2, _V2_PREDS, na)
  assert list(result) == _V2_KEYS + ["best_exact", "best_exact_thresh",
                                     "best_f1", "best_f1_thresh"]
  # Above 1.0 -> answered "": h2 (wrong, 0), n2 and n1 (right, 1).
  assert result["exact"] == 75.0 and result["f1"] == 75.0
  assert result["HasAns_exact"] == 50.0 and result["NoAns_f1"] == 100.0
  # Best threshold: start from 2 (all answered ""), walk up the odds:
  #   exact: h1 +1 -> 3 (at -5), h2 +0, n2 -1, n1 0 -> best 3/4 at -5.
  #   f1:    h1 +1 -> 3, h2 +2/3 -> 3.67 (at 2.0), n2 -1, n1 0.
  assert result["best_exact"] == 75.0 and result["best_exact_thresh"] == -5.0
  assert result["best_f1"] == pytest.approx(100.0 * (3 + 2 / 3) / 4)
  assert result["best_f1_thresh"] == 2.0


def test_v20_missing_prediction_or_odds_is_an_error():
  with pytest.raises(ValueError, match=r"1 of 4 questions have no prediction "
                     r"\(first: 'n2'\)"):
    squad_evaluate.evaluate_v2_0(_V2, {k: v for k, v in _V2_PREDS.items()
                                      if k != "n2"})
  with pytest.raises(ValueError, match="no null odds"):
    squad_evaluate.evaluate_v2_0(_V2, _V2_PREDS, {"h1": 0.0})


def _gold_predictions(path):
  preds = {}
  with open(path) as f:
    for article in json.load(f)["data"]:
      for p in article["paragraphs"]:
        for qa in p["qas"]:
          preds[qa["id"]] = qa["answers"][0]["text"] if qa["answers"] else ""
  return preds


def test_evaluate_predictions_on_sample_dev_files():
  v1 = os.path.join(_DATA, "dev-v1.1.json")
  assert squad_evaluate.evaluate_predictions(
      v1, _gold_predictions(v1), False) == {"exact_match": 100.0, "f1": 100.0}
  v2 = os.path.join(_DATA, "dev-v2.0.json")
  preds = _gold_predictions(v2)
  odds = {q: (5.0 if not t else -5.0) for q, t in preds.items()}
  result = squad_evaluate.evaluate_predictions(v2, preds, True, odds)
  assert result["exact"] == 100.0 and result["NoAns_total"] == 2
  assert result["best_f1"] == 100.0


def _write(path, text):
  with tf.io.gfile.GFile(path, "w") as f:
    f.write(text)
  return path


def test_run_v20_ram_paths_and_out_file(capsys):
  root = "ram://squad_eval_%s" % uuid.uuid4().hex
  tf.io.gfile.makedirs(root)
  data = _write(root + "/dev.json", json.dumps({"version": "v2.0",
                                                "data": _V2}))
  preds = _write(root + "/predictions.json", json.dumps(_V2_PREDS))
  odds = _write(root + "/null_odds.json", json.dumps(
      {"h1": -5.0, "h2": 2.0, "n2": 2.5, "n1": 3.0}))
  result = squad_evaluate.run("2.0", data, preds, odds)
  assert capsys.readouterr().out == json.dumps(result, indent=2) + "\n"
  squad_evaluate.run("2.0", data, preds, odds, out_file=root + "/eval.json")
  assert capsys.readouterr().out == ""  # official: file instead of stdout
  with tf.io.gfile.GFile(root + "/eval.json") as f:
    assert f.read() == json.dumps(result)
  # Malformed predictions: the error names the file and the position.
  bad = _write(root + "/bad.json", '{"h1": "x",\n "h2"}')
  with pytest.raises(errors.UserError, match=r"bad\.json:2: malformed JSON at column 6"):
    squad_evaluate.run("2.0", data, bad)


def _gold_predictions_file(tmp_path, name="dev-v1.1.json"):
  preds = tmp_path / ("predictions-" + name)
  preds.write_text(json.dumps(_gold_predictions(os.path.join(_DATA, name))))
  return str(preds)


def test_command_line_v11(tmp_path, capsys):
  # In-process: parses the same argv as
  # `python -m adapter_bert.squad.evaluate --version=1.1 data preds`.
  preds = _gold_predictions_file(tmp_path)
  squad_evaluate.main(["--version=1.1", os.path.join(_DATA, "dev-v1.1.json"), preds])
  assert capsys.readouterr().out == '{"exact_match": 100.0, "f1": 100.0}\n'


def test_command_line_v20_official_and_project_option_names(tmp_path, capsys):
  root = str(tmp_path)
  data = _write(root + "/dev.json", json.dumps({"version": "v2.0", "data": _V2}))
  preds = _write(root + "/predictions.json", json.dumps(_V2_PREDS))
  odds = _write(root + "/null_odds.json", json.dumps(
      {"h1": -5.0, "h2": 2.0, "n2": 2.5, "n1": 3.0}))
  expected = squad_evaluate.run("2.0", data, preds, odds, na_prob_thresh=2.2)
  capsys.readouterr()
  # Threshold 2.2: only n2 (2.5) and n1 (3.0) are answered "" -> h2 counts.
  assert expected["exact"] == 75.0
  assert expected["f1"] == pytest.approx(100.0 * (1 + 2 / 3 + 1 + 1) / 4)
  for options in (["--na-prob-file", odds, "--na-prob-thresh", "2.2"],  # official
                  ["-n", odds, "-t", "2.2"],
                  ["--na_prob_file=" + odds, "--na_prob_thresh=2.2"]):  # project
    assert squad_evaluate.main(["--version=2.0", data, preds] + options) == expected
    assert capsys.readouterr().out == json.dumps(expected, indent=2) + "\n"
  # Default threshold 1.0, as the official script.
  assert squad_evaluate.main(["--version", "2.0", data, preds, "-n", odds]) == (
      squad_evaluate.run("2.0", data, preds, odds))
  capsys.readouterr()
  # --out-file / -o / --out_file: the file instead of stdout (v2.0).
  for i, option in enumerate(["--out-file", "-o", "--out_file"]):
    out = "%s/eval%d.json" % (root, i)
    squad_evaluate.main(["--version=2.0", data, preds, option, out])
    assert capsys.readouterr().out == ""
    with open(out) as f:
      assert json.load(f) == squad_evaluate.run("2.0", data, preds)
    capsys.readouterr()


@pytest.mark.parametrize("argv,message", [
    (["only_one_file.json"], "the following arguments are required: --version, pred.json"),
    (["--version=1.1", "data.json"], "the following arguments are required: pred.json"),
    (["--version=3.0", "d.json", "p.json"], "argument --version: invalid choice: '3.0'"),
    (["--version=2.0", "d.json", "p.json", "-t", "high"],
     "argument --na-prob-thresh/--na_prob_thresh/-t: invalid float value: 'high'"),
    (["--version=1.1", "d.json", "p.json", "--na_prob_file=n.json"],
     "--na-prob-file only applies to --version=2.0"),
    (["--version=1.1", "d.json", "p.json", "--unknown"], "unrecognized arguments: --unknown"),
])
def test_command_line_usage_errors_exit_2(argv, message, capsys):
  with pytest.raises(SystemExit) as exit_info:
    squad_evaluate.main(argv)
  assert exit_info.value.code == 2
  captured = capsys.readouterr()
  assert captured.out == ""
  assert captured.err.startswith("usage: python -m adapter_bert.squad.evaluate ")
  # The usage (wrapped to the terminal's width), then one error line.
  usage, error = captured.err.rstrip("\n").rsplit("\n", 1)
  assert usage.rstrip().endswith("data.json pred.json")
  assert error.startswith("python -m adapter_bert.squad.evaluate: error: " + message)


def test_command_line_bad_file_exits_2_with_the_error(tmp_path, capsys):
  bad = _write(str(tmp_path / "bad.json"), '{"h1": "x",\n "h2"}')
  with pytest.raises(SystemExit) as exit_info:
    squad_evaluate.main(["--version=1.1", os.path.join(_DATA, "dev-v1.1.json"), bad])
  assert exit_info.value.code == 2
  captured = capsys.readouterr()
  assert captured.out == ""
  assert captured.err.startswith("ERROR: %s:2: malformed JSON at column 6" % bad)


def test_python_dash_m_from_another_directory(tmp_path):
  # The documented command, in a fresh process whose cwd is not the
  # repository: the installed package is found, predictions are read relative
  # to the cwd, and a usage mistake is argparse's message, not a traceback.
  _gold_predictions_file(tmp_path)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", COLUMNS="80")  # COLUMNS: usage width
  command = [sys.executable, "-m", "adapter_bert.squad.evaluate", "--version=1.1",
             os.path.join(_DATA, "dev-v1.1.json"), "predictions-dev-v1.1.json"]
  result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout == '{"exact_match": 100.0, "f1": 100.0}\n'
  result = subprocess.run(command[:-1], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
  assert result.returncode == 2, result.stderr[-3000:]
  assert result.stdout == ""
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  # (Anything TensorFlow logs while importing would come before the usage.)
  assert "usage: python -m adapter_bert.squad.evaluate [-h] --version {1.1,2.0}" in result.stderr
  assert result.stderr.endswith(
      "\npython -m adapter_bert.squad.evaluate: error: the following arguments are required: "
      "pred.json\n"), result.stderr[-3000:]
