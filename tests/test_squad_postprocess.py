"""squad_postprocess: n-best lists, text alignment, null answers, files.

Logits are hand-built; expected candidates are enumerated by hand in the
comments following the original write_predictions.
"""

import collections
import json
import math
import os
import uuid

import numpy as np
import pytest
import tensorflow as tf

from adapter_bert.squad import examples as squad_examples
from adapter_bert.squad import features as squad_features
from adapter_bert.squad import postprocess
from adapter_bert import tokenization

_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "it", "was", "steve", "smith",
          "'", "s", "car", ".", "whose", "?", "the", "man", "went", "to",
          "store", "and", "bought", "a", "gallon", "of", "milk", "who"]
_CONTEXT = "It was Steve Smith's car."
# Feature tokens (max_seq_length 16, one span):
#   0 [CLS] 1 whose 2 car 3 ? 4 [SEP] 5 it 6 was 7 steve 8 smith 9 ' 10 s
#   11 car 12 . 13 [SEP] 14-15 padding
# token_to_orig_map: 5:0 6:1 7:2 8:3 9:3 10:3 11:4 12:4 ("Smith's" is one
# whitespace token, "car." another).
_SEQ = 16


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
  path.write_text("\n".join(_VOCAB) + "\n")
  return tokenization.FullTokenizer(str(path), do_lower_case=True)


def _convert(examples, tokenizer, max_seq_length=_SEQ, doc_stride=3):
  feats = []
  squad_features.convert_examples_to_features(
      examples, tokenizer, max_seq_length, doc_stride, 8, False, feats.append)
  return feats


def _logits(values, length=_SEQ, default=-10.0):
  out = [default] * length
  for i, v in values.items():
    out[i] = v
  return out


def _smith(tokenizer, qids=("q",)):
  examples = [squad_examples.SquadExample(q, "Whose car?", _CONTEXT.split())
              for q in qids]
  feats = _convert(examples, tokenizer)
  assert feats[0].tokens[7:11] == ["steve", "smith", "'", "s"]
  return examples, feats


# Top-3 starts 7 (5.0), 8 (3.0), 11 (2.0); top-3 ends 8 (4.0), 10 (2.5),
# 12 (1.0). Valid (start <= end) pairs, by score:
#   (7,8) 9.0 "Steve Smith"   (7,10) 7.5 "Steve Smith's"   (8,8) 7.0 "Smith"
#   (7,12) 6.0   (8,10) 5.5   (8,12) 4.0   (11,12) 3.0
_START = {0: 1.0, 7: 5.0, 8: 3.0, 11: 2.0}
_END = {0: 0.5, 8: 4.0, 10: 2.5, 12: 1.0}


def _softmax(scores):
  exps = [math.exp(s - max(scores)) for s in scores]
  return [e / sum(exps) for e in exps]


def _result(feature, start, end):
  return postprocess.RawResult(feature.unique_id, _logits(start),
                                     _logits(end))


def _compute(examples, feats, results, v2=False, threshold=0.0, n_best=3,
             max_answer_length=30):
  return postprocess.compute_predictions(
      examples, feats, results, n_best, max_answer_length, True, v2,
      threshold)


def test_nbest_and_original_text_alignment(tokenizer):
  examples, feats = _smith(tokenizer)
  preds, nbest, null = _compute(examples, feats,
                                [_result(feats[0], _START, _END)])
  # "steve smith" is projected onto "Steve Smith's" -> "Steve Smith".
  assert preds == {"q": "Steve Smith"}
  assert null == {}
  probs = _softmax([9.0, 7.5, 7.0])
  assert [dict(e) for e in nbest["q"]] == [
      {"text": "Steve Smith", "probability": pytest.approx(probs[0]),
       "start_logit": 5.0, "end_logit": 4.0},
      {"text": "Steve Smith's", "probability": pytest.approx(probs[1]),
       "start_logit": 5.0, "end_logit": 2.5},
      {"text": "Smith", "probability": pytest.approx(probs[2]),
       "start_logit": 3.0, "end_logit": 4.0}]
  # max_answer_length 1 leaves only the one-piece answer (8,8).
  preds, nbest, _ = _compute(examples, feats, [_result(feats[0], _START, _END)],
                             max_answer_length=1)
  assert preds == {"q": "Smith"} and len(nbest["q"]) == 1
  assert nbest["q"][0]["probability"] == 1.0


def test_get_final_text_cases():
  gft = postprocess.get_final_text
  assert gft("steve smith", "Steve Smith's", True) == "Steve Smith"
  assert gft("Steve Smith", "Steve Smith's", False) == "Steve Smith"
  assert gft("steve smith ' s", "Steve Smith's", True) == "Steve Smith's"
  # Lower-casing strips accents; the alignment returns the original form.
  assert gft("jose", "José's", True) == "José"
  # Not found -> the whole original span.
  assert gft("bob", "Steve Smith's", True) == "Steve Smith's"


def test_softmax():
  assert postprocess._compute_softmax([]) == []
  assert postprocess._compute_softmax([1000.0, 1000.0]) == [0.5, 0.5]


def test_n_best_start_and_end_indexes_ties_go_to_the_lower_index(tokenizer):
  # The original's _get_best_indexes: the n_best_size largest logits, best
  # first, ties broken by the lower index. Starts 7, 8 and 11 tie at 5.0, so
  # n_best 2 keeps 7 and 8 (11 would give "car.", also 9.0); ends: 12 (4.0),
  # then the lowest-index of the -10.0s, 0 (invalid as an end after a start).
  examples, feats = _smith(tokenizer)
  results = [_result(feats[0], {7: 5.0, 8: 5.0, 11: 5.0}, {12: 4.0})]
  preds, nbest, _ = _compute(examples, feats, results, n_best=2)
  # Equal scores keep the enumeration order: start 7 before start 8.
  assert [(e["text"], e["start_logit"], e["end_logit"]) for e in nbest["q"]] == [
      ("Steve Smith's car.", 5.0, 4.0), ("Smith's car.", 5.0, 4.0)]
  assert preds == {"q": "Steve Smith's car."}
  # n_best 3 takes start 11 too: "car." joins, after the other two.
  _, nbest, _ = _compute(examples, feats, results, n_best=3)
  assert [e["text"] for e in nbest["q"]] == ["Steve Smith's car.", "Smith's car.", "car."]


def test_max_context_filter_and_min_null_over_spans(tokenizer):
  # Doc "the man went to the store and bought a gallon of milk ." (13
  # pieces), query 3 pieces, max_seq_length 11 -> 5 per span, stride 3:
  # spans (0,5), (3,5), (6,5), (9,4); 9 + 4 == 13 ends the loop.
  context = "The man went to the store and bought a gallon of milk ."
  ex = [squad_examples.SquadExample("m", "Who went?", context.split())]
  feats = _convert(ex, tokenizer, max_seq_length=11)
  assert [f.doc_span_index for f in feats] == [0, 1, 2, 3]
  # Piece 3 "to" is max context in span 0 (index 8), not in span 1 (index 5).
  assert feats[0].token_is_max_context[8] and not feats[1].token_is_max_context[5]
  results = [
      _result(feats[0], {8: 2.0}, {9: 2.0}),      # "to the": 4.0, allowed
      _result(feats[1], {5: 9.0}, {6: 9.0}),      # "to the": 18.0, not max ctx
      _result(feats[2], {0: -15.0}, {0: -15.0}),  # lowest null score: -30
      _result(feats[3], {}, {}),
  ]
  preds, nbest, null = _compute(ex, feats, results, v2=False, n_best=2)
  assert preds == {"m": "to the"}
  assert [e["text"] for e in nbest["m"]] == ["to the"]
  # v2: null = min over spans of start[0] + end[0] = -30 (span 2);
  # diff = -30 - 4.0 = -34 < 0 -> answer.
  preds, nbest, null = _compute(ex, feats, results, v2=True, n_best=2)
  assert null == {"m": -34.0} and preds == {"m": "to the"}
  assert [(e["text"], e["start_logit"]) for e in nbest["m"]] == [
      ("to the", 2.0), ("", -15.0)]


@pytest.mark.parametrize("threshold,expected", [
    (0.0, "Steve Smith"), (-7.5, "Steve Smith"), (-8.0, "")])
def test_v2_null_threshold(tokenizer, threshold, expected):
  examples, feats = _smith(tokenizer)
  preds, nbest, null = _compute(examples, feats,
                                [_result(feats[0], _START, _END)], v2=True,
                                threshold=threshold)
  # Null score 1.0 + 0.5 = 1.5; best non-null 9.0; diff -7.5, and "" is
  # predicted only when diff > threshold.
  assert null == {"q": -7.5}
  assert preds == {"q": expected}
  # Three non-null entries fill n_best 3; "" is appended after them.
  probs = _softmax([9.0, 7.5, 7.0, 1.5])
  assert [(e["text"], e["start_logit"], e["end_logit"]) for e in nbest["q"]] == [
      ("Steve Smith", 5.0, 4.0), ("Steve Smith's", 5.0, 2.5),
      ("Smith", 3.0, 4.0), ("", 1.0, 0.5)]
  assert [e["probability"] for e in nbest["q"]] == pytest.approx(probs)


def test_v2_null_first_in_nbest(tokenizer):
  examples, feats = _smith(tokenizer)
  start = {**_START, 0: 10.0}
  end = {**_END, 0: 10.0}
  results = [_result(feats[0], start, end)]
  preds, nbest, null = _compute(examples, feats, results, v2=True)
  # Top-3 starts now 0, 7, 8 and ends 0, 8, 10: candidates (7,8) 9.0,
  # (7,10) 7.5, (8,8) 7.0, (8,10) 5.5; null (0,0) = 20 leads.
  assert [e["text"] for e in nbest["q"]] == ["", "Steve Smith", "Steve Smith's"]
  assert null == {"q": 11.0} and preds == {"q": ""}
  preds, _, _ = _compute(examples, feats, results, v2=True, threshold=11.0)
  assert preds == {"q": "Steve Smith"}


def test_no_valid_span(tokenizer):
  examples, feats = _smith(tokenizer)
  results = [_result(feats[0], {0: 5.0}, {0: 5.0})]
  # v1.1: only (0, 0) is considered, which is not in the document ->
  # the original's nonce "empty" answer.
  preds, nbest, _ = _compute(examples, feats, results, n_best=1)
  assert preds == {"q": "empty"}
  assert [dict(e) for e in nbest["q"]] == [
      {"text": "empty", "probability": 1.0, "start_logit": 0.0,
       "end_logit": 0.0}]
  # v2: only the null answer; the original crashed here, Model Garden (and
  # we) predict "" with the null score as the diff.
  preds, nbest, null = _compute(examples, feats, results, v2=True, n_best=1)
  assert preds == {"q": ""} and null == {"q": 10.0}


def _read(path):
  with tf.io.gfile.GFile(path) as f:
    return f.read()


@pytest.mark.parametrize("v2", [False, True])
def test_write_predictions_files(tokenizer, v2):
  examples, feats = _smith(tokenizer, qids=("b", "a"))
  # numpy logits, as a prediction loop yields them.
  results = [postprocess.RawResult(
      np.int64(f.unique_id), np.array(_logits(_START), np.float32),
      np.array(_logits(_END), np.float32)) for f in feats]
  out = "ram://squad_pp_%s" % uuid.uuid4().hex
  paths = [os.path.join(out, n) for n in
           ("predictions.json", "nbest_predictions.json", "null_odds.json")]
  postprocess.write_predictions(examples, feats, results, 2, 30, True,
                                      *paths, version_2_with_negative=v2,
                                      null_score_diff_threshold=0.0)
  # Example order, indent 4, trailing newline: the original's format.
  assert _read(paths[0]) == ('{\n    "b": "Steve Smith",\n'
                             '    "a": "Steve Smith"\n}\n')
  nbest_text = _read(paths[1])
  nbest = json.loads(nbest_text, object_pairs_hook=collections.OrderedDict)
  assert list(nbest) == ["b", "a"]
  assert list(nbest["b"][0]) == ["text", "probability", "start_logit",
                                 "end_logit"]
  assert nbest_text == json.dumps(nbest, indent=4) + "\n"
  assert '"start_logit": 5.0,' in nbest_text
  if v2:
    assert _read(paths[2]) == '{\n    "b": -7.5,\n    "a": -7.5\n}\n'
    assert [e["text"] for e in nbest["a"]] == ["Steve Smith", "Steve Smith's",
                                               ""]
  else:
    assert not tf.io.gfile.exists(paths[2])
  assert sorted(tf.io.gfile.listdir(out)) == sorted(
      os.path.basename(p) for p in paths[:3 if v2 else 2])


def test_missing_result_raises_and_writes_nothing(tokenizer, tmp_path):
  examples, feats = _smith(tokenizer, qids=("b", "a"))
  out = tmp_path / "out"
  with pytest.raises(ValueError, match="1 of 2 features have no model result "
                     r"\(first missing unique_id: 1000000001\)"):
    postprocess.write_predictions(
        examples, feats, [_result(feats[0], _START, _END)], 3, 30, True,
        str(out / "p.json"), str(out / "n.json"), str(out / "o.json"), True)
  assert not out.exists()
