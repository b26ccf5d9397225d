r"""AdapterHub (`adapters`) fixtures: adapters saved by the library, and its logits.

Run in the PyTorch venv (make.sh; tiny_base.py first), never by the test suite:

  benchmarks/.venv-adapterhub/bin/python scripts/interop_fixtures/adapterhub.py \
      [--exports_only]

1. For each configuration in CONFIGS, on the tiny base (tiny_base.py): a
   `BertAdapterModel` gets the adapter and a classification head, every
   adapter and head weight set random (the library starts up-projections at
   zero, which would hide their mapping), and `save_adapter(..., with_head=True)`
   writes tests/fixtures/interop/adapterhub/<name>/ as the library does, with
   logits.json: the library's logits on inputs.json's fixed inputs.
2. For each adapter this project exported to AdapterHub's format
   (tests/fixtures/interop/adapterhub_export/<name>/, written by
   adapterhub_export_tf.py with the TF logits in tf_logits.json), `load_adapter`
   on the same base and the library's logits on the same inputs; the comparison
   goes to torch_check.json beside them. --exports_only: this step alone.
"""

import glob
import json
import os
import sys

import adapters
import torch

import tiny_base

OUT = os.path.join(tiny_base.FIXTURES, "adapterhub")
EXPORTS = os.path.join(tiny_base.FIXTURES, "adapterhub_export")
HEAD_NAME = "task"
NUM_LABELS = 3

# name -> (adapter config, head options, save with safetensors).
CONFIGS = {
    # Houlsby: AdapterHub's default non-linearity is swish, reduction 16 (size 2).
    "double_seq_bn": (adapters.DoubleSeqBnConfig(), {}, False),
    "double_seq_bn_gelu_size8": (
        adapters.DoubleSeqBnConfig(reduction_factor=4, non_linearity="gelu"), {}, True),
    "double_seq_bn_relu_scaled": (
        adapters.DoubleSeqBnConfig(reduction_factor=2, non_linearity="relu", scaling=0.5),
        {"layers": 1, "use_pooler": True}, False),
    "double_seq_bn_ln_after": (
        adapters.DoubleSeqBnConfig(reduction_factor=4, ln_after=True), {}, True),
    "double_seq_bn_attention_only": (
        adapters.DoubleSeqBnConfig(reduction_factor=8, output_adapter=False,
                                   non_linearity="gelu_new"), {}, False),
    # Pfeiffer: relu, reduction 16.
    "seq_bn": (adapters.SeqBnConfig(), {}, False),
    "seq_bn_tanh_scaled": (
        adapters.SeqBnConfig(reduction_factor=4, non_linearity="tanh", scaling=2.0),
        {"layers": 1, "use_pooler": True}, True),
    "seq_bn_leave_out": (
        adapters.SeqBnConfig(reduction_factor={"default": 8}, non_linearity="leakyrelu",
                             leave_out=[0], dropout=0.1), {}, False),
    # Parallel: relu, reduction 2, scaling 4.
    "par_bn": (adapters.ParBnConfig(), {}, False),
    "par_bn_both_silu": (
        adapters.ParBnConfig(mh_adapter=True, reduction_factor=8, non_linearity="silu",
                             scaling=1.0), {}, True),
}


def randomize(module, generator, std=0.3):
  """Every parameter of `module` random: N(0, std) plus 1 for LayerNorm gammas."""
  with torch.no_grad():
    for name, param in module.named_parameters():
      noise = std * torch.randn(param.shape, generator=generator)
      param.copy_(noise + (1.0 if "norm" in name.lower() and name.endswith("weight") else 0.0))


def logits_of(model, inputs):
  with torch.no_grad():
    return model(**tiny_base.torch_inputs(inputs)).logits


def make_fixture(name, config, head_options, safetensors, inputs):
  torch.manual_seed(tiny_base.SEED)
  model = tiny_base.load_base(adapters.BertAdapterModel)
  model.add_adapter(HEAD_NAME, config=config)
  model.add_classification_head(HEAD_NAME, num_labels=NUM_LABELS, **head_options)
  generator = torch.Generator().manual_seed(sum(map(ord, name)))
  for module_name, module in model.named_modules():
    if module_name.endswith(f"adapters.{HEAD_NAME}"):
      randomize(module, generator)
  randomize(model.heads[HEAD_NAME], generator)
  model.set_active_adapters(HEAD_NAME)
  model.eval()
  out_dir = os.path.join(OUT, name)
  os.makedirs(out_dir, exist_ok=True)
  model.save_adapter(out_dir, HEAD_NAME, with_head=True, use_safetensors=safetensors)
  logits = logits_of(model, inputs)
  with open(os.path.join(out_dir, "logits.json"), "w") as f:
    json.dump({"logits": logits.tolist()}, f, indent=1)
    f.write("\n")
  print("wrote", name, tuple(logits.shape))


def check_export(export_dir, inputs):
  """Loads an adapter this project exported; records the library's logits against its TF ones."""
  model = tiny_base.load_base(adapters.BertAdapterModel)
  name = model.load_adapter(export_dir, with_head=True, use_safetensors=True,
                            set_active=True)
  model.eval()
  with open(os.path.join(export_dir, "tf_logits.json")) as f:
    tf_logits = torch.tensor(json.load(f)["logits"])
  logits = logits_of(model, inputs)
  diff = float((logits - tf_logits).abs().max())
  record = {"adapter": name, "adapters_version": adapters.__version__,
            "torch_logits": logits.tolist(), "max_abs_diff": diff, "equal_to_1e-5": diff <= 1e-5}
  with open(os.path.join(export_dir, "torch_check.json"), "w") as f:
    json.dump(record, f, indent=1)
    f.write("\n")
  print("checked export", os.path.basename(export_dir.rstrip("/")), "max |diff|", diff)
  return diff


def main(argv):
  with open(os.path.join(tiny_base.FIXTURES, "inputs.json")) as f:
    inputs = json.load(f)
  if "--exports_only" not in argv:
    for name, (config, head_options, safetensors) in CONFIGS.items():
      make_fixture(name, config, head_options, safetensors, inputs)
  bad = [d for d in sorted(glob.glob(os.path.join(EXPORTS, "*", "")))
         if check_export(d, inputs) > 1e-5]
  if bad:
    raise SystemExit(f"exports whose AdapterHub logits differ by more than 1e-5: {bad}")


if __name__ == "__main__":
  main(sys.argv[1:])
