"""What the tests of the adapter converters (AdapterHub, PEFT) share: the fixtures'
inputs, the logits of an imported adapter file, and convert_checkpoint.py called
in-process as its command runs."""

import functools
import json
import os

from absl import flags
import numpy as np
import pytest

from adapter_bert import errors
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.runtime import model_setup
from adapter_bert.model.adapter_layers import AdapterConfig
import convert_checkpoint
from adapter_bert.model import modeling

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "interop")


def inputs():
  """The fixed inputs every fixture's logits were recorded on (int32 arrays)."""
  with open(os.path.join(FIXTURES, "inputs.json")) as f:
    recorded = json.load(f)
  return {k: np.array(recorded[k], np.int32) for k in ("input_ids", "input_mask", "segment_ids")}


def adapter_file_logits(base, adapter_file):
  """The logits of a classifier that loads `adapter_file` as --adapter_checkpoint
  does, onto the converted base (conftest.interop_base), on `inputs()`."""
  header = adapter_weights.read_adapter_header(adapter_file)
  config = modeling.BertConfig.from_json_file(base["bert_config_file"])
  model = modeling.BertClassifier(config, len(header["metadata"]["labels"]) or 1,
                                  AdapterConfig.from_dict(header["adapter_config"]))
  model.ensure_built()
  model_setup.load_base(model, init_checkpoint=base["init_checkpoint"],
                        adapter_checkpoint=adapter_file)
  return model(inputs(), training=False).numpy()


def main_with(argv):
  """convert_checkpoint.main with `argv` parsed into its own flag values."""
  fv = flags.FlagValues()
  convert_checkpoint.define_flags(fv)
  fv(["convert_checkpoint.py"] + argv)
  return functools.partial(convert_checkpoint.main, flag_values=fv)


def one_error_line(capsys, argv):
  """Runs convert_checkpoint as its command does; its one ERROR line (exit 2, no
  traceback)."""
  main = main_with(argv)
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    errors.exit_on_user_error(main)([])
  assert exit_info.value.code == 2
  err = capsys.readouterr().err
  lines = [line for line in err.splitlines() if line.startswith("ERROR")]
  assert "Traceback" not in err and len(lines) == 1 and err.endswith(lines[0] + "\n"), err
  return lines[0]
