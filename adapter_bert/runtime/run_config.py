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


def check(output_dir: str, config: Mapping[str, object], also=()) -> None:
  """Refuses an output_dir whose checkpoints belong to another model.

  Restoring e.g. a 3-label checkpoint into a 2-label model fails deep inside
  tf.train with a shape error, and a same-sized label list in another order
  would not fail at all, so compare the saved settings first.

  Args:
    also: further keys to compare: the task's (e.g. "label_list"), and
      "train_mode" when resuming training, whose optimizer slots exist only
      for the variables that train.
  Raises:
    errors.UserError: naming output_dir and the first setting that differs,
      or run_config.json (and its line) if it cannot be read.
  """
  path = posixpath.join(output_dir, RUN_CONFIG_FILE)
  if not run_checkpoints.latest(output_dir) or not tf.io.gfile.exists(path):
    return
  saved = read(path)
  if not isinstance(saved, dict):
    raise errors.UserError("not a run_config.json: expected a JSON object", path)
  for key in _MODEL_KEYS + tuple(also):
    if key in saved and saved[key] != config.get(key):
      raise errors.UserError(
          f"{output_dir} holds checkpoints of another run: {key} was {saved[key]!r} there "
          f"(see {path}) but is {config.get(key)!r} now; use a fresh --output_dir or the "
          f"same settings")


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
