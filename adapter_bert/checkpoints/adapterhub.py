"""AdapterHub (the PyTorch `adapters` library) bottleneck adapters <-> this project's.

An AdapterHub adapter directory, as `model.save_adapter(dir, name,
with_head=True)` writes it:

  adapter_config.json   {"config": the BnConfig's options, "model_type", "hidden_size", ...}
  pytorch_adapter.bin   the adapter's weights (torch.save), or adapter.safetensors
  head_config.json      the prediction head, if saved with it
  pytorch_model_head.bin / model_head.safetensors

Read without PyTorch: safetensors with NumPy, a torch.save file by a small
reader of its zip and pickle that builds NumPy arrays and nothing else
(checkpoints/torch_files.py). Their names map to this project's TF1 ones
(docs/adapters_interop.md has the table):

  bert.encoder.layer.N.attention.output.adapters.NAME.adapter_down.0.{weight,bias}
      -> bert/encoder/layer_N/attention/output/adapters/{weights1 (transposed), biases1}
  ...adapter_up.{weight,bias}          -> .../adapters/{weights2 (transposed), biases2}
  ...adapter_norm_after.{weight,bias}  -> .../adapters/LayerNorm/{gamma,beta}
  (output.adapters.NAME: the feed-forward sub-layer's, under output/adapters)
  heads.NAME.1 (layers=1 on the pooler)  -> output_weights, output_bias
  heads.NAME.1, .4 (layers=2, tanh, on [CLS]) -> bert/pooler/dense, output_*

Their configurations are these designs: double_seq_bn (residual around the
adapter before the sub-layer's LayerNorm) is houlsby, seq_bn (original_ln_before:
the adapter reads LN(h + r)) is pfeiffer, par_bn (is_parallel) is parallel;
mh_adapter/output_adapter give the placement, reduction_factor the size
(hidden // it), scaling and non_linearity theirs, ln_after (Houlsby, scaling 1)
the adapter's own LayerNorm, leave_out layers get zero adapters (the identity).
Anything else that would change what the adapter computes is refused with one
line naming the option (`UNSUPPORTED` says why), never approximated.
"""

import json
import posixpath
from typing import Dict, Mapping, NamedTuple, Optional, Tuple

from absl import logging
import numpy as np
from safetensors import numpy as st_numpy
import tensorflow as tf

from adapter_bert import label_lists
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import checkpoint_io
from adapter_bert.checkpoints import huggingface
from adapter_bert.checkpoints import torch_files
from adapter_bert import errors
from adapter_bert.storage import file_io
from adapter_bert.storage import input_files
from adapter_bert.model import adapter_layers
from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.model import modeling

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILES = ("adapter.safetensors", "pytorch_adapter.bin")
HEAD_CONFIG_FILE = "head_config.json"
HEAD_WEIGHTS_FILES = ("model_head.safetensors", "pytorch_model_head.bin")

# AdapterHub's non_linearity (transformers' ACT2FN names, lower-cased) -> ours.
# Only exact equivalents: "gelu" is the erf GELU, "gelu_new" the tanh one.
ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu", "tanh": "tanh",
               "linear": "linear", "gelu": "gelu_erf", "gelu_new": "gelu",
               "gelu_pytorch_tanh": "gelu", "leakyrelu": "leaky_relu",
               "leaky_relu": "leaky_relu"}
# Ours -> the name written on export (the first AdapterHub name of each).
EXPORT_ACTIVATIONS = {ours: theirs for theirs, ours in reversed(list(ACTIVATIONS.items()))}

# BnConfig options and the only values this project computes exactly, or None
# for options read below; an option not listed here at all is refused as unknown.
_FIXED = {
    "adapter_residual_before_ln": False, "ln_before": False, "use_gating": False,
    "phm_layer": False, "inv_adapter": None, "inv_adapter_reduction_factor": None,
    "cross_adapter": False, "stochastic_depth": 0.0, "original_ln_after": True,
}
# Options with no effect on a trained adapter's outputs: initialization, and
# dropout (training only; this project's adapters have none) and the
# hypercomplex layer's settings, unused without phm_layer.
_IGNORED = ("init_weights", "init_weights_seed", "dropout", "architecture", "factorized_phm_W",
            "shared_W_phm", "shared_phm_rule", "factorized_phm_rule", "phm_c_init",
            "phm_init_range", "learn_phm", "hypercomplex_nonlinearity", "phm_rank",
            "phm_bias", "phm_dim")
_READ = ("mh_adapter", "output_adapter", "reduction_factor", "non_linearity",
         "original_ln_before", "residual_before_ln", "is_parallel", "scaling", "ln_after",
         "leave_out")
# Options the `adapters` library tests by their truth.
_TRUTHS = ("is_parallel", "original_ln_before")
# Why a value other than _FIXED's is refused (the one line names the option).
UNSUPPORTED = {
    "adapter_residual_before_ln": "the residual inside the adapter's own LayerNorm",
    "ln_before": "a LayerNorm before the bottleneck",
    "use_gating": "gating",
    "phm_layer": "hypercomplex (Compacter) layers",
    "inv_adapter": "invertible adapters on the embeddings",
    "inv_adapter_reduction_factor": "invertible adapters on the embeddings",
    "cross_adapter": "cross-attention adapters (BERT has no decoder)",
    "stochastic_depth": "stochastic depth",
    "original_ln_after": "adapters without the sub-layer's residual and LayerNorm after them",
}

# Where each sub-layer's adapter is: their module path, our TF1 scope (modeling's).
_SUBLAYERS = {"attention": "attention.output", "feed_forward": "output"}
_SCOPES = {"attention": "attention/output/adapters", "feed_forward": "output/adapters"}


class Imported(NamedTuple):
  """An AdapterHub adapter in this project's terms."""
  adapter_config: AdapterConfig
  arrays: Dict[str, np.ndarray]  # TF1 name -> float32 array (adapters, head, maybe pooler).
  num_labels: int
  labels: Tuple[str, ...]  # The head's label names in output order (label2id); () if none.
  name: str  # The adapter's name in AdapterHub.


# --- Reading files: safetensors, or torch.save without torch -----------------


def _read_weights(directory: str, names: Tuple[str, ...],
                  required: bool = True) -> Optional[Dict[str, np.ndarray]]:
  """The first of `names` in `directory` (safetensors or torch.save), as arrays."""
  for name in names:
    path = posixpath.join(directory, name)
    if not tf.io.gfile.exists(path):
      continue
    with tf.io.gfile.GFile(path, "rb") as f:
      blob = f.read()
    # Saved in the model's precision (often bfloat16 or float16): widened to float32.
    return huggingface.widen_16_bit(
        huggingface.read_safetensors(blob, path) if name.endswith(".safetensors")
        else torch_files.read_torch_file(blob, path), path)
  if required:
    raise errors.UserError(f"no adapter weights here (AdapterHub's save_adapter writes "
                           f"{' or '.join(names)})", directory)
  return None


# --- Their config -> AdapterConfig --------------------------------------------


def _refuse(path: str, option: str, value, why: str):
  raise errors.UserError(f"AdapterHub option {option}={json.dumps(value)} is not supported: "
                         f"{why}", path)


def _size(reduction_factor, hidden_size: int, path: str) -> int:
  """The bottleneck width, as AdapterHub computes it (int(hidden // factor), at least 1)."""
  factor = reduction_factor
  if isinstance(factor, dict):
    if set(factor) != {"default"}:
      _refuse(path, "reduction_factor", factor, "per-layer bottleneck widths (this project's "
              "adapters have one width)")
    factor = factor["default"]
  if isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor <= 0:
    _refuse(path, "reduction_factor", factor, "not a number > 0")
  return max(1, int(hidden_size // factor))


def _design(config: Mapping[str, object], path: str) -> str:
  """The design whose adapterhub_form the options match (those an import
  ignores aside, a missing one at its _BN_DEFAULTS value); of several, the
  one matching the most options.

  Raises:
    errors.UserError: none matches; naming the first option that differs from
      the design the options match furthest (in its form's order).
  """
  # What the library tests by truth (`if config.is_parallel:`) is read so; other
  # options as they are (residual_before_ln may also be "post_add" there).
  config = {k: bool(v) if k in _TRUTHS else v for k, v in config.items()}
  same = lambda value, want: type(value) is type(want) and value == want
  best, nearest = None, None
  for design in adapter_layers.designs():
    if not design.selectable or design.adapterhub_form is None:
      continue
    form = {k: v for k, v in design.adapterhub_form.items() if k not in _IGNORED}
    matched = 0
    for key, value in form.items():
      if not same(config.get(key, _BN_DEFAULTS.get(key)), value):
        break
      matched += 1
    if matched == len(form):
      if best is None or len(form) > len(best[1]):
        best = (design, form)
    elif nearest is None or matched > nearest[0]:
      nearest = (matched, design, form)
  if best is not None:
    return best[0].name
  if nearest is None:
    _refuse(path, "architecture", config.get("architecture"), "no adapter design here has "
            "an AdapterHub form")
  matched, design, form = nearest
  keys = list(form)
  key = keys[matched]
  given = [k for k in keys[:matched] if form[k] != _BN_DEFAULTS.get(k)]
  _refuse(path, key, config.get(key, _BN_DEFAULTS.get(key)),
          (f"with {' and '.join(given)} " if given else "")
          + f"only {json.dumps(form[key])} (design {design.name})")


def adapter_config_from_adapterhub(
    config: Mapping[str, object], hidden_size: int, num_layers: int,
    path: str = CONFIG_FILE) -> Tuple[AdapterConfig, Tuple[int, ...]]:
  """Maps a BnConfig's options to (AdapterConfig, leave_out layers).

  Raises:
    errors.UserError: one line naming the first option (in `path`) whose value
      this project does not compute exactly, or an option it does not know.
  """
  if not isinstance(config, dict) or config.get("architecture") not in (None, "bottleneck"):
    arch = config.get("architecture") if isinstance(config, dict) else config
    _refuse(path, "architecture", arch, "only bottleneck adapters (double_seq_bn, seq_bn, "
            "par_bn) map onto this project's designs")
  for option in sorted(config):
    if option not in _FIXED and option not in _IGNORED and option not in _READ:
      _refuse(path, option, config[option], "an option this converter does not know")
  for option, value in _FIXED.items():
    if config.get(option, value) != value:
      _refuse(path, option, config[option], UNSUPPORTED[option])
  get = lambda option, default=None: config.get(option, default)
  act = str(get("non_linearity", "")).lower()
  if act not in ACTIVATIONS:
    _refuse(path, "non_linearity", get("non_linearity"), "this project computes "
            f"{', '.join(sorted(ACTIVATIONS))}")
  placement = {(True, True): "both", (True, False): "attention",
               (False, True): "feed_forward"}.get((bool(get("mh_adapter")),
                                                   bool(get("output_adapter"))))
  if placement is None:
    _refuse(path, "mh_adapter", get("mh_adapter"), "no adapters: neither mh_adapter nor "
            "output_adapter")
  scaling = get("scaling", 1.0)
  if isinstance(scaling, bool) or not isinstance(scaling, (int, float)) or scaling <= 0:
    _refuse(path, "scaling", scaling, "only a constant factor > 0 (not learned or channel)")
  design = _design(config, path)
  layer_norm = bool(get("ln_after", False))
  if layer_norm and (not adapter_layers.get_design(design).own_layer_norm
                     or float(scaling) != 1.0):
    _refuse(path, "ln_after", True, "an adapter's own LayerNorm only on adapters of design "
            f"{' or '.join(adapter_layers.names_with('own_layer_norm'))} with scaling 1.0")
  leave_out = get("leave_out") or []
  if not (isinstance(leave_out, list) and all(type(n) is int and 0 <= n < num_layers
                                              for n in leave_out)):
    _refuse(path, "leave_out", leave_out, f"not a list of layers 0..{num_layers - 1}")
  try:
    adapter_config = AdapterConfig(
        size=_size(get("reduction_factor"), hidden_size, path), activation=ACTIVATIONS[act],
        placement=placement, layer_norm=layer_norm, design=design, scaling=float(scaling))
  except ValueError as e:
    raise errors.UserError(f"AdapterHub config does not map onto an adapter here: {e}",
                           path) from e
  return adapter_config, tuple(sorted(set(leave_out)))


# --- Weights ------------------------------------------------------------------


def _adapter_arrays(tensors: Mapping[str, np.ndarray], name: str, adapter_config: AdapterConfig,
                    hidden_size: int, num_layers: int, leave_out, path: str
                    ) -> Dict[str, np.ndarray]:
  """Their adapter tensors by our TF1 names; zero adapters in `leave_out` layers."""
  theirs = {k[len("bert."):] if k.startswith("bert.") else k: v for k, v in tensors.items()}
  m = adapter_config.size
  params = {"weights1": ("adapter_down.0.weight", (m, hidden_size), True),
            "biases1": ("adapter_down.0.bias", (m,), False),
            "weights2": ("adapter_up.weight", (hidden_size, m), True),
            "biases2": ("adapter_up.bias", (hidden_size,), False)}
  if adapter_config.layer_norm:
    params.update({"LayerNorm/gamma": ("adapter_norm_after.weight", (hidden_size,), False),
                   "LayerNorm/beta": ("adapter_norm_after.bias", (hidden_size,), False)})
  out, used = {}, set()
  for layer in range(num_layers):
    for sublayer in adapter_config.sublayers:
      prefix = f"encoder.layer.{layer}.{_SUBLAYERS[sublayer]}.adapters.{name}."
      scope = f"bert/encoder/layer_{layer}/{_SCOPES[sublayer]}/"
      for ours, (key, shape, transpose) in params.items():
        if layer in leave_out:  # No adapter there: zero weights add exactly 0.
          value = np.zeros(shape[::-1] if transpose else shape, np.float32)
        else:
          if prefix + key not in theirs:
            raise errors.UserError(f"lacks {prefix + key} (the config says a {sublayer} "
                                   f"adapter of width {m} in every layer)", path)
          value = theirs[prefix + key]
          used.add(prefix + key)
          if value.dtype != np.float32 or value.shape != shape:
            raise errors.UserError(f"{prefix + key} is {value.dtype} {value.shape}, expected "
                                   f"float32 {shape}", path)
          value = value.T if transpose else value
        if ours in ("biases1", "biases2"):
          value = value.reshape(1, -1)  # The Adapter layer's biases are [1, n].
        out[scope + ours] = np.ascontiguousarray(value, np.float32)
  unknown = sorted(set(theirs) - used)
  if unknown:
    raise errors.UserError(f"{len(unknown)} tensors this converter does not map (no "
                           f"counterpart here): {', '.join(unknown[:4])}", path)
  return out


def _head_arrays(head: Mapping[str, object], tensors: Mapping[str, np.ndarray], name: str,
                 hidden_size: int, path: str) -> Tuple[Dict[str, np.ndarray], int]:
  """Their classification head as ClassifierHead's weights (and the pooler's)."""
  config = head.get("config") if isinstance(head, dict) else None
  if not isinstance(config, dict):
    raise errors.UserError("not a head config: no \"config\" object", path)
  get = config.get
  if get("head_type") != "classification":
    _refuse(path, "head_type", get("head_type"), "only a classification head maps onto "
            "run_classifier.py's")
  layers, use_pooler = get("layers"), bool(get("use_pooler", False))
  if (layers, use_pooler) == (2, False):
    if str(get("activation_function")).lower() != "tanh":
      _refuse(path, "activation_function", get("activation_function"), "a 2-layer head "
              "on [CLS] maps onto BERT's pooler, whose activation is tanh")
    hidden, output = "1", "4"
  elif (layers, use_pooler) == (1, True):
    hidden, output = None, "1"
  else:
    _refuse(path, "layers", layers, f"with use_pooler={json.dumps(use_pooler)}: this project's "
            "head is one linear layer on BERT's pooled output (layers=1, use_pooler=true), or "
            "a 2-layer tanh head on [CLS] (layers=2, use_pooler=false: its first layer becomes "
            "the pooler)")
  theirs = {k[len(f"heads.{name}."):]: v for k, v in tensors.items()
            if k.startswith(f"heads.{name}.")}
  unknown = sorted(set(tensors) - {f"heads.{name}.{k}" for k in theirs})
  num_labels = get("num_labels")
  if type(num_labels) is not int or num_labels < 1:
    _refuse(path, "num_labels", num_labels, "not an integer >= 1")

  def take(key, shape):
    if key not in theirs:
      if key.endswith(".bias") and get("bias", True) is False:
        return np.zeros(shape, np.float32)
      raise errors.UserError(f"lacks heads.{name}.{key}", path)
    value = theirs.pop(key)
    if value.dtype != np.float32 or value.shape != shape:
      raise errors.UserError(f"heads.{name}.{key} is {value.dtype} {value.shape}, expected "
                             f"float32 {shape}", path)
    return np.ascontiguousarray(value)

  out = {"output_weights": take(f"{output}.weight", (num_labels, hidden_size)),
         "output_bias": take(f"{output}.bias", (num_labels,))}
  if hidden is not None:
    logging.warning("The head's hidden layer (layers=2 on [CLS]) becomes the adapter file's "
                    "pooler: run_classifier.py --adapter_checkpoint computes it; an adapter "
                    "bank (one frozen pooler for every task) does not take it.")
    out["bert/pooler/dense/kernel"] = np.ascontiguousarray(
        take(f"{hidden}.weight", (hidden_size, hidden_size)).T)
    out["bert/pooler/dense/bias"] = take(f"{hidden}.bias", (hidden_size,))
  unknown += [f"heads.{name}.{k}" for k in theirs]
  if unknown:
    raise errors.UserError(f"head tensors this converter does not map: {', '.join(unknown)}",
                           path)
  return out, num_labels


def _labels(head: Mapping[str, object], num_labels: int, path: str) -> Tuple[str, ...]:
  """The head's label names in output order from its label2id; () without one."""
  label2id = (head.get("config") or {}).get("label2id")
  if not label2id:
    return ()
  ids = sorted(label2id.values()) if isinstance(label2id, dict) else None
  if ids != list(range(num_labels)):  # JSON keeps one of two equal keys: a label lost.
    raise errors.UserError(f"label2id {json.dumps(label2id)} does not number the head's "
                           f"{num_labels} outputs 0..{num_labels - 1} once each", path)
  return tuple(sorted(label2id, key=label2id.get))


def placeholder_labels(labels) -> bool:
  """Whether `labels` are transformers' default names, LABEL_0, LABEL_1, ...: names
  nobody chose, which --labels may replace."""
  return list(labels) == [f"LABEL_{i}" for i in range(len(labels))]


def read_adapterhub(adapterhub_dir: str, bert_config) -> Imported:
  """Reads an AdapterHub adapter directory for a base of `bert_config` (modeling.BertConfig).

  Raises:
    errors.UserError: one line naming the file and the option or tensor that
      does not map exactly onto this project's model.
  """
  if not tf.io.gfile.isdir(adapterhub_dir):
    raise errors.UserError("no such directory (an AdapterHub adapter directory, as "
                           "save_adapter writes it: adapter_config.json and its weights)",
                           adapterhub_dir)
  config_path = posixpath.join(adapterhub_dir, CONFIG_FILE)
  saved = input_files.read_json(config_path)
  if not isinstance(saved, dict) or not isinstance(saved.get("config"), dict):
    raise errors.UserError("not an AdapterHub adapter config: no \"config\" object",
                           config_path)
  if saved.get("model_type", "bert") != "bert":
    _refuse(config_path, "model_type", saved["model_type"], "this project's base is BERT")
  hidden, layers = bert_config.hidden_size, bert_config.num_hidden_layers
  if saved.get("hidden_size", hidden) != hidden:
    raise errors.UserError(f"the adapter is for hidden_size {saved['hidden_size']}, the base "
                           f"has {hidden}", config_path)
  name = saved.get("name")
  if not isinstance(name, str) or not name:
    raise errors.UserError("no adapter \"name\"", config_path)
  adapter_config, leave_out = adapter_config_from_adapterhub(
      saved["config"], hidden, layers, config_path)
  if leave_out:
    logging.info("AdapterHub leave_out=%s: zero adapters (the identity) in those layers.",
                 list(leave_out))
  if saved["config"].get("dropout"):
    logging.info("AdapterHub dropout=%s inside the adapter is not computed here (it acts in "
                 "training only).", saved["config"]["dropout"])
  tensors = _read_weights(adapterhub_dir, WEIGHTS_FILES)
  arrays = _adapter_arrays(tensors, name, adapter_config, hidden, layers, leave_out,
                           posixpath.join(adapterhub_dir, WEIGHTS_FILES[0]))
  head_path = posixpath.join(adapterhub_dir, HEAD_CONFIG_FILE)
  if not tf.io.gfile.exists(head_path):
    raise errors.UserError("no head_config.json: save the adapter with its head "
                           "(save_adapter(..., with_head=True)); run_classifier.py needs one",
                           adapterhub_dir)
  head = input_files.read_json(head_path)
  head_arrays, num_labels = _head_arrays(
      head, _read_weights(adapterhub_dir, HEAD_WEIGHTS_FILES), name, hidden, head_path)
  arrays.update(head_arrays)
  return Imported(adapter_config, arrays, num_labels, _labels(head, num_labels, head_path),
                  name)


# --- Export: this project's adapter file -> an AdapterHub adapter directory ---

ADAPTERHUB_VERSION = "adapters.1.3.0"  # The library version the export was checked with.
# Every BnConfig option, at the values this project's adapters have (the
# design's own are its adapterhub_form): as save_adapter writes the config.
_BN_DEFAULTS = dict(
    _FIXED, init_weights="bert", init_weights_seed=None,
    dropout=0.0, leave_out=[], ln_after=False, original_ln_before=False, is_parallel=False,
    residual_before_ln=True, factorized_phm_W=True, shared_W_phm=False, shared_phm_rule=True,
    factorized_phm_rule=False, phm_c_init="normal", phm_init_range=0.0001, learn_phm=True,
    hypercomplex_nonlinearity="glorot-uniform", phm_rank=1, phm_bias=True, phm_dim=4)


def _reduction_factor(hidden_size: int, size: int) -> float:
  """A reduction_factor for which AdapterHub's int(hidden // factor) is `size`."""
  for factor in (hidden_size / size, hidden_size / (size + 0.5)):
    if int(hidden_size // factor) == size:
      return int(factor) if float(factor).is_integer() else factor
  raise AssertionError(f"no reduction factor gives width {size} of {hidden_size}")


def _bn_config(adapter_config: AdapterConfig, hidden_size: int, path: str) -> dict:
  """The BnConfig options that compute `adapter_config` (errors.UserError if none do)."""
  design = adapter_layers.get_design(adapter_config.design)
  if design.adapterhub_form is None or not adapter_config.size:
    raise errors.UserError(f"adapter design {adapter_config.design} (size "
                           f"{adapter_config.size}) has no AdapterHub bottleneck equivalent"
                           + (" (LoRA: --export_peft)" if design.merges_into_projections
                              else ""), path)
  if adapter_config.activation not in EXPORT_ACTIVATIONS:
    raise errors.UserError(f"adapter activation {adapter_config.activation} has no AdapterHub "
                           "equivalent", path)
  if adapter_config.layer_norm and adapter_config.scaling != 1.0:
    raise errors.UserError("an adapter's own LayerNorm with scaling "
                           f"{adapter_config.scaling}: AdapterHub scales before its ln_after",
                           path)
  placement = adapter_config.placement
  options = dict(
      _BN_DEFAULTS, mh_adapter=placement in ("both", "attention"),
      output_adapter=placement in ("both", "feed_forward"),
      reduction_factor=_reduction_factor(hidden_size, adapter_config.size),
      non_linearity=EXPORT_ACTIVATIONS[adapter_config.activation],
      scaling=float(adapter_config.scaling), ln_after=adapter_config.layer_norm)
  options.update(design.adapterhub_form)  # The design's own (its equation there).
  return options


def _check_carried(arrays, base, path: str) -> None:
  """Refuses a file whose trained weights an AdapterHub adapter and head cannot carry."""
  for tf1_name, value in sorted(arrays.items()):
    role = modeling.variable_role(tf1_name)
    if role == "layer_norm" and not np.array_equal(value, base.get_tensor(tf1_name)):
      raise errors.UserError(f"its LayerNorms were trained ({tf1_name} is not the base's): "
                             "AdapterHub's adapters keep the base's LayerNorms", path)
    if role not in ("adapter", "layer_norm", "head", "pooler") or (
        role == "head" and tf1_name not in ("output_weights", "output_bias")):
      raise errors.UserError(f"{tf1_name} was trained: an AdapterHub adapter and head cannot "
                             "carry it", path)


def _adapterhub_tensors(arrays, name: str) -> Dict[str, np.ndarray]:
  """The adapters' weights under AdapterHub's names (torch's [out, in] kernels)."""
  tensors = {}
  for tf1_name, value in arrays.items():
    if modeling.variable_role(tf1_name) != "adapter":
      continue
    layer, rest = tf1_name[len("bert/encoder/layer_"):].split("/", 1)
    scope, param = rest.rsplit("/adapters/", 1)
    module = {"attention/output": "attention.output", "output": "output"}[scope]
    key = {"weights1": "adapter_down.0.weight", "biases1": "adapter_down.0.bias",
           "weights2": "adapter_up.weight", "biases2": "adapter_up.bias",
           "LayerNorm/gamma": "adapter_norm_after.weight",
           "LayerNorm/beta": "adapter_norm_after.bias"}[param]
    value = np.asarray(value, np.float32)
    value = value.T if param in ("weights1", "weights2") else value.reshape(-1)
    tensors[f"bert.encoder.layer.{layer}.{module}.adapters.{name}.{key}"] = value
  return tensors


def write_adapterhub(adapter_checkpoint: str, init_checkpoint: str, output_dir: str,
                     name: Optional[str] = None, model_name: Optional[str] = None) -> str:
  """Writes an adapter file of this project as an AdapterHub adapter directory.

  `model.load_adapter(output_dir, use_safetensors=True)` on a BertAdapterModel
  of the Hugging Face base that `init_checkpoint` was converted from then
  computes what this project computes: the adapters, and the head as a 2-layer
  tanh head on [CLS] whose first layer is the pooler this model uses (the
  file's, or the base's).

  Args:
    init_checkpoint: the base the adapters were trained on: its pooler, and its
      LayerNorms, which AdapterHub's adapters leave as they are (a file whose
      LayerNorms were trained is refused).
    name: the adapter's name in AdapterHub (default: the task's).
    model_name: the Hugging Face base, recorded as model_name.
  Returns:
    output_dir.
  Raises:
    errors.UserError: one line, for what AdapterHub cannot compute.
  """
  path, header, arrays = adapter_weights.read_adapter_file(adapter_checkpoint)
  config = modeling.BertConfig.from_dict(header["bert_config"])
  adapter_config = AdapterConfig.from_dict(header["adapter_config"])
  bn_config = _bn_config(adapter_config, config.hidden_size, path)
  metadata = header.get("metadata") or {}
  name = name or str(metadata.get("task") or "adapter")
  base = checkpoint_io.checkpoint_reader(checkpoint_io.resolve_checkpoint(init_checkpoint))
  _check_carried(arrays, base, path)
  pooler = {k: arrays[k] if k in arrays else base.get_tensor(k)
            for k in ("bert/pooler/dense/kernel", "bert/pooler/dense/bias")}
  tensors = _adapterhub_tensors(arrays, name)
  head = {f"heads.{name}.1.weight": pooler["bert/pooler/dense/kernel"].T,
          f"heads.{name}.1.bias": pooler["bert/pooler/dense/bias"],
          f"heads.{name}.4.weight": arrays["output_weights"],
          f"heads.{name}.4.bias": arrays["output_bias"]}
  num_labels = int(arrays["output_weights"].shape[0])
  # They become the head's label2id: each once, one per output.
  labels = label_lists.check_labels(metadata.get("labels") or [], "its metadata", path)
  if labels:  # A file without them gets AdapterHub's LABEL_i.
    label_lists.check_label_count(labels, num_labels, "its metadata", path)
  about = {"hidden_size": config.hidden_size, "model_class": "BertAdapterModel",
           "model_name": model_name, "model_type": "bert", "name": name,
           "version": ADAPTERHUB_VERSION}
  labels = labels or [f"LABEL_{i}" for i in range(num_labels)]
  head_config = {"activation_function": "tanh", "bias": True, "dropout_prob": None,
                 "head_type": "classification", "layers": 2, "num_labels": num_labels,
                 "use_pooler": False, "label2id": {label: i for i, label in enumerate(labels)}}
  as_f32 = lambda d: {k: np.ascontiguousarray(v, np.float32) for k, v in d.items()}
  with file_io.AtomicDirectory(output_dir, what="the AdapterHub adapter") as tmp:
    for file_name, content in ((CONFIG_FILE, dict(about, config=bn_config)),
                               (HEAD_CONFIG_FILE, dict(about, config=head_config))):
      with tf.io.gfile.GFile(posixpath.join(tmp, file_name), "w") as f:
        f.write(json.dumps(content, indent=2, sort_keys=True) + "\n")
    for file_name, content in ((WEIGHTS_FILES[0], tensors), (HEAD_WEIGHTS_FILES[0], head)):
      with tf.io.gfile.GFile(posixpath.join(tmp, file_name), "wb") as f:
        f.write(st_numpy.save(as_f32(content)))
  logging.info("Wrote AdapterHub adapter %r (%d adapter tensors, head of %d outputs) to %s",
               name, len(tensors), num_labels, output_dir)
  return output_dir
