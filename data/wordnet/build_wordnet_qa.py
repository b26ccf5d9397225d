r"""Builds wordnet_qa, an extractive question-answering task in SQuAD v1.1 JSON, from WordNet 3.0.

Each paragraph is the dictionary entry of one English word: several of its
senses (noun, verb, adjective and adverb senses together, in a seeded random
order), one sentence per sense with the part of speech, the sense's other
words and its definition:

  As a noun (also banking company, depository financial institution), bank can
  mean a financial institution that accepts deposits and channels the money
  into lending activities. As a verb (also deposit), bank can mean do business
  with a bank or keep an account at a bank. ...

Each question quotes one of WordNet's example sentences of one of those senses
(examples are never in the paragraph) and asks what the word means there:

  What does "bank" mean in "he cashed a check at the bank"?

The answer is the definition of that sense, a span of the paragraph. Answering
is word-sense disambiguation by reading: the example has to be matched with one
of the definitions on meaning; the sense order is shuffled, so position gives
nothing away. Baselines (first, random and longest definition, word overlap)
are computed with the official SQuAD v1.1 EM/F1 and printed after the build.

  python data/wordnet/build_wordnet_qa.py \
      --wordnet_dir=/usr/share/wordnet --output_dir=data/wordnet/wordnet_qa

Splits are by word and by synset: every word is drawn into train, dev or test
once (seeded), it is the subject of one paragraph at most, and a synset is in
the paragraphs of one split only. See wordnet_qa/README.md.
"""

import collections
import json
import os
import posixpath
import random
import sys
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from absl import app
from absl import flags
from absl import logging

# The WordNet reader and split constants of the classification tasks' builder,
# next to this file: run as a script, this file's directory is sys.path[0].
import build_wordnet_tasks as bwt  # pylint: disable=g-import-not-at-top,wrong-import-position

# pylint: disable=g-import-not-at-top,wrong-import-position
from adapter_bert.squad import evaluate as squad_evaluate
from adapter_bert.storage import file_io
# pylint: enable=g-import-not-at-top,wrong-import-position

SPLITS = bwt.SPLITS
# Share of words per split.
SPLIT_FRACTIONS = bwt.SPLIT_FRACTIONS
# Questions per split (exact).
QUESTIONS = {"train": 5000, "dev": 1000, "test": 1000}
# A paragraph holds at least this many senses (so at least this many candidate
# definitions) and MIN_CONTEXT_WORDS to MAX_CONTEXT_WORDS words
# (whitespace-separated), SQuAD's length.
MIN_SENSES = 4
MIN_CONTEXT_WORDS, MAX_CONTEXT_WORDS = 80, 250
# Definitions longer than this are not asked for (they stay in paragraphs as
# distractors): run_squad.py's --max_answer_length is 30 word pieces.
MAX_ANSWER_WORDS = 20
# Questions per paragraph, at most (a seeded sample, in paragraph order): spreads
# a split's questions over more words (SQuAD has about 5 per paragraph).
MAX_QUESTIONS_PER_PARAGRAPH = 8
POS_NAMES = {"n": "noun", "v": "verb", "a": "adjective", "s": "adjective", "r": "adverb"}
VERSION = "1.1"


class Sense(NamedTuple):
  """One sense of a paragraph's word: its synset, the sentence shown and where its
  definition starts in the paragraph."""
  synset: bwt.Synset
  sentence: str
  answer_start: int


def read_synsets(wordnet_dir: str) -> List[bwt.Synset]:
  """All synsets of data.{noun,verb,adj,adv}, in file order."""
  return bwt.read_synsets(wordnet_dir, parts=("noun", "verb", "adj", "adv"))


def senses_by_word(synsets: Sequence[bwt.Synset]) -> Dict[str, List[bwt.Synset]]:
  """Word ("_" for spaces, lower case) -> its synsets, in file order."""
  out = collections.defaultdict(list)
  for s in synsets:
    for lemma in dict.fromkeys(s.lemmas):
      out[lemma].append(s)
  return dict(out)


def assign_word_splits(words: Sequence[str], seed: int,
                       fractions: Sequence[float] = SPLIT_FRACTIONS) -> Dict[str, str]:
  """Word -> split, one seeded draw per word in sorted order (as bwt.assign_splits
  draws per synset)."""
  rng = random.Random(seed)
  bounds = [sum(fractions[:i + 1]) for i in range(len(SPLITS))]
  out = {}
  for word in sorted(words):
    r = rng.random() * bounds[-1]
    out[word] = next(split for split, b in zip(SPLITS, bounds) if r < b)
  return out


def display(word: str) -> str:
  return word.replace("_", " ")


def sense_sentence(word: str, synset: bwt.Synset) -> Tuple[str, int]:
  """The paragraph's sentence for one sense, and where the definition starts in it."""
  pos = POS_NAMES[synset.id[-1]]
  others = sorted(display(w) for w in dict.fromkeys(synset.lemmas) if w != word)
  also = " (also %s)" % ", ".join(others) if others else ""
  head = "As %s %s%s, %s can mean " % ("an" if pos[0] in "aeiou" else "a", pos, also,
                                       display(word))
  return head + synset.definition + ".", len(head)


def question_text(word: str, example: str) -> str:
  return 'What does "%s" mean in "%s"?' % (display(word), example)


def make_paragraph(word: str, synsets: Sequence[bwt.Synset],
                   max_words: int = MAX_CONTEXT_WORDS) -> Tuple[str, List[Sense]]:
  """The paragraph of `word` from its senses `synsets`, in that order, as many as
  fit in `max_words` (a sense that does not fit is left out, later ones may)."""
  senses, text, words = [], "", 0
  for synset in synsets:
    sentence, offset = sense_sentence(word, synset)
    n = len(sentence.split())
    if words + n > max_words:
      continue
    start = len(text) + (1 if text else 0)
    text = (text + " " + sentence) if text else sentence
    words += n
    senses.append(Sense(synset, sentence, start + offset))
  return text, senses


def questions_of(word: str, context: str, senses: Sequence[Sense],
                 max_answer_words: int = MAX_ANSWER_WORDS) -> List[dict]:
  """SQuAD questions of one paragraph: one per example sentence of a sense that uses
  `word` (bwt.mentions), whose definition occurs once in the paragraph, is no other
  sense's, and has at most `max_answer_words` words."""
  definitions = collections.Counter(s.synset.definition for s in senses)
  out = []
  for sense in senses:
    definition = sense.synset.definition
    if (not definition or definitions[definition] > 1 or context.count(definition) != 1
        or len(definition.split()) > max_answer_words):
      continue
    check_span(context, definition, sense.answer_start)
    for i, example in enumerate(sense.synset.examples):
      if bwt.mentions(example, word):
        out.append({"id": "%s/%s/%d" % (word, sense.synset.id, i),
                    "question": question_text(word, example),
                    "answers": [{"text": definition, "answer_start": sense.answer_start}]})
  return out


def check_span(context: str, text: str, start: int) -> None:
  if not text or context[start:start + len(text)] != text:
    raise AssertionError("answer %r is not at %d of %r" % (text, start, context))


def build_task(synsets: Sequence[bwt.Synset], seed: int,
               questions: Optional[Mapping[str, Optional[int]]] = None,
               min_senses: int = MIN_SENSES, min_words: int = MIN_CONTEXT_WORDS,
               max_words: int = MAX_CONTEXT_WORDS, max_answer_words: int = MAX_ANSWER_WORDS,
               max_questions: int = MAX_QUESTIONS_PER_PARAGRAPH,
               split_of_word: Optional[Mapping[str, str]] = None
               ) -> Dict[str, List[Tuple[dict, List[Sense]]]]:
  """Paragraphs per split: ({"context", "qas"}, its senses in paragraph order).

  Words with at least `min_senses` senses are visited in a seeded random order.
  A word's paragraph takes its senses that no paragraph of another split holds,
  shuffled, as many as fit in `max_words`; it is kept if it has at least
  `min_senses` senses, `min_words` words and one question (at most
  `max_questions` are kept, drawn at random), and they fit in the split's count of
  `questions` (so every count is met exactly, or ValueError; None: no count).
  Its synsets are then held by its split. `split_of_word` overrides the seeded
  draw of the words' splits (tests).
  """
  questions = dict(QUESTIONS if questions is None else questions)
  rng = random.Random(seed)
  by_word = senses_by_word(synsets)
  candidates = sorted(w for w, ss in by_word.items() if len(ss) >= min_senses)
  if split_of_word is None:
    split_of_word = assign_word_splits(candidates, seed)
  rng.shuffle(candidates)
  owner = {}  # synset id -> split of the paragraphs that hold it.
  out = {split: [] for split in SPLITS}
  count = collections.Counter()
  for word in candidates:
    split = split_of_word[word]
    limit = questions[split]
    if count[split] == limit:
      continue
    free = [s for s in by_word[word] if owner.get(s.id, split) == split]
    if len(free) < min_senses:
      continue
    rng.shuffle(free)
    context, senses = make_paragraph(word, free, max_words)
    if len(senses) < min_senses or len(context.split()) < min_words:
      continue
    qas = questions_of(word, context, senses, max_answer_words)
    if len(qas) > max_questions:
      keep = set(rng.sample(range(len(qas)), max_questions))
      qas = [qa for i, qa in enumerate(qas) if i in keep]
    if not qas or (limit is not None and count[split] + len(qas) > limit):
      continue
    for sense in senses:
      owner[sense.synset.id] = split
    count[split] += len(qas)
    out[split].append(({"context": context, "qas": qas}, senses))
  for split in SPLITS:
    if questions[split] is not None and count[split] < questions[split]:
      raise ValueError("only %d %s questions possible, need %d" % (
          count[split], split, questions[split]))
  check_disjoint(out)
  return out


def check_disjoint(paragraphs: Mapping[str, Sequence[Tuple[dict, List[Sense]]]]) -> None:
  """Asserts that no word (a paragraph's subject) and no synset is in two splits, and
  that every answer is its span."""
  seen = {}
  for split, items in paragraphs.items():
    for paragraph, senses in items:
      keys = {"word " + qa["id"].rsplit("/", 2)[0] for qa in paragraph["qas"]}
      keys.update("synset " + s.synset.id for s in senses)
      for key in keys:
        other = seen.setdefault(key, split)
        if other != split:
          raise AssertionError("%s is in both %s and %s" % (key, other, split))
      for qa in paragraph["qas"]:
        for answer in qa["answers"]:
          check_span(paragraph["context"], answer["text"], answer["answer_start"])


def to_squad(items: Sequence[Tuple[dict, List[Sense]]]) -> dict:
  """SQuAD v1.1 JSON: one article per paragraph, titled with its word."""
  return {"version": VERSION, "data": [
      {"title": display(p["qas"][0]["id"].rsplit("/", 2)[0]), "paragraphs": [p]}
      for p, _ in items]}


def write_json(path: str, dataset: dict) -> None:
  file_io.atomic_write(path, json.dumps(dataset, indent=1, ensure_ascii=False) + "\n")


# --- Baselines: rules a reader would try first, each choosing one definition.

STOPWORDS = frozenset(
    "a an the of to in on at for by with from and or but not no is are was were be been "
    "being it its this that these those as into than then so such he she they we you i "
    "his her their our your my me him them us who which what when where how do does did "
    "have has had will would can could may might must shall should one some any all".split())


def content_words(text: str) -> set:
  return set(squad_evaluate.normalize_answer(text).split()) - STOPWORDS


def baseline_predictions(items: Sequence[Tuple[dict, List[Sense]]], seed: int
                         ) -> Dict[str, Dict[str, str]]:
  """{baseline: {question id: answer}}:

  first: the first definition of the paragraph (the position rule);
  random: a definition drawn at random (seeded) from the paragraph's;
  longest: the paragraph's longest definition (in words);
  overlap: the definition, with its sense's other words, sharing most content words
    with the example sentence (the word itself and stop words left out; ties go to the
    earlier sense).
  """
  rng = random.Random(seed)
  out = {name: {} for name in ("first", "random", "longest", "overlap")}
  for paragraph, senses in items:
    definitions = [s.synset.definition for s in senses]
    for qa in paragraph["qas"]:
      word, synset_id, index = qa["id"].rsplit("/", 2)
      example = next(s.synset for s in senses if s.synset.id == synset_id).examples[int(index)]
      out["first"][qa["id"]] = definitions[0]
      out["random"][qa["id"]] = rng.choice(definitions)
      out["longest"][qa["id"]] = max(definitions, key=lambda d: len(d.split()))
      query = content_words(example) - content_words(display(word))
      scores = [len(query & content_words(" ".join(
          [s.synset.definition] + [display(w) for w in s.synset.lemmas]))) for s in senses]
      out["overlap"][qa["id"]] = definitions[scores.index(max(scores))]
  return out


def baselines(paragraphs: Mapping[str, Sequence[Tuple[dict, List[Sense]]]], seed: int
              ) -> Dict[str, Dict[str, Dict[str, float]]]:
  """{split: {baseline: {"exact_match", "f1"}}} with the official SQuAD v1.1 evaluation."""
  out = {}
  for split, items in paragraphs.items():
    dataset = to_squad(items)["data"]
    out[split] = {name: squad_evaluate.evaluate_v1_1(dataset, predictions)
                  for name, predictions in baseline_predictions(items, seed).items()}
  return out


def build(wordnet_dir: str, output_dir: str, seed: int
          ) -> Dict[str, List[Tuple[dict, List[Sense]]]]:
  """Builds output_dir/{train,dev,test}.json."""
  paragraphs = build_task(read_synsets(wordnet_dir), seed)
  for split, items in paragraphs.items():
    write_json(posixpath.join(output_dir, split + ".json"), to_squad(items))
    words = [len(p["context"].split()) for p, _ in items]
    logging.info("%s: %d paragraphs, %d questions, %.1f senses and %.1f words per paragraph",
                 split, len(items), sum(len(p["qas"]) for p, _ in items),
                 sum(len(s) for _, s in items) / len(items), sum(words) / len(words))
  return paragraphs


FLAGS = flags.FLAGS


def main(argv):
  if len(argv) > 1:
    raise app.UsageError("Too many command-line arguments.")
  paragraphs = build(FLAGS.wordnet_dir, FLAGS.output_dir, FLAGS.seed)
  results = baselines({s: paragraphs[s] for s in ("dev", "test")}, FLAGS.seed)
  print("baseline  dev EM / F1      test EM / F1")
  for name in results["dev"]:
    print("%-8s  %5.1f / %5.1f    %5.1f / %5.1f" % (
        name, results["dev"][name]["exact_match"], results["dev"][name]["f1"],
        results["test"][name]["exact_match"], results["test"][name]["f1"]))


if __name__ == "__main__":
  flags.DEFINE_string("wordnet_dir", "/usr/share/wordnet",
                      "Directory of data.noun/verb/adj/adv.")
  flags.DEFINE_string("output_dir",
                      os.path.join(os.path.dirname(os.path.abspath(__file__)), "wordnet_qa"),
                      "Where {train,dev,test}.json go.")
  flags.DEFINE_integer("seed", 12345, "Seed of the split draw, sense order and sampling.")
  app.run(main)
