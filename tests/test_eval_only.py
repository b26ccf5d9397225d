"""Eval- and predict-only through run_squad.py and run_multitask.py say what they evaluate.

As run_classifier.py's (tests/test_run_classifier.py): with no weights from any
source the run is refused in one line naming the weights flags this entry point
has and the --output_dir searched, before anything is written; a base without a
trained head (only --init_checkpoint of an encoder) warns once that the metrics
are chance-level; and the result file names the checkpoint that gave the
weights (`checkpoint_path`, with the `global_step` of the weights).
"""

import json
import os

import pytest

from adapter_bert import errors
import run_multitask
import run_squad
from run_harness import GLUE, run_main

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SQUAD_DEV = os.path.join(REPO, "data", "squad", "dev-v1.1.json")
# Each command's tiny eval-only run, without its weights flags.
SQUAD = dict(max_seq_length=64, doc_stride=24, max_query_length=16, predict_batch_size=4,
             adapter_size=8, do_predict=True, predict_file=SQUAD_DEV)
MULTITASK = dict(task_name="mrpc,sst-2", data_dir=",".join(
    os.path.join(GLUE, t) for t in ("MRPC", "SST-2")), max_seq_length=32, eval_batch_size=4,
                 adapter_size=8, do_eval=True)
COMMANDS = {"squad": (run_squad, SQUAD), "multitask": (run_multitask, MULTITASK)}
UNTRAINED = "the task head is untrained"


def _encoder(base):
  return dict(bert_config_file=base["bert_config_file"], vocab_file=base["vocab_file"])


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_no_weights_is_refused_in_one_line_naming_the_flags(base, tmp_path, command):
  script, flags = COMMANDS[command]
  out = tmp_path / "typo"
  with pytest.raises(errors.UserError) as error:
    run_main(script, output_dir=str(out), **_encoder(base), **flags)
  message = str(error.value)
  assert "\n" not in message and message.startswith("nothing to evaluate"), message
  for flag in ("--init_checkpoint", "--adapter_checkpoint", "--bert_hub_module_handle",
               f"--output_dir={out}"):
    assert flag in message, message
  # Only flags this command has: the bank is run_classifier.py's.
  assert "--adapter_bank" not in message, message
  assert not out.exists()


def test_squad_on_a_base_warns_once_and_names_the_checkpoint(base, tmp_path):
  out = tmp_path / "base_only"
  logs = run_main(run_squad, output_dir=str(out), init_checkpoint=base["init_checkpoint"],
                  **_encoder(base), **SQUAD)
  untrained = [m for m in logs if UNTRAINED in m]
  assert len(untrained) == 1 and "chance-level" in untrained[0], logs[-10:]
  with open(out / "eval_results.json") as f:
    results = json.load(f)
  assert list(results) == ["exact_match", "f1", "global_step", "checkpoint_path"]
  assert results["checkpoint_path"] == base["init_checkpoint"]
  assert results["global_step"] == 0


def test_multitask_on_a_base_warns_once_and_names_the_checkpoint(base, tmp_path):
  out = tmp_path / "base_only"
  logs = run_main(run_multitask, output_dir=str(out), init_checkpoint=base["init_checkpoint"],
                  **_encoder(base), **MULTITASK)
  untrained = [m for m in logs if UNTRAINED in m]
  assert len(untrained) == 1 and "chance-level" in untrained[0], logs[-10:]
  for path in (out / "eval_results.txt", out / "mrpc" / "eval_results.txt",
               out / "sst-2" / "eval_results.txt"):
    lines = path.read_text().splitlines()
    assert lines[0] == "checkpoint_path = " + base["init_checkpoint"], path
    assert "global_step = 0" in lines, path
