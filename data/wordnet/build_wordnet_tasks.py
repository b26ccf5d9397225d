r"""Builds five small classification tasks from Princeton WordNet 3.0.

  wordnet_lexname   single sentence: a synset's definition -> its lexicographer
                    category (10 classes, e.g. noun.animal, verb.contact).
  wordnet_example   sentence pair: (definition, example sentence) -> 1 if the
                    example illustrates that sense, 0 if it is an example of a
                    synset of the same category with other words.
  wordnet_pos       single sentence: a definition -> the part of speech of the
                    words it defines (noun, verb, adjective, adverb).
  wordnet_relation  word pair: (word A, word B) -> how WordNet relates B to A
                    (hypernym, hyponym, part_holonym, member_holonym).
  wordnet_gloss_relation
                    sentence pair: the same pairs and labels, read from the two
                    synsets' whole glosses (definition and example sentences):
                    texts of ordinary sentence length (35 word pieces on average).

Input: WordNet's database files data.{noun,verb,adj,adv} (Debian package
wordnet-base, /usr/share/wordnet; format in wndb(5WN)). Output: GLUE-style TSV
files with a header row, read by run_classifier.py --task_name=tsv:

  python data/wordnet/build_wordnet_tasks.py \
      --wordnet_dir=/usr/share/wordnet --output_dir=data/wordnet

Splits are by synset: every synset is assigned to train, dev or test once
(seeded), and every task only uses a synset, in any role, inside its split, so
training on several tasks' train files never sees another task's dev synsets.
Everything is deterministic given --seed. See README.md in this directory.
"""

import collections
import csv
import io
import os
import posixpath
import random
import re
from typing import Dict, Iterable, List, Mapping, NamedTuple, Sequence, Tuple

from absl import app
from absl import flags
from absl import logging

from adapter_bert.storage import file_io
from adapter_bert.storage import input_files

# lexnames(5WN): lexicographer file number -> name. The number is the second
# field of every line of the data.* files.
LEXNAMES = (
    "adj.all", "adj.pert", "adv.all", "noun.Tops", "noun.act", "noun.animal",
    "noun.artifact", "noun.attribute", "noun.body", "noun.cognition",
    "noun.communication", "noun.event", "noun.feeling", "noun.food", "noun.group",
    "noun.location", "noun.motive", "noun.object", "noun.person", "noun.phenomenon",
    "noun.plant", "noun.possession", "noun.process", "noun.quantity", "noun.relation",
    "noun.shape", "noun.state", "noun.substance", "noun.time", "verb.body",
    "verb.change", "verb.cognition", "verb.communication", "verb.competition",
    "verb.consumption", "verb.contact", "verb.creation", "verb.emotion",
    "verb.motion", "verb.perception", "verb.possession", "verb.social",
    "verb.stative", "verb.weather", "adj.ppl")
_POS_OF_TYPE = {"n": "noun", "v": "verb", "a": "adj", "s": "adj", "r": "adv"}

SPLITS = ("train", "dev", "test")
# Share of synsets per split; generous for dev/test because the pair tasks can
# only pair two synsets that landed in the same split.
SPLIT_FRACTIONS = (0.6, 0.2, 0.2)
# Examples (rows) per split; per class for wordnet_lexname.
LEXNAME_ROWS_PER_CLASS = {"train": 400, "dev": 100, "test": 100}
EXAMPLE_ROWS = {"train": 4000, "dev": 1000, "test": 1000}
POS_ROWS_PER_CLASS = {"train": 1000, "dev": 250, "test": 250}
RELATION_ROWS_PER_CLASS = {"train": 1000, "dev": 250, "test": 250}
# wordnet_lexname classes: the most frequent noun and verb categories.
NUM_NOUN_CLASSES, NUM_VERB_CLASSES = 7, 3
# wordnet_pos labels; satellite adjectives ("s") are adjectives.
POS_LABELS = {"n": "noun", "v": "verb", "a": "adjective", "s": "adjective", "r": "adverb"}
# wordnet_relation: pointer symbol of A -> B (wndb(5WN)) -> label. Noun pointers
# only, the four kinds with enough pairs inside the dev split.
RELATIONS = {"@": "hypernym", "~": "hyponym", "#p": "part_holonym", "#m": "member_holonym"}
# How often one synset may occur in a split of wordnet_relation: keeps hubs
# ("person", a genus with 100 species) from making one word predict the label.
RELATION_USES_PER_SYNSET = 3

LEXNAME_HEADER = ("id", "sentence", "label")
EXAMPLE_HEADER = ("id", "lemma", "gloss_synset", "example_synset", "gloss", "example",
                  "label")
POS_HEADER = ("id", "sentence", "label")
RELATION_HEADER = ("id", "synset_a", "synset_b", "word_a", "word_b", "label")
GLOSS_RELATION_HEADER = ("id", "synset_a", "synset_b", "gloss_a", "gloss_b", "label")


class Synset(NamedTuple):
  """One line of a data.* file.

  id: "<8-digit offset>-<ss_type>", e.g. "02084071-n" (offsets are unique only
    within one data file, so the part of speech is part of the id).
  lexname: lexicographer category, e.g. "noun.animal".
  lemmas: words of the synset, lower-cased, "_" for spaces, markers like "(a)" dropped.
  definition: the gloss without its examples.
  examples: the quoted example sentences of the gloss.
  pointers: the semantic (synset to synset) pointers, (symbol, target id), e.g.
    ("@", "02083346-n") for a hypernym; lexical (word to word) ones are left out.
  """
  id: str
  lexname: str
  lemmas: Tuple[str, ...]
  definition: str
  examples: Tuple[str, ...]
  pointers: Tuple[Tuple[str, str], ...] = ()


def clean(text: str) -> str:
  """One line of text: TSV fields must not hold tabs or newlines."""
  return " ".join(text.split())


def parse_data_line(line: str) -> Synset:
  """Parses one synset line of a data.* file (wndb(5WN)).

  Layout: `offset lex_filenum ss_type w_cnt word lex_id [word lex_id...] p_cnt
  [pointers...] [frames...] | gloss`, w_cnt in hex. The gloss is the
  definition followed by `; "example"` parts.
  """
  head, _, gloss = line.partition(" | ")
  fields = head.split()
  offset, lex_filenum, ss_type = fields[0], int(fields[1]), fields[2]
  lexname = LEXNAMES[lex_filenum]
  if lexname.split(".")[0] != _POS_OF_TYPE[ss_type]:  # Guards the LEXNAMES table.
    raise ValueError("synset %s-%s: category %s does not fit its part of speech" % (
        offset, ss_type, lexname))
  w_cnt = int(fields[3], 16)
  lemmas = tuple(re.sub(r"\(\w+\)$", "", w).lower() for w in fields[4:4 + 2 * w_cnt:2])
  # Pointers: `symbol offset pos source/target`; "0000" marks a semantic one.
  p_at = 4 + 2 * w_cnt
  p_cnt = int(fields[p_at])
  pointer_fields = fields[p_at + 1:p_at + 1 + 4 * p_cnt]
  pointers = tuple((pointer_fields[i], "%s-%s" % (pointer_fields[i + 1], pointer_fields[i + 2]))
                   for i in range(0, len(pointer_fields), 4) if pointer_fields[i + 3] == "0000")
  quote = gloss.find('"')
  definition = gloss if quote < 0 else gloss[:quote]
  examples = () if quote < 0 else re.findall(r'"([^"]+)"', gloss[quote:])
  return Synset("%s-%s" % (offset, ss_type), lexname, lemmas,
                clean(definition).rstrip(";").strip(),
                tuple(clean(e) for e in examples if clean(e)), pointers)


def read_synsets(wordnet_dir: str, parts: Sequence[str] = ("noun", "verb")) -> List[Synset]:
  """Reads the synsets of data.<part> files, in file order."""
  synsets = []
  for part in parts:
    text = input_files.read_text(posixpath.join(wordnet_dir, "data." + part),
                                 "WordNet data file", encoding="utf-8")
    # Lines starting with two spaces are the licence header.
    synsets.extend(parse_data_line(line) for line in text.split("\n")
                   if not line.startswith("  ") and line.strip())
  return synsets


def assign_splits(synsets: Iterable[Synset], seed: int,
                  fractions: Sequence[float] = SPLIT_FRACTIONS) -> Dict[str, str]:
  """Synset id -> split, drawn once per synset so that both tasks share it."""
  rng = random.Random(seed)
  bounds = [sum(fractions[:i + 1]) for i in range(len(SPLITS))]
  out = {}
  for synset_id in sorted(s.id for s in synsets):
    r = rng.random() * bounds[-1]
    out[synset_id] = next(split for split, b in zip(SPLITS, bounds) if r < b)
  return out


def lexname_classes(synsets: Sequence[Synset], num_noun: int = NUM_NOUN_CLASSES,
                    num_verb: int = NUM_VERB_CLASSES) -> List[str]:
  """The most frequent noun and verb categories (ties broken by name)."""
  counts = collections.Counter(s.lexname for s in synsets)
  ranked = sorted(counts, key=lambda name: (-counts[name], name))
  nouns = [n for n in ranked if n.startswith("noun.")][:num_noun]
  verbs = [n for n in ranked if n.startswith("verb.")][:num_verb]
  return sorted(nouns + verbs)


def build_lexname_task(synsets: Sequence[Synset], split_of: Mapping[str, str],
                       classes: Sequence[str], rows_per_class: Mapping[str, int],
                       seed: int) -> Dict[str, List[Tuple[str, str, str]]]:
  """Rows (id, sentence, label) per split, the same number for every class."""
  rng = random.Random(seed)
  pools = collections.defaultdict(list)
  for s in sorted(synsets):
    if s.lexname in classes and s.definition:
      pools[(split_of[s.id], s.lexname)].append(s)
  out = {}
  for split in SPLITS:
    rows = []
    for lexname in sorted(classes):
      pool = pools[(split, lexname)]
      if len(pool) < rows_per_class[split]:
        raise ValueError("%s has only %d %s synsets, need %d" % (
            split, len(pool), lexname, rows_per_class[split]))
      rows += [(s.id, s.definition, s.lexname)
               for s in rng.sample(pool, rows_per_class[split])]
    rng.shuffle(rows)
    out[split] = rows
  return out


def mentions(sentence: str, lemma: str) -> bool:
  """Whether `sentence` contains `lemma` or an inflection of it (heuristic).

  A word-initial match of the lemma, or of the lemma without a final "e"
  ("breathe" -> "breathing"); irregular forms ("run" -> "ran") are missed.
  """
  words = lemma.replace("_", " ").lower()
  stem = words[:-1] if words.endswith("e") and len(words) > 3 else words
  return re.search(r"\b" + re.escape(stem), sentence.lower()) is not None


def usages(synset: Synset) -> List[Tuple[str, str]]:
  """(word, example) for each example of `synset` and each of its words it mentions."""
  return [(lemma, example) for example in synset.examples for lemma in synset.lemmas
          if mentions(example, lemma)]


def build_example_task(synsets: Sequence[Synset], split_of: Mapping[str, str],
                       rows: Mapping[str, int], seed: int,
                       max_tries: int = 50) -> Dict[str, List[Tuple]]:
  """Rows (id, lemma, gloss_synset, example_synset, gloss, example, label) per split.

  Each anchor synset S gives two rows with S's definition: an example of S that
  mentions a word w of S (label 1), and an example of another synset S' of the
  same lexicographer category (label 0) that mentions a word of S' and none of
  S's words. `lemma` is the word of example_synset that the example mentions. So
  labels are balanced, every definition is seen once with each label, and the
  model has to tell whether a word of the example fits the definition; the
  negative is on the same kind of thing (an animal for an animal), not a random
  sentence. Neither example's word occurs in the definition, which would give
  the answer away. A synset is an anchor at most once and a negative's source
  at most once; S' is drawn at random from the category (up to `max_tries`
  draws, then S is skipped).

  (An earlier version took S' among the other senses of w, as in WiC: no method
  learned that within this task's few-minute budget; see README.md.)
  """
  rng = random.Random(seed)
  pools = collections.defaultdict(list)  # (split, lexname) -> synsets with examples.
  for s in sorted(synsets):
    if s.examples:
      pools[(split_of[s.id], s.lexname)].append(s)
  out = {}
  for split in SPLITS:
    anchors = sorted(s for s in synsets if split_of[s.id] == split and s.examples)
    rng.shuffle(anchors)
    used_as_negative, rows_out = set(), []
    for anchor in anchors:
      if len(rows_out) >= rows[split]:
        break
      positives = [(lemma, example) for lemma, example in usages(anchor)
                   if not mentions(anchor.definition, lemma)]
      if not positives:
        continue
      pool, words, negative = pools[(split, anchor.lexname)], set(anchor.lemmas), None
      for _ in range(max_tries):
        other = rng.choice(pool)
        if (other.id == anchor.id or other.id in used_as_negative or words & set(other.lemmas)
            or other.definition == anchor.definition):
          continue
        candidates = [(lemma, example) for lemma, example in usages(other)
                      if example not in anchor.examples
                      and not mentions(anchor.definition, lemma)
                      and not any(mentions(example, w) for w in words)]
        if candidates:
          negative = (other, candidates)
          break
      if negative is None:
        continue
      other, candidates = negative
      used_as_negative.add(other.id)
      lemma, example = rng.choice(positives)
      rows_out.append(("%s/%s" % (anchor.id, anchor.id), lemma, anchor.id, anchor.id,
                       anchor.definition, example, "1"))
      lemma, example = rng.choice(candidates)
      rows_out.append(("%s/%s" % (anchor.id, other.id), lemma, anchor.id, other.id,
                       anchor.definition, example, "0"))
    if len(rows_out) < rows[split]:
      raise ValueError("only %d %s rows possible, need %d" % (len(rows_out), split,
                                                              rows[split]))
    rng.shuffle(rows_out)
    out[split] = rows_out
  return out


def build_pos_task(synsets: Sequence[Synset], split_of: Mapping[str, str],
                   rows_per_class: Mapping[str, int],
                   seed: int) -> Dict[str, List[Tuple[str, str, str]]]:
  """Rows (id, sentence, label) per split: a definition and its synset's part of speech."""
  rng = random.Random(seed)
  pools = collections.defaultdict(list)
  for s in sorted(synsets):
    if s.definition:
      pools[(split_of[s.id], POS_LABELS[s.id[-1]])].append(s)
  out = {}
  for split in SPLITS:
    rows = []
    for label in sorted(set(POS_LABELS.values())):
      pool = pools[(split, label)]
      if len(pool) < rows_per_class[split]:
        raise ValueError("%s has only %d %s synsets, need %d" % (
            split, len(pool), label, rows_per_class[split]))
      rows += [(s.id, s.definition, label) for s in rng.sample(pool, rows_per_class[split])]
    rng.shuffle(rows)
    out[split] = rows
  return out


def word_of(synset: Synset) -> str:
  """A synset's first (most frequent) word, with spaces."""
  return synset.lemmas[0].replace("_", " ")


def build_relation_task(synsets: Sequence[Synset], split_of: Mapping[str, str],
                        rows_per_class: Mapping[str, int], seed: int,
                        uses_per_synset: int = RELATION_USES_PER_SYNSET
                        ) -> Dict[str, List[Tuple]]:
  """Rows (id, synset_a, synset_b, word_a, word_b, label) per split.

  Each row is a pointer A -> B of RELATIONS between two noun synsets of the
  same split; the texts are their first words, the label the pointer's kind:
  B is a hypernym of A (A is a kind of B), a hyponym (B is a kind of A), a
  part holonym (A is a part of B) or a member holonym (A is a member of B).
  WordNet stores each hypernym link at both ends (@ and ~), so hyponym rows are
  hypernym links read from the other end; a pair of synsets is used once, in
  one direction, so only the order of the two words tells the labels apart.
  A pair of words occurs once in the whole task (never again in another split),
  a synset at most `uses_per_synset` times per split; identical words are
  skipped.
  """
  rng = random.Random(seed)
  by_id = {s.id: s for s in synsets}
  links = collections.defaultdict(list)  # (split, label) -> [(A, B)].
  for s in sorted(synsets):
    if not s.id.endswith("-n"):
      continue
    for symbol, target in s.pointers:
      if (symbol in RELATIONS and target.endswith("-n") and target in split_of
          and split_of[target] == split_of[s.id]):
        links[(split_of[s.id], RELATIONS[symbol])].append((s.id, target))
  out, seen_words = {}, set()
  for split in SPLITS:
    uses, seen_pairs, rows = collections.Counter(), set(), []
    for label in sorted(set(RELATIONS.values())):
      pool = list(links[(split, label)])
      rng.shuffle(pool)
      count = 0
      for a, b in pool:
        if count == rows_per_class[split]:
          break
        word_a, word_b = word_of(by_id[a]), word_of(by_id[b])
        pair, words = frozenset((a, b)), frozenset((word_a, word_b))
        if (word_a == word_b or pair in seen_pairs or words in seen_words
            or uses[a] >= uses_per_synset or uses[b] >= uses_per_synset):
          continue
        seen_pairs.add(pair)
        seen_words.add(words)
        uses.update((a, b))
        rows.append(("%s/%s" % (a, b), a, b, word_a, word_b, label))
        count += 1
      if count < rows_per_class[split]:
        raise ValueError("%s has only %d %s pairs, need %d" % (
            split, count, label, rows_per_class[split]))
    rng.shuffle(rows)
    out[split] = rows
  return out


def gloss_of(synset: Synset) -> str:
  """A synset's whole gloss as WordNet prints it: the definition, then each example
  sentence in quotes, separated by "; "."""
  return "; ".join([synset.definition] + ['"%s"' % e for e in synset.examples])


def build_gloss_relation_task(synsets: Sequence[Synset],
                              relation_rows: Mapping[str, Sequence[Tuple]]
                              ) -> Dict[str, List[Tuple]]:
  """wordnet_relation's rows read from the two synsets' whole glosses instead of their
  words: rows (id, synset_a, synset_b, gloss_a, gloss_b, label) per split.

  The same pairs, labels and order, so the splits stay shared; only the texts
  are longer (sentence pairs of ordinary length rather than two words).
  """
  by_id = {s.id: s for s in synsets}
  out = {}
  for split, rows in relation_rows.items():
    out[split] = []
    for row_id, a, b, _, _, label in rows:
      gloss_a, gloss_b = gloss_of(by_id[a]), gloss_of(by_id[b])
      if not (gloss_a and gloss_b):
        raise ValueError("synset %s or %s has no gloss" % (a, b))
      out[split].append((row_id, a, b, gloss_a, gloss_b, label))
  return out


def check_disjoint(rows_by_split: Mapping[str, Sequence[Tuple]],
                   synset_columns: Sequence[int]) -> None:
  """Asserts that no synset occurs in two splits, in any of `synset_columns`."""
  seen = {}
  for split, rows in rows_by_split.items():
    for row in rows:
      for column in synset_columns:
        other = seen.setdefault(row[column], split)
        if other != split:
          raise AssertionError("synset %s is in both %s and %s" % (row[column], other, split))


def write_tsv(path: str, header: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
  """Tab-separated, no quoting (run_classifier reads without a quote character);
  written whole through tf.io.gfile (a bucket path works)."""
  text = io.StringIO()
  writer = csv.writer(text, delimiter="\t", quoting=csv.QUOTE_NONE, quotechar=None,
                      lineterminator="\n")
  writer.writerow(header)
  for row in rows:
    if any(("\t" in v or "\n" in v) for v in row):
      raise ValueError("tab or newline in row %s" % (row,))
    writer.writerow(row)
  file_io.atomic_write(path, text.getvalue())


def build(wordnet_dir: str, output_dir: str, seed: int) -> Dict[str, Dict[str, List]]:
  """Builds the five tasks into output_dir/<task>/{train,dev,test}.tsv."""
  synsets = read_synsets(wordnet_dir)
  split_of = assign_splits(synsets, seed)
  # Adjectives and adverbs get their own draw, so adding them left the noun and
  # verb splits (and the tasks built on them alone) as they were.
  adj_adv = read_synsets(wordnet_dir, parts=("adj", "adv"))
  split_of.update(assign_splits(adj_adv, seed))
  classes = lexname_classes(synsets)
  relation = build_relation_task(synsets, split_of, RELATION_ROWS_PER_CLASS, seed)
  tasks = {
      "wordnet_lexname": (LEXNAME_HEADER, [0], build_lexname_task(
          synsets, split_of, classes, LEXNAME_ROWS_PER_CLASS, seed)),
      "wordnet_example": (EXAMPLE_HEADER, [2, 3], build_example_task(
          synsets, split_of, EXAMPLE_ROWS, seed)),
      "wordnet_pos": (POS_HEADER, [0], build_pos_task(
          synsets + adj_adv, split_of, POS_ROWS_PER_CLASS, seed)),
      "wordnet_relation": (RELATION_HEADER, [1, 2], relation),
      "wordnet_gloss_relation": (GLOSS_RELATION_HEADER, [1, 2],
                                 build_gloss_relation_task(synsets, relation)),
  }
  # One split per synset across all tasks: multi-task training on every train
  # file must not see a synset of any dev or test file.
  check_disjoint({split: [(row[column],) for _, columns, rows_by_split in tasks.values()
                          for row in rows_by_split[split] for column in columns]
                  for split in SPLITS}, [0])
  for task, (header, _, rows_by_split) in tasks.items():
    for split, rows in rows_by_split.items():
      write_tsv(posixpath.join(output_dir, task, split + ".tsv"), header, rows)
      labels = collections.Counter(row[-1] for row in rows)
      logging.info("%s/%s: %d rows, labels %s", task, split, len(rows),
                   dict(sorted(labels.items())))
  return {task: rows for task, (_, _, rows) in tasks.items()}


FLAGS = flags.FLAGS


def main(argv):
  if len(argv) > 1:
    raise app.UsageError("Too many command-line arguments.")
  build(FLAGS.wordnet_dir, FLAGS.output_dir, FLAGS.seed)


if __name__ == "__main__":
  flags.DEFINE_string("wordnet_dir", "/usr/share/wordnet",
                      "Directory of data.noun/verb/adj/adv.")
  flags.DEFINE_string("output_dir", os.path.dirname(os.path.abspath(__file__)),
                      "Where the <task>/{train,dev,test}.tsv files go.")
  flags.DEFINE_integer("seed", 12345, "Seed of the split assignment and sampling.")
  app.run(main)
