"""A training run that resumes with other settings than it recorded is refused.

Rerunning a run's command resumes from its latest checkpoint; with another
--max_seq_length, batch size, schedule, seed, padding, packing, tsv columns or
training data it would go on training something else and record the new
values over the old, so that run_config.json no longer described the weights.
run_config.check compares every recorded setting but the ones
SAFE_TO_CHANGE_ON_RESUME lists, and refuses a difference in one line naming
the flag, the recorded value and the new one, before anything is written.
"""

import os
import re
import shutil

import pytest

from adapter_bert import errors
from adapter_bert.runtime import run_config
from run_harness import run_main

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TSV = os.path.join(REPO, "data", "tsv_example")  # 8 training rows: 2 steps of 4.


def _command(base, out, **overrides):
  f = dict(task_name="tsv", data_dir=TSV, output_dir=out, text_a_column="sentence",
           label_column="label", labels="positive,negative,neutral",
           bert_config_file=base["bert_config_file"], vocab_file=base["vocab_file"],
           init_checkpoint=base["init_checkpoint"], max_seq_length=16, train_batch_size=4,
           adapter_size=4, learning_rate=1e-3, seed=1, do_train=True, num_train_epochs=1,
           save_checkpoints_steps=1)
  f.update(overrides)
  return f


@pytest.fixture(scope="module")
def trained(base, tmp_path_factory):
  out = str(tmp_path_factory.mktemp("trained") / "out")
  run_main(**_command(base, out))
  return out


def _files(directory):
  """Every file under `directory` with its bytes."""
  found = {}
  for d, _, names in os.walk(directory):
    for name in names:
      with open(os.path.join(d, name), "rb") as f:
        found[os.path.relpath(os.path.join(d, name), directory)] = f.read()
  return found


def _more_training_rows(tmp_path):
  """The tsv task with its training rows twice: 4 steps where there were 2."""
  data = str(tmp_path / "data")
  shutil.copytree(TSV, data)
  with open(os.path.join(data, "train.tsv")) as f:
    header, *rows = f.read().splitlines()
  with open(os.path.join(data, "train.tsv"), "w") as f:
    f.write("\n".join([header] + rows + rows) + "\n")
  return data


# The changed flags, the flag the message names, the recorded value and the new one.
CHANGES = {
    "max_seq_length": (dict(max_seq_length=32), "--max_seq_length", 16, 32),
    "train_batch_size": (dict(train_batch_size=2), "--train_batch_size", 4, 2),
    "num_train_epochs": (dict(num_train_epochs=2), "--num_train_epochs", 1.0, 2.0),
    "warmup_proportion": (dict(warmup_proportion=0.5), "--warmup_proportion", 0.1, 0.5),
    "seed": (dict(seed=2), "--seed", 1, 2),
    "do_lower_case": (dict(do_lower_case=False), "--do_lower_case", True, False),
    "pad_to_max_seq_length": (dict(pad_to_max_seq_length=True), "--pad_to_max_seq_length",
                              False, True),
    "group_by_length": (dict(group_by_length=True), "--group_by_length", False, True),
    "pack_sequences": (dict(pack_sequences=True), "--pack_sequences", False, True),
    "text_a_column": (dict(text_a_column="id"), "--text_a_column", "sentence", "id"),
    "num_train_steps": (None, "the training examples, --train_batch_size and "
                        "--num_train_epochs", 2, 4),
}


@pytest.mark.parametrize("key", sorted(CHANGES))
def test_a_resume_with_another_setting_is_refused_and_rewrites_nothing(
    base, trained, tmp_path, key):
  overrides, flag, was, now = CHANGES[key]
  if overrides is None:  # The same flags over other training data.
    overrides = dict(data_dir=_more_training_rows(tmp_path))
  out = str(tmp_path / "out")
  shutil.copytree(trained, out)
  before = _files(out)
  with pytest.raises(errors.UserError) as refused:
    run_main(**_command(base, out, **overrides))
  path = os.path.join(out, run_config.RUN_CONFIG_FILE)
  assert str(refused.value) == (
      f"{flag}: {out} holds checkpoints of a run trained with {key}={was!r} (see {path}), "
      f"not {now!r}; resuming them so would change what they train: give the recorded "
      f"value or use a fresh --output_dir")
  assert _files(out) == before  # run_config.json and adapter_model/ as they were.


def test_what_is_safe_to_change_resumes_and_is_recorded(base, trained, tmp_path):
  """learning_rate, iterations_per_loop, save_checkpoints_steps, --use_xla: resumed."""
  out = str(tmp_path / "out")
  shutil.copytree(trained, out)
  logs = run_main(**_command(base, out, learning_rate=5e-4, iterations_per_loop=2,
                             save_checkpoints_steps=2, use_xla=True))
  assert "***** Running training from step 2 to 2 *****" in logs
  recorded = run_config.read(os.path.join(out, run_config.RUN_CONFIG_FILE))
  assert (recorded["learning_rate"], recorded["iterations_per_loop"],
          recorded["save_checkpoints_steps"], recorded["jit_compile"]) == (5e-4, 2, 2, True)


def test_evaluating_with_other_settings_is_not_a_resume(base, trained, tmp_path):
  """Without --do_train nothing is trained or recorded: another --max_seq_length
  evaluates the same weights at that length."""
  out = str(tmp_path / "out")
  shutil.copytree(trained, out)
  config = _files(out)[run_config.RUN_CONFIG_FILE]
  run_main(**_command(base, out, do_train=False, do_eval=True, max_seq_length=32))
  assert os.path.exists(os.path.join(out, "eval_results.txt"))
  assert _files(out)[run_config.RUN_CONFIG_FILE] == config


def test_the_docs_list_every_setting_safe_to_change():
  """docs/errors.md's table of settings safe to change on resume is the code's."""
  with open(os.path.join(REPO, "docs", "errors.md")) as f:
    section = f.read().split("## Settings safe to change on resume", 1)[1]
  rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
  listed = {key for row in rows for key in re.findall(r"`([a-z_]+)`", row)
            if not key.startswith("run_")}
  assert listed == set(run_config.SAFE_TO_CHANGE_ON_RESUME)
