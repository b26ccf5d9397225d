"""The entry points run in-process on the tiny base (conftest.base), as the tests run them.

run_main parses `--name=value` flags with absl on a fresh FlagValues and runs an
entry point's main (run_classifier.py's unless another `script` is given),
returning the absl log lines; classifier_flags and multitask_flags are the flags
every run of run_classifier.py and run_multitask.py on the tiny base shares; the
read_* functions read what a run wrote. The TINY_* counts are the tiny base's
parameters, by hand, with RUN_FLAGS' adapter size.
"""

import logging as py_logging
import os
import re

import numpy as np
import tensorflow as tf
from absl import flags

import run_classifier

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GLUE = os.path.join(REPO, "data", "glue")
ADAPTER = 8


class Records(py_logging.Handler):
  """The messages of the log records it handles (`level` and above), in order."""

  def __init__(self, level=py_logging.INFO):
    super().__init__(level)
    self.messages = []

  def emit(self, record):
    self.messages.append(record.getMessage())


def run_main(script=run_classifier, **flag_values):
  """Parses `--name=value` flags with absl and runs `script`.main (run_classifier.py's,
  or another entry point with the same define_flags / main); returns log lines."""
  argv = ["script"] + [
      f"--{k}" if v is True else f"--no{k}" if v is False else f"--{k}={v}"
      for k, v in flag_values.items() if v is not None]
  fv = flags.FlagValues()
  script.define_flags(fv)
  fv(argv)
  handler = Records()
  logger = py_logging.getLogger("absl")
  logger.addHandler(handler)
  try:
    script.main([], fv)
  finally:
    logger.removeHandler(handler)
  return handler.messages


# What every run of run_classifier.py shares, beside the tiny base (conftest.base).
RUN_FLAGS = dict(max_seq_length=32, train_batch_size=4, eval_batch_size=4,
                 predict_batch_size=4, adapter_size=ADAPTER, learning_rate=1e-3, seed=1)


def classifier_flags(base, **overrides):
  """run_classifier.py's flags: the tiny base, RUN_FLAGS, then `overrides`."""
  f = dict(bert_config_file=base["bert_config_file"], vocab_file=base["vocab_file"],
           init_checkpoint=base["init_checkpoint"], **RUN_FLAGS)
  f.update(overrides)
  return f


TINY_HYPER = dict(task_embedding_dim=8, projector_hidden_dim=16, projected_dim=8)
# Two classification tasks, a regression task and a 3-label tsv task.
MULTITASK_TASKS = dict(task_name="mrpc,sst-2,sts-b,tsv",
                       data_dir=",".join([os.path.join(GLUE, "MRPC"),
                                          os.path.join(GLUE, "SST-2"),
                                          os.path.join(GLUE, "STS-B"),
                                          os.path.join(REPO, "data", "tsv_example")]))

# What every run of run_multitask.py shares, beside the tiny base (conftest.base).
MULTITASK_RUN_FLAGS = dict(max_seq_length=32, train_batch_size=4, eval_batch_size=4,
                           predict_batch_size=4, adapter_size=8, learning_rate=1e-2, seed=1,
                           num_train_epochs=2, **MULTITASK_TASKS, **TINY_HYPER)


def multitask_flags(base, **overrides):
  """run_multitask.py's flags: the tiny base, MULTITASK_RUN_FLAGS, then `overrides`."""
  f = dict(bert_config_file=base["bert_config_file"], vocab_file=base["vocab_file"],
           init_checkpoint=base["init_checkpoint"], **MULTITASK_RUN_FLAGS)
  f.update(overrides)
  return f


def read_text(path):
  """The text of the file at `path` (any tf.io.gfile path)."""
  with tf.io.gfile.GFile(path, "r") as f:
    return f.read()


def read_eval_results(path):
  """The numbers of an eval_results.txt, without the checkpoint it names
  (test_eval_only checks that): runs in other directories compare them."""
  text = read_text(path)
  # The original's format: "%s = %s\n" per key, keys sorted (the one path first).
  assert re.fullmatch(r"(checkpoint_path = \S+\n)?([a-z0-9_]+ = [-+.0-9e]+\n)+", text), text
  pairs = [line.split(" = ") for line in text[:-1].split("\n")]
  keys = [k for k, _ in pairs]
  assert keys == sorted(keys)
  return {k: (int(v) if k == "global_step" else float(v)) for k, v in pairs
          if k != "checkpoint_path"}


def read_test_results(path):
  """A test_results.tsv (or eval_predictions.tsv): one row of numbers per example."""
  return np.array([[float(x) for x in line.split("\t")]
                   for line in read_text(path).rstrip("\n").split("\n")])


# Hand-computed for tiny_bert.TINY_CONFIG (H 32, L 2, I 37, V 99, 64 positions,
# 2 token types) and adapter size 8.
TINY_BASE = ((99 + 64 + 2) * 32 + 2 * 32          # embeddings + their LayerNorm: 5,344
             + 2 * (4 * (32 * 32 + 32)             # per layer: attention 4,224
                    + (32 * 37 + 37) + (37 * 32 + 32)  # feed-forward 1,221 + 1,216
                    + 2 * 2 * 32)                   # two LayerNorms 128
             + (32 * 32 + 32))                      # pooler 1,056
TINY_ADAPTERS = 2 * 2 * (32 * 8 + 8 + 8 * 32 + 32)  # two per layer: 2,208
TINY_LAYER_NORMS = 2 * 32 * (1 + 2 * 2)            # 320
