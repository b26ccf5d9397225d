"""PEFT LoRA adapters in and out (adapter_bert/checkpoints/peft_lora.py), against
the real `peft`: tests/fixtures/interop/peft/ holds adapters that PEFT saved and
the logits PEFT computed with them (scripts/interop_fixtures/peft_lora.py, run
in its own venv). Nothing here imports torch."""

import json
import os
import shutil

import numpy as np
import pytest
import safetensors.numpy
import tensorflow as tf

import convert_checkpoint
import interop_checks
from adapter_bert.model import modeling
from adapter_bert.bank import adapter_bank
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import peft_lora
from adapter_bert.serving import export
from adapter_bert.model.adapter_layers import AdapterConfig

FIXTURES = interop_checks.FIXTURES
PEFT = os.path.join(FIXTURES, "peft")
# Fixture -> the labels it is imported with (a regression: none).
IMPORTED = {"seq_cls_qv": ["a", "b", "c"], "rslora": ["no", "yes"], "torch_file": ["a", "b"],
            "query_layer1": ["a", "b", "c"], "layer_norms": ["a", "b", "c"], "regression": []}


def _expected(*path):
  with open(os.path.join(PEFT, *path)) as f:
    return np.array(json.load(f)["logits"])


def _import(base, name, out, labels):
  return convert_checkpoint.peft_lora_to_adapter_model(
      os.path.join(PEFT, name), base["init_checkpoint"], base["bert_config_file"], out,
      dict(task=name, labels=labels, max_seq_length=12, do_lower_case=True))


@pytest.mark.parametrize("name", sorted(IMPORTED))
def test_imported_adapter_predicts_what_peft_predicts(interop_base, tmp_path, name):
  saved = _import(interop_base, name, str(tmp_path / "adapter_model"), IMPORTED[name])
  expected = _expected(name, "logits.json")
  np.testing.assert_allclose(interop_checks.adapter_file_logits(interop_base, saved), expected, atol=1e-5, rtol=0)
  header = adapter_weights.read_adapter_header(saved)
  assert header["metadata"]["is_regression"] == (name == "regression")
  assert header["adapter_config"]["design"] == "lora"


def test_import_config_mapping(interop_base, tmp_path):
  """r, lora_alpha and use_rslora as size and scaling; unadapted places zero."""
  rslora = peft_lora.read_peft_lora(os.path.join(PEFT, "rslora")).adapter_config
  assert (rslora.size, rslora.scaling) == (4, 6 / 2)  # lora_alpha / sqrt(r).
  plain = peft_lora.read_peft_lora(os.path.join(PEFT, "seq_cls_qv")).adapter_config
  assert (plain.size, plain.scaling) == (8, 16 / 8)
  saved = _import(interop_base, "query_layer1", str(tmp_path / "q"), IMPORTED["query_layer1"])
  arrays = adapter_weights.read_adapter_file(saved).arrays
  lora = lambda layer, place: arrays[f"bert/encoder/layer_{layer}/attention/self/{place}/"
                                     "adapters/lora_b"]
  assert np.any(lora(1, "query")) and not np.any(lora(0, "query"))
  assert not np.any(lora(1, "value")) and not np.any(lora(0, "value"))


def test_imported_adapter_without_lora_differs(interop_base, tmp_path):
  """The fixtures test the LoRA weights: zeroing them moves the logits beyond 1e-5."""
  saved = _import(interop_base, "seq_cls_qv", str(tmp_path / "a"), IMPORTED["seq_cls_qv"])
  path, header, arrays = adapter_weights.read_adapter_file(saved)
  header = dict(header)
  zeroed = {n: (np.zeros_like(a) if "/adapters/" in n else a) for n, a in arrays.items()}
  with open(path, "wb") as f:
    f.write(safetensors.numpy.save(zeroed, metadata={"header": json.dumps(header)}))
  assert np.abs(interop_checks.adapter_file_logits(interop_base, saved) - _expected("seq_cls_qv", "logits.json")).max() > 1e-3


def _import_argv(base, peft_dir, out, labels="a,b,c"):
  return [f"--peft_dir={peft_dir}", f"--init_checkpoint={base['init_checkpoint']}",
          f"--bert_config_file={base['bert_config_file']}", f"--output_dir={out}",
          f"--labels={labels}", "--task_name=t", "--max_seq_length=32"]


def test_command_imports_and_bank_serves_it(interop_base, tmp_path):
  """convert_checkpoint --peft_dir writes a file a bank adds (its base's fingerprint)
  and serving.export serves, with PEFT's logits."""
  out = str(tmp_path / "adapter_model")
  interop_checks.main_with(_import_argv(interop_base, os.path.join(PEFT, "layer_norms"), out))([])
  header = adapter_weights.read_adapter_header(out)
  assert header["metadata"]["labels"] == ["a", "b", "c"]
  bank = str(tmp_path / "bank")
  config = modeling.BertConfig.from_json_file(interop_base["bert_config_file"])
  adapter_bank.create_bank(bank, adapter_bank.BankBase.of_run(
      header["base_fingerprint"], config.to_dict(), interop_base["init_checkpoint"], None,
      interop_base["vocab_file"], True))
  adapter_bank.add_task(bank, "t", out)
  assert adapter_bank.task_names(bank) == ["t"]
  export_dir = str(tmp_path / "export")
  export.export(bank, export_dir, token_ids_only=True)
  inputs = interop_checks.inputs()
  loaded = tf.saved_model.load(export_dir)
  served = loaded.serve_token_ids(
      inputs["input_ids"], inputs["input_mask"], inputs["segment_ids"],
      tf.constant(["t"] * len(inputs["input_ids"])))
  np.testing.assert_allclose(served["logits"].numpy(), _expected("layer_norms", "logits.json"),
                             atol=1e-5, rtol=0)


def _edited(tmp_path, name="seq_cls_qv", **changes):
  """A copy of a fixture with its adapter_config.json changed."""
  target = tmp_path / f"edited_{name}"
  shutil.copytree(os.path.join(PEFT, name), target)
  config = json.loads((target / "adapter_config.json").read_text())
  config.update(changes)
  (target / "adapter_config.json").write_text(json.dumps(config))
  return str(target)


@pytest.mark.parametrize("changes, message", [
    (dict(use_dora=True), "use_dora=true: not supported"),
    (dict(bias="all"), "bias=\"all\": not supported"),
    (dict(lora_bias=True), "lora_bias=true: not supported"),
    (dict(fan_in_fan_out=True), "fan_in_fan_out=true: not supported"),
    (dict(rank_pattern={"query": 2}), "rank_pattern={\"query\": 2}: not supported"),
    (dict(alpha_pattern={"value": 4}), "alpha_pattern={\"value\": 4}: not supported"),
    (dict(init_lora_weights="pissa"), "init_lora_weights=\"pissa\": not supported"),
    (dict(layer_replication=[[0, 1]]), "layer_replication=[[0, 1]]: not supported"),
    (dict(task_type="TOKEN_CLS"), "task_type=\"TOKEN_CLS\": only SEQ_CLS"),
    (dict(peft_type="IA3"), "peft_type=\"IA3\": only PEFT's LORA"),
    (dict(some_new_option=True), "some_new_option=true: not supported"),
])
def test_unsupported_options_refused_in_one_line(capsys, interop_base, tmp_path, changes,
                                                 message):
  peft_dir = _edited(tmp_path, **changes)
  line = interop_checks.one_error_line(capsys, _import_argv(interop_base, peft_dir, str(tmp_path / "out")))
  assert line.startswith(f"ERROR: {peft_dir}/adapter_config.json: {message}"), line
  assert not (tmp_path / "out").exists()


def test_real_peft_refusals(capsys, interop_base, tmp_path):
  """What PEFT itself saved for DoRA, and for LoRA on key and the dense layers."""
  out = str(tmp_path / "out")
  line = interop_checks.one_error_line(capsys, _import_argv(interop_base, os.path.join(PEFT, "refused_dora"), out,
                                     "a,b"))
  assert "use_dora=true: not supported" in line
  line = interop_checks.one_error_line(capsys, _import_argv(interop_base, os.path.join(PEFT, "refused_key_dense"), out,
                                     "a,b"))
  assert "target_modules" in line or "LoRA on bert.encoder.layer.0.attention" in line, line
  assert not os.path.exists(out)


def _with_tensors(tmp_path, extra, drop=()):
  target = tmp_path / "tensors"
  shutil.copytree(os.path.join(PEFT, "seq_cls_qv"), target)
  path = target / peft_lora.WEIGHTS_FILE
  tensors = {k: v for k, v in safetensors.numpy.load(path.read_bytes()).items()
             if not any(d in k for d in drop)}
  tensors.update(extra)
  path.write_bytes(safetensors.numpy.save(tensors))
  return str(target)


@pytest.mark.parametrize("extra, drop, message", [
    ({"base_model.model.bert.encoder.layer.0.attention.self.key.lora_A.weight":
      np.zeros((8, 32), np.float32)}, (),
     "LoRA on bert.encoder.layer.0.attention.self.key: no counterpart here"),
    ({"base_model.model.bert.pooler.dense.weight": np.zeros((32, 32), np.float32)}, (),
     "modules_to_save holds bert.pooler.dense, which this project's LoRA keeps frozen"),
    ({"base_model.model.roberta.encoder.layer.0.attention.self.query.lora_A.weight":
      np.zeros((8, 32), np.float32)}, (),
     "tensor roberta.encoder.layer.0.attention.self.query.lora_A.weight: not part of a BERT"),
    ({}, ("classifier",), "no classifier"),
])
def test_unmappable_tensors_refused(capsys, interop_base, tmp_path, extra, drop, message):
  peft_dir = _with_tensors(tmp_path, extra, drop)
  line = interop_checks.one_error_line(capsys, _import_argv(interop_base, peft_dir, str(tmp_path / "out")))
  assert f"{peft_dir}/adapter_model.safetensors: {message}" in line, line


def test_other_mistakes_refused(capsys, interop_base, tmp_path):
  out = str(tmp_path / "out")
  line = interop_checks.one_error_line(capsys, _import_argv(interop_base, os.path.join(PEFT, "seq_cls_qv"), out, "a,b"))
  assert "--labels gives 2 labels, the classifier has 3 outputs" in line
  not_torch = tmp_path / "bin"
  not_torch.mkdir()
  shutil.copy(os.path.join(PEFT, "seq_cls_qv", "adapter_config.json"), not_torch)
  (not_torch / "adapter_model.bin").write_bytes(b"not a zip")
  line = interop_checks.one_error_line(capsys, _import_argv(interop_base, str(not_torch), out))
  assert "adapter_model.bin: not a PyTorch state dict" in line, line
  os.remove(not_torch / "adapter_model.bin")
  line = interop_checks.one_error_line(capsys, _import_argv(interop_base, str(not_torch), out))
  assert f"{not_torch}: no adapter_model.safetensors (or adapter_model.bin) here" in line, line
  line = interop_checks.one_error_line(capsys, [f"--peft_dir={os.path.join(PEFT, 'seq_cls_qv')}", f"--output_dir={out}"])
  assert "--peft_dir needs the converted base" in line
  line = interop_checks.one_error_line(capsys, _import_argv(interop_base, os.path.join(PEFT, "seq_cls_qv"), out)[:-1])
  assert "--max_seq_length=128: not in [3, 64] (max_position_embeddings of" in line
  # Another base: a model of other sizes.
  other = tmp_path / "other_base"
  shutil.copytree(os.path.join(FIXTURES, "base"), other)
  config = json.loads((other / "config.json").read_text())
  tensors = safetensors.numpy.load((other / "model.safetensors").read_bytes())
  tensors = {k: v for k, v in tensors.items() if ".layer.1." not in k}
  (other / "model.safetensors").write_bytes(safetensors.numpy.save(tensors))
  (other / "config.json").write_text(json.dumps(dict(config, num_hidden_layers=1)))
  convert_checkpoint.hf_bert_to_google(str(other), str(tmp_path / "other_google"))
  line = interop_checks.one_error_line(capsys, [f"--peft_dir={os.path.join(PEFT, 'seq_cls_qv')}", f"--output_dir={out}",
                         f"--init_checkpoint={tmp_path / 'other_google' / 'bert_model.ckpt'}",
                         f"--bert_config_file={tmp_path / 'other_google' / 'bert_config.json'}",
                         "--labels=a,b,c", "--max_seq_length=32"])
  assert "does not exist in a model of the given base (it has 1 layers)" in line, line
  assert not os.path.exists(out)


def test_export_is_what_peft_loaded(interop_base, tmp_path):
  """exported/peft/ is this version's export of exported/adapter_model/, on which
  PEFT (exported/logits.json) predicts what this project predicts."""
  source = os.path.join(PEFT, "exported", "adapter_model")
  out = str(tmp_path / "peft")
  interop_checks.main_with([f"--export_peft={source}", f"--output_dir={out}",
            "--base_model_name_or_path=tests/fixtures/interop/base"])([])
  committed = os.path.join(PEFT, "exported", "peft")
  for name in (peft_lora.CONFIG_FILE, peft_lora.WEIGHTS_FILE):
    with open(os.path.join(out, name), "rb") as mine, open(os.path.join(committed, name),
                                                           "rb") as theirs:
      assert mine.read() == theirs.read(), name
  with open(os.path.join(PEFT, "exported", "check.json")) as f:
    assert json.load(f)["max_abs_logit_difference"] < 1e-5
  np.testing.assert_allclose(interop_checks.adapter_file_logits(interop_base, source), _expected("exported", "logits.json"),
                             atol=1e-5, rtol=0)
  # And back: the import of the export is the adapter file it came from.
  config = json.loads(open(os.path.join(out, peft_lora.CONFIG_FILE)).read())
  assert (config["r"], config["lora_alpha"], config["modules_to_save"]) == (
      4, 6, ["classifier", "LayerNorm"])
  back = convert_checkpoint.peft_lora_to_adapter_model(
      out, interop_base["init_checkpoint"], interop_base["bert_config_file"],
      str(tmp_path / "back"), dict(task="exported", labels=["neg", "neutral", "pos"],
                                   max_seq_length=12, do_lower_case=True))
  original = adapter_weights.read_adapter_file(source)
  again = adapter_weights.read_adapter_file(back)
  assert again.header["base_fingerprint"] == original.header["base_fingerprint"]
  assert again.header["adapter_config"] == original.header["adapter_config"]
  assert sorted(again.arrays) == sorted(original.arrays)
  for name, value in original.arrays.items():
    np.testing.assert_array_equal(again.arrays[name], value, err_msg=name)


def test_export_refuses_other_designs(capsys, base, tmp_path):
  """A Houlsby adapter file has no PEFT LoRA form (AdapterHub's format is its place)."""
  model = modeling.BertClassifier(modeling.BertConfig.from_json_file(base["bert_config_file"]),
                                  2, AdapterConfig(size=4))
  model.ensure_built()
  from adapter_bert.runtime import trainable  # pylint: disable=import-outside-toplevel
  trainable.set_trainable(model, trainable.TrainMode("adapters"))
  source = adapter_weights.save_adapter_weights(model, str(tmp_path / "houlsby"))
  line = interop_checks.one_error_line(capsys, [f"--export_peft={source}", f"--output_dir={tmp_path / 'out'}"])
  assert "adapter design houlsby: PEFT's LoRA format holds LoRA adapters only" in line
  assert not (tmp_path / "out").exists()  # Refused before anything is written.


def test_no_torch_imported():
  """Reading, converting and writing PEFT's files (above, in this process) needs no
  PyTorch or peft: the project reads them with safetensors and NumPy."""
  import sys  # pylint: disable=import-outside-toplevel
  assert not {"torch", "peft", "transformers"} & set(sys.modules)
