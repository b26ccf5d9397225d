"""PEFT's LoRA adapters in and out: a PEFT adapter directory <-> this project's LoRA.

PEFT (Hugging Face's `peft`, PyTorch) saves a LoRA adapter with
`save_pretrained` as a directory of adapter_config.json (its LoraConfig) and
adapter_model.safetensors (adapter_model.bin with safe_serialization=False),
read here with safetensors, or AdapterHub's reader of torch.save files, and
NumPy: no torch. Its
LoRA Linear computes x W^T + b + s B(A(dropout(x))) with lora_A.weight [r, in],
lora_B.weight [out, r] and s = lora_alpha / r (lora_alpha / sqrt(r) with
use_rslora): this project's LoRA design (adapter_layers.LoRA, x W + b +
s (x A) B) with A = lora_A.weight^T and B = lora_B.weight^T. Dropout acts in
training only, so lora_dropout does not change what a model computes.

Tensor names (after PEFT's `base_model.model.` prefix) -> this project's:

  bert.encoder.layer.N.attention.self.query.lora_A.weight  (transposed)
                                  bert/encoder/layer_N/attention/self/query/adapters/lora_a
  ....query.lora_B.weight         .../query/adapters/lora_b (transposed); the same for value
  bert.<...>.LayerNorm.weight, .bias (modules_to_save)     bert/<...>/LayerNorm/gamma, beta
  classifier.weight, classifier.bias (modules_to_save)     output_weights, output_bias

A projection PEFT did not adapt (target_modules ["query"], layers_to_transform)
gets A = B = 0 here, which adds exactly 0; a LayerNorm it did not save keeps
the base's values. This project's LoRA run trains LoRA, every LayerNorm and the
classifier, so an export saves the LayerNorms too (modules_to_save
["classifier", "LayerNorm"]).

Whatever this project cannot compute exactly is refused with one line naming
the option (errors.UserError): DoRA, LoRA biases, fan_in_fan_out, rank and
alpha patterns, initialisations that change the base's weights (PiSSA, OLoRA,
LoftQ, ...), LoRA on a module other than the query and value projections, a
saved module that is frozen here (e.g. the pooler), a base that is not BERT.
"""

import json
import math
import posixpath
import re
from typing import Dict, NamedTuple, Optional

import keras
import numpy as np
import safetensors.numpy
import tensorflow as tf

from adapter_bert import errors
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import google_release
from adapter_bert.checkpoints import huggingface
from adapter_bert.checkpoints import torch_files
from adapter_bert.storage import file_io
from adapter_bert.storage import input_files
from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.model.modeling import variable_role

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
BIN_FILE = "adapter_model.bin"  # torch.save's, read without torch (torch_files.read_torch_file).
PREFIX = "base_model.model."
# The projections this project's LoRA adapts (adapter_layers.LoRA.places).
TARGET_MODULES = ("query", "value")
# What an export saves whole beside the LoRA weights: what a LoRA run here trains.
MODULES_TO_SAVE = ("classifier", "LayerNorm")
HEAD = {"classifier.weight": "output_weights", "classifier.bias": "output_bias"}

_LORA = re.compile(r"bert\.encoder\.layer\.(\d+)\.attention\.self\.(query|value)"
                   r"\.lora_([AB])\.weight")
_TF1_LORA = re.compile(r"bert/encoder/layer_(\d+)/attention/self/(query|value)"
                       r"/adapters/lora_([ab])")

# LoraConfig keys whose value may be anything (checked where it matters below);
# every other key must be unset (None, False, {} or []): an option of PEFT's
# that is on is refused by name, also one of a newer PEFT than this table.
_FREE_KEYS = frozenset((
    "peft_type", "task_type", "auto_mapping", "peft_version", "base_model_name_or_path",
    "revision", "inference_mode", "r", "lora_alpha", "use_rslora", "target_modules",
    "exclude_modules", "lora_dropout", "modules_to_save", "init_lora_weights",
    "layers_to_transform", "layers_pattern", "bias", "megatron_core", "qalora_group_size",
    "loftq_config", "eva_config", "corda_config", "lora_ga_config", "ensure_weight_tying"))
# Initialisations that leave the base's weights as they are: the adapter then
# applies to the base it names. PiSSA, OLoRA, CorDA and LoftQ change them.
_INITS = (True, False, "gaussian")
# Task types whose model is BertForSequenceClassification's: a classifier head.
_TASK_TYPES = ("SEQ_CLS", None)


class PeftLora(NamedTuple):
  """A PEFT LoRA adapter read and mapped (`read_peft_lora`)."""
  path: str  # Its adapter_model.safetensors.
  adapter_config: AdapterConfig  # Design lora: size r, scaling s.
  num_labels: int  # Rows of its classifier.
  arrays: Dict[str, np.ndarray]  # float32 by this project's TF1 names, as given.
  peft_config: dict  # Its adapter_config.json.


def _is_unset(value) -> bool:
  return value is None or value is False or value == {} or value == []


def lora_config(peft_config: dict, path: str) -> AdapterConfig:
  """This project's AdapterConfig for a PEFT LoraConfig dict (from `path`).

  Raises:
    errors.UserError: naming the first option this project cannot compute exactly.
  """
  if not isinstance(peft_config, dict):
    raise errors.UserError("not a PEFT adapter config: expected a JSON object", path)
  refuse = lambda message: errors.UserError(message, path)
  if peft_config.get("peft_type") != "LORA":
    raise refuse(f"peft_type={json.dumps(peft_config.get('peft_type'))}: only PEFT's LORA "
                 "maps onto this project's adapters")
  for key, value in sorted(peft_config.items()):
    if key not in _FREE_KEYS and not _is_unset(value):
      raise refuse(f"{key}={json.dumps(value)}: not supported (this project's LoRA computes "
                   f"x W + b + s (x A) B and nothing else)")
  if peft_config.get("task_type") not in _TASK_TYPES:
    raise refuse(f"task_type={json.dumps(peft_config['task_type'])}: only SEQ_CLS (a BERT "
                 "sequence classifier, as run_classifier.py's) is supported")
  if peft_config.get("bias", "none") != "none":
    raise refuse(f"bias={json.dumps(peft_config['bias'])}: not supported (PEFT then trains the "
                 "base's biases; only bias=\"none\")")
  if peft_config.get("init_lora_weights", True) not in _INITS:
    raise refuse(f"init_lora_weights={json.dumps(peft_config['init_lora_weights'])}: not "
                 "supported (it changes the base's weights; only true, false, \"gaussian\")")
  for key in ("loftq_config", "eva_config", "corda_config", "lora_ga_config"):
    if not _is_unset(peft_config.get(key)):
      raise refuse(f"{key}: not supported (an initialisation that changes the base or the "
                   "ranks)")
  if peft_config.get("layers_pattern") not in (None, "layer", ["layer"]):
    raise refuse(f"layers_pattern={json.dumps(peft_config['layers_pattern'])}: BERT's "
                 "layers are encoder.layer")
  r, alpha = peft_config.get("r"), peft_config.get("lora_alpha")
  if isinstance(r, bool) or not isinstance(r, int) or r < 1:
    raise refuse(f"r={r!r}: expected an integer >= 1")
  if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha > 0:
    raise refuse(f"lora_alpha={alpha!r}: expected a number > 0")
  scaling = alpha / math.sqrt(r) if peft_config.get("use_rslora") else alpha / r
  return AdapterConfig(size=r, design="lora", scaling=float(scaling))


def _tf1_name(key: str, path: str) -> (str, bool):
  """(this project's name, transpose) of a PEFT tensor key (after PREFIX)."""
  if key in HEAD:
    return HEAD[key], False
  if not key.startswith("bert."):
    raise errors.UserError(f"tensor {key}: not part of a BERT sequence classifier "
                           "(a base that is not BERT?)", path)
  lora = _LORA.fullmatch(key)
  if lora:
    layer, projection, which = lora.groups()
    return (f"bert/encoder/layer_{layer}/attention/self/{projection}/adapters/"
            f"lora_{which.lower()}", True)
  if ".lora_" in key or "lora_magnitude" in key:
    module = key.split(".lora_")[0]
    raise errors.UserError(
        f"LoRA on {module}: no counterpart here (this project's LoRA adapts the query and "
        f"value projections only: target_modules {list(TARGET_MODULES)})", path)
  mapped = huggingface.hf_to_google_name(key[len("bert."):])
  if mapped is None:
    raise errors.UserError(f"tensor {key}: not part of a BERT sequence classifier", path)
  if variable_role(mapped[0]) != "layer_norm":
    module = key.rsplit(".", 1)[0]
    raise errors.UserError(
        f"modules_to_save holds {module}, which this project's LoRA keeps frozen (it "
        "trains LoRA, the LayerNorms and the classifier)", path)
  return mapped


def read_peft_lora(peft_dir: str) -> PeftLora:
  """Reads and maps a PEFT LoRA adapter directory (`save_pretrained`'s).

  Raises:
    errors.UserError: naming the file, if one is missing or unreadable, or the
      option, module or tensor this project cannot compute exactly.
  """
  if not tf.io.gfile.isdir(peft_dir):
    raise errors.UserError("no such directory (--peft_dir takes a PEFT adapter directory: "
                           f"{CONFIG_FILE}, {WEIGHTS_FILE})", peft_dir)
  config_path = posixpath.join(peft_dir, CONFIG_FILE)
  peft_config = input_files.read_json(config_path)
  adapter_config = lora_config(peft_config, config_path)
  path = posixpath.join(peft_dir, WEIGHTS_FILE)
  if not tf.io.gfile.exists(path) and tf.io.gfile.exists(posixpath.join(peft_dir, BIN_FILE)):
    path = posixpath.join(peft_dir, BIN_FILE)  # save_pretrained(safe_serialization=False).
  if not tf.io.gfile.exists(path):
    raise errors.UserError(f"no {WEIGHTS_FILE} (or {BIN_FILE}) here", peft_dir)
  with tf.io.gfile.GFile(path, "rb") as f:
    blob = f.read()
  # Saved in the model's precision (often bfloat16 or float16): widened to float32.
  tensors = huggingface.widen_16_bit(
      torch_files.read_torch_file(blob, path) if path.endswith(BIN_FILE)
      else huggingface.read_safetensors(blob, path), path)
  arrays = {}
  for key in sorted(tensors):
    if not key.startswith(PREFIX):
      raise errors.UserError(f"tensor {key}: not saved by PEFT (no {PREFIX!r} prefix)", path)
    name, transpose = _tf1_name(key[len(PREFIX):], path)
    array = google_release.as_float32(key, tensors[key])
    arrays[name] = np.ascontiguousarray(array.T) if transpose else array
  head = arrays.get("output_weights")
  if head is None or head.ndim != 2 or "output_bias" not in arrays:
    raise errors.UserError("no classifier (classifier.weight and .bias): save a "
                           "BertForSequenceClassification with task_type SEQ_CLS or "
                           "modules_to_save [\"classifier\"]", path)
  for name, array in arrays.items():
    lora = _TF1_LORA.fullmatch(name)
    if lora and array.shape[1 if lora.group(3) == "a" else 0] != adapter_config.size:
      raise errors.UserError(f"{name} has rank {min(array.shape)}, adapter_config.json's r "
                             f"is {adapter_config.size}", path)
  return PeftLora(path, adapter_config, int(head.shape[0]), arrays, peft_config)


def fill_model(model: keras.Model, adapter: PeftLora) -> None:
  """Assigns `adapter`'s arrays to `model` (a BertClassifier of its adapter
  config, num_labels and base, the base loaded), and A = B = 0 where PEFT
  adapted no projection.

  Raises:
    errors.UserError: an array whose shape is not the model's (another base).
  """
  names = model.tf1_variable_map()
  for name, variable in names.items():
    if _TF1_LORA.fullmatch(name) and name not in adapter.arrays:
      variable.assign(np.zeros(variable.shape, np.float32))
  for name, array in adapter.arrays.items():
    if name not in names:
      raise errors.UserError(f"{name} does not exist in a model of the given base (it has "
                             f"{model.config.num_hidden_layers} layers)", adapter.path)
    if tuple(array.shape) != tuple(names[name].shape):
      raise errors.UserError(f"{name} has shape {tuple(array.shape)}, the given base's "
                             f"{tuple(names[name].shape)}: not this adapter's base",
                             adapter.path)
  adapter_weights.forget_fingerprints(model)
  for name, array in adapter.arrays.items():
    names[name].assign(array)


def _peft_key(name: str, path: str) -> (str, bool):
  """The inverse of _tf1_name: (PEFT key after PREFIX, transpose) of a TF1 name."""
  lora = _TF1_LORA.fullmatch(name)
  if lora:
    layer, projection, which = lora.groups()
    return (f"bert.encoder.layer.{layer}.attention.self.{projection}.lora_"
            f"{which.upper()}.weight", True)
  for key, head in HEAD.items():
    if name == head:
      return key, False
  if variable_role(name) == "layer_norm":
    key = re.sub(r"layer_(\d+)", r"layer.\1", name).replace("/", ".")
    key = re.sub(r"\.gamma$", ".weight", re.sub(r"\.beta$", ".bias", key))
    if huggingface.hf_to_google_name(key[len("bert."):]) == (name, False):
      return key, False
  raise errors.UserError(f"variable {name}: PEFT's LoRA format has no place for it (a "
                         "run_classifier.py task of adapter design lora has LoRA, "
                         "LayerNorms and output_weights, output_bias)", path)


def write_peft_lora(adapter_path: str, output_dir: str,
                    base_model_name_or_path: Optional[str] = None) -> str:
  """Writes the adapter file at `adapter_path` (a LoRA run_classifier.py task's)
  as a PEFT adapter directory that `PeftModel.from_pretrained` loads onto
  BertForSequenceClassification of the same base.

  Returns:
    The path of the weights file written.
  Raises:
    errors.UserError: the file is unreadable, not of design lora, or holds a
      variable PEFT's format has no place for (e.g. a SQuAD head).
  """
  path, header, arrays = adapter_weights.read_adapter_file(adapter_path)
  config = AdapterConfig.from_dict(header["adapter_config"])
  if not config.lora:
    raise errors.UserError(f"adapter design {config.design}: PEFT's LoRA format holds "
                           "LoRA adapters only (adapter design lora)", path)
  tensors = {}
  for name in sorted(arrays):
    key, transpose = _peft_key(name, path)
    array = np.asarray(arrays[name], np.float32)
    tensors[PREFIX + key] = np.ascontiguousarray(array.T) if transpose else array
  alpha = config.scaling * config.size  # PEFT's s = lora_alpha / r.
  peft_config = {
      "peft_type": "LORA", "task_type": "SEQ_CLS", "base_model_name_or_path":
      base_model_name_or_path, "inference_mode": True, "r": config.size,
      "lora_alpha": int(alpha) if float(alpha).is_integer() else alpha,
      "use_rslora": False, "target_modules": list(TARGET_MODULES),
      "modules_to_save": list(MODULES_TO_SAVE), "lora_dropout": 0.0, "bias": "none",
      "fan_in_fan_out": False, "init_lora_weights": True, "layers_to_transform": None,
      "layers_pattern": None, "rank_pattern": {}, "alpha_pattern": {}, "use_dora": False,
  }
  blob = safetensors.numpy.save(tensors, metadata={"format": "pt"})
  with file_io.AtomicDirectory(output_dir, what="the PEFT adapter") as tmp:
    with tf.io.gfile.GFile(posixpath.join(tmp, WEIGHTS_FILE), "wb") as f:
      f.write(blob)
    with tf.io.gfile.GFile(posixpath.join(tmp, CONFIG_FILE), "w") as f:
      f.write(json.dumps(peft_config, indent=2, sort_keys=True) + "\n")
  return posixpath.join(output_dir, WEIGHTS_FILE)
