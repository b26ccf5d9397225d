"""A bank that moves: copied with its base, or alone while its base moves elsewhere, or
to ram:// (gs://'s stand-in), it still lists, exports and serves the predictions of
the run that trained it; a base given in its new place is checked to be the bank's.

One task (MRPC, half an epoch on the tiny base) is trained into a bank by
run_classifier.py, in a tree of its own: BEFORE/base (a copy of the tiny base),
BEFORE/banks/glue (the bank), BEFORE/run. BEFORE is then renamed away, so the
bank's first place and its base's are gone for every test, which copies the
tree where it needs it.
"""

import json
import os
import posixpath
import shutil
import uuid

import numpy as np
import pytest
import tensorflow as tf

from adapter_bert import errors
from adapter_bert.bank import adapter_bank
from adapter_bert.bank import base_paths
from adapter_bert.bank import bank_tasks
from adapter_bert.classification import processors
from export_checks import export_error
import export_savedmodel
import manage_bank
import tiny_bert
from run_harness import GLUE, classifier_flags, read_test_results, run_main

MRPC = os.path.join(GLUE, "MRPC")
BASE_FILES = ("bert_config.json", "vocab.txt", "bert_model.ckpt.index",
              "bert_model.ckpt.data-00000-of-00001")


def _base_flags(directory):
  return dict(init_checkpoint=os.path.join(directory, "bert_model.ckpt"),
              vocab_file=os.path.join(directory, "vocab.txt"),
              bert_config_file=os.path.join(directory, "bert_config.json"))


@pytest.fixture(scope="module")
def trained(base, tmp_path_factory):
  """The tree a bank was trained in, its first place gone: dict(before=that place,
  tree=its files now, expected=the run's test_results.tsv, fingerprint)."""
  root = tmp_path_factory.mktemp("moves")
  before, tree = str(root / "before"), str(root / "tree")
  own_base = os.path.join(before, "base")
  os.makedirs(own_base)
  for name in os.listdir(base["dir"]):
    shutil.copy(os.path.join(base["dir"], name), own_base)
  assert sorted(os.listdir(own_base)) == sorted(BASE_FILES)
  run_main(**classifier_flags(_base_flags(own_base), task_name="MRPC", data_dir=MRPC,
                              output_dir=os.path.join(before, "run"), do_train=True,
                              do_predict=True, num_train_epochs=0.5,
                              adapter_bank=os.path.join(before, "banks", "glue")))
  os.rename(before, tree)
  expected = read_test_results(os.path.join(tree, "run", "test_results.tsv"))
  bank = os.path.join(tree, "banks", "glue")
  with open(os.path.join(bank, "bank.json")) as f:
    saved = json.load(f)
  return dict(before=before, tree=tree, expected=expected, saved=saved,
              fingerprint=adapter_bank.open_bank(bank).fingerprint)


def _copy(src, dst):
  """Copies a local directory tree to dst (ram:// too) with tf.io.gfile."""
  for directory, _, names in tf.io.gfile.walk(src):
    relative = os.path.relpath(directory, src)
    target = dst if relative == "." else posixpath.join(dst, relative.replace(os.sep, "/"))
    tf.io.gfile.makedirs(target)
    for name in names:
      tf.io.gfile.copy(os.path.join(directory, name), posixpath.join(target, name),
                       overwrite=True)


def _manage(capsys, *argv):
  """manage_bank.py in-process: (exit status, stdout, stderr)."""
  try:
    errors.exit_on_user_error(manage_bank.main)(list(argv))
    status = 0
  except SystemExit as e:
    status = e.code
  captured = capsys.readouterr()
  return status, captured.out, captured.err


def _export(bank, export_dir, **flag_values):
  run_main(script=export_savedmodel, adapter_bank=bank, export_dir=export_dir,
           **flag_values)


def _check_predictions(export_dir, expected):
  """The SavedModel's probabilities of the MRPC test examples: the run's own."""
  served = tf.saved_model.load(export_dir).signatures["serving_default"]
  examples = processors.get_processor("MRPC").get_test_examples(MRPC)
  outputs = served(text_a=tf.constant([e.text_a for e in examples]),
                   text_b=tf.constant([e.text_b for e in examples]),
                   task=tf.constant(["mrpc"] * len(examples)))
  assert expected.shape == (len(examples), 2)
  np.testing.assert_allclose(outputs["probabilities"].numpy()[:, :2], expected, atol=1e-5)


def test_the_bank_records_its_base_relative_to_itself(trained):
  saved = trained["saved"]
  assert saved["base"]["init_checkpoint"] == "../../base/bert_model.ckpt"
  assert saved["base"]["vocab_file"] == "../../base/vocab.txt"
  assert saved["base"]["bert_hub_module_handle"] is None
  assert saved["created_in"] == os.path.join(trained["before"], "banks", "glue")
  # Where no relative form exists the path stays as it is.
  assert base_paths.relative_to_bank("gs://b/base/vocab.txt", "gs://b/banks/glue") == \
      "../../base/vocab.txt"
  for path, bank in (("gs://other/vocab.txt", "gs://b/bank"), ("/base/v.txt", "gs://b/bank"),
                     ("https://tfhub.dev/x/1", "gs://b/bank"), ("gs://b/v.txt", "/banks/a"),
                     ("/usr/base/v.txt", "/tmp/bank")):
    assert base_paths.relative_to_bank(path, bank) == path
  assert base_paths.resolve_in_bank("../../base/v.txt", "gs://b/banks/glue") == \
      "gs://b/base/v.txt"


def test_a_bank_copied_with_its_base_lists_and_exports(trained, tmp_path, capsys):
  assert not os.path.exists(trained["before"])
  moved = str(tmp_path / "laptop")
  shutil.copytree(trained["tree"], moved)
  bank = os.path.join(moved, "banks", "glue")
  status, out, _ = _manage(capsys, "--adapter_bank", bank, "list")
  assert status == 0 and out.splitlines()[1].startswith("mrpc ")
  assert f"fingerprint {trained['fingerprint'][:16]}" in out
  _export(bank, str(tmp_path / "export"))
  _check_predictions(str(tmp_path / "export"), trained["expected"])


def test_a_bank_moved_alone_takes_its_bases_new_place(trained, tmp_path, capsys):
  bank, weights = str(tmp_path / "laptop" / "glue"), str(tmp_path / "elsewhere" / "bert")
  shutil.copytree(os.path.join(trained["tree"], "banks", "glue"), bank)
  shutil.copytree(os.path.join(trained["tree"], "base"), weights)
  out = str(tmp_path / "export")
  status, listed, _ = _manage(capsys, "--adapter_bank", bank, "list")
  assert status == 0 and "mrpc" in listed

  # Where the base is not, the line names the path and the flag that gives its new place.
  first = os.path.join(trained["before"], "base", "bert_model.ckpt")
  line = export_error(capsys, adapter_bank=bank, export_dir=out)
  assert line.startswith(f"ERROR: {bank}/bank.json: ")
  assert str(tmp_path / "base" / "bert_model.ckpt") in line and first in line
  assert "--init_checkpoint" in line
  flags = _base_flags(weights)
  line = export_error(capsys, adapter_bank=bank, export_dir=out,
                      init_checkpoint=flags["init_checkpoint"])
  assert str(tmp_path / "base" / "vocab.txt") in line and "--vocab_file" in line
  assert not os.path.exists(out)

  _export(bank, out, **flags)
  _check_predictions(out, trained["expected"])
  # manage_bank.py takes the new place too, and checks it.
  status, listed, _ = _manage(capsys, "--adapter_bank", bank,
                              *[f"--{k}={v}" for k, v in flags.items()], "list")
  assert status == 0 and "mrpc" in listed


def test_another_base_for_a_moved_bank_is_refused_naming_the_flag(trained, tmp_path, capsys):
  bank = str(tmp_path / "glue")
  shutil.copytree(os.path.join(trained["tree"], "banks", "glue"), bank)
  other = str(tmp_path / "other")
  config, vocab, ckpt, _ = tiny_bert.write_google_dir(other, seed=7)
  out = str(tmp_path / "export")
  line = export_error(capsys, adapter_bank=bank, export_dir=out, init_checkpoint=ckpt,
                      vocab_file=vocab)
  assert line.startswith(f"ERROR: flag --init_checkpoint={ckpt}: ")
  assert f"the bank's {trained['fingerprint'][:16]}" in line and "fingerprint" in line
  status, _, err = _manage(capsys, "--adapter_bank", bank, f"--init_checkpoint={ckpt}",
                           f"--vocab_file={vocab}", "list")
  assert status == 2 and err.count("\n") == 1
  assert err.startswith(f"ERROR: flag --init_checkpoint={ckpt}: ")
  assert f"the bank's {trained['fingerprint'][:16]}" in err

  # A config of another model: named by its flag, before any weights are read.
  with open(config) as f:
    other_config = dict(json.load(f), hidden_dropout_prob=0.25)
  with open(config, "w") as f:
    json.dump(other_config, f)
  line = export_error(capsys, adapter_bank=bank, export_dir=out, bert_config_file=config)
  assert line.startswith(f"ERROR: flag --bert_config_file={config} is not the base of "
                         f"adapter bank {bank}: bert_config differs in hidden_dropout_prob")
  assert not os.path.exists(out)


def test_a_bank_moved_alone_finds_its_base_where_it_was(trained, tmp_path):
  """The base still at its first place: the bank's created_in leads to it."""
  bank = str(tmp_path / "glue")
  shutil.copytree(os.path.join(trained["tree"], "banks", "glue"), bank)
  first = os.path.join(trained["before"], "base")
  shutil.copytree(os.path.join(trained["tree"], "base"), first)
  try:
    opened = adapter_bank.open_bank(bank)
    assert opened.init_checkpoint == str(tmp_path.parent / "base" / "bert_model.ckpt")
    base = bank_tasks.read_base_weights(bank, opened)
    assert base.source == f"checkpoint {os.path.join(first, 'bert_model.ckpt')}"
    assert base.vocab_file == os.path.join(first, "vocab.txt")
  finally:
    shutil.rmtree(trained["before"])


def test_a_bank_copied_to_ram_exports_from_there(trained, capsys):
  root = f"ram://bank_moves_{uuid.uuid4().hex[:8]}"
  _copy(os.path.join(trained["tree"], "base"), f"{root}/base")
  _copy(os.path.join(trained["tree"], "banks", "glue"), f"{root}/banks/glue")
  bank = f"{root}/banks/glue"
  try:
    status, listed, err = _manage(capsys, "--adapter_bank", bank, "list")
    assert status == 0 and "mrpc" in listed, err
    assert adapter_bank.open_bank(bank).vocab_file == f"{root}/base/vocab.txt"
    _export(bank, f"{root}/export/1")
    _check_predictions(f"{root}/export/1", trained["expected"])
  finally:
    try:
      tf.io.gfile.rmtree(root)
    except tf.errors.OpError:  # ram:// lists names that only share a prefix, then misses them.
      pass


def test_a_new_bank_records_the_base_given_in_its_new_place(trained, tmp_path, capsys):
  """manage_bank.py add into a new bank, from a run whose run_config.json names the
  base's first place: the base given is checked, then recorded instead."""
  weights = str(tmp_path / "bert")
  shutil.copytree(os.path.join(trained["tree"], "base"), weights)
  bank = str(tmp_path / "banks" / "new")
  adapter_model = os.path.join(trained["tree"], "run", "adapter_model")
  flags = [f"--{k}={v}" for k, v in _base_flags(weights).items()]
  status, out, err = _manage(capsys, "--adapter_bank", bank, *flags, "add", "mrpc",
                             adapter_model)
  assert status == 0, err
  with open(os.path.join(bank, "bank.json")) as f:
    saved = json.load(f)["base"]
  assert (saved["init_checkpoint"], saved["vocab_file"]) == (
      "../../bert/bert_model.ckpt", "../../bert/vocab.txt")
  assert saved["fingerprint"] == trained["fingerprint"]
  # Another base is refused before the bank is created.
  _, vocab, ckpt, _ = tiny_bert.write_google_dir(str(tmp_path / "other"), seed=7)
  other_bank = str(tmp_path / "banks" / "other")
  status, _, err = _manage(capsys, "--adapter_bank", other_bank, f"--init_checkpoint={ckpt}",
                           f"--vocab_file={vocab}", "add", "mrpc", adapter_model)
  assert status == 2 and err.startswith(f"ERROR: flag --init_checkpoint={ckpt}: ")
  assert not os.path.exists(other_bank)


def test_the_base_files_flags_are_a_banks(tmp_path, capsys):
  line = export_error(capsys, multitask_run=tmp_path, export_dir=tmp_path / "out",
                      vocab_file=tmp_path / "vocab.txt")
  assert "--vocab_file and --bert_config_file give an adapter bank's base" in line
