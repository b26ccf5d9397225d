"""AdapterHub bottleneck adapters in and out (adapter_bert/checkpoints/adapterhub.py),
against the real `adapters` library: tests/fixtures/interop/adapterhub/ holds
adapters that AdapterHub saved (save_adapter, with their heads) and the logits it
computed with them; adapterhub_export/ holds adapters made here, exported, with
the logits AdapterHub computed after load_adapter (scripts/interop_fixtures/,
run in their own venvs). Nothing here imports torch. interop_base (conftest) is
that tiny base, converted once."""

import io
import json
import os
import pickle
import shutil
import zipfile

import numpy as np
import pytest
import safetensors.numpy
import scipy.special
import tensorflow as tf

import convert_checkpoint
import interop_checks
import manage_bank
from adapter_bert.model import modeling
import run_classifier
from adapter_bert import errors
from adapter_bert.bank import adapter_bank
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import adapterhub
from adapter_bert.checkpoints import torch_files
from adapter_bert.runtime import model_setup
from adapter_bert.serving import export
from adapter_bert.model.adapter_layers import AdapterConfig
from run_harness import run_main

FIXTURES = interop_checks.FIXTURES
HUB = os.path.join(FIXTURES, "adapterhub")
EXPORTS = os.path.join(FIXTURES, "adapterhub_export")

# Fixture -> the AdapterConfig its options map to (hidden 32: size = 32 // reduction_factor).
MAPPED = {
    "double_seq_bn": AdapterConfig(size=2, activation="swish"),
    "double_seq_bn_gelu_size8": AdapterConfig(size=8, activation="gelu_erf"),
    "double_seq_bn_relu_scaled": AdapterConfig(size=16, activation="relu", scaling=0.5),
    "double_seq_bn_ln_after": AdapterConfig(size=8, activation="swish", layer_norm=True),
    "double_seq_bn_attention_only": AdapterConfig(size=4, activation="gelu",
                                                  placement="attention"),
    "seq_bn": AdapterConfig(size=2, activation="relu", design="pfeiffer"),
    "seq_bn_tanh_scaled": AdapterConfig(size=8, activation="tanh", design="pfeiffer",
                                        scaling=2.0),
    "seq_bn_leave_out": AdapterConfig(size=4, activation="leaky_relu", design="pfeiffer"),
    "par_bn": AdapterConfig(size=16, activation="relu", design="parallel", scaling=4.0),
    "par_bn_both_silu": AdapterConfig(size=4, activation="swish", design="parallel",
                                      placement="both", scaling=1.0),
}
# Heads of one linear layer on the pooled output (layers=1, use_pooler): a bank takes them.
POOLED_HEADS = ("double_seq_bn_relu_scaled", "seq_bn_tanh_scaled")


def _expected(directory, name="logits.json"):
  with open(os.path.join(directory, name)) as f:
    return np.array(json.load(f)["logits"])


def _import(base, name, out, **metadata):
  return convert_checkpoint.adapterhub_to_adapter_model(
      os.path.join(HUB, name), base["init_checkpoint"], base["bert_config_file"], out,
      dict(dict(task=name, max_seq_length=12, do_lower_case=True), **metadata))


@pytest.mark.parametrize("name", sorted(MAPPED))
def test_imported_adapter_predicts_what_adapterhub_predicts(interop_base, tmp_path, name):
  saved = _import(interop_base, name, str(tmp_path / "adapter_model"))
  np.testing.assert_allclose(interop_checks.adapter_file_logits(interop_base, saved), _expected(os.path.join(HUB, name)),
                             atol=1e-5, rtol=0)
  header = adapter_weights.read_adapter_header(saved)
  assert AdapterConfig.from_dict(header["adapter_config"]) == MAPPED[name]
  assert header["metadata"]["labels"] == ["LABEL_0", "LABEL_1", "LABEL_2"]  # Their label2id.
  # What --train_mode=adapters trains, and the pooler where their head's hidden layer is it.
  pooler = name not in POOLED_HEADS
  assert ("bert/pooler/dense/kernel" in header["variables"]) == pooler
  assert sum("LayerNorm" in v and "/adapters/" not in v for v in header["variables"]) == 10


def test_the_fixtures_test_each_part(interop_base, tmp_path):
  """Zero adapters, another activation or the other GELU move the logits beyond 1e-4:
  a mapping wrong in any of them would fail the comparison above."""
  saved = _import(interop_base, "double_seq_bn_gelu_size8", str(tmp_path / "a"))
  expected = _expected(os.path.join(HUB, "double_seq_bn_gelu_size8"))
  path, header, arrays = adapter_weights.read_adapter_file(saved)

  def rewritten(arrays=arrays, **config):
    h = dict(header, adapter_config=dict(header["adapter_config"], **config))
    with open(path, "wb") as f:
      f.write(safetensors.numpy.save(arrays, metadata={"header": json.dumps(h)}))
    return np.abs(interop_checks.adapter_file_logits(interop_base, saved) - expected).max()

  assert rewritten(activation="gelu") > 1e-4  # The tanh GELU instead of the erf one.
  assert rewritten(activation="swish") > 1e-4
  zeroed = {n: (np.zeros_like(a) if "/adapters/" in n else a) for n, a in arrays.items()}
  assert rewritten(zeroed) > 1e-3
  assert rewritten() < 1e-5


def test_torch_file_reader_builds_arrays_and_nothing_else(tmp_path):
  """pytorch_adapter.bin and its safetensors twin: the same names; a pickle
  naming anything but tensors is refused before it runs."""
  tensors = torch_files.read_torch_file(
      open(os.path.join(HUB, "seq_bn", "pytorch_adapter.bin"), "rb").read(), "f.bin")
  assert sorted(tensors) == [f"bert.encoder.layer.{n}.output.adapters.task.adapter_{p}"
                             for n in (0, 1) for p in ("down.0.bias", "down.0.weight",
                                                       "up.bias", "up.weight")]
  assert tensors["bert.encoder.layer.1.output.adapters.task.adapter_up.weight"].shape == (32, 2)
  blob = io.BytesIO()
  with zipfile.ZipFile(blob, "w") as archive:
    archive.writestr("archive/data.pkl", pickle.dumps({"x": os.system}))
  with pytest.raises(errors.UserError, match="holds a posix.system, not only tensors"):
    torch_files.read_torch_file(blob.getvalue(), "evil.bin")


def _import_argv(base, adapterhub_dir, out):
  return [f"--adapterhub_dir={adapterhub_dir}", f"--init_checkpoint={base['init_checkpoint']}",
          f"--bert_config_file={base['bert_config_file']}", f"--output_dir={out}",
          "--labels=positive,negative,neutral", "--task_name=t", "--max_seq_length=12"]


def _edited(tmp_path, name="double_seq_bn", head=None, **changes):
  """A copy of a fixture with options of its adapter_config.json (or head_config.json) changed."""
  target = tmp_path / f"edited_{name}"
  shutil.copytree(os.path.join(HUB, name), target)
  file_name = adapterhub.HEAD_CONFIG_FILE if head else adapterhub.CONFIG_FILE
  saved = json.loads((target / file_name).read_text())
  if "model_type" in changes:
    saved["model_type"] = changes.pop("model_type")
  saved["config"].update(head or changes)
  (target / file_name).write_text(json.dumps(saved))
  return str(target), str(target / file_name)


@pytest.mark.parametrize("changes, message", [
    (dict(ln_before=True), "ln_before=true is not supported: a LayerNorm before the bottleneck"),
    (dict(use_gating=True), "use_gating=true is not supported: gating"),
    (dict(phm_layer=True), "phm_layer=true is not supported: hypercomplex (Compacter)"),
    (dict(inv_adapter="nice"), "inv_adapter=\"nice\" is not supported: invertible"),
    (dict(adapter_residual_before_ln=True), "adapter_residual_before_ln=true is not supported"),
    (dict(original_ln_after=False), "original_ln_after=false is not supported"),
    (dict(stochastic_depth=0.1), "stochastic_depth=0.1 is not supported"),
    (dict(scaling="learned"), "scaling=\"learned\" is not supported: only a constant factor"),
    (dict(scaling="channel"), "scaling=\"channel\" is not supported"),
    (dict(non_linearity="sigmoid"), "non_linearity=\"sigmoid\" is not supported: this project "
     "computes gelu, gelu_new"),
    (dict(reduction_factor={"0": 8, "default": 16}), "reduction_factor={\"0\": 8, \"default\": "
     "16} is not supported: per-layer bottleneck widths"),
    (dict(original_ln_before=True, residual_before_ln=False), "residual_before_ln=false is not "
     "supported: with original_ln_before only true"),
    (dict(original_ln_before=True, ln_after=True), "ln_after=true is not supported: an "
     "adapter's own LayerNorm only on adapters of design houlsby"),
    (dict(mh_adapter=False, output_adapter=False), "mh_adapter=false is not supported: no "
     "adapters"),
    (dict(leave_out=[5]), "leave_out=[5] is not supported: not a list of layers 0..1"),
    (dict(architecture="lora"), "architecture=\"lora\" is not supported: only bottleneck"),
    (dict(some_new_option=1), "some_new_option=1 is not supported: an option this converter "
     "does not know"),
    (dict(model_type="roberta"), "model_type=\"roberta\" is not supported: this project's "
     "base is BERT"),
])
def test_unsupported_options_refused_in_one_line(capsys, interop_base, tmp_path, changes,
                                                 message):
  hub_dir, config_path = _edited(tmp_path, **changes)
  line = interop_checks.one_error_line(capsys, _import_argv(interop_base, hub_dir, str(tmp_path / "out")))
  assert line == f"ERROR: {config_path}: AdapterHub option {message}" or line.startswith(
      f"ERROR: {config_path}: AdapterHub option {message}"), line
  assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("head, message", [
    (dict(head_type="tagging"), "head_type=\"tagging\" is not supported: only a classification"),
    (dict(layers=3), "layers=3 is not supported: with use_pooler=false: this project's head"),
    (dict(layers=2, use_pooler=True), "layers=2 is not supported: with use_pooler=true"),
    (dict(activation_function="relu"), "activation_function=\"relu\" is not supported: a "
     "2-layer head on [CLS] maps onto BERT's pooler"),
])
def test_unsupported_heads_refused_in_one_line(capsys, interop_base, tmp_path, head, message):
  hub_dir, head_path = _edited(tmp_path, head=head)
  line = interop_checks.one_error_line(capsys, _import_argv(interop_base, hub_dir, str(tmp_path / "out")))
  assert line.startswith(f"ERROR: {head_path}: AdapterHub option {message}"), line


def test_other_mistakes_refused(capsys, interop_base, tmp_path):
  out = str(tmp_path / "out")
  hub_dir = os.path.join(HUB, "seq_bn")
  argv = _import_argv(interop_base, hub_dir, out)
  line = interop_checks.one_error_line(capsys, argv[:4] + ["--labels=a,b"])
  assert "--labels gives 2 labels, the classifier has 3 outputs" in line
  line = interop_checks.one_error_line(capsys, [f"--adapterhub_dir={hub_dir}", f"--output_dir={out}"])
  assert "--adapterhub_dir needs --init_checkpoint" in line
  headless = tmp_path / "headless"
  shutil.copytree(hub_dir, headless)
  os.remove(headless / "head_config.json")
  line = interop_checks.one_error_line(capsys, _import_argv(interop_base, str(headless), out))
  assert "no head_config.json: save the adapter with its head" in line
  (headless / "pytorch_adapter.bin").write_bytes(b"not a zip")
  line = interop_checks.one_error_line(capsys, _import_argv(interop_base, str(headless), out))
  assert "pytorch_adapter.bin: not a PyTorch state dict this reader takes" in line
  extra = tmp_path / "extra"
  shutil.copytree(os.path.join(HUB, "double_seq_bn_gelu_size8"), extra)
  tensors = safetensors.numpy.load((extra / "adapter.safetensors").read_bytes())
  tensors["bert.encoder.layer.0.attention.output.adapters.task.gate.weight"] = np.zeros(
      (1, 32), np.float32)
  (extra / "adapter.safetensors").write_bytes(safetensors.numpy.save(tensors))
  line = interop_checks.one_error_line(capsys, _import_argv(interop_base, str(extra), out))
  assert "1 tensors this converter does not map (no counterpart here): encoder.layer.0." \
         "attention.output.adapters.task.gate.weight" in line, line
  assert not os.path.exists(out)


def test_an_import_into_a_users_directory_needs_overwrite_and_keeps_their_files(
    capsys, interop_base, tmp_path):
  out = tmp_path / "out"
  out.mkdir()
  (out / "NOTES.md").write_text("the user's")
  argv = _import_argv(interop_base, os.path.join(HUB, "seq_bn_tanh_scaled"), str(out))
  line = interop_checks.one_error_line(capsys, argv)
  assert line == (f"ERROR: {out}: not empty; pass --overwrite to replace what this command "
                  f"writes there (its other files are kept)")
  assert os.listdir(out) == ["NOTES.md"]
  interop_checks.main_with(argv + ["--overwrite"])([])
  assert sorted(os.listdir(out)) == ["NOTES.md", adapter_weights.CONFIG_FILE,
                                     adapter_weights.WEIGHTS_FILE]
  assert (out / "NOTES.md").read_text() == "the user's"


def _fixed_inputs_tsv(directory):
  """The fixed inputs' rows as text (whole words of the vocabulary), a tsv task's dev.tsv."""
  vocab = open(os.path.join(FIXTURES, "base", "vocab.txt")).read().split("\n")
  rows = []
  for ids in interop_checks.inputs()["input_ids"]:
    words = [vocab[i] for i in ids if i]
    first = words.index("[SEP]")
    rows.append((" ".join(words[1:first]), " ".join(words[first + 1:-1])))
  os.makedirs(directory)
  with open(os.path.join(directory, "dev.tsv"), "w") as f:
    f.write("text_a\ttext_b\tlabel\n")
    f.writelines(f"{a}\t{b}\tpositive\n" for a, b in rows)
  shutil.copy(os.path.join(directory, "dev.tsv"), os.path.join(directory, "test.tsv"))
  return directory


@pytest.mark.parametrize("name", ["double_seq_bn", "double_seq_bn_ln_after",
                                  "seq_bn_tanh_scaled"])
def test_run_classifier_predicts_with_an_imported_adapter(interop_base, tmp_path, name):
  """The command's --adapter_checkpoint (its activation, own LayerNorm, design and
  scaling taken from the file)
  gives AdapterHub's probabilities on the fixed inputs, written as text."""
  adapter = str(tmp_path / "adapter_model")
  interop_checks.main_with(_import_argv(interop_base, os.path.join(HUB, name), adapter))([])
  out = str(tmp_path / "run")
  run_main(run_classifier, task_name="tsv", data_dir=_fixed_inputs_tsv(str(tmp_path / "data")),
           text_a_column="text_a", text_b_column="text_b", label_column="label",
           labels="positive,negative,neutral", do_predict=True, output_dir=out,
           max_seq_length=12, predict_batch_size=3, adapter_checkpoint=adapter,
           **{k: interop_base[k] for k in ("init_checkpoint", "bert_config_file",
                                            "vocab_file")})
  with open(os.path.join(out, "test_results.tsv")) as f:
    probabilities = np.array([[float(x) for x in line.split("\t")] for line in f])
  np.testing.assert_allclose(
      probabilities, scipy.special.softmax(_expected(os.path.join(HUB, name)), axis=-1),
      atol=1e-5, rtol=0)


def _bank(base, fingerprint, tmp_path):
  bank = str(tmp_path / "bank")
  config = modeling.BertConfig.from_json_file(base["bert_config_file"])
  adapter_bank.create_bank(bank, adapter_bank.BankBase.of_run(
      fingerprint, config.to_dict(), base["init_checkpoint"], None, base["vocab_file"], True))
  return bank


def test_bank_serves_imported_adapters(interop_base, tmp_path):
  """Both heads on the pooled output go into one bank and its SavedModel gives
  AdapterHub's logits for each; a head whose hidden layer became a pooler is refused."""
  saved = {name: _import(interop_base, name, str(tmp_path / name)) for name in
           POOLED_HEADS + ("seq_bn",)}
  bank = _bank(interop_base, adapter_weights.read_adapter_header(saved[POOLED_HEADS[0]])[
      "base_fingerprint"], tmp_path)
  for name in POOLED_HEADS:
    adapter_bank.add_task(bank, name, saved[name])
  with pytest.raises(errors.UserError, match="holds a pooler of its own"):
    adapter_bank.add_task(bank, "seq_bn", saved["seq_bn"])
  inputs = interop_checks.inputs()
  for name in POOLED_HEADS:  # One SavedModel each: their activations differ (relu, tanh).
    export_dir = str(tmp_path / f"export_{name}")
    export.export(bank, export_dir, task_names=[name], token_ids_only=True)
    loaded = tf.saved_model.load(export_dir)
    served = loaded.serve_token_ids(inputs["input_ids"], inputs["input_mask"],
                                    inputs["segment_ids"], tf.constant([name] * 3))
    np.testing.assert_allclose(served["logits"].numpy(), _expected(os.path.join(HUB, name)),
                               atol=1e-5, rtol=0)


def test_a_new_bank_refusing_a_two_layer_head_is_not_created(interop_base, tmp_path, capsys):
  """AdapterHub's default head (2 layers on [CLS]) imports with its first layer as the
  file's own pooler, which a bank cannot hold: manage_bank.py add says so in one line,
  before it creates anything."""
  run = tmp_path / "run"
  adapter_model = _import(interop_base, "seq_bn", str(run / "adapter_model"))
  with open(run / "run_config.json", "w") as f:  # As a run beside its adapter_model/.
    json.dump(dict(init_checkpoint=interop_base["init_checkpoint"],
                   vocab_file=interop_base["vocab_file"], do_lower_case=True), f)
  bank = tmp_path / "bank"
  with pytest.raises(SystemExit) as exit_info:
    errors.exit_on_user_error(manage_bank.main)([f"--adapter_bank={bank}", "add", "seq_bn",
                                            adapter_model])
  assert exit_info.value.code == errors.USER_ERROR_EXIT_STATUS
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and err.startswith(f"ERROR: {adapter_model}: holds a pooler of "
                                                  "its own"), err
  assert "layers=1, use_pooler=True" in err and "--train_mode" not in err
  assert not bank.exists()
  assert sorted(os.listdir(tmp_path)) == ["run"]


@pytest.mark.parametrize("name", sorted(os.listdir(EXPORTS)))
def test_export_is_what_adapterhub_loaded(interop_base, tmp_path, name):
  """adapterhub_export/NAME is this version's export of NAME/adapter_model, on which
  AdapterHub's load_adapter predicts what this project predicts (torch_check.json)."""
  committed = os.path.join(EXPORTS, name)
  source = os.path.join(committed, "adapter_model")
  out = str(tmp_path / "adapterhub")
  interop_checks.main_with([f"--export_adapterhub={source}", f"--init_checkpoint={interop_base['init_checkpoint']}",
            f"--output_dir={out}", "--base_model_name_or_path=tests/fixtures/interop/base"])([])
  written = sorted(os.listdir(out))
  assert written == sorted([adapterhub.CONFIG_FILE, adapterhub.HEAD_CONFIG_FILE,
                            adapterhub.WEIGHTS_FILES[0], adapterhub.HEAD_WEIGHTS_FILES[0]])
  for file_name in written:
    with open(os.path.join(out, file_name), "rb") as mine, open(
        os.path.join(committed, file_name), "rb") as checked:
      assert mine.read() == checked.read(), file_name
  with open(os.path.join(committed, "torch_check.json")) as f:
    check = json.load(f)
  assert check["equal_to_1e-5"] and check["max_abs_diff"] <= 1e-5
  tf_logits = _expected(committed, "tf_logits.json")
  np.testing.assert_allclose(interop_checks.adapter_file_logits(interop_base, source), tf_logits, atol=1e-5, rtol=0)
  np.testing.assert_allclose(check["torch_logits"], tf_logits, atol=1e-5, rtol=0)
  # And back: the export imports to the same predictions.
  back = convert_checkpoint.adapterhub_to_adapter_model(
      out, interop_base["init_checkpoint"], interop_base["bert_config_file"],
      str(tmp_path / "back"), dict(task=name, max_seq_length=12, do_lower_case=True))
  original, again = (adapter_weights.read_adapter_file(p) for p in (source, back))
  assert again.header["adapter_config"] == original.header["adapter_config"]
  assert again.header["metadata"]["labels"] == original.header["metadata"]["labels"]
  for variable, value in original.arrays.items():
    np.testing.assert_allclose(again.arrays[variable], value, atol=0, rtol=0, err_msg=variable)
  np.testing.assert_allclose(interop_checks.adapter_file_logits(interop_base, back), tf_logits, atol=1e-5, rtol=0)


def test_import_then_export_gives_their_tensors_back(interop_base, tmp_path):
  """An AdapterHub adapter imported and exported is the same adapter: its
  tensors exactly, its options where they change what it computes."""
  name = "seq_bn_leave_out"
  saved = _import(interop_base, name, str(tmp_path / "a"))
  out = str(tmp_path / "hub")
  adapterhub.write_adapterhub(saved, interop_base["init_checkpoint"], out, name="task")
  theirs = torch_files.read_torch_file(
      open(os.path.join(HUB, name, "pytorch_adapter.bin"), "rb").read(), name)
  mine = safetensors.numpy.load(open(os.path.join(out, "adapter.safetensors"), "rb").read())
  for key, value in theirs.items():
    np.testing.assert_array_equal(mine[key], value, err_msg=key)
  assert not any(mine[k].any() for k in set(mine) - set(theirs))  # leave_out: zero adapters.
  original = json.load(open(os.path.join(HUB, name, "adapter_config.json")))["config"]
  exported = json.load(open(os.path.join(out, "adapter_config.json")))["config"]
  differ = {k for k in original if original[k] != exported.get(k)}
  assert differ == {"reduction_factor", "leave_out", "dropout"}, differ
  assert (original["reduction_factor"], exported["reduction_factor"]) == ({"default": 8}, 8)


def test_export_refusals(capsys, interop_base, tmp_path):
  """LoRA, trained LayerNorms and a missing base: one line each."""
  config = modeling.BertConfig.from_json_file(interop_base["bert_config_file"])

  def adapter_file(name, adapter_config, layer_norm_value=None):
    model = modeling.BertClassifier(config, 2, adapter_config)
    model.ensure_built()
    from adapter_bert.runtime import trainable  # pylint: disable=import-outside-toplevel
    model_setup.load_base(model, init_checkpoint=interop_base["init_checkpoint"])
    trainable.set_trainable(model, trainable.TrainMode("adapters"))
    if layer_norm_value is not None:
      model.tf1_variable_map()["bert/encoder/layer_1/output/LayerNorm/gamma"].assign(
          np.full((32,), layer_norm_value, np.float32))
    return adapter_weights.save_adapter_weights(model, str(tmp_path / name))

  argv = lambda source: [f"--export_adapterhub={source}", f"--output_dir={tmp_path / 'out'}",
                         f"--init_checkpoint={interop_base['init_checkpoint']}"]
  lora = adapter_file("lora", AdapterConfig(size=4, design="lora"))
  assert "adapter design lora (size 4) has no AdapterHub bottleneck equivalent (LoRA: " \
         "--export_peft)" in interop_checks.one_error_line(capsys, argv(lora))
  trained = adapter_file("ln", AdapterConfig(size=4), layer_norm_value=0.5)
  assert ("its LayerNorms were trained (bert/encoder/layer_1/output/LayerNorm/gamma is not "
          "the base's): AdapterHub's adapters keep the base's LayerNorms") in interop_checks.one_error_line(
              capsys, argv(trained))
  assert "--export_adapterhub needs --init_checkpoint" in interop_checks.one_error_line(capsys, argv(trained)[:2])
  assert not (tmp_path / "out").exists()
  untrained = adapter_file("houlsby", AdapterConfig(size=4))  # The base's LayerNorms: exported.
  interop_checks.main_with(argv(untrained))([])
  assert (tmp_path / "out" / "adapter.safetensors").exists()


def test_adapters_trained_with_frozen_layer_norms_export(interop_base, tmp_path):
  """--train_mode=adapters_only trains as AdapterHub's train_adapter does (the
  LayerNorms stay the base's), so the task exports; the export imports back to
  the run's predictions."""
  data = _fixed_inputs_tsv(str(tmp_path / "data"))
  shutil.copy(os.path.join(data, "dev.tsv"), os.path.join(data, "train.tsv"))
  out = str(tmp_path / "run")
  run_main(run_classifier, task_name="tsv", data_dir=data, text_a_column="text_a",
           text_b_column="text_b", label_column="label", labels="positive,negative,neutral",
           do_train=True, num_train_epochs=2, train_batch_size=3, learning_rate=1e-2,
           max_seq_length=12, output_dir=out, adapter_size=4, adapter_design="pfeiffer",
           adapter_activation="swish", train_mode="adapters_only", seed=1,
           **{k: interop_base[k] for k in ("init_checkpoint", "bert_config_file",
                                            "vocab_file")})
  trained = os.path.join(out, "adapter_model")
  header = adapter_weights.read_adapter_header(trained)
  assert not [v for v in header["variables"] if modeling.variable_role(v) == "layer_norm"]
  assert header["adapter_config"]["activation"] == "swish"
  hub = str(tmp_path / "hub")
  interop_checks.main_with([f"--export_adapterhub={trained}", f"--output_dir={hub}",
            f"--init_checkpoint={interop_base['init_checkpoint']}"])([])
  config = json.load(open(os.path.join(hub, adapterhub.CONFIG_FILE)))["config"]
  assert (config["non_linearity"], config["original_ln_before"], config["reduction_factor"]) == (
      "swish", True, 8)
  back = convert_checkpoint.adapterhub_to_adapter_model(
      hub, interop_base["init_checkpoint"], interop_base["bert_config_file"],
      str(tmp_path / "back"), dict(task="t", max_seq_length=12, do_lower_case=True))
  np.testing.assert_allclose(interop_checks.adapter_file_logits(interop_base, back), interop_checks.adapter_file_logits(interop_base, trained),
                             atol=1e-5, rtol=0)


def test_no_pytorch_library_was_imported():
  """Reading torch.save files and AdapterHub's directories and writing them (above,
  in this process) needs none of PyTorch, adapters or transformers."""
  import sys  # pylint: disable=import-outside-toplevel
  assert not {"torch", "adapters", "transformers"} & set(sys.modules)
