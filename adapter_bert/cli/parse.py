"""Parsed flags -> the one RunConfig of a run (tasks/configs.py), per entry point.

  classifier  run_classifier.py's flags
  squad       run_squad.py's
  multitask   run_multitask.py's

Each checks the flags together (flag_checks.validate) and the path flags, then resolves where the adapters come from once:
an adapter file (--adapter_checkpoint, an adapter bank's task, the fused
tasks of a bank) is read header-only, and its recorded settings meet the
given flags by one rule (options.take_recorded). The library below never
reads a flag; the entry points run `task_run.run(registry.task_for(config))`.
"""

import dataclasses

from adapter_bert.bank import adapter_bank
from adapter_bert.classification import processors
from adapter_bert.cli import flag_checks
from adapter_bert.cli import flags as cli_flags
from adapter_bert.cli import multitask_flags
from adapter_bert.cli import options as cli_options
from adapter_bert.cli import path_flags
from adapter_bert.cli import squad_flags
from adapter_bert import errors
from adapter_bert.fusion import fused_tasks
from adapter_bert.runtime import model_setup
from adapter_bert.storage import path_checks
from adapter_bert.tasks import configs


def classifier(F) -> configs.RunConfig:
  """run_classifier.py's RunConfig; with --adapter_bank, the adapters of its task
  (without --do_train) or of the fused tasks (--fusion_tasks) as the model's."""
  flag_checks.validate(F)
  path_flags.check_path_flags(F, cli_flags.classifier_path_flags(F.do_train))
  task = configs.ClassifierConfig(
      task_name=F.task_name, data_dir=F.data_dir, tsv_options=cli_options.tsv_options(F),
      adapter_bank=F.adapter_bank,
      bank_task=F.bank_task or processors.canonical_task_name(F.task_name),
      fusion_tasks=tuple(F.fusion_tasks or ()),
      fusion_regularization=F.fusion_regularization,
      fusion_attentions=F.fusion_attentions, eval_predictions=F.eval_predictions)
  return configs.RunConfig(task, cli_options.run_options(F, _classifier_model(F, task)))


def _classifier_model(F, task: configs.ClassifierConfig) -> model_setup.ModelOptions:
  bank_dir = task.adapter_bank
  if bank_dir and not F.do_train:  # The bank task's adapters, with their settings.
    return cli_options.model_options(
        F, adapter_checkpoint=adapter_bank.task_checkpoint(bank_dir, task.bank_task))
  if bank_dir and task.fusion_tasks:
    if task.bank_task in task.fusion_tasks:
      raise errors.UserError(f"--bank_task={task.bank_task} is one of --fusion_tasks: a "
                             f"fusion task is a bank task of its own; give it another name")
    # The fusion model applies the fused tasks' adapters: their config is its own.
    return cli_options.fusion_model_options(
        F, fused_tasks.fused_adapter_config(bank_dir, task.fusion_tasks),
        f"adapter bank {bank_dir}'s tasks {','.join(task.fusion_tasks)}")
  return cli_options.model_options(F)


def squad(F) -> configs.RunConfig:
  """run_squad.py's RunConfig."""
  flag_checks.validate(F)
  path_flags.check_path_flags(F, dict(
      cli_flags.ENCODER_PATH_FLAGS, **cli_flags.ADAPTER_PATH_FLAGS,
      train_file=path_checks.INPUT_FILE, predict_file=path_checks.INPUT_FILE))
  squad_flags.validate(F.do_train, F.do_predict, F.train_file, F.predict_file,
                       F.max_seq_length, F.max_query_length, F.doc_stride)
  # The task's settings are named after its flags.
  task = configs.SquadConfig(**{f.name: F[f.name].value
                                for f in dataclasses.fields(configs.SquadConfig)})
  return configs.RunConfig(task, cli_options.run_options(F))


def multitask(F) -> configs.RunConfig:
  """run_multitask.py's RunConfig; its model flags left unset take what
  --adapter_checkpoint records (multitask_flags.settings)."""
  flag_checks.validate(F)
  tasks = multitask_flags.checked_tasks(F)  # Start-up checks: each fails before any output.
  values = multitask_flags.settings(F)
  task = configs.MultiTaskConfig(
      tasks=tuple(tasks), multitask_adapters=values["multitask_adapters"],
      hyper_config=multitask_flags.hyperformer_config(values),
      sampling_temperature=F.sampling_temperature, eval_predictions=F.eval_predictions)
  return configs.RunConfig(
      task, cli_options.run_options(F, model=multitask_flags.model_options(values)))
