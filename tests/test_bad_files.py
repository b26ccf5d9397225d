"""Every bad input file ends a run with one line naming the file (and line), exit status 2.

The entry points run `main` through errors.exit_on_user_error; here most cases
run that wrapper in-process on a fresh FlagValues and read what it printed,
and a few run the real commands in a subprocess. Each case also checks that
nothing was written to --output_dir. Here: the model's files (bert_config.json,
vocab.txt, checkpoints, adapter weights, a Hugging Face directory) and an output
directory of another run; the data files (TSV, SQuAD JSON): test_bad_data_files.py.
"""

import json
import os

import keras
import numpy as np
import pytest
from safetensors.numpy import save as save_safetensors
import tensorflow as tf

from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import checkpoint_io
import convert_checkpoint
from adapter_bert import errors
from adapter_bert.model import modeling
import run_classifier
from adapter_bert.runtime import run_config
from adapter_bert.runtime import trainable
from bad_inputs import (REPO, classifier_argv, classifier_fails, command_fails, copy_dir, fails,
                        write_file)
import tiny_bert


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


def _truncate(path, keep=0.5):
  with open(path, "rb") as f:
    data = f.read()
  with open(path, "wb") as f:
    f.write(data[:int(len(data) * keep)])


# --------------------------------------------------------------- bert_config.json


def test_bert_config_missing(capsys, base, tmp_path):
  path = str(tmp_path / "nope" / "bert_config.json")
  assert (classifier_fails(capsys, base, tmp_path, bert_config_file=path)
          == f"flag --bert_config_file={path}: file not found")


def test_bert_config_empty(capsys, base, tmp_path):
  path = write_file(tmp_path / "bert_config.json", "")
  assert (classifier_fails(capsys, base, tmp_path, bert_config_file=path)
          == f"{path}: empty file, expected JSON")


def test_bert_config_truncated(capsys, base, tmp_path):
  with open(base["bert_config_file"]) as f:
    text = f.read()
  cut = text.index('"max_position')  # Indented by 2, after a comma.
  path = write_file(tmp_path / "bert_config.json", text[:cut])
  message = classifier_fails(capsys, base, tmp_path, bert_config_file=path)
  line = text[:cut].count("\n") + 1
  assert message.startswith(f"{path}:{line}: malformed JSON at column 3: "), message


def test_bert_config_utf16(capsys, base, tmp_path):
  with open(base["bert_config_file"]) as f:
    path = write_file(tmp_path / "bert_config.json", f.read().encode("utf-16"))
  message = classifier_fails(capsys, base, tmp_path, bert_config_file=path)
  assert message.startswith(f"{path}:1: not UTF-8 text (invalid start byte, byte 0xff)")


def test_bert_config_with_bad_values(capsys, base, tmp_path):
  path = write_file(tmp_path / "bert_config.json", json.dumps(
      dict(tiny_bert.TINY_CONFIG, hidden_size="32")))
  assert (classifier_fails(capsys, base, tmp_path, bert_config_file=path)
          == f"{path}: hidden_size must be a positive integer, got '32'")
  path = write_file(tmp_path / "list.json", "[1, 2]")
  with pytest.raises(errors.UserError, match=r"list\.json: not a BERT config: expected a JSON "
                                             r"object, got list"):
    modeling.BertConfig.from_json_file(path)
  config = dict(tiny_bert.TINY_CONFIG)
  del config["vocab_size"]
  path = write_file(tmp_path / "novocab.json", json.dumps(config))
  with pytest.raises(errors.UserError, match=r"novocab\.json: not a BERT config: lacks "
                                             r"vocab_size$"):
    modeling.BertConfig.from_json_file(path)


def test_bert_config_that_does_not_match_the_checkpoint(capsys, base, tmp_path):
  path = write_file(tmp_path / "bert_config.json", json.dumps(
      dict(tiny_bert.TINY_CONFIG, intermediate_size=38)))
  message = classifier_fails(capsys, base, tmp_path, bert_config_file=path)
  assert message == (
      f"checkpoint {base['init_checkpoint']}: variable bert/encoder/layer_0/intermediate/"
      f"dense/kernel has shape (32, 37) in the checkpoint but (32, 38) in the model built "
      f"from {path}: the config does not match the checkpoint")


def test_max_seq_length_over_the_position_table(capsys, base, tmp_path):
  assert classifier_fails(capsys, base, tmp_path, max_seq_length=65) == (
      f"--max_seq_length=65 is larger than the model's position table: "
      f"max_position_embeddings is 64 in {base['bert_config_file']} (the BERT model was "
      f"only trained up to sequence length 64)")


# --------------------------------------------------------------------- vocab.txt


def test_vocab_missing_and_empty(capsys, base, tmp_path):
  path = str(tmp_path / "vocab.txt")
  assert (classifier_fails(capsys, base, tmp_path, vocab_file=path)
          == f"flag --vocab_file={path}: file not found")
  write_file(tmp_path / "vocab.txt", "")
  assert (classifier_fails(capsys, base, tmp_path, vocab_file=path)
          == f"{path}: empty vocabulary file")


def test_vocab_latin1_names_the_line(capsys, base, tmp_path):
  tokens = tiny_bert.tiny_vocab()
  tokens[40] = "caf\xe9"
  path = write_file(tmp_path / "vocab.txt", "\n".join(tokens).encode("latin-1"))
  message = classifier_fails(capsys, base, tmp_path, vocab_file=path)
  assert message.startswith(f"{path}:41: not UTF-8 text (invalid continuation byte, "
                            f"byte 0xe9)"), message


def test_vocab_of_another_model_or_cut_short(capsys, base, tmp_path):
  path = write_file(tmp_path / "vocab.txt", "\n".join(tiny_bert.tiny_vocab(99) + ["extra"]))
  assert classifier_fails(capsys, base, tmp_path, vocab_file=path) == (
      f"{path}: 100 tokens but vocab_size is 99 in {base['bert_config_file']}: this "
      f"vocabulary is not the model's (ids from 99 on have no embedding)")
  path = write_file(tmp_path / "cut.txt", "\n".join(tiny_bert.tiny_vocab(99)[:3]))
  assert classifier_fails(capsys, base, tmp_path, vocab_file=path) == (
      f"{path}: not a BERT vocabulary (or cut short): no [SEP] among its 3 lines")


# -------------------------------------------------------------- init_checkpoint


def test_checkpoint_prefix_missing(capsys, base, tmp_path):
  prefix = str(tmp_path / "bert_model.ckpt")
  assert (classifier_fails(capsys, base, tmp_path, init_checkpoint=prefix)
          == f"flag --init_checkpoint={prefix}: checkpoint not found (no bert_model.ckpt.index)")
  # A file of the checkpoint instead of its prefix: say which prefix to give.
  index = base["init_checkpoint"] + ".index"
  assert (classifier_fails(capsys, base, tmp_path, init_checkpoint=index)
          == f"{index}: give the checkpoint prefix {base['init_checkpoint']}, not one of "
             f"its files")


def test_checkpoint_index_corrupt(capsys, base, tmp_path):
  d = copy_dir(base["dir"], tmp_path / "base")
  prefix = os.path.join(d, "bert_model.ckpt")
  write_file(tmp_path / "base" / "bert_model.ckpt.index", b"not an sstable" * 10)
  message = classifier_fails(capsys, base, tmp_path, init_checkpoint=prefix)
  assert message.startswith(f"{prefix}.index: not a readable checkpoint index (corrupt or "
                            f"truncated?): "), message


def test_checkpoint_data_truncated(capsys, base, tmp_path):
  d = copy_dir(base["dir"], tmp_path / "base")
  prefix = os.path.join(d, "bert_model.ckpt")
  data = prefix + ".data-00000-of-00001"
  _truncate(data)
  message = classifier_fails(capsys, base, tmp_path, init_checkpoint=prefix)
  assert message.startswith(f"{data}: cannot read variable bert/"), message
  assert f"of checkpoint {prefix} (corrupt or truncated?)" in message


# ----------------------------------------------------------- adapter-only weights


def test_adapter_file_missing_or_corrupt(capsys, base, adapter_file, tmp_path):
  missing = str(tmp_path / "adapter_model")
  assert classifier_fails(capsys, base, tmp_path, adapter_checkpoint=missing) == (
      f"flag --adapter_checkpoint={missing}: not found")
  d = copy_dir(adapter_file["path"], tmp_path / "adapters")
  weights = os.path.join(d, "adapter_weights.safetensors")
  _truncate(weights)
  message = classifier_fails(capsys, base, tmp_path, adapter_checkpoint=d)
  assert message.startswith(f"{weights}: not an adapter weights file (empty, truncated or "
                            f"corrupt?): "), message


def test_adapter_file_of_another_base_or_size(capsys, base, adapter_file, tmp_path):
  weights = os.path.join(adapter_file["path"], "adapter_weights.safetensors")
  message = classifier_fails(capsys, base, tmp_path, adapter_checkpoint=adapter_file["path"],
                             init_checkpoint=adapter_file["other_checkpoint"])
  assert message.startswith(f"{weights}: these adapter weights were trained on another "
                            f"base model (base fingerprint "), message
  assert (classifier_fails(capsys, base, tmp_path, adapter_checkpoint=adapter_file["path"],
                           adapter_size=8)
          == f"--adapter_size=8: the adapters at {adapter_file['path']} "
             f"were trained with adapter_size 4; leave --adapter_size out to take it from them")


def test_adapter_model_directory_is_replaced_whole(adapter_file, tmp_path, monkeypatch):
  """A failure while writing the second file keeps the first file's old version too."""
  out = copy_dir(adapter_file["path"], tmp_path / "adapter_model")
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
  path = write_file(out / "run_config.json", json.dumps({"adapter_config": {"size": 99}}))
  before = {n: os.path.getmtime(out / n) for n in os.listdir(out)}
  message = fails(capsys, run_classifier, classifier_argv(base, tmp_path))
  assert message == (
      f"{out} holds checkpoints of another run: adapter_config was {{'size': 99}} there "
      f"(see {path}) but is {{'size': 4, 'init_scale': 0.001, 'activation': 'gelu'}} now; "
      f"use a fresh --output_dir or the same settings")
  assert before == {n: os.path.getmtime(out / n) for n in os.listdir(out)}
  write_file(out / "run_config.json", '{"adapter_config": ')
  with pytest.raises(errors.UserError, match=f"^{path}:1: malformed JSON at column 20: "):
    run_config.check(str(out), {})


# ------------------------------------------------------------ converter (HF dir)


HF_CONFIG = dict(tiny_bert.TINY_CONFIG, model_type="bert")


def _hf_dir(tmp_path, config=None, weights=None):
  d = tmp_path / "hf"
  write_file(d / "config.json", json.dumps(HF_CONFIG) if config is None else config)
  write_file(d / "model.safetensors", save_safetensors(
      {"embeddings.word_embeddings.weight": np.zeros((99, 32), np.float32)})
             if weights is None else weights)
  write_file(d / "vocab.txt", "\n".join(tiny_bert.tiny_vocab()))
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
  write_file(tmp_path / "hf" / "config.json", '{\n  "vocab_size": 99,\n')
  assert _convert_fails(tmp_path, d).startswith(f"{config}:3: malformed JSON at column 1: ")
  write_file(tmp_path / "hf" / "config.json", json.dumps({"model_type": "bert"}))
  message = _convert_fails(tmp_path, d)
  assert message.startswith(f"{config}: lacks ['attention_probs_dropout_prob', "), message
  assert message.endswith(", 'vocab_size']"), message


def test_hf_safetensors_missing_empty_or_truncated(tmp_path):
  d = _hf_dir(tmp_path)
  weights = os.path.join(d, "model.safetensors")
  _truncate(weights, keep=0.7)
  assert _convert_fails(tmp_path, d).startswith(
      f"{weights}: not a safetensors file (empty, truncated or corrupt?): ")
  write_file(tmp_path / "hf" / "model.safetensors", b"")
  assert _convert_fails(tmp_path, d).startswith(f"{weights}: not a safetensors file")
  os.remove(weights)
  assert _convert_fails(tmp_path, d) == (
      f"{d}: no model.safetensors or pytorch_model.bin here (nor a sharded index of either)")


def test_converter_output_dir_not_empty(tmp_path):
  out = tmp_path / "google"
  out.mkdir()
  (out / "mine.txt").write_text("a user's")
  with pytest.raises(errors.UserError, match="google: not empty; pass --overwrite to replace"):
    convert_checkpoint.hf_bert_to_google(_hf_dir(tmp_path), str(out))
  assert os.listdir(out) == ["mine.txt"]


# ------------------------------------------------------ the real commands, end to end


def test_convert_checkpoint_command_with_a_truncated_safetensors(tmp_path):
  d = _hf_dir(tmp_path)
  weights = os.path.join(d, "model.safetensors")
  _truncate(weights, keep=0.7)
  out = tmp_path / "google"
  line = command_fails(["convert_checkpoint.py", f"--hf_dir={d}", f"--output_dir={out}"], REPO)
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
  message = classifier_fails(capsys, base, tmp_path, init_checkpoint=prefix)
  assert message.startswith(f"{data}: "), message
  assert "corrupt or truncated?" in message


def test_an_adapter_file_cut_short_by_one_byte(capsys, base, adapter_file, tmp_path):
  d = copy_dir(adapter_file["path"], tmp_path / "adapters")
  weights = os.path.join(d, "adapter_weights.safetensors")
  _lose_last_byte(weights)
  message = classifier_fails(capsys, base, tmp_path, adapter_checkpoint=d)
  assert message.startswith(f"{weights}: not an adapter weights file (empty, truncated or "
                            f"corrupt?): "), message
