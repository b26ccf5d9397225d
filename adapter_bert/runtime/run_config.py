"""`run_config.json`: the settings saved with every model in output_dir.

It records what the model is (bert and adapter configs, what trains, the
task's labels) and how it was trained, so a later run can tell whether the
checkpoints it finds in output_dir belong to the model it builds.
"""

import dataclasses
import json
import posixpath
from typing import Mapping, Optional

import tensorflow as tf

from adapter_bert import label_lists
from adapter_bert.checkpoints import base_model
from adapter_bert.checkpoints import run_checkpoints
from adapter_bert import errors
from adapter_bert.runtime import loop
from adapter_bert.runtime import model_setup
from adapter_bert.storage import file_io
from adapter_bert.storage import input_files
from adapter_bert.storage import renamed_keys

RUN_CONFIG_FILE = "run_config.json"

# Keys of run_config.json that fix the model's variables: a checkpoint in
# output_dir is only usable if they match (a task adds its own, e.g. labels).
_MODEL_KEYS = ("bert_config", "adapter_config")

# What a training run that resumes may change, and why (docs/errors.md lists
# them): every other recorded setting would change what the checkpoints go on
# to train, so check compares it and refuses a difference.
SAFE_TO_CHANGE_ON_RESUME = {
    "learning_rate": "the schedule goes on from the checkpoint's step at the new peak rate "
                     "(e.g. lowered after a divergence)",
    "iterations_per_loop": "how many steps one host call runs, not which steps",
    "save_checkpoints_steps": "when checkpoints are written, not what trains",
    "keep_checkpoint_max": "how many checkpoints are kept",
    "jit_compile": "--use_xla: how the same steps are compiled (float rounding aside)",
    "mixed_precision": "the checkpoints are float32 in every precision (docs/tpu.md): the "
                       "same steps, rounded otherwise; float16 starts a fresh loss scale",
    "use_tpu": "where the steps run; the padding it implies is compared "
               "(pad_to_max_seq_length)",
    "init_checkpoint": "where the base is read from: a checkpoint of trained variables "
                       "records its base's fingerprint and refuses another; one of the whole "
                       "model wins over it",
    "bert_hub_module_handle": "as init_checkpoint",
    "adapter_checkpoint": "as init_checkpoint",
    "vocab_file": "where the vocabulary is read from (its size is bert_config's vocab_size, "
                  "compared; another vocabulary of that size at the new path is not "
                  "detected)",
    "data_dirs": "where the tasks' data is read from (its labels and its number of "
                 "examples, through num_train_steps, are compared)",
}

# Counted from the flags and the training data: compared where a packed run
# knows them (after packing, startup.pack_training), after the flags they come from.
DERIVED_KEYS = ("num_train_steps", "num_warmup_steps", "packed_rows_per_batch")

# Recorded only where used: absent means this value (build).
_ABSENT_MEANS = {"pack_sequences": False}

# The flags a recorded setting comes from, where they are not --<key>.
_FLAG_OF = {
    "jit_compile": "--use_xla", "task_names": "--task_name",
    "num_labels": "the task's labels", "is_regression": "--task_name",
    "weight_decay_rate": "the optimizer's weight decay",
    "num_train_steps": "the training examples, --train_batch_size and --num_train_epochs",
    "num_warmup_steps": "num_train_steps and --warmup_proportion",
    "packed_rows_per_batch": "the training examples' lengths and --train_batch_size",
}


def build(options: model_setup.ModelOptions, base: base_model.Base,
               settings: Optional[loop.TrainSettings], **task) -> dict:
  """The run's settings as JSON-able data: the model's, training's and the task's."""
  config = dict(bert_config=base.bert_config.to_dict(),
                adapter_config=options.adapter_config().to_dict(),
                train_mode=str(options.mode()), vocab_file=base.vocab_file,
                init_checkpoint=options.init_checkpoint,
                bert_hub_module_handle=options.bert_hub_module_handle,
                adapter_checkpoint=options.adapter_checkpoint,
                mixed_precision=options.mixed_precision)
  if settings is not None:  # Where the run is written is not a setting of it.
    config.update((k, v) for k, v in dataclasses.asdict(settings).items() if k != "output_dir")
  config.update(task)
  return config


def check(output_dir: str, config: Mapping[str, object], also=(),
          resuming: bool = False, derived: bool = True) -> None:
  """Refuses an output_dir whose checkpoints belong to another model or run.

  Restoring e.g. a 3-label checkpoint into a 2-label model fails deep inside
  tf.train with a shape error, and a same-sized label list in another order
  would not fail at all, so compare the saved settings first. A training run
  that resumes compares every recorded setting but SAFE_TO_CHANGE_ON_RESUME:
  it would otherwise go on training with another --max_seq_length, batch
  size, schedule or data, and record the new value over the old.

  Args:
    also: further keys to compare: the task's (e.g. "label_list"), and
      "train_mode" when resuming training, whose optimizer slots exist only
      for the variables that train.
    resuming: training: compare every recorded setting but the safe ones.
    derived: with `resuming`, DERIVED_KEYS too (a packed run compares them
      once it has counted them).
  Raises:
    errors.UserError: naming output_dir and the first setting that differs
      (with the flag it comes from, when resuming), or run_config.json (and
      its line) if it cannot be read.
  """
  path = posixpath.join(output_dir, RUN_CONFIG_FILE)
  if not run_checkpoints.latest(output_dir) or not tf.io.gfile.exists(path):
    return
  saved = read(path)
  if not isinstance(saved, dict):
    raise errors.UserError("not a run_config.json: expected a JSON object", path)
  for key in _MODEL_KEYS + tuple(also):
    if key not in saved:
      continue
    now, was = _labels_checked(key, config.get(key), saved[key], output_dir, path)
    if was != now:
      raise errors.UserError(
          f"{output_dir} holds checkpoints of another run: {key} was {saved[key]!r} there "
          f"(see {path}) but is {config.get(key)!r} now; use a fresh --output_dir or the "
          f"same settings")
  if resuming:
    _check_resumed(output_dir, path, saved, config, derived)


def _check_resumed(output_dir: str, path: str, saved: Mapping[str, object],
                   config: Mapping[str, object], derived: bool) -> None:
  """check's comparison of a resumed training run's settings (flags first)."""
  keys = sorted(k for k in set(saved) | set(config) | set(_ABSENT_MEANS)
                if k not in SAFE_TO_CHANGE_ON_RESUME and k not in DERIVED_KEYS)
  for key in keys + (list(DERIVED_KEYS) if derived else []):
    if key not in _ABSENT_MEANS and (key not in saved or key not in config):
      continue  # Recorded since this run was written, or no longer: nothing to compare.
    was = saved.get(key, _ABSENT_MEANS.get(key))
    now = json.loads(json.dumps(config.get(key, _ABSENT_MEANS.get(key))))  # Tuples as lists.
    now, was = _labels_checked(key, now, was, output_dir, path)
    if was != now:
      raise errors.UserError(
          f"{_FLAG_OF.get(key, '--' + key)}: {output_dir} holds checkpoints of a run "
          f"trained with {key}={was!r} (see {path}), not {now!r}; resuming them so would "
          f"change what they train: give the recorded value or use a fresh --output_dir")


def _labels_checked(key: str, now, was, output_dir: str, path: str):
  """(now, was) with their labels taken out once the labels' owner,
  label_lists.check_recorded_labels, found them the same (see there)."""
  return label_lists.check_recorded_labels(
      key, now, "this run", was, f"the run whose checkpoints {output_dir} holds", path,
      fix="give the same labels in the same order, or use a fresh --output_dir")


def read(path: str):
  """A run_config.json as read (errors.UserError if it cannot be), a JSON object
  with the keys renamed since it was written under their current names
  (storage/renamed_keys), so an older run is checked and served as before."""
  saved = input_files.read_json(path)
  return renamed_keys.current_keys(saved) if isinstance(saved, dict) else saved


def write(output_dir: str, config: Mapping[str, object], training_run: bool) -> None:
  """Saves `config` as output_dir/run_config.json.

  A training run always does; another run only where there is none, so that
  evaluating does not overwrite the settings of the run that trained the model.
  """
  path = posixpath.join(output_dir, RUN_CONFIG_FILE)
  if training_run or not tf.io.gfile.exists(path):
    file_io.atomic_write(path, json.dumps(config, indent=2, sort_keys=True) + "\n",
                         what="the run's settings")
