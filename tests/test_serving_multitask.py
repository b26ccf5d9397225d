"""serving/ for run_multitask.py: one SavedModel from a multi-task run's output_dir.

Two tiny runs train three tasks at once (MRPC pairs, STS-B regression, the
3-label tsv example) with --do_predict: HyperFormer++ with trained encoder
LayerNorms (--train_mode=layer_norm) and shared Houlsby adapters. Each is
exported with --multitask_run; the SavedModel must reproduce every task's
test_results.tsv from the raw texts, alone and in a shuffled mixed batch, and
hold, for HyperFormer++, exactly the adapters the trained hypernetwork
generates for each task.
"""

import dataclasses
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  Registers the SavedModel's tokenizer ops.
from absl import flags

from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import checkpoint_io
from adapter_bert.cli import flag_checks
from adapter_bert import errors
from adapter_bert.model import modeling
from adapter_bert.multitask import model as multitask_model
from adapter_bert.multitask import tasks as multitask_tasks
from adapter_bert.multitask.hypernetwork import HyperFormerConfig
import export_savedmodel
import run_multitask
from adapter_bert.cli import multitask_flags
from adapter_bert.tasks import multitask as multitask_task
from adapter_bert.runtime import model_setup
from adapter_bert.runtime import run_config
from adapter_bert.serving import export as serving_export
from adapter_bert.serving import stacked_tasks
from adapter_bert.serving import multitask_run
from export_checks import export_error
import tiny_bert

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Task names of the runs (a tsv task is named after its data directory).
NAMES = ("mrpc", "sts-b", "tsv_example")
TASK_FLAGS = dict(task_name="mrpc,sts-b,tsv", data_dir=",".join(
    os.path.join(REPO, d) for d in ("data/glue/MRPC", "data/glue/STS-B", "data/tsv_example")))

# adapter type -> its flags: HyperFormer++ also trains BERT's LayerNorms;
# the adapter sizes differ (a mixed model pads).
RUNS = {
    "hyperformer": dict(multitask_adapters="hyperformer", train_mode="layer_norm", adapter_size=8,
                        task_embedding_dim=8, projector_hidden_dim=16, projected_dim=8),
    "shared": dict(multitask_adapters="shared", adapter_size=4),
}


@pytest.fixture(scope="module")
def runs(base, tmp_path_factory):
  """adapter type -> output_dir of a trained run (6 steps) with --do_predict."""
  outputs = {}
  for kind, run_flags in RUNS.items():
    out = str(tmp_path_factory.mktemp(kind) / "out")
    values = dict(TASK_FLAGS, bert_config_file=base["bert_config_file"],
                  vocab_file=base["vocab_file"], init_checkpoint=base["init_checkpoint"],
                  output_dir=out, max_seq_length=24, train_batch_size=4,
                  predict_batch_size=4, num_train_epochs=1, learning_rate=1e-2, seed=1,
                  save_checkpoints_steps=1000, **run_flags)
    fv = flags.FlagValues()
    run_multitask.define_flags(fv)
    fv(["run_multitask.py", "--do_train", "--do_predict"] +
       [f"--{k}={v}" for k, v in values.items()])
    run_multitask.main([], fv)
    outputs[kind] = out
  return outputs


@pytest.fixture(scope="module")
def served(runs, tmp_path_factory):
  """adapter type -> (loaded SavedModel, exported tasks)."""
  loaded = {}
  for kind, run in runs.items():
    export_dir = str(tmp_path_factory.mktemp(f"export_{kind}") / "1")
    tasks = serving_export.export(None, export_dir, multitask_run_dir=run)
    loaded[kind] = tf.saved_model.load(export_dir), tasks
  return loaded


def _test_examples():
  """name -> the task's test examples, as run_multitask.py read them."""
  tasks = multitask_tasks.tasks_from_flags(TASK_FLAGS["task_name"].split(","),
                                           TASK_FLAGS["data_dir"].split(","), ["sentence"],
                                           None, ["label"])
  return {t.name: t.processor.get_test_examples(t.data_dir) for t in tasks}


def _expected(run, name):
  """test_results.tsv: [N, labels] probabilities, or [N] scores for regression."""
  values = np.loadtxt(os.path.join(run, name, "test_results.tsv"), np.float32, ndmin=2)
  return values[:, 0] if name == "sts-b" else values


def _call(model, rows, examples):
  """serving_default on the test examples `rows`: [(task name, index)]."""
  outputs = model.signatures["serving_default"](
      text_a=tf.constant([examples[n][i].text_a for n, i in rows]),
      text_b=tf.constant([examples[n][i].text_b or "" for n, i in rows]),
      task=tf.constant([n for n, _ in rows]))
  return {k: v.numpy() for k, v in outputs.items()}


def _check_rows(outputs, rows, expected):
  """Row r of `outputs` against `expected[name][index]` for (name, index) in `rows`."""
  for r, (name, index) in enumerate(rows):
    want = expected[name][index]
    if name == "sts-b":
      got = outputs["score"][r]
      assert not outputs["probabilities"][r].any() and outputs["predicted_label"][r] == b""
    else:
      got = outputs["probabilities"][r, :len(want)]
      assert not outputs["probabilities"][r, len(want):].any() and outputs["score"][r] == 0
      labels = [l.decode() for l in outputs["labels"][r]]
      assert outputs["predicted_label"][r].decode() == labels[int(np.argmax(want))]
    np.testing.assert_allclose(got, want, atol=1e-5, err_msg=f"{name} row {index}")
    assert outputs["task_index"][r] == NAMES.index(name)


@pytest.mark.parametrize("kind", list(RUNS))
def test_every_task_matches_run_multitask_predict(kind, runs, served):
  model, tasks = served[kind]
  assert [t.name for t in tasks] == list(NAMES)  # The run's order.
  expected = {name: _expected(runs[kind], name) for name in NAMES}
  examples = _test_examples()
  for name in NAMES:
    assert len(examples[name]) == len(expected[name]) >= 4
    rows = [(name, i) for i in range(len(examples[name]))]
    _check_rows(_call(model, rows, examples), rows, expected)
  # Not a toy: the texts move the outputs.
  assert np.ptp(expected["mrpc"][:, 0]) > 1e-4 and np.ptp(expected["sts-b"]) > 1e-4

  # Every task in one batch, shuffled: each example gets its own task's result.
  rows = [(name, i) for name in NAMES for i in range(len(expected[name]))]
  rows = [rows[i] for i in np.random.default_rng(0).permutation(len(rows))]
  outputs = _call(model, rows, examples)
  _check_rows(outputs, rows, expected)
  assert outputs["probabilities"].shape == (len(rows), 3)


def _trained_model(run):
  """run_multitask's model rebuilt without serving/: base checkpoint, then adapter_model/."""
  with open(os.path.join(run, "run_config.json")) as f:
    saved = json.load(f)
  hyper = saved["hyperformer_config"]
  model = multitask_model.MultiTaskClassifier(
      modeling.BertConfig.from_dict(saved["bert_config"]),
      [multitask_model.TaskHead.from_dict(t) for t in saved["tasks"]], saved["multitask_adapters"],
      AdapterConfig.from_dict(saved["adapter_config"]),
      HyperFormerConfig.from_dict(hyper) if hyper else None)
  model.ensure_built()
  checkpoint_io.load_checkpoint(model, saved["init_checkpoint"])
  adapter_weights.load_adapter_weights(
      model, os.path.join(run, model_setup.ADAPTER_MODEL_DIR, adapter_weights.WEIGHTS_FILE))
  return model


def test_saved_adapters_are_the_generated_ones(base, runs, served):
  """The SavedModel holds each task's generated adapters, its own LayerNorms and head."""
  model = _trained_model(runs["hyperformer"])
  saved = served["hyperformer"][0].model
  # The SavedModel's stacked variables, in the structure of the encoder's call.
  stacked = stacked_tasks.StackedTasksBert(*_base_and_tasks(runs["hyperformer"])).task_weights(
      saved.stacked_weights)
  trained = model.bert.tf1_variable_map()
  for index in range(len(NAMES)):
    generated = model.generate_adapters(index)
    assert len(generated) == 2 * 2 * 6  # Layers x positions x (4 + LayerNorm's 2).
    for key, value in generated.items():
      got = _stacked_adapter_array(stacked, key).numpy()[index]
      np.testing.assert_array_equal(got, value.reshape(got.shape), err_msg=key)
    # The encoder LayerNorms trained (--train_mode=layer_norm), not the base's.
    for i in range(2):
      got = stacked.layers[i].output_layer_norm[0].numpy()[index]
      want = trained[f"bert/encoder/layer_{i}/output/LayerNorm/gamma"].numpy()
      np.testing.assert_array_equal(got, want)
    n = model.tasks[index].num_outputs
    np.testing.assert_array_equal(saved.output_weights.numpy()[index, :n],
                                  model.head.output_weights.numpy()[index, :n])
    assert not saved.output_weights.numpy()[index, n:].any()
  # Task-conditional: the tasks' adapters differ; the LayerNorms trained away from the base's.
  weights1 = stacked.layers[0].feed_forward_adapters[0].weights1.numpy()
  assert np.abs(weights1[0] - weights1[1]).max() > 1e-3
  name = "bert/encoder/layer_1/output/LayerNorm/gamma"
  base_gamma = tf.train.load_variable(base["init_checkpoint"], name)
  assert np.abs(trained[name].numpy() - base_gamma).max() > 1e-3


def _base_and_tasks(run):
  base, tasks = multitask_run.read_run(run)
  return base.bert_config, base.arrays, tasks


def _stacked_adapter_array(stacked, key):
  """bert/encoder/layer_N/SCOPE/adapters/VARIABLE -> that [num_tasks, ...] array of
  `stacked` (modeling.EncoderTaskWeights; one adapter kind at each place)."""
  _, _, layer, rest = key.split("/", 3)
  scope, variable = rest.split("/adapters/")
  place = {"attention/output": "attention_adapters", "output": "feed_forward_adapters"}[scope]
  adapter = getattr(stacked.layers[int(layer[len("layer_"):])], place)[0]
  if variable.startswith("LayerNorm/"):
    return adapter.layer_norm[("LayerNorm/gamma", "LayerNorm/beta").index(variable)]
  return getattr(adapter, variable)


def test_houlsby_and_hyperformer_tasks_mix_per_example(runs):
  """Tasks of both runs in one model (same base): each example is computed as in its own."""
  bases, tasks = {}, {}
  for kind, run in runs.items():
    bases[kind], tasks[kind] = multitask_run.read_run(run)
  assert all("bert/encoder/layer_0/output/adapters/LayerNorm/gamma" in t.arrays
             for t in tasks["hyperformer"])
  assert not any("LayerNorm/gamma" in n and "/adapters/" in n
                 for t in tasks["shared"] for n in t.arrays)
  # Both the untouched base, though HyperFormer++ trained the LayerNorms (tasks hold those).
  for name, value in bases["shared"].arrays.items():
    np.testing.assert_array_equal(bases["hyperformer"].arrays[name], value)
  config = bases["shared"].bert_config
  both = [t for kind in RUNS for t in tasks[kind]]
  mixed = stacked_tasks.StackedTasksBert(config, bases["shared"].arrays, both)
  alone = {k: stacked_tasks.StackedTasksBert(config, bases[k].arrays, tasks[k]) for k in RUNS}
  rng = np.random.default_rng(0)
  batch = 12
  inputs = {"input_ids": rng.integers(0, 99, (batch, 16), np.int32),
            "input_mask": (np.arange(16)[None, :] < rng.integers(3, 17, (batch, 1))
                           ).astype(np.int32),
            "segment_ids": np.zeros((batch, 16), np.int32)}
  task_index = rng.permutation(np.arange(batch) % len(both)).astype(np.int32)
  got = mixed(inputs, task_index).numpy()
  for k, kind in enumerate(RUNS):
    mine = (task_index // len(NAMES)) == k
    want = alone[kind](inputs, task_index % len(NAMES)).numpy()
    # Houlsby rows take the same ops (a select), HyperFormer++ rows too.
    np.testing.assert_allclose(got[mine], want[mine], atol=1e-6)
  # The adapters' own LayerNorms matter: without them HyperFormer++ tasks compute otherwise.
  stripped = [dataclasses.replace(t, arrays={n: v for n, v in t.arrays.items()
                                             if "/adapters/LayerNorm/" not in n},
                                  adapter_config=dataclasses.replace(t.adapter_config,
                                                                     layer_norm=False))
              for t in tasks["hyperformer"]]
  without = stacked_tasks.StackedTasksBert(config, bases["hyperformer"].arrays, stripped)
  index = np.arange(batch, dtype=np.int32) % len(NAMES)
  assert np.abs(without(inputs, index).numpy() -
                alone["hyperformer"](inputs, index).numpy()).max() > 1e-3


def test_tasks_flag_and_user_errors(base, runs, served, tmp_path, capsys):
  run = runs["shared"]
  # --tasks: those tasks, in the run's order, with the results of the full export.
  out = str(tmp_path / "subset")
  fv = flags.FlagValues()
  export_savedmodel.define_flags(fv)
  fv(["export", f"--multitask_run={run}", f"--export_dir={out}", "--tasks=tsv_example,mrpc"])
  export_savedmodel.main(["export"], fv)
  with open(os.path.join(out, serving_export.TASKS_FILE)) as f:
    described = json.load(f)
  assert [(t["name"], t["labels"], t["max_seq_length"], t["adapter_size"])
          for t in described["tasks"]] == [
              ("mrpc", ["0", "1"], 24, 4), ("tsv_example", ["negative", "neutral", "positive"],
                                            24, 4)]
  examples = _test_examples()
  rows = [("tsv_example", 1), ("mrpc", 0), ("tsv_example", 0)]
  subset = _call(tf.saved_model.load(out), rows, examples)
  full = _call(served["shared"][0], rows, examples)
  np.testing.assert_allclose(subset["probabilities"], full["probabilities"], atol=1e-6)
  assert subset["task_index"].tolist() == [1, 0, 1]

  export_dir = str(tmp_path / "out")
  for given in ({}, {"adapter_bank": str(tmp_path), "multitask_run": run}):
    fv = flags.FlagValues()
    export_savedmodel.define_flags(fv)
    fv(["export", f"--export_dir={export_dir}"] + [f"--{k}={v}" for k, v in given.items()])
    with pytest.raises(errors.UserError, match="exactly one"):
      flag_checks.validate(fv)
  message = export_error(capsys, multitask_run=tmp_path / "none", export_dir=export_dir)
  assert message.endswith(f"flag --multitask_run={tmp_path / 'none'}: directory not found")
  os.makedirs(tmp_path / "empty")
  message = export_error(capsys, multitask_run=tmp_path / "empty", export_dir=export_dir)
  assert "empty/run_config.json: not found" in message
  message = export_error(capsys, multitask_run=run, export_dir=export_dir, tasks="mrpc,qqp")
  assert "no task 'qqp'" in message and "it has: mrpc, sts-b, tsv_example" in message
  # Another base than the run's (same shapes, other weights).
  other = tiny_bert.write_google_dir(str(tmp_path / "other"), seed=7)[2]
  message = export_error(capsys, multitask_run=run, export_dir=export_dir,
                          init_checkpoint=other)
  assert "adapter_weights.safetensors: these adapter weights were trained on another base" \
      in message
  # A run_classifier.py output_dir; a run without its trained weights.
  lone = tmp_path / "lone"
  lone.mkdir()
  (lone / "run_config.json").write_text(json.dumps({"bert_config": {}}))
  assert "not a run_multitask.py run_config.json" in export_error(
      capsys, multitask_run=lone, export_dir=export_dir)
  with open(os.path.join(run, "run_config.json")) as f:
    (lone / "run_config.json").write_text(f.read())
  assert "adapter_model/adapter_weights.safetensors: not found" in export_error(
      capsys, multitask_run=lone, export_dir=export_dir)
  assert not os.path.exists(export_dir)


def _as_written_before_rename(run, copy):
  """A copy of `run` as run_multitask.py wrote it before --adapter_type became
  --multitask_adapters: that key in run_config.json and in adapter_model's metadata."""
  shutil.copytree(run, copy)
  path = os.path.join(copy, "run_config.json")
  with open(path) as f:
    saved = json.load(f)
  saved["adapter_type"] = saved.pop("multitask_adapters")
  with open(path, "w") as f:
    json.dump(saved, f)
  path = os.path.join(copy, model_setup.ADAPTER_MODEL_DIR, adapter_weights.WEIGHTS_FILE)
  with open(path, "rb") as f:
    blob = f.read()
  length = int.from_bytes(blob[:8], "little")
  entries = json.loads(blob[8:8 + length])
  header = json.loads(entries["__metadata__"]["header"])
  header["metadata"]["adapter_type"] = header["metadata"].pop("multitask_adapters")
  entries["__metadata__"]["header"] = json.dumps(header)
  text = json.dumps(entries).encode()
  text += b" " * (-len(text) % 8)  # safetensors' alignment of the data after it.
  with open(path, "wb") as f:
    f.write(len(text).to_bytes(8, "little") + text + blob[8 + length:])
  return copy


def test_runs_written_before_the_flag_rename_still_serve_and_load(runs, tmp_path):
  """A run that recorded adapter_type (now multitask_adapters) is read as before."""
  run = runs["shared"]
  old = _as_written_before_rename(run, str(tmp_path / "old"))
  with open(os.path.join(old, "run_config.json")) as f:
    assert "adapter_type" in json.load(f)
  # Served: the same tasks and weights as the run as written now.
  _, tasks = multitask_run.read_run(run)
  _, old_tasks = multitask_run.read_run(old)
  assert [t.name for t in old_tasks] == [t.name for t in tasks]
  for task, old_task in zip(tasks, old_tasks):
    assert old_task.arrays.keys() == task.arrays.keys()
    for name, value in task.arrays.items():
      np.testing.assert_array_equal(old_task.arrays[name], value)
  # --adapter_checkpoint: the flags left out take the recorded value (not the default).
  fv = flags.FlagValues()
  run_multitask.define_flags(fv)
  fv(["run_multitask.py", "--do_eval", f"--output_dir={tmp_path / 'eval'}",
      f"--adapter_checkpoint={os.path.join(old, model_setup.ADAPTER_MODEL_DIR)}"] +
     [f"--{k}={v}" for k, v in TASK_FLAGS.items()])
  settings = multitask_flags.settings(fv)
  assert settings["multitask_adapters"] == "shared" and settings["adapter_size"] == 4
  # Resuming into it: its settings as written now pass; other adapters are refused.
  with open(os.path.join(run, "run_config.json")) as f:
    current = json.load(f)
  run_config.check(old, current, also=multitask_task.MODEL_KEYS)
  with pytest.raises(errors.UserError, match="multitask_adapters was 'shared' there"):
    run_config.check(old, dict(current, multitask_adapters="hyperformer"),
                     also=multitask_task.MODEL_KEYS)
