r"""An adapter bank, or a multi-task run, as one SavedModel that serves every task from
raw text: its modules and signatures, assets.extra/tasks.json, and `export`, which
writes it (the command: export_savedmodel.py at the repository's top level).

export(bank_dir=...): the tasks of an adapter bank (bank/), each trained by
run_classifier.py. The base weights come from bank.json (or the checkpoint or
TF Hub handle given instead) and must have the bank's fingerprint; every task's
adapter file must name that base.
export(multitask_run_dir=...): the tasks of one run_multitask.py output_dir
(serving/multitask_run.py), HyperFormer++ or shared adapters, in the run's
task order. The base comes from its run_config.json (or the one given
instead) and must be the one adapter_model/ was trained on; HyperFormer++
adapters are generated once, at export, and the hypernetwork is not exported.

The SavedModel holds the encoder once, every task's adapters, LayerNorms and
head (serving/stacked_tasks.py), the WordPiece vocabulary as assets/vocab.txt and the
tokenizer as TensorFlow ops (tensorflow_text), so it needs neither this
repository nor Python to run: TensorFlow Serving, or tf.saved_model.load after
`import tensorflow_text`. Adding a bank's task, or removing any task, is a
re-export; nothing retrains. export_dir must be new or empty, or given with overwrite: the
export is written beside it, then renamed in, and replaces only its own files there (OWNED;
others, such as TensorFlow Serving's warmup requests, are kept). For
TensorFlow Serving give a version directory, e.g. models/glue/1 (on gs://, where a rename
copies file by file, saved_model.pb is moved in last: docs/serving.md).

Signatures (batch size B free; S_MAX the largest task max_seq_length, L the
widest head: the most labels of any task, 1 if all are regression):

  serving_default  text_a string [B], text_b string [B], task string [B]
                   text_b "" (or text that tokenizes to nothing) = no second
                   segment, as run_classifier.py treats an empty text_b; each
                   example is truncated as run_classifier.py (run_multitask.py)
                   --do_predict does at its task's max_seq_length.
  token_ids        input_ids, input_mask, segment_ids int32 [B, S] (S <=
                   max_position_embeddings), task string [B]: for inputs
                   tokenized and packed by the caller.
  tokenize         text_a, text_b, task as serving_default -> input_ids,
                   input_mask, segment_ids int32 [B, S_MAX], task_index int32 [B]:
                   what serving_default feeds the model.

serving_default and token_ids return:
  probabilities    float32 [B, L]  softmax over the task's labels, 0 beyond them
                                   (all 0 for a regression task)
  labels           string [B, L]   the task's label names, "" beyond them
  predicted_label  string [B]      the most probable label ("" for regression)
  score            float32 [B]     a regression task's value (0 for classification)
  logits           float32 [B, L]  the task head's outputs, 0 beyond its width
  task_index       int32 [B]       the task's index in assets.extra/tasks.json

A request the model cannot answer fails (InvalidArgumentError, whose message
reaches a TensorFlow Serving client) with a message that says what to change:
a task name that is not in the model (the message lists the model's tasks);
text_a, text_b and task of different lengths; for token_ids, id inputs of
different shapes, a task list of another length than the batch, more columns
than max_position_embeddings, an id outside the vocabulary or segment_ids
outside type_vocab_size. Text longer than its task's max_seq_length is
truncated, as run_classifier.py does. An empty batch (B = 0) is answered
with empty outputs: a signature maps B rows to B rows for every B, so a
client that splits its work into batches needs no special case for an empty
one. assets.extra/tasks.json lists the tasks, labels and lengths for people
and clients.

token_ids_only writes a SavedModel without the tokenizer: its signatures are
token_ids and, with the same inputs, serving_default, and it holds no
tensorflow-text op, so it loads in any TensorFlow runtime (stock TensorFlow
Serving, `saved_model_cli run`, tf.saved_model.load without
tensorflow_text). The raw-text SavedModel needs tensorflow-text's ops
registered in the process that loads it, for every signature (TensorFlow
loads the whole graph). The vocabulary is in assets.extra/vocab.txt for the
clients that tokenize.

Mistakes in the bank, the run or the arguments are errors.UserError (the command's
one `ERROR:` line, status 2).
"""

import json
import os
import posixpath
import sys
import tempfile
from typing import Callable, Dict, List, Optional, Sequence

from absl import logging
import numpy as np
import tensorflow as tf

from adapter_bert.bank import adapter_bank
from adapter_bert.bank import bank_tasks
from adapter_bert.fusion import serving as fusion_serving
from adapter_bert.model import modeling
from adapter_bert.serving import stacked_tasks
from adapter_bert.serving import multitask_run
from adapter_bert.serving import text
from adapter_bert.storage import file_io
from adapter_bert.storage import path_checks
from adapter_bert import tokenization

TASKS_FILE = "assets.extra/tasks.json"
# What a SavedModel loader (TensorFlow Serving) looks for first.
SAVED_MODEL_FILE = tf.saved_model.SAVED_MODEL_FILENAME_PB
# The vocabulary of a --token_ids_only export, for its clients' tokenizer.
CLIENT_VOCAB_FILE = "assets.extra/vocab.txt"
# An export's own files, replaced by --overwrite; the rest of export_dir is
# the user's and kept (e.g. TensorFlow Serving's assets.extra/tf_serving_warmup_requests).
OWNED = (SAVED_MODEL_FILE, "fingerprint.pb", "variables/*", "assets/*", TASKS_FILE,
         CLIENT_VOCAB_FILE)


def _string_spec(name):
  return tf.TensorSpec([None], tf.string, name=name)


def _ids_spec(name):
  return tf.TensorSpec([None, None], tf.int32, name=name)


class TokenIdsModule(tf.Module):
  """What a --token_ids_only SavedModel holds: the multi-task model and the task
  tables, no tokenizer, so no tensorflow-text op anywhere in its graphs."""

  def __init__(self, model: stacked_tasks.StackedTasksBert, tasks: Sequence[bank_tasks.BankTask],
               bert_config: modeling.BertConfig, name: str = "adapter_bank_token_ids"):
    super().__init__(name=name)
    self.model = model
    names = [t.name for t in tasks]
    width = max(t.num_outputs for t in tasks)
    self._names = names
    self._vocab_size = bert_config.vocab_size
    self._type_vocab_size = bert_config.type_vocab_size
    self._max_positions = bert_config.max_position_embeddings
    self.task_table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(names),
                                            tf.range(len(names), dtype=tf.int64)),
        default_value=-1)
    # What the text signatures pack to: the largest of the tasks' max_seq_length.
    self.max_seq_length = max(t.max_seq_length for t in tasks)
    self._task_max_seq_lengths = tf.constant([t.max_seq_length for t in tasks], tf.int32)
    self._labels = tf.constant(
        [list(t.labels) + [""] * (width - len(t.labels)) for t in tasks], tf.string)
    self._num_labels = tf.constant([len(t.labels) for t in tasks], tf.int32)
    self._is_regression = tf.constant([t.is_regression for t in tasks], tf.bool)

  def signatures(self) -> Dict[str, Callable]:
    """For tf.saved_model.save: the signature names and their functions."""
    return {"serving_default": self.serve_token_ids, "token_ids": self.serve_token_ids}

  def _task_index(self, task):
    index = tf.cast(self.task_table.lookup(task), tf.int32)
    known = index >= 0
    check = tf.debugging.Assert(
        tf.reduce_all(known),
        ["Unknown task name(s):", tf.boolean_mask(task, tf.logical_not(known)),
         f"this model serves the tasks: {', '.join(self._names)}"], summarize=20)
    with tf.control_dependencies([check]):
      return tf.identity(index)

  def _outputs(self, logits, task_index):
    width = logits.shape[-1]
    num_labels = tf.gather(self._num_labels, task_index)
    valid = tf.range(width)[tf.newaxis, :] < num_labels[:, tf.newaxis]
    probabilities = tf.nn.softmax(tf.where(valid, logits, -np.inf), axis=-1)
    # A regression row has no valid entry: its NaNs become zeros here.
    probabilities = tf.where(valid, probabilities, 0.0)
    labels = tf.gather(self._labels, task_index)
    is_regression = tf.gather(self._is_regression, task_index)
    best = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
    predicted = tf.gather(labels, best, batch_dims=1)
    return {
        "probabilities": probabilities,
        "labels": labels,
        "predicted_label": tf.where(is_regression, "", predicted),
        "score": tf.where(is_regression, logits[:, 0], 0.0),
        "logits": logits,
        "task_index": task_index,
    }

  def _checked_ids(self, input_ids, input_mask, segment_ids, task):
    """The id inputs after checks whose messages reach a serving client (an
    InvalidArgumentError naming the inputs), in place of a broadcast or gather
    error deep in the encoder, or, on GPU, a silent zero for an id out of range."""
    shape = tf.shape(input_ids)
    same = tf.reduce_all([tf.reduce_all(tf.equal(tf.shape(t), shape))
                          for t in (input_mask, segment_ids)])
    checks = [tf.debugging.Assert(same, [
        "input_ids, input_mask and segment_ids must have the same shape [batch_size, "
        "seq_length]; their shapes:", shape, tf.shape(input_mask), tf.shape(segment_ids)])]
    with tf.control_dependencies(checks):  # The checks below assume one shape.
      checks += [
          tf.debugging.Assert(tf.equal(tf.size(task), shape[0]), [
              "task must have one entry per row of input_ids (equal lengths); rows of "
              "input_ids:", shape[0], "entries of task:", tf.size(task)]),
          tf.debugging.Assert((shape[1] >= 1) & (shape[1] <= self._max_positions), [
              f"input_ids must have 1 to {self._max_positions} columns "
              f"(max_position_embeddings; the text signatures truncate each example at the "
              f"max_seq_length of its task); it has", shape[1]]),
          _assert_in_range(input_ids, self._vocab_size, "input_ids", "the vocabulary size"),
          _assert_in_range(segment_ids, self._type_vocab_size, "segment_ids",
                           "type_vocab_size"),
          _assert_in_range(input_mask, 2, "input_mask", "2 (0 or 1)")]
    with tf.control_dependencies(checks):
      return {"input_ids": tf.identity(input_ids), "input_mask": tf.identity(input_mask),
              "segment_ids": tf.identity(segment_ids)}, tf.identity(task)

  @tf.function(autograph=False, input_signature=[_ids_spec("input_ids"), _ids_spec("input_mask"),
                                _ids_spec("segment_ids"), _string_spec("task")])
  def serve_token_ids(self, input_ids, input_mask, segment_ids, task):
    inputs, task = self._checked_ids(input_ids, input_mask, segment_ids, task)
    task_index = self._task_index(task)
    return self._outputs(self.model(inputs, task_index), task_index)


def _assert_in_range(ids, limit, name, what):
  return tf.debugging.Assert(
      tf.reduce_all((ids >= 0) & (ids < limit)),
      [f"{name} must be in [0, {limit}) ({what}); out of range:",
       tf.boolean_mask(ids, (ids < 0) | (ids >= limit))], summarize=10)


class ServingModule(TokenIdsModule):
  """What the raw-text SavedModel holds: TokenIdsModule and the tokenizer."""

  def __init__(self, model: stacked_tasks.StackedTasksBert, tasks: Sequence[bank_tasks.BankTask],
               bert_config: modeling.BertConfig, tokenizer: text.AssetTokenizer,
               cls_id: int, sep_id: int):
    super().__init__(model, tasks, bert_config, name="adapter_bank_serving")
    self.tokenizer = tokenizer
    self._cls_id, self._sep_id = cls_id, sep_id

  def signatures(self) -> Dict[str, Callable]:
    return {"serving_default": self.serve_text, "token_ids": self.serve_token_ids,
            "tokenize": self.tokenize}

  def _checked_task_index(self, text_a, text_b, task):
    """task_index, after a check that the three inputs have one entry per example: a
    request whose lists differ in length otherwise fails deep in the packing."""
    sizes = tf.stack([tf.size(text_a), tf.size(text_b), tf.size(task)])
    check = tf.debugging.Assert(tf.reduce_all(tf.equal(sizes, sizes[0])), [
        "text_a, text_b and task must have equal lengths (one entry per example; an empty "
        "text_b for a single sentence); their lengths:", sizes])
    with tf.control_dependencies([check]):
      return self._task_index(task)

  # One function that both text signatures call: traced (and stored) once.
  @tf.function(autograph=False, input_signature=[
      _string_spec("text_a"), _string_spec("text_b"), tf.TensorSpec([None], tf.int32)])
  def _pack(self, text_a, text_b, task_index):
    # Both texts in one tokenizer call: half the graph.
    ids = self.tokenizer(tf.concat([text_a, text_b], axis=0))
    batch_size = tf.shape(text_a)[0]
    return text.pack_per_example(ids[:batch_size], ids[batch_size:],
                                 tf.gather(self._task_max_seq_lengths, task_index),
                                 self.max_seq_length, self._cls_id, self._sep_id)

  @tf.function(autograph=False, input_signature=[_string_spec("text_a"), _string_spec("text_b"),
                                _string_spec("task")])
  def serve_text(self, text_a, text_b, task):
    task_index = self._checked_task_index(text_a, text_b, task)
    return self._outputs(self.model(self._pack(text_a, text_b, task_index), task_index),
                         task_index)

  @tf.function(autograph=False, input_signature=[_string_spec("text_a"), _string_spec("text_b"),
                                _string_spec("task")])
  def tokenize(self, text_a, text_b, task):
    task_index = self._checked_task_index(text_a, text_b, task)
    return dict(self._pack(text_a, text_b, task_index), task_index=task_index)


def tasks_description(base: bank_tasks.Base, tasks: Sequence[bank_tasks.BankTask],
                      fusions=None) -> dict:
  """assets.extra/tasks.json: what the SavedModel serves (a fusion task: the
  tasks it fuses, beside the adapter size of theirs)."""
  def entry(i, t):
    d = {"name": t.name, "task_index": i, "labels": list(t.labels),
         "is_regression": t.is_regression, "max_seq_length": t.max_seq_length,
         "adapter_size": t.adapter_config.size, "adapter_design": t.adapter_config.design,
         "global_step": t.metadata.get("global_step")}
    if t.name in (fusions or {}):
      d.update(adapter_size=fusions[t.name].fusion.adapter_config.size,
               fusion_tasks=list(fusions[t.name].fusion.task_names))
    return d
  return {
      "tasks": [entry(i, t) for i, t in enumerate(tasks)],
      # What the text signatures pack to (exports before this name wrote it as
      # "seq_length": read_tasks_description reads both).
      "max_seq_length": max(t.max_seq_length for t in tasks),
      "num_outputs": max(t.num_outputs for t in tasks),
      "do_lower_case": base.do_lower_case,
      "base": base.source,
  }


def read_tasks_description(export_dir: str) -> dict:
  """An export's assets.extra/tasks.json, an older export's too: its
  "seq_length" is read as "max_seq_length" (the key's name since)."""
  with tf.io.gfile.GFile(posixpath.join(export_dir, TASKS_FILE)) as f:
    description = json.load(f)
  if "seq_length" in description:
    description.setdefault("max_seq_length", description.pop("seq_length"))
  return description


def build_module(base: bank_tasks.Base, tasks: Sequence[bank_tasks.BankTask],
                 vocab_asset: str, token_ids_only: bool = False,
                 fusions=None) -> TokenIdsModule:
  """The module to save; `vocab_asset` a file from text.write_vocab_asset, kept until
  saved (the tokenizer's table reads it; with token_ids_only, nothing does);
  `fusions`: the fusion tasks' (fusion/serving.split_fusion_tasks)."""
  vocab_size = text.write_vocab_asset(base.vocab_file, vocab_asset)
  model = stacked_tasks.StackedTasksBert(base.bert_config, base.arrays, tasks, fusions=fusions)
  if token_ids_only:
    return TokenIdsModule(model, tasks, base.bert_config)
  tokenizer = text.AssetTokenizer(vocab_asset, vocab_size, base.do_lower_case)
  vocab = tokenization.load_vocab(base.vocab_file)  # Has them: base_model.check_vocab.
  return ServingModule(model, tasks, base.bert_config, tokenizer, vocab["[CLS]"],
                       vocab["[SEP]"])


def export(bank_dir: Optional[str], export_dir: str, init_checkpoint: Optional[str] = None,
           bert_hub_module_handle: Optional[str] = None,
           task_names: Optional[Sequence[str]] = None,
           multitask_run_dir: Optional[str] = None,
           token_ids_only: bool = False, overwrite: bool = False,
           vocab_file: Optional[str] = None,
           bert_config_file: Optional[str] = None) -> List[bank_tasks.BankTask]:
  """Reads and checks the bank or the multi-task run (exactly one of bank_dir and
  multitask_run_dir), then writes the SavedModel to export_dir (module docstring);
  with token_ids_only, the one without a tokenizer. vocab_file and
  bert_config_file (a bank's only): the base's place where it moved
  (bank_tasks.read_base_weights), as init_checkpoint or bert_hub_module_handle.

  Returns:
    The exported tasks, in task-index order.
  Raises:
    errors.UserError: for a bad bank, run, task or base (bank_tasks,
      multitask_run), or a non-empty export_dir without `overwrite`
      (path_checks.check_output_dir); export_dir is then untouched. With
      `overwrite`, only the export's own files (OWNED) there are replaced.
  """
  path_checks.check_output_dir(export_dir, overwrite)
  if (bank_dir is None) == (multitask_run_dir is None):
    raise ValueError("export needs exactly one of bank_dir and multitask_run_dir")
  if multitask_run_dir is not None and (vocab_file or bert_config_file):
    raise ValueError("vocab_file and bert_config_file are a bank's base's")
  if bank_dir is not None:
    bank = adapter_bank.open_bank(bank_dir)
    tasks = bank_tasks.read_tasks(bank_dir, bank, task_names)
    # AdapterFusion tasks: their fused tasks' adapters, checked unchanged, join them.
    tasks, fusions = fusion_serving.split_fusion_tasks(bank_dir, tasks)
    base = bank_tasks.read_base_weights(bank_dir, bank, init_checkpoint,
                                        bert_hub_module_handle, vocab_file, bert_config_file)
    bank_tasks.check_fingerprints(base, tasks)
  else:  # Its adapter file's fingerprint is checked against the base as it loads.
    fusions = {}
    base, tasks = multitask_run.read_run(multitask_run_dir, task_names, init_checkpoint,
                                         bert_hub_module_handle)
  description = dict(tasks_description(base, tasks, fusions), token_ids_only=token_ids_only)
  with tempfile.TemporaryDirectory() as scratch:
    vocab_asset = os.path.join(scratch, text.VOCAB_ASSET)
    module = build_module(base, tasks, vocab_asset, token_ids_only, fusions)
    # saved_model.pb last: on gs:// the directory is copied file by file, and a
    # server polling for versions loads one as soon as it finds that file.
    with file_io.AtomicDirectory(export_dir, last=[SAVED_MODEL_FILE], what="the export",
                                 owned=OWNED) as tmp:
      tf.saved_model.save(module, tmp, signatures=module.signatures())
      tf.io.gfile.makedirs(posixpath.join(tmp, posixpath.dirname(TASKS_FILE)))
      with tf.io.gfile.GFile(posixpath.join(tmp, TASKS_FILE), "w") as f:
        f.write(json.dumps(description, indent=2) + "\n")
      if token_ids_only:  # For the clients that tokenize; no op of the model reads it.
        tf.io.gfile.copy(vocab_asset, posixpath.join(tmp, CLIENT_VOCAB_FILE))
  logging.info("Exported %d tasks (%s) over %s to %s: %s, %d outputs", len(tasks),
               ", ".join(t.name for t in tasks), base.source, export_dir,
               "token ids in" if token_ids_only else
               f"raw text in, packed to {module.max_seq_length} tokens",
               max(t.num_outputs for t in tasks))
  return tasks


if __name__ == "__main__":
  # The command is a top-level script now; run as one, this module would export nothing.
  sys.stderr.write("ERROR: the export command is export_savedmodel.py, at the repository's "
                   "top level: python export_savedmodel.py --adapter_bank=BANK "
                   "--export_dir=DIR (--help for its flags)\n")
  sys.exit(2)
