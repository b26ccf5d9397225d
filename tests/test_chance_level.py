"""The warning for a training loss that stays at chance level after warm-up
(runtime/loop.ChanceWatch), and --optimizer reaching the optimizer."""

import json
import logging as py_logging
import math
import os

import numpy as np
import pytest

from adapter_bert.runtime import loop
from run_harness import GLUE, Records, classifier_flags, run_main


def _settings(warmup=4, optimizer="bert"):
  return loop.TrainSettings(output_dir="", train_batch_size=4, num_train_steps=100,
                            num_warmup_steps=warmup, learning_rate=1e-3, optimizer=optimizer)


def _warnings(losses_per_call, settings, chance=math.log(2)):
  records = Records()
  logger = py_logging.getLogger("absl")
  logger.addHandler(records)
  try:
    watch, step = loop.ChanceWatch(chance, settings), 0
    for losses in losses_per_call:
      watch.record(step, np.asarray(losses, np.float32))
      step += len(losses)
  finally:
    logger.removeHandler(records)
  return [m for m in records.messages if "chance level" in m]


def test_a_loss_at_ln_2_after_warm_up_warns_once_naming_the_cause():
  rng = np.random.default_rng(0)
  # Learning during warm-up (4 steps), then at ln 2 for 30 steps, 5 steps a host call.
  losses = [0.69, 0.60, 0.55, 0.50] + list(math.log(2) + rng.normal(0, 0.005, 30))
  lines = _warnings([losses[i:i + 5] for i in range(0, len(losses), 5)], _settings())
  assert len(lines) == 1
  assert lines[0].startswith("WARNING: the training loss is at chance level: 0.69")
  assert "over steps 6-15, after warm-up, against ln(labels) = 0.6931" in lines[0]
  assert "--optimizer=bert, Adam without bias correction" in lines[0]
  assert "lower --learning_rate (now 0.001) or use --optimizer=adamw" in lines[0]
  # With --optimizer=adamw it names the rate alone.
  lines = _warnings([losses], _settings(optimizer="adamw"))
  assert len(lines) == 1 and "--optimizer=adamw)" in lines[0] and "use --optimizer" not in lines[0]


def test_no_warning_while_learning_or_during_warm_up():
  # Below chance from the end of warm-up on.
  assert not _warnings([[0.69] * 4 + [0.62, 0.55, 0.5, 0.45] * 10], _settings())
  # At chance during a long warm-up only (the window is the warm-up's length, 20).
  assert not _warnings([[0.693] * 20 + [0.5] * 40], _settings(warmup=20))
  # Above the band too: a loss that blew up is not chance level (NaN stops the run).
  assert not _warnings([[0.69] * 4 + [1.5] * 20], _settings())


@pytest.fixture(scope="module")
def stsb_adamw_run(base, tmp_path_factory):
  """STS-B (a regression) trained 20 steps at a learning rate of 1e-9 with
  --optimizer=adamw: its output_dir, log lines and the optimizers
  loop.create_optimizer made. One run for two tests: a regression has no chance
  level whatever the optimizer, and the flag reaches the optimizer whatever the task."""
  out = tmp_path_factory.mktemp("stsb") / "out"
  made = []
  create = loop.create_optimizer
  with pytest.MonkeyPatch.context() as monkeypatch:
    monkeypatch.setattr(loop, "create_optimizer",
                        lambda *a, **k: made.append(create(*a, **k)) or made[-1])
    logs = run_main(**classifier_flags(base, task_name="STS-B",
                                       data_dir=os.path.join(GLUE, "STS-B"), output_dir=str(out),
                                       do_train=True, num_train_epochs=10, learning_rate=1e-9,
                                       optimizer="adamw"))
  return out, logs, made


def test_a_run_that_cannot_move_from_chance_is_warned_and_a_regression_is_not(base, tmp_path,
                                                                            stsb_adamw_run):
  """The tiny BERT whose learning rate cannot move it from its random head (1e-9):
  its loss stays at ln 2 on MRPC, and the log says so once; STS-B (a regression,
  stsb_adamw_run) has no chance level."""
  logs = run_main(**classifier_flags(base, task_name="MRPC", data_dir=os.path.join(GLUE, "MRPC"),
                                     output_dir=str(tmp_path / "mrpc"), do_train=True,
                                     num_train_epochs=10, learning_rate=1e-9))
  lines = [l for l in logs if "chance level" in l]
  assert len(lines) == 1 and "against ln(labels) = 0.6931" in lines[0], lines
  _, logs, _ = stsb_adamw_run
  assert not [l for l in logs if "chance level" in l]


def test_the_optimizer_flag_reaches_the_optimizer_and_run_config(stsb_adamw_run):
  out, _, made = stsb_adamw_run
  assert made and made[-1].bias_correction
  with open(out / "run_config.json", encoding="utf-8") as f:
    config = json.load(f)
  assert config["optimizer"] == "adamw"
