"""One point of a sweep: its command, running it, and the record of what it gave
(experiments/points/runner.py runs the points of every command through `run`).

A point runs `run_classifier.py` (or any program given in its place, such as
a test's stand-in) in its own output_dir, with stdout and stderr in
`run.log` there. When it ends, `sweep_point.json` records the settings, the
exit status, wall time, the dev metrics of `eval_results.txt`, the parameter
counts of the log's `***** ... Parameters = N *****` lines and the train mode
and adapter size the run used (its `run_config.json`). That file marks the
point as done: a sweep that is run again skips it. A point stopped midway runs
again in the same output_dir, resuming; its wall time is then that of all its
attempts, the earlier ones read from run.log.
"""

import datetime
import os
import posixpath
import re
import signal
import subprocess
import sys
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import tensorflow as tf

from adapter_bert.model import adapter_layers
from experiments.points import grid as grid_lib
from experiments.points import tables
from adapter_bert.cli import launch
from adapter_bert.runtime import machine
from adapter_bert.runtime import model_setup
from adapter_bert.runtime import trainable
from adapter_bert.storage import file_io

# The repository root (experiments/points/runs.py is three levels below it).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORD_FILE = "sweep_point.json"
LOG_FILE = "run.log"

_COUNT = re.compile(r"\*\*\*\*\* (Total|Adapter|Total Trainable) Parameters = (\d+) \*\*\*\*\*")
_COUNT_KEYS = {"Total": "total", "Adapter": "adapter", "Total Trainable": "trainable"}
_TRAIN_EXAMPLES = re.compile(r"Running training \*+[^\n]*\n[^\n]*Num examples = (\d+)")
# The line run_logged starts each attempt with, and the times the lines after it
# carry: absl's (I1128 03:12:50.568748, no year) and TensorFlow's C++ logging's.
_ATTEMPT = re.compile(r"^==== (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d) ", re.M)
_ABSL_TIME = re.compile(r"^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)[. ]", re.M)
_TF_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[.:]", re.M)


def default_program() -> List[str]:
  return [sys.executable, os.path.join(ROOT, "run_classifier.py")]


def command(program: Sequence[str], flags: Mapping[str, object], output_dir: str) -> List[str]:
  return list(program) + grid_lib.flag_args(flags) + [f"--output_dir={output_dir}"]


def parse_parameter_counts(log_text: str, require_all: bool = False) -> Dict[str, int]:
  """The log's parameter lines as {total, adapter, trainable} (the last of each: a retried
  run logs them again); keys whose line is missing are left out.

  Raises:
    ValueError: with require_all, if a line is missing.
  """
  counts = {_COUNT_KEYS[m.group(1)]: int(m.group(2)) for m in _COUNT.finditer(log_text)}
  if require_all and set(counts) != set(_COUNT_KEYS.values()):
    raise ValueError(f"parameter count lines missing from the log (found {counts})")
  return counts


def parse_eval_results(text: str) -> Dict[str, float]:
  """eval_results.txt ("key = value" lines) as floats (global_step as an int, as the
  original BERT writes it); without checkpoint_path, the one line that names a file
  (classification/metrics.write_eval_results), not a number."""
  results = {}
  for line in text.splitlines():
    key, sep, value = line.partition(" = ")
    if sep and key.strip() != "checkpoint_path":
      number = float(value)
      results[key.strip()] = int(number) if key.strip() == "global_step" else number
  return results


def parse_num_train_examples(log_text: str) -> Optional[int]:
  found = _TRAIN_EXAMPLES.findall(log_text)
  return int(found[-1]) if found else None


def earlier_attempts_seconds(log_text: str) -> float:
  """Wall seconds of the attempts a run.log holds before its last one, each from
  its "====" line to its last timed line.

  A run stopped midway (Ctrl-C, SIGTERM, a sitting that ended) runs again and
  resumes, and only the last attempt is timed as it runs: without the earlier
  ones its wall time would leave out the steps they trained. An attempt's time
  after its last logged line (a training step's line comes every ~30 s) is lost.
  """
  starts = list(_ATTEMPT.finditer(log_text))
  seconds = 0.0
  for attempt, following in zip(starts, starts[1:]):
    start = datetime.datetime.fromisoformat(attempt.group(1))
    text = log_text[attempt.end():following.start()]
    times = [datetime.datetime.fromisoformat(m.group(1)) for m in _TF_TIME.finditer(text)]
    for m in _ABSL_TIME.finditer(text):
      month, day, hour, minute, second = map(int, m.groups())
      # absl leaves out the year: a line months before the attempt's start is in
      # the next one.
      for year in (start.year, start.year + 1):
        try:
          logged = datetime.datetime(year, month, day, hour, minute, second)
        except ValueError:  # 29 February of a year that has none.
          continue
        if logged >= start - datetime.timedelta(days=180):
          times.append(logged)
          break
    if times:
      seconds += max(0.0, (max(times) - start).total_seconds())
  return seconds


def resolve_method(settings: Mapping[str, object], run_config: Optional[Mapping] = None):
  """(train_mode, adapter_size) the run used: from its run_config.json, else as
  run_classifier.py derives them from the flags (runtime/model_setup.py)."""
  if run_config and "train_mode" in run_config:
    size = (run_config.get("adapter_config") or {}).get("size", 0)
    return str(run_config["train_mode"]), int(size)
  mode, size = settings.get("train_mode"), settings.get("adapter_size")
  if size is None:
    size = model_setup.implied_adapter_size(mode)
  if mode is None:
    mode = trainable.default_train_mode(int(size))
  return str(mode), int(size)


def resolve_design(settings: Mapping[str, object], run_config: Optional[Mapping] = None) -> str:
  """The adapter design the run used (adapter_layers.DESIGNS), or "fusion" for
  an AdapterFusion over bank tasks: from its run_config.json, else its flags."""
  if run_config and "adapter_config" in run_config:
    if run_config.get("fusion_tasks"):
      return "fusion"
    return str((run_config.get("adapter_config") or {}).get("design", "houlsby"))
  if settings.get("fusion_tasks"):
    return "fusion"
  return str(settings.get("adapter_design") or "houlsby")


def method_name(train_mode: str, adapter_size: int, design: str = "houlsby") -> str:
  """A method's short name: adapters_64 (Houlsby's), pfeiffer_64, parallel_64,
  lora_8, fusion_64 (over adapters of size 64), full, top_layers_3, layer_norm, head."""
  if train_mode == "adapters" and design != "houlsby":
    return f"{design}_{adapter_size}"
  name = train_mode.replace(":", "_")
  if train_mode == "adapters" or (adapter_size and train_mode == "full"):
    name += f"_adapters_{adapter_size}" if train_mode == "full" else f"_{adapter_size}"
  return name


def method_family(train_mode: str, method: str = "") -> str:
  """What the trade-off plot draws as one line: adapters (Houlsby's), another
  adapter design (pfeiffer, parallel, lora), fusion, top_layers, full, ..."""
  family = train_mode.partition(":")[0]
  design = method.rpartition("_")[0]
  if family == "adapters" and design in adapter_layers.DESIGNS + ("fusion",):
    return design
  return family


def read_log(path: str) -> str:
  """A log's text ("" if there is none); bytes that are not UTF-8 replaced."""
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      return f.read().decode("utf-8", errors="replace")
  except tf.errors.OpError:
    return ""


def _tail(path: str, lines: int = 15) -> str:
  return "\n".join(read_log(path).splitlines()[-lines:])


# Flushing a local log is cheap; on a bucket (gs://) each flush uploads the whole
# object again, so there the log is flushed at most this often.
_REMOTE_FLUSH_SECONDS = 30.0


def run_logged(cmd: Sequence[str], log_path: str, popen: Optional[Callable] = None,
               on_start: Optional[Callable] = None, **popen_args) -> int:
  """Runs `cmd` with its stdout and stderr appended to `log_path`; returns its exit status.

  A child process writes to a file descriptor, which a bucket path has not: the
  child writes into a pipe and this process copies its lines to the log through
  tf.io.gfile (line by line on a local disk, so the log can be followed).
  `popen` (default subprocess.Popen) starts it; `on_start` gets the process.
  """
  popen = popen or subprocess.Popen
  remote = "://" in log_path and not log_path.startswith("file://")
  file_io.make_parent_dirs(log_path)
  with tf.io.gfile.GFile(log_path, "a") as log:
    log.write(f"==== {datetime.datetime.now().isoformat(timespec='seconds')} "
              f"{' '.join(cmd)}\n")
    log.flush()
    popen_args.setdefault("env", launch.child_environment(os.environ))
    process = popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    **popen_args)
    if on_start is not None:
      on_start(process)
    flushed = time.monotonic()

    def copy_lines():
      nonlocal flushed
      for line in process.stdout:
        log.write(line.decode("utf-8", errors="replace"))
        if not remote or time.monotonic() - flushed >= _REMOTE_FLUSH_SECONDS:
          log.flush()
          flushed = time.monotonic()
    with process.stdout:
      try:
        copy_lines()
      except BaseException:
        # Stopped while the child runs (Ctrl-C, or SIGTERM within
        # stop_signals.interrupts): the child gets SIGTERM too, saves its
        # checkpoint and ends, its last lines still logged, before this does.
        if process.poll() is None:
          process.send_signal(signal.SIGTERM)
        copy_lines()
        process.wait()
        raise
    return process.wait()


def run(cmd: Sequence[str], output_dir: str, popen: Optional[Callable] = None,
        on_start: Optional[Callable] = None, cwd: Optional[str] = None) -> Dict[str, object]:
  """Runs `cmd` (from `cwd`, default this process's directory) with its output in
  output_dir/run.log; returns what it measured.

  A run interrupted before its record was written runs again in the same
  output_dir: run_classifier.py resumes from its last checkpoint there. Its
  log is appended to, and results of an earlier attempt are removed first so
  that they are never taken for this attempt's; its wall_seconds are those of
  every attempt (earlier_attempts_seconds). All through tf.io.gfile, so
  output_dir may be a bucket.
  """
  tf.io.gfile.makedirs(output_dir)
  results_path = posixpath.join(output_dir, "eval_results.txt")
  if tf.io.gfile.exists(results_path):
    tf.io.gfile.remove(results_path)
  log_path = posixpath.join(output_dir, LOG_FILE)
  start = time.time()
  code = run_logged(cmd, log_path, popen, on_start, **({} if cwd is None else {"cwd": cwd}))
  log_text = read_log(log_path)
  wall = time.time() - start + earlier_attempts_seconds(log_text)
  # The wall time is the CPU's as much as the run's: the two go together.
  measured = {"exit_code": code, "wall_seconds": round(wall, 3), "machine": machine.cpu_line()}
  metrics = None
  if code == 0:
    try:
      with tf.io.gfile.GFile(results_path, "r") as f:
        metrics = parse_eval_results(f.read())
    except (tf.errors.OpError, ValueError) as e:
      measured["error"] = f"exited 0 without readable eval_results.txt ({e})"
  else:
    measured["error"] = f"exit status {code}; the end of {log_path}:\n" + _tail(log_path)
  measured["status"] = "ok" if metrics is not None else "failed"
  measured["metrics"] = metrics or {}
  measured["params"] = parse_parameter_counts(log_text)
  measured["num_train_examples"] = parse_num_train_examples(log_text)
  return measured


def read_run_config(output_dir: str) -> Optional[dict]:
  path = posixpath.join(output_dir, "run_config.json")
  try:
    return tables.read_json(path)
  except (OSError, ValueError):
    return None


def table_row(record: Mapping[str, object]) -> Dict[str, object]:
  """A point's record as one flat row of the results table."""
  params = record.get("params") or {}
  row = {"point": record["point"], "status": record["status"],
         "exit_code": record.get("exit_code")}
  row.update(record.get("vary") or {})
  row.update(method=record.get("method"), train_mode=record.get("train_mode"),
             adapter_size=record.get("adapter_size"),
             num_train_examples=record.get("num_train_examples"),
             num_train_steps=record.get("num_train_steps"))
  row.update(record.get("metrics") or {})
  total, trainable = params.get("total"), params.get("trainable")
  row.update(params_total=total, params_adapter=params.get("adapter"),
             params_trainable=trainable,
             trained_share=trainable / total if total and trainable is not None else None,
             wall_seconds=record.get("wall_seconds"), machine=record.get("machine"),
             output_dir=record.get("output_dir"),
             error=record.get("error"))
  return row
