"""The adapter bank that the serving tests export: its tasks' run_classifier.py flags
(TASKS), the vocabulary of its base, which holds the tokens of HARD_TEXTS, the bank
layout made by hand, and the fixtures that build and export it (vocab_base, runs,
bank, exported, served), built once per test session."""

import fcntl
import json
import os
import pickle
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
# (make_bank) and exported, all built once per test session (built) and read by both.

def _build(directory):
  """vocab_base, runs, bank and exported, built under `directory`."""
  d = os.path.join(directory, "base")
  config = dict(tiny_bert.TINY_CONFIG, vocab_size=120)
  config_path, vocab_path, ckpt, _ = tiny_bert.write_google_dir(d, config=config)
  with open(vocab_path, "w", encoding="utf-8") as f:
    f.write("\n".join(vocab(config["vocab_size"])) + "\n")
  vocab_base = dict(bert_config_file=config_path, vocab_file=vocab_path, init_checkpoint=ckpt,
                    dir=d)
  runs = {}
  for name, task_flags in TASKS.items():
    out = os.path.join(directory, "runs", name)
    task_flags = dict(task_flags)
    run_main(bert_config_file=vocab_base["bert_config_file"],
             vocab_file=vocab_base["vocab_file"], init_checkpoint=vocab_base["init_checkpoint"],
             data_dir=os.path.join(GLUE, task_flags["task_name"]), output_dir=out,
             do_train=True, do_predict=True, train_batch_size=8, predict_batch_size=8,
             num_train_epochs=1, learning_rate=0.02, seed=1,
             save_checkpoints_steps=1000, **task_flags)
    runs[name] = out
  bank = make_bank(os.path.join(directory, "bank"), vocab_base, runs)
  export_dir = os.path.join(directory, "export", "1")
  tasks = serving_export.export(bank, export_dir)
  return dict(vocab_base=vocab_base, runs=runs, bank=bank, exported=(export_dir, tasks))


_BUILT = {}


def built(tmp_path_factory):
  """_build's dict, built once per test session: in the directory "serving_bank"
  under the session's temporary root, which the xdist workers share (one builds,
  under a file lock, while another that needs it waits; the rest read what it
  recorded in built.pickle). Read it, never write into it."""
  root = tmp_path_factory.getbasetemp()
  if os.environ.get("PYTEST_XDIST_WORKER"):
    root = root.parent  # pytest-N/, the parent of every worker's popen-gwK/.
  directory = os.path.join(str(root), "serving_bank")
  if directory not in _BUILT:
    with open(directory + ".lock", "w") as lock:
      fcntl.flock(lock, fcntl.LOCK_EX)
      record = os.path.join(directory, "built.pickle")
      if not os.path.exists(record):
        shutil.rmtree(directory, ignore_errors=True)  # What a failed build left.
        result = _build(directory)
        with open(record + ".tmp", "wb") as f:
          pickle.dump(result, f)
        os.replace(record + ".tmp", record)
      with open(record, "rb") as f:
        _BUILT[directory] = pickle.load(f)
  return _BUILT[directory]


@pytest.fixture(scope="module")
def vocab_base(tmp_path_factory):
  """The tiny BERT (tiny_bert.TINY_CONFIG) with a vocabulary of 120 that holds
  HARD_TEXTS' tokens."""
  return built(tmp_path_factory)["vocab_base"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """name -> output_dir of a one-step training run with --do_predict."""
  return built(tmp_path_factory)["runs"]


@pytest.fixture(scope="module")
def bank(tmp_path_factory):
  return built(tmp_path_factory)["bank"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
  """(export_dir, the tasks serving.export returned)."""
  return built(tmp_path_factory)["exported"]


_LOADED = {}


@pytest.fixture(scope="module")
def served(exported):
  """The export, loaded once per process."""
  if exported[0] not in _LOADED:
    _LOADED[exported[0]] = tf.saved_model.load(exported[0])
  return _LOADED[exported[0]]
