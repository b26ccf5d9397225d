"""The tasks of a multi-task run, from run_classifier.py's task flags given as lists.

`--task_name=mrpc,tsv,tsv --data_dir=glue/MRPC,data/a,data/b`: task i is
task_name[i] on data_dir[i]. The tsv columns (`--text_a_column`,
`--text_b_column`, `--label_column`) take one value for every tsv task or one
per task, in task order (an empty `--text_b_column` entry: a single sentence).
A task's name, used for its output directory and in the SavedModel, is the
GLUE task's lower-case name, or a tsv task's data directory's base name.
"""

import dataclasses
import posixpath
import re
from typing import List, Optional, Sequence

from adapter_bert.classification import processors
from adapter_bert import errors
from adapter_bert.multitask.model import TaskHead

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclasses.dataclass(frozen=True)
class TaskData:
  """One task of a multi-task run: its name, processor and data directory."""
  name: str
  task_name: str  # Canonical processor name (metrics follow it).
  data_dir: str
  processor: processors.DataProcessor

  @property
  def is_regression(self) -> bool:
    return self.processor.is_regression

  def head(self) -> TaskHead:
    labels = () if self.is_regression else tuple(self.processor.get_labels())
    return TaskHead(self.name, labels, self.is_regression)


def _per_task(flag: str, values: Sequence[str], count: int) -> List[str]:
  if len(values) == 1:
    return list(values) * count
  if len(values) != count:
    raise errors.UserError(f"--{flag} has {len(values)} values for {count} tsv tasks: give "
                           "one for all of them or one per tsv task")
  return list(values)


def tasks_from_flags(task_names: Sequence[str], data_dirs: Sequence[str],
                     text_a_columns: Sequence[str], text_b_columns: Optional[Sequence[str]],
                     label_columns: Sequence[str]) -> List[TaskData]:
  """The run's tasks, each with its processor; errors.UserError names the bad flag."""
  if len(task_names) != len(data_dirs):
    raise errors.UserError(f"{errors.flags_named(task_name=','.join(task_names))} "
                           f"names {len(task_names)} tasks but --data_dir gives "
                           f"{len(data_dirs)} directories: one per task")
  names = [processors.canonical_task_name(t) for t in task_names]
  unknown = [t for t, n in zip(task_names, names) if n not in processors.PROCESSORS]
  if unknown:
    raise errors.UserError(f"--task_name: unknown task {unknown[0]!r}; known: "
                           f"{', '.join(sorted(processors.PROCESSORS))}")
  num_tsv = names.count("tsv")
  columns = {}
  if num_tsv:
    columns = {"text_a_column": _per_task("text_a_column", text_a_columns, num_tsv),
               "text_b_column": _per_task("text_b_column", text_b_columns or [""], num_tsv),
               "label_column": _per_task("label_column", label_columns, num_tsv)}
  tasks, tsv_index = [], 0
  for name, data_dir in zip(names, data_dirs):
    if name == "tsv":
      options = {k: v[tsv_index] or None for k, v in columns.items()}
      tsv_index += 1
      processor = processors.get_processor(name, data_dir=data_dir, **options)
      output_name = posixpath.basename(data_dir.rstrip("/"))
    else:
      processor = processors.get_processor(name)
      output_name = name
    if not _NAME.match(output_name):
      raise errors.UserError(f"--data_dir={data_dir}: its base name {output_name!r} cannot "
                             "name a task (letters, digits, _ . -)")
    tasks.append(TaskData(output_name, name, data_dir, processor))
  seen = set()
  for task in tasks:
    if task.name in seen:
      raise errors.UserError(f"two tasks are named {task.name!r}: each --task_name / "
                             "--data_dir pair must be another task")
    seen.add(task.name)
  return tasks
