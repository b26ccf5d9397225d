r"""Reruns the paper's comparison on real weights and data, and writes the table.

Houlsby et al. (2019) find that adapters come within about one point of full
fine-tuning while training a few percent of the weights, and that training
only the head (frozen features) is clearly worse. This script checks that with
`run_classifier.py`, the pretrained MiniLM (converted to models/minilm/ by
demo.sh or convert_checkpoint.py) and both WordNet tasks (data/wordnet/), for
six ways of training (METHODS). Every run uses the same epochs, sequence length,
batch size and seed. The learning rate is per method (Method.learning_rate: the
few weights of adapters, LayerNorms and head need a larger one than full
fine-tuning), and a task may override it (PaperTask.learning_rates), as the paper
chose it per task: at the method defaults the sentence-pair task wordnet_example
stalls at chance (adapters at 1e-3 stay at loss ln 2), so it trains every method
but the head at a lower rate.

  .venv/bin/python -m experiments.paper_table            # all 12 runs, ~40 min on 2 CPU cores
  .venv/bin/python -m experiments.paper_table --dry_run  # print the commands only
  .venv/bin/python -m experiments.paper_table --tasks=wordnet_lexname --methods=adapters_64,full
  .venv/bin/python -m experiments.paper_table --tasks=wordnet_example --merge  # redo one task

The runs go through experiments/points/runner.py, one at a time. Each run's
output_dir is output/paper_table/<task>/<method>/ (removed first, so
the numbers are fresh; one that holds files but no run.log, so not a run of
this script, is refused before any run), with its log in run.log. Results: the JSON
(--results_json: settings, per-run command, dev accuracy, parameter counts,
wall time), rewritten after every run so an interrupted sweep keeps what
finished, and the markdown table (--results_md). Without --merge they hold only
this invocation's runs; with --merge the runs of every (task, method) not in
this invocation are kept from the existing --results_json (which must have the
same settings), so a subset of the table can be refreshed.
"""

import dataclasses
import functools
import json
import os
import posixpath
import shlex
import sys
from typing import Callable, Dict, List, Mapping, Optional

from absl import app
from absl import flags
from absl import logging
import tensorflow as tf

from adapter_bert.cli import flag_checks
from adapter_bert.cli import path_flags
from adapter_bert import errors
from experiments.points import runner as runner_lib
from experiments.points import runs
from adapter_bert.storage import file_io
from adapter_bert.storage import input_files
from adapter_bert.storage import path_checks
from adapter_bert.runtime import stop_signals

ROOT = runs.ROOT


@dataclasses.dataclass(frozen=True)
class PaperTask:
  name: str
  description: str
  column_flags: tuple
  # Method name -> learning rate, overriding Method.learning_rate on this task.
  learning_rates: Mapping[str, float] = dataclasses.field(default_factory=dict, hash=False)


@dataclasses.dataclass(frozen=True)
class Method:
  name: str
  description: str
  flags: tuple
  learning_rate: float


TASKS = {
    "wordnet_lexname": PaperTask("wordnet_lexname", "definition -> 10 categories (chance 0.10)",
                            ("--text_a_column=sentence", "--label_column=label")),
    "wordnet_example": PaperTask("wordnet_example",
                            "gloss + example: does the example illustrate the "
                            "definition? (chance 0.50)",
                            ("--text_a_column=gloss", "--text_b_column=example",
                             "--label_column=label"),
                            # The pair task stalls at chance (loss ln 2) with adapters at
                            # 1e-3; 3e-4 (adapters) and 5e-5 (full) learn it in 250 steps.
                            {"adapters_8": 3e-4, "adapters_64": 3e-4, "full": 5e-5,
                             "top_layers_3": 5e-5, "layer_norm": 1e-3}),
}

METHODS = {m.name: m for m in (
    Method("adapters_8", "adapters, size 8 (+ LayerNorms + head)",
           ("--adapter_size=8", "--train_mode=adapters"), 1e-3),
    Method("adapters_64", "adapters, size 64 (+ LayerNorms + head)",
           ("--adapter_size=64", "--train_mode=adapters"), 1e-3),
    Method("full", "full fine-tuning",
           ("--adapter_size=0", "--train_mode=full"), 1e-4),
    Method("top_layers_3", "top 3 of 6 layers (+ pooler + head)",
           ("--adapter_size=0", "--train_mode=top_layers:3"), 1e-4),
    Method("layer_norm", "LayerNorms + head",
           ("--adapter_size=0", "--train_mode=layer_norm"), 3e-3),
    Method("head", "head only (frozen features)",
           ("--adapter_size=0", "--train_mode=head"), 3e-3),
)}

def learning_rate(task: PaperTask, method: Method) -> float:
  """The rate of one run: the task's override for the method, else the method's own."""
  return task.learning_rates.get(method.name, method.learning_rate)


def run_command(python: str, task: PaperTask, method: Method, settings: Dict[str, object],
                model_dir: str, data_root: str, output_dir: str) -> List[str]:
  """The run_classifier.py command line of one run."""
  return [
      python, "run_classifier.py", "--task_name=tsv",
      f"--data_dir={os.path.join(data_root, task.name)}", *task.column_flags,
      f"--vocab_file={os.path.join(model_dir, 'vocab.txt')}",
      f"--bert_config_file={os.path.join(model_dir, 'bert_config.json')}",
      f"--init_checkpoint={os.path.join(model_dir, 'bert_model.ckpt')}",
      "--do_train", "--do_eval",
      f"--max_seq_length={settings['max_seq_length']}",
      f"--train_batch_size={settings['train_batch_size']}",
      f"--eval_batch_size={settings['eval_batch_size']}",
      f"--num_train_epochs={settings['num_train_epochs']}",
      f"--learning_rate={learning_rate(task, method):g}", *method.flags,
      f"--seed={settings['seed']}",
      "--iterations_per_loop=50", "--save_checkpoints_steps=100000",
      f"--output_dir={output_dir}",
  ]


def check_run_dirs(run_dirs: List[str]) -> None:
  """Refuses, before any run, a run directory that holds files but no run.log: no
  run of this script wrote it, and each run empties its directory first (points)."""
  for directory in run_dirs:
    if (tf.io.gfile.isdir(directory) and tf.io.gfile.listdir(directory)
        and not tf.io.gfile.exists(posixpath.join(directory, "run.log"))):
      raise errors.UserError(
          "holds files but no run.log (no run of this script wrote it), and each run "
          "empties its directory first: give another --output_root, or move them away",
          directory)


def _record(task: str, method: str, measured: Mapping[str, object],
            command: List[str]) -> Dict[str, object]:
  """A finished run as the results keep it: its dev accuracy, parameter counts
  (all three lines required) and wall time."""
  counts = measured["params"]
  if set(counts) != {"total", "adapter", "trainable"}:
    raise ValueError(f"parameter count lines missing from the log (found {counts})")
  results = measured["metrics"]
  return dict(task=task, method=method, learning_rate=learning_rate(TASKS[task], METHODS[method]),
              command=command, eval_accuracy=results["eval_accuracy"],
              eval_loss=results.get("eval_loss"), global_step=results["global_step"], **counts,
              trained_share=counts["trainable"] / counts["total"],
              wall_seconds=measured["wall_seconds"])


def _failed(point: runner_lib.Point, command: List[str], measured: Mapping[str, object]):
  """A failed run stops the table: its numbers would be missing from it."""
  log_path = posixpath.join(point.output_dir, runs.LOG_FILE)
  if measured["exit_code"] != 0:
    raise RuntimeError(f"run failed (exit {measured['exit_code']}), see {log_path}:\n"
                       + runs.read_log(log_path)[-3000:])
  raise RuntimeError(f"run failed: {measured.get('error')}, see {log_path}")


def points(plan: List[tuple], root: str = ROOT) -> List[runner_lib.Point]:
  """The runs of plan ((task, method, output_dir, command) tuples) as the runner
  runs them: each from `root` (where the commands' relative paths start), into a
  fresh output_dir, no record kept there (the results file keeps them)."""
  return [runner_lib.Point(
      key=f"{task}/{method}",
      output_dir=output_dir if "://" in output_dir else os.path.join(root, output_dir),
      command=command, record=functools.partial(_record, task, method), record_file=None,
      fresh=True, cwd=root) for task, method, output_dir, command in plan]


def _describe(run: Mapping[str, object]) -> str:
  return (f"eval_accuracy = {run['eval_accuracy']:.4f}, trained "
          f"{100 * run['trained_share']:.2f}%, {run['wall_seconds']:.0f} s")


def run_learning_rate(run: Dict[str, object]) -> float:
  """The rate a recorded run used (older records without one: the current rate)."""
  if "learning_rate" in run:
    return run["learning_rate"]
  return learning_rate(TASKS[run["task"]], METHODS[run["method"]])


def markdown_table(results: Dict[str, object]) -> str:
  """The README table: one row per method, a column group per task.

  The learning rate is one column when every method ran at the same rate on all
  tasks of the table, else a column per task (each run's recorded rate).
  """
  runs = results["runs"]
  tasks = [t for t in TASKS if any(r["task"] == t for r in runs)]
  methods = [m for m in METHODS if any(r["method"] == m for r in runs)]
  by_key = {(r["task"], r["method"]): r for r in runs}
  per_task_rate = any(len({run_learning_rate(r) for r in runs if r["method"] == m}) > 1
                      for m in methods)
  header = ["method"] + ([] if per_task_rate else ["learning rate"]) + [
      "trained params (share)"]
  for t in tasks:
    header += ([f"{t} learning rate"] if per_task_rate else []) + [
        f"{t} dev acc.", f"{t} Δ vs full", f"{t} wall"]
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  for m in methods:
    first = next(by_key[(t, m)] for t in tasks if (t, m) in by_key)
    row = [METHODS[m].description] + (
        [] if per_task_rate else [f"{run_learning_rate(first):g}"]) + [
            f"{first['trainable']:,} ({100 * first['trained_share']:.2f}%)"]
    for t in tasks:
      r, full = by_key.get((t, m)), by_key.get((t, "full"))
      if r is None:
        row += [""] * (4 if per_task_rate else 3)
        continue
      delta = ("" if full is None or m == "full"
               else f"{100 * (r['eval_accuracy'] - full['eval_accuracy']):+.1f}")
      row += ([f"{run_learning_rate(r):g}"] if per_task_rate else []) + [
          f"{r['eval_accuracy']:.3f}", delta, f"{r['wall_seconds']:.0f} s"]
    lines.append("| " + " | ".join(row) + " |")
  return "\n".join(lines) + "\n"


def write_markdown(path: str, results: Dict[str, object]) -> None:
  s = results["settings"]
  commands = "\n".join(" \\\n    ".join(shlex.join(r["command"][i:i + 3])
                                         for i in range(0, len(r["command"]), 3))
                       for r in results["runs"])
  text = (
      "# The paper's comparison on real runs\n\n"
      "Written by `python -m experiments.paper_table`. MiniLM (6 layers, hidden 384, 22.7M "
      "parameters) on the WordNet tasks, dev accuracy after "
      f"{s['num_train_epochs']:g} epochs, max_seq_length {s['max_seq_length']}, "
      f"batch size {s['train_batch_size']}, seed {s['seed']}, one run per cell. "
      "Trained params: trainable / total parameters of that model (the head's size "
      "differs by task: the count shown is the first task's). Learning rate: per "
      "method, overridden per task where the script's TASKS say so (the sentence-pair "
      "task needs a lower one). Wall time: the whole "
      f"run_classifier.py process (start-up, training, evaluation) on {s['machine']}; "
      "runs kept by `--merge` were timed in their own sweep, under that sweep's load.\n\n"
      + markdown_table(results) +
      "\n## Commands\n\n```\n" + commands + "\n```\n")
  file_io.atomic_write(path, text)


FLAGS = flags.FLAGS


def define_flags(flag_values=flags.FLAGS):
  fv = dict(flag_values=flag_values)
  flags.DEFINE_list("tasks", list(TASKS), "Tasks to run.", **fv)
  flags.DEFINE_list("methods", list(METHODS), "Methods to run, of " + ", ".join(METHODS), **fv)
  flags.DEFINE_string("model_dir", "models/minilm", "Google-format MiniLM (demo.sh makes it).",
                      **fv)
  flags.DEFINE_string("data_root", "data/wordnet", "Directory with the task directories.", **fv)
  flags.DEFINE_string("output_root", "output/paper_table", "Runs go to "
                      "<root>/<task>/<method>.", **fv)
  flags.DEFINE_string("results_json", "docs/paper_table.json", "Raw results.", **fv)
  flags.DEFINE_string("results_md", "docs/paper_table.md", "Markdown table + commands.", **fv)
  flags.DEFINE_float("num_train_epochs", 2.0, "Epochs of every run.", **fv)
  flags.DEFINE_integer("max_seq_length", 32, "Sequence length of every run.", **fv)
  flags.DEFINE_integer("train_batch_size", 32, "Batch size of every run.", **fv)
  flags.DEFINE_integer("seed", 1, "Seed of every run.", **fv)
  flags.DEFINE_string("machine", "a shared 2-core CPU machine",
                      "Where the runs ran, for the table's caption.", **fv)
  flags.DEFINE_bool("dry_run", False, "Print the commands, run nothing.", **fv)
  flags.DEFINE_bool("merge", False,
                    "Keep the runs of the (task, method) pairs not run now from the existing "
                    "--results_json (same settings required), e.g. --tasks=wordnet_example "
                    "--merge refreshes that task's columns only.", **fv)


def from_root(path: str) -> str:
  """A relative local path taken from ROOT (where the runs start); others as they are."""
  return path if "://" in path or os.path.isabs(path) else os.path.join(ROOT, path)


def kept_runs(results_json: str, settings: Dict[str, object],
              replaced: set) -> List[Dict[str, object]]:
  """For --merge: the runs of results_json whose (task, method) is not in replaced."""
  if not tf.io.gfile.exists(results_json):
    logging.warning("--merge: %s does not exist, nothing to keep", results_json)
    return []
  old = input_files.read_json(results_json)
  if old["settings"] != settings:
    raise app.UsageError(
        f"--merge: {results_json} was run with settings {old['settings']}, this run has "
        f"{settings}: pass the same flags, or rerun everything without --merge")
  return [r for r in old["runs"] if (r["task"], r["method"]) not in replaced]


def _table_order(run: Dict[str, object]):
  return list(TASKS).index(run["task"]), list(METHODS).index(run["method"])


def sweep(plan: List[tuple], settings: Dict[str, object], results_json: str,
          results_md: str, keep: List[Dict[str, object]] = (),
          popen: Optional[Callable] = None, root: str = ROOT) -> Dict[str, object]:
  """Runs plan ((task, method, output_dir, command) tuples) one at a time through
  the runner (each started by `popen`, default a subprocess), writing both results
  after every run; keep: earlier runs (of other (task, method) pairs) to write
  alongside. A failed run stops it (RuntimeError)."""
  def results_of(records: Mapping[str, dict]) -> Dict[str, object]:
    return {"settings": settings,
            "runs": sorted(list(keep) + list(records.values()), key=_table_order)}

  def write(records: Mapping[str, dict]) -> None:
    results = results_of(records)
    file_io.atomic_write(results_json, json.dumps(results, indent=2) + "\n")
    write_markdown(results_md, results)

  runner = runner_lib.Runner(points(plan, root), popen=popen, log=logging.info,
                             describe=_describe, write_results=write, on_failure=_failed)
  runner.run()
  return results_of(runner.snapshot())


def main(argv, flag_values=None, popen: Optional[Callable] = None):
  """Runs the plan; `popen` starts each run (default: a subprocess)."""
  del argv
  F = flag_values or FLAGS
  for name in F.tasks:
    if name not in TASKS:
      raise app.UsageError(f"unknown task {name}; known: {', '.join(TASKS)}")
  for name in F.methods:
    if name not in METHODS:
      raise app.UsageError(f"unknown method {name}; known: {', '.join(METHODS)}")
  settings = dict(num_train_epochs=F.num_train_epochs, max_seq_length=F.max_seq_length,
                  train_batch_size=F.train_batch_size, eval_batch_size=64,
                  seed=F.seed, machine=F.machine)
  python = os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(ROOT) \
      else sys.executable
  plan = []
  for task in F.tasks:
    for method in F.methods:
      output_dir = posixpath.join(F.output_root, task, method)
      plan.append((task, method, output_dir, run_command(
          python, TASKS[task], METHODS[method], settings, F.model_dir, F.data_root,
          output_dir)))
  results_json = from_root(F.results_json)
  results_md = from_root(F.results_md)
  keep = (kept_runs(results_json, settings, {(task, method) for task, method, *_ in plan})
          if F.merge else [])
  if F.dry_run:
    for *_, command in plan:
      print(shlex.join(command))
    if keep:
      print(f"# --merge keeps {len(keep)} runs of {F.results_json}: " + ", ".join(
          f"{r['task']}/{r['method']}" for r in keep))
    return
  # Before any run; relative paths from the repository root, where the runs run.
  path_flags.check_path_flags(F, dict(
      model_dir=path_checks.INPUT_DIR, data_root=path_checks.INPUT_DIR,
      output_root=path_checks.OUTPUT_DIR, results_json=path_checks.OUTPUT_FILE,
      results_md=path_checks.OUTPUT_FILE), relative_to=ROOT)
  if not tf.io.gfile.exists(posixpath.join(from_root(F.model_dir), "bert_model.ckpt.index")):
    raise app.UsageError(f"{F.model_dir} has no converted model: run demo.sh or "
                         "convert_checkpoint.py first")
  check_run_dirs([from_root(output_dir) for _, _, output_dir, _ in plan])
  with stop_signals.interrupts():  # The running child saves and ends first.
    results = sweep(plan, settings, results_json, results_md, keep, popen=popen)
  print(markdown_table(results))


if __name__ == "__main__":
  define_flags()
  app.run(errors.exit_on_user_error(stop_signals.exit_on_interrupt(
      main, then="the runs finished so far are in --results_json")),
          flags_parser=flag_checks.parse_flags)
