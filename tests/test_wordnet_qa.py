"""Tests for data/wordnet/wordnet_qa: the builder on a hand-written fixture, the committed
SQuAD v1.1 files (as run_squad.py reads them), and their rebuild from WordNet."""

import collections
import importlib.util
import json
import os
import sys

import pytest

from adapter_bert.squad import examples as squad_examples

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDNET_DATA = os.path.join(ROOT, "data", "wordnet")
QA_DATA = os.path.join(WORDNET_DATA, "wordnet_qa")
SYSTEM_WORDNET = "/usr/share/wordnet"
SIZES = {"train": 5000, "dev": 1000, "test": 1000}
# As data/wordnet/wordnet_qa/README.md gives them (build_wordnet_qa.py prints them).
BASELINES = {"dev": {"first": (12.5, 20.8), "random": (12.3, 20.7), "longest": (9.1, 18.2),
                     "overlap": (19.1, 26.9)},
             "test": {"first": (13.2, 20.5), "random": (14.0, 22.3), "longest": (7.8, 16.9),
                      "overlap": (19.2, 26.2)}}


def _load_builder():
  # data/ is not a package; load the script by path, with its directory on the path
  # for the neighbour it imports (as a script's own directory is), and only then.
  spec = importlib.util.spec_from_file_location(
      "build_wordnet_qa", os.path.join(WORDNET_DATA, "build_wordnet_qa.py"))
  module = importlib.util.module_from_spec(spec)
  sys.path.insert(0, WORDNET_DATA)
  try:
    spec.loader.exec_module(module)
  finally:
    sys.path.remove(WORDNET_DATA)
  return module


bqa = _load_builder()

# wndb(5WN) lines: "bank" has four senses (one a verb shared with "deposit"),
# "deposit" two.
NOUN_FIXTURE = """\
  1 This software and database is being provided to you, the LICENSEE, by  
09213565 17 n 01 bank 0 000 | sloping land (especially the slope beside a body of water); "he sat on the bank of the river"; "they pulled the canoe up"  
08420278 14 n 02 bank 0 banking_company 0 000 | a financial institution that accepts deposits; "he cashed a check at the bank"  
02787772 06 n 01 bank 4 000 | a container for keeping money at home; "the coin bank was empty"  
07000001 21 n 01 deposit 0 000 | money deposited in a bank; "a large deposit"  
"""
VERB_FIXTURE = """\
02343595 40 v 02 bank 0 deposit 0 000 01 + 08 00 | do business with a bank or keep an account at a bank; "Where do you bank in this town?"; "deposit the check"  
"""
RIVER, COMPANY, BOX, MONEY, VERB = ("09213565-n", "08420278-n", "02787772-n", "07000001-n",
                                    "02343595-v")
NO_LIMIT = {"train": None, "dev": None, "test": None}


@pytest.fixture
def synsets(tmp_path):
  for part, text in (("noun", NOUN_FIXTURE), ("verb", VERB_FIXTURE), ("adj", ""),
                     ("adv", "")):
    (tmp_path / ("data." + part)).write_text(text)
  return bqa.read_synsets(str(tmp_path))


def test_paragraph_and_questions(synsets):
  by_id = {s.id: s for s in synsets}
  assert [s.id for s in bqa.senses_by_word(synsets)["bank"]] == [RIVER, COMPANY, BOX, VERB]
  assert [s.id for s in bqa.senses_by_word(synsets)["deposit"]] == [MONEY, VERB]
  context, senses = bqa.make_paragraph("bank", [by_id[i] for i in (VERB, COMPANY, RIVER, BOX)])
  assert context == (
      "As a verb (also deposit), bank can mean do business with a bank or keep an account "
      "at a bank. As a noun (also banking company), bank can mean a financial institution "
      "that accepts deposits. As a noun, bank can mean sloping land (especially the slope "
      "beside a body of water). As a noun, bank can mean a container for keeping money at "
      "home.")
  qas = bqa.questions_of("bank", context, senses)
  # One question per example that uses "bank": not "they pulled the canoe up" nor
  # "deposit the check"; examples are never in the paragraph.
  assert [(qa["id"], qa["question"], qa["answers"][0]["text"]) for qa in qas] == [
      ("bank/%s/0" % VERB, 'What does "bank" mean in "Where do you bank in this town?"?',
       "do business with a bank or keep an account at a bank"),
      ("bank/%s/0" % COMPANY, 'What does "bank" mean in "he cashed a check at the bank"?',
       "a financial institution that accepts deposits"),
      ("bank/%s/0" % RIVER, 'What does "bank" mean in "he sat on the bank of the river"?',
       "sloping land (especially the slope beside a body of water)"),
      ("bank/%s/0" % BOX, 'What does "bank" mean in "the coin bank was empty"?',
       "a container for keeping money at home")]
  for qa in qas:
    (answer,) = qa["answers"]
    assert context[answer["answer_start"]:][:len(answer["text"])] == answer["text"]
  # Too long an answer is not asked for; it stays in the paragraph.
  assert [qa["id"] for qa in bqa.questions_of("bank", context, senses, max_answer_words=7)] == [
      "bank/%s/0" % COMPANY, "bank/%s/0" % BOX]
  # Only what fits in max_words: the verb's sentence (20 words) does not fit after
  # the company's (16), the box's (12) still does.
  short, kept = bqa.make_paragraph("bank", [by_id[i] for i in (COMPANY, VERB, BOX)],
                                   max_words=30)
  assert [s.synset.id for s in kept] == [COMPANY, BOX] and len(short.split()) == 28


def test_questions_skip_ambiguous_definitions(synsets):
  by_id = {s.id: s for s in synsets}
  twin = by_id[BOX]._replace(id="02787773-n", examples=("a bank of glass",))
  context, senses = bqa.make_paragraph("bank", [by_id[RIVER], by_id[BOX], twin])
  assert [qa["id"] for qa in bqa.questions_of("bank", context, senses)] == ["bank/%s/0" % RIVER]
  # A definition inside another one is not a unique span either.
  part = by_id[BOX]._replace(id="02787774-n", definition="a container")
  context, senses = bqa.make_paragraph("bank", [by_id[BOX], part])
  assert [qa["id"] for qa in bqa.questions_of("bank", context, senses)] == ["bank/%s/0" % BOX]


def test_build_keeps_words_and_synsets_in_one_split(synsets):
  split_of_word = {"bank": "train", "deposit": "dev"}
  holders = collections.Counter()
  for seed in range(12):
    out = bqa.build_task(synsets, seed, NO_LIMIT, min_senses=2, min_words=0,
                         split_of_word=split_of_word)
    held = {split: {s.synset.id for _, senses in items for s in senses}
            for split, items in out.items()}
    # The verb, a sense of both words, goes to whichever paragraph comes first;
    # deposit is then left with one sense, too few.
    assert held["test"] == set()
    if VERB in held["train"]:
      assert held == {"train": {RIVER, COMPANY, BOX, VERB}, "dev": set(), "test": set()}
    else:
      assert held == {"train": {RIVER, COMPANY, BOX}, "dev": {MONEY, VERB}, "test": set()}
    holders["train" if VERB in held["train"] else "dev"] += 1
    for split, items in out.items():
      for paragraph, _ in items:
        assert {qa["id"].split("/")[0] for qa in paragraph["qas"]} == {
            {"train": "bank", "dev": "deposit"}[split]}
  assert set(holders) == {"train", "dev"}
  # Counts are met exactly or refused: bank's paragraph has more than 2 questions.
  with pytest.raises(ValueError, match="only 0 train questions possible, need 2"):
    bqa.build_task(synsets, 0, {"train": 2, "dev": None, "test": None}, min_senses=2,
                   min_words=0, split_of_word=split_of_word)
  out = bqa.build_task(synsets, 0, NO_LIMIT, min_senses=2, min_words=0, max_questions=2,
                       split_of_word=split_of_word)
  assert [len(p["qas"]) for p, _ in out["train"]] == [2]
  # Four senses at least: deposit (two) has no paragraph.
  out = bqa.build_task(synsets, 0, NO_LIMIT, min_words=0, split_of_word=split_of_word)
  assert len(out["train"]) == 1 and out["dev"] == []


def test_check_disjoint_refuses_shared_entries_and_bad_spans(synsets):
  by_id = {s.id: s for s in synsets}

  def item(word, ids):
    context, senses = bqa.make_paragraph(word, [by_id[i] for i in ids])
    return {"context": context, "qas": bqa.questions_of(word, context, senses)}, senses

  bqa.check_disjoint({"train": [item("bank", [RIVER, COMPANY])], "dev": [item("deposit", [MONEY])]})
  with pytest.raises(AssertionError, match="synset %s is in both train and dev" % VERB):
    bqa.check_disjoint({"train": [item("bank", [VERB])], "dev": [item("deposit", [VERB])]})
  with pytest.raises(AssertionError, match="word bank is in both train and dev"):
    bqa.check_disjoint({"train": [item("bank", [RIVER])], "dev": [item("bank", [BOX])]})
  paragraph, senses = item("bank", [RIVER, BOX])
  paragraph["qas"][0]["answers"][0]["answer_start"] += 1
  with pytest.raises(AssertionError, match="is not at"):
    bqa.check_disjoint({"train": [(paragraph, senses)]})


def test_baselines_on_fixture(synsets):
  by_id = {s.id: s for s in synsets}
  box = by_id[BOX]._replace(examples=("keep the money in the bank",))
  context, senses = bqa.make_paragraph("bank", [by_id[RIVER], by_id[COMPANY], box])
  qas = bqa.questions_of("bank", context, senses)
  items = [({"context": context, "qas": qas}, senses)]
  predictions = bqa.baseline_predictions(items, seed=0)
  river, company = by_id[RIVER].definition, by_id[COMPANY].definition
  ids = ["bank/%s/0" % i for i in (RIVER, COMPANY, BOX)]
  assert predictions["first"] == dict.fromkeys(ids, river)
  assert predictions["longest"] == dict.fromkeys(ids, river)
  # Only the box's example shares a content word ("money") with a definition;
  # the others tie at none, which goes to the first sense.
  assert predictions["overlap"] == {ids[0]: river, ids[1]: river, ids[2]: box.definition}
  assert set(predictions["random"].values()) <= {river, company, box.definition}
  scores = bqa.baselines({"dev": items}, seed=0)["dev"]
  assert scores["first"]["exact_match"] == pytest.approx(100 / 3)
  assert scores["overlap"]["exact_match"] == pytest.approx(200 / 3)


# --- The committed files.


def _read(split):
  with open(os.path.join(QA_DATA, split + ".json"), encoding="utf-8") as f:
    return json.load(f)


def test_snapshot_is_squad_v1_1_with_answers_in_their_contexts():
  seen = {}
  for split, size in SIZES.items():
    dataset = _read(split)
    assert list(dataset) == ["version", "data"] and dataset["version"] == "1.1"
    ids = []
    for article in dataset["data"]:
      assert list(article) == ["title", "paragraphs"] and len(article["paragraphs"]) == 1
      (paragraph,) = article["paragraphs"]
      assert list(paragraph) == ["context", "qas"]
      context = paragraph["context"]
      assert 80 <= len(context.split()) <= 250 and context == " ".join(context.split())
      assert context.count(" can mean ") >= 4  # Four senses at least.
      for qa in paragraph["qas"]:
        assert list(qa) == ["id", "question", "answers"]
        word, synset_id, _ = qa["id"].rsplit("/", 2)
        assert word.replace("_", " ") == article["title"]
        assert qa["question"].startswith('What does "%s" mean in "' % article["title"])
        (answer,) = qa["answers"]
        text, start = answer["text"], answer["answer_start"]
        assert context[start:start + len(text)] == text and context.count(text) == 1
        assert context[:start].endswith(" can mean ") and context[start + len(text)] == "."
        # No word and no synset in two splits.
        for key in ("word " + word, "synset " + synset_id):
          assert seen.setdefault(key, split) == split, key
        ids.append(qa["id"])
    assert len(ids) == size and len(set(ids)) == size
    # run_squad.py's reader finds every answer in the whitespace tokens.
    examples = squad_examples.read_squad_examples(os.path.join(QA_DATA, split + ".json"),
                                              is_training=True)
    assert [e.qas_id for e in examples] == ids


@pytest.mark.skipif(not os.path.exists(os.path.join(SYSTEM_WORDNET, "data.noun")),
                    reason="needs WordNet (apt-get install wordnet-base)")
def test_snapshot_rebuilds_identically_with_its_baselines(tmp_path):
  paragraphs = bqa.build(SYSTEM_WORDNET, str(tmp_path), seed=12345)
  for split in SIZES:
    with open(os.path.join(QA_DATA, split + ".json"), "rb") as f:
      committed = f.read()
    with open(os.path.join(tmp_path, split + ".json"), "rb") as f:
      assert f.read() == committed, split
  # Every paragraph's synsets are senses of its word, each once.
  for items in paragraphs.values():
    for paragraph, senses in items:
      word = paragraph["qas"][0]["id"].rsplit("/", 2)[0]
      assert all(word in s.synset.lemmas for s in senses)
      assert len({s.synset.id for s in senses}) == len(senses)
  results = bqa.baselines({s: paragraphs[s] for s in ("dev", "test")}, seed=12345)
  assert {split: {name: (round(r["exact_match"], 1), round(r["f1"], 1))
                  for name, r in by_name.items()}
          for split, by_name in results.items()} == BASELINES
