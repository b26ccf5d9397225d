"""Examples with nothing to read, through each command as a user runs it: an empty,
blank or control-character text in a classification or multi-task file, and a
SQuAD question whose context is empty or shorter than the stride, each get a
prediction (SQuAD v2.0: the empty answer), padded and packed."""

import json
import os

import numpy as np
import pytest

import run_multitask
import run_squad
from run_harness import run_main

# Texts with nothing to read, and two with much: mixed scripts, far beyond 32 tokens.
TEXTS = ["", "   ", "\x00\x07\x1b", "\u200b\ufeff", "Привет 中文 🙂 the movie",
         "the movie " * 300]


def _encoder(base):
  return dict(bert_config_file=base["bert_config_file"], vocab_file=base["vocab_file"],
              init_checkpoint=base["init_checkpoint"], adapter_size=8, max_seq_length=32,
              predict_batch_size=4)


def _write_tsv(directory, name, rows):
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
    f.write("".join("\t".join(row) + "\n" for row in rows))


def _probabilities(path):
  with open(path) as f:
    return np.array([[float(x) for x in line.split("\t")] for line in f.read().splitlines()])


@pytest.mark.parametrize("pack", [False, True])
def test_classifier_predicts_every_text(base, tmp_path, pack):
  data = str(tmp_path / "data")
  _write_tsv(data, "test.tsv", [["sentence"]] + [[t] for t in TEXTS])
  out = str(tmp_path / "out")
  run_main(**_encoder(base), task_name="tsv", data_dir=data, output_dir=out, do_predict=True,
           labels="pos,neg", pack_sequences=pack)
  probabilities = _probabilities(os.path.join(out, "test_results.tsv"))
  assert probabilities.shape == (len(TEXTS), 2)
  np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-6)


def test_multitask_predicts_every_text(base, tmp_path):
  dirs = []
  for name in ("one", "two"):
    d = str(tmp_path / name)
    _write_tsv(d, "train.tsv", [["sentence", "label"], ["the movie", "p"], ["", "q"]])
    _write_tsv(d, "test.tsv", [["sentence"]] + [[t] for t in TEXTS])
    dirs.append(d)
  out = str(tmp_path / "out")
  run_main(run_multitask, **_encoder(base), task_name="tsv,tsv", data_dir=",".join(dirs),
           output_dir=out, do_predict=True)
  for name in ("one", "two"):
    probabilities = _probabilities(os.path.join(out, name, "test_results.tsv"))
    assert probabilities.shape == (len(TEXTS), 2)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-6)


@pytest.mark.parametrize("version_2", [False, True])
def test_squad_predicts_every_question(base, tmp_path, version_2):
  """Empty, blank and control-character contexts, a context shorter than
  --doc_stride, empty and very long questions."""
  contexts = {"empty": "", "blank": " \n\t", "control": "\x00\x07", "short": "movie",
              "long": "the movie " * 40}
  paragraphs = [{"context": c, "qas": [{"id": name, "question": "the movie?", "answers": []}]}
                for name, c in contexts.items()]
  paragraphs[-1]["qas"] += [{"id": "no question", "question": "", "answers": []},
                            {"id": "long question", "question": "movie " * 100, "answers": []}]
  predict_file = str(tmp_path / "predict.json")
  with open(predict_file, "w") as f:
    json.dump({"version": "2.0" if version_2 else "1.1",
               "data": [{"title": "t", "paragraphs": paragraphs}]}, f)
  out = str(tmp_path / "out")
  run_main(run_squad, **_encoder(base), output_dir=out, do_predict=True,
           predict_file=predict_file, doc_stride=8, max_query_length=8,
           version_2_with_negative=version_2)
  with open(os.path.join(out, "predictions.json")) as f:
    predictions = json.load(f)
  assert list(predictions) == list(contexts) + ["no question", "long question"]
  nothing = "" if version_2 else "empty"
  assert [predictions[q] for q in ("empty", "blank", "control")] == [nothing] * 3
