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
09213565 17 n 01 bank 0 002 @ 09366317 n 0000 + 02343595 v 0101 | sloping land (especially the slope beside a body of water); "he sat on the bank of the river"; "they pulled the canoe up"  
08420278 14 n 03 bank 0 banking_company 0 depository_financial_institution 0 000 | a financial institution that accepts deposits and channels the money into lending activities; "he cashed a check at the bank"  
02787772 06 n 01 bank 4 000 | a container (usually with a slot in the top) for keeping money at home; "the coin bank was empty"  
00001740 03 n 01 entity 0 000 | that which is perceived or known or inferred to have its own distinct existence (living or nonliving)  
09433442 17 n 01 shore 0 000 | the land along the edge of a body of water; "they walked along the shore"  
"""
VERB_FIXTURE = """\
02343595 40 v 02 bank 0 deposit 0 000 01 + 08 00 | do business with a bank or keep an account at a bank; "Where do you bank in this town?"  
"""
ADJ_FIXTURE = """\
00001740 00 a 01 galore(ip) 0 000 | in great numbers; "apples galore"  
"""
ADV_FIXTURE = """\
00001837 02 r 01 barely 0 000 | by a small margin; "they lost barely"  
"""

OBJECT = "09213565-n"
GROUP = "08420278-n"
CONTAINER = "02787772-n"
ENTITY = "00001740-n"
VERB = "02343595-v"
SHORE = "09433442-n"


@pytest.fixture
def wordnet_dir(tmp_path):
  for part, text in (("noun", NOUN_FIXTURE), ("verb", VERB_FIXTURE), ("adj", ADJ_FIXTURE),
                     ("adv", ADV_FIXTURE)):
    (tmp_path / ("data." + part)).write_text(text)
  return str(tmp_path)


def test_parse_data_lines(wordnet_dir):
  synsets = bwt.read_synsets(wordnet_dir, parts=("noun", "verb", "adj", "adv"))
  assert [s.id for s in synsets] == [OBJECT, GROUP, CONTAINER, ENTITY, SHORE, VERB,
                                     "00001740-a", "00001837-r"]
  # The "+" pointer is lexical (source/target 0101): not a synset relation.
  assert synsets[0] == bwt.Synset(
      OBJECT, "noun.object", ("bank",),
      "sloping land (especially the slope beside a body of water)",
      ("he sat on the bank of the river", "they pulled the canoe up"),
      (("@", "09366317-n"),))
  assert synsets[1].lexname == "noun.group"
  assert synsets[1].lemmas == ("bank", "banking_company", "depository_financial_institution")
  assert synsets[1].examples == ("he cashed a check at the bank",)
  assert synsets[3].examples == () and synsets[3].definition.endswith("(living or nonliving)")
  # Verb frames after the pointers are not pointers.
  assert synsets[5] == bwt.Synset(VERB, "verb.possession", ("bank", "deposit"),
                                  "do business with a bank or keep an account at a bank",
                                  ("Where do you bank in this town?",), ())
  assert synsets[6].lemmas == ("galore",) and synsets[6].lexname == "adj.all"
  assert synsets[7].lexname == "adv.all" and synsets[7].examples == ("they lost barely",)


def test_parse_rejects_category_of_other_part_of_speech():
  with pytest.raises(ValueError, match="does not fit"):
    bwt.parse_data_line("00001740 29 n 01 entity 0 000 | a gloss")


def test_lexname_task_on_fixture(wordnet_dir):
  synsets = bwt.read_synsets(wordnet_dir)
  split_of = {OBJECT: "train", GROUP: "dev", CONTAINER: "test", ENTITY: "train", VERB: "train",
              SHORE: "dev"}
  classes = ["noun.artifact", "noun.group", "noun.object"]
  with pytest.raises(ValueError, match="train has only 0 noun.artifact"):
    bwt.build_lexname_task(synsets, split_of, classes, {"train": 1, "dev": 0, "test": 0}, 0)
  rows = bwt.build_lexname_task(synsets, split_of, ["noun.object"],
                                {"train": 1, "dev": 0, "test": 0}, seed=0)
  assert rows == {"train": [(OBJECT, "sloping land (especially the slope beside a body of "
                                      "water)", "noun.object")], "dev": [], "test": []}
  # noun.object has 2 synsets, the other categories 1 each: ties broken by name.
  assert bwt.lexname_classes(synsets, num_noun=2, num_verb=1) == [
      "noun.Tops", "noun.object", "verb.possession"]


def test_example_task_on_fixture(wordnet_dir):
  synsets = bwt.read_synsets(wordnet_dir)
  # CONTAINER is in dev: it must not pair with train.
  split_of = {OBJECT: "train", GROUP: "train", CONTAINER: "dev", ENTITY: "train",
              SHORE: "train", VERB: "train"}
  rows = bwt.build_example_task(synsets, split_of, {"train": 4, "dev": 0, "test": 0}, 7)
  object_def = "sloping land (especially the slope beside a body of water)"
  shore_def = "the land along the edge of a body of water"
  # The river bank and the shore are the only noun.object synsets with examples:
  # each is the other's negative. GROUP shares the word "bank" with OBJECT and
  # is alone in noun.group; the verb's definition contains its own word.
  assert sorted(rows["train"]) == sorted([
      (OBJECT + "/" + OBJECT, "bank", OBJECT, OBJECT, object_def,
       "he sat on the bank of the river", "1"),
      (OBJECT + "/" + SHORE, "shore", OBJECT, SHORE, object_def,
       "they walked along the shore", "0"),
      (SHORE + "/" + SHORE, "shore", SHORE, SHORE, shore_def,
       "they walked along the shore", "1"),
      (SHORE + "/" + OBJECT, "bank", SHORE, OBJECT, shore_def,
       "he sat on the bank of the river", "0"),
  ])
  assert rows["dev"] == [] and rows["test"] == []
  with pytest.raises(ValueError, match="only 4 train rows possible, need 6"):
    bwt.build_example_task(synsets, split_of, {"train": 6, "dev": 0, "test": 0}, 7)


def test_pos_task_on_fixture(wordnet_dir):
  synsets = bwt.read_synsets(wordnet_dir, parts=("noun", "verb", "adj", "adv"))
  split_of = {s.id: "train" for s in synsets}
  rows = bwt.build_pos_task(synsets, split_of, {"train": 1, "dev": 0, "test": 0}, seed=0)
  by_label = {label: synset_id for synset_id, _, label in rows["train"]}
  assert by_label["verb"] == VERB and by_label["adjective"] == "00001740-a"
  assert by_label["adverb"] == "00001837-r" and by_label["noun"].endswith("-n")
  assert ("00001837-r", "by a small margin", "adverb") in rows["train"]
  with pytest.raises(ValueError, match="train has only 1 adjective synsets, need 2"):
    bwt.build_pos_task(synsets, split_of, {"train": 2, "dev": 0, "test": 0}, seed=0)


# Noun synsets linked by the four relations: dog is a kind of canine and a
# member of genus canis, cab a kind of car, a wheel part of a car. Each link is
# stored at both ends (@ / ~, #m / %m, #p / %p), as in WordNet.
RELATION_FIXTURE = """\
02084071 05 n 01 dog 0 003 @ 02083346 n 0000 #m 02085998 n 0000 + 01234567 v 0101 | a domesticated canid  
02083346 05 n 01 canine 0 001 ~ 02084071 n 0000 | a carnivore with a long muzzle  
02085998 05 n 02 genus_canis 0 canis 0 001 %m 02084071 n 0000 | type genus of the Canidae  
02930766 06 n 01 cab 0 001 @ 02958343 n 0000 | a car driven by a person whose job is to take passengers  
02958343 06 n 01 car 0 002 ~ 02930766 n 0000 %p 04574999 n 0000 | a motor vehicle with four wheels  
04574999 06 n 01 wheel 0 001 #p 02958343 n 0000 | a simple machine consisting of a circular frame  
"""
DOG, CANINE, CANIS, CAB, CAR, WHEEL = ("02084071-n", "02083346-n", "02085998-n",
                                       "02930766-n", "02958343-n", "04574999-n")


def test_relation_task_on_fixture(tmp_path):
  (tmp_path / "data.noun").write_text(RELATION_FIXTURE)
  synsets = bwt.read_synsets(str(tmp_path), parts=("noun",))
  assert synsets[0].pointers == (("@", CANINE), ("#m", CANIS))
  split_of = {s.id: "train" for s in synsets}
  one = {"train": 1, "dev": 0, "test": 0}
  rows = bwt.build_relation_task(synsets, split_of, one, seed=3)["train"]
  by_label = {row[-1]: row for row in rows}
  assert by_label["member_holonym"] == (DOG + "/" + CANIS, DOG, CANIS, "dog", "genus canis",
                                        "member_holonym")
  assert by_label["part_holonym"] == (WHEEL + "/" + CAR, WHEEL, CAR, "wheel", "car",
                                      "part_holonym")
  # dog -> canine and cab -> car are both hypernym links and, read backwards,
  # hyponym links; a pair of synsets is used once, so the two labels take
  # different pairs, each in its own direction.
  hypernym, hyponym = by_label["hypernym"], by_label["hyponym"]
  assert {frozenset(hypernym[1:3]), frozenset(hyponym[1:3])} == {
      frozenset((DOG, CANINE)), frozenset((CAB, CAR))}
  assert (hypernym[1:3] in ((DOG, CANINE), (CAB, CAR))
          and hyponym[1:3] in ((CANINE, DOG), (CAR, CAB)))
  # dog is in the hypernym or the hyponym row and in the member_holonym row:
  # refused with one use per synset.
  with pytest.raises(ValueError, match="train has only 0 member_holonym pairs, need 1"):
    bwt.build_relation_task(synsets, split_of, one, seed=3, uses_per_synset=1)
  # A link across splits is not a row.
  split_of[CANIS] = "dev"
  with pytest.raises(ValueError, match="train has only 0 member_holonym pairs, need 1"):
    bwt.build_relation_task(synsets, split_of, one, seed=3)


def test_gloss_relation_task_on_fixture(tmp_path):
  (tmp_path / "data.noun").write_text(RELATION_FIXTURE + NOUN_FIXTURE.split("\n", 2)[1] + "\n")
  synsets = bwt.read_synsets(str(tmp_path), parts=("noun",))
  relation = {"train": [(DOG + "/" + CANIS, DOG, CANIS, "dog", "genus canis", "member_holonym")],
              "dev": [(OBJECT + "/" + WHEEL, OBJECT, WHEEL, "bank", "wheel", "hyponym")]}
  rows = bwt.build_gloss_relation_task(synsets, relation)
  assert rows == {
      "train": [(DOG + "/" + CANIS, DOG, CANIS, "a domesticated canid",
                 "type genus of the Canidae", "member_holonym")],
      # The whole gloss: the definition, then each example in quotes.
      "dev": [(OBJECT + "/" + WHEEL, OBJECT, WHEEL,
               'sloping land (especially the slope beside a body of water); "he sat on the '
               'bank of the river"; "they pulled the canoe up"',
               "a simple machine consisting of a circular frame", "hyponym")]}


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
      # The example uses its word; the definition never names it.
      assert bwt.mentions(example, lemma) and not bwt.mentions(gloss, lemma)
      for synset_id in (gloss_synset, example_synset):  # No synset in two splits.
        assert seen.setdefault(synset_id, split) == split, synset_id
      by_gloss[gloss_synset].append((example_synset, gloss, label))
    # Every gloss: once with its own example, once with an example of another
    # synset of the same part of speech (the category is checked on rebuild).
    for gloss_synset, pair in by_gloss.items():
      assert sorted(p[2] for p in pair) == ["0", "1"] and pair[0][1] == pair[1][1]
      assert {p[0][-1] for p in pair} == {gloss_synset[-1]}
    negatives = [row[3] for row in rows if row[6] == "0"]
    assert len(set(negatives)) == len(negatives)  # A negative's source once.


def test_snapshot_pos_task():
  seen = {}
  for split, per_class in (("train", 1000), ("dev", 250), ("test", 250)):
    header, rows = _read("wordnet_pos", split)
    assert header == ["id", "sentence", "label"]
    assert collections.Counter(row[2] for row in rows) == {
        "noun": per_class, "verb": per_class, "adjective": per_class, "adverb": per_class}
    for synset_id, sentence, label in rows:
      assert bwt.POS_LABELS[synset_id[-1]] == label and len(synset_id) == 10
      assert sentence and sentence == " ".join(sentence.split())
      assert seen.setdefault(synset_id, split) == split, synset_id
    assert len({row[0] for row in rows}) == len(rows)
  # Satellite adjectives are adjectives too.
  assert {s[-1] for s, split in seen.items()} == {"n", "v", "a", "s", "r"}


def test_snapshot_relation_task():
  seen, word_pairs = {}, set()
  for split, per_class in (("train", 1000), ("dev", 250), ("test", 250)):
    header, rows = _read("wordnet_relation", split)
    assert header == ["id", "synset_a", "synset_b", "word_a", "word_b", "label"]
    assert collections.Counter(row[5] for row in rows) == {
        "hypernym": per_class, "hyponym": per_class, "part_holonym": per_class,
        "member_holonym": per_class}
    uses = collections.Counter()
    for row_id, synset_a, synset_b, word_a, word_b, label in rows:
      assert row_id == synset_a + "/" + synset_b and synset_a[-1] == synset_b[-1] == "n"
      assert word_a != word_b and word_a == word_a.strip() and "_" not in word_a + word_b
      for synset_id in (synset_a, synset_b):
        assert seen.setdefault(synset_id, split) == split, synset_id
      pair = frozenset((word_a, word_b))  # The same two words once in all splits.
      assert pair not in word_pairs, pair
      word_pairs.add(pair)
      uses.update((synset_a, synset_b))
    assert max(uses.values()) <= bwt.RELATION_USES_PER_SYNSET


def test_snapshot_gloss_relation_task():
  """wordnet_relation's rows, in its order, with the two synsets' glosses for the words."""
  lengths = []
  for split in ("train", "dev", "test"):
    header, rows = _read("wordnet_gloss_relation", split)
    assert header == ["id", "synset_a", "synset_b", "gloss_a", "gloss_b", "label"]
    _, relation_rows = _read("wordnet_relation", split)
    assert [row[:3] + row[5:] for row in rows] == [row[:3] + row[5:] for row in relation_rows]
    for _, _, _, gloss_a, gloss_b, _ in rows:
      assert gloss_a and gloss_b and gloss_a == " ".join(gloss_a.split())
      lengths.append(len(gloss_a.split()) + len(gloss_b.split()))
  # Texts of ordinary length: two glosses are 26 words on average (35 MiniLM
  # word pieces with [CLS] and two [SEP]), against 3 words for wordnet_relation.
  assert 23 < sum(lengths) / len(lengths) < 29


def test_snapshot_tasks_share_one_split():
  """Multi-task training on all train files sees no dev or test synset of any task."""
  synset_columns = {"wordnet_lexname": [0], "wordnet_example": [2, 3], "wordnet_pos": [0],
                    "wordnet_relation": [1, 2], "wordnet_gloss_relation": [1, 2]}
  split_of = {}
  for task, columns in synset_columns.items():
    for split in ("train", "dev", "test"):
      for row in _read(task, split)[1]:
        for column in columns:
          assert split_of.setdefault(row[column], split) == split, (task, row[column])
  assert len(split_of) > 20000


@pytest.mark.skipif(not os.path.exists(os.path.join(SYSTEM_WORDNET, "data.noun")),
                    reason="needs WordNet (apt-get install wordnet-base)")
def test_snapshot_rebuilds_identically(tmp_path):
  rows = bwt.build(SYSTEM_WORDNET, str(tmp_path), seed=12345)
  for task in ("wordnet_lexname", "wordnet_example", "wordnet_pos", "wordnet_relation",
               "wordnet_gloss_relation"):
    for split in ("train", "dev", "test"):
      with open(os.path.join(WORDNET_DATA, task, split + ".tsv"), "rb") as f:
        committed = f.read()
      with open(os.path.join(tmp_path, task, split + ".tsv"), "rb") as f:
        assert f.read() == committed, (task, split)
  synsets = {s.id: s for s in bwt.read_synsets(SYSTEM_WORDNET)}
  # An example's word is a word of its synset, not of the definition's synset;
  # a negative comes from the same category.
  for split_rows in rows["wordnet_example"].values():
    for _, lemma, gloss_synset, example_synset, _, example, label in split_rows:
      assert lemma in synsets[example_synset].lemmas
      assert synsets[gloss_synset].lexname == synsets[example_synset].lexname
      if label == "0":
        assert not set(synsets[gloss_synset].lemmas) & set(synsets[example_synset].lemmas)
        assert not any(bwt.mentions(example, w) for w in synsets[gloss_synset].lemmas)
  # Every relation row is a WordNet pointer of its kind, A -> B.
  symbol_of = {label: symbol for symbol, label in bwt.RELATIONS.items()}
  for split_rows in rows["wordnet_relation"].values():
    for _, synset_a, synset_b, word_a, word_b, label in split_rows:
      assert (symbol_of[label], synset_b) in synsets[synset_a].pointers
      assert word_a == synsets[synset_a].lemmas[0].replace("_", " ")
      assert word_b == synsets[synset_b].lemmas[0].replace("_", " ")
  for split_rows in rows["wordnet_gloss_relation"].values():
    for _, synset_a, synset_b, gloss_a, gloss_b, _ in split_rows:
      assert gloss_a.startswith(synsets[synset_a].definition)
      assert gloss_b.startswith(synsets[synset_b].definition)
