r"""The evidence study: the paper's claims at budgets that decide them, with seeds.

  python -m experiments.study --output_dir=output/study             # run, resumably; then the page
  python -m experiments.study --output_dir=output/study --parts=methods --tasks=wordnet_relation
  python -m experiments.study --output_dir=output/study --report_only  # the page from what finished
  python -m experiments.study --output_dir=output/study --dry_run      # the points and their count
  python -m experiments.study --output_dir=output/study --retry_failed # failed points again
  python -m experiments.study --output_dir=output/study --parts=multitask \
      --multitask_settings=lr-0.0001,lr-0.001    # some of the multitask part's settings

Houlsby et al. (2019) tune each method's learning rate and epochs on dev,
and compare adapters with full fine-tuning (Table 1: GLUE 80.0 vs 80.4), with
the other ways of training few weights (Figures 3-5), over training-set sizes
(Figure 2) and adapter initial scales (Figure 6). This command runs those
comparisons as experiments.sweep grids (PARTS) on the four WordNet tasks with
the pretrained MiniLM, at least 3 seeds per point, selects each method's
setting by the mean dev metric over seeds (experiments.select; a selection at
the edge of the rates tried runs the next rate past it, until bracketed:
results.methods_grid), and writes one
results page (--page, docs/study.md) with its tables, plots (experiments.plots),
the commands and the wall time.

Each (part, task) is one sweep directory, OUTPUT_DIR/PART/TASK/, so the study
resumes as a sweep does: rerun the same command, in as many sittings as it
takes (finished points are kept; a point stopped midway resumes from its
checkpoint). --parts and --tasks pick what runs in a sitting; the page shows
what has finished and says what is pending. The methods_long part (Table 1's
epochs: each method 20 epochs) and the epochs part (full fine-tuning 6 and 10)
run at the rates the methods part selected, so on a task they wait until the
methods part has finished there.

The page's claims (experiments/study/claims.py) compare a method with full fine-tuning: the mean
over tasks of the difference of their dev accuracies, at each method's
selected setting, with a 95% interval from a paired bootstrap over dev
examples and over seeds (the runs write eval_predictions.tsv for it). The
multitask part's (HyperFormer++'s) compare it with per-task adapters the same
way, over the four tasks.

Where the study disagrees with the paper the page says so ("Disagreements with
the paper"): Table 1's runs that collapsed to chance (experiments/study/collapse.py),
and the "stability" part, which reruns the collapsed points with one factor
changed at a time to find what brings the collapse on.

OUTPUT_DIR may be moved: the results tables name each run relative to its
sweep directory, and the task data relative to where the command runs.

The finished runs' small files (each point's record, config, eval results and
summary: experiments/study/record.py) are kept in --record_dir,
docs/study/record/ in the repository: saved as each point (or multi-task run)
finishes, restored into OUTPUT_DIR before anything runs. So a sitting on a new
machine (a lent GPU, a Colab VM) skips what finished elsewhere, and on a clean
clone `--report_only` writes the page from the record alone.

The design (parts, grids) is grids.py; the page page.py, multitask.py and
disagreements.py, reading the directory through results.py; the record
record.py; this module is the command (__main__.py runs it).
"""

import datetime
import os
import shlex
import sys
import threading
from typing import List

from absl import app
from absl import flags

from adapter_bert.cli import path_flags
from adapter_bert import errors
from experiments.points import grid as grid_lib
from experiments import multitask_comparison
from experiments.study import record as study_record
from experiments import sweep as sweep_lib
from experiments.points import tables
from experiments.study.grids import MULTITASK_RUNS, PARTS, SEEDS, TASKS, multitask_runs
from experiments.study.page import report
from experiments.study.results import (SITTINGS_FILE, multitask_cost, read_sittings,
                                       study_grid, sweep_dir)
from adapter_bert.runtime import machine
from adapter_bert.runtime import stop_signals
from adapter_bert.storage import path_checks


# ------------------------------------------------------------------- command

FLAGS = flags.FLAGS


def define_flags(flag_values=FLAGS):
  fv = dict(flag_values=flag_values)
  flags.DEFINE_string("output_dir", "output/study", "Where the sweeps go (PART/TASK/).", **fv)
  flags.DEFINE_list("parts", list(PARTS), "Parts to run: " + ", ".join(PARTS) + ".", **fv)
  flags.DEFINE_list("tasks", None, "Tasks to run them on (default: each part's own: "
                    "methods on all four, the figures on wordnet_lexname).", **fv)
  flags.DEFINE_list("seeds", [str(s) for s in SEEDS], "Seeds of every point.", **fv)
  flags.DEFINE_list("multitask_settings", None, "The multitask part's settings to run "
                    "(default: all, in this order): "
                    + ", ".join(run.name for run in MULTITASK_RUNS) + ".", **fv)
  flags.DEFINE_string("model_dir", "models/minilm", "The converted MiniLM (demo.sh).", **fv)
  flags.DEFINE_string("data_root", "data/wordnet", "Where the WordNet tasks are.", **fv)
  flags.DEFINE_integer("parallel", 1, "Points run at a time.", **fv)
  flags.DEFINE_bool("retry_failed", False, "Run the failed points again (a point "
                    "resumes from its last checkpoint).", **fv)
  flags.DEFINE_string("page", "docs/study.md", "The results page.", **fv)
  flags.DEFINE_string("record_dir", "docs/study/record", "Where the finished runs' small "
                      "files are kept (experiments/study/record.py): restored into "
                      "--output_dir first, saved from it as each point finishes; empty: "
                      "none.", **fv)
  flags.DEFINE_string("earlier_runs", "docs/study_first_runs", "An earlier study's "
                      "results tables (PART_TASK_results.csv): the page checks the points "
                      "run again against them; absent or empty: none.", **fv)
  flags.DEFINE_integer("bootstrap_samples", 2000, "Bootstrap samples per claim.", **fv)
  flags.DEFINE_bool("report_only", False, "Write the page from what has finished; run "
                    "nothing.", **fv)
  flags.DEFINE_bool("dry_run", False, "Print each sweep's pending points; run nothing.", **fv)


def portable_args(argv: List[str]) -> List[str]:
  """The arguments as the sittings' record and the page show them: an absolute
  path is the machine's that ran the sitting, so its flag's name stands for it
  (--output_dir=/somewhere/study -> --output_dir=OUTPUT_DIR)."""
  out = []
  for i, arg in enumerate(argv):
    name, equals, value = arg.partition("=")
    if equals and name.startswith("--") and os.path.isabs(value):
      arg = f"{name}={name[2:].upper()}"
    elif (not equals and i and argv[i - 1].startswith("--") and "=" not in argv[i - 1]
          and os.path.isabs(arg)):  # --output_dir /somewhere/study
      arg = argv[i - 1][2:].upper()
    out.append(arg)
  return out


def planned(flag_values) -> List[tuple]:
  """(part, task) of each sweep the flags ask for, in order ("all" for multitask)."""
  out = []
  for part in flag_values.parts:
    if part not in PARTS:
      raise errors.UserError(f"--parts: unknown part {part!r}; expected {', '.join(PARTS)}")
    if part == "multitask":
      names = [run.name for run in MULTITASK_RUNS]
      unknown = [n for n in flag_values.multitask_settings or () if n not in names]
      if unknown:
        raise errors.UserError(f"--multitask_settings: unknown setting {unknown[0]!r}; "
                               f"expected {', '.join(names)}")
      out.append((part, "all"))
      continue
    for name in flag_values.tasks or PARTS[part][0]:
      if name not in TASKS:
        raise errors.UserError(f"--tasks: unknown task {name!r}; expected "
                               f"{', '.join(TASKS)}")
      out.append((part, name))
  return out


def main(argv, flag_values=None):
  del argv
  F = flag_values or FLAGS
  command = shlex.join(["python", "-m", "experiments.study"] + portable_args(sys.argv[1:]))
  try:
    # Ctrl-C or SIGTERM: one line, status 130 or 143 (__main__'s
    # stop_signals.exit_on_interrupt); the points resume on a rerun.
    with stop_signals.interrupts():
      _run(F, command)
  except errors.UserError as e:
    print(f"ERROR: {e}", file=sys.stderr)
    return 2
  return 0


def _run(F, command: str) -> None:
  """The sittings' sweeps the flags ask for, then the page."""
  path_flags.check_path_flags(F, dict(
      output_dir=path_checks.OUTPUT_DIR, model_dir=path_checks.INPUT_DIR,
      data_root=path_checks.INPUT_DIR, page=path_checks.OUTPUT_FILE,
      **({"record_dir": path_checks.OUTPUT_DIR} if F.record_dir else {})))
  if F.record_dir:
    study_record.check_apart(F.output_dir, F.record_dir)
    restored = study_record.restore(F.record_dir, F.output_dir)
    if restored:
      print(f"Restored {restored} files of finished runs from {F.record_dir}")
  if not F.report_only:
    started = datetime.datetime.now().isoformat(timespec="seconds")
    seeds = [int(s) for s in F.seeds]
    for part, task in planned(F):
      if part == "multitask":
        _run_multitask(F, command, started)
        continue
      _run_sweep(F, command, started, part, task, seeds)
  if not F.dry_run:
    _save(F)
    report(F.output_dir, F.page, command, F.bootstrap_samples, F.model_dir, F.data_root,
           F.record_dir, F.earlier_runs)
    print(f"Results page: {F.page}")


def _run_sweep(F, command: str, started: str, part: str, task: str,
               seeds: List[int]) -> None:
  """One (part, task) sweep, run until its grid stops growing (the methods part
  adds the rates that bracket its selections as its points finish)."""
  ran_before = None
  while True:
    # Built when its turn comes: methods_long's and epochs' grids are the
    # methods part's selection, which an earlier sweep of this sitting may complete.
    grid = study_grid(F.output_dir, part, task, F.model_dir, F.data_root, seeds)
    if grid is None:
      print(f"=== {part} on {task}: waits for the methods part's points on {task} "
            f"(seeds {','.join(F.seeds)}) to finish: its grid is their selected rates")
      return
    sweep = sweep_lib.Sweep(
        grid_lib.Grid.from_json(grid), sweep_dir(F.output_dir, part, task),
        parallel=F.parallel, retry_failed=F.retry_failed,
        on_finished=lambda _: _after_point(F, command, started))
    if F.dry_run:
      print(f"{part}/{task}: {len(sweep.points)} points, {len(sweep.pending())} pending")
      return
    pending = {p.name for p in sweep.pending()}
    # Once it has run: again only for points the grid gained (a point left
    # pending, failed or stopped, is not run again in a loop).
    if ran_before is not None and not pending - ran_before:
      return
    print(f"=== {part} on {task}: {PARTS[part][1]}")
    try:
      sweep.run()
    finally:
      if pending:
        _after_point(F, command, started)
    if not pending:
      return
    ran_before = (ran_before or set()) | pending


def _run_multitask(F, command: str, started: str) -> None:
  seeds = [int(s) for s in F.seeds]
  pending = multitask_cost(F.output_dir, F.data_root, seeds)
  for name, argv in multitask_runs(F.output_dir, F.model_dir, F.data_root, seeds,
                                   F.multitask_settings):
    if F.dry_run:
      print("multitask: python -m experiments.multitask_comparison " + " ".join(argv))
      continue
    print(f"=== multitask: {PARTS['multitask'][1]}: {' '.join(argv)}")
    fv = flags.FlagValues()
    multitask_comparison.define_flags(fv)
    fv(["multitask_comparison"] + argv)
    try:
      multitask_comparison.main([], fv,
                                on_run_finished=lambda: _after_point(F, command, started))
    finally:
      if pending[name].pending:
        _after_point(F, command, started)


def _save(F) -> None:
  """The finished runs' small files into --record_dir."""
  if F.record_dir:
    written = study_record.save(F.output_dir, F.record_dir)
    if written:
      print(f"Saved {written} files of finished runs to {F.record_dir}")


_AFTER_POINT = threading.Lock()  # Points finish on the sweep's threads.


def _after_point(F, command: str, started: str) -> None:
  """After each finished point or multi-task run (and at the end of a sweep or
  a multitask setting): the sitting and the record brought up to date, so a
  sitting killed midway (its machine gone) loses only the runs in progress."""
  with _AFTER_POINT:
    record_sitting(F.output_dir, command, started)
    _save(F)


def record_sitting(output_dir: str, command: str, started: str) -> None:
  """Adds (or updates) this sitting in OUTPUT_DIR/sittings.json, with the CPU it
  ran on (its points' wall times depend on it): the page lists them. Only a
  sitting that had points to run calls it; one that found them all done ran none."""
  sittings = [s for s in read_sittings(output_dir) if s["started"] != started] + [{
      "command": command, "started": started, "machine": machine.cpu_line(),
      "last_finished": datetime.datetime.now().isoformat(timespec="seconds")}]
  tables.write_json(os.path.join(output_dir, SITTINGS_FILE), sittings)

