"""The adapter bank that the serving tests export: its tasks' run_classifier.py flags
(TASKS), the vocabulary of its base, which holds the tokens of HARD_TEXTS, the bank
layout made by hand, and the fixtures that build and export it (vocab_base, runs,
bank, exported, served)."""

import json
import os
import shutil

import pytest
import tensorflow as tf

from adapter_bert.checkpoints import adapter_weights
from adapter_bert.serving import export as serving_export
from run_harness import run_main
import tiny_bert

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GLUE = os.path.join(REPO, "data", "glue")

# name -> run_classifier flags: lengths that truncate some test rows, adapter
# sizes that differ (and none at all), a regression task.
TASKS = {
    "mrpc": dict(task_name="MRPC", max_seq_length=16, adapter_size=8),
    "sst2": dict(task_name="SST-2", max_seq_length=8, adapter_size=4),
    "stsb": dict(task_name="STS-B", max_seq_length=24, train_mode="layer_norm"),
}

# Tokens for the hard strings below; "the" again (load_vocab keeps the last
# line's id) and a token with surrounding spaces (stripped), as untidy
# vocabularies have them.
_EXTRA_TOKENS = ["cafe", "naive", "##ve", "uber", "\u4e2d", "\u6587", "\u65e5", "\u00bf",
                 "\u00ab", "\u00bb", "\u2026", "$", "#", "@", "^", "_", "~", "100",
                 "tag", "user", "##ing", "runn", "\uff21", "fine", " spaced ", "the"]

HARD_TEXTS = [
    "Caf\u00e9 \u00dcber na\u00efve r\u00e9sum\u00e9s THE Movie",
    "\u4e2d\u6587\u65e5\u672c the\u4e2dcat",
    "Punct: \u00bf\u00a1\u00abquo\u00bb\u2026 $100 #tag @user ^_^ ~x~ [CLS] don't",
    "ab\x00cd e\x07f g\u200bh \ufffdij k\x7fl tab\tsep\nnew\r\nline\u00a0nbsp\u3000x",
    "a" * 201 + " " + "b" * 200 + " runn" + "ing" * 60,
    "\ufb01ne \u00b2 \uff21 spaced",
    "", "   ", "\x00\x07",
]


def vocab(size):
  """tiny_bert's vocabulary of `size` words with HARD_TEXTS' tokens in place of fillers."""
  words = tiny_bert.tiny_vocab(size)
  fillers = [i for i, w in enumerate(words) if w.startswith("tok")]
  assert len(fillers) >= len(_EXTRA_TOKENS)
  for i, token in zip(fillers, _EXTRA_TOKENS):
    words[i] = token
  return words


def make_bank(directory, vocab_base, runs, names=None):
  """The bank layout by hand: bank.json, tasks/<name>/ = a run's adapter_model/."""
  header = adapter_weights.read_adapter_header(os.path.join(runs["mrpc"], "adapter_model"))
  os.makedirs(os.path.join(directory, "tasks"))
  with open(os.path.join(directory, "bank.json"), "w") as f:
    json.dump({"format": 1, "base": {
        "fingerprint": header["base_fingerprint"], "bert_config": header["bert_config"],
        "init_checkpoint": vocab_base["init_checkpoint"], "bert_hub_module_handle": None,
        "vocab_file": vocab_base["vocab_file"], "do_lower_case": True}}, f)
  for name in names or runs:
    shutil.copytree(os.path.join(runs[name], "adapter_model"),
                    os.path.join(directory, "tasks", name))
  return directory


# The fixtures of the serving tests' export, imported by test_serving.py and
# test_serving_signatures.py (`from serving_bank import vocab_base, runs, bank,
# exported, served`): three tasks trained on vocab_base, assembled into a bank by hand
# (make_bank) and exported once per test file.

@pytest.fixture(scope="module")
def vocab_base(tmp_path_factory):
  """The tiny BERT (tiny_bert.TINY_CONFIG) with a vocabulary of 120 that holds
  HARD_TEXTS' tokens."""
  d = str(tmp_path_factory.mktemp("base"))
  config = dict(tiny_bert.TINY_CONFIG, vocab_size=120)
  config_path, vocab_path, ckpt, _ = tiny_bert.write_google_dir(d, config=config)
  with open(vocab_path, "w", encoding="utf-8") as f:
    f.write("\n".join(vocab(config["vocab_size"])) + "\n")
  return dict(bert_config_file=config_path, vocab_file=vocab_path, init_checkpoint=ckpt,
              dir=d)


@pytest.fixture(scope="module")
def runs(vocab_base, tmp_path_factory):
  """name -> output_dir of a one-step training run with --do_predict."""
  outputs = {}
  for name, task_flags in TASKS.items():
    out = str(tmp_path_factory.mktemp(name) / "out")
    task_flags = dict(task_flags)
    run_main(bert_config_file=vocab_base["bert_config_file"],
             vocab_file=vocab_base["vocab_file"], init_checkpoint=vocab_base["init_checkpoint"],
             data_dir=os.path.join(GLUE, task_flags["task_name"]), output_dir=out,
             do_train=True, do_predict=True, train_batch_size=8, predict_batch_size=8,
             num_train_epochs=1, learning_rate=0.02, seed=1,
             save_checkpoints_steps=1000, **task_flags)
    outputs[name] = out
  return outputs


@pytest.fixture(scope="module")
def bank(vocab_base, runs, tmp_path_factory):
  return make_bank(str(tmp_path_factory.mktemp("bank") / "bank"), vocab_base,
                                runs)


@pytest.fixture(scope="module")
def exported(bank, tmp_path_factory):
  export_dir = str(tmp_path_factory.mktemp("export") / "1")
  tasks = serving_export.export(bank, export_dir)
  return export_dir, tasks


@pytest.fixture(scope="module")
def served(exported):
  return tf.saved_model.load(exported[0])
