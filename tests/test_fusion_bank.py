"""AdapterFusion over an adapter bank (fusion/): run_classifier.py --fusion_tasks.

Three tasks are trained into a bank for one step on the tiny BERT (GLUE samples
of test_run_classifier.py); a fourth, SST-2, learns a fusion of their frozen
adapters and is saved as a bank task of its own.
"""

import json
import os
import re
import shutil

import numpy as np
import pytest
import safetensors.numpy
from absl import flags

from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.bank import adapter_bank
from adapter_bert.bank import listing
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import checkpoint_io
from adapter_bert.checkpoints import fusion_weights
from adapter_bert import errors
from adapter_bert.fusion import fused_tasks
from adapter_bert.fusion import model as fusion_model
from adapter_bert.model import modeling
from adapter_bert.runtime import trainable
from adapter_bert.serving import export
import tiny_bert
import file_trees
from run_harness import (GLUE, TINY_ADAPTERS, TINY_BASE, TINY_LAYER_NORMS, classifier_flags,
                         read_test_results, run_main)

H, L = 32, 2  # tiny_bert.TINY_CONFIG
FUSED = ("mrpc", "sts-b", "rte")
# Per place (after both sub-layers of each layer): query and key [H, H] with
# biases, value [H, H]: 3,136; four places.
FUSION_PARAMETERS = 2 * L * (3 * H * H + 2 * H)
SST2_HEAD = 2 * H + 2


def _fusion_flags(base, bank_dir, out, **extra):
  # No --adapter_size: the fused tasks' adapters give it (RUN_FLAGS' 8).
  return dict(classifier_flags(base, task_name="SST-2", data_dir=os.path.join(GLUE, "SST-2"),
                               output_dir=out, adapter_bank=bank_dir, adapter_size=None), **extra)


def _train_fusion(base, bank_dir, out, **extra):
  return run_main(**_fusion_flags(base, bank_dir, out, do_train=True, num_train_epochs=1,
                                  save_checkpoints_steps=1, fusion_tasks=",".join(FUSED),
                                  **extra))


@pytest.fixture(scope="module")
def fusion(base, tmp_path_factory):
  root = tmp_path_factory.mktemp("fusion")
  bank_dir = str(root / "bank")
  for task in ("MRPC", "STS-B", "RTE"):
    # A learning rate that moves the adapters away from the identity: fusing them matters.
    # MRPC's and RTE's test_results.tsv: what the SavedModel must give for those tasks.
    run_main(**classifier_flags(base, task_name=task, data_dir=os.path.join(GLUE, task),
                                output_dir=str(root / task), do_train=True, num_train_epochs=0.5,
                                do_predict=task != "STS-B", adapter_bank=bank_dir,
                                learning_rate=0.02))
  fused_files = {t: file_trees.files_under(os.path.join(bank_dir, "tasks", t)) for t in FUSED}
  out = str(root / "sst2")
  logs = _train_fusion(base, bank_dir, out, do_eval=True, do_predict=True,
                       fusion_attentions=True)
  return dict(root=root, bank=bank_dir, out=out, logs=logs, fused_files=fused_files)


def _arrays(directory):
  with open(os.path.join(directory, adapter_weights.WEIGHTS_FILE), "rb") as f:
    return safetensors.numpy.load(f.read())


def test_fusion_trains_fusion_layers_layer_norms_and_head_and_counts_them(base, fusion):
  logs = fusion["logs"]
  trained = FUSION_PARAMETERS + TINY_LAYER_NORMS + SST2_HEAD
  assert FUSION_PARAMETERS == 12_544 and trained == 12_930
  # The fused adapters are constants of the model, no variables of its own.
  assert f"***** Total Parameters = {TINY_BASE + FUSION_PARAMETERS + SST2_HEAD} *****" in logs
  assert f"***** Adapter Parameters = {FUSION_PARAMETERS} *****" in logs
  assert f"***** Total Trainable Parameters = {trained} *****" in logs
  assert (f"***** Fusion Parameters = {FUSION_PARAMETERS} (4 places x 3 [32, 32] matrices "
          f"and 2 biases) over 3 fused tasks (mrpc, sts-b, rte) *****") in logs
  assert f"***** Fused Adapter Parameters (frozen, from the bank) = {3 * TINY_ADAPTERS} *****" \
      in logs

  bank_dir = fusion["bank"]
  assert adapter_bank.task_names(bank_dir) == ["mrpc", "rte", "sst-2", "sts-b"]
  for task in FUSED:  # Untouched by the fusion's training.
    assert file_trees.files_under(os.path.join(bank_dir, "tasks", task)) == fusion["fused_files"][task]
  entry = os.path.join(bank_dir, "tasks", "sst-2")
  assert file_trees.files_under(entry) == file_trees.files_under(os.path.join(fusion["out"], "adapter_model"))
  header = adapter_weights.read_adapter_header(entry)
  assert header["base_fingerprint"] == adapter_bank.open_bank(bank_dir).fingerprint
  assert header["adapter_config"] == {"activation": "gelu", "init_scale": 0.001, "size": 8}
  metadata = header["metadata"]
  assert metadata["fusion_tasks"] == list(FUSED)
  for task in FUSED:
    adapters = {n: a for n, a in _arrays(os.path.join(bank_dir, "tasks", task)).items()
                if "/adapters/" in n}
    assert metadata["fusion_fingerprints"][task] == fusion_model.fused_fingerprint(
        [fusion_model.FusedTask(task, adapters)])
  arrays = _arrays(entry)
  assert sum(a.size for a in arrays.values()) == trained
  assert {n: a.shape for n, a in arrays.items() if "/fusion/" in n} == \
      fusion_weights.fusion_variable_shapes(modeling.BertConfig.from_dict(tiny_bert.TINY_CONFIG),
                                            AdapterConfig(size=8))
  # Trained: the value matrices moved from the identity, the LayerNorms from the base's.
  value = arrays["bert/encoder/layer_1/output/adapters/fusion/value/kernel"]
  assert 0 < np.abs(value - np.eye(H)).max() < 0.1
  gamma = "bert/encoder/layer_0/attention/output/LayerNorm/gamma"
  assert not np.array_equal(arrays[gamma], base["weights"][gamma])
  # The bank's accounting counts what the task trained.
  assert listing.read_task_info(bank_dir, "sst-2").parameters() == trained


def test_predict_and_eval_from_the_bank_entry_match_the_training_run(base, fusion, tmp_path):
  out = str(tmp_path / "from_bank")
  logs = run_main(**_fusion_flags(base, fusion["bank"], out, bank_task="sst-2",
                                  do_eval=True, do_predict=True))
  assert f"***** Total Trainable Parameters = " \
         f"{FUSION_PARAMETERS + TINY_LAYER_NORMS + SST2_HEAD} *****" in logs
  np.testing.assert_array_equal(read_test_results(os.path.join(out, "test_results.tsv")),
                                read_test_results(os.path.join(fusion["out"], "test_results.tsv")))
  with open(os.path.join(out, "eval_results.txt")) as a, \
       open(os.path.join(fusion["out"], "eval_results.txt")) as b:
    evaluated, trained = a.read().splitlines(), b.read().splitlines()
  # The same numbers, each naming the weights it evaluated: the bank's entry, the
  # training run's last checkpoint (in its directory).
  assert evaluated[1:] == trained[1:]
  assert evaluated[0] == "checkpoint_path = " + adapter_bank.task_checkpoint(fusion["bank"],
                                                                             "sst-2")
  assert re.fullmatch(r"checkpoint_path = model\.ckpt-\d+", trained[0]), trained[0]


def test_fusion_attentions_per_example_and_their_plot(fusion):
  for split, num_examples in (("eval", 6), ("predict", 6)):
    path = os.path.join(fusion["out"], f"{split}_fusion_attentions.tsv")
    with open(path) as f:
      rows = [line.rstrip("\n").split("\t") for line in f]
    assert rows[0] == ["example", "layer", "sublayer", *FUSED]
    assert [r[:3] for r in rows[1:5]] == [["0", "0", "attention"], ["0", "0", "feed_forward"],
                                          ["0", "1", "attention"], ["0", "1", "feed_forward"]]
    assert len(rows) == 1 + num_examples * 2 * L
    weights = np.array([[float(x) for x in r[3:]] for r in rows[1:]])
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=1e-5)
    assert (weights > 0).all()
    with open(os.path.join(fusion["out"], f"{split}_fusion_attentions.png"), "rb") as f:
      assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_fusion_task_refuses_a_fused_task_removed_or_changed(base, fusion, tmp_path):
  removed = str(tmp_path / "removed")
  shutil.copytree(fusion["bank"], removed)
  adapter_bank.remove_task(removed, "sts-b")
  with pytest.raises(errors.UserError, match=r"a fusion of tasks mrpc, sts-b, rte, but adapter "
                     r"bank .*removed no longer has sts-b: retrain it \(run_classifier.py "
                     r"--do_train --fusion_tasks=mrpc,sts-b,rte\)"):
    run_main(**_fusion_flags(base, removed, str(tmp_path / "out1"), bank_task="sst-2",
                             do_predict=True))
  changed = str(tmp_path / "changed")
  shutil.copytree(fusion["bank"], changed)
  # rte replaced by other adapters of the same shapes (mrpc's run).
  adapter_bank.add_task(changed, "rte", os.path.join(fusion["root"], "MRPC", "adapter_model"))
  with pytest.raises(errors.UserError, match=r"but the adapters of rte in adapter bank "
                     r".*changed changed since it was trained \(fingerprint [0-9a-f]{16}\.\.\., "
                     r"recorded [0-9a-f]{16}\.\.\.\): retrain it"):
    run_main(**_fusion_flags(base, changed, str(tmp_path / "out2"), bank_task="sst-2",
                             do_predict=True))
  assert not os.path.exists(tmp_path / "out1") and not os.path.exists(tmp_path / "out2")


def test_fusion_flags_and_tasks_are_checked(base, fusion, tmp_path):
  bank_dir, out = fusion["bank"], str(tmp_path / "out")
  for extra, message in (
      (dict(fusion_tasks="mrpc,nope"), r"--fusion_tasks: no task 'nope' in adapter bank"),
      (dict(fusion_tasks="mrpc,sst-2", bank_task="other"), r"task 'sst-2' is itself a fusion task \(of mrpc, "
                                        r"sts-b, rte\)"),
      (dict(fusion_tasks="mrpc,rte", bank_task="rte"),
       r"--bank_task=rte is one of --fusion_tasks"),
      (dict(fusion_tasks="mrpc,rte", adapter_size=16),
       r"--adapter_size=16: the adapters at adapter bank .*'s tasks mrpc,rte were trained "
       r"with adapter_size 8")):
    with pytest.raises(errors.UserError, match=message):
      run_main(**_fusion_flags(base, bank_dir, out, do_train=True, **extra))
  # A flag alone is checked as absl parses it; flags together in main's first step.
  for extra, refused, message in (
      (dict(fusion_tasks="mrpc,rte", do_predict=True), errors.UserError,
       r"--fusion_tasks trains a fusion task into --adapter_bank: give --do_train"),
      (dict(fusion_tasks="mrpc", do_train=True), flags.IllegalFlagValueError,
       r"at least two distinct bank task names"),
      (dict(fusion_tasks="mrpc,rte", do_train=True, train_mode="layer_norm"), errors.UserError,
       r"--fusion_tasks trains fusion layers, LayerNorms and the head"),
      (dict(fusion_regularization=-1, do_train=True), flags.IllegalFlagValueError,
       r"must be a number >= 0")):
    with pytest.raises(refused, match=message):
      run_main(**_fusion_flags(base, bank_dir, out, **extra))
  # Another design's adapters read another input: refused, not fused as Houlsby's.
  other = str(tmp_path / "other_bank")
  shutil.copytree(bank_dir, other)
  run_main(**classifier_flags(base, task_name="MRPC", data_dir=os.path.join(GLUE, "MRPC"),
                              output_dir=str(tmp_path / "pfeiffer"), do_train=True,
                              num_train_epochs=0.5, adapter_bank=other, bank_task="mrpc-pfeiffer",
                              adapter_design="pfeiffer"))
  with pytest.raises(errors.UserError, match=r"task 'mrpc-pfeiffer' has pfeiffer adapters of "
                     r"scaling 1; AdapterFusion fuses houlsby-design adapters of scaling 1"):
    run_main(**_fusion_flags(base, other, out, do_train=True,
                             fusion_tasks="mrpc,mrpc-pfeiffer"))
  with pytest.raises(errors.UserError, match="--fusion_attentions: this run has no fusion"):
    run_main(**_fusion_flags(base, bank_dir, out, bank_task="mrpc", do_predict=True,
                             task_name="MRPC", data_dir=os.path.join(GLUE, "MRPC"),
                             fusion_attentions=True))
  assert not os.path.exists(out)


def test_an_interrupted_fusion_resumes_to_the_same_weights(base, fusion, tmp_path):
  out, bank_dir = str(tmp_path / "sst2"), str(tmp_path / "bank")
  shutil.copytree(fusion["out"], out)
  shutil.copytree(fusion["bank"], bank_dir)
  # Killed before step 2's checkpoint and the adapter files were written.
  for name in os.listdir(out):
    if name.startswith("model.ckpt-2") or name == "adapter_model":
      shutil.rmtree(os.path.join(out, name)) if name == "adapter_model" else \
          os.remove(os.path.join(out, name))
  logs = _train_fusion(base, bank_dir, out)
  assert "***** Running training from step 1 to 2 *****" in logs
  resumed, uninterrupted = (_arrays(os.path.join(d, "adapter_model"))
                            for d in (out, fusion["out"]))
  assert sorted(resumed) == sorted(uninterrupted)
  for name in resumed:
    np.testing.assert_allclose(resumed[name], uninterrupted[name], atol=1e-6, err_msg=name)


def test_one_saved_model_serves_the_fusion_beside_the_fused_tasks(base, fusion, tmp_path):
  """Every task of the bank, the fusion task included, in one shuffled batch through
  the SavedModel's one forward pass: each row as run_classifier.py --do_predict."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from adapter_bert.classification import processors  # pylint: disable=g-import-not-at-top
  export_dir = str(tmp_path / "export" / "1")
  tasks = export.export(fusion["bank"], export_dir)
  names = [t.name for t in tasks]
  assert names == ["mrpc", "rte", "sst-2", "sts-b"]
  with open(os.path.join(export_dir, export.TASKS_FILE)) as f:
    described = {t["name"]: t for t in json.load(f)["tasks"]}
  assert described["sst-2"]["fusion_tasks"] == list(FUSED)
  assert described["sst-2"]["adapter_size"] == 8 and "fusion_tasks" not in described["mrpc"]

  # run_classifier.py --do_predict of each task: at the end of its training run,
  # with the weights it saved as its bank entry.
  expected = {"sst-2": read_test_results(os.path.join(fusion["out"], "test_results.tsv"))}
  for name, task in (("mrpc", "MRPC"), ("rte", "RTE")):
    expected[name] = read_test_results(os.path.join(fusion["root"], task, "test_results.tsv"))
  glue = {"sst-2": "SST-2", "mrpc": "MRPC", "rte": "RTE"}
  examples = {n: processors.get_processor(t).get_test_examples(os.path.join(GLUE, t))
              for n, t in glue.items()}
  rows = [(n, i) for n in glue for i in range(len(examples[n]))]
  rows = [rows[i] for i in np.random.default_rng(0).permutation(len(rows))]
  served = tf.saved_model.load(export_dir)
  outputs = served.signatures["serving_default"](
      text_a=tf.constant([examples[n][i].text_a for n, i in rows]),
      text_b=tf.constant([examples[n][i].text_b or "" for n, i in rows]),
      task=tf.constant([n for n, _ in rows]))
  probabilities = outputs["probabilities"].numpy()
  for r, (name, i) in enumerate(rows):
    np.testing.assert_allclose(probabilities[r, :2], expected[name][i], atol=1e-5,
                               err_msg=f"{name} {i}")
    assert int(outputs["task_index"][r]) == names.index(name)
  # Not a toy: the fusion task's outputs move with the text, and the fusion moves
  # them by far more than the tolerance (its blocks with no adapters applied).
  assert np.ptp(expected["sst-2"][:, 0]) > 1e-3
  fused = fused_tasks.recorded_fusion(fusion["bank"], os.path.join(fusion["bank"], "tasks",
                                                                   "sst-2"))
  model = fused.make_model(modeling.BertConfig.from_dict(tiny_bert.TINY_CONFIG), 2)
  model.ensure_built()
  checkpoint_io.load_checkpoint(model, base["init_checkpoint"])
  trainable.set_trainable(model, trainable.TrainMode("adapters"))
  adapter_weights.load_adapter_weights(model, os.path.join(fusion["bank"], "tasks", "sst-2"))
  ids = {"input_ids": tf.constant(np.random.default_rng(0).integers(5, 99, (4, 10)), tf.int32),
         "input_mask": tf.ones([4, 10], tf.int32), "segment_ids": tf.zeros([4, 10], tf.int32)}
  with_fusion = tf.nn.softmax(model(ids)).numpy()
  for block in model.bert.transformer_layers:
    block.adapters_enabled = False
  assert np.abs(tf.nn.softmax(model(ids)).numpy() - with_fusion).max() > 1e-3
