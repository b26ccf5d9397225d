"""The tasks a fusion task fuses: read from an adapter bank, checked, recorded.

A fusion task (fusion/model.py) is trained over other tasks' frozen adapters
and means nothing over other weights. Its adapter-only file's metadata names
the fused tasks, in the order fused ("fusion_tasks"), with a fingerprint of
each one's adapters ("fusion_fingerprints"); loading it from the bank refuses,
with one line naming the task, a bank where one of them was removed or has
other adapters since (e.g. retrained).
"""

import dataclasses
import posixpath
from typing import Dict, Optional, Sequence, Tuple

from adapter_bert.model import adapter_layers
from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.bank import adapter_bank
from adapter_bert.bank import bank_tasks
from adapter_bert.checkpoints import adapter_weights
from adapter_bert.checkpoints import fusion_weights
from adapter_bert import errors
from adapter_bert.fusion import model as fusion_model
from adapter_bert.model import modeling

TASKS_KEY, FINGERPRINTS_KEY = fusion_weights.TASKS_KEY, fusion_weights.FINGERPRINTS_KEY


@dataclasses.dataclass(frozen=True)
class Fusion:
  """The fused tasks of a fusion task, read from a bank."""
  bank_dir: str
  tasks: Tuple[fusion_model.FusedTask, ...]
  adapter_config: AdapterConfig  # Of every fused task: the fusion model's.
  regularization: float = fusion_model.DEFAULT_REGULARIZATION

  @property
  def task_names(self) -> Tuple[str, ...]:
    return tuple(t.name for t in self.tasks)

  def fingerprints(self) -> Dict[str, str]:
    return {t.name: fusion_model.fused_fingerprint([t]) for t in self.tasks}

  def metadata(self) -> dict:
    """What the fusion task's adapter file (and run_config.json) records of them."""
    return {TASKS_KEY: list(self.task_names), FINGERPRINTS_KEY: self.fingerprints()}

  def make_model(self, config: modeling.BertConfig,
                 num_labels: int) -> fusion_model.FusionClassifier:
    return fusion_model.FusionClassifier(config, num_labels, self.adapter_config, self.tasks,
                                         self.regularization)


def is_fusion_task(metadata: Optional[dict]) -> bool:
  return TASKS_KEY in (metadata or {})


def fused_adapter_config(bank_dir: str, names: Sequence[str]) -> AdapterConfig:
  """The adapter config of the bank's tasks `names`, the fusion model's, checked to be
  one that fuses; from the tasks' headers alone (no tensor read, nothing written).

  Raises:
    errors.UserError: a name the bank lacks, a task file that cannot be read, one
      without adapters, one that is itself a fusion task, or tasks of different
      adapter configs.
  """
  adapter_bank.open_bank(bank_dir)
  available = adapter_bank.task_names(bank_dir)
  unknown = [n for n in names if n not in available]
  if unknown:
    raise errors.UserError(f"--fusion_tasks: no task {', '.join(map(repr, unknown))} in "
                           f"adapter bank {bank_dir} (it has: {', '.join(available) or 'none'})")
  configs = {}
  for name in names:
    path = bank_tasks.task_weights_file(bank_dir, name)
    header = adapter_weights.read_adapter_header(path)
    metadata = header.get("metadata") or {}
    if is_fusion_task(metadata):
      raise errors.UserError(f"task {name!r} is itself a fusion task (of "
                             f"{', '.join(metadata[TASKS_KEY])}); fuse tasks that "
                             f"trained adapters of their own", path)
    config = AdapterConfig.from_dict(header["adapter_config"])
    if not config.enabled:
      raise errors.UserError(f"task {name!r} has no adapters (--train_mode="
                             f"{metadata.get('train_mode')}): nothing to fuse", path)
    if not adapter_layers.get_design(config.design).fusable or config.scaling != 1.0:
      raise errors.UserError(f"task {name!r} has {config.design} adapters of scaling "
                             f"{config.scaling:g}; AdapterFusion fuses "
                             f"{' or '.join(adapter_layers.names_with('fusable'))}-design "
                             f"adapters of scaling 1", path)
    configs[name] = config
  if len(set(configs.values())) > 1:
    raise errors.UserError(
        "--fusion_tasks: the fused tasks' adapters must be of one configuration (size, "
        "placement, ...); they are: " + "; ".join(f"{n} {c.to_dict()}"
                                                  for n, c in configs.items()))
  return configs[names[0]]


def read_fusion(bank_dir: str, names: Sequence[str],
                regularization: float = fusion_model.DEFAULT_REGULARIZATION) -> Fusion:
  """The bank's tasks `names`, to fuse in that order (checked: fused_adapter_config,
  then each as a bank task, adapter_bank.check_task).

  Raises:
    errors.UserError: as fused_adapter_config, or a task that is no bank task.
  """
  config = fused_adapter_config(bank_dir, names)
  bank = adapter_bank.open_bank(bank_dir)
  tasks = []
  for name in names:
    task = bank_tasks.read_task(bank_dir, bank, name)
    tasks.append(fusion_model.FusedTask(name, {
        n: a for n, a in task.arrays.items() if modeling.variable_role(n) == "adapter"}))
  return Fusion(bank_dir, tuple(tasks), config, regularization)


def recorded_fusion(bank_dir: str, task_checkpoint: str) -> Optional[Fusion]:
  """The fused tasks of the bank task at `task_checkpoint` (None: no fusion task),
  checked to be the ones it was trained over.

  Raises:
    errors.UserError: naming the task's file, if a fused task was removed from
      the bank or its adapters are not the ones the fusion was trained over.
  """
  header = adapter_weights.read_adapter_header(task_checkpoint)
  metadata = header.get("metadata") or {}
  if not is_fusion_task(metadata):
    return None
  path = posixpath.join(task_checkpoint, adapter_weights.WEIGHTS_FILE)
  names, recorded = metadata[TASKS_KEY], metadata.get(FINGERPRINTS_KEY) or {}
  retrain = "retrain it (run_classifier.py --do_train --fusion_tasks=" + ",".join(names) + ")"
  removed = [n for n in names if n not in adapter_bank.task_names(bank_dir)]
  if removed:
    raise errors.UserError(f"a fusion of tasks {', '.join(names)}, but adapter bank "
                           f"{bank_dir} no longer has {', '.join(removed)}: {retrain}", path)
  fusion = read_fusion(bank_dir, names)
  changed = [n for n, f in fusion.fingerprints().items() if recorded.get(n) != f]
  if changed:
    raise errors.UserError(
        f"a fusion of tasks {', '.join(names)}, but the adapters of "
        f"{', '.join(changed)} in adapter bank {bank_dir} changed since it was trained "
        f"(fingerprint {fusion.fingerprints()[changed[0]][:16]}..., recorded "
        f"{str(recorded.get(changed[0]))[:16]}...): {retrain}", path)
  return fusion
