r"""This project's side of the AdapterHub export check: adapters made here, exported.

Run with the project's venv (make.sh runs it before the PyTorch scripts):

  .venv/bin/python scripts/interop_fixtures/adapterhub_export_tf.py

For each design in EXPORTS, on the tiny base (tests/fixtures/interop/base,
converted with convert_checkpoint.py's hf_bert_to_google): a BertClassifier
with random adapters and head (the LayerNorms stay the base's, as AdapterHub
keeps them; one also with a trained pooler), its adapter-only file
(tests/fixtures/interop/adapterhub_export/<name>/adapter_model/), the
AdapterHub directory convert_checkpoint.py --export_adapterhub writes from it
(the files beside adapter_model/), and tf_logits.json: this project's logits on
inputs.json. adapterhub.py (PyTorch) then loads each with `load_adapter` and
writes torch_check.json; tests/test_adapterhub_import.py checks that the
export still writes these files and that the check passed.
"""

import json
import os
import shutil
import sys
import tempfile

import numpy as np

import convert_checkpoint
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import adapterhub
from adapter_bert.checkpoints import checkpoint_io
from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.model import modeling

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

FIXTURES = os.path.join(REPO, "tests", "fixtures", "interop")
OUT = os.path.join(FIXTURES, "adapterhub_export")
LABELS = ["neg", "neutral", "pos"]

# name -> (adapter config, whether the pooler trains too).
EXPORTS = {
    "houlsby_gelu": (AdapterConfig(size=4), False),
    "houlsby_attention_swish_ln": (
        AdapterConfig(size=3, activation="swish", placement="attention", layer_norm=True), True),
    "pfeiffer_relu_scaled": (AdapterConfig(size=8, design="pfeiffer", activation="relu",
                                           scaling=0.5), False),
    "parallel_both_gelu_erf": (AdapterConfig(size=6, design="parallel", placement="both",
                                             activation="gelu_erf"), False),
}


def features():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with open(os.path.join(FIXTURES, "inputs.json")) as f:
    inputs = json.load(f)
  return {k: tf.constant(inputs[k]) for k in ("input_ids", "input_mask", "segment_ids")}


def convert_base(directory):
  convert_checkpoint.hf_bert_to_google(os.path.join(FIXTURES, "base"), directory)
  return (os.path.join(directory, "bert_model.ckpt"), os.path.join(directory, "bert_config.json"))


def make_export(name, adapter_config, train_pooler, base):
  init_checkpoint, bert_config_file = base
  config = modeling.BertConfig.from_json_file(bert_config_file)
  model = modeling.BertClassifier(config, len(LABELS), adapter_config)
  model.ensure_built()
  checkpoint_io.load_checkpoint(model, init_checkpoint)
  rng = np.random.default_rng(sum(map(ord, name)))
  for tf1_name, variable in model.tf1_variable_map().items():
    role = modeling.variable_role(tf1_name)
    variable.trainable = role in ("adapter", "layer_norm", "head") or (
        train_pooler and role == "pooler")
    if role in ("adapter", "head") or (train_pooler and role == "pooler"):
      variable.assign(0.3 * rng.standard_normal(variable.shape).astype(np.float32))
  out_dir = os.path.join(OUT, name)
  shutil.rmtree(out_dir, ignore_errors=True)
  adapter_dir = os.path.join(out_dir, "adapter_model")
  adapter_weights.save_adapter_weights(model, adapter_dir, dict(
      task=name, labels=LABELS, is_regression=False, max_seq_length=12, do_lower_case=True,
      train_mode="adapters", global_step=0))
  export_dir = os.path.join(tempfile.mkdtemp(), "export")
  adapterhub.write_adapterhub(adapter_dir, init_checkpoint, export_dir, model_name=os.path.join(
      "tests", "fixtures", "interop", "base"))
  for file_name in os.listdir(export_dir):
    shutil.copy(os.path.join(export_dir, file_name), out_dir)
  logits = model(features(), training=False).numpy()
  with open(os.path.join(out_dir, "tf_logits.json"), "w") as f:
    json.dump({"logits": logits.tolist()}, f, indent=1)
    f.write("\n")
  print("exported", name)


def main():
  with tempfile.TemporaryDirectory() as tmp:
    base = convert_base(os.path.join(tmp, "base"))
    for name, (adapter_config, train_pooler) in EXPORTS.items():
      make_export(name, adapter_config, train_pooler, base)


if __name__ == "__main__":
  main()
