"""Parsed flags -> the plain option objects the library takes (it never reads flags)."""

import dataclasses
from typing import Dict, Optional

from cli import flag_checks
from cli import flags as cli_flags
from runtime import model_setup
from runtime import setup


def model_options(flag_values) -> model_setup.ModelOptions:
  """The adapter flags as ModelOptions; --adapter_size left at its default counts
  as not given (ModelOptions then picks the size the train mode implies)."""
  values = {f.name: flag_values[f.name].value
            for f in dataclasses.fields(model_setup.ModelOptions)}
  if not flag_checks.flag_given(flag_values["adapter_size"]):
    values["adapter_size"] = None
  return model_setup.ModelOptions(**values)


def run_options(flag_values,
                model: Optional[model_setup.ModelOptions] = None) -> setup.RunOptions:
  """RunOptions from the flags of the same names (a script without some of them,
  e.g. run_squad.py's --do_eval, gets the defaults); `model` defaults to
  `model_options(flag_values)`."""
  values = {f.name: flag_values[f.name].value for f in dataclasses.fields(setup.RunOptions)
            if f.name != "model" and f.name in flag_values}
  return setup.RunOptions(model=model or model_options(flag_values), **values)


def tsv_options(flag_values) -> Dict[str, object]:
  """The tsv task's flags that were given (make_processor refuses them for a GLUE task)."""
  return {k: flag_values[k].value for k in cli_flags.TSV_FLAGS if flag_values[k].present}
