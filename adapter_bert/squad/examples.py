"""SQuAD v1.1 / v2.0 files -> SquadExamples: the original's reading, with clear errors.

Follows google-research/bert `run_squad.py` (which adapter-bert keeps
unchanged). Model Garden's `official/nlp/data/squad_lib.py` is a fork of that
file; its `SquadExample` is still identical to the original's and is reused;
the reading is written here (clear errors for bad files, no translated-input
folder). The features made from the examples: squad/features.py.

All file I/O goes through `tf.io.gfile`, so gs:// and ram:// paths work. A
file that is missing, not UTF-8, not JSON, not laid out as SQuAD or without
questions is an errors.UserError naming it (and the line, for JSON syntax).
"""

import collections
from typing import List, Optional

from absl import logging

from official.nlp.data import squad_lib as _mg

from adapter_bert import errors
from adapter_bert.storage import input_files

# Identical to the original's class (checked line by line).
SquadExample = _mg.SquadExample

# A paragraph's context: its text, its whitespace-split words and, for each
# character, the index of its word (-1 before the first).
_Context = collections.namedtuple("Context", ["text", "doc_tokens", "char_to_word_offset"])
# An answer: its text and its first and last word (inclusive; -1, -1 for none).
_WordSpan = collections.namedtuple("WordSpan", ["text", "start", "end"])




# --------------------------------------------------------------------------
# JSON files
# --------------------------------------------------------------------------


def load_squad_json(input_file: str) -> dict:
  """Reads a SQuAD-format JSON file ({"data": [...], "version": ...})."""
  data = input_files.read_json(input_file)
  if not isinstance(data, dict) or not isinstance(data.get("data"), list):
    raise errors.UserError("not a SQuAD file (expected a JSON object with a "
                           "'data' list)", input_file)
  return data


# --------------------------------------------------------------------------
# JSON -> SquadExample
# --------------------------------------------------------------------------


def _is_whitespace(c: str) -> bool:
  # U+202F (narrow no-break space) is in the original's list: SQuAD contexts
  # contain it and str.isspace() would also treat other characters (e.g.
  # U+00A0) as separators, shifting answer offsets. Keep the original's set.
  return c in (" ", "\t", "\r", "\n") or ord(c) == 0x202F


def _split_context(paragraph_text: str):
  """Whitespace-splits a context; returns (doc_tokens, char_to_word_offset)."""
  doc_tokens = []
  char_to_word_offset = []
  prev_is_whitespace = True
  for c in paragraph_text:
    if _is_whitespace(c):
      prev_is_whitespace = True
    else:
      if prev_is_whitespace:
        doc_tokens.append(c)
      else:
        doc_tokens[-1] += c
      prev_is_whitespace = False
    char_to_word_offset.append(len(doc_tokens) - 1)
  return doc_tokens, char_to_word_offset


def _field(obj, key, input_file, where, kind=None):
  """obj[key] with an error that says which file and question lacks it.

  With `kind` (a type or tuple of types) a value of another type is an error
  too: a context that is a number would otherwise fail deep in tokenization.
  """
  try:
    value = obj[key]
  except (KeyError, TypeError, IndexError):
    raise errors.UserError("missing field '%s' in %s" % (key, where), input_file) from None
  if kind is not None and (not isinstance(value, kind) or isinstance(value, bool)):
    names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
    raise errors.UserError("field '%s' in %s is %r, expected %s" %
                           (key, where, value, names), input_file)
  return value


def read_squad_examples(input_file: str, is_training: bool,
                        version_2_with_negative: bool = False
                        ) -> List[SquadExample]:
  """Reads a SQuAD JSON file into a list of `SquadExample`.

  Same algorithm as the original `read_squad_examples` (whose v2 switch was a
  global flag). Model Garden's copy is not used because its errors do not say
  which file/question is wrong and it reads extra "translated" folders.

  Args:
    input_file: path of a SQuAD v1.1 or v2.0 JSON file (any gfile path).
    is_training: whether to read answers (training needs exactly one answer
      per answerable question; prediction ignores answers).
    version_2_with_negative: read `is_impossible` (SQuAD v2.0).

  Returns:
    The examples, in file order. Training examples whose answer text cannot
    be found in the whitespace-tokenized context are skipped with a warning,
    as in the original.

  Raises:
    errors.UserError: naming the file: unreadable or malformed JSON, missing
      or mistyped fields, a question id given twice, a training question without
      exactly one answer, an answer offset outside its context, or no question
      to use at all.
  """
  examples = []
  num_questions = 0
  ids = set()
  for entry in load_squad_json(input_file)["data"]:
    for paragraph in _field(entry, "paragraphs", input_file, "an article", list):
      context = _read_context(paragraph, input_file)
      for qa in _field(paragraph, "qas", input_file, "a paragraph", list):
        num_questions += 1
        _check_new_id(qa, ids, input_file)
        example = _read_question(qa, context, input_file, is_training,
                                 version_2_with_negative)
        if example is not None:
          examples.append(example)
  if not examples:
    raise errors.UserError(
        "no questions in this file" if not num_questions else
        "none of its %d questions has an answer found in its context (see the "
        "'Could not find answer' warnings)" % num_questions, input_file)
  return examples


def _check_new_id(qa, ids: set, input_file: str) -> None:
  """A question's id is its own: predictions.json keys its answer by the id (as a
  string), so two questions of one id (1 and "1" too) would leave one answer."""
  qas_id = _field(qa, "id", input_file, "a question", (str, int))
  if str(qas_id) in ids:
    raise errors.UserError(f"question id {qas_id!r} is given twice: predictions.json keys "
                           "each answer by its question's id; give every question its own",
                           input_file)
  ids.add(str(qas_id))


def _read_context(paragraph, input_file: str) -> _Context:
  """A paragraph's context, split into words once for all of its questions."""
  text = _field(paragraph, "context", input_file, "a paragraph", str)
  doc_tokens, char_to_word_offset = _split_context(text)
  return _Context(text, doc_tokens, char_to_word_offset)


def _read_question(qa, context: _Context, input_file: str, is_training: bool,
                   version_2_with_negative: bool) -> Optional[SquadExample]:
  """One question of a paragraph; None if its training answer is not in its words."""
  qas_id = _field(qa, "id", input_file, "a question", (str, int))
  where = "question %r" % (qas_id,)
  question_text = _field(qa, "question", input_file, where, str)
  # Prediction reads no answer: its fields stay None, as the original's.
  answer = _WordSpan(text=None, start=None, end=None)
  is_impossible = False
  if is_training:
    if version_2_with_negative:
      is_impossible = bool(_field(qa, "is_impossible", input_file, where))
    answer = _training_answer(qa, qas_id, where, context, input_file, is_impossible)
    if answer is None:
      return None
  return SquadExample(
      qas_id=qas_id,
      question_text=question_text,
      doc_tokens=context.doc_tokens,
      orig_answer_text=answer.text,
      start_position=answer.start,
      end_position=answer.end,
      is_impossible=is_impossible)


def _training_answer(qa, qas_id, where: str, context: _Context, input_file: str,
                     is_impossible: bool) -> Optional[_WordSpan]:
  """A training question's answer as words of its context.

  An impossible question (v2.0) gets ("", -1, -1). None (and a warning) when
  the answer's text cannot be recovered from the whitespace-split words: the
  original skips such questions (e.g. odd Unicode cases), so training may see
  fewer examples than the file holds.
  """
  answers = _field(qa, "answers", input_file, where, list)
  if is_impossible:
    return _WordSpan(text="", start=-1, end=-1)
  if len(answers) != 1:
    raise errors.UserError(
        "For training, each question should have exactly 1 answer: "
        "question %r has %d" % (qas_id, len(answers)), input_file)
  answer = _answer_words(answers[0], qas_id, where, context, input_file)
  actual_text = " ".join(context.doc_tokens[answer.start:(answer.end + 1)])
  cleaned_answer_text = " ".join(answer.text.strip().split())
  if actual_text.find(cleaned_answer_text) == -1:
    logging.warning("Could not find answer: '%s' vs. '%s'",
                    actual_text, cleaned_answer_text)
    return None
  return answer


def _answer_words(answer, qas_id, where: str, context: _Context,
                  input_file: str) -> _WordSpan:
  """An answer's text and its first and last word (indices into context.doc_tokens).

  The original would raise a bare IndexError (or silently use the previous word
  for an empty answer) where this raises a UserError.
  """
  text = _field(answer, "text", input_file, where, str)
  offset = _field(answer, "answer_start", input_file, where, int)
  length = len(text)
  if length == 0 or offset < 0 or offset + length > len(context.char_to_word_offset):
    raise errors.UserError(
        "answer %r (answer_start %d) of question %r lies outside its context of %d "
        "characters" % (text, offset, qas_id, len(context.text)), input_file)
  return _WordSpan(text=text, start=context.char_to_word_offset[offset],
                   end=context.char_to_word_offset[offset + length - 1])
