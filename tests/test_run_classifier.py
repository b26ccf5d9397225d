"""End-to-end tests of run_classifier.py on the project's GLUE samples with a tiny BERT.

main() runs in-process with flags parsed by absl (a fresh FlagValues per run);
the kill-and-resume test starts the real command line in a subprocess.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.special
import tensorflow as tf
from absl import flags

from adapter_bert.classification import features as classifier_features
from adapter_bert.classification import processors
import convert_checkpoint
from adapter_bert import errors
import numpy_bert
from run_harness import (ADAPTER, GLUE, REPO, classifier_flags, read_eval_results,
                         read_test_results, read_text, run_main)
from adapter_bert.runtime import distribution
import tiny_bert
from adapter_bert import tokenization

H, L, I, V, P, T = 32, 2, 37, 99, 64, 2  # tiny_bert.TINY_CONFIG


def _num_rows(path, header=True):
  lines = [l for l in read_text(path).split("\n") if l.strip()]
  return len(lines) - int(header)


def _checkpoint_evaluated(output_dir):
  """The checkpoint that output_dir's eval_results.txt names (checkpoint_path)."""
  (line,) = [l for l in read_text(os.path.join(output_dir, "eval_results.txt")).splitlines()
             if l.startswith("checkpoint_path = ")]
  return line[len("checkpoint_path = "):]


def _param_count(num_labels, adapter_size):
  """From the config's sizes; an adapter has weights1 [H,m], biases1 [1,m], weights2 [m,H],
  biases2 [1,H]."""
  embeddings = V * H + P * H + T * H + 2 * H
  layer = 4 * (H * H + H) + (H * I + I) + (I * H + H) + 2 * 2 * H
  adapters = 2 * L * (2 * adapter_size * H + H + adapter_size)
  head = num_labels * H + num_labels
  layer_norms = 2 * H + L * 2 * 2 * H
  return {"total": embeddings + L * layer + (H * H + H) + head + adapters,
          "adapter": adapters, "trainable": adapters + layer_norms + head}


def _checkpoint_steps(output_dir):
  return sorted(int(m.group(1)) for name in tf.io.gfile.listdir(output_dir)
                for m in [re.fullmatch(r"model\.ckpt-(\d+)\.index", name)] if m)


@pytest.fixture(scope="module")
def mrpc_run(base, tmp_path_factory):
  out = str(tmp_path_factory.mktemp("mrpc") / "out")
  logs = run_main(**classifier_flags(base, task_name="MRPC", data_dir=os.path.join(GLUE, "MRPC"),
                                     output_dir=out, do_train=True, do_eval=True, do_predict=True,
                                     num_train_epochs=2, save_checkpoints_steps=2,
                                     eval_predictions=True))
  return out, logs


def test_mrpc_train_eval_predict(base, mrpc_run):
  out, logs = mrpc_run
  # 8 training rows / batch 4 * 2 epochs.
  assert _checkpoint_steps(out) == [2, 4]
  for line in ["***** Running training *****", "  Num examples = 8", "  Batch size = 4",
               "  Num steps = 4", "***** Running evaluation *****",
               "  Num examples = 6 (6 actual, 0 padding)", "***** Running prediction*****",
               "***** Eval results *****"]:
    assert line in logs
  counts = _param_count(2, ADAPTER)
  assert f"***** Total Parameters = {counts['total']} *****" in logs
  assert f"***** Adapter Parameters = {counts['adapter']} *****" in logs
  assert f"***** Total Trainable Parameters = {counts['trainable']} *****" in logs

  results = read_eval_results(os.path.join(out, "eval_results.txt"))
  assert sorted(results) == ["eval_accuracy", "eval_f1", "eval_loss", "global_step", "loss"]
  assert results["global_step"] == 4  # Its metrics: test_eval_metrics_are_the_predictions.
  # And the checkpoint evaluated, named in its directory as TF's `checkpoint` file does.
  assert _checkpoint_evaluated(out) == "model.ckpt-4"
  # The logged lines are the file's lines with a two-space indent.
  for line in read_text(os.path.join(out, "eval_results.txt")).splitlines():
    assert "  " + line in logs
  probs = read_test_results(os.path.join(out, "test_results.tsv"))
  assert probs.shape == (_num_rows(os.path.join(GLUE, "MRPC", "test.tsv")), 2)
  np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-6)
  # --eval_predictions: the dev examples' probabilities, in dev order, whose
  # accuracy is eval_results.txt's.
  dev = read_test_results(os.path.join(out, "eval_predictions.tsv"))
  processor = processors.get_processor("mrpc")
  labels = [processor.get_labels().index(e.label)
            for e in processor.get_dev_examples(os.path.join(GLUE, "MRPC"))]
  assert dev.shape == (len(labels), 2)
  np.testing.assert_allclose(np.mean(dev.argmax(axis=1) == labels), results["eval_accuracy"],
                             atol=1e-6)

  config = json.loads(read_text(os.path.join(out, "run_config.json")))
  assert config["adapter_config"] == {"size": ADAPTER, "init_scale": 1e-3, "activation": "gelu"}
  assert config["bert_config"]["hidden_size"] == H and config["label_list"] == ["0", "1"]
  assert config["train_mode"] == "adapters" and config["num_train_steps"] == 4
  assert tf.io.gfile.exists(os.path.join(out, "adapter_model", "adapter_weights.safetensors"))
  assert tf.io.gfile.listdir(os.path.join(out, "eval"))  # TensorBoard events

  # The same command again: already at num_train_steps, so no step is taken,
  # the records are reused and the results are the same.
  before = {n: os.path.getmtime(os.path.join(out, n)) for n in os.listdir(out)
            if n.startswith("model.ckpt-")}
  logs = run_main(**classifier_flags(base, task_name="MRPC", data_dir=os.path.join(GLUE, "MRPC"),
                                     output_dir=out, do_train=True, num_train_epochs=2,
                                     save_checkpoints_steps=2))
  assert not any(line.startswith("global_step = ") for line in logs)
  assert any(line.startswith("Reusing ") and "train.tf_record" in line for line in logs)
  assert before == {n: os.path.getmtime(os.path.join(out, n)) for n in os.listdir(out)
                    if n.startswith("model.ckpt-")}
  # Eval-only takes the latest checkpoint in output_dir (no init_checkpoint needed).
  os.remove(os.path.join(out, "eval_results.txt"))
  run_main(**classifier_flags(base, task_name="MRPC", data_dir=os.path.join(GLUE, "MRPC"),
                              output_dir=out, do_eval=True, init_checkpoint=None))
  assert read_eval_results(os.path.join(out, "eval_results.txt")) == results
  assert _checkpoint_evaluated(out) == "model.ckpt-4"


def test_eval_metrics_are_the_predictions(base, mrpc_run, tmp_path):
  """eval_results.txt's accuracy, F1 and loss recomputed from the trained model's
  probabilities on the dev rows (predicted as a test set) and the dev labels."""
  out, _ = mrpc_run
  data = tmp_path / "dev_as_test"
  data.mkdir()
  # MRPC's test rows have the dev rows' columns, with an index in place of the label.
  shutil.copy(os.path.join(GLUE, "MRPC", "dev.tsv"), data / "test.tsv")
  predicted = str(tmp_path / "predicted")
  run_main(**classifier_flags(base, task_name="mrpc", data_dir=str(data), output_dir=predicted,
                              do_predict=True,
                              adapter_checkpoint=os.path.join(out, "adapter_model")))
  probs = read_test_results(os.path.join(predicted, "test_results.tsv"))
  labels = np.array([int(e.label) for e in processors.MrpcProcessor().get_dev_examples(
      os.path.join(GLUE, "MRPC"))])
  assert probs.shape == (len(labels), 2) and len(set(labels)) == 2
  predictions = probs.argmax(-1)
  true_positives = np.sum((predictions == 1) & (labels == 1))
  f1 = 2 * true_positives / (np.sum(predictions == 1) + np.sum(labels == 1))
  results = read_eval_results(os.path.join(out, "eval_results.txt"))
  assert results["eval_accuracy"] == pytest.approx(np.mean(predictions == labels))
  assert results["eval_f1"] == pytest.approx(f1)
  assert results["eval_loss"] == pytest.approx(
      -np.mean(np.log(probs[np.arange(len(labels)), labels])), abs=1e-5)


def test_adapter_weights_restore_on_base(base, mrpc_run, tmp_path):
  out, _ = mrpc_run
  fresh = str(tmp_path / "eval_only")
  run_main(**classifier_flags(base, task_name="mrpc", data_dir=os.path.join(GLUE, "MRPC"),
                              output_dir=fresh, do_eval=True, do_predict=True,
                              adapter_checkpoint=os.path.join(out, "adapter_model")))
  trained = read_eval_results(os.path.join(out, "eval_results.txt"))
  restored = read_eval_results(os.path.join(fresh, "eval_results.txt"))
  assert restored.keys() == trained.keys()
  for key in trained:
    assert restored[key] == pytest.approx(trained[key], abs=1e-5), key
  # The adapters gave the head: their file is what was evaluated, at their step.
  assert _checkpoint_evaluated(fresh) == os.path.join(out, "adapter_model")
  np.testing.assert_allclose(read_test_results(os.path.join(fresh, "test_results.tsv")),
                             read_test_results(os.path.join(out, "test_results.tsv")), atol=1e-6)
  # On another base the adapters are refused, before anything is written.
  _, _, other_ckpt, _ = tiny_bert.write_google_dir(str(tmp_path / "other"), seed=5)
  with pytest.raises(errors.UserError, match="trained on another base model"):
    run_main(**classifier_flags(base, task_name="mrpc", data_dir=os.path.join(GLUE, "MRPC"),
                                output_dir=str(tmp_path / "other_out"), do_eval=True,
                                init_checkpoint=other_ckpt,
                                adapter_checkpoint=os.path.join(out, "adapter_model")))
  assert not os.path.exists(tmp_path / "other_out")


@pytest.fixture(scope="module")
def run_checkpoint_evaluated(base, mrpc_run, tmp_path_factory):
  """mrpc_run's last checkpoint evaluated and predicted as --init_checkpoint in a new
  output_dir: its output_dir and log lines (read by two tests)."""
  out, _ = mrpc_run
  fresh = str(tmp_path_factory.mktemp("run_checkpoint") / "eval_only")
  logs = run_main(**classifier_flags(base, task_name="mrpc", data_dir=os.path.join(GLUE, "MRPC"),
                                     output_dir=fresh, do_predict=True, do_eval=True,
                                     init_checkpoint=os.path.join(out, "model.ckpt-4")))
  return fresh, logs


def test_eval_only_from_this_projects_checkpoint(base, mrpc_run, run_checkpoint_evaluated,
                                                 tmp_path):
  """A checkpoint trained elsewhere (e.g. on a Colab TPU) evaluated as --init_checkpoint."""
  out, _ = mrpc_run
  fresh, _ = run_checkpoint_evaluated
  np.testing.assert_allclose(read_test_results(os.path.join(fresh, "test_results.tsv")),
                             read_test_results(os.path.join(out, "test_results.tsv")), atol=1e-6)
  assert _checkpoint_evaluated(fresh) == os.path.join(out, "model.ckpt-4")
  # Given as its directory, the checkpoint named is the directory's latest.
  again = str(tmp_path / "directory")
  run_main(**classifier_flags(base, task_name="mrpc", data_dir=os.path.join(GLUE, "MRPC"),
                              output_dir=again, do_eval=True, init_checkpoint=out))
  assert _checkpoint_evaluated(again) == os.path.join(out, "model.ckpt-4")


@pytest.mark.parametrize("action", ["do_eval", "do_predict"])
def test_eval_only_with_no_weights_is_refused_in_one_line(base, tmp_path, action):
  """No weights flag and no checkpoint in --output_dir (a typo is enough): the
  model would be random, so the run stops before anything is written."""
  out = tmp_path / "typo"
  with pytest.raises(errors.UserError) as error:
    run_main(**classifier_flags(base, task_name="mrpc", data_dir=os.path.join(GLUE, "MRPC"),
                                output_dir=str(out), init_checkpoint=None, **{action: True}))
  message = str(error.value)
  assert "\n" not in message
  for flag in ("--init_checkpoint", "--adapter_checkpoint", "--adapter_bank",
               "--bert_hub_module_handle", f"--output_dir={out}"):
    assert flag in message, message
  assert not out.exists()


def test_eval_only_on_a_base_without_head_warns_of_chance_level(base, mrpc_run,
                                                                run_checkpoint_evaluated,
                                                                tmp_path):
  """Only --init_checkpoint of an encoder: one warning that the head is untrained;
  a run's checkpoint (head included) or its output_dir gives no such warning."""
  mrpc = dict(task_name="mrpc", data_dir=os.path.join(GLUE, "MRPC"), do_eval=True)
  logs = run_main(**classifier_flags(base, output_dir=str(tmp_path / "base_only"), **mrpc))
  untrained = [m for m in logs if "the task head is untrained" in m]
  assert len(untrained) == 1 and "chance-level" in untrained[0], logs[-10:]
  assert _checkpoint_evaluated(str(tmp_path / "base_only")) == base["init_checkpoint"]
  out, _ = mrpc_run
  # The run's checkpoint as --init_checkpoint: the run of run_checkpoint_evaluated.
  _, logs = run_checkpoint_evaluated
  assert not [m for m in logs if "untrained" in m]
  logs = run_main(**classifier_flags(
      base, output_dir=shutil.copytree(out, str(tmp_path / "run_dir")), **mrpc))
  assert not [m for m in logs if "untrained" in m]


def test_tpu_path_pads_eval_and_predict(base, mrpc_run, tmp_path, monkeypatch):
  """--use_tpu pads to whole batches with fake examples that metrics and outputs skip.

  No TPU here: the strategy is the default one, the rest of the TPU path runs.
  """
  out, _ = mrpc_run
  monkeypatch.setattr(distribution, "create_strategy",
                      lambda *args, **kwargs: tf.distribute.get_strategy())
  tpu = str(tmp_path / "tpu")
  logs = run_main(**classifier_flags(base, task_name="mrpc", data_dir=os.path.join(GLUE, "MRPC"),
                                     output_dir=tpu, do_eval=True, do_predict=True, use_tpu=True,
                                     eval_batch_size=4, predict_batch_size=5,
                                     adapter_checkpoint=os.path.join(out, "adapter_model")))
  assert "  Num examples = 8 (6 actual, 2 padding)" in logs
  assert "  Num examples = 10 (6 actual, 4 padding)" in logs
  meta = json.loads(read_text(os.path.join(tpu, "predict.tf_record.meta.json")))
  assert meta["num_examples"] == 10 and meta["num_real_examples"] == 6
  np.testing.assert_allclose(read_test_results(os.path.join(tpu, "test_results.tsv")),
                             read_test_results(os.path.join(out, "test_results.tsv")), atol=1e-6)
  padded = read_eval_results(os.path.join(tpu, "eval_results.txt"))
  trained = read_eval_results(os.path.join(out, "eval_results.txt"))
  for key in ("eval_accuracy", "eval_f1", "eval_loss", "global_step"):
    assert padded[key] == pytest.approx(trained[key], abs=1e-5), key


def _copy_to_ram(local_dir, ram_dir):
  tf.io.gfile.makedirs(ram_dir)
  for name in os.listdir(local_dir):
    tf.io.gfile.copy(os.path.join(local_dir, name), f"{ram_dir}/{name}", overwrite=True)


def test_ram_filesystem_gives_the_same_run(base, mrpc_run):
  out, _ = mrpc_run
  data = "ram://run_classifier_test/data/MRPC"
  ram_out = "ram://run_classifier_test/out"
  _copy_to_ram(os.path.join(GLUE, "MRPC"), data)
  run_main(**classifier_flags(base, task_name="MRPC", data_dir=data, output_dir=ram_out,
                              do_train=True, do_eval=True, do_predict=True, num_train_epochs=2,
                              save_checkpoints_steps=2))
  assert _checkpoint_steps(ram_out) == [2, 4]
  assert tf.io.gfile.exists(f"{ram_out}/adapter_model/adapter_weights.safetensors")
  # Same seed, same data: the same numbers as the local run.
  local = read_eval_results(os.path.join(out, "eval_results.txt"))
  remote = read_eval_results(f"{ram_out}/eval_results.txt")
  for key in local:
    assert remote[key] == pytest.approx(local[key], abs=1e-5), key
  np.testing.assert_allclose(read_test_results(f"{ram_out}/test_results.tsv"),
                             read_test_results(os.path.join(out, "test_results.tsv")), atol=1e-5)


@pytest.mark.parametrize("task, directory, keys", [
    ("cola", "CoLA", ["eval_accuracy", "eval_loss", "eval_mcc", "global_step", "loss"]),
    ("sts-b", "STS-B", ["eval_loss", "eval_pearson", "eval_spearman", "global_step", "loss"]),
])
def test_single_sentence_and_regression_tasks(base, tmp_path, task, directory, keys):
  out = str(tmp_path / "out")
  logs = run_main(**classifier_flags(base, task_name=task, data_dir=os.path.join(GLUE, directory),
                                     output_dir=out, do_train=True, do_eval=True, do_predict=True,
                                     num_train_epochs=1))
  results = read_eval_results(os.path.join(out, "eval_results.txt"))
  assert sorted(results) == keys and results["global_step"] == 2
  num_labels = 1 if task == "sts-b" else 2
  counts = _param_count(num_labels, ADAPTER)
  assert f"***** Total Parameters = {counts['total']} *****" in logs
  lines = read_text(os.path.join(out, "test_results.tsv")).rstrip("\n").split("\n")
  assert len(lines) == _num_rows(os.path.join(GLUE, directory, "test.tsv"))
  probs = read_test_results(os.path.join(out, "test_results.tsv"))
  assert probs.shape[1] == num_labels  # STS-B: one score per line
  if task == "cola":
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-6)


def test_user_tsv_task(base, tmp_path):
  out = str(tmp_path / "out")
  data = os.path.join(REPO, "data", "tsv_example")
  run_main(**classifier_flags(base, task_name="tsv", data_dir=data, output_dir=out, do_train=True,
                              do_eval=True, do_predict=True, num_train_epochs=1,
                              text_a_column="sentence", label_column="label",
                              labels="positive,negative,neutral"))
  config = json.loads(read_text(os.path.join(out, "run_config.json")))
  assert config["label_list"] == ["positive", "negative", "neutral"]
  assert sorted(read_eval_results(os.path.join(out, "eval_results.txt"))) == [
      "eval_accuracy", "eval_loss", "global_step", "loss"]
  probs = read_test_results(os.path.join(out, "test_results.tsv"))
  assert probs.shape == (_num_rows(os.path.join(data, "test.tsv")), 3)
  np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-6)


def test_eval_only_on_original_adapter_bert_checkpoint(base, tmp_path):
  """An adapter-bert fine-tuned checkpoint (TF1 names, Adam slots, global_step) predicts
  what a NumPy forward pass of those weights gives."""
  rng = np.random.default_rng(11)
  head = {"output_weights": rng.normal(0, 0.5, (2, H)).astype(np.float32),
          "output_bias": np.array([0.1, -0.1], np.float32)}
  shapes = tiny_bert.google_variable_shapes(tiny_bert.TINY_CONFIG, ADAPTER)
  slots = {f"{n}/adam_{s}": np.zeros(shape, np.float32) for n, shape in shapes.items()
           if "adapters" in n or "LayerNorm" in n for s in "mv"}
  slots.update({f"{n}/adam_{s}": np.zeros(v.shape, np.float32)
                for n, v in head.items() for s in "mv"})
  _, _, ckpt, weights = tiny_bert.write_google_dir(
      str(tmp_path / "adapter_bert"), seed=3, adapter_size=ADAPTER,
      extra=dict(head, global_step=np.int64(1234), **slots))
  weights.update(head)
  out = str(tmp_path / "out")
  run_main(**classifier_flags(base, task_name="mrpc", data_dir=os.path.join(GLUE, "MRPC"),
                              output_dir=out, do_eval=True, do_predict=True, init_checkpoint=ckpt))

  tokenizer = tokenization.FullTokenizer(base["vocab_file"], do_lower_case=True)
  processor = processors.MrpcProcessor()

  def expected(examples):
    feats = classifier_features.convert_examples_to_features(examples, ["0", "1"], 32,
                                                            tokenizer)
    arrays = {k: np.array([getattr(f, k) for f in feats])
              for k in ("input_ids", "input_mask", "segment_ids", "label_id")}
    _, pooled = numpy_bert.bert_forward(weights, 4, arrays["input_ids"],
                                        arrays["input_mask"], arrays["segment_ids"])
    logits = pooled @ weights["output_weights"].T + weights["output_bias"]
    return scipy.special.softmax(logits, axis=-1), arrays["label_id"]

  probs, _ = expected(processor.get_test_examples(os.path.join(GLUE, "MRPC")))
  np.testing.assert_allclose(read_test_results(os.path.join(out, "test_results.tsv")), probs,
                             atol=1e-5)
  dev_probs, labels = expected(processor.get_dev_examples(os.path.join(GLUE, "MRPC")))
  results = read_eval_results(os.path.join(out, "eval_results.txt"))
  assert results["eval_accuracy"] == pytest.approx(np.mean(dev_probs.argmax(-1) == labels))
  assert results["eval_loss"] == pytest.approx(
      -np.mean(np.log(dev_probs[np.arange(len(labels)), labels])), abs=1e-5)
  # As the original's Estimator: weights from init_checkpoint, no trained step.
  assert results["global_step"] == 0


def _mrpc_copy(tmp_path, edit=None):
  d = tmp_path / "MRPC"
  shutil.copytree(os.path.join(GLUE, "MRPC"), d)
  if edit:
    edit(d)
  return str(d)


def _edit_line(name, line_number, fn):
  def edit(d):
    lines = (d / name).read_text().split("\n")
    lines[line_number - 1] = fn(lines[line_number - 1])
    (d / name).write_text("\n".join(lines))
  return edit


def _cased_dir(base, tmp_path):
  d = tmp_path / "cased_L-12_H-768_A-12"
  d.mkdir()
  prefix = base["init_checkpoint"]
  for name in os.listdir(os.path.dirname(prefix)):
    if name.startswith("bert_model.ckpt"):
      shutil.copy(os.path.join(os.path.dirname(prefix), name), d / name)
  return str(d / "bert_model.ckpt")


def _wrong_config(base, tmp_path):
  config = dict(tiny_bert.TINY_CONFIG, intermediate_size=38)
  path = tmp_path / "bert_config.json"
  path.write_text(json.dumps(config))
  return str(path)


BAD_INPUTS = {
    "missing data_dir": (
        lambda b, t: dict(data_dir=str(t / "nowhere")), errors.UserError,
        r"^flag --data_dir=.*nowhere: directory not found$"),
    "missing file": (
        lambda b, t: dict(data_dir=_mrpc_copy(t, lambda d: (d / "dev.tsv").unlink())),
        errors.UserError, r"^.*MRPC/dev\.tsv: TSV file not found$"),
    "too few columns": (
        lambda b, t: dict(data_dir=_mrpc_copy(
            t, _edit_line("train.tsv", 3, lambda l: "\t".join(l.split("\t")[:4])))),
        errors.UserError, r"MRPC/train\.tsv:3: row has 4 tab-separated column\(s\), the "
        r"header \(line 1\) has 5$"),
    "label outside the label list": (
        lambda b, t: dict(data_dir=_mrpc_copy(
            t, _edit_line("dev.tsv", 4, lambda l: "7" + l[1:]))),
        errors.UserError, r"MRPC/dev\.tsv:4: label '7' is not one of \['0', '1'\]"),
    "tsv label outside --labels": (
        lambda b, t: dict(task_name="tsv", data_dir=os.path.join(REPO, "data", "tsv_example"),
                          labels="positive,negative"),
        errors.UserError, r"tsv_example/train\.tsv:\d+: label 'neutral' is not one of"),
    "vocab/checkpoint case mismatch": (
        lambda b, t: dict(init_checkpoint=_cased_dir(b, t)), errors.UserError,
        r"You passed in `--do_lower_case=True`.*seems to be a cased model"),
    "max_seq_length over max_position_embeddings": (
        lambda b, t: dict(max_seq_length=65), errors.UserError,
        r"^--max_seq_length=65 is larger than the model's position table: "
        r"max_position_embeddings is 64 in .*bert_config\.json"),
    "unknown task": (
        lambda b, t: dict(task_name="Nope"), flags.IllegalFlagValueError,
        r"^flag --task_name=Nope: must be one of ax, cola, .*, xnli \(any case\)$"),
    "no action": (
        lambda b, t: dict(do_train=False, do_eval=False, do_predict=False),
        errors.UserError,
        r"at least one of --do_train, --do_eval or --do_predict must be given$"),
    "checkpoint does not fit the config": (
        lambda b, t: dict(bert_config_file=_wrong_config(b, t)), errors.UserError,
        r"intermediate/dense/kernel has shape \(32, 37\) in the checkpoint but \(32, 38\) "
        r"in the model built from .*bert_config\.json"),
    "tsv flag on a GLUE task": (
        lambda b, t: dict(labels="a,b"), errors.UserError,
        r"^--labels apply to --task_name=tsv only, not --task_name=mrpc$"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_a_clear_error_and_writes_nothing(base, tmp_path, case):
  overrides, error, message = BAD_INPUTS[case]
  out = tmp_path / "out"
  f = classifier_flags(base, task_name="mrpc", data_dir=os.path.join(GLUE, "MRPC"),
                       output_dir=str(out), do_train=True, do_eval=True, do_predict=True)
  f.update(overrides(base, tmp_path))
  with pytest.raises(error, match=message):
    run_main(**f)
  assert not out.exists()


def test_output_dir_of_another_model_is_refused(base, mrpc_run):
  out, _ = mrpc_run
  before = {n: os.path.getmtime(os.path.join(out, n)) for n in os.listdir(out)}
  with pytest.raises(errors.UserError, match=r"holds checkpoints of another run: adapter_config"):
    run_main(**classifier_flags(base, task_name="mrpc", data_dir=os.path.join(GLUE, "MRPC"),
                                output_dir=out, do_eval=True, adapter_size=4))
  assert before == {n: os.path.getmtime(os.path.join(out, n)) for n in os.listdir(out)}


def test_killed_training_resumes_to_the_last_step(base, tmp_path):
  out = str(tmp_path / "out")
  f = classifier_flags(base, task_name="mrpc", data_dir=os.path.join(GLUE, "MRPC"), output_dir=out,
                       do_train=True, max_seq_length=16, num_train_epochs=75,  # 150 steps
                       save_checkpoints_steps=50, iterations_per_loop=10)
  argv = [f"--{k}" if v is True else f"--{k}={v}" for k, v in f.items()]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  proc = subprocess.Popen([sys.executable, os.path.join(REPO, "run_classifier.py")] + argv,
                          cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)
  try:
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
      if tf.train.latest_checkpoint(out):  # the `checkpoint` state file names one
        break
      time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
  finally:
    _, stderr = proc.communicate(timeout=60)
  assert proc.returncode == -signal.SIGKILL, stderr.decode()[-3000:]
  saved = _saved_steps(out)
  assert saved and saved[-1] < 150, saved

  logs = run_main(**f)  # The same command again.
  assert f"***** Running training from step {saved[-1]} to 150 *****" in logs
  final = _saved_steps(out)
  # 3 checkpoints in all (fewer than the 5 kept): none saved before the kill is lost.
  assert final == [50, 100, 150]
  assert set(saved) <= set(final)
  assert _checkpoint_steps(out) == final  # Files and state agree.


def _saved_steps(output_dir):
  """The steps the `checkpoint` state file lists (what a restart can resume from)."""
  state = tf.train.get_checkpoint_state(output_dir)
  return sorted(int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths)


def _model_garden_saved_model(path, seed=3):
  """A tiny Model Garden BertEncoder (the TF Hub BERT export) as a SavedModel."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  from official.modeling import tf_utils  # pylint: disable=g-import-not-at-top
  from official.nlp.modeling import networks  # pylint: disable=g-import-not-at-top
  encoder = networks.BertEncoder(
      vocab_size=V, hidden_size=H, num_layers=L, num_attention_heads=4, intermediate_size=I,
      max_sequence_length=P, type_vocab_size=T, dict_outputs=True,
      activation=tf_utils.get_activation("gelu"),
      initializer=tf_keras.initializers.TruncatedNormal(stddev=0.02, seed=seed))
  rng = np.random.default_rng(seed)
  encoder.set_weights([(1.0 if w.name.endswith("gamma:0") else 0.0)
                       + 0.2 * rng.standard_normal(w.shape).astype(np.float32)
                       for w in encoder.weights])
  tf.saved_model.save(encoder, path)
  return encoder


def test_bert_hub_module_handle(base, tmp_path, monkeypatch):
  saved = str(tmp_path / "hub_encoder")
  _model_garden_saved_model(saved)
  os.makedirs(os.path.join(saved, "assets"), exist_ok=True)
  shutil.copy(base["vocab_file"], os.path.join(saved, "assets", "vocab.txt"))
  common = dict(task_name="mrpc", data_dir=os.path.join(GLUE, "MRPC"), do_eval=True,
                do_predict=True, max_seq_length=32, eval_batch_size=4, predict_batch_size=4,
                adapter_size=ADAPTER, seed=7)
  # A TF Hub URL goes through tensorflow_hub's resolver (which downloads it; here it
  # names the directory): tensorflow_hub must import in the installed environment.
  import tensorflow_hub  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  url = "https://tfhub.dev/tensorflow/small_bert/1"
  monkeypatch.setattr(tensorflow_hub, "resolve", {url: saved}.__getitem__)
  # Config inferred from the weights, vocab from the SavedModel's assets.
  run_main(bert_hub_module_handle=url, output_dir=str(tmp_path / "hub"), **common)
  # Reference: the same encoder converted to a Google checkpoint first (its
  # predictions, which are compared: no evaluation needed).
  google = str(tmp_path / "google")
  convert_checkpoint.tf2_bert_encoder_to_google(google, saved_model_dir=saved)
  run_main(bert_config_file=os.path.join(google, "bert_config.json"),
           vocab_file=os.path.join(google, "vocab.txt"),
           init_checkpoint=os.path.join(google, "bert_model.ckpt"),
           output_dir=str(tmp_path / "ckpt"), **dict(common, do_eval=None))
  np.testing.assert_allclose(read_test_results(str(tmp_path / "hub" / "test_results.tsv")),
                             read_test_results(str(tmp_path / "ckpt" / "test_results.tsv")),
                             atol=1e-6)
