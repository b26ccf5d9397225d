r"""HyperFormer++ against per-task and shared Houlsby adapters, over seeds.

  python -m experiments.multitask_comparison --output_dir=output/multitask \
      --seeds=1,2 [--methods=houlsby,shared,hyperformer] [--num_train_epochs=1]

Methods, all on one frozen encoder (default: the real MiniLM of models/minilm)
and the four WordNet tasks (data/wordnet):
  houlsby      run_classifier.py once per task: its own adapters, LayerNorms
               and head (the bank's setting; Houlsby et al., 2019);
  shared       run_multitask.py --multitask_adapters=shared: one adapter set and
               LayerNorms for all tasks, a head each;
  hyperformer  run_multitask.py --multitask_adapters=hyperformer: HyperFormer++
               (Mahabadi et al., 2021), the encoder frozen;
  hyperformer_ln  the same with BERT's LayerNorms trained too
               (--train_mode=layer_norm), as houlsby and shared train them.
Every run sees the same examples: --num_train_epochs of each task's training
set (the multi-task runs sample them at --sampling_temperature). Each run is a
subprocess in its own directory (OUTPUT_DIR/METHOD/seed-N[/TASK]) with its log
in run.log, run by experiments/points/runner.py: a rerun skips finished runs and
resumes interrupted ones (from their last checkpoint, every 500 steps). Every run writes each task's
eval_predictions.tsv for the study's bootstrap (a finished run without them is
evaluated again from its last checkpoint). Writes
OUTPUT_DIR/comparison.json and comparison.csv (one row per method and task:
dev accuracy mean and std over the seeds, the seeds' values) and
comparison.md (the table docs/multitask.md shows, with trained parameters per task
and the parameters of all tasks as a multiple of the base).
"""

import functools
import os
import posixpath
import re
import sys
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import app
from absl import flags
from absl import logging

from adapter_bert.cli import flag_checks
from adapter_bert.bank import listing as bank_listing
from adapter_bert.classification import metrics as classifier_metrics
from adapter_bert.cli import path_flags
from adapter_bert import errors
from experiments.points import run_summary
from experiments.points import runner as runner_lib
from experiments.points import runs
from experiments import select
from experiments.points import tables
from adapter_bert.storage import file_io
from adapter_bert.storage import input_files
from adapter_bert.storage import path_checks
from adapter_bert.runtime import stop_signals

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METHODS = ("houlsby", "shared", "hyperformer", "hyperformer_ln")

# name -> (text_a_column, text_b_column): data/wordnet's tasks.
WORDNET_TASKS = {"wordnet_lexname": ("sentence", ""), "wordnet_pos": ("sentence", ""),
                 "wordnet_example": ("gloss", "example"),
                 "wordnet_relation": ("word_a", "word_b")}

_PER_TASK = re.compile(r"\*\*\*\*\* Trained Parameters per Task = (\d+) ")
_ALL_TASKS = re.compile(r"\*\*\*\*\* Parameters for \d+ Tasks = ([\d.]+) x the base")
_BASE = re.compile(r"of the base's (\d+)\)")
DONE_FILE = "comparison_run.json"
TRAIN_BATCH_SIZE = 32


def define_flags(flag_values=flags.FLAGS):
  fv = dict(flag_values=flag_values)
  flags.DEFINE_string("output_dir", None, "Where the runs and the tables go.", **fv)
  flags.DEFINE_list("seeds", ["1", "2"], "Seeds (each method runs once per seed).", **fv)
  flags.DEFINE_list("methods", list(METHODS), "Methods: " + ", ".join(METHODS) + ".", **fv)
  flags.DEFINE_string("model_dir", os.path.join(ROOT, "models", "minilm"), "The base: "
                      "bert_config.json, vocab.txt, bert_model.ckpt.", **fv)
  flags.DEFINE_string("data_root", os.path.join(ROOT, "data", "wordnet"), "Holds the "
                      "WordNet task directories.", **fv)
  flags.DEFINE_float("num_train_epochs", 1.0, "Epochs of every task's training set.", **fv)
  flags.DEFINE_float("learning_rate", 3e-4, "One learning rate for every method and task.",
                     **fv)
  flags.DEFINE_integer("adapter_size", 64, "Houlsby adapters' size (houlsby, shared).", **fv)
  flags.DEFINE_integer("hyperformer_adapter_size", 16, "The generated adapters' size.", **fv)
  flags.DEFINE_float("sampling_temperature", 10.0, "Task sampling temperature.", **fv)
  flags.DEFINE_float("generator_init_stddev", 1e-2, "HyperFormer++: std of the initial "
                     "projector and generator kernels.", **fv)
  flags.DEFINE_float("task_embedding_init_stddev", 1.0, "HyperFormer++: std of the initial "
                     "task embeddings.", **fv)
  flags.DEFINE_integer("max_seq_length", 32, "Sequence length.", **fv)
  flags.DEFINE_integer("train_batch_size", TRAIN_BATCH_SIZE, "Batch size.", **fv)
  flags.mark_flag_as_required("output_dir", flag_values=flag_values)
  flags.register_validator("methods", lambda v: set(v) <= set(METHODS),
                           "methods: " + ", ".join(METHODS), flag_values=flag_values)


def _common(F, seed, train: bool = True) -> Dict[str, object]:
  m = F.model_dir
  return {"vocab_file": os.path.join(m, "vocab.txt"),
          "bert_config_file": os.path.join(m, "bert_config.json"),
          "init_checkpoint": os.path.join(m, "bert_model.ckpt"),
          "max_seq_length": F.max_seq_length, "train_batch_size": F.train_batch_size,
          "eval_batch_size": 64, "learning_rate": F.learning_rate,
          "num_train_epochs": F.num_train_epochs, "iterations_per_loop": 50,
          # A run stopped midway (a sitting's end) resumes from at most 500 steps back.
          "save_checkpoints_steps": 500, "seed": seed, "do_train": train, "do_eval": True,
          # For the study's bootstrap over dev examples (experiments/study/claims.py).
          "eval_predictions": True}


def run_dirs(output_dir: str, method: str, seed: int) -> List[Tuple[str, Tuple[str, ...]]]:
  """(output_dir, the tasks it trains) of each run of `method` at `seed`: per-task
  Houlsby adapters are one run per task, the other methods one for all."""
  base_dir = os.path.join(output_dir, method, f"seed-{seed}")
  if method == "houlsby":
    return [(os.path.join(base_dir, task), (task,)) for task in WORDNET_TASKS]
  return [(base_dir, tuple(WORDNET_TASKS))]


def eval_predictions_path(output_dir: str, method: str, seed: int, task: str) -> str:
  """Where the run of `method` at `seed` writes `task`'s eval_predictions.tsv: its
  own directory (houlsby) or its task's directory in the multi-task run's."""
  return os.path.join(output_dir, method, f"seed-{seed}", task,
                      classifier_metrics.EVAL_PREDICTIONS_FILE)


def commands(F, method: str, seed: int, train: bool = True) -> List[tuple]:
  """(output_dir, command) of each run of `method` at `seed`; with `train` False
  the command that evaluates its last checkpoint only."""
  python = sys.executable
  if method == "houlsby":
    out = []
    for output_dir, (task,) in run_dirs(F.output_dir, method, seed):
      text_a, text_b = WORDNET_TASKS[task]
      settings = dict(_common(F, seed, train), task_name="tsv",
                      data_dir=os.path.join(F.data_root, task), text_a_column=text_a,
                      adapter_size=F.adapter_size, train_mode="adapters")
      if text_b:
        settings["text_b_column"] = text_b
      out.append((output_dir, runs.command(
          [python, os.path.join(ROOT, "run_classifier.py")], settings, output_dir)))
    return out
  [(base_dir, _)] = run_dirs(F.output_dir, method, seed)
  multitask_adapters = "shared" if method == "shared" else "hyperformer"
  settings = dict(
      _common(F, seed, train), multitask_adapters=multitask_adapters, task_name=",".join(["tsv"] * len(WORDNET_TASKS)),
      data_dir=",".join(os.path.join(F.data_root, t) for t in WORDNET_TASKS),
      text_a_column=",".join(a for a, _ in WORDNET_TASKS.values()),
      text_b_column=",".join(b for _, b in WORDNET_TASKS.values()),
      sampling_temperature=F.sampling_temperature,
      adapter_size=F.adapter_size if method == "shared" else F.hyperformer_adapter_size)
  if multitask_adapters == "hyperformer":
    settings.update(generator_init_stddev=F.generator_init_stddev,
                    task_embedding_init_stddev=F.task_embedding_init_stddev)
  if method == "hyperformer_ln":
    settings["train_mode"] = "layer_norm"
  return [(base_dir, runs.command([python, os.path.join(ROOT, "run_multitask.py")],
                                  settings, base_dir))]


def points(F, method: str, seed: int) -> List[runner_lib.Point]:
  """The runs of `method` at `seed` as the runner runs them: each in its own
  directory, done when it holds DONE_FILE (its measurements and the parameter
  lines of its log); a done run that lacks one of its tasks' predictions (it ran
  before the comparison wrote them) runs the eval-only command: its last
  checkpoint evaluated again, its record (and training time) kept."""
  out = []
  for (output_dir, cmd), (_, eval_cmd), (_, tasks) in zip(
      commands(F, method, seed), commands(F, method, seed, train=False),
      run_dirs(F.output_dir, method, seed)):
    predictions = [eval_predictions_path(F.output_dir, method, seed, t) for t in tasks]
    out.append(runner_lib.Point(
        key=os.path.relpath(output_dir, F.output_dir), output_dir=output_dir, command=cmd,
        record=functools.partial(_record, output_dir), record_file=DONE_FILE,
        complete=functools.partial(_has_predictions, predictions), completion=eval_cmd))
  return out


def _has_predictions(predictions: Sequence[str]) -> bool:
  return all(run_summary.has_predictions(posixpath.dirname(p)) for p in predictions)


def _record(output_dir: str, measured: Mapping[str, object], cmd: Sequence[str]) -> dict:
  """A finished run's record: its measurements and its log's parameter lines."""
  del cmd
  log = runs.read_log(posixpath.join(output_dir, runs.LOG_FILE))
  return dict(measured, per_task=_PER_TASK.findall(log)[-1:],
              all_tasks=_ALL_TASKS.findall(log)[-1:], base=_BASE.findall(log)[-1:])


def _failed(point: runner_lib.Point, cmd: Sequence[str], measured: Mapping[str, object]):
  """A failed run stops the comparison: its table needs every run."""
  raise errors.UserError(f"{' '.join(cmd)} failed: {measured.get('error')}")


def accuracies(output_dir: str, tasks: Sequence[str]) -> Dict[str, float]:
  """Dev accuracy by task of the finished run in output_dir that trained `tasks`
  (as run_dirs pairs them): a per-task run's eval_accuracy, a multi-task run's
  TASK/eval_accuracy."""
  path = posixpath.join(output_dir, "eval_results.txt")
  metrics = runs.parse_eval_results(input_files.read_text(path, "eval results"))
  if len(tasks) == 1:
    return {tasks[0]: metrics["eval_accuracy"]}
  return {task: metrics[f"{task}/eval_accuracy"] for task in tasks}


def rows_of(records: Mapping[tuple, dict]) -> List[dict]:
  """One row per (method, task): accuracy per seed, mean, std."""
  rows = []
  for method in METHODS:
    seeds = sorted({s for m, s, _ in records if m == method})
    if not seeds:
      continue
    for task in list(WORDNET_TASKS) + ["average"]:
      values = []
      for seed in seeds:
        if task == "average":
          accs = [records[(method, seed, t)]["accuracy"] for t in WORDNET_TASKS]
          values.append(sum(accs) / len(accs))
        else:
          values.append(records[(method, seed, task)]["accuracy"])
      mean, std = select.mean_std(values)
      rows.append({"method": method, "task": task, "mean": round(mean, 4),
                   "std": round(std, 4) if std is not None else None,
                   "seeds": seeds, "values": [round(v, 4) for v in values],
                   **records[(method, seeds[0], "params")]})
  return rows


def markdown(rows: Sequence[dict]) -> str:
  methods = [m for m in METHODS if any(r["method"] == m for r in rows)]
  tasks = list(WORDNET_TASKS) + ["average"]
  cell = {(r["method"], r["task"]): r for r in rows}
  lines = ["| method | trained per task | all tasks, x base | " + " | ".join(tasks) + " |",
           "|---" * (len(tasks) + 3) + "|"]
  for m in methods:
    first = cell[(m, tasks[0])]
    values = [f"{cell[(m, t)]['mean']:.3f} ± {cell[(m, t)]['std'] or 0:.3f}" for t in tasks]
    lines.append(f"| {m} | {first['trained_per_task']:,} | {first['total_multiple']:.3f} | "
                 + " | ".join(values) + " |")
  return "\n".join(lines) + "\n"


def main(argv, flag_values=None, popen: Optional[Callable] = None,
         on_run_finished: Optional[Callable[[], None]] = None):
  """Runs the comparison; `popen` starts each run (default: a subprocess), and
  `on_run_finished` is called after each run that this call finished (the study
  saves its record then: a setting's runs take hours)."""
  del argv
  F = flag_values or flags.FLAGS
  path_flags.check_path_flags(F, dict(output_dir=path_checks.OUTPUT_DIR,
                                      model_dir=path_checks.INPUT_DIR,
                                      data_root=path_checks.INPUT_DIR))
  with stop_signals.interrupts():
    _compare(F, popen, on_run_finished)


def _compare(F, popen: Optional[Callable],
             on_run_finished: Optional[Callable[[], None]] = None) -> None:
  planned = [(seed, method, points(F, method, seed))
             for seed in map(int, F.seeds) for method in F.methods]
  runner = runner_lib.Runner(
      [p for _, _, method_points in planned for p in method_points], popen=popen,
      log=logging.info, on_failure=_failed,
      on_finished=(lambda point, record: on_run_finished()) if on_run_finished else None)
  runner.run()
  records = {}
  for seed, method, method_points in planned:
    done = [(p.output_dir, runner.records[p.key]) for p in method_points]
    if method == "houlsby":
      # As the bank counts: the base once, each task's adapters, LayerNorms and head.
      trained = [int(r["params"]["trainable"]) for _, r in done]
      base = bank_listing.base_parameter_count(
          input_files.read_json(os.path.join(F.model_dir, "bert_config.json")))
      for (output_dir, _), task in zip(done, WORDNET_TASKS):
        records[(method, seed, task)] = {"accuracy": accuracies(output_dir, [task])[task]}
      records[(method, seed, "params")] = {
          "trained_per_task": round(sum(trained) / len(trained)),
          "total_multiple": (base + sum(trained)) / base}
    else:
      output_dir, record = done[0]
      for task, accuracy in accuracies(output_dir, list(WORDNET_TASKS)).items():
        records[(method, seed, task)] = {"accuracy": accuracy}
      records[(method, seed, "params")] = {
          "trained_per_task": int(record["per_task"][0]),
          "total_multiple": float(record["all_tasks"][0])}
  rows = rows_of(records)
  tables.write_table(os.path.join(F.output_dir, "comparison.json"),
                     os.path.join(F.output_dir, "comparison.csv"), rows,
                     ["method", "task", "mean", "std", "seeds", "values",
                      "trained_per_task", "total_multiple"])
  text = markdown(rows)
  file_io.atomic_write(posixpath.join(F.output_dir, "comparison.md"), text)
  print(text)


if __name__ == "__main__":
  define_flags()
  app.run(errors.exit_on_user_error(stop_signals.exit_on_interrupt(main)),
          flags_parser=flag_checks.parse_flags)
