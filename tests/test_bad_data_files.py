"""Every bad data file ends a run with one line naming the file (and line), exit status 2:
TSV files (GLUE's and the tsv task's) and SQuAD JSON, read in-process through
errors.exit_on_user_error on a fresh FlagValues, and by the real commands in a
subprocess. Each case also checks that nothing was written to --output_dir. The
model's files: test_bad_files.py.
"""

import json
import os

import pytest

from adapter_bert.classification import processors
from adapter_bert import errors
import run_squad
from adapter_bert.squad import examples as squad_examples
from adapter_bert.squad import evaluate as squad_evaluate
from bad_inputs import (MRPC, REPO, classifier_argv, classifier_fails, command_fails, copy_dir,
                        fails, write_file)

SQUAD_DEV = os.path.join(REPO, "data", "squad", "dev-v1.1.json")


# ------------------------------------------------------------- TSV files (GLUE)


def _mrpc(tmp_path, name, data):
  d = copy_dir(MRPC, tmp_path / "MRPC")
  return d, write_file(tmp_path / "MRPC" / name, data)


def test_tsv_missing(capsys, base, tmp_path):
  d = copy_dir(MRPC, tmp_path / "MRPC")
  os.remove(os.path.join(d, "dev.tsv"))
  assert (classifier_fails(capsys, base, tmp_path, data_dir=d)
          == f"{d}/dev.tsv: TSV file not found")


def test_tsv_latin1_names_the_line(capsys, base, tmp_path):
  with open(os.path.join(MRPC, "dev.tsv"), encoding="utf-8") as f:
    lines = f.read().split("\n")
  lines[3] = lines[3].replace("The", "Th\xe9", 1)
  d, path = _mrpc(tmp_path, "dev.tsv", "\n".join(lines).encode("latin-1"))
  message = classifier_fails(capsys, base, tmp_path, data_dir=d)
  assert message.startswith(f"{path}:4: not UTF-8 text (invalid continuation byte, byte "
                            f"0xe9): save the file as UTF-8"), message


def test_tsv_utf16(capsys, base, tmp_path):
  with open(os.path.join(MRPC, "dev.tsv"), encoding="utf-8") as f:
    d, path = _mrpc(tmp_path, "dev.tsv", f.read().encode("utf-16"))
  message = classifier_fails(capsys, base, tmp_path, data_dir=d)
  assert message.startswith(f"{path}:1: not UTF-8 text"), message


HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"


@pytest.mark.parametrize("row,expected", [
    ("1\t1\t2\tA cat.\n", "row has 4 tab-separated column(s), the header (line 1) has 5"),
    ("1\t1\t2\tA cat.\tA\tdog.\n",
     "row has 6 tab-separated column(s), the header (line 1) has 5"),
    ("7\t1\t2\tA cat.\tA dog.\n", "label '7' is not one of ['0', '1']"),
])
def test_tsv_bad_rows(capsys, base, tmp_path, row, expected):
  d, path = _mrpc(tmp_path, "dev.tsv", HEADER + "0\t1\t2\tA cat.\tA dog.\n" + row)
  assert classifier_fails(capsys, base, tmp_path, data_dir=d) == f"{path}:3: {expected}"


@pytest.mark.parametrize("content", ["", HEADER, HEADER + "\n\n"])
def test_tsv_empty_split(capsys, base, tmp_path, content):
  d, path = _mrpc(tmp_path, "dev.tsv", content)
  assert (classifier_fails(capsys, base, tmp_path, data_dir=d)
          == f"{path}: no examples in this file")


def test_cola_headerless_row_width(tmp_path):
  path = write_file(tmp_path / "cola" / "train.tsv", "src\t1\t\tGood.\nsrc\t0\t*\tBad.\textra\n")
  with pytest.raises(errors.UserError) as e:
    processors.get_processor("cola").get_train_examples(str(tmp_path / "cola"))
  assert str(e.value) == f"{path}:2: row has 5 tab-separated column(s), expected 4"


def test_xnli_language_without_rows(tmp_path):
  d = copy_dir(os.path.join(REPO, "data", "glue", "XNLI"), tmp_path / "XNLI")
  with pytest.raises(errors.UserError) as e:
    processors.get_processor("xnli", language="sw").get_dev_examples(d)
  assert str(e.value) == f"{d}/xnli.dev.tsv: no examples in this file for language 'sw' (column 1)"


# ------------------------------------------------------------- TSV files (tsv task)


def test_user_tsv_extra_column_and_empty_split(capsys, base, tmp_path):
  d = str(tmp_path / "data")
  write_file(tmp_path / "data" / "train.tsv", "sentence\tlabel\ngood\tpos\nbad\tneg\n")
  dev = write_file(tmp_path / "data" / "dev.tsv", "sentence\tlabel\nfine\tpos\nso\tso\tneg\n")
  assert (classifier_fails(capsys, base, tmp_path, task_name="tsv", data_dir=d)
          == f"{dev}:3: row has 3 tab-separated column(s), the header (line 1) has 2")
  write_file(tmp_path / "data" / "dev.tsv", "sentence\tlabel\n")
  assert (classifier_fails(capsys, base, tmp_path, task_name="tsv", data_dir=d)
          == f"{dev}: no examples in this file (only a header row)")
  write_file(tmp_path / "data" / "dev.tsv", "sentence\tlabel\nfine\tmeh\n")
  assert (classifier_fails(capsys, base, tmp_path, task_name="tsv", data_dir=d)
          == f"{dev}:2: label 'meh' is not one of ['neg', 'pos']")


# --------------------------------------------------------------------- SQuAD JSON


def _squad_fails(capsys, base, tmp_path, predict_file):
  argv = [f"--bert_config_file={base['bert_config_file']}",
          f"--vocab_file={base['vocab_file']}", f"--init_checkpoint={base['init_checkpoint']}",
          f"--output_dir={tmp_path / 'out'}", "--do_predict", f"--predict_file={predict_file}",
          "--max_seq_length=64", "--doc_stride=24", "--max_query_length=16"]
  message = fails(capsys, run_squad, argv)
  assert not (tmp_path / "out").exists()
  return message


def test_squad_json_missing_truncated_and_latin1(capsys, base, tmp_path):
  path = str(tmp_path / "dev.json")
  assert _squad_fails(capsys, base, tmp_path, path) == f"flag --predict_file={path}: file not found"
  with open(SQUAD_DEV, encoding="utf-8") as f:
    text = f.read()
  cut = text.index("\n", len(text) // 2) + 1  # The file cut short at a line's start.
  write_file(tmp_path / "dev.json", text[:cut])
  message = _squad_fails(capsys, base, tmp_path, path)
  line = text[:cut].count("\n") + 1
  assert message.startswith(f"{path}:{line}: malformed JSON at column 1: "), message
  latin1 = text.replace("Gull Point was", "Gull Point w\xe1s", 1)
  line = latin1[:latin1.index("\xe1")].count("\n") + 1
  write_file(tmp_path / "dev.json", latin1.encode("latin-1"))
  message = _squad_fails(capsys, base, tmp_path, path)
  assert message.startswith(f"{path}:{line}: not UTF-8 text (invalid continuation byte, "
                            f"byte 0xe1)"), message


def test_squad_json_layout_and_empty_split(tmp_path):
  path = write_file(tmp_path / "a.json", '{"version": "1.1", "data": {}}')
  with pytest.raises(errors.UserError, match=r"a\.json: not a SQuAD file \(expected a JSON "
                                             r"object with a 'data' list\)$"):
    squad_examples.read_squad_examples(path, is_training=False)
  path = write_file(tmp_path / "b.json", json.dumps({"data": [{"paragraphs": [
      {"context": 5, "qas": []}]}]}))
  with pytest.raises(errors.UserError, match=r"b\.json: field 'context' in a paragraph is 5, "
                                             r"expected str$"):
    squad_examples.read_squad_examples(path, is_training=False)
  path = write_file(tmp_path / "c.json", json.dumps({"data": [{"paragraphs": [
      {"context": "Paris.", "qas": []}]}]}))
  with pytest.raises(errors.UserError, match=r"c\.json: no questions in this file$"):
    squad_examples.read_squad_examples(path, is_training=False)
  path = write_file(tmp_path / "d.json", json.dumps({"data": [{"paragraphs": [
      {"context": "Paris.", "qas": [{"id": "q", "question": "Where?",
                                     "answers": [{"text": "Rome", "answer_start": 0}]}]}]}]}))
  with pytest.raises(errors.UserError, match=r"d\.json: none of its 1 questions has an answer "
                                             r"found in its context"):
    squad_examples.read_squad_examples(path, is_training=True)


def test_squad_evaluate_names_the_bad_file(tmp_path, capsys):
  pred = write_file(tmp_path / "pred.json", '{"q": ')
  with pytest.raises(SystemExit) as e:
    squad_evaluate.main(["--version=1.1", SQUAD_DEV, pred])
  assert e.value.code == 2
  assert capsys.readouterr().err == (
      f"ERROR: {pred}:1: malformed JSON at column 7: Expecting value\n")


# ------------------------------------------------------ the real commands, end to end


def test_run_classifier_command_with_a_latin1_tsv(base, tmp_path):
  d, path = _mrpc(tmp_path, "train.tsv", (HEADER + "1\t1\t2\tCaf\xe9.\tA dog.\n").encode(
      "latin-1"))
  out = tmp_path / "out"
  line = command_fails(["run_classifier.py", *classifier_argv(
      base, tmp_path, data_dir=d, do_train=True)], REPO)
  assert line == (f"ERROR: {path}:2: not UTF-8 text (invalid continuation byte, byte 0xe9): "
                  f"save the file as UTF-8")
  assert not out.exists()


def test_run_squad_command_with_a_truncated_json(base, tmp_path):
  path = write_file(tmp_path / "train.json", '{"data": [{"paragraphs": [\n')
  out = tmp_path / "out"
  out.mkdir()
  line = command_fails([
      "run_squad.py", f"--bert_config_file={base['bert_config_file']}",
      f"--vocab_file={base['vocab_file']}", f"--init_checkpoint={base['init_checkpoint']}",
      f"--output_dir={out}", "--do_train", f"--train_file={path}", "--max_seq_length=64",
      "--doc_stride=24", "--max_query_length=16"], REPO)
  assert line == f"ERROR: {path}:2: malformed JSON at column 1: Expecting value"
  assert os.listdir(out) == []
