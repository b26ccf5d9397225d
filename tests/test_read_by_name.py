"""Input that parses but means something else is refused or read as its header says,
never read wrongly in silence: columns found by their header names, regression
targets finite, labels that read alike refused, question ids each their own."""

import json
import os
import re
import shutil

import pytest

from adapter_bert import errors
from adapter_bert import label_lists
from adapter_bert.classification import processors
from adapter_bert.squad import examples as squad_examples
from run_harness import GLUE, classifier_flags, run_main

REPO = os.path.dirname(GLUE.rstrip("/").rsplit("/", 1)[0])


def _rewrite(path, order):
  """The TSV file at `path` with its columns in `order` (a permutation of indices)."""
  with open(path, encoding="utf-8") as f:
    rows = [line.rstrip("\n").split("\t") for line in f]
  with open(path, "w", encoding="utf-8") as f:
    f.writelines("\t".join(row[i] for i in order) + "\n" for row in rows)


def _texts(examples):
  return [(e.text_a, e.text_b, e.label) for e in examples]


@pytest.mark.parametrize("task,order", [
    ("MRPC", [3, 0, 4, 2, 1]),  # The texts first, the label between them.
    ("STS-B", [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]),
    ("MNLI", [11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]),  # train.tsv; gold_label first.
    ("QNLI", [3, 2, 1, 0]),
])
def test_glue_columns_are_found_by_their_header_names(tmp_path, task, order):
  """A GLUE file with its columns in another order gives the same examples: read by
  position (the original), its label would have become a text."""
  processor = processors.get_processor(task)
  moved = str(tmp_path / task)
  shutil.copytree(os.path.join(GLUE, task), moved)
  _rewrite(os.path.join(moved, "train.tsv"), order)
  assert _texts(processor.get_train_examples(moved)) == _texts(
      processor.get_train_examples(os.path.join(GLUE, task)))


@pytest.mark.parametrize("task,files_of,missing,role", [
    ("MRPC", "SST-2", "#1 String", "first text"),
    ("RTE", "QNLI", "sentence1", "first text"),
    ("QNLI", "RTE", "question", "first text"),
    ("STS-B", "RTE", "score", "label"),
])
def test_a_file_of_another_layout_is_refused_naming_file_and_column(
    base, tmp_path, task, files_of, missing, role):
  """Another task's files under a task's name (its header names other columns): one
  line naming the file, its header line and the column expected; nothing written."""
  processor = processors.get_processor(task)
  data_dir = str(tmp_path / "data")
  shutil.copytree(os.path.join(GLUE, files_of), data_dir)
  with pytest.raises(errors.UserError, match=(
      rf"^{data_dir}/train\.tsv:1: no column named '{missing}' \(the {role} this task "
      rf"reads\); the header has \[.*\]: a file of another layout or task$")):
    processor.get_train_examples(data_dir)
  out = tmp_path / "out"
  with pytest.raises(errors.UserError, match=f"no column named '{missing}'"):
    run_main(**classifier_flags(base, task_name=task, data_dir=data_dir, do_train=True,
                                output_dir=str(out)))
  assert not out.exists()


@pytest.mark.parametrize("score", ["nan", "inf", "-Infinity"])
def test_a_regression_target_must_be_finite(tmp_path, score):
  data_dir = str(tmp_path / "stsb")
  shutil.copytree(os.path.join(GLUE, "STS-B"), data_dir)
  path = os.path.join(data_dir, "dev.tsv")
  with open(path, encoding="utf-8") as f:
    lines = f.read().split("\n")
  row = lines[2].split("\t")
  lines[2] = "\t".join(row[:-1] + [score])
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(lines))
  with pytest.raises(errors.UserError, match=(
      rf"^{path}:3: score '{score}' is not a finite number$")):
    processors.get_processor("sts-b").get_dev_examples(data_dir)


def _tsv_task(tmp_path, labels):
  data_dir = tmp_path / "tsv"
  data_dir.mkdir()
  rows = "".join(f"r{i}\ttext {i}\t{label}\n" for i, label in enumerate(labels))
  (data_dir / "train.tsv").write_text("id\tsentence\tlabel\n" + rows, encoding="utf-8")
  return str(data_dir)


@pytest.mark.parametrize("second", ["pos\u200b", "Pos", "pos ", "\ufeffpos", "ｐｏｓ"])
def test_labels_that_read_alike_are_refused_naming_both_rows(tmp_path, second):
  """train.tsv's labels: one class under two spellings would be two classes."""
  data_dir = _tsv_task(tmp_path, ["pos", "neg", second])
  processor = processors.get_processor("tsv", data_dir=data_dir)
  with pytest.raises(errors.UserError, match=(
      rf"^{data_dir}/train\.tsv:4: label {re.escape(repr(second))} and label 'pos' \(line 2\) "
      r"differ only "
      r"in case, spacing or characters a reader cannot see: one class under two "
      r"spellings; give it one$")):
    processor.get_labels()


def test_every_label_list_refuses_labels_that_read_alike():
  """--labels, a bank's task, an adapter file: the one check of a label list."""
  with pytest.raises(errors.UserError, match=(
      r"^--labels: labels 'pos' and 'POS' differ only in case")):
    processors.get_processor("tsv", labels=["pos", "neg", "POS"])
  assert label_lists.labels_problem(["pos", "neg", "neutral"]) is None
  assert label_lists.labels_problem(["noun.act", "noun.animal", "verb.motion"]) is None


def _squad(tmp_path, name, ids):
  """data/squad's `name` with its first questions' ids set to `ids`."""
  with open(os.path.join(REPO, "data", "squad", name)) as f:
    data = json.load(f)
  qas = [qa for p in data["data"][0]["paragraphs"] for qa in p["qas"]]
  for qa, qid in zip(qas, ids):
    qa["id"] = qid
  path = tmp_path / name
  path.write_text(json.dumps(data))
  return str(path), qas


@pytest.mark.parametrize("first,second", [("q1", "q1"), (7, "7")])
def test_a_question_id_given_twice_is_refused_naming_it(tmp_path, first, second):
  """predictions.json keys answers by question id: two questions of one id (as a
  string) would leave one answer standing for both."""
  for name, is_training in (("dev-v1.1.json", False), ("train-v1.1.json", True)):
    path, qas = _squad(tmp_path, name, [first, second])
    assert len(qas) >= 2
    with pytest.raises(errors.UserError, match=(
        rf"^{path}: question id {second!r} is given twice: predictions.json keys each "
        "answer by its question's id; give every question its own$")):
      squad_examples.read_squad_examples(path, is_training)
