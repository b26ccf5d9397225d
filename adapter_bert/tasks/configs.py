"""A run's settings, resolved once from the command line (cli/parse.py) and typed.

  RunConfig         what runtime/task_run.run runs: `options` (how every run is set
                    up: runtime/startup.RunOptions, its ModelOptions with the
                    adapter settings resolved) and `task` (one entry point's own)
  ClassifierConfig  run_classifier.py's task settings
  SquadConfig       run_squad.py's
  MultiTaskConfig   run_multitask.py's

Frozen dataclasses rather than Model Garden's `hyperparams.Config`: the
settings are resolved once (flags, then what an adapter file records) and
never overridden after, which a frozen dataclass enforces and `Config`'s
override-anything design does not; and `dataclasses.replace` / `asdict` are
all the tree needs.
"""

import dataclasses
from typing import Mapping, Optional, Tuple, Union

from adapter_bert.multitask import tasks as multitask_tasks
from adapter_bert.multitask.hypernetwork import HyperFormerConfig
from adapter_bert.runtime import startup


@dataclasses.dataclass(frozen=True)
class ClassifierConfig:
  """A sentence (pair) classification or regression task, its bank and fusion."""
  task_name: str
  data_dir: str
  tsv_options: Mapping[str, object] = dataclasses.field(default_factory=dict)
  adapter_bank: Optional[str] = None
  bank_task: Optional[str] = None  # None: the task's canonical name.
  fusion_tasks: Tuple[str, ...] = ()
  fusion_regularization: float = 0.0
  fusion_attentions: bool = False
  eval_predictions: bool = False


@dataclasses.dataclass(frozen=True)
class SquadConfig:
  """SQuAD v1.1 / v2.0 question answering: the original run_squad.py's settings."""
  train_file: Optional[str] = None
  predict_file: Optional[str] = None
  version_2_with_negative: bool = False
  doc_stride: int = 128
  max_query_length: int = 64
  n_best_size: int = 20
  max_answer_length: int = 30
  null_score_diff_threshold: float = 0.0
  verbose_logging: bool = False


@dataclasses.dataclass(frozen=True)
class MultiTaskConfig:
  """Several classification tasks on one frozen encoder (in --task_name order)."""
  tasks: Tuple[multitask_tasks.TaskData, ...]
  multitask_adapters: str
  hyper_config: Optional[HyperFormerConfig]
  sampling_temperature: float
  eval_predictions: bool = False


TaskConfig = Union[ClassifierConfig, SquadConfig, MultiTaskConfig]


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """One run: its task's settings and the set-up every run shares."""
  task: TaskConfig
  options: startup.RunOptions
