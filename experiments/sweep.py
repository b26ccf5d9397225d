r"""Runs run_classifier.py over a grid of settings, resumably; writes one results table.

  python -m experiments.sweep --output_dir=output/sweeps/lexname \
    --vary=train_mode/adapter_size=adapters/8,adapters/64,full/0 \
    --vary=learning_rate=1e-4,1e-3 --vary=seed=1,2,3 --parallel=2 -- \
    --task_name=tsv --data_dir=data/wordnet/wordnet_lexname --text_a_column=sentence \
    --vocab_file=models/minilm/vocab.txt --bert_config_file=models/minilm/bert_config.json \
    --init_checkpoint=models/minilm/bert_model.ckpt --max_seq_length=32 \
    --num_train_epochs=2 --save_checkpoints_steps=100000

`--vary` axes and the flags after `--` (fixed for every point) are described
in experiments/points/grid.py, as is `--grid=FILE.json` (a union of grids, e.g. other
learning rates per method). Besides run_classifier.py's flags a point may set
`train_examples` (N rows of train.tsv, or all), `subset` (random | first),
`subset_seed` and `train_steps` (experiments/points/data.py). `--do_train --do_eval`
are added unless given.

OUTPUT_DIR holds
  sweep.json            the grid; rerunning with only --output_dir resumes it
  results.json, .csv    one row per finished point (schema: RESULT_COLUMNS)
  runs/<point>/         the point's output_dir: run.log, sweep_point.json, ...
  data/                 training-set subsets (one directory per size)

The points run through experiments/points/runner.py, as the paper table's
and the multi-task comparison's do. Rerunning the same command resumes: points
with a sweep_point.json are done
(a failed point too, recorded with its exit status and the end of its log;
`--retry_failed` runs those again), the others run, and a point stopped midway
resumes from its last checkpoint. SIGTERM to the sweep sends SIGTERM to the
running points (run_classifier.py saves a checkpoint and stops) and records
nothing for them; so does Ctrl-C, which in a terminal also reaches the points.
The sweep waits for them (a second Ctrl-C does not cut that short) and ends with
one line, "SIGINT: interrupted; the same command resumes (exit status 130)".
By default a finished point's model.ckpt-* and feature records are deleted
(adapter_model/, eval_results.txt and the log stay): `--keep_checkpoints`
keeps them.
"""

import datetime
import os
import posixpath
import shlex
import sys
import threading
from typing import Callable, Dict, List, Optional, Sequence

# First, before anything imports TensorFlow: without the TPU library, which the runs need.
from adapter_bert.cli import launch  # pylint: disable=g-bad-import-order
launch.start_parent(sys.argv if __name__ == "__main__" else None)

from absl import app
from absl import flags
import tensorflow as tf

from adapter_bert.cli import flag_checks
from adapter_bert.cli import path_flags
from adapter_bert import errors
from experiments.points import data as data_lib
from experiments.points import grid as grid_lib
from experiments.points import runner as runner_lib
from experiments.points import runs
from experiments.points import tables
from adapter_bert.runtime import stop_signals
from adapter_bert.storage import path_checks

SWEEP_FILE = "sweep.json"
RESULTS_JSON = "results.json"
RESULTS_CSV = "results.csv"
DEFAULTS = {"do_train": True, "do_eval": True}
# The results table's columns: these, then the varied keys and metrics where
# they fall (columns of tables.py order them as listed here first).
RESULT_COLUMNS = (
    "point", "status", "exit_code", "method", "train_mode", "adapter_size",
    "num_train_examples", "num_train_steps", "eval_accuracy", "eval_loss", "global_step",
    "loss", "params_total", "params_adapter", "params_trainable", "trained_share",
    "wall_seconds", "machine", "output_dir", "error")


class Sweep:
  """The points of a grid under one output directory: it describes them (each
  point's directory, command and record) and runs them through
  experiments/points/runner.py, which resumes, runs them in parallel and records
  them; it writes the results table."""

  def __init__(self, grid: grid_lib.Grid, output_dir: str,
               program: Optional[Sequence[str]] = None, parallel: int = 1,
               retry_failed: bool = False, keep_checkpoints: bool = False,
               log: Callable[[str], None] = print, popen: Optional[Callable] = None,
               on_finished: Optional[Callable[[dict], None]] = None):
    if parallel < 1:
      raise grid_lib.GridError(f"--parallel={parallel}: must be at least 1")
    self.grid = grid
    self.output_dir = output_dir
    self.program = list(program or runs.default_program())
    self.keep_checkpoints = keep_checkpoints
    # Called with each point's record once it and the results table are written
    # (the study saves the finished runs' files then); from the point's thread.
    self.on_finished = on_finished
    self.points = grid.points(DEFAULTS)
    self._subsets = {}  # The training-set subsets made so far, shared by the commands.
    self._write_lock = threading.Lock()
    # popen starts a point's process (runs.run_logged); None: a subprocess.
    self.runner = runner_lib.Runner(
        [self._run_point(p) for p in self.points], parallel, retry_failed, popen=popen,
        log=log, describe=describe, write_results=lambda _: self.write_table(),
        on_finished=self._finished)
    self.records: Dict[str, dict] = self.runner.records  # By point name: the done ones.

  @property
  def parallel(self) -> int:
    return self.runner.parallel

  @property
  def retry_failed(self) -> bool:
    return self.runner.retry_failed

  def point_dir(self, point: grid_lib.Point) -> str:
    return os.path.join(self.output_dir, "runs", point.name)

  def _run_point(self, point: grid_lib.Point) -> runner_lib.Point:
    """The grid point as the runner runs it: its directory, command and record."""
    return runner_lib.Point(
        key=point.name, output_dir=self.point_dir(point),
        command=lambda: self.commands([point])[0],
        record=lambda measured, cmd: self._record(point, measured, cmd))

  def pending(self) -> List[grid_lib.Point]:
    """The points to run: without a record, or failed ones with retry_failed."""
    names = {p.key for p in self.runner.pending()}
    return [p for p in self.points if p.name in names]

  def commands(self, points: Sequence[grid_lib.Point]) -> List[List[str]]:
    """Each point's command line; makes the training-set subsets they need."""
    data_root = os.path.join(self.output_dir, "data")
    return [runs.command(self.program, data_lib.resolve(p.settings, data_root, self._subsets),
                         self.point_dir(p)) for p in points]

  def run(self) -> Dict[str, int]:
    """Runs the pending points (`parallel` at a time); returns counts by status."""
    work = self.runner.prepare()  # Bad settings fail here, before anything is written.
    tables.write_json(os.path.join(self.output_dir, SWEEP_FILE),
                      {"grid": self.grid.to_json(), "program": self.program})
    self.write_table()
    self.runner.run(work)
    return self.summary()

  def stop(self) -> None:
    """SIGTERM to the running points (what Ctrl-C or SIGTERM to the sweep does)."""
    self.runner.stop()

  def _record(self, point: grid_lib.Point, measured: dict, cmd: List[str]) -> dict:
    output_dir = self.point_dir(point)
    run_config = runs.read_run_config(output_dir) or {}
    train_mode, adapter_size = runs.resolve_method(point.settings, run_config)
    return {
        "point": point.name, "status": measured["status"],
        "exit_code": measured["exit_code"], "vary": point.vary, "settings": point.settings,
        "command": cmd, "output_dir": os.path.relpath(output_dir, self.output_dir),
        "finished_at": datetime.datetime.now().isoformat(timespec="seconds"),
        "wall_seconds": measured["wall_seconds"], "machine": measured["machine"],
        "train_mode": train_mode,
        "adapter_size": adapter_size,
        "method": runs.method_name(train_mode, adapter_size,
                                   runs.resolve_design(point.settings, run_config)),
        "num_train_examples": measured["num_train_examples"],
        "num_train_steps": run_config.get("num_train_steps"),
        "metrics": measured["metrics"], "params": measured["params"],
        "error": measured.get("error")}

  def _finished(self, point: runner_lib.Point, record: dict) -> None:
    """After a point's record and the table are written."""
    if record["status"] == "ok" and not self.keep_checkpoints:
      remove_checkpoints(point.output_dir)
    if self.on_finished is not None:
      self.on_finished(record)

  def rows(self, records: Optional[Dict[str, dict]] = None) -> List[dict]:
    """The results table's rows, of `records` (default: the done points')."""
    records = self.runner.snapshot() if records is None else records
    return [runs.table_row(records[p.name]) for p in self.points if p.name in records]

  def write_table(self) -> None:
    # One writer at a time, each reading the records inside its turn: the last
    # rename then holds every record, whichever thread wrote last.
    with self._write_lock:
      records = self.runner.snapshot()
      rows = self.rows(records)
      columns = tables.columns_of(rows, ("point", "status", "exit_code")
                                  + tuple(self.grid.varied_keys()) + RESULT_COLUMNS)
      tables.write_table(
          os.path.join(self.output_dir, RESULTS_JSON), os.path.join(self.output_dir, RESULTS_CSV),
          rows, columns, grid=self.grid.to_json(), varied_keys=self.grid.varied_keys(),
          pending=[p.name for p in self.points if p.name not in records])

  def summary(self) -> Dict[str, int]:
    return self.runner.summary()


def describe(record: dict) -> str:
  if record["status"] != "ok":
    return f"FAILED (exit {record['exit_code']}), see {record['output_dir']}/{runs.LOG_FILE}"
  metrics = ", ".join(f"{k} = {v:.4g}" for k, v in record["metrics"].items()
                      if k.startswith("eval_"))
  trained = (record["params"] or {}).get("trainable")
  return (f"{metrics}; {trained if trained is not None else '?'} trained parameters; "
          f"{record['wall_seconds']:.0f} s")


def remove_checkpoints(output_dir: str) -> None:
  """Deletes what only resuming needs: model.ckpt-*, `checkpoint`, feature records."""
  for name in tf.io.gfile.listdir(output_dir):
    if (name.startswith("model.ckpt-") or name == "checkpoint"
        or ".tf_record" in name):
      path = posixpath.join(output_dir, name)
      if not tf.io.gfile.isdir(path):
        tf.io.gfile.remove(path)


FLAGS = flags.FLAGS


def define_flags(flag_values=flags.FLAGS):
  fv = dict(flag_values=flag_values)
  flags.DEFINE_string("output_dir", None, "The sweep's directory (results, runs, subsets).",
                      **fv)
  flags.DEFINE_multi_string("vary", [], "An axis: KEY=V1,V2,... or KEY1/KEY2=A1/B1,A2/B2 "
                            "(repeat for more axes; every combination runs).", **fv)
  flags.DEFINE_string("grid", None, "A JSON grid file: {fixed, vary, grids} "
                      "(experiments/points/grid.py); --vary and the flags after -- add to it.", **fv)
  flags.DEFINE_integer("parallel", 1, "Points run at once (subprocesses).", **fv)
  flags.DEFINE_bool("retry_failed", False, "Run failed points again.", **fv)
  flags.DEFINE_bool("keep_checkpoints", False, "Keep finished points' model.ckpt-* and "
                    "feature records (deleted by default; adapter_model/ stays).", **fv)
  flags.DEFINE_string("program", None, "The command each point runs, before its flags "
                      "(default: this Python with run_classifier.py).", **fv)
  flags.DEFINE_bool("dry_run", False, "Print the pending points' commands, run nothing.", **fv)
  flags.mark_flag_as_required("output_dir", flag_values=flag_values)


def load_grid(flag_values, fixed_args: Sequence[str]):
  """(grid, program) of the flags, or of OUTPUT_DIR/sweep.json if only --output_dir was
  given (its program unless --program is given)."""
  program = shlex.split(flag_values.program) if flag_values.program else None
  given = grid_lib.Grid(fixed=grid_lib.parse_flags(fixed_args),
                        vary=grid_lib.parse_axes(flag_values.vary))
  if flag_values.grid:
    given = grid_lib.Grid.from_json(tables.read_json(flag_values.grid)).merge(given)
  saved = os.path.join(flag_values.output_dir, SWEEP_FILE)
  if not (given.fixed or given.vary or given.grids):
    if not tf.io.gfile.exists(saved):
      raise grid_lib.GridError(f"nothing to sweep: give --vary / --grid / fixed flags, or an "
                               f"--output_dir with a {SWEEP_FILE}")
    saved = tables.read_json(saved)
    return grid_lib.Grid.from_json(saved["grid"]), program or saved.get("program")
  return given, program


def main(argv, flag_values=None, popen: Optional[Callable] = None):
  """The command; `popen` starts each point (default: a subprocess)."""
  F = flag_values or FLAGS
  try:
    path_flags.check_path_flags(F, dict(output_dir=path_checks.OUTPUT_DIR,
                                        grid=path_checks.INPUT_FILE))
    grid, program = load_grid(F, argv[1:])
    sweep = Sweep(grid, F.output_dir, program, F.parallel, F.retry_failed,
                  F.keep_checkpoints, popen=popen)
    if F.dry_run:
      for point, cmd in zip(sweep.pending(), sweep.commands(sweep.pending())):
        print(f"# {point.name}\n{shlex.join(cmd)}")
      return 0
    with stop_signals.interrupts():  # Ctrl-C: one line, status 130 (exit_on_interrupt).
      counts = sweep.run()
  except errors.UserError as e:  # Bad grids (GridError) and bad task files.
    print(f"ERROR: {e}", file=sys.stderr)
    return 2
  print(f"{counts['ok']} ok, {counts['failed']} failed, {counts['pending']} pending: "
        f"{os.path.join(F.output_dir, RESULTS_CSV)}"
        + (" (--retry_failed runs the failed ones again)" if counts["failed"] else ""))
  return 0


if __name__ == "__main__":
  define_flags()
  app.run(stop_signals.exit_on_interrupt(main),
          flags_parser=flag_checks.parse_flags_with_passthrough)
