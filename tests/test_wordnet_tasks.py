"""Tests for data/wordnet: the builder on a hand-written fixture, and the committed snapshot."""

import collections
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDNET_DATA = os.path.join(ROOT, "data", "wordnet")
SYSTEM_WORDNET = "/usr/share/wordnet"


def _load_builder():
  # data/ is not a package; load the script by path.
  spec = importlib.util.spec_from_file_location(
      "build_wordnet_tasks", os.path.join(WORDNET_DATA, "build_wordnet_tasks.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


bwt = _load_builder()

# WordNet data-file lines (wndb(5WN) layout; pointers shortened), with the
# two-space licence header lines that real files start with.
NOUN_FIXTURE = """\
  1 This software and database is being provided to you, the LICENSEE, by  
09213565 17 n 01 bank 0 001 @ 09366317 n 0000 | sloping land (especially the slope beside a body of water); "he sat on the bank of the river"; "they pulled the canoe up"  
08420278 14 n 03 bank 0 banking_company 0 depository_financial_institution 0 000 | a financial institution that accepts deposits and channels the money into lending activities; "he cashed a check at the bank"  
02787772 06 n 01 bank 4 000 | a container (usually with a slot in the top) for keeping money at home; "the coin bank was empty"  
00001740 03 n 01 entity 0 000 | that which is perceived or known or inferred to have its own distinct existence (living or nonliving)  
"""
VERB_FIXTURE = """\
02343595 40 v 02 bank 0 deposit 0 000 01 + 08 00 | do business with a bank or keep an account at a bank; "Where do you bank in this town?"  
"""
ADJ_FIXTURE = """\
00001740 00 a 01 galore(ip) 0 000 | in great numbers; "apples galore"  
"""

OBJECT = "09213565-n"
GROUP = "08420278-n"
CONTAINER = "02787772-n"
ENTITY = "00001740-n"
VERB = "02343595-v"


@pytest.fixture
def wordnet_dir(tmp_path):
  for part, text in (("noun", NOUN_FIXTURE), ("verb", VERB_FIXTURE), ("adj", ADJ_FIXTURE)):
    (tmp_path / ("data." + part)).write_text(text)
  return str(tmp_path)


def test_parse_data_lines(wordnet_dir):
  synsets = bwt.read_synsets(wordnet_dir, parts=("noun", "verb", "adj"))
  assert [s.id for s in synsets] == [OBJECT, GROUP, CONTAINER, ENTITY, VERB, "00001740-a"]
  assert synsets[0] == bwt.Synset(
      OBJECT, "noun.object", ("bank",),
      "sloping land (especially the slope beside a body of water)",
      ("he sat on the bank of the river", "they pulled the canoe up"))
  assert synsets[1].lexname == "noun.group"
  assert synsets[1].lemmas == ("bank", "banking_company", "depository_financial_institution")
  assert synsets[1].examples == ("he cashed a check at the bank",)
  assert synsets[3].examples == () and synsets[3].definition.endswith("(living or nonliving)")
  assert synsets[4] == bwt.Synset(VERB, "verb.possession", ("bank", "deposit"),
                                  "do business with a bank or keep an account at a bank",
                                  ("Where do you bank in this town?",))
  assert synsets[5].lemmas == ("galore",) and synsets[5].lexname == "adj.all"


def test_parse_rejects_category_of_other_part_of_speech():
  with pytest.raises(ValueError, match="does not fit"):
    bwt.parse_data_line("00001740 29 n 01 entity 0 000 | a gloss")


def test_lexname_task_on_fixture(wordnet_dir):
  synsets = bwt.read_synsets(wordnet_dir)
  split_of = {OBJECT: "train", GROUP: "dev", CONTAINER: "test", ENTITY: "train", VERB: "train"}
  classes = ["noun.artifact", "noun.group", "noun.object"]
  with pytest.raises(ValueError, match="train has only 0 noun.artifact"):
    bwt.build_lexname_task(synsets, split_of, classes, {"train": 1, "dev": 0, "test": 0}, 0)
  rows = bwt.build_lexname_task(synsets, split_of, ["noun.object"],
                                {"train": 1, "dev": 0, "test": 0}, seed=0)
  assert rows == {"train": [(OBJECT, "sloping land (especially the slope beside a body of "
                                      "water)", "noun.object")], "dev": [], "test": []}
  assert bwt.lexname_classes(synsets, num_noun=2, num_verb=1) == [
      "noun.Tops", "noun.artifact", "verb.possession"]  # Ties (1 each) by name.


def test_example_task_on_fixture(wordnet_dir):
  synsets = bwt.read_synsets(wordnet_dir)
  # CONTAINER is a sense of "bank" too, but in dev: it must not pair with train.
  split_of = {OBJECT: "train", GROUP: "train", CONTAINER: "dev", ENTITY: "train",
              VERB: "train"}
  rows = bwt.build_example_task(synsets, split_of, {"train": 4, "dev": 0, "test": 0}, 7)
  object_def = "sloping land (especially the slope beside a body of water)"
  group_def = ("a financial institution that accepts deposits and channels the money "
               "into lending activities")
  assert sorted(rows["train"]) == sorted([
      (OBJECT + "/" + OBJECT, "bank", OBJECT, OBJECT, object_def,
       "he sat on the bank of the river", "1"),
      (OBJECT + "/" + GROUP, "bank", OBJECT, GROUP, object_def,
       "he cashed a check at the bank", "0"),
      (GROUP + "/" + GROUP, "bank", GROUP, GROUP, group_def,
       "he cashed a check at the bank", "1"),
      (GROUP + "/" + OBJECT, "bank", GROUP, OBJECT, group_def,
       "he sat on the bank of the river", "0"),
  ])
  assert rows["dev"] == [] and rows["test"] == []
  # The verb "bank" is another part of speech: never paired with the nouns.
  with pytest.raises(ValueError, match="only 4 train rows possible, need 6"):
    bwt.build_example_task(synsets, split_of, {"train": 6, "dev": 0, "test": 0}, 7)


def test_assign_splits_is_seeded_and_proportional():
  synsets = [bwt.Synset("%08d-n" % i, "noun.act", ("w",), "d", ()) for i in range(3000)]
  a = bwt.assign_splits(synsets, seed=1)
  assert a == bwt.assign_splits(list(reversed(synsets)), seed=1)
  assert a != bwt.assign_splits(synsets, seed=2)
  counts = collections.Counter(a.values())
  assert abs(counts["train"] / 3000 - 0.6) < 0.03 and abs(counts["dev"] / 3000 - 0.2) < 0.03


def test_check_disjoint_and_mentions():
  bwt.check_disjoint({"train": [("a", "b")], "dev": [("c", "d")]}, [0, 1])
  with pytest.raises(AssertionError, match="synset b is in both train and dev"):
    bwt.check_disjoint({"train": [("a", "b")], "dev": [("b", "d")]}, [0, 1])
  assert bwt.mentions("I can breathe better", "breathe")
  assert bwt.mentions("The patient is breathing", "breathe")
  assert bwt.mentions("they take a breath", "take_a_breath")
  assert not bwt.mentions("The patient is respiring", "breathe")
  assert not bwt.mentions("a rebank", "bank")


def test_write_tsv_rejects_tabs(tmp_path):
  with pytest.raises(ValueError, match="tab or newline"):
    bwt.write_tsv(str(tmp_path / "x.tsv"), ["id", "sentence"], [("1", "a\tb")])


# --- The committed snapshot.


def _read(task, split):
  with open(os.path.join(WORDNET_DATA, task, split + ".tsv"), encoding="utf-8") as f:
    lines = f.read().split("\n")
  assert lines[-1] == ""  # Trailing newline, nothing after it.
  rows = [line.split("\t") for line in lines[:-1]]
  assert all(len(row) == len(rows[0]) for row in rows)  # No stray tabs.
  return rows[0], rows[1:]


def test_snapshot_lexname_task():
  seen = {}
  for split, per_class in (("train", 400), ("dev", 100), ("test", 100)):
    header, rows = _read("wordnet_lexname", split)
    assert header == ["id", "sentence", "label"]
    assert len(rows) == 10 * per_class
    labels = collections.Counter(row[2] for row in rows)
    assert labels == {name: per_class for name in [
        "noun.act", "noun.animal", "noun.artifact", "noun.communication", "noun.person",
        "noun.plant", "noun.state", "verb.change", "verb.communication", "verb.contact"]}
    for synset_id, sentence, label in rows:
      assert synset_id[-1] == label[0] and len(synset_id) == 10  # "00957396-v", verb.*
      assert sentence and sentence == " ".join(sentence.split())
      assert seen.setdefault(synset_id, split) == split, synset_id
    assert len({row[0] for row in rows}) == len(rows)


def test_snapshot_example_task():
  seen = {}
  for split, size in (("train", 4000), ("dev", 1000), ("test", 1000)):
    header, rows = _read("wordnet_example", split)
    assert header == ["id", "lemma", "gloss_synset", "example_synset", "gloss", "example",
                      "label"]
    assert len(rows) == size
    assert collections.Counter(row[6] for row in rows) == {"0": size // 2, "1": size // 2}
    by_gloss = collections.defaultdict(list)
    for row_id, lemma, gloss_synset, example_synset, gloss, example, label in rows:
      assert row_id == gloss_synset + "/" + example_synset
      assert (label == "1") == (gloss_synset == example_synset)
      assert bwt.mentions(example, lemma)
      for synset_id in (gloss_synset, example_synset):  # No synset in two splits.
        assert seen.setdefault(synset_id, split) == split, synset_id
      by_gloss[gloss_synset].append((lemma, example_synset[-1], gloss, label))
    # Every gloss: once with its own example, once with another sense's example
    # of the same lemma and part of speech.
    for gloss_synset, pair in by_gloss.items():
      assert sorted(p[3] for p in pair) == ["0", "1"]
      assert pair[0][:3] == pair[1][:3] and pair[0][1] == gloss_synset[-1]


@pytest.mark.skipif(not os.path.exists(os.path.join(SYSTEM_WORDNET, "data.noun")),
                    reason="needs WordNet (apt-get install wordnet-base)")
def test_snapshot_rebuilds_identically(tmp_path):
  rows = bwt.build(SYSTEM_WORDNET, str(tmp_path), seed=12345)
  for task in ("wordnet_lexname", "wordnet_example"):
    for split in ("train", "dev", "test"):
      with open(os.path.join(WORDNET_DATA, task, split + ".tsv"), "rb") as f:
        committed = f.read()
      with open(os.path.join(tmp_path, task, split + ".tsv"), "rb") as f:
        assert f.read() == committed, (task, split)
  # Negatives' lemma really is a word of both synsets.
  lemmas = {s.id: s.lemmas for s in bwt.read_synsets(SYSTEM_WORDNET)}
  for split_rows in rows["wordnet_example"].values():
    for _, lemma, gloss_synset, example_synset, _, _, _ in split_rows:
      assert lemma in lemmas[gloss_synset] and lemma in lemmas[example_synset]
