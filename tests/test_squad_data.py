"""squad/examples and squad/features: reading, doc spans, max context, answer positions, records.

Expected spans / maps / positions are worked out by hand in the comments
from the original run_squad.py algorithm, on a tiny hand-written vocab.
"""

import json
import os
import uuid

import pytest
import tensorflow as tf

from adapter_bert import errors
from adapter_bert.squad import examples as squad_examples
from adapter_bert.squad import features as squad_features
from adapter_bert.squad import postprocess
from adapter_bert import tokenization

# "gallon" is deliberately missing so that it splits into gall ##on.
_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "man", "went", "to",
          "store", "and", "bought", "a", "gall", "##on", "of", "milk", ".",
          "who", "?", "what"]
_CONTEXT = "The man went to the store and bought a gallon of milk."
# Word pieces of _CONTEXT, with the index of their whitespace token:
#   0 the/0 1 man/1 2 went/2 3 to/3 4 the/4 5 store/5 6 and/6 7 bought/7
#   8 a/8 9 gall/9 10 ##on/9 11 of/10 12 milk/11 13 ./11
_TOK_TO_ORIG = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 10, 11, 11]
_PIECES = ["the", "man", "went", "to", "the", "store", "and", "bought", "a",
           "gall", "##on", "of", "milk", "."]


def _ram(name):
  return "ram://squad_data_test_%s/%s" % (uuid.uuid4().hex, name)


def _write_json(path, obj):
  tf.io.gfile.makedirs(os.path.dirname(path))
  with tf.io.gfile.GFile(path, "w") as f:
    f.write(json.dumps(obj))
  return path


def _squad(qas, context=_CONTEXT, version="1.1"):
  return {"version": version,
          "data": [{"title": "t", "paragraphs": [{"context": context,
                                                   "qas": qas}]}]}


def _qa(qid, question, answer=None, context=_CONTEXT, impossible=None):
  qa = {"id": qid, "question": question, "answers": []}
  if answer is not None:
    qa["answers"] = [{"text": answer, "answer_start": context.index(answer)}]
  if impossible is not None:
    qa["is_impossible"] = impossible
  return qa


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
  path.write_text("\n".join(_VOCAB) + "\n")
  return tokenization.FullTokenizer(str(path), do_lower_case=True)


def _features(examples, tokenizer, is_training, max_seq_length=11,
              doc_stride=3, max_query_length=8):
  out = []
  n = squad_features.convert_examples_to_features(
      examples, tokenizer, max_seq_length=max_seq_length,
      doc_stride=doc_stride, max_query_length=max_query_length,
      is_training=is_training, output_fn=out.append)
  assert n == len(out)
  return out


def test_read_examples_whitespace_tokens_and_positions():
  path = _write_json(_ram("train.json"), _squad(
      [_qa("q1", "Who went?", "milk"), _qa("q2", "Who went?", "gallon")]))
  ex = squad_examples.read_squad_examples(path, is_training=True)
  assert [e.qas_id for e in ex] == ["q1", "q2"]
  assert ex[0].doc_tokens == _CONTEXT.split()
  # "milk." is whitespace token 11; "gallon" token 9.
  assert (ex[0].start_position, ex[0].end_position) == (11, 11)
  assert (ex[1].start_position, ex[1].end_position) == (9, 9)
  assert ex[0].orig_answer_text == "milk" and not ex[0].is_impossible
  # Prediction mode ignores answers.
  ex = squad_examples.read_squad_examples(path, is_training=False)
  assert ex[0].start_position is None and ex[0].orig_answer_text is None


def test_read_examples_narrow_nbsp_splits_like_original():
  context = "big\u202fcat\u00a0dog"  # U+202F splits, U+00A0 does not.
  path = _write_json(_ram("x.json"), _squad([_qa("q", "what", "dog",
                                                  context=context)],
                                             context=context))
  ex = squad_examples.read_squad_examples(path, is_training=True)
  assert ex[0].doc_tokens == ["big", "cat\u00a0dog"]
  assert ex[0].start_position == 1


def test_doc_spans_by_hand():
  # 14 tokens, windows of 5, stride 4: starts 0, 4, 8, then 12 (2 left).
  assert squad_features._doc_spans(14, 5, 4) == [(0, 5), (4, 5), (8, 5), (12, 2)]
  # Stride 3: starts 0, 3, 6, 9; 9 + 5 == 14 ends the loop.
  assert squad_features._doc_spans(14, 5, 3) == [(0, 5), (3, 5), (6, 5), (9, 5)]
  assert squad_features._doc_spans(3, 5, 3) == [(0, 3)]


def test_check_is_max_context_original_docstring_case():
  # "the man went to the store and bought a gallon of milk": spans A(0,5),
  # B(3,5), C(6,5); "bought" (7) has min(4,0) in B, min(1,3) in C -> C.
  spans = [squad_features._DocSpan(0, 5), squad_features._DocSpan(3, 5),
           squad_features._DocSpan(6, 5)]
  assert [squad_features._check_is_max_context(spans, i, 7)
          for i in range(3)] == [False, False, True]


def test_training_features_spans_maps_max_context_positions(tokenizer):
  examples = [
      squad_examples.SquadExample("q1", "Who went?", _CONTEXT.split(), "milk",
                              11, 11, False),
      squad_examples.SquadExample("q2", "Who went?", _CONTEXT.split(), "gallon",
                              9, 9, False),
  ]
  feats = _features(examples, tokenizer, is_training=True)
  # max_seq_length 11 - 3 query pieces - 3 = 5 doc tokens per span, stride 3:
  # spans start at 0, 3, 6, 9 (see test_doc_spans_by_hand), per example.
  assert [f.unique_id for f in feats] == list(range(1000000000, 1000000008))
  assert [(f.example_index, f.doc_span_index) for f in feats] == [
      (e, s) for e in range(2) for s in range(4)]
  # Best-context owner of each piece (min(left, right) + 0.01 * length):
  # 0-3 -> span 0, 4-6 -> span 1, 7-9 -> span 2, 10-13 -> span 3; so in
  # every span the middle three are max context, plus the doc's ends.
  expected_max = [[True, True, True, True, False],
                  [False, True, True, True, False],
                  [False, True, True, True, False],
                  [False, True, True, True, True]]
  for f, start, is_max in zip(feats[:4], [0, 3, 6, 9], expected_max):
    assert f.tokens == (["[CLS]", "who", "went", "?", "[SEP]"] +
                        _PIECES[start:start + 5] + ["[SEP]"])
    assert f.token_to_orig_map == {5 + i: _TOK_TO_ORIG[start + i]
                                   for i in range(5)}
    assert f.token_is_max_context == {5 + i: m for i, m in enumerate(is_max)}
    assert f.input_ids == [_VOCAB.index(t) for t in f.tokens]
    assert f.input_mask == [1] * 11
    assert f.segment_ids == [0] * 5 + [1] * 6
  # q1: "milk." is the last whitespace token -> pieces 12..13, tightened to
  # "milk" (12,12); only span 3 (9..13) holds it: 12 - 9 + 5 = 8.
  assert [(f.start_position, f.end_position) for f in feats[:4]] == [
      (0, 0), (0, 0), (0, 0), (8, 8)]
  # q2: "gallon" -> pieces 9..10 (gall ##on); spans 2 (6..10) and 3 (9..13)
  # hold it: (9-6+5, 10-6+5) = (8, 9) and (9-9+5, 10-9+5) = (5, 6).
  assert [(f.start_position, f.end_position) for f in feats[4:]] == [
      (0, 0), (0, 0), (8, 9), (5, 6)]
  assert feats[6].tokens[8:10] == ["gall", "##on"]
  # The original keeps the example's flag: spans without the answer point
  # at [CLS] but are not "impossible" (Model Garden would mark them 1).
  assert not any(f.is_impossible for f in feats)


def test_improve_answer_span_tightens_to_word_pieces(tokenizer):
  # "(1895-1943)."-style case: the whitespace token is "milk." but the
  # annotated text is "milk", so the "." piece is dropped.
  assert squad_features._improve_answer_span(_PIECES, 12, 13, tokenizer,
                                         "milk") == (12, 12)
  # No sub-span matches -> the input span is kept.
  assert squad_features._improve_answer_span(_PIECES, 12, 13, tokenizer,
                                         "who") == (12, 13)


def test_impossible_and_prediction_features(tokenizer):
  impossible = squad_examples.SquadExample("q3", "Who went?", _CONTEXT.split(),
                                       "", -1, -1, True)
  feats = _features([impossible], tokenizer, is_training=True)
  assert [(f.start_position, f.end_position, f.is_impossible)
          for f in feats] == [(0, 0, True)] * 4
  # Prediction: one span of 14 pieces fits in 24; zero padding to 24.
  pred = squad_examples.SquadExample("q4", "Who went?", _CONTEXT.split())
  (f,) = _features([pred], tokenizer, is_training=False, max_seq_length=24)
  assert f.start_position is None and f.end_position is None
  assert len(f.tokens) == 20
  assert f.input_ids[20:] == [0] * 4 and f.input_mask == [1] * 20 + [0] * 4
  assert f.segment_ids == [0] * 5 + [1] * 15 + [0] * 4
  assert all(f.token_is_max_context.values())


def test_query_truncated_to_max_query_length(tokenizer):
  ex = squad_examples.SquadExample("q", "who who who who", ["milk"])
  (f,) = _features([ex], tokenizer, False, max_seq_length=10,
                   max_query_length=2)
  assert f.tokens[:5] == ["[CLS]", "who", "who", "[SEP]", "milk"]


def _records(path):
  return [tf.train.Example.FromString(r.numpy())
          for r in tf.data.TFRecordDataset(path)]


def test_feature_writer_records_and_dataset(tokenizer):
  examples = [
      squad_examples.SquadExample("q1", "Who went?", _CONTEXT.split(), "milk",
                              11, 11, False),
      squad_examples.SquadExample("q3", "Who went?", _CONTEXT.split(), "", -1, -1,
                              True)]
  path = _ram("out/train.tf_record")
  with squad_features.FeatureWriter(path, is_training=True) as writer:
    squad_features.convert_examples_to_features(
        examples, tokenizer, 11, 3, 8, True, writer.process_feature)
  assert writer.num_features == 8 and writer.features is None
  assert tf.io.gfile.listdir(os.path.dirname(path)) == ["train.tf_record"]
  recs = _records(path)
  assert set(recs[0].features.feature) == {
      "unique_ids", "input_ids", "input_mask", "segment_ids",
      "start_positions", "end_positions", "is_impossible"}
  ints = lambda r, k: list(r.features.feature[k].int64_list.value)
  assert [ints(r, "start_positions")[0] for r in recs] == [0, 0, 0, 8] + [0] * 4
  assert [ints(r, "is_impossible")[0] for r in recs] == [0] * 4 + [1] * 4

  ds = squad_features.make_dataset(path, 11, batch_size=3, is_training=True,
                               drop_remainder=True, seed=7)
  spec = ds.element_spec
  assert set(spec) == {"unique_ids", "input_ids", "input_mask", "segment_ids",
                       "start_positions", "end_positions"}
  assert spec["input_ids"].shape == (3, 11) and spec["unique_ids"].shape == (3,)
  assert all(s.dtype == tf.int32 for s in spec.values())
  first = [b["unique_ids"].numpy().tolist() for b in ds.take(4)]
  again = [b["unique_ids"].numpy().tolist() for b in squad_features.make_dataset(
      path, 11, 3, True, True, seed=7).take(4)]
  assert first == again  # seeded shuffle
  assert set(sum(first, [])) <= set(range(1000000000, 1000000008))


def test_prediction_records_keep_order_and_partial_batch(tokenizer):
  ex = squad_examples.SquadExample("q", "Who went?", _CONTEXT.split())
  path = _ram("eval.tf_record")
  with squad_features.FeatureWriter(path, False, keep_features=True) as writer:
    squad_features.convert_examples_to_features(
        [ex], tokenizer, 11, 3, 8, False, writer.process_feature)
  assert len(writer.features) == 4
  assert set(_records(path)[0].features.feature) == {
      "unique_ids", "input_ids", "input_mask", "segment_ids"}
  batches = list(squad_features.make_dataset(path, 11, 3, False, False))
  # No padding features (unlike Model Garden): 4 features -> 3 + 1.
  assert [b["unique_ids"].numpy().tolist() for b in batches] == [
      [1000000000, 1000000001, 1000000002], [1000000003]]
  assert batches[1]["input_ids"].numpy().tolist() == [writer.features[3].input_ids]


# ---- bad input ------------------------------------------------------------


def test_malformed_json_names_file_and_position():
  path = _ram("bad.json")
  with tf.io.gfile.GFile(path, "w") as f:
    f.write('{"data": [\n  {"title": "x",,}\n]}')
  with pytest.raises(errors.UserError, match=r"bad\.json:2: malformed JSON at "
                     r"column 17"):
    squad_examples.read_squad_examples(path, is_training=False)


def test_v11_training_question_without_answer_names_qid():
  path = _write_json(_ram("t.json"), _squad([_qa("qid-7", "Who went?")]))
  with pytest.raises(errors.UserError, match="For training, each question should "
                     "have exactly 1 answer.*'qid-7'"):
    squad_examples.read_squad_examples(path, is_training=True)
  # v2 impossible questions need no answer; a missing flag is named.
  path = _write_json(_ram("t2.json"), _squad([_qa("q8", "Who?")]))
  with pytest.raises(errors.UserError, match="is_impossible.*'q8'"):
    squad_examples.read_squad_examples(path, True, version_2_with_negative=True)


def test_answer_not_found_is_skipped_with_warning(monkeypatch):
  qa = {"id": "q", "question": "Who went?",
        "answers": [{"text": "bread", "answer_start": _CONTEXT.index("milk")}]}
  ok = _qa("ok", "Who went?", "milk")
  path = _write_json(_ram("t.json"), _squad([qa, ok]))
  warnings = []
  monkeypatch.setattr(squad_examples.logging, "warning",
                      lambda msg, *args: warnings.append(msg % args))
  ex = squad_examples.read_squad_examples(path, is_training=True)
  assert [e.qas_id for e in ex] == ["ok"]
  assert warnings == ["Could not find answer: 'milk.' vs. 'bread'"]


def test_answer_offset_outside_context():
  qa = {"id": "q9", "question": "Who went?",
        "answers": [{"text": "milk", "answer_start": 500}]}
  path = _write_json(_ram("t.json"), _squad([qa]))
  with pytest.raises(errors.UserError, match="question 'q9' lies outside its context"):
    squad_examples.read_squad_examples(path, is_training=True)


def test_max_seq_length_too_small_leaves_no_file(tokenizer, tmp_path):
  ex = [squad_examples.SquadExample("q", "Who went?", _CONTEXT.split())] * 2
  out = tmp_path / "out"
  with pytest.raises(ValueError, match=r"--max_seq_length=6.*--max_query_len"):
    with squad_features.FeatureWriter(str(out / "eval.tf_record"), False) as w:
      # 6 - 3 query pieces - 3 = 0 tokens left for the document.
      squad_features.convert_examples_to_features(ex, tokenizer, 6, 3, 8, False,
                                              w.process_feature)
  assert os.listdir(out) == []


# ---- sample files ---------------------------------------------------------


_DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data",
                     "squad")


@pytest.mark.parametrize("name", ["train-v1.1.json", "dev-v1.1.json",
                                  "train-v2.0.json", "dev-v2.0.json"])
def test_sample_files_schema(name):
  data = squad_examples.load_squad_json(os.path.join(_DATA, name))
  v2 = "v2.0" in name
  assert data["version"] == ("v2.0" if v2 else "1.1")
  n_impossible = 0
  for article in data["data"]:
    assert isinstance(article["title"], str)
    for p in article["paragraphs"]:
      for qa in p["qas"]:
        assert set(qa) >= {"id", "question", "answers"}
        spans = qa["answers"] + qa.get("plausible_answers", [])
        for a in spans:
          assert p["context"][a["answer_start"]:][:len(a["text"])] == a["text"]
        if v2 and qa["is_impossible"]:
          n_impossible += 1
          assert qa["answers"] == [] and qa["plausible_answers"]
        else:
          assert len(qa["answers"]) == (1 if "train" in name else 3)
  assert (n_impossible > 0) == v2


def test_sample_train_v2_doc_stride_end_to_end(tmp_path):
  # A vocab of every lower-cased basic token makes word pieces = words.
  path = os.path.join(_DATA, "train-v2.0.json")
  words = set()
  basic = tokenization.BasicTokenizer(do_lower_case=True)
  for article in squad_examples.load_squad_json(path)["data"]:
    for p in article["paragraphs"]:
      words.update(basic.tokenize(p["context"]))
      for qa in p["qas"]:
        words.update(basic.tokenize(qa["question"]))
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]"] +
                             sorted(words)) + "\n")
  tok = tokenization.FullTokenizer(str(vocab), do_lower_case=True)
  examples = squad_examples.read_squad_examples(path, True, True)
  assert len(examples) == 12
  feats = _features(examples, tok, True, max_seq_length=48, doc_stride=16,
                    max_query_length=16)
  spans_of_first = [f for f in feats if f.example_index == 0]
  assert len(spans_of_first) > 1  # the lighthouse context needs doc stride
  for f in feats:
    ex = examples[f.example_index]
    if f.start_position:
      answer = " ".join(f.tokens[f.start_position:f.end_position + 1])
      assert answer == " ".join(tok.tokenize(ex.orig_answer_text))
    else:
      assert f.end_position == 0
  # Every answerable example's answer is inside at least one span.
  found = {f.example_index for f in feats if f.start_position}
  assert found == {i for i, e in enumerate(examples) if not e.is_impossible}


# Contexts with nothing to read, and one shorter than the stride (doc_stride=3).
_DEGENERATE_CONTEXTS = {"empty": "", "blank": " \t\n ", "control": "\x00\x07\x1b",
                        "short": "milk"}


@pytest.mark.parametrize("version", ["1.1", "2.0"])
def test_questions_with_nothing_to_read_get_a_prediction(tokenizer, version):
  """A question with an empty, blank or control-character context (or an empty
  question) gets one feature, [CLS] question [SEP] [SEP], and so a prediction:
  SQuAD v2.0 the empty answer, v1.1 the original's "empty" for a question none of
  whose candidates fit. The original gave such a question no feature, and v2.0's
  post-processing failed with an IndexError."""
  v2 = version == "2.0"
  paragraphs = [{"context": c, "qas": [{"id": name, "question": "who went?", "answers": []}]}
                for name, c in _DEGENERATE_CONTEXTS.items()]
  paragraphs.append({"context": _CONTEXT, "qas": [
      {"id": "no question", "question": "", "answers": []},
      {"id": "blank question", "question": "  \x00 ", "answers": []}]})
  path = _write_json(_ram("degenerate.json"),
                     {"version": version, "data": [{"title": "t", "paragraphs": paragraphs}]})
  examples = squad_examples.read_squad_examples(path, is_training=False,
                                            version_2_with_negative=v2)
  features = _features(examples, tokenizer, is_training=False)
  empty = [f for f in features if f.example_index < 3]
  assert [f.tokens for f in empty] == [["[CLS]", "who", "went", "?", "[SEP]", "[SEP]"]] * 3
  assert all(f.token_to_orig_map == {} for f in empty)
  # Logits that favour document tokens over [CLS] (the null answer) wherever there are.
  logits = lambda f: [float(i in f.token_to_orig_map) for i in range(11)]
  results = [postprocess.RawResult(f.unique_id, logits(f), logits(f)) for f in features]
  predictions, nbest, null_odds = postprocess.compute_predictions(
      examples, features, results, n_best_size=3, max_answer_length=5,
      do_lower_case=True, version_2_with_negative=v2)
  assert list(predictions) == list(_DEGENERATE_CONTEXTS) + ["no question", "blank question"]
  nothing = "" if v2 else "empty"
  assert [predictions[q] for q in ("empty", "blank", "control")] == [nothing] * 3
  assert predictions["short"] == "milk"
  assert set(nbest) == set(predictions) and (set(null_odds) == set(predictions) if v2
                                             else null_odds == {})


def test_impossible_training_question_without_context_trains_on_cls(tokenizer):
  """SQuAD v2.0 training: an impossible question whose context is empty points at [CLS]
  (the original dropped it), one shorter than the stride gives one span."""
  path = _write_json(_ram("train.json"), {"version": "2.0", "data": [{"title": "t", "paragraphs": [
      {"context": "", "qas": [{"id": "a", "question": "who?", "answers": [],
                               "is_impossible": True}]},
      {"context": "milk", "qas": [{"id": "b", "question": "what?", "is_impossible": False,
                                   "answers": [{"text": "milk", "answer_start": 0}]}]}]}]})
  examples = squad_examples.read_squad_examples(path, True, version_2_with_negative=True)
  features = _features(examples, tokenizer, is_training=True)
  assert [(f.example_index, f.start_position, f.end_position) for f in features] == [
      (0, 0, 0), (1, 4, 4)]  # [CLS] what ? [SEP] milk [SEP]


def test_an_example_without_features_is_named():
  example = squad_examples.SquadExample("q9", "who?", [])
  with pytest.raises(ValueError, match="question 'q9' has no feature"):
    postprocess.compute_predictions([example], [], [], 3, 5, True, True)
