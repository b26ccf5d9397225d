r"""Builds two small classification tasks from Princeton WordNet 3.0.

  wordnet_lexname  single sentence: a synset's definition -> its lexicographer
                   category (10 classes, e.g. noun.animal, verb.motion).
  wordnet_example  sentence pair: (definition, example sentence) -> 1 if the
                   example illustrates that sense, 0 if it is an example of
                   ANOTHER sense of the same word (hard negatives).

Input: WordNet's database files data.noun / data.verb (Debian package
wordnet-base, /usr/share/wordnet; format in wndb(5WN)). Output: GLUE-style TSV
files with a header row, read by run_classifier.py --task_name=tsv:

  python data/wordnet/build_wordnet_tasks.py \
      --wordnet_dir=/usr/share/wordnet --output_dir=data/wordnet

Splits are by synset: every synset is assigned to train, dev or test once
(seeded), and each task only uses a synset, in any role, inside its split.
Everything is deterministic given --seed. See README.md in this directory.
"""

import collections
import csv
import os
import random
import re
from typing import Dict, Iterable, List, Mapping, NamedTuple, Sequence, Tuple

from absl import app
from absl import flags
from absl import logging

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
# Share of synsets per split; generous for dev/test because the pair task can
# only pair two senses that landed in the same split.
SPLIT_FRACTIONS = (0.6, 0.2, 0.2)
# Examples (rows) per split; per class for wordnet_lexname.
LEXNAME_ROWS_PER_CLASS = {"train": 400, "dev": 100, "test": 100}
EXAMPLE_ROWS = {"train": 4000, "dev": 1000, "test": 1000}
# wordnet_lexname classes: the most frequent noun and verb categories.
NUM_NOUN_CLASSES, NUM_VERB_CLASSES = 7, 3

LEXNAME_HEADER = ("id", "sentence", "label")
EXAMPLE_HEADER = ("id", "lemma", "gloss_synset", "example_synset", "gloss", "example",
                  "label")


class Synset(NamedTuple):
  """One line of a data.* file.

  id: "<8-digit offset>-<ss_type>", e.g. "02084071-n" (offsets are unique only
    within one data file, so the part of speech is part of the id).
  lexname: lexicographer category, e.g. "noun.animal".
  lemmas: words of the synset, lower-cased, "_" for spaces, markers like "(a)" dropped.
  definition: the gloss without its examples.
  examples: the quoted example sentences of the gloss.
  """
  id: str
  lexname: str
  lemmas: Tuple[str, ...]
  definition: str
  examples: Tuple[str, ...]


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
  quote = gloss.find('"')
  definition = gloss if quote < 0 else gloss[:quote]
  examples = () if quote < 0 else re.findall(r'"([^"]+)"', gloss[quote:])
  return Synset("%s-%s" % (offset, ss_type), lexname, lemmas,
                clean(definition).rstrip(";").strip(),
                tuple(clean(e) for e in examples if clean(e)))


def read_synsets(wordnet_dir: str, parts: Sequence[str] = ("noun", "verb")) -> List[Synset]:
  """Reads the synsets of data.<part> files, in file order."""
  synsets = []
  for part in parts:
    with open(os.path.join(wordnet_dir, "data." + part), encoding="utf-8") as f:
      # Lines starting with two spaces are the licence header.
      synsets.extend(parse_data_line(line.rstrip("\n")) for line in f
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


def build_example_task(synsets: Sequence[Synset], split_of: Mapping[str, str],
                       rows: Mapping[str, int], seed: int) -> Dict[str, List[Tuple]]:
  """Rows (id, lemma, gloss_synset, example_synset, gloss, example, label) per split.

  Each anchor synset S with a word w gives two rows with S's definition: its own
  example that mentions w (label 1), and the example of another sense S' of w
  that mentions w (label 0). S' must be in S's split. So labels are balanced,
  every definition is seen once with each label, and the model has to tell
  which sense of w an example uses. A synset is an anchor at most once and a
  negative's source at most once.
  """
  rng = random.Random(seed)
  senses = collections.defaultdict(list)  # (part of speech, lemma) -> synsets.
  for s in sorted(synsets):
    for lemma in s.lemmas:
      senses[(s.id[-1], lemma)].append(s)
  out = {}
  for split in SPLITS:
    anchors = sorted(s for s in synsets if split_of[s.id] == split and s.examples)
    rng.shuffle(anchors)
    used_as_negative, rows_out = set(), []
    for anchor in anchors:
      if len(rows_out) >= rows[split]:
        break
      candidates = []
      for lemma in anchor.lemmas:
        positives = [e for e in anchor.examples if mentions(e, lemma)]
        for other in senses[(anchor.id[-1], lemma)]:
          if (other.id == anchor.id or split_of[other.id] != split or
              other.id in used_as_negative or other.definition == anchor.definition):
            continue
          # An example shared by both senses would carry both labels.
          negatives = [e for e in other.examples
                       if mentions(e, lemma) and e not in anchor.examples]
          if positives and negatives:
            candidates.append((lemma, other, positives, negatives))
      if not candidates:
        continue
      lemma, other, positives, negatives = rng.choice(candidates)
      used_as_negative.add(other.id)
      rows_out.append(("%s/%s" % (anchor.id, anchor.id), lemma, anchor.id, anchor.id,
                       anchor.definition, rng.choice(positives), "1"))
      rows_out.append(("%s/%s" % (anchor.id, other.id), lemma, anchor.id, other.id,
                       anchor.definition, rng.choice(negatives), "0"))
    if len(rows_out) < rows[split]:
      raise ValueError("only %d %s rows possible, need %d" % (len(rows_out), split,
                                                              rows[split]))
    rng.shuffle(rows_out)
    out[split] = rows_out
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
  """Tab-separated, no quoting (run_classifier reads without a quote character)."""
  with open(path, "w", encoding="utf-8", newline="") as f:
    writer = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_NONE, quotechar=None,
                        lineterminator="\n")
    writer.writerow(header)
    for row in rows:
      if any(("\t" in v or "\n" in v) for v in row):
        raise ValueError("tab or newline in row %s" % (row,))
      writer.writerow(row)


def build(wordnet_dir: str, output_dir: str, seed: int) -> Dict[str, Dict[str, List]]:
  """Builds both tasks into output_dir/<task>/{train,dev,test}.tsv."""
  synsets = read_synsets(wordnet_dir)
  split_of = assign_splits(synsets, seed)
  classes = lexname_classes(synsets)
  tasks = {
      "wordnet_lexname": (LEXNAME_HEADER, [0], build_lexname_task(
          synsets, split_of, classes, LEXNAME_ROWS_PER_CLASS, seed)),
      "wordnet_example": (EXAMPLE_HEADER, [2, 3], build_example_task(
          synsets, split_of, EXAMPLE_ROWS, seed)),
  }
  for task, (header, synset_columns, rows_by_split) in tasks.items():
    check_disjoint(rows_by_split, synset_columns)
    os.makedirs(os.path.join(output_dir, task), exist_ok=True)
    for split, rows in rows_by_split.items():
      write_tsv(os.path.join(output_dir, task, split + ".tsv"), header, rows)
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
  flags.DEFINE_string("wordnet_dir", "/usr/share/wordnet", "Directory of data.noun/verb.")
  flags.DEFINE_string("output_dir", os.path.dirname(os.path.abspath(__file__)),
                      "Where the <task>/{train,dev,test}.tsv files go.")
  flags.DEFINE_integer("seed", 12345, "Seed of the split assignment and sampling.")
  app.run(main)
