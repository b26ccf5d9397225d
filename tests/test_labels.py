"""Labels given twice or inconsistently, on every path that takes labels: each is
refused in one line by the one owner of the check (label_lists.check_labels and
check_labels_agree), whichever command or file gave them."""

import json
import os
import shutil

import numpy as np
import pytest

from adapter_bert import label_lists
from adapter_bert import errors
from adapter_bert.bank import bank_tasks
from adapter_bert.classification import processors
from adapter_bert.multitask import model as multitask_model
from adapter_bert.multitask import tasks as multitask_tasks
from adapter_bert.model.adapter_layers import AdapterConfig
import interop_checks

HUB = os.path.join(interop_checks.FIXTURES, "adapterhub")
PEFT = os.path.join(interop_checks.FIXTURES, "peft")


@pytest.mark.parametrize("labels, message", [
    (["a", "b", "a"], r"^SOURCE: label 'a' is given twice in \['a', 'b', 'a'\]: each label "
                      r"names one class$"),
    (["a", " ", "b"], r"^SOURCE: a label is empty or blank in \['a', ' ', 'b'\]$"),
    (["0", 1], r"^SOURCE: labels must be strings, got \['0', 1\]$"),
])
def test_the_one_check(labels, message):
  with pytest.raises(errors.UserError, match=message):
    label_lists.check_labels(labels, "SOURCE")
  assert label_lists.check_labels(("b", "a"), "SOURCE") == ["b", "a"]  # Order is kept.


def test_tsv_task_refuses_labels_twice_and_an_empty_train_label(tmp_path):
  """run_classifier.py --task_name=tsv: --labels given twice (as before), and a
  train.tsv row without a label, which had become a class named ''."""
  with pytest.raises(errors.UserError, match=r"^--labels: label 'x' is given twice"):
    processors.TsvProcessor(labels=["x", "y", "x"])
  (tmp_path / "train.tsv").write_text("sentence\tlabel\na\tpos\nb\t\nc\tneg\n")
  processor = processors.TsvProcessor(str(tmp_path))
  with pytest.raises(errors.UserError,
                     match=r"train\.tsv:3: empty label in column 'label'$"):
    processor.get_labels()


def test_multitask_task_list_refuses_an_empty_train_label(tmp_path):
  """run_multitask.py's tsv tasks take their labels from train.tsv the same way."""
  for name, rows in (("a", "x\tp\ny\tq\n"), ("b", "x\tp\ny\t \n")):
    (tmp_path / name).mkdir()
    (tmp_path / name / "train.tsv").write_text("sentence\tlabel\n" + rows)
  tasks = multitask_tasks.tasks_from_flags(
      ["tsv", "tsv"], [str(tmp_path / "a"), str(tmp_path / "b")], ["sentence"], None,
      ["label"])
  assert tasks[0].head().labels == ("p", "q")
  with pytest.raises(errors.UserError, match=r"b/train\.tsv:3: empty label in column"):
    tasks[1].head()


def test_multitask_heads_and_bank_tasks_refuse_labels_twice():
  """What a multi-task model records (its task heads) and what a bank or a SavedModel's
  task table is made of (bank_tasks.BankTask) hold each label once."""
  with pytest.raises(errors.UserError, match=r"^task 'nli': label 'yes' is given twice"):
    multitask_model.TaskHead("nli", ("yes", "no", "yes"))
  assert multitask_model.TaskHead("sts", (), True).num_outputs == 1
  with pytest.raises(errors.UserError, match=r"^t/adapter_weights\.safetensors: task 'sst': "
                     r"label 'pos' is given twice"):
    bank_tasks.BankTask(name="sst", path="t/adapter_weights.safetensors",
                    adapter_config=AdapterConfig(size=2),
                    arrays={"output_weights": np.zeros((2, 4), np.float32)},
                    labels=("pos", "pos"), is_regression=False, max_seq_length=8,
                    base_fingerprint="f", metadata={})


def _peft_argv(base, out, labels):
  return [f"--peft_dir={os.path.join(PEFT, 'seq_cls_qv')}",
          f"--init_checkpoint={base['init_checkpoint']}",
          f"--bert_config_file={base['bert_config_file']}", f"--output_dir={out}",
          f"--labels={labels}", "--task_name=t", "--max_seq_length=12"]


def test_peft_import_refuses_labels_twice(capsys, interop_base, tmp_path):
  """convert_checkpoint.py --peft_dir: three labels for three outputs, one of them twice."""
  out = str(tmp_path / "out")
  line = interop_checks.one_error_line(capsys, _peft_argv(interop_base, out, "a,b,a"))
  assert line == ("ERROR: --labels: label 'a' is given twice in ['a', 'b', 'a']: each label "
                  "names one class"), line
  assert not os.path.exists(out)


def _hub_with_label2id(tmp_path, label2id):
  """A copy of an AdapterHub fixture whose head's label2id is `label2id`."""
  d = str(tmp_path / "hub")
  shutil.copytree(os.path.join(HUB, "double_seq_bn"), d)
  path = os.path.join(d, "head_config.json")
  with open(path) as f:
    head = json.load(f)
  head["config"]["label2id"] = label2id
  with open(path, "w") as f:
    json.dump(head, f)
  return d


def _hub_argv(base, hub_dir, out, labels=None):
  return ([f"--adapterhub_dir={hub_dir}", f"--init_checkpoint={base['init_checkpoint']}",
           f"--bert_config_file={base['bert_config_file']}", f"--output_dir={out}",
           "--task_name=t", "--max_seq_length=12"] +
          ([f"--labels={labels}"] if labels else []))


def test_adapterhub_import_refuses_labels_that_differ_from_its_head(capsys, interop_base,
                                                                     tmp_path):
  """convert_checkpoint.py --adapterhub_dir: --labels in another order than the head's
  label2id names them would swap predictions; a label2id that loses a label (two
  labels of one id) had been replaced by "0", "1", "2" without a word."""
  hub = _hub_with_label2id(tmp_path, {"neg": 0, "mid": 1, "pos": 2})
  out = str(tmp_path / "out")
  line = interop_checks.one_error_line(capsys, _hub_argv(interop_base, hub, out, "pos,mid,neg"))
  assert line == (f"ERROR: {hub}/head_config.json: --labels gives the labels ['pos', 'mid', "
                  "'neg'], but the head's label2id has ['neg', 'mid', 'pos'] (label ids are "
                  "positions): give the same list in the same order, or leave --labels out "
                  "to take them from it"), line
  assert not os.path.exists(out)

  hub = _hub_with_label2id(tmp_path / "twice", {"neg": 0, "mid": 0, "pos": 2})
  line = interop_checks.one_error_line(capsys, _hub_argv(interop_base, hub, out))
  assert line == (f'ERROR: {hub}/head_config.json: label2id {{"neg": 0, "mid": 0, "pos": 2}} '
                  "does not number the head's 3 outputs 0..2 once each"), line
  assert not os.path.exists(out)


def _adapter_file_with_labels(tmp_path, source, labels):
  """A copy of the adapter file `source` whose metadata records `labels` (as an older
  version or a hand edit may leave it)."""
  import safetensors.numpy  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  from adapter_bert.checkpoints import adapter_weights  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  path, header, arrays = adapter_weights.read_adapter_file(source)
  header["metadata"]["labels"] = labels
  d = tmp_path / "adapter_model"
  d.mkdir()
  (d / adapter_weights.WEIGHTS_FILE).write_bytes(
      safetensors.numpy.save(arrays, metadata={"header": json.dumps(header)}))
  return str(d)


@pytest.mark.parametrize("labels, problem", [
    (["neg", "neg", "pos"], "its metadata: label 'neg' is given twice in ['neg', 'neg', "
                            "'pos']: each label names one class"),
    (["neg", "pos"], "its metadata gives 2 labels, the classifier has 3 outputs (one "
                     "output: a regression, no labels)"),
])
def test_adapterhub_export_refuses_labels_twice_or_of_another_count(capsys, interop_base,
                                                                     tmp_path, labels, problem):
  """convert_checkpoint.py --export_adapterhub writes the file's labels as the head's
  label2id: a label given twice had lost a class there ({'neg': 1, 'pos': 2} for 3
  outputs), and too few labels had named only some outputs, without a word."""
  source = os.path.join(interop_checks.FIXTURES, "adapterhub_export", "houlsby_gelu",
                        "adapter_model")
  damaged = _adapter_file_with_labels(tmp_path, source, labels)
  out = str(tmp_path / "out")
  line = interop_checks.one_error_line(capsys, [
      f"--export_adapterhub={damaged}", f"--init_checkpoint={interop_base['init_checkpoint']}",
      f"--output_dir={out}"])
  assert line == f"ERROR: {damaged}/adapter_weights.safetensors: {problem}", line
  assert not os.path.exists(out)


def _output_dir_with_checkpoint(tmp_path, config):
  """An output_dir as a run leaves it: a checkpoint and the run_config.json it was
  trained with."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  from adapter_bert.runtime import run_config  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  out = tmp_path / "out"
  tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), str(out), 1,
                             checkpoint_name="model.ckpt").save()
  (out / run_config.RUN_CONFIG_FILE).write_text(json.dumps(config))
  return str(out), str(out / run_config.RUN_CONFIG_FILE)


@pytest.mark.parametrize("key, recorded, now, problem", [
    # run_classifier.py's label_list.
    ("label_list", ["a", "b"], ["b", "a"],
     "this run gives the labels ['b', 'a'], but the run whose checkpoints {out} holds has "
     "['a', 'b'] (label ids are positions): give the same labels in the same order, or "
     "use a fresh --output_dir"),
    ("label_list", ["a", "a"], ["a", "b"],
     "the run whose checkpoints {out} holds: label 'a' is given twice in ['a', 'a']: each "
     "label names one class"),
    # run_multitask.py's tasks, each task's labels.
    ("tasks", [{"name": "t", "labels": ["a", "b"], "is_regression": False}],
     [{"name": "t", "labels": ["b", "a"], "is_regression": False}],
     "task 't' of this run gives the labels ['b', 'a'], but the run whose checkpoints "
     "{out} holds has ['a', 'b'] (label ids are positions): give the same labels in the "
     "same order, or use a fresh --output_dir"),
    ("tasks", [{"name": "t", "labels": ["a", "a"], "is_regression": False}],
     [{"name": "t", "labels": ["a", "b"], "is_regression": False}],
     "task 't' of the run whose checkpoints {out} holds: label 'a' is given twice in "
     "['a', 'a']: each label names one class"),
])
@pytest.mark.parametrize("resuming", [False, True])
def test_a_resumed_run_has_its_labels_checked_by_the_one_owner(tmp_path, key, recorded, now,
                                                               problem, resuming):
  """run_config.check, as a run over an output_dir with checkpoints calls it (a
  task's keys in `also`, or every recorded setting when resuming training): the
  recorded labels go through label_lists.check_recorded_labels, not a comparison of
  its own."""
  from adapter_bert.runtime import run_config  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  out, path = _output_dir_with_checkpoint(tmp_path, {key: recorded})
  with pytest.raises(errors.UserError) as e:
    run_config.check(out, {key: now}, also=() if resuming else (key,), resuming=resuming)
  assert str(e.value) == f"{path}: " + problem.format(out=out)
  if "twice" not in problem:  # The same labels pass.
    run_config.check(out, {key: recorded}, also=() if resuming else (key,),
                     resuming=resuming)


def test_an_adapter_files_labels_are_checked_by_the_one_owner():
  """adapter_weights.check_metadata (--adapter_checkpoint, a bank's --bank_task, a
  multi-task run served) hands labels and a task list's labels to the owner; what
  else differs in a task list (a name) is its own generic refusal."""
  from adapter_bert.checkpoints import adapter_weights  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  tasks = lambda *labels: [{"name": "t", "labels": list(labels), "is_regression": False}]
  with pytest.raises(errors.UserError) as e:
    adapter_weights.check_metadata("FILE", {"tasks": tasks("a", "b")},
                                   {"tasks": tasks("b", "a")}, "RUN", labels_fix="FIX")
  assert str(e.value) == ("FILE: task 't' of RUN gives the labels ['b', 'a'], but its "
                          "metadata has ['a', 'b'] (label ids are positions): FIX")
  with pytest.raises(errors.UserError) as e:
    adapter_weights.check_metadata("FILE", {"tasks": tasks("a", "a")},
                                   {"tasks": tasks("a", "b")}, "RUN")
  assert str(e.value) == ("FILE: task 't' of its metadata: label 'a' is given twice in "
                          "['a', 'a']: each label names one class")
  renamed = [dict(tasks("a")[0], name="u")]
  with pytest.raises(errors.UserError, match=r"^FILE: was trained with tasks \[.*'t'.*\], "
                                             r"RUN has \[.*'u'.*\]$"):
    adapter_weights.check_metadata("FILE", {"tasks": tasks("a")}, {"tasks": renamed}, "RUN")
  adapter_weights.check_metadata("FILE", {"tasks": tasks("a", "b"), "labels": ["x"]},
                                 {"tasks": tasks("a", "b"), "labels": ["x"]}, "RUN")
