"""The pre-trained encoder a run starts from: its config, its vocabulary, its weights.

Google's releases come as bert_config.json + vocab.txt + a checkpoint (read
later, into the built model, by checkpoint_io). A TF Hub / Model Garden BERT
SavedModel (--bert_hub_module_handle) carries all three: its weights are read
into memory here under Google's names (nothing is written), and its config and
vocabulary stand in for the two flags.

Every fault of these files (missing, unreadable, malformed, a vocabulary or a
--max_seq_length that does not fit the config) is an errors.UserError that
names the file, before any work is done.
"""

import dataclasses
from typing import Optional

import tensorflow as tf
from absl import logging

from adapter_bert.checkpoints import tf2_encoder
from adapter_bert import errors
from adapter_bert.model import modeling
from adapter_bert import tokenization

# Tokens the scripts look up by name: a vocabulary without them is not BERT's.
REQUIRED_TOKENS = ("[CLS]", "[SEP]", "[UNK]")


@dataclasses.dataclass(frozen=True)
class Base:
  """The pre-trained encoder a run starts from."""
  bert_config: modeling.BertConfig
  vocab_file: str
  hub_encoder: Optional[tf2_encoder.Tf2Encoder] = None  # with --bert_hub_module_handle


def read_base_files(bert_config_file: Optional[str], vocab_file: Optional[str],
                    do_lower_case: bool, max_seq_length: int,
                    hub_module_handle: Optional[str] = None) -> Base:
  """Checks the flags that describe the base encoder and reads its config (and Hub weights).

  With a hub module handle, bert_config_file and vocab_file are optional:
  sizes are then inferred from the weights and the vocabulary is the
  SavedModel's own.
  """
  hub_encoder = None
  if hub_module_handle:
    hub_encoder = read_hub_encoder(hub_module_handle, bert_config_file, vocab_file)
    if hub_encoder.do_lower_case not in (None, do_lower_case):
      raise errors.UserError(
          f"--bert_hub_module_handle {hub_module_handle} states do_lower_case="
          f"{hub_encoder.do_lower_case}: pass --do_lower_case={hub_encoder.do_lower_case}")
    bert_config = modeling.BertConfig.from_dict(hub_encoder.config)
    bert_config.source = bert_config_file or f"the TF Hub encoder {hub_module_handle}"
    vocab_file = hub_encoder.vocab_file
  else:
    for name, value in (("bert_config_file", bert_config_file), ("vocab_file", vocab_file)):
      if not value:  # absl's wording for a missing required flag.
        raise errors.UserError(f"Flag --{name} must have a value other than None.")
    bert_config = modeling.BertConfig.from_json_file(bert_config_file)
  check_vocab(vocab_file, bert_config)
  if max_seq_length > bert_config.max_position_embeddings:
    raise errors.UserError(
        f"--max_seq_length={max_seq_length} is larger than the model's position table: "
        f"max_position_embeddings is {bert_config.max_position_embeddings} in "
        f"{bert_config.source} (the BERT model was only trained up to sequence length "
        f"{bert_config.max_position_embeddings})")
  return Base(bert_config, vocab_file, hub_encoder)


def check_vocab(vocab_file: str, bert_config: modeling.BertConfig) -> None:
  """Refuses a vocabulary that cannot be the one of `bert_config`'s model.

  A token id past the embedding table would fail only mid-run (or, on some
  devices, read zeros); a missing [CLS], [SEP] or [UNK] only when the first
  example needs it. A vocabulary shorter than the table is allowed (padded
  tables exist) but logged: it is also what a cut-off download looks like.
  """
  vocab = tokenization.load_vocab(vocab_file)
  size = max(vocab.values()) + 1  # Lines, as ids count them (duplicates too).
  if size > bert_config.vocab_size:
    raise errors.UserError(
        f"{size} tokens but vocab_size is {bert_config.vocab_size} in {bert_config.source}: "
        f"this vocabulary is not the model's (ids from {bert_config.vocab_size} on have "
        f"no embedding)", vocab_file)
  missing = [t for t in REQUIRED_TOKENS if t not in vocab]
  if missing:
    raise errors.UserError(f"not a BERT vocabulary (or cut short): no {', '.join(missing)} "
                           f"among its {size} lines", vocab_file)
  if size < bert_config.vocab_size:
    logging.warning("%s has %d tokens < vocab_size %d of %s (a padded embedding table, or "
                    "a cut-off file?)", vocab_file, size, bert_config.vocab_size,
                    bert_config.source)


def read_hub_encoder(handle: str, bert_config_file: Optional[str] = None,
                     vocab_file: Optional[str] = None) -> tf2_encoder.Tf2Encoder:
  """Reads a TF Hub BERT encoder (TF2 SavedModel) into memory under Google's names.

  Its weights are loaded into the task model directly (rather than wrapping
  the SavedModel), which keeps one model class, so adapters can be inserted
  and checkpoints keep the original names.

  Args:
    handle: https:// URL of a TF Hub model, or a local or gs:// SavedModel dir.
    bert_config_file, vocab_file: see `tf2_encoder.read_tf2_encoder`.
  """
  if handle.startswith(("http://", "https://")):
    # Imported here: tensorflow_hub pulls in tf_keras, which only this path needs.
    import tensorflow_hub as hub  # pylint: disable=g-import-not-at-top
    path = hub.resolve(handle)  # Downloads into TFHUB_CACHE_DIR once.
  elif tf.io.gfile.isdir(handle):
    path = handle
  else:
    raise errors.UserError(f"--bert_hub_module_handle: no SavedModel directory {handle}")
  encoder = tf2_encoder.read_tf2_encoder(
      saved_model_dir=path, bert_config_file=bert_config_file, vocab_file=vocab_file)
  if not encoder.vocab_file:
    raise errors.UserError(f"{handle} has no vocabulary (no vocab_file asset, no "
                           f"assets/vocab.txt); pass --vocab_file")
  logging.info("Read TF Hub encoder %s (%d tensors, vocab %s)", handle,
               len(encoder.tensors), encoder.vocab_file)
  return encoder
