"""Generated input that parses but could mean something else (generated_inputs.py):
columns in any order or missing, non-finite targets, labels that read alike,
question ids given twice. Each property says what comes out: the examples the
header says, or one line naming the file and row (and the column, label or id)."""

import json
import os
import re
import shutil
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from adapter_bert import errors
from adapter_bert.classification import processors
from adapter_bert.squad import examples as squad_examples
import generated_inputs as gen
from run_harness import GLUE

SQUAD_DEV = os.path.join(os.path.dirname(GLUE), "squad", "dev-v1.1.json")


def _rows(path):
  with open(path, encoding="utf-8") as f:
    return [line.rstrip("\n").split("\t") for line in f]


def _write_rows(path, rows):
  with open(path, "w", encoding="utf-8") as f:
    f.writelines("\t".join(row) + "\n" for row in rows)


def _texts(examples):
  return [(e.text_a, e.text_b, e.label) for e in examples]


@pytest.mark.parametrize("task", ["MRPC", "STS-B", "QQP", "RTE"])
def test_any_column_order_reads_the_same_and_a_missing_column_is_named(task):
  processor = processors.get_processor(task)
  rows = _rows(os.path.join(GLUE, task, "train.tsv"))
  expected = _texts(processor.get_train_examples(os.path.join(GLUE, task)))
  read = set(n for n in processor.column_names if n)

  @settings(**gen.SETTINGS)
  @given(order=st.permutations(range(len(rows[0]))),
         renamed=st.one_of(st.none(), st.sampled_from(sorted(read))),
         new_name=gen.hostile_text())
  def check(order, renamed, new_name):
    header = [rows[0][i] for i in order]
    if renamed is not None:
      header[header.index(renamed)] = new_name
    with tempfile.TemporaryDirectory() as d:
      path = os.path.join(d, "train.tsv")
      _write_rows(path, [header] + [[row[i] for i in order] for row in rows[1:]])
      if renamed is None or new_name.strip() == renamed:
        assert _texts(processor.get_train_examples(d)) == expected
        return
      with pytest.raises(errors.UserError) as error:
        processor.get_train_examples(d)
      assert str(error.value).startswith(
          f"{path}:1: no column named {renamed!r} (the "), str(error.value)
  check()


@settings(**gen.SETTINGS)
@given(score=gen.NON_FINITE, row=st.integers(1, 8))
def test_a_non_finite_target_is_refused_naming_file_and_line(score, row):
  rows = _rows(os.path.join(GLUE, "STS-B", "train.tsv"))
  row = min(row, len(rows) - 1)
  rows[row][-1] = score
  with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "train.tsv")
    _write_rows(path, rows)
    with pytest.raises(errors.UserError, match=(
        rf"^{re.escape(path)}:{row + 1}: score {re.escape(repr(score))} is not a finite "
        "number$")):
      processors.get_processor("sts-b").get_train_examples(d)


@settings(**gen.SETTINGS)
@given(data=st.data(), labels=st.lists(st.sampled_from(["pos", "neg", "a", "noun.act"]),
                                       min_size=1, max_size=6, unique=True))
def test_labels_that_read_alike_are_refused_naming_both_rows(data, labels):
  """However the second spelling differs (case, spaces, invisible characters, width),
  the file is refused naming the later row, the earlier one and both labels."""
  original = data.draw(st.sampled_from(labels))
  variant = data.draw(gen.look_alike(original))
  at = data.draw(st.integers(0, len(labels)))
  rows = [[f"r{i}", f"text {i}", label] for i, label in enumerate(labels)]
  rows.insert(at + 1, ["x", "another text", variant])
  first = next(i for i, row in enumerate(rows) if row[2] in (original, variant))
  later = next(i for i, row in enumerate(rows) if row[2] in (original, variant) and i > first)
  with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "train.tsv")
    _write_rows(path, [["id", "sentence", "label"]] + rows)
    with pytest.raises(errors.UserError) as error:
      processors.get_processor("tsv", data_dir=d).get_labels()
    assert str(error.value) == (
        f"{path}:{later + 2}: label {rows[later][2]!r} and label {rows[first][2]!r} (line "
        f"{first + 2}) differ only in case, spacing or characters a reader cannot see: one "
        "class under two spellings; give it one")


@settings(**gen.SETTINGS)
@given(ids=st.lists(gen.QUESTION_IDS, min_size=1, max_size=3), data=st.data())
def test_question_ids_are_each_their_own_or_the_file_is_refused_naming_one(ids, data):
  if data.draw(st.booleans()):  # An id again, maybe as the other type ("7" for 7).
    at = data.draw(st.integers(0, len(ids) - 1))
    again = ids[at]
    if data.draw(st.booleans()) and str(again).isdigit():
      again = str(again) if isinstance(again, int) else int(again)
    ids.insert(data.draw(st.integers(at + 1, len(ids))), again)
  with open(SQUAD_DEV) as f:
    data = json.load(f)
  qas = [qa for p in data["data"][0]["paragraphs"] for qa in p["qas"]][:len(ids)]
  ids = ids[:len(qas)]
  for qa, qid in zip(qas, ids):
    qa["id"] = qid
  data["data"] = [{"title": "t", "paragraphs": [
      {"context": p["context"], "qas": [qa for qa in p["qas"] if qa in qas]}
      for p in data["data"][0]["paragraphs"]]}]
  with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "dev.json")
    with open(path, "w") as f:
      json.dump(data, f)
    seen, twice = set(), None
    for qid in ids:
      if str(qid) in seen and twice is None:
        twice = qid
      seen.add(str(qid))
    if twice is None:
      assert len(set(map(str, ids))) == len(ids)
      read = squad_examples.read_squad_examples(path, False)
      assert [e.qas_id for e in read] == ids
      return
    with pytest.raises(errors.UserError, match=(
        rf"^{re.escape(path)}: question id {re.escape(repr(twice))} is given twice")):
      squad_examples.read_squad_examples(path, False)
