"""Parameter accounting of a multi-task model in the papers' terms.

Houlsby et al. (2019) count the parameters of all tasks together as a multiple
of the base model, P (the encoder with its pooler: 109,482,240 for
BERT-base); Mahabadi et al. (2021) give the parameters trained per task: all
that trains, over the number of tasks. A padded head counts only its task's
classes.
"""

from typing import Dict

from absl import logging
import numpy as np

from adapter_bert.model.modeling import variable_role


def _size(variable) -> int:
  return int(np.prod(variable.shape))


def parameter_accounting(model) -> Dict[str, float]:
  """{base, trained, total, hypernetwork, trained_per_task, trained_per_task_share,
  total_multiple, num_tasks}.

  Args:
    model: a multitask.model.MultiTaskClassifier, its trainable flags set.
  """
  names = model.tf1_variable_map()
  hidden, num_tasks = model.config.hidden_size, len(model.tasks)
  heads = {id(v) for v in model.head_variable_map().values()}
  real_heads = sum(t.num_outputs * (hidden + 1) for t in model.tasks)
  base = sum(_size(v) for n, v in names.items()
             if n.startswith("bert/") and variable_role(n) != "adapter")
  trained = real_heads + sum(_size(v) for v in names.values()
                             if v.trainable and id(v) not in heads)
  # Each variable once: a LayerNorm that trains is the base's, shared by all tasks.
  total = real_heads + sum(_size(v) for v in names.values() if id(v) not in heads)
  hypernetwork = sum(_size(v) for n, v in names.items() if n.startswith("hyperformer/"))
  return {"base": base, "trained": trained, "total": total, "hypernetwork": hypernetwork,
          "trained_per_task": trained / num_tasks,
          "trained_per_task_share": trained / num_tasks / base,
          "total_multiple": total / base, "num_tasks": num_tasks}


def log_accounting(counts: Dict[str, float]) -> None:
  if counts["hypernetwork"]:  # adapter-bert's "Adapter Parameters" counts the encoder's own.
    logging.info("***** Hypernetwork Parameters = %d *****", counts["hypernetwork"])
  logging.info("***** Trained Parameters per Task = %d (%.2f%% of the base's %d) *****",
               round(counts["trained_per_task"]), 100 * counts["trained_per_task_share"],
               counts["base"])
  logging.info("***** Parameters for %d Tasks = %.3f x the base *****", counts["num_tasks"],
               counts["total_multiple"])
