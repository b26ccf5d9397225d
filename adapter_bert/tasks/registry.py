"""`task_for(config)`: the task that runs a RunConfig, by the kind of its task settings."""

from adapter_bert.runtime import task_run
from adapter_bert.tasks import configs
from adapter_bert.tasks import multitask
from adapter_bert.tasks import question_answering
from adapter_bert.tasks import sentence_prediction

TASKS = {
    configs.ClassifierConfig: sentence_prediction.ClassifierTask,
    configs.SquadConfig: question_answering.SquadTask,
    configs.MultiTaskConfig: multitask.MultiTaskTask,
}


def task_for(config: configs.RunConfig) -> task_run.Task:
  return TASKS[type(config.task)](config)
