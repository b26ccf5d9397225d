"""serving/: one SavedModel for every task of an adapter bank, from raw text.

Three tasks are trained for one step each with run_classifier.py on a tiny BERT
(MRPC pairs, SST-2 single sentences, STS-B regression trained in
--train_mode=layer_norm), with different adapter sizes and max_seq_lengths, and
predicted with --do_predict; a bank is assembled by hand in the bank layout and
exported once. The SavedModel must reproduce test_results.tsv from the raw
test.tsv texts, per task and in a shuffled mixed batch, also when loaded in a
process that cannot import this repository.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from checkpoints import adapter_weights
from classification import features as classifier_features
from classification import processors
import errors
from serving import bank_tasks
from serving import export as serving_export
from serving import multitask
from test_run_classifier import run_main
import tiny_bert
import tokenization

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


def _vocab(size):
  words = tiny_bert.tiny_vocab(size)
  fillers = [i for i, w in enumerate(words) if w.startswith("tok")]
  assert len(fillers) >= len(_EXTRA_TOKENS)
  for i, token in zip(fillers, _EXTRA_TOKENS):
    words[i] = token
  return words


@pytest.fixture(scope="module")
def vocab_base(tmp_path_factory):
  """conftest.base's tiny BERT with a vocabulary of 120 that holds HARD_TEXTS' tokens."""
  d = str(tmp_path_factory.mktemp("base"))
  config = dict(tiny_bert.TINY_CONFIG, vocab_size=120)
  config_path, vocab_path, ckpt, _ = tiny_bert.write_google_dir(d, config=config)
  with open(vocab_path, "w", encoding="utf-8") as f:
    f.write("\n".join(_vocab(config["vocab_size"])) + "\n")
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


def _make_bank(directory, vocab_base, runs, names=None):
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


@pytest.fixture(scope="module")
def bank(vocab_base, runs, tmp_path_factory):
  return _make_bank(str(tmp_path_factory.mktemp("bank") / "bank"), vocab_base, runs)


@pytest.fixture(scope="module")
def exported(bank, tmp_path_factory):
  export_dir = str(tmp_path_factory.mktemp("export") / "1")
  tasks = serving_export.export(bank, export_dir)
  return export_dir, tasks


@pytest.fixture(scope="module")
def served(exported):
  return tf.saved_model.load(exported[0])


def _test_examples(name):
  return processors.get_processor(TASKS[name]["task_name"]).get_test_examples(
      os.path.join(GLUE, TASKS[name]["task_name"]))


def _expected(runs, name):
  """test_results.tsv: [N, labels] probabilities, or [N] scores."""
  with open(os.path.join(runs[name], "test_results.tsv")) as f:
    rows = [[float(x) for x in line.split("\t")] for line in f.read().splitlines()]
  values = np.array(rows, np.float32)
  return values[:, 0] if TASKS[name]["task_name"] == "STS-B" else values


def _call(served, texts_a, texts_b, tasks):
  outputs = served.signatures["serving_default"](
      text_a=tf.constant(texts_a), text_b=tf.constant(texts_b), task=tf.constant(tasks))
  return {k: v.numpy() for k, v in outputs.items()}


def _check_rows(outputs, rows, expected, names):
  """Row r of `outputs` against `expected[name][index]` for (name, index) in `rows`."""
  for r, (name, index) in enumerate(rows):
    want = expected[name][index]
    if np.ndim(want) == 0:  # Regression.
      np.testing.assert_allclose(outputs["score"][r], want, atol=1e-5)
      assert not outputs["probabilities"][r].any() and outputs["predicted_label"][r] == b""
    else:
      n = len(want)
      np.testing.assert_allclose(outputs["probabilities"][r, :n], want, atol=1e-5)
      assert not outputs["probabilities"][r, n:].any() and outputs["score"][r] == 0
      labels = [l.decode() for l in outputs["labels"][r]]
      assert labels[n:] == [""] * (len(labels) - n)
      assert outputs["predicted_label"][r].decode() == labels[int(np.argmax(want))]
    assert outputs["task_index"][r] == names.index(name)


def test_every_task_matches_run_classifier_predict(served, exported, runs):
  names = [t.name for t in exported[1]]
  assert names == sorted(TASKS)
  expected = {name: _expected(runs, name) for name in TASKS}
  for name in TASKS:
    examples = _test_examples(name)
    assert len(examples) == len(expected[name]) >= 4
    outputs = _call(served, [e.text_a for e in examples],
                    [e.text_b or "" for e in examples], [name] * len(examples))
    _check_rows(outputs, [(name, i) for i in range(len(examples))], expected, names)
  # Not a toy: the texts move the probabilities, which are not saturated.
  for name in ("mrpc", "sst2"):
    assert np.ptp(expected[name][:, 0]) > 1e-3 and 0.02 < expected[name].min()

  # All tasks in one batch, shuffled.
  rows = [(name, i) for name in TASKS for i in range(len(expected[name]))]
  rows = [rows[i] for i in np.random.default_rng(0).permutation(len(rows))]
  examples = {name: _test_examples(name) for name in TASKS}
  outputs = _call(served, [examples[n][i].text_a for n, i in rows],
                  [examples[n][i].text_b or "" for n, i in rows], [n for n, _ in rows])
  _check_rows(outputs, rows, expected, names)
  assert outputs["probabilities"].shape == (len(rows), 2)


def test_tokenize_matches_run_classifier_features(served, vocab_base):
  """The exported tokenizer and packing give run_classifier.py's features."""
  full = tokenization.FullTokenizer(vocab_base["vocab_file"], do_lower_case=True)
  assert full.vocab["the"] > 100  # The duplicate's last line, as the original.
  pairs = [(a, b) for a in HARD_TEXTS for b in ("", HARD_TEXTS[2], HARD_TEXTS[4])]
  pairs += [(b"ab\xffcd", b"x\xe2\x82y"), ("the movie", "\x00\x07")]
  seen = set()
  for name, task_flags in TASKS.items():
    length = task_flags["max_seq_length"]
    got = served.signatures["tokenize"](
        text_a=tf.constant([a for a, _ in pairs]), text_b=tf.constant([b for _, b in pairs]),
        task=tf.constant([name] * len(pairs)))
    for i, (a, b) in enumerate(pairs):
      feature = classifier_features.convert_single_example(
          9, processors.InputExample("x", a, b or None, "0"), None, length, full)
      for key in ("input_ids", "input_mask", "segment_ids"):
        row = got[key].numpy()[i]
        assert row[:length].tolist() == getattr(feature, key), (name, key, a, b)
        assert not row[length:].any()
      seen.update(feature.input_ids)
  # The strings exercise the vocabulary, not only [UNK].
  assert len(seen) > 30 and full.vocab["[UNK]"] in seen


def test_token_ids_signature_and_unknown_task(served):
  texts = tf.constant(["the movie was good", "a bad film"])
  tasks = tf.constant(["sst2", "mrpc"])
  packed = served.signatures["tokenize"](text_a=texts, text_b=tf.constant(["", "a man"]),
                                         task=tasks)
  by_ids = served.signatures["token_ids"](
      input_ids=packed["input_ids"], input_mask=packed["input_mask"],
      segment_ids=packed["segment_ids"], task=tasks)
  by_text = served.signatures["serving_default"](
      text_a=texts, text_b=tf.constant(["", "a man"]), task=tasks)
  np.testing.assert_allclose(by_ids["probabilities"], by_text["probabilities"], atol=1e-6)
  # Shorter inputs (the caller's own length) give the same: padding is masked.
  short = served.signatures["token_ids"](
      input_ids=packed["input_ids"][:, :10], input_mask=packed["input_mask"][:, :10],
      segment_ids=packed["segment_ids"][:, :10], task=tasks)
  np.testing.assert_allclose(short["probabilities"], by_text["probabilities"], atol=1e-5)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"(?s)Unknown task.*nope.*serves the tasks: mrpc, sst2, stsb"):
    served.signatures["serving_default"](
        text_a=texts, text_b=tf.constant(["", ""]), task=tf.constant(["sst2", "nope"]))


def test_signatures_follow_serving_conventions(exported, served):
  export_dir, _ = exported
  assert os.path.exists(os.path.join(export_dir, "assets", "vocab.txt"))
  loaded = served
  text_inputs = {"text_a", "text_b", "task"}
  signature = loaded.signatures["serving_default"]
  assert set(signature.structured_input_signature[1]) == text_inputs
  assert {k: (v.dtype, v.shape.as_list()) for k, v in signature.structured_outputs.items()} == {
      "probabilities": (tf.float32, [None, 2]), "labels": (tf.string, [None, 2]),
      "predicted_label": (tf.string, [None]), "score": (tf.float32, [None]),
      "logits": (tf.float32, [None, 2]), "task_index": (tf.int32, [None])}
  token_ids = loaded.signatures["token_ids"].structured_input_signature[1]
  assert {k: (v.dtype, v.shape.as_list()) for k, v in token_ids.items()} == {
      "input_ids": (tf.int32, [None, None]), "input_mask": (tf.int32, [None, None]),
      "segment_ids": (tf.int32, [None, None]), "task": (tf.string, [None])}
  with open(os.path.join(export_dir, serving_export.TASKS_FILE)) as f:
    described = json.load(f)
  assert [(t["name"], t["labels"], t["max_seq_length"], t["adapter_size"])
          for t in described["tasks"]] == [
              ("mrpc", ["0", "1"], 16, 8), ("sst2", ["0", "1"], 8, 4), ("stsb", [], 24, 0)]


_CLIENT = r"""
import importlib, json, os, sys
blocked = set(json.loads(sys.argv[2]))

class Blocker:
  def find_spec(self, name, path=None, target=None):
    if name.split(".")[0] in blocked:
      raise ImportError("blocked: " + name)
    return None

sys.meta_path.insert(0, Blocker())
repo = sys.argv[3]
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != repo]
try:
  import modeling
  raise SystemExit("modeling was importable")
except ImportError:
  pass
import tensorflow as tf
import tensorflow_text  # Registers the tokenizer's ops.
model = tf.saved_model.load(sys.argv[1])
request = json.loads(sys.stdin.read())
outputs = model.signatures["serving_default"](
    **{k: tf.constant(v) for k, v in request.items()})
venv = os.path.join(repo, ".venv") + os.sep
from_repo = [m for m, module in sys.modules.items()
             if (getattr(module, "__file__", None) or "").startswith(repo + os.sep)
             and not module.__file__.startswith(venv)]
print(json.dumps({"from_repo": from_repo, "probabilities": outputs["probabilities"].numpy().tolist(),
                  "score": outputs["score"].numpy().tolist(),
                  "predicted_label": [s.decode() for s in outputs["predicted_label"].numpy()]}))
"""


def test_loads_without_this_repository(exported, served, tmp_path):
  blocked = sorted({name[:-3] if name.endswith(".py") else name
                    for name in os.listdir(REPO)
                    if name.endswith(".py") or os.path.exists(
                        os.path.join(REPO, name, "__init__.py"))})
  assert {"modeling", "tokenization", "serving", "checkpoints"} <= set(blocked)
  script = tmp_path / "client.py"
  script.write_text(_CLIENT)
  request = {"text_a": ["The storm knocked out power .", "a clever script", "A bird sits."],
             "text_b": ["Power was lost .", "", "A bird is perched."],
             "task": ["mrpc", "sst2", "stsb"]}
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  env["TF_CPP_MIN_LOG_LEVEL"] = "2"
  result = subprocess.run(
      [sys.executable, str(script), exported[0], json.dumps(blocked), REPO],
      input=json.dumps(request), capture_output=True, text=True, cwd=tmp_path, env=env,
      timeout=120)
  assert result.returncode == 0, result.stderr[-3000:]
  got = json.loads(result.stdout.strip().splitlines()[-1])
  assert got["from_repo"] == []
  want = _call(served, request["text_a"], request["text_b"], request["task"])
  np.testing.assert_allclose(got["probabilities"], want["probabilities"], atol=1e-6)
  np.testing.assert_allclose(got["score"], want["score"], atol=1e-6)
  assert got["predicted_label"] == [s.decode() for s in want["predicted_label"]]


def test_multitask_model_compiles_with_xla(bank):
  """Fixed shapes, no per-task control flow: the forward pass compiles (as on TPU)."""
  config = bank_tasks.open_bank(bank)
  tasks = bank_tasks.read_tasks(bank, config)
  base = bank_tasks.load_base(bank, config)
  model = multitask.MultiTaskBert(base.bert_config, base.arrays, tasks)
  rng = np.random.default_rng(0)
  inputs = {"input_ids": rng.integers(0, 120, (6, 24), np.int32),
            "input_mask": (np.arange(24)[None, :] < rng.integers(3, 25, (6, 1))).astype(np.int32),
            "segment_ids": np.zeros((6, 24), np.int32)}
  task_index = np.array([0, 1, 2, 2, 1, 0], np.int32)
  eager = model(inputs, task_index).numpy()
  compiled = tf.function(model.__call__, jit_compile=True)(inputs, task_index).numpy()
  np.testing.assert_allclose(compiled, eager, atol=1e-5)
  assert not eager[task_index == 2, 1:].any()  # The regression head's padding.


def export_error(capsys, **flag_values):
  """Runs the command's main as its entry point does; returns the ERROR line."""
  fv = flags.FlagValues()
  serving_export.define_flags(fv)
  fv(["export"] + [f"--{k}={v}" for k, v in flag_values.items()])
  with pytest.raises(SystemExit) as exit_info:
    errors.exit_on_user_error(lambda argv: serving_export.main(argv, fv))(["export"])
  assert exit_info.value.code == errors.USER_ERROR_EXIT_STATUS
  lines = capsys.readouterr().err.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("ERROR: "), lines
  return lines[0]


def test_user_errors(vocab_base, runs, tmp_path, capsys):
  out = str(tmp_path / "out")
  assert "not an adapter bank" in export_error(capsys, bank=tmp_path / "none",
                                                export_dir=out)
  bank = _make_bank(str(tmp_path / "bank"), vocab_base, runs, names=["sst2"])
  os.makedirs(os.path.join(bank, "tasks", "empty"))
  assert "task 'empty' has no adapter_weights.safetensors" in export_error(
      capsys, bank=bank, export_dir=out)
  shutil.rmtree(os.path.join(bank, "tasks", "empty"))
  message = export_error(capsys, bank=bank, export_dir=out, tasks="sst2,qqp")
  assert "no task 'qqp'" in message and "it has: sst2" in message
  # Another base than the bank's (same shapes, other weights).
  other = tiny_bert.write_google_dir(str(tmp_path / "other"), config=dict(
      tiny_bert.TINY_CONFIG, vocab_size=120), seed=7)[2]
  assert "are not the bank's base" in export_error(capsys, bank=bank, export_dir=out,
                                                    init_checkpoint=other)
  # A task file trained on another base.
  path = os.path.join(bank, "tasks", "sst2", adapter_weights.WEIGHTS_FILE)
  with open(path, "rb") as f:
    blob = f.read()
  fingerprint = adapter_weights.read_adapter_header(path)["base_fingerprint"]
  with open(path, "wb") as f:
    f.write(blob.replace(fingerprint.encode(), b"0" * len(fingerprint)))
  assert "task 'sst2' was trained on another base model" in export_error(
      capsys, bank=bank, export_dir=out)
  assert not os.path.exists(out)
