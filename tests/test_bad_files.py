"""Every bad input file ends a run with one line naming the file (and line), exit status 2.

The entry points run `main` through errors.exit_on_user_error; here most cases
run that wrapper in-process on a fresh FlagValues and read what it printed,
and a few run the real commands in a subprocess. Each case also checks that
nothing was written to --output_dir.
"""

import functools
import json
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
from absl import flags
from safetensors.numpy import save as save_safetensors
import tensorflow as tf

from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import checkpoint_io
from adapter_bert.classification import processors
import convert_checkpoint
from adapter_bert import errors
from adapter_bert.model import modeling
import run_classifier
import run_squad
from adapter_bert.runtime import run_config
from adapter_bert.runtime import trainable
from adapter_bert.squad import examples as squad_examples
from adapter_bert.squad import evaluate as squad_evaluate
import tiny_bert

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MRPC = os.path.join(REPO, "data", "glue", "MRPC")
SQUAD_DEV = os.path.join(REPO, "data", "squad", "dev-v1.1.json")
# The subprocesses log less; their stderr is still more than the error line.
QUIET_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")


@pytest.fixture(scope="module")
def adapter_file(base, tmp_path_factory):
  """An adapter file (size 4) on the tiny base (conftest.base; position table of 64),
  and another base of the same shapes."""
  d = tmp_path_factory.mktemp("adapters")
  _, _, other_ckpt, _ = tiny_bert.write_google_dir(str(d / "other"), seed=5)
  keras.utils.set_random_seed(0)
  model = modeling.BertClassifier(modeling.BertConfig.from_json_file(base["bert_config_file"]),
                                  2, AdapterConfig(size=4))
  model.ensure_built()
  checkpoint_io.load_checkpoint(model, base["init_checkpoint"])
  trainable.set_trainable(model, trainable.TrainMode("adapters"))
  adapters = str(d / "adapter_model")
  adapter_weights.save_adapter_weights(model, adapters, metadata={"labels": ["0", "1"]})
  return dict(path=adapters, other_checkpoint=other_ckpt)


def _copy(src, dst):
  shutil.copytree(src, dst)
  return str(dst)


def _classifier_flags(base, tmp_path, **overrides):
  f = dict(task_name="mrpc", data_dir=MRPC, output_dir=str(tmp_path / "out"),
           bert_config_file=base["bert_config_file"], vocab_file=base["vocab_file"],
           init_checkpoint=base["init_checkpoint"], adapter_size=4, max_seq_length=32,
           do_eval=True, eval_batch_size=4)
  f.update(overrides)
  return [f"--{k}" if v is True else f"--{k}={v}" for k, v in f.items() if v is not None]


def _fail(capsys, module, argv):
  """Runs `module.main` as its command does; returns the message of its one ERROR line."""
  fv = flags.FlagValues()
  module.define_flags(fv)
  fv([module.__name__ + ".py"] + argv)
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    errors.exit_on_user_error(functools.partial(module.main, flag_values=fv))([])
  assert exit_info.value.code == 2
  err = capsys.readouterr().err
  assert "Traceback" not in err
  lines = [line for line in err.splitlines() if line.startswith("ERROR")]
  assert len(lines) == 1 and err.endswith(lines[0] + "\n"), err
  return lines[0][len("ERROR: "):]


def _classifier_fails(capsys, base, tmp_path, **overrides):
  message = _fail(capsys, run_classifier, _classifier_flags(base, tmp_path, **overrides))
  assert not (tmp_path / "out").exists()
  return message


def _write(path, data):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
  return str(path)


def _truncate(path, keep=0.5):
  with open(path, "rb") as f:
    data = f.read()
  with open(path, "wb") as f:
    f.write(data[:int(len(data) * keep)])


# --------------------------------------------------------------- bert_config.json


def test_bert_config_missing(capsys, base, tmp_path):
  path = str(tmp_path / "nope" / "bert_config.json")
  assert (_classifier_fails(capsys, base, tmp_path, bert_config_file=path)
          == f"flag --bert_config_file={path}: file not found")


def test_bert_config_empty(capsys, base, tmp_path):
  path = _write(tmp_path / "bert_config.json", "")
  assert (_classifier_fails(capsys, base, tmp_path, bert_config_file=path)
          == f"{path}: empty file, expected JSON")


def test_bert_config_truncated(capsys, base, tmp_path):
  with open(base["bert_config_file"]) as f:
    text = f.read()
  cut = text.index('"max_position')  # Indented by 2, after a comma.
  path = _write(tmp_path / "bert_config.json", text[:cut])
  message = _classifier_fails(capsys, base, tmp_path, bert_config_file=path)
  line = text[:cut].count("\n") + 1
  assert message.startswith(f"{path}:{line}: malformed JSON at column 3: "), message


def test_bert_config_utf16(capsys, base, tmp_path):
  with open(base["bert_config_file"]) as f:
    path = _write(tmp_path / "bert_config.json", f.read().encode("utf-16"))
  message = _classifier_fails(capsys, base, tmp_path, bert_config_file=path)
  assert message.startswith(f"{path}:1: not UTF-8 text (invalid start byte, byte 0xff)")


def test_bert_config_with_bad_values(capsys, base, tmp_path):
  path = _write(tmp_path / "bert_config.json", json.dumps(
      dict(tiny_bert.TINY_CONFIG, hidden_size="32")))
  assert (_classifier_fails(capsys, base, tmp_path, bert_config_file=path)
          == f"{path}: hidden_size must be a positive integer, got '32'")
  path = _write(tmp_path / "list.json", "[1, 2]")
  with pytest.raises(errors.UserError, match=r"list\.json: not a BERT config: expected a JSON "
                                             r"object, got list"):
    modeling.BertConfig.from_json_file(path)
  config = dict(tiny_bert.TINY_CONFIG)
  del config["vocab_size"]
  path = _write(tmp_path / "novocab.json", json.dumps(config))
  with pytest.raises(errors.UserError, match=r"novocab\.json: not a BERT config: lacks "
                                             r"vocab_size$"):
    modeling.BertConfig.from_json_file(path)


def test_bert_config_that_does_not_match_the_checkpoint(capsys, base, tmp_path):
  path = _write(tmp_path / "bert_config.json", json.dumps(
      dict(tiny_bert.TINY_CONFIG, intermediate_size=38)))
  message = _classifier_fails(capsys, base, tmp_path, bert_config_file=path)
  assert message == (
      f"checkpoint {base['init_checkpoint']}: variable bert/encoder/layer_0/intermediate/"
      f"dense/kernel has shape (32, 37) in the checkpoint but (32, 38) in the model built "
      f"from {path}: the config does not match the checkpoint")


def test_max_seq_length_over_the_position_table(capsys, base, tmp_path):
  assert _classifier_fails(capsys, base, tmp_path, max_seq_length=65) == (
      f"--max_seq_length=65 is larger than the model's position table: "
      f"max_position_embeddings is 64 in {base['bert_config_file']} (the BERT model was "
      f"only trained up to sequence length 64)")


# --------------------------------------------------------------------- vocab.txt


def test_vocab_missing_and_empty(capsys, base, tmp_path):
  path = str(tmp_path / "vocab.txt")
  assert (_classifier_fails(capsys, base, tmp_path, vocab_file=path)
          == f"flag --vocab_file={path}: file not found")
  _write(tmp_path / "vocab.txt", "")
  assert (_classifier_fails(capsys, base, tmp_path, vocab_file=path)
          == f"{path}: empty vocabulary file")


def test_vocab_latin1_names_the_line(capsys, base, tmp_path):
  tokens = tiny_bert.tiny_vocab()
  tokens[40] = "caf\xe9"
  path = _write(tmp_path / "vocab.txt", "\n".join(tokens).encode("latin-1"))
  message = _classifier_fails(capsys, base, tmp_path, vocab_file=path)
  assert message.startswith(f"{path}:41: not UTF-8 text (invalid continuation byte, "
                            f"byte 0xe9)"), message


def test_vocab_of_another_model_or_cut_short(capsys, base, tmp_path):
  path = _write(tmp_path / "vocab.txt", "\n".join(tiny_bert.tiny_vocab(99) + ["extra"]))
  assert _classifier_fails(capsys, base, tmp_path, vocab_file=path) == (
      f"{path}: 100 tokens but vocab_size is 99 in {base['bert_config_file']}: this "
      f"vocabulary is not the model's (ids from 99 on have no embedding)")
  path = _write(tmp_path / "cut.txt", "\n".join(tiny_bert.tiny_vocab(99)[:3]))
  assert _classifier_fails(capsys, base, tmp_path, vocab_file=path) == (
      f"{path}: not a BERT vocabulary (or cut short): no [SEP] among its 3 lines")


# -------------------------------------------------------------- init_checkpoint


def test_checkpoint_prefix_missing(capsys, base, tmp_path):
  prefix = str(tmp_path / "bert_model.ckpt")
  assert (_classifier_fails(capsys, base, tmp_path, init_checkpoint=prefix)
          == f"flag --init_checkpoint={prefix}: checkpoint not found (no bert_model.ckpt.index)")
  # A file of the checkpoint instead of its prefix: say which prefix to give.
  index = base["init_checkpoint"] + ".index"
  assert (_classifier_fails(capsys, base, tmp_path, init_checkpoint=index)
          == f"{index}: give the checkpoint prefix {base['init_checkpoint']}, not one of "
             f"its files")


def test_checkpoint_index_corrupt(capsys, base, tmp_path):
  d = _copy(base["dir"], tmp_path / "base")
  prefix = os.path.join(d, "bert_model.ckpt")
  _write(tmp_path / "base" / "bert_model.ckpt.index", b"not an sstable" * 10)
  message = _classifier_fails(capsys, base, tmp_path, init_checkpoint=prefix)
  assert message.startswith(f"{prefix}.index: not a readable checkpoint index (corrupt or "
                            f"truncated?): "), message


def test_checkpoint_data_truncated(capsys, base, tmp_path):
  d = _copy(base["dir"], tmp_path / "base")
  prefix = os.path.join(d, "bert_model.ckpt")
  data = prefix + ".data-00000-of-00001"
  _truncate(data)
  message = _classifier_fails(capsys, base, tmp_path, init_checkpoint=prefix)
  assert message.startswith(f"{data}: cannot read variable bert/"), message
  assert f"of checkpoint {prefix} (corrupt or truncated?)" in message


# ------------------------------------------------------------- TSV files (GLUE)


def _mrpc(tmp_path, name, data):
  d = _copy(MRPC, tmp_path / "MRPC")
  return d, _write(tmp_path / "MRPC" / name, data)


def test_tsv_missing(capsys, base, tmp_path):
  d = _copy(MRPC, tmp_path / "MRPC")
  os.remove(os.path.join(d, "dev.tsv"))
  assert (_classifier_fails(capsys, base, tmp_path, data_dir=d)
          == f"{d}/dev.tsv: TSV file not found")


def test_tsv_latin1_names_the_line(capsys, base, tmp_path):
  with open(os.path.join(MRPC, "dev.tsv"), encoding="utf-8") as f:
    lines = f.read().split("\n")
  lines[3] = lines[3].replace("The", "Th\xe9", 1)
  d, path = _mrpc(tmp_path, "dev.tsv", "\n".join(lines).encode("latin-1"))
  message = _classifier_fails(capsys, base, tmp_path, data_dir=d)
  assert message.startswith(f"{path}:4: not UTF-8 text (invalid continuation byte, byte "
                            f"0xe9): save the file as UTF-8"), message


def test_tsv_utf16(capsys, base, tmp_path):
  with open(os.path.join(MRPC, "dev.tsv"), encoding="utf-8") as f:
    d, path = _mrpc(tmp_path, "dev.tsv", f.read().encode("utf-16"))
  message = _classifier_fails(capsys, base, tmp_path, data_dir=d)
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
  assert _classifier_fails(capsys, base, tmp_path, data_dir=d) == f"{path}:3: {expected}"


@pytest.mark.parametrize("content", ["", HEADER, HEADER + "\n\n"])
def test_tsv_empty_split(capsys, base, tmp_path, content):
  d, path = _mrpc(tmp_path, "dev.tsv", content)
  assert (_classifier_fails(capsys, base, tmp_path, data_dir=d)
          == f"{path}: no examples in this file")


def test_cola_headerless_row_width(tmp_path):
  path = _write(tmp_path / "cola" / "train.tsv", "src\t1\t\tGood.\nsrc\t0\t*\tBad.\textra\n")
  with pytest.raises(errors.UserError) as e:
    processors.get_processor("cola").get_train_examples(str(tmp_path / "cola"))
  assert str(e.value) == f"{path}:2: row has 5 tab-separated column(s), expected 4"


def test_xnli_language_without_rows(tmp_path):
  d = _copy(os.path.join(REPO, "data", "glue", "XNLI"), tmp_path / "XNLI")
  with pytest.raises(errors.UserError) as e:
    processors.get_processor("xnli", language="sw").get_dev_examples(d)
  assert str(e.value) == f"{d}/xnli.dev.tsv: no examples in this file for language 'sw' (column 1)"


# ------------------------------------------------------------- TSV files (tsv task)


def test_user_tsv_extra_column_and_empty_split(capsys, base, tmp_path):
  d = str(tmp_path / "data")
  _write(tmp_path / "data" / "train.tsv", "sentence\tlabel\ngood\tpos\nbad\tneg\n")
  dev = _write(tmp_path / "data" / "dev.tsv", "sentence\tlabel\nfine\tpos\nso\tso\tneg\n")
  assert (_classifier_fails(capsys, base, tmp_path, task_name="tsv", data_dir=d)
          == f"{dev}:3: row has 3 tab-separated column(s), the header (line 1) has 2")
  _write(tmp_path / "data" / "dev.tsv", "sentence\tlabel\n")
  assert (_classifier_fails(capsys, base, tmp_path, task_name="tsv", data_dir=d)
          == f"{dev}: no examples in this file (only a header row)")
  _write(tmp_path / "data" / "dev.tsv", "sentence\tlabel\nfine\tmeh\n")
  assert (_classifier_fails(capsys, base, tmp_path, task_name="tsv", data_dir=d)
          == f"{dev}:2: label 'meh' is not one of ['neg', 'pos']")


# ----------------------------------------------------------- adapter-only weights


def test_adapter_file_missing_or_corrupt(capsys, base, adapter_file, tmp_path):
  missing = str(tmp_path / "adapter_model")
  assert _classifier_fails(capsys, base, tmp_path, adapter_checkpoint=missing) == (
      f"flag --adapter_checkpoint={missing}: not found")
  d = _copy(adapter_file["path"], tmp_path / "adapters")
  weights = os.path.join(d, "adapter_weights.safetensors")
  _truncate(weights)
  message = _classifier_fails(capsys, base, tmp_path, adapter_checkpoint=d)
  assert message.startswith(f"{weights}: not an adapter weights file (empty, truncated or "
                            f"corrupt?): "), message


def test_adapter_file_of_another_base_or_size(capsys, base, adapter_file, tmp_path):
  weights = os.path.join(adapter_file["path"], "adapter_weights.safetensors")
  message = _classifier_fails(capsys, base, tmp_path, adapter_checkpoint=adapter_file["path"],
                              init_checkpoint=adapter_file["other_checkpoint"])
  assert message.startswith(f"{weights}: these adapter weights were trained on another "
                            f"base model (base fingerprint "), message
  assert (_classifier_fails(capsys, base, tmp_path, adapter_checkpoint=adapter_file["path"],
                            adapter_size=8)
          == f"--adapter_size=8: the adapters at {adapter_file['path']} "
             f"were trained with adapter_size 4; leave --adapter_size out to take it from them")


def test_adapter_model_directory_is_replaced_whole(adapter_file, tmp_path, monkeypatch):
  """A failure while writing the second file keeps the first file's old version too."""
  out = _copy(adapter_file["path"], tmp_path / "adapter_model")
  before = {n: open(os.path.join(out, n), "rb").read() for n in os.listdir(out)}
  keras.utils.set_random_seed(3)
  model = modeling.BertClassifier(modeling.BertConfig.from_dict(tiny_bert.TINY_CONFIG), 2,
                                  AdapterConfig(size=4))
  model.ensure_built()
  trainable.set_trainable(model, trainable.TrainMode("adapters"))
  real = tf.io.gfile.GFile

  def failing(path, mode="r"):
    if path.endswith(adapter_weights.CONFIG_FILE) and "w" in mode:
      raise tf.errors.ResourceExhaustedError(None, None, "disk full (test)")
    return real(path, mode)

  monkeypatch.setattr(tf.io.gfile, "GFile", failing)
  with pytest.raises(errors.UserError, match="cannot write the adapter weights: disk full"):
    adapter_weights.save_adapter_weights(model, out)
  monkeypatch.undo()
  assert {n: open(os.path.join(out, n), "rb").read() for n in os.listdir(out)} == before
  assert sorted(os.listdir(tmp_path)) == ["adapter_model"]  # No temporary left.
  adapter_weights.save_adapter_weights(model, out)
  after = {n: open(os.path.join(out, n), "rb").read() for n in os.listdir(out)}
  assert after.keys() == before.keys() and all(after[n] != before[n] for n in after)


# ---------------------------------------------------------------------- output_dir


def test_output_dir_of_another_run(capsys, base, tmp_path):
  out = tmp_path / "out"
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), str(out),
                                       max_to_keep=1, checkpoint_name="model.ckpt")
  manager.save(checkpoint_number=3)
  path = _write(out / "run_config.json", json.dumps({"adapter_config": {"size": 99}}))
  before = {n: os.path.getmtime(out / n) for n in os.listdir(out)}
  message = _fail(capsys, run_classifier, _classifier_flags(base, tmp_path))
  assert message == (
      f"{out} holds checkpoints of another run: adapter_config was {{'size': 99}} there "
      f"(see {path}) but is {{'size': 4, 'init_scale': 0.001, 'activation': 'gelu'}} now; "
      f"use a fresh --output_dir or the same settings")
  assert before == {n: os.path.getmtime(out / n) for n in os.listdir(out)}
  _write(out / "run_config.json", '{"adapter_config": ')
  with pytest.raises(errors.UserError, match=f"^{path}:1: malformed JSON at column 20: "):
    run_config.check(str(out), {})


# --------------------------------------------------------------------- SQuAD JSON


def _squad_fails(capsys, base, tmp_path, predict_file):
  argv = [f"--bert_config_file={base['bert_config_file']}",
          f"--vocab_file={base['vocab_file']}", f"--init_checkpoint={base['init_checkpoint']}",
          f"--output_dir={tmp_path / 'out'}", "--do_predict", f"--predict_file={predict_file}",
          "--max_seq_length=64", "--doc_stride=24", "--max_query_length=16"]
  message = _fail(capsys, run_squad, argv)
  assert not (tmp_path / "out").exists()
  return message


def test_squad_json_missing_truncated_and_latin1(capsys, base, tmp_path):
  path = str(tmp_path / "dev.json")
  assert _squad_fails(capsys, base, tmp_path, path) == f"flag --predict_file={path}: file not found"
  with open(SQUAD_DEV, encoding="utf-8") as f:
    text = f.read()
  cut = text.index("\n", len(text) // 2) + 1  # The file cut short at a line's start.
  _write(tmp_path / "dev.json", text[:cut])
  message = _squad_fails(capsys, base, tmp_path, path)
  line = text[:cut].count("\n") + 1
  assert message.startswith(f"{path}:{line}: malformed JSON at column 1: "), message
  latin1 = text.replace("Gull Point was", "Gull Point w\xe1s", 1)
  line = latin1[:latin1.index("\xe1")].count("\n") + 1
  _write(tmp_path / "dev.json", latin1.encode("latin-1"))
  message = _squad_fails(capsys, base, tmp_path, path)
  assert message.startswith(f"{path}:{line}: not UTF-8 text (invalid continuation byte, "
                            f"byte 0xe1)"), message


def test_squad_json_layout_and_empty_split(tmp_path):
  path = _write(tmp_path / "a.json", '{"version": "1.1", "data": {}}')
  with pytest.raises(errors.UserError, match=r"a\.json: not a SQuAD file \(expected a JSON "
                                             r"object with a 'data' list\)$"):
    squad_examples.read_squad_examples(path, is_training=False)
  path = _write(tmp_path / "b.json", json.dumps({"data": [{"paragraphs": [
      {"context": 5, "qas": []}]}]}))
  with pytest.raises(errors.UserError, match=r"b\.json: field 'context' in a paragraph is 5, "
                                             r"expected str$"):
    squad_examples.read_squad_examples(path, is_training=False)
  path = _write(tmp_path / "c.json", json.dumps({"data": [{"paragraphs": [
      {"context": "Paris.", "qas": []}]}]}))
  with pytest.raises(errors.UserError, match=r"c\.json: no questions in this file$"):
    squad_examples.read_squad_examples(path, is_training=False)
  path = _write(tmp_path / "d.json", json.dumps({"data": [{"paragraphs": [
      {"context": "Paris.", "qas": [{"id": "q", "question": "Where?",
                                     "answers": [{"text": "Rome", "answer_start": 0}]}]}]}]}))
  with pytest.raises(errors.UserError, match=r"d\.json: none of its 1 questions has an answer "
                                             r"found in its context"):
    squad_examples.read_squad_examples(path, is_training=True)


def test_squad_evaluate_names_the_bad_file(tmp_path, capsys):
  pred = _write(tmp_path / "pred.json", '{"q": ')
  with pytest.raises(SystemExit) as e:
    squad_evaluate.main(["--version=1.1", SQUAD_DEV, pred])
  assert e.value.code == 2
  assert capsys.readouterr().err == (
      f"ERROR: {pred}:1: malformed JSON at column 7: Expecting value\n")


# ------------------------------------------------------------ converter (HF dir)


HF_CONFIG = dict(tiny_bert.TINY_CONFIG, model_type="bert")


def _hf_dir(tmp_path, config=None, weights=None):
  d = tmp_path / "hf"
  _write(d / "config.json", json.dumps(HF_CONFIG) if config is None else config)
  _write(d / "model.safetensors", save_safetensors(
      {"embeddings.word_embeddings.weight": np.zeros((99, 32), np.float32)})
         if weights is None else weights)
  _write(d / "vocab.txt", "\n".join(tiny_bert.tiny_vocab()))
  return str(d)


def _convert_fails(tmp_path, hf_dir):
  out = str(tmp_path / "google")
  with pytest.raises(errors.UserError) as e:
    convert_checkpoint.hf_bert_to_google(hf_dir, out)
  assert not os.path.exists(out)
  return str(e.value)


def test_hf_dir_missing_and_config_json_faults(tmp_path):
  assert _convert_fails(tmp_path, str(tmp_path / "none")).startswith(
      f"{tmp_path / 'none'}: no such directory")
  d = _hf_dir(tmp_path)
  config = os.path.join(d, "config.json")
  os.remove(config)
  assert _convert_fails(tmp_path, d) == f"{config}: file not found"
  _write(tmp_path / "hf" / "config.json", '{\n  "vocab_size": 99,\n')
  assert _convert_fails(tmp_path, d).startswith(f"{config}:3: malformed JSON at column 1: ")
  _write(tmp_path / "hf" / "config.json", json.dumps({"model_type": "bert"}))
  message = _convert_fails(tmp_path, d)
  assert message.startswith(f"{config}: lacks ['attention_probs_dropout_prob', "), message
  assert message.endswith(", 'vocab_size']"), message


def test_hf_safetensors_missing_empty_or_truncated(tmp_path):
  d = _hf_dir(tmp_path)
  weights = os.path.join(d, "model.safetensors")
  _truncate(weights, keep=0.7)
  assert _convert_fails(tmp_path, d).startswith(
      f"{weights}: not a safetensors file (empty, truncated or corrupt?): ")
  _write(tmp_path / "hf" / "model.safetensors", b"")
  assert _convert_fails(tmp_path, d).startswith(f"{weights}: not a safetensors file")
  os.remove(weights)
  assert _convert_fails(tmp_path, d) == (
      f"{d}: no model.safetensors here (PyTorch .bin files are not read: convert them to "
      f"safetensors first)")


def test_converter_output_dir_not_empty(tmp_path):
  out = tmp_path / "google"
  out.mkdir()
  (out / "mine.txt").write_text("a user's")
  with pytest.raises(errors.UserError, match="google: not empty; pass --overwrite to replace"):
    convert_checkpoint.hf_bert_to_google(_hf_dir(tmp_path), str(out))
  assert os.listdir(out) == ["mine.txt"]


# ------------------------------------------------------ the real commands, end to end


def _run_command(args, cwd):
  result = subprocess.run([sys.executable] + args, cwd=cwd, capture_output=True, text=True,
                          env=QUIET_ENV, timeout=120)
  assert result.returncode == 2, result.stderr
  assert "Traceback" not in result.stderr
  lines = [l for l in result.stderr.splitlines() if l.startswith("ERROR")]
  assert len(lines) == 1 and result.stderr.endswith(lines[0] + "\n"), result.stderr
  return lines[0]


def test_run_classifier_command_with_a_latin1_tsv(base, tmp_path):
  d, path = _mrpc(tmp_path, "train.tsv", (HEADER + "1\t1\t2\tCaf\xe9.\tA dog.\n").encode(
      "latin-1"))
  out = tmp_path / "out"
  line = _run_command(["run_classifier.py", *_classifier_flags(
      base, tmp_path, data_dir=d, do_train=True)], REPO)
  assert line == (f"ERROR: {path}:2: not UTF-8 text (invalid continuation byte, byte 0xe9): "
                  f"save the file as UTF-8")
  assert not out.exists()


def test_run_squad_command_with_a_truncated_json(base, tmp_path):
  path = _write(tmp_path / "train.json", '{"data": [{"paragraphs": [\n')
  out = tmp_path / "out"
  out.mkdir()
  line = _run_command([
      "run_squad.py", f"--bert_config_file={base['bert_config_file']}",
      f"--vocab_file={base['vocab_file']}", f"--init_checkpoint={base['init_checkpoint']}",
      f"--output_dir={out}", "--do_train", f"--train_file={path}", "--max_seq_length=64",
      "--doc_stride=24", "--max_query_length=16"], REPO)
  assert line == f"ERROR: {path}:2: malformed JSON at column 1: Expecting value"
  assert os.listdir(out) == []


def test_convert_checkpoint_command_with_a_truncated_safetensors(tmp_path):
  d = _hf_dir(tmp_path)
  weights = os.path.join(d, "model.safetensors")
  _truncate(weights, keep=0.7)
  out = tmp_path / "google"
  line = _run_command(["convert_checkpoint.py", f"--hf_dir={d}", f"--output_dir={out}"], REPO)
  assert line.startswith(f"ERROR: {weights}: not a safetensors file (empty, truncated or "
                         f"corrupt?): ")
  assert not out.exists()


# ------------------------------------------- damage under a whole index or header


def _lose_last_byte(path):
  """A file cut short by its last byte: headers and indexes still whole."""
  with open(path, "r+b") as f:
    f.truncate(os.path.getsize(path) - 1)


def test_a_run_checkpoint_cut_short_as_init_checkpoint(capsys, base, tmp_path):
  """One of this project's checkpoints (object-based) given as --init_checkpoint,
  its .data file short of one byte: one line naming that file."""
  model = modeling.BertClassifier(modeling.BertConfig.from_json_file(base["bert_config_file"]),
                                  2, AdapterConfig(size=4))
  model.ensure_built()
  prefix = str(tmp_path / "run" / "model.ckpt-3")
  tf.train.Checkpoint(model=checkpoint_io.trackable_variables(model)).write(prefix)
  data = prefix + ".data-00000-of-00001"
  _lose_last_byte(data)
  message = _classifier_fails(capsys, base, tmp_path, init_checkpoint=prefix)
  assert message.startswith(f"{data}: "), message
  assert "corrupt or truncated?" in message


def test_an_adapter_file_cut_short_by_one_byte(capsys, base, adapter_file, tmp_path):
  d = _copy(adapter_file["path"], tmp_path / "adapters")
  weights = os.path.join(d, "adapter_weights.safetensors")
  _lose_last_byte(weights)
  message = _classifier_fails(capsys, base, tmp_path, adapter_checkpoint=d)
  assert message.startswith(f"{weights}: not an adapter weights file (empty, truncated or "
                            f"corrupt?): "), message
