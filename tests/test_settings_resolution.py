"""A run's settings: resolved once from the flags (cli/parse.py) into one RunConfig
that the task takes whole; one rule for a value an adapter file records against
a given flag, for every entry point; run_config.json written once."""

import ast
import dataclasses
import inspect
import json
import os
import shutil

import keras
import pytest
from absl import flags

from adapter_bert.bank import adapter_bank
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import checkpoint_io
from adapter_bert.cli import options as cli_options
from adapter_bert.cli import parse
from adapter_bert import errors
from adapter_bert.model import modeling
from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.runtime import trainable
from adapter_bert.storage import file_io
from adapter_bert.tasks import configs
from adapter_bert.tasks import registry
import run_classifier
import run_multitask
from run_harness import GLUE, REPO, classifier_flags, multitask_flags, run_main

RECORDED_SIZE = 4  # The adapter files' size; the flag's default is 64.


@pytest.fixture(scope="module")
def sources(base, tmp_path_factory):
  """An adapter file of size RECORDED_SIZE on the tiny base, recorded as a shared-adapter
  multi-task run's too, and a bank holding it as tasks "a" and "b"."""
  root = tmp_path_factory.mktemp("sources")
  keras.utils.set_random_seed(0)
  model = modeling.BertClassifier(modeling.BertConfig.from_json_file(base["bert_config_file"]),
                                  2, AdapterConfig(size=RECORDED_SIZE))
  model.ensure_built()
  checkpoint_io.load_checkpoint(model, base["init_checkpoint"])
  trainable.set_trainable(model, trainable.TrainMode("adapters"))
  adapters = str(root / "adapter_model")
  adapter_weights.save_adapter_weights(model, adapters, metadata=dict(
      task="mrpc", labels=["0", "1"], is_regression=False, max_seq_length=32,
      do_lower_case=True, train_mode="adapters", global_step=0,
      multitask_adapters="shared"))
  bank = str(root / "bank")
  adapter_bank.create_bank(bank, adapter_bank.BankBase(
      "fingerprint", model.config.to_dict(), base["init_checkpoint"], None,
      base["vocab_file"], True))
  for name in ("a", "b"):
    shutil.copytree(adapters, adapter_bank.task_dir(bank, name))
  return dict(adapters=adapters, bank=bank)


def _parsed(script, make_config, flag_values):
  fv = flags.FlagValues()
  script.define_flags(fv)
  fv(["script"] + [f"--{k}" if v is True else f"--{k}={v}"
                   for k, v in flag_values.items() if v is not None])
  return make_config(fv)


def _cases(base, sources, out):
  """Each way an adapter file gives a run its adapters: (script, parse, flags, the file)."""
  mrpc = classifier_flags(base, task_name="MRPC", data_dir=os.path.join(GLUE, "MRPC"),
                          output_dir=out, adapter_size=None)
  bank = sources["bank"]
  return {
      "--adapter_checkpoint": (run_classifier, parse.classifier, dict(
          mrpc, do_eval=True, adapter_checkpoint=sources["adapters"]), sources["adapters"]),
      "--bank_task": (run_classifier, parse.classifier, dict(
          mrpc, do_eval=True, adapter_bank=bank, bank_task="a"),
                      adapter_bank.task_checkpoint(bank, "a")),
      "--fusion_tasks": (run_classifier, parse.classifier, dict(
          mrpc, do_train=True, adapter_bank=bank, bank_task="fused", fusion_tasks="a,b"),
                         f"adapter bank {bank}'s tasks a,b"),
      "run_multitask.py --adapter_checkpoint": (run_multitask, parse.multitask, dict(
          multitask_flags(base, output_dir=out, do_eval=True, adapter_size=None,
                          adapter_checkpoint=sources["adapters"])), sources["adapters"]),
  }


@pytest.mark.parametrize("case", ["--adapter_checkpoint", "--bank_task", "--fusion_tasks",
                                  "run_multitask.py --adapter_checkpoint"])
def test_every_recorded_setting_meets_the_flags_by_one_rule(base, sources, tmp_path,
                                                            monkeypatch, case):
  """The flags left out take what the adapter file records; a given flag that says
  otherwise is refused naming it; and each entry point asks cli_options.take_recorded."""
  script, make_config, flag_values, source = _cases(base, sources, str(tmp_path / "out"))[case]
  asked = []
  rule = cli_options.take_recorded
  monkeypatch.setattr(cli_options, "take_recorded",
                      lambda src, *args: asked.append(src) or rule(src, *args))
  config = _parsed(script, make_config, flag_values)
  assert asked == [source]
  assert config.options.model.adapter_config().size == RECORDED_SIZE
  with pytest.raises(errors.UserError, match=(
      f"^--adapter_size=16: the adapters at {source} were trained with adapter_size "
      f"{RECORDED_SIZE}; leave --adapter_size out to take it from them$")):
    _parsed(script, make_config, dict(flag_values, adapter_size=16))
  assert not os.path.exists(tmp_path / "out")  # Resolving writes nothing.


def test_a_task_takes_its_config_whole(base, sources, tmp_path):
  """Every entry point's task is built of the RunConfig alone: no flags, no callbacks."""
  config = _parsed(run_classifier, parse.classifier, _cases(
      base, sources, str(tmp_path))["--bank_task"][2])
  assert isinstance(config, configs.RunConfig)
  assert registry.task_for(config).options is config.options
  assert len(registry.TASKS) == 3
  for task_class in registry.TASKS.values():
    assert list(inspect.signature(task_class.__init__).parameters) == ["self", "config"]

  def values(node):
    if dataclasses.is_dataclass(node):
      for field in dataclasses.fields(node):
        yield from values(getattr(node, field.name))
    elif isinstance(node, (list, tuple)):
      for item in node:
        yield from values(item)
    elif isinstance(node, dict):
      yield from node.values()
    else:
      yield node
  assert not [v for v in values(config) if callable(v)]


def _imports_absl_flags(path):
  tree = ast.parse(open(path).read())
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module == "absl" and any(
        a.name == "flags" for a in node.names):
      return True
    if isinstance(node, ast.Import) and any(a.name == "absl.flags" for a in node.names):
      return True
  return False


def test_no_library_module_outside_cli_reads_a_flag():
  package = os.path.join(REPO, "adapter_bert")
  modules = [os.path.join(d, f) for d, _, files in os.walk(package) for f in files
             if f.endswith(".py")]
  readers = [os.path.relpath(m, REPO) for m in modules if _imports_absl_flags(m)]
  assert readers and all(r.startswith(os.path.join("adapter_bert", "cli")) for r in readers), \
      readers


def test_run_config_json_is_written_once(base, tmp_path, monkeypatch):
  """A packed training run counts its steps in packed rows before run_config.json
  is written, which then holds them: one write."""
  written = []
  atomic_write = file_io.atomic_write
  def counting(path, *args, **kwargs):
    written.append(os.path.basename(path))
    return atomic_write(path, *args, **kwargs)
  monkeypatch.setattr(file_io, "atomic_write", counting)
  out = str(tmp_path / "packed")
  run_main(**classifier_flags(base, task_name="SST-2", data_dir=os.path.join(GLUE, "SST-2"),
                              output_dir=out, do_train=True, pack_sequences=True,
                              num_train_epochs=1, train_batch_size=3))
  assert written.count("run_config.json") == 1
  with open(os.path.join(out, "run_config.json")) as f:
    config = json.load(f)
  assert config["packed_rows_per_batch"] >= 1
  assert config["num_train_steps"] == int(open(os.path.join(out, "checkpoint")).read()
                                          .split("model.ckpt-")[1].split('"')[0])
