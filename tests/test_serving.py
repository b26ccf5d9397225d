"""serving/: one SavedModel for every task of an adapter bank, from raw text.

Three tasks are trained for one step each with run_classifier.py on a tiny BERT
(MRPC pairs, SST-2 single sentences, STS-B regression trained in
--train_mode=layer_norm), with different adapter sizes and max_seq_lengths, and
predicted with --do_predict; a bank is assembled by hand in the bank layout and
exported once (per test session: test_serving_signatures.py reads the same). The
SavedModel must reproduce test_results.tsv from the raw test.tsv texts, per task
and in a shuffled mixed batch, also when loaded in a process that cannot import
this repository (one such process, serving_elsewhere, runs every step of the
tests that need one). The fixtures (vocab_base, runs, bank, exported, served) are
serving_bank's; the signatures' own contract (their inputs and
outputs, requests they refuse, empty, hostile and over-long texts):
test_serving_signatures.py.
"""

import concurrent.futures
import importlib.util
import json
import os
import re
import shutil
import uuid

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from adapter_bert.checkpoints import adapter_weights
from adapter_bert.classification import features as classifier_features
from adapter_bert.classification import processors
from adapter_bert.bank import adapter_bank
from adapter_bert.bank import bank_tasks
from adapter_bert.serving import export as serving_export
from adapter_bert.serving import stacked_tasks
from export_checks import Poller, export_error, files_in
import export_savedmodel
import file_trees
import serving_elsewhere
from serving_bank import GLUE, HARD_TEXTS, REPO, TASKS, make_bank
# The fixtures of the bank it exports.
from serving_bank import vocab_base, runs, bank, exported, served  # pylint: disable=unused-import
import tiny_bert
from adapter_bert import tokenization


@pytest.fixture(scope="module")
def one_task_bank(vocab_base, runs, tmp_path_factory):
  """A bank of sst2 alone: for the tests of where an export writes, which one task
  shows as well as three (and exports faster: each task's signatures are traced)."""
  return make_bank(str(tmp_path_factory.mktemp("bank1") / "bank"), vocab_base, runs,
                   names=["sst2"])


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


@pytest.fixture(scope="module")
def exported_ids(bank, tmp_path_factory):
  """The same bank exported with --token_ids_only, through the command's main."""
  export_dir = str(tmp_path_factory.mktemp("export_ids") / "1")
  fv = flags.FlagValues()
  export_savedmodel.define_flags(fv)
  fv(["export", f"--adapter_bank={bank}", f"--export_dir={export_dir}", "--token_ids_only"])
  export_savedmodel.main(["export"], fv)
  return export_dir


# The requests the serving process answers: raw text for the text export, and ids
# (token_ids_request) for the token-ids export.
_TEXT_REQUEST = {"text_a": ["The storm knocked out power .", "a clever script", "A bird sits."],
                 "text_b": ["Power was lost .", "", "A bird is perched."],
                 "task": ["mrpc", "sst2", "stsb"]}
# saved_model_cli run's request of token_ids.
_CLI_IDS = [[101, 7, 8, 102, 0], [101, 9, 102, 10, 102]]
_CLI_EXPRS = (f"input_ids={_CLI_IDS};input_mask=[[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]];"
              f"segment_ids=[[0, 0, 0, 0, 0], [0, 0, 0, 1, 1]];task=['sst2', 'mrpc']")


def _token_ids_request(served):
  packed = served.signatures["tokenize"](
      text_a=tf.constant(["the movie was good", "a bad film", "A bird sits."]),
      text_b=tf.constant(["", "a man", "A bird is perched."]),
      task=tf.constant(["sst2", "mrpc", "stsb"]))
  request = {k: packed[k].numpy().tolist() for k in ("input_ids", "input_mask", "segment_ids")}
  request["task"] = ["sst2", "mrpc", "stsb"]
  return request


@pytest.fixture(scope="module")
def elsewhere(exported, exported_ids, served, tmp_path_factory):
  """What a server and a user see of the two exports from elsewhere, without this
  repository: one serving process (serving_elsewhere) runs, on stock TensorFlow,
  the token-ids export's signatures (also in a TF1 session) and the text export's
  token_ids, TensorFlow's saved_model_cli show and run (as TF Serving users
  check an export, run as a user would: from another directory), then with
  tensorflow-text's ops the text export (also in a TF1 session). Step name ->
  its result; "outdir": where saved_model_cli run wrote."""
  directory = tmp_path_factory.mktemp("elsewhere")
  outdir = directory / "outputs"
  request = _token_ids_request(served)
  steps = {}
  for name in ("serving_default", "token_ids"):
    for session in (False, True):
      steps[f"ids {name} {session}"] = dict(export_dir=exported_ids, signature=name,
                                            request=request, session=session)
  steps["text token_ids"] = dict(export_dir=exported[0], signature="token_ids", request=request)
  for name, args in (
      ("show text", ["show", "--all", "--dir", exported[0]]),
      ("show ids", ["show", "--all", "--dir", exported_ids]),
      ("run ids", ["run", "--dir", exported_ids, "--tag_set", "serve", "--signature_def",
                   "token_ids", "--input_exprs", _CLI_EXPRS, "--outdir", str(outdir)]),
      ("run text", ["run", "--dir", exported[0], "--tag_set", "serve", "--signature_def",
                    "serving_default", "--input_exprs",
                    "text_a=['a film'];text_b=[''];task=['sst2']"])):
    steps[name] = {"saved_model_cli": args}
  steps["import"] = {"import": "tensorflow_text"}
  call = dict(export_dir=exported[0], signature="serving_default", request=_TEXT_REQUEST)
  steps["text"], steps["text session"] = call, dict(call, session=True)
  results = serving_elsewhere.run(directory, list(steps.values()))
  return dict(zip(steps, results), request=request, outdir=outdir)


def test_loads_without_this_repository(elsewhere, served):
  """The text export, through tf.saved_model.load and in a TF1 session, as
  TensorFlow Serving runs it (with tensorflow-text's ops)."""
  request = _TEXT_REQUEST
  want = _call(served, request["text_a"], request["text_b"], request["task"])
  for got in (dict(elsewhere["text"]), dict(elsewhere["text session"])):
    assert "error" not in got, got
    assert got.pop("tensorflow_text") is True
    np.testing.assert_allclose(got["probabilities"], want["probabilities"], atol=1e-6)
    np.testing.assert_allclose(got["score"], want["score"], atol=1e-6)
    assert got["predicted_label"] == [s.decode() for s in want["predicted_label"]]


_TEXT_OPS = ("NormalizeUTF8", "RegexSplitWithOffsets", "WordpieceTokenizeWithOffsets")


def test_token_ids_only_export_loads_in_stock_tensorflow(exported_ids, served, vocab_base,
                                                         elsewhere):
  request = elsewhere["request"]
  want = served.signatures["token_ids"](**{k: tf.constant(v) for k, v in request.items()})
  by_ids = [dict(elsewhere[f"ids {name} {session}"]) for name in ("serving_default", "token_ids")
            for session in (False, True)]
  text_export = elsewhere["text token_ids"]
  for got in by_ids:
    assert got.pop("tensorflow_text") is False
    assert set(got) == set(want), got
    for key in ("probabilities", "logits", "score"):
      np.testing.assert_allclose(got[key], want[key].numpy(), atol=1e-6)
    assert got["predicted_label"] == [s.decode() for s in want["predicted_label"].numpy()]
    assert got["task_index"] == [1, 0, 2]
  # Without this option even token_ids cannot load there: the test would see the difference.
  assert text_export["tensorflow_text"] is False
  assert "Op type not registered 'NormalizeUTF8'" in text_export["error"]

  # The vocabulary, line i the token of id i, for client tokenizers.
  vocab = tokenization.load_vocab(vocab_base["vocab_file"])
  with open(os.path.join(exported_ids, "assets.extra", "vocab.txt")) as f:
    lines = f.read().splitlines()
  assert all(lines[i] == token for token, i in vocab.items() if token.strip() == token)
  with open(os.path.join(exported_ids, serving_export.TASKS_FILE)) as f:
    assert json.load(f)["token_ids_only"] is True
  assert not os.path.exists(os.path.join(exported_ids, "assets", "vocab.txt"))


def test_saved_model_cli_show_and_run(served, elsewhere):
  """TensorFlow's saved_model_cli, as TF Serving users check an export."""
  shown = {}
  for kind in ("text", "ids"):
    result = elsewhere[f"show {kind}"]
    assert result["returncode"] == 0, result["stderr"][-3000:]
    shown[kind] = result["stdout"]
  ops = {kind: set(re.search(r"contains the following ops: \{(.*)\}", out).group(1)
                   .replace("'", "").split(", ")) for kind, out in shown.items()}
  assert set(_TEXT_OPS) <= ops["text"] and not set(_TEXT_OPS) & ops["ids"]
  assert "signature_def['tokenize']" in shown["text"]
  assert "signature_def['tokenize']" not in shown["ids"]
  for name in ("serving_default", "token_ids"):
    block = shown["ids"].split(f"signature_def['{name}']:")[1].split("signature_def[")[0]
    assert "inputs['input_ids'] tensor_info:\n        dtype: DT_INT32\n        shape: (-1, -1)" \
        in block and "outputs['probabilities']" in block

  run_ids, run_text = elsewhere["run ids"], elsewhere["run text"]
  assert run_ids["returncode"] == 0, run_ids["stderr"][-3000:]
  want = served.signatures["token_ids"](
      input_ids=tf.constant(_CLI_IDS), input_mask=tf.constant([[1, 1, 1, 1, 0], [1] * 5]),
      segment_ids=tf.constant([[0] * 5, [0, 0, 0, 1, 1]]), task=tf.constant(["sst2", "mrpc"]))
  for key in ("probabilities", "logits"):
    np.testing.assert_allclose(np.load(elsewhere["outdir"] / f"{key}.npy"), want[key].numpy(),
                               atol=1e-6)
  # The raw-text export needs tensorflow-text's ops in the process (README: Serving).
  assert run_text["returncode"] != 0
  assert "Op type not registered 'NormalizeUTF8'" in run_text["stderr"]


def test_load_benchmark_checks_every_response(exported):
  """benchmarks/serving_load.py's check, on the tiny export and a few seconds of
  load: no wrong response, and a wrong sequential answer is caught."""
  spec = importlib.util.spec_from_file_location(
      "serving_load", os.path.join(REPO, "benchmarks", "serving_load.py"))
  serving_load = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(serving_load)
  rows = [(e.text_a, e.text_b or "", name) for name in TASKS for e in _test_examples(name)[:5]]
  rows = [rows[i] for i in np.random.default_rng(0).permutation(len(rows))]
  pool = {"text_a": [r[0] for r in rows], "text_b": [r[1] for r in rows],
          "task": [r[2] for r in rows]}
  kwargs = dict(duration_s=0.6, warmup_s=0.2, clients=3)
  # The two serving processes at once: most of each is a fixed duration of load.
  # The corrupted one at the larger batch size alone: there every row of a
  # request must count as wrong.
  with concurrent.futures.ThreadPoolExecutor(1) as thread:
    running = thread.submit(serving_load.serve_under_load, exported[0], pool,
                            batch_sizes=[1, 4], **kwargs)
    corrupted = serving_load.serve_under_load(exported[0], pool, corrupt=range(len(rows)),
                                              batch_sizes=[4], **kwargs)
    results = running.result()
  assert results["repository_modules_loaded"] == [] and results["examples"] == len(rows)
  for r in results["results"]:
    assert r["requests"] > 3 and r["wrong_responses"] == r["failed_responses"] == 0, r
  assert "wrong" in serving_load.report(results)
  assert [r["batch_size"] for r in corrupted["results"]] == [4]
  for r in corrupted["results"]:
    assert r["requests"] > 3 and r["wrong_responses"] == r["requests"], r
    assert r["wrong_rows"] == r["requests"] * r["batch_size"]


def test_multitask_model_compiles_with_xla(bank):
  """Fixed shapes, no per-task control flow: the forward pass compiles (as on TPU)."""
  config = adapter_bank.open_bank(bank)
  tasks = bank_tasks.read_tasks(bank, config)
  base = bank_tasks.read_base_weights(bank, config)
  model = stacked_tasks.StackedTasksBert(base.bert_config, base.arrays, tasks)
  rng = np.random.default_rng(0)
  inputs = {"input_ids": rng.integers(0, 120, (6, 24), np.int32),
            "input_mask": (np.arange(24)[None, :] < rng.integers(3, 25, (6, 1))).astype(np.int32),
            "segment_ids": np.zeros((6, 24), np.int32)}
  task_index = np.array([0, 1, 2, 2, 1, 0], np.int32)
  eager = model(inputs, task_index).numpy()
  compiled = tf.function(model.__call__, jit_compile=True)(inputs, task_index).numpy()
  np.testing.assert_allclose(compiled, eager, atol=1e-5)
  assert not eager[task_index == 2, 1:].any()  # The regression head's padding.


def test_user_errors(vocab_base, runs, tmp_path, capsys):
  out = str(tmp_path / "out")
  assert export_error(capsys, adapter_bank=tmp_path / "none", export_dir=out).endswith(
      f"flag --adapter_bank={tmp_path / 'none'}: directory not found")
  os.makedirs(tmp_path / "empty")
  assert "not an adapter bank" in export_error(capsys, adapter_bank=tmp_path / "empty",
                                                export_dir=out)
  bank = make_bank(str(tmp_path / "bank"), vocab_base, runs, names=["sst2"])
  os.makedirs(os.path.join(bank, "tasks", "empty"))
  assert "task 'empty' has no adapter_weights.safetensors" in export_error(
      capsys, adapter_bank=bank, export_dir=out)
  shutil.rmtree(os.path.join(bank, "tasks", "empty"))
  message = export_error(capsys, adapter_bank=bank, export_dir=out, tasks="sst2,qqp")
  assert "no task 'qqp'" in message and "it has: sst2" in message
  # Another base than the bank's (same shapes, other weights).
  other = tiny_bert.write_google_dir(str(tmp_path / "other"), config=dict(
      tiny_bert.TINY_CONFIG, vocab_size=120), seed=7)[2]
  assert "are not the bank's base" in export_error(capsys, adapter_bank=bank, export_dir=out,
                                                    init_checkpoint=other)
  # A task file trained on another base.
  path = os.path.join(bank, "tasks", "sst2", adapter_weights.WEIGHTS_FILE)
  with open(path, "rb") as f:
    blob = f.read()
  fingerprint = adapter_weights.read_adapter_header(path)["base_fingerprint"]
  with open(path, "wb") as f:
    f.write(blob.replace(fingerprint.encode(), b"0" * len(fingerprint)))
  assert "task 'sst2' was trained on another base model" in export_error(
      capsys, adapter_bank=bank, export_dir=out)
  assert not os.path.exists(out)


def test_an_export_into_a_users_directory_needs_overwrite_and_keeps_their_files(
    one_task_bank, tmp_path, capsys, caplog):
  bank = one_task_bank
  out = tmp_path / "models" / "1"
  warmup = os.path.join("assets.extra", "tf_serving_warmup_requests")
  os.makedirs(out / "assets.extra")
  (out / warmup).write_bytes(b"the user's warmup requests")
  (out / "README.md").write_text("the user's")
  users = file_trees.files_under(out)
  assert export_error(capsys, adapter_bank=bank, export_dir=out).endswith(
      f"{out}: not empty; pass --overwrite to replace what this command writes there (its "
      f"other files are kept)")
  assert file_trees.files_under(out) == users
  fv = flags.FlagValues()
  export_savedmodel.define_flags(fv)
  fv(["export", f"--adapter_bank={bank}", f"--export_dir={out}", "--overwrite",
      "--token_ids_only"])
  export_savedmodel.main(["export"], fv)
  assert serving_export.CLIENT_VOCAB_FILE in file_trees.files_under(out)
  leftover = tmp_path / "models" / ".1.tmp-0123456789ab"  # As a killed export leaves it.
  os.makedirs(leftover / "variables")
  (leftover / "saved_model.pb").write_bytes(b"half")
  fv(["export", f"--adapter_bank={bank}", f"--export_dir={out}", "--overwrite",
      "--notoken_ids_only"])
  with caplog.at_level("INFO", logger="absl"):
    export_savedmodel.main(["export"], fv)
  files = file_trees.files_under(out)
  assert {k: files[k] for k in users} == users  # The user's files, unchanged.
  # The previous export's own files went, those of a token-ids export too.
  assert serving_export.CLIENT_VOCAB_FILE not in files
  assert {serving_export.SAVED_MODEL_FILE, serving_export.TASKS_FILE,
          "variables/variables.index"} <= set(files)
  assert not serving_export.read_tasks_description(str(out))["token_ids_only"]
  assert os.listdir(tmp_path / "models") == ["1"]
  assert [r.getMessage() for r in caplog.records if "interrupted write" in r.getMessage()] == [
      f"Removed {leftover}, left by an interrupted write of {out}"]


def test_an_export_to_a_bucket_is_never_polled_half_written(one_task_bank, monkeypatch):
  """export to ram:// (a directory rename there moves file by file, as gs://'s copy):
  a server polling the versions never finds saved_model.pb beside a missing file
  (test_export_atomicity: the mechanism and a reference that fails without it)."""
  base = f"ram://export_{uuid.uuid4().hex}/models"
  poller = Poller(base, monkeypatch)
  serving_export.export(one_task_bank, base + "/1", token_ids_only=True)
  final = files_in(base + "/1")
  assert {serving_export.SAVED_MODEL_FILE, "variables/variables.index",
          serving_export.TASKS_FILE} <= final
  assert poller.seen and all(seen == final for seen in poller.seen)
