r"""PEFT LoRA fixtures: adapters saved by the real `peft`, and the check of an export.

Run in the PyTorch venv (make.sh), never by the test suite:

  benchmarks/.venv-adapterhub/bin/python scripts/interop_fixtures/peft_lora.py

Writes tests/fixtures/interop/peft/:

  <name>/adapter_config.json, adapter_model.safetensors   PEFT's save_pretrained
      (torch_file/: adapter_model.bin, its safe_serialization=False)
  <name>/logits.json   PeftModel's logits on inputs.json (eval mode)

for LoRA configurations of a BertForSequenceClassification on the tiny base
(tiny_base.py), each with its A and B drawn at random (PEFT starts B at 0, an
adapter that would test nothing), and its LayerNorms where it saves them; and
refused_*/, configurations this project refuses (DoRA, LoRA on key and dense).

Then the other way: exported/adapter_model/ is a LoRA adapter file of this
project (random weights, made by this same script run with the project's venv,
`--export_source`, which imports no torch) and exported/peft/ its export
(convert_checkpoint.py --export_peft); exported/logits_here.json holds this
project's logits, exported/logits.json PeftModel.from_pretrained's on
exported/peft/, and exported/check.json their largest difference.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(REPO, "tests", "fixtures", "interop", "peft")
INPUTS = os.path.join(REPO, "tests", "fixtures", "interop", "inputs.json")
BASE_DIR = os.path.join(REPO, "tests", "fixtures", "interop", "base")
PROJECT_PYTHON = os.path.join(REPO, ".venv", "bin", "python")
SEED = 55

# name -> (num_labels, LoraConfig keyword arguments, also draw the LayerNorms).
CONFIGS = {
    "seq_cls_qv": (3, dict(r=8, lora_alpha=16, lora_dropout=0.1), False),
    "rslora": (2, dict(r=4, lora_alpha=6, use_rslora=True, target_modules=["query", "value"]),
               False),
    "query_layer1": (3, dict(r=2, lora_alpha=4, target_modules=["query"],
                             layers_to_transform=[1], init_lora_weights="gaussian"), False),
    "layer_norms": (3, dict(r=4, lora_alpha=4, modules_to_save=["classifier", "LayerNorm"]),
                    True),
    "regression": (1, dict(r=2, lora_alpha=2), False),
    "refused_dora": (2, dict(r=2, lora_alpha=2, use_dora=True), False),
    "refused_key_dense": (2, dict(r=2, lora_alpha=2,
                                  target_modules=["query", "key", "value", "dense"]), False),
    # save_pretrained(safe_serialization=False): adapter_model.bin.
    "torch_file": (2, dict(r=4, lora_alpha=8), False),
}

# The project-side adapter of the export check.
EXPORT_LABELS = ["neg", "neutral", "pos"]
EXPORT_RANK, EXPORT_SCALING = 4, 1.5


def _write_json(path, value):
  with open(path, "w") as f:
    json.dump(value, f, indent=1)
    f.write("\n")


def _relative_base(peft_dir):
  """save_pretrained records the base's absolute path: the fixture names it from the
  repository's root instead, and drops the model card (README.md) that repeats it.
  PEFT keeps target_modules as a set, saved in the string hash's order: sorted here
  so that the fixture is the same on every run."""
  os.remove(os.path.join(peft_dir, "README.md"))
  path = os.path.join(peft_dir, "adapter_config.json")
  with open(path) as f:
    config = json.load(f)
  config["base_model_name_or_path"] = "tests/fixtures/interop/base"
  if isinstance(config.get("target_modules"), list):
    config["target_modules"] = sorted(config["target_modules"])
  with open(path, "w") as f:
    json.dump(config, f, indent=2, sort_keys=True)
    f.write("\n")


def _torch_side():
  import peft  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  import tiny_base  # pylint: disable=import-outside-toplevel

  with open(INPUTS) as f:
    inputs = tiny_base.torch_inputs(json.load(f))

  def base_model(num_labels, seed):
    torch.manual_seed(seed)  # The new classifier's draw.
    model = transformers.BertForSequenceClassification.from_pretrained(
        tiny_base.BASE_DIR, num_labels=num_labels)
    return model.eval()

  def logits(model):
    with torch.no_grad():
      return model(**inputs).logits.double().tolist()

  for i, (name, (num_labels, kwargs, layer_norms)) in enumerate(CONFIGS.items()):
    model = peft.get_peft_model(base_model(num_labels, SEED + i),
                                peft.LoraConfig(task_type="SEQ_CLS", **kwargs))
    torch.manual_seed(SEED + 100 + i)
    with torch.no_grad():
      for key, param in model.named_parameters():
        if "lora_" in key or (layer_norms and "LayerNorm" in key and "modules_to_save" in key):
          param.add_(0.3 * torch.randn_like(param))
    model.eval()
    target = os.path.join(OUT, name)
    shutil.rmtree(target, ignore_errors=True)
    model.save_pretrained(target, safe_serialization=name != "torch_file")
    _relative_base(target)
    expected = logits(model)
    # What a user of the saved directory gets: PEFT's own load, onto a fresh base.
    loaded = peft.PeftModel.from_pretrained(base_model(num_labels, 0), target).eval()
    assert max(abs(a - b) for r, s in zip(logits(loaded), expected) for a, b in zip(r, s)) == 0
    if not name.startswith("refused_"):
      _write_json(os.path.join(target, "logits.json"), {"logits": expected})
    print("wrote", os.path.relpath(target, REPO))

  exported = os.path.join(OUT, "exported")
  subprocess.run([PROJECT_PYTHON, os.path.abspath(__file__), "--export_source"], check=True,
                 cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  model = peft.PeftModel.from_pretrained(base_model(len(EXPORT_LABELS), 0),
                                         os.path.join(exported, "peft")).eval()
  theirs = logits(model)
  with open(os.path.join(exported, "logits_here.json")) as f:
    ours = json.load(f)["logits"]
  diff = max(abs(a - b) for r, s in zip(theirs, ours) for a, b in zip(r, s))
  _write_json(os.path.join(exported, "logits.json"), {"logits": theirs})
  _write_json(os.path.join(exported, "check.json"), {
      "what": "PeftModel.from_pretrained(BertForSequenceClassification of the tiny base, "
              "exported/peft) against this project's model with exported/adapter_model",
      "peft_version": peft.__version__, "max_abs_logit_difference": diff})
  print(f"export check: largest logit difference {diff:.3g}")
  assert diff < 1e-5, diff


def _export_source():
  """The project's side (its venv, no torch): a random LoRA adapter file on the
  converted tiny base, its export, and its logits."""
  os.chdir(REPO)
  import numpy as np  # pylint: disable=import-outside-toplevel
  import convert_checkpoint  # pylint: disable=import-outside-toplevel
  from adapter_bert.model import modeling  # pylint: disable=import-outside-toplevel
  from adapter_bert.checkpoints import adapter_weights  # pylint: disable=import-outside-toplevel
  from adapter_bert.checkpoints import checkpoint_io  # pylint: disable=import-outside-toplevel
  from adapter_bert.checkpoints import peft_lora  # pylint: disable=import-outside-toplevel
  from adapter_bert.runtime import trainable  # pylint: disable=import-outside-toplevel
  from adapter_bert.model.adapter_layers import AdapterConfig  # pylint: disable=import-outside-toplevel

  import keras  # pylint: disable=import-outside-toplevel
  keras.utils.set_random_seed(SEED)  # LoRA's A starts random.
  exported = os.path.join(OUT, "exported")
  with tempfile.TemporaryDirectory() as tmp:
    google = os.path.join(tmp, "base")
    convert_checkpoint.hf_bert_to_google(BASE_DIR, google)
    config = modeling.BertConfig.from_json_file(os.path.join(google, "bert_config.json"))
    model = modeling.BertClassifier(config, len(EXPORT_LABELS), AdapterConfig(
        size=EXPORT_RANK, design="lora", scaling=EXPORT_SCALING))
    model.ensure_built()
    checkpoint_io.load_checkpoint(model, os.path.join(google, "bert_model.ckpt"))
    trainable.set_trainable(model, trainable.TrainMode("adapters"))
    rng = np.random.default_rng(SEED)
    for name, variable in model.tf1_variable_map().items():
      if variable.trainable:  # As if trained: LoRA, LayerNorms, head all moved.
        variable.assign(variable.numpy() + 0.3 * rng.standard_normal(variable.shape))
    shutil.rmtree(exported, ignore_errors=True)
    adapter_weights.save_adapter_weights(model, os.path.join(exported, "adapter_model"), dict(
        task="exported", labels=EXPORT_LABELS, is_regression=False, max_seq_length=12,
        do_lower_case=True, train_mode="adapters", global_step=0))
  peft_lora.write_peft_lora(os.path.join(exported, "adapter_model"),
                            os.path.join(exported, "peft"), "tests/fixtures/interop/base")
  with open(INPUTS) as f:
    inputs = {k: np.array(v, np.int32) for k, v in json.load(f).items()}
  ours = model(inputs, training=False).numpy().astype(np.float64).tolist()
  _write_json(os.path.join(exported, "logits_here.json"), {"logits": ours})


if __name__ == "__main__":
  if sys.argv[1:] == ["--export_source"]:
    _export_source()
  else:
    _torch_side()
