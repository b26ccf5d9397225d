"""The adapter bank: many tasks' adapter-only files over one frozen base.

Tasks are trained for one step on the tiny BERT and the GLUE samples of
test_run_classifier.py; the BERT-base accounting uses a file of zeros with
BERT-base shapes (no model is built for it).
"""

import json
import logging as py_logging
import os
import shutil

import numpy as np
import pytest
import safetensors.numpy

from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert import label_lists
from adapter_bert.bank import adapter_bank
from adapter_bert.bank import listing as bank_listing
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import checkpoint_io
from adapter_bert import errors
from adapter_bert.model import modeling
from adapter_bert.runtime import trainable
from adapter_bert.bank import bank_tasks
import file_trees
import manage_bank
import tiny_bert
# The in-process runner of run_classifier.py, its flags for the tiny base and the
# tiny base's parameter counts.
from run_harness import (ADAPTER, GLUE, TINY_ADAPTERS, TINY_BASE, TINY_LAYER_NORMS, Records,
                         classifier_flags, read_test_results, run_main)

# BERT-base (uncased_L-12_H-768_A-12), adapter size 64, two labels: the
# README's numbers.
BERT_BASE = {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
             "hidden_dropout_prob": 0.1, "hidden_size": 768, "initializer_range": 0.02,
             "intermediate_size": 3072, "max_position_embeddings": 512,
             "num_attention_heads": 12, "num_hidden_layers": 12, "type_vocab_size": 2,
             "vocab_size": 30522}
BERT_BASE_P = 109_482_240
BERT_BASE_TRAINED = 2_419_202  # 2,379,264 adapters + 38,400 LayerNorms + 1,538 head


def _train(base, bank, task, out, **extra):
  return run_main(**classifier_flags(base, task_name=task, data_dir=os.path.join(GLUE, task),
                                     output_dir=out, do_train=True, num_train_epochs=0.5,
                                     adapter_bank=bank, **extra))


def _predict(base, bank, task, out, **extra):
  # No --adapter_size (the tasks have ADAPTER = 8, the flag's default is 64):
  # the bank's adapter files give it.
  run_main(**dict(classifier_flags(base, task_name=task, data_dir=os.path.join(GLUE, task),
                                   output_dir=out, do_predict=True, adapter_bank=bank,
                                   adapter_size=None), **extra))
  return read_test_results(os.path.join(out, "test_results.tsv"))


@pytest.fixture(scope="module")
def bank(base, tmp_path_factory):
  """MRPC trained into a new bank, its predictions through the bank; then STS-B added."""
  root = tmp_path_factory.mktemp("bank")
  bank_dir = str(root / "bank")
  logs = _train(base, bank_dir, "MRPC", str(root / "mrpc"), do_predict=True)
  assert any(l.startswith("Created adapter bank") for l in logs)
  mrpc_files = file_trees.files_under(os.path.join(bank_dir, "tasks", "mrpc"))
  before = _predict(base, bank_dir, "MRPC", str(root / "mrpc_predict_1"))
  _train(base, bank_dir, "STS-B", str(root / "stsb"))
  return dict(dir=bank_dir, root=root, mrpc_files=mrpc_files, before=before)


def test_adding_a_task_leaves_the_others_alone(base, bank):
  d = bank["dir"]
  assert adapter_bank.task_names(d) == ["mrpc", "sts-b"]
  assert file_trees.files_under(os.path.join(d, "tasks", "mrpc")) == bank["mrpc_files"]
  # The bank's copy is the run's adapter_model/, byte for byte.
  assert bank["mrpc_files"] == file_trees.files_under(os.path.join(bank["root"], "mrpc", "adapter_model"))
  after = _predict(base, d, "MRPC", str(bank["root"] / "mrpc_predict_2"))
  np.testing.assert_array_equal(after, bank["before"])
  # The same as the training run's own predictions.
  np.testing.assert_allclose(
      after, read_test_results(os.path.join(bank["root"], "mrpc", "test_results.tsv")), atol=1e-6)

  with open(os.path.join(d, "bank.json")) as f:
    saved = json.load(f)
  assert saved["format"] == 1
  assert saved["base"]["bert_config"] == tiny_bert.TINY_CONFIG
  # Relative to the bank (both under pytest's temporary root): it moves with the bank.
  for key in ("init_checkpoint", "vocab_file"):
    assert os.path.normpath(os.path.join(d, saved["base"][key])) == os.path.abspath(base[key])
  assert saved["base"]["do_lower_case"] is True
  assert saved["base"]["bert_hub_module_handle"] is None
  for task in ("mrpc", "sts-b"):
    header = adapter_weights.read_adapter_header(os.path.join(d, "tasks", task))
    assert header["base_fingerprint"] == saved["base"]["fingerprint"]
  stsb = adapter_weights.read_adapter_header(os.path.join(d, "tasks", "sts-b"))["metadata"]
  assert stsb == {"task": "sts-b", "labels": [], "is_regression": True, "max_seq_length": 32,
                  "do_lower_case": True, "train_mode": "adapters", "global_step": 1}
  mrpc = adapter_weights.read_adapter_header(os.path.join(d, "tasks", "mrpc"))["metadata"]
  assert mrpc["labels"] == ["0", "1"] and mrpc["is_regression"] is False


def test_predicting_takes_the_recorded_adapter_settings_and_refuses_others(base, bank,
                                                                          tmp_path):
  out = str(tmp_path / "predict")
  np.testing.assert_array_equal(_predict(base, bank["dir"], "MRPC", out, adapter_size=ADAPTER),
                                bank["before"])
  task = adapter_bank.task_checkpoint(bank["dir"], "mrpc")
  for flag, value, recorded in (("adapter_size", 64, 8), ("adapter_placement", "attention",
                                                          "both")):
    with pytest.raises(errors.UserError) as e:
      _predict(base, bank["dir"], "MRPC", str(tmp_path / flag), **{flag: value})
    assert str(e.value) == (f"--{flag}={value}: the adapters at {task} "
                            f"were trained with {flag} {recorded}; leave --{flag} out to take "
                            "it from them")
    assert not os.path.exists(tmp_path / flag)


def test_accounting_is_the_parameter_arithmetic(bank, tmp_path, zero_initializers):  # pylint: disable=unused-argument
  assert TINY_BASE == 19_978
  assert bank_listing.base_parameter_count(tiny_bert.TINY_CONFIG) == TINY_BASE
  shapes = tiny_bert.google_variable_shapes(tiny_bert.TINY_CONFIG)  # no adapters, no head
  assert sum(int(np.prod(s)) for s in shapes.values()) == TINY_BASE
  assert bank_listing.base_parameter_count(BERT_BASE) == BERT_BASE_P

  acc = bank_listing.accounting(bank["dir"])
  mrpc, stsb = acc.tasks
  assert mrpc.parameters("adapter") == TINY_ADAPTERS
  assert mrpc.parameters("layer_norm") == TINY_LAYER_NORMS
  assert mrpc.parameters("head") == 2 * 32 + 2 and stsb.parameters("head") == 32 + 1
  trained = 2 * (TINY_ADAPTERS + TINY_LAYER_NORMS) + (2 * 32 + 2) + (32 + 1)
  assert acc.base_parameters == TINY_BASE and acc.trained_parameters == trained
  assert acc.multiple_of_base == (TINY_BASE + trained) / TINY_BASE
  files = file_trees.files_under(os.path.join(bank["dir"], "tasks"))
  assert acc.num_bytes == sum(len(b) for b in files.values())

  # BERT-base shapes: two tasks of the README's MRPC model (the model add_task builds
  # to check the file's shapes draws zeros: zero_initializers).
  big = str(tmp_path / "big")
  adapter_bank.create_bank(big, adapter_bank.BankBase("f" * 64, BERT_BASE, None, None,
                                                      "vocab.txt", True))
  source = _bert_base_file(str(tmp_path / "run" / "adapter_model"))
  adapter_bank.add_task(big, "a", source)
  # The second task a copy of the first's directory (add_task's check builds a
  # BERT-base model; once is enough): the accounting reads the same files.
  shutil.copytree(os.path.join(big, "tasks", "a"), os.path.join(big, "tasks", "b"))
  acc = bank_listing.accounting(big)
  assert [t.parameters() for t in acc.tasks] == [BERT_BASE_TRAINED] * 2
  assert acc.tasks[0].parameters("adapter") == 2 * 12 * (2 * 64 * 768 + 64 + 768) == 2_379_264
  assert acc.total_parameters == BERT_BASE_P + 2 * BERT_BASE_TRAINED
  lines = bank_listing.accounting_lines(acc)
  assert lines[0] == f"Base parameters P = {BERT_BASE_P} (encoder with pooler)"
  assert lines[1] == (f"Trained parameters of 2 tasks = {2 * BERT_BASE_TRAINED} (4.42% of P), "
                      f"{acc.num_bytes} bytes")
  assert lines[2] == (f"Total parameters = {BERT_BASE_P + 2 * BERT_BASE_TRAINED} = 1.044x P "
                      f"(full fine-tuning: 2x P)")


def _bert_base_file(out):
  """An adapter file of zeros with BERT-base shapes (adapter size 64, two labels)."""
  shapes = tiny_bert.google_variable_shapes(BERT_BASE, adapter_size=64)
  shapes = {n: s for n, s in shapes.items()
            if modeling.variable_role(n) in ("adapter", "layer_norm")}
  shapes.update({"output_weights": (2, 768), "output_bias": (2,)})
  header = {"adapter_config": AdapterConfig(size=64).to_dict(), "bert_config": BERT_BASE,
            "base_fingerprint": "f" * 64, "variables": sorted(shapes),
            "metadata": {"task": "mrpc", "labels": ["0", "1"], "is_regression": False,
                         "max_seq_length": 128, "do_lower_case": True,
                         "train_mode": "adapters", "global_step": 573}}
  os.makedirs(out)
  blob = safetensors.numpy.save({n: np.zeros(s, np.float32) for n, s in shapes.items()},
                                metadata={"header": json.dumps(header)})
  with open(os.path.join(out, adapter_weights.WEIGHTS_FILE), "wb") as f:
    f.write(blob)
  return out


def _adapter_file(base, out, checkpoint, mode="adapters"):
  """Adapter-only weights of a tiny classifier on `checkpoint`, saved as a run would."""
  config = modeling.BertConfig.from_dict(tiny_bert.TINY_CONFIG)
  size = ADAPTER if mode == "adapters" else 0
  model = modeling.BertClassifier(config, 2, AdapterConfig(size=size))
  model.ensure_built()
  checkpoint_io.load_checkpoint(model, checkpoint)
  trainable.set_trainable(model, trainable.TrainMode.parse(mode))
  adapter_weights.save_adapter_weights(model, out, metadata=dict(
      task="mrpc", labels=["0", "1"], is_regression=False, max_seq_length=32,
      do_lower_case=True, train_mode=mode, global_step=0))
  return out


def _run_manage(*argv):
  """manage_bank.py's command line in-process; returns its exit status."""
  try:
    errors.exit_on_user_error(manage_bank.main)(list(argv))
  except SystemExit as e:
    return e.code
  return 0


def test_a_file_of_another_base_is_refused(base, bank, tmp_path, capsys):
  d = str(tmp_path / "bank")
  shutil.copytree(bank["dir"], d)
  before = file_trees.files_under(d)
  fingerprint = adapter_bank.open_bank(d).fingerprint
  _, _, other_ckpt, _ = tiny_bert.write_google_dir(str(tmp_path / "other_base"), seed=5)
  other = _adapter_file(base, str(tmp_path / "other" / "adapter_model"), other_ckpt)
  other_fingerprint = adapter_weights.read_adapter_header(other)["base_fingerprint"]

  assert _run_manage("--bank", d, "add", "other", other) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and err.startswith("ERROR: ")
  assert os.path.join(other, adapter_weights.WEIGHTS_FILE) in err
  assert f"base fingerprint {other_fingerprint}, the bank's {fingerprint}" in err
  assert file_trees.files_under(d) == before

  # Same base, but LayerNorms frozen (--train_mode=head): another frozen set.
  head = _adapter_file(base, str(tmp_path / "head" / "adapter_model"),
                       base["init_checkpoint"], mode="head")
  with pytest.raises(errors.UserError, match=r"trained with --train_mode=head; a bank holds"):
    adapter_bank.add_task(d, "head", head)
  # LayerNorms and head only (no adapters): the same frozen set, accepted.
  layer_norm = _adapter_file(base, str(tmp_path / "ln" / "adapter_model"),
                             base["init_checkpoint"], mode="layer_norm")
  adapter_bank.add_task(d, "ln", layer_norm)
  assert bank_listing.read_task_info(d, "ln").adapter_size == 0
  with pytest.raises(errors.UserError, match="task name '.x'"):
    adapter_bank.add_task(d, ".x", layer_norm)
  assert adapter_bank.task_names(d) == ["ln", "mrpc", "sts-b"]


def test_run_classifier_checks_the_bank_before_training(base, bank, tmp_path):
  _, _, other_ckpt, _ = tiny_bert.write_google_dir(str(tmp_path / "other_base"), seed=5)
  out = str(tmp_path / "out")
  with pytest.raises(errors.UserError, match="is not the base of adapter bank .*base "
                     "fingerprint [0-9a-f]{64}, the bank's [0-9a-f]{64}"):
    _train(base, bank["dir"], "SST-2", out, init_checkpoint=other_ckpt)
  assert not os.path.exists(out)
  with pytest.raises(errors.UserError, match="a bank holds"):
    _train(base, bank["dir"], "SST-2", out, train_mode="top_layers:1", adapter_size=None)
  with pytest.raises(errors.UserError, match="--bank_task"):
    run_main(**classifier_flags(base, task_name="tsv", data_dir=GLUE, output_dir=out, do_train=True,
                                adapter_bank=bank["dir"]))
  with pytest.raises(errors.UserError, match=r"no task 'sst-2' in adapter bank .* \(it has: "
                     r"mrpc, sts-b\)"):
    _predict(base, bank["dir"], "SST-2", out)


def test_manage_list_and_remove(bank, tmp_path, capsys):
  d = str(tmp_path / "bank")
  shutil.copytree(bank["dir"], d)
  assert _run_manage("--bank", d, "list") == 0
  lines = capsys.readouterr().out.splitlines()
  assert lines[0].split() == ["task", "labels", "max_seq_length", "adapter_size",
                              "trained_params", "bytes", "global_step"]
  sizes = {t: sum(len(b) for b in file_trees.files_under(os.path.join(d, "tasks", t)).values())
           for t in ("mrpc", "sts-b")}
  mrpc = TINY_ADAPTERS + TINY_LAYER_NORMS + 66
  stsb = TINY_ADAPTERS + TINY_LAYER_NORMS + 33
  assert lines[1].split() == ["mrpc", "0,1", "32", "8", str(mrpc), str(sizes["mrpc"]), "1"]
  assert lines[2].split() == ["sts-b", "regression", "32", "8", str(stsb),
                              str(sizes["sts-b"]), "1"]
  assert lines[3] == ""
  assert lines[4].startswith(f"Base parameters P = {TINY_BASE} (encoder with pooler), "
                             "fingerprint ")
  assert lines[5].startswith(f"Trained parameters of 2 tasks = {mrpc + stsb} (")
  assert lines[6] == (f"Total parameters = {TINY_BASE + mrpc + stsb} = "
                      f"{(TINY_BASE + mrpc + stsb) / TINY_BASE:.3f}x P (full fine-tuning: 2x P)")

  # Adding a task again replaces it, and says so.
  adapter_bank.add_task(d, "copy", os.path.join(d, "tasks", "sts-b"))
  handler = Records()
  logger = py_logging.getLogger("absl")
  logger.addHandler(handler)
  try:
    adapter_bank.add_task(d, "copy", os.path.join(d, "tasks", "mrpc"))
  finally:
    logger.removeHandler(handler)
  assert f"Replaced task copy in adapter bank {d}: global step 1, was 1" in handler.messages
  assert file_trees.files_under(os.path.join(d, "tasks", "copy")) == file_trees.files_under(os.path.join(d, "tasks", "mrpc"))
  assert _run_manage("--bank", d, "remove", "sts-b") == 0
  assert adapter_bank.task_names(d) == ["copy", "mrpc"]
  assert file_trees.files_under(os.path.join(d, "tasks", "mrpc")) == bank["mrpc_files"]
  assert _run_manage("--bank", d, "remove", "sts-b") == 2
  assert capsys.readouterr().err == (f"ERROR: no task 'sts-b' in adapter bank {d} "
                                     "(it has: copy, mrpc)\n")
  assert _run_manage("--bank", str(tmp_path), "list") == 2
  assert "not an adapter bank: no bank.json" in capsys.readouterr().err


def test_adding_a_task_again_keeps_the_users_files_in_the_bank(bank, tmp_path):
  d = str(tmp_path / "bank")
  shutil.copytree(bank["dir"], d)
  notes = {os.path.join(d, "README.md"): b"the user's",
           os.path.join(d, "tasks", "mrpc", "NOTES.md"): b"the user's, in a task"}
  for path, content in notes.items():
    with open(path, "wb") as f:
      f.write(content)
  adapter_model = os.path.join(bank["root"], "mrpc", "adapter_model")
  assert _run_manage("--adapter_bank", d, "add", "mrpc", adapter_model) == 0
  for path, content in notes.items():
    with open(path, "rb") as f:
      assert f.read() == content
  task = file_trees.files_under(os.path.join(d, "tasks", "mrpc"))
  assert task.pop("NOTES.md") and task == file_trees.files_under(adapter_model)
  assert adapter_bank.task_names(d) == ["mrpc", "sts-b"]


def _with_metadata(source, out, **changes):
  """A copy of the adapter file `source` whose header metadata has `changes`."""
  _, header, arrays = adapter_weights.read_adapter_file(source)
  header["metadata"].update(changes)
  os.makedirs(out)
  with open(os.path.join(out, adapter_weights.WEIGHTS_FILE), "wb") as f:
    f.write(safetensors.numpy.save(arrays, metadata={"header": json.dumps(header)}))
  return out


@pytest.mark.parametrize("changes, message", [
    (dict(labels=["0", "1", "2"]), "its metadata gives 3 labels, the classifier has 2 outputs"),
    (dict(is_regression=True), r"says is_regression=True with labels \['0', '1'\]"),
    (dict(labels=[0, 1]), r"its metadata: labels must be strings, got \[0, 1\]"),
    (dict(labels=["0", "0"]), r"its metadata: label '0' is given twice in \['0', '0'\]"),
    (dict(max_seq_length=65), r"max_seq_length is 65, not an integer in \[3, 64\]"),
    (dict(do_lower_case=False), "trained with do_lower_case=False, adapter bank .* has "
                                "do_lower_case=True"),
])
def test_adding_and_serving_refuse_a_task_with_one_check(bank, tmp_path, changes, message):
  """What a bank task's metadata must say: the same error line from manage_bank.py add and
  from serving (adapter_bank.check_task, the one owner of the check)."""
  d = str(tmp_path / "bank")
  shutil.copytree(bank["dir"], d)
  bad = _with_metadata(os.path.join(d, "tasks", "mrpc"), str(tmp_path / "bad"), **changes)
  with pytest.raises(errors.UserError, match=message) as added:
    adapter_bank.add_task(d, "bad", bad)
  assert adapter_bank.task_names(d) == ["mrpc", "sts-b"]
  shutil.copytree(bad, os.path.join(d, "tasks", "bad"))  # By hand, as a user might.
  with pytest.raises(errors.UserError) as served:
    bank_tasks.read_tasks(d, adapter_bank.open_bank(d))
  path = os.path.join(d, "tasks", "bad", adapter_weights.WEIGHTS_FILE)
  assert str(served.value) == str(added.value).replace(
      os.path.join(bad, adapter_weights.WEIGHTS_FILE), path)


def test_a_bank_task_cut_short_is_one_line_naming_its_file(base, bank, tmp_path):
  """A bank task's weights file short of its last byte (its header whole, as a
  killed copy leaves it): the run is refused naming that file, and writes nothing."""
  d = str(tmp_path / "bank")
  shutil.copytree(bank["dir"], d)
  weights = os.path.join(d, "tasks", "mrpc", adapter_weights.WEIGHTS_FILE)
  with open(weights, "r+b") as f:
    f.truncate(os.path.getsize(weights) - 1)
  out = tmp_path / "out"
  with pytest.raises(errors.UserError) as refused:
    _predict(base, d, "MRPC", str(out))
  assert str(refused.value).startswith(f"{weights}: not an adapter weights file (empty, "
                                       f"truncated or corrupt?): ")
  assert "\n" not in str(refused.value)
  assert not out.exists()


def test_a_bank_task_of_other_labels_is_refused_by_the_one_owner(base, bank, tmp_path):
  """run_classifier.py --adapter_bank --bank_task: a task recorded with this run's
  labels in another order would swap its predictions. Refused in one line by the
  labels' owner (label_lists.check_recorded_labels through model_setup.load_base),
  as --adapter_checkpoint is (tests/test_model_setup.py); a label twice is refused
  by the bank's own check of a task (test_adding_and_serving_refuse_a_task_with_one_check)."""
  d = str(tmp_path / "bank")
  shutil.copytree(bank["dir"], d)
  task = os.path.join(d, "tasks", "mrpc")
  swapped = _with_metadata(task, str(tmp_path / "swapped"), labels=["1", "0"])
  shutil.copy(os.path.join(swapped, adapter_weights.WEIGHTS_FILE), task)
  out = str(tmp_path / "predict")
  with pytest.raises(errors.UserError) as e:
    _predict(base, d, "MRPC", out)
  assert str(e.value) == (
      f"--adapter_checkpoint={adapter_bank.task_checkpoint(d, 'mrpc')}: this run gives the "
      f"labels ['0', '1'], but its metadata has ['1', '0'] (label ids are positions): give "
      f"this run the labels the adapters were trained with, in that order (--labels of a "
      f"tsv task), or adapters trained with this run's")
