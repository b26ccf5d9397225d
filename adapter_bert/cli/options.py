"""Parsed flags -> the plain option objects the library takes (it never reads flags),
and the one rule for a setting an adapter file records against a given flag
(take_recorded). cli/parse.py puts them together into a run's RunConfig."""

import dataclasses
from typing import Dict, Optional, Tuple

from absl import logging

from adapter_bert.model import adapter_layers
from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.cli import flag_checks
from adapter_bert.cli import flags as cli_flags
from adapter_bert import errors
from adapter_bert.runtime import model_setup
from adapter_bert.runtime import startup

def _flag_values(flag_values) -> Tuple[Dict[str, object], set]:
  """ModelOptions' flags by name, and the adapter-config flags that were given."""
  names = [f.name for f in dataclasses.fields(model_setup.ModelOptions)
           if f.name != "adapter"] + list(model_setup.ADAPTER_CONFIG_FLAGS.values())
  values = {name: flag_values[name].value for name in names}
  given = {flag for flag in model_setup.ADAPTER_CONFIG_FLAGS.values()
           if flag_checks.flag_given(flag_values[flag])}
  return values, given


def _take_config(source: str, config: AdapterConfig, values: Dict[str, object],
                 given) -> Dict[str, object]:
  """`config`'s settings as flag values (take_recorded: a given flag must agree)."""
  recorded = {flag: getattr(config, field)
              for field, flag in model_setup.ADAPTER_CONFIG_FLAGS.items()}
  return take_recorded(source, recorded, values, given)


def model_options(flag_values,
                  adapter_checkpoint: Optional[str] = None) -> model_setup.ModelOptions:
  """The adapter flags as ModelOptions; --adapter_size left at its default counts
  as not given (ModelOptions then picks the size the train mode implies).

  Where the adapters come from a file (--adapter_checkpoint, or
  `adapter_checkpoint`: a bank task's), the adapter settings it records are
  taken for the flags left unset (`recorded_adapter_settings`).
  """
  values, given = _flag_values(flag_values)
  if adapter_checkpoint:
    values["adapter_checkpoint"] = adapter_checkpoint
  if values["adapter_checkpoint"]:
    values.update(recorded_adapter_settings(values["adapter_checkpoint"], values, given))
  elif "adapter_size" not in given:
    values["adapter_size"] = None
  return model_options_of(values)


def model_options_of(values: Dict[str, object]) -> model_setup.ModelOptions:
  """ModelOptions of flag values by name (the adapter flags and the other fields'
  flags; others ignored); adapter_size None: not given."""
  fields = {flag: field for field, flag in model_setup.ADAPTER_CONFIG_FLAGS.items()}
  others = {f.name for f in dataclasses.fields(model_setup.ModelOptions)} - {"adapter"}
  return model_setup.ModelOptions(
      adapter={fields[k]: v for k, v in values.items() if k in fields},
      **{k: v for k, v in values.items() if k in others})


def fusion_model_options(flag_values, adapter_config: AdapterConfig,
                         source: str) -> model_setup.ModelOptions:
  """The adapter flags for training a fusion task: its model applies the fused
  tasks' adapters, so their config (`adapter_config`, from `source`) is its
  own, as an adapter file's for `recorded_adapter_settings`."""
  values, given = _flag_values(flag_values)
  values.update(_take_config(source, adapter_config, values, given))
  return model_options_of(values)


def recorded_adapter_settings(adapter_checkpoint: str, values: Dict[str, object],
                              given) -> Dict[str, object]:
  """The adapter flags' values as the adapter file at `adapter_checkpoint` records them.

  An adapter file only fits a model of its own adapter config, so the flags
  left unset take the recorded values (a task trained with --adapter_size=8
  is evaluated without repeating it); a flag given with another value is a
  contradiction, refused.

  Args:
    values: the flags' values by name; `given`: the names of those set.
  Raises:
    errors.UserError: the file is unreadable, or a given flag contradicts it.
  """
  recorded = AdapterConfig.from_dict(
      adapter_weights.read_adapter_header(adapter_checkpoint)["adapter_config"])
  taken = _take_config(adapter_checkpoint, recorded, values, given)
  if ("adapter_placement" not in given
      and recorded.placement == adapter_layers.DEFAULT_PLACEMENTS[recorded.design]):
    taken["adapter_placement"] = None  # As if left out: LoRA takes none.
  return taken


def take_recorded(adapter_checkpoint: str, recorded: Dict[str, object],
                  values: Dict[str, object], given) -> Dict[str, object]:
  """`recorded` (flag -> the value the adapter file records), refusing a flag in
  `given` whose value in `values` contradicts it."""
  for flag, value in recorded.items():
    if flag in given and values[flag] != value:
      raise errors.UserError(
          f"--{flag}={values[flag]}: the adapters at {adapter_checkpoint} were trained "
          f"with {flag} {value}; leave --{flag} out to take it from them")
  return dict(recorded)


def run_options(flag_values,
                model: Optional[model_setup.ModelOptions] = None) -> startup.RunOptions:
  """RunOptions from the flags of the same names (a script without some of them,
  e.g. run_squad.py's --do_eval, gets the defaults); `model` defaults to
  `model_options(flag_values)`."""
  values = {f.name: flag_values[f.name].value for f in dataclasses.fields(startup.RunOptions)
            if f.name != "model" and f.name in flag_values}
  if values.get("use_tpu") and values.get("use_xla"):
    # Ignored, not refused: a TPU compiles every step with XLA anyway, and a
    # command first tried on a CPU or GPU with --use_xla should run unchanged.
    logging.info("--use_xla is ignored with --use_tpu: the TPU compiles every step "
                 "with XLA anyway")
    values["use_xla"] = False
  return startup.RunOptions(model=model or model_options(flag_values), **values)


def tsv_options(flag_values) -> Dict[str, object]:
  """The tsv task's flags that were given (make_processor refuses them for a GLUE task)."""
  return {k: flag_values[k].value for k in cli_flags.TSV_FLAGS if flag_values[k].present}
