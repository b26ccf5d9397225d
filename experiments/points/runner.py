"""The one runner of experiments/: it runs the points a command describes.

The sweep, the paper table and the multi-task comparison each describe their
points (a `Point`: where it runs, the command it runs, what of the run it
records) and hand them to `Runner`, which

  resumes    skips a point whose record (Point.record_file in its output_dir)
             can be read: it is done, a failed one too unless retry_failed is
             given. A point stopped midway has no record and runs again in the
             same output_dir, resuming from its checkpoint (runs.run). A point
             without a record file (the paper table's, each run fresh) runs
             every time. A done point that lacks what it should have left
             (Point.complete false) runs Point.completion there, its record kept.
  runs       up to `parallel` points at once, each a subprocess logged to its
             output_dir's run.log (runs.run). Ctrl-C or SIGTERM (a
             KeyboardInterrupt in the main thread, stop_signals.interrupts)
             sends SIGTERM to the running points, waits for them and records
             nothing for them: the next run resumes them.
  records    each finished point's record (Point.record: what to keep of the
             run's measurements) into its record file, then into the runner's
             records, then the command's results (write_results: its table,
             written whole from every record so far), then on_finished.
  failures   a failed point is recorded as any other (status "failed", its
             exit status and the end of its log) unless on_failure raises,
             which stops the run (the points still running finish).

A record is written to its point's record file and, through write_results, to
the command's results files only: never into the design (a grid file,
sweep.json) that the points came from.
"""

import concurrent.futures
import dataclasses
import posixpath
import signal
import threading
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from adapter_bert import errors
from adapter_bert.cli import launch
from adapter_bert.storage import file_io
from experiments.points import runs
from experiments.points import tables

Command = Sequence[str]


def measured_record(measured: Mapping[str, object], command: Command) -> dict:
  """The default record: the run's measurements (runs.run) and its command."""
  return dict(measured, command=list(command))


@dataclasses.dataclass
class Point:
  """One run to make.

  key: the point's name among the runner's points (its records are by key).
  output_dir: where it runs: run.log, its files, its record.
  command: its command line, or a function giving it, called for the points
    that are to run only, all before the first runs (a sweep's makes the
    training subsets it needs; bad settings fail there).
  record: what to record of a finished run: (runs.run's measurements, the
    command) -> the record. It may raise, which stops the run.
  record_file: the record's file name in output_dir, which marks the point as
    done; None: no record is kept on disk, so the point runs every time.
  fresh: empty output_dir before the point runs (its numbers never those of an
    earlier attempt); otherwise a point resumes there.
  cwd: the directory its process starts in (None: this process's).
  complete, completion: for a done point, whether it has left all it should;
    if not, `completion` (a command) runs in its output_dir, its record kept.
  """
  key: str
  output_dir: str
  command: Union[Command, Callable[[], Command]]
  record: Callable[[Mapping[str, object], Command], dict] = measured_record
  record_file: Optional[str] = runs.RECORD_FILE
  fresh: bool = False
  cwd: Optional[str] = None
  complete: Optional[Callable[[], bool]] = None
  completion: Optional[Command] = None


def read_record(point: Point) -> Optional[dict]:
  """The point's record; None where it has none yet, or one cut short by a crash
  while it was written (not done)."""
  if point.record_file is None:
    return None
  try:
    return tables.read_json(posixpath.join(point.output_dir, point.record_file))
  except (OSError, ValueError):
    return None


def _status(record: Mapping[str, object]) -> str:
  return "ok" if record.get("status", "ok") == "ok" else "failed"


def default_describe(record: Mapping[str, object]) -> str:
  wall = record.get("wall_seconds")
  return _status(record) + (f", {wall:.0f} s" if isinstance(wall, (int, float)) else "")


# A point to run with its command, and whether that is its completion.
Work = Tuple[Point, List[str], bool]


class Runner:
  """Runs points: resumably, `parallel` at a time, recording each (module docstring).

  popen: starts a point's process (runs.run_logged; None: a subprocess).
  log: progress lines. describe: a record as the end of its progress line.
  write_results: called with every record so far, by key in the points' order,
    after each point is recorded (one call at a time).
  on_finished: called with (point, record) after its results are written, from
    the point's thread; not for a completion.
  on_failure: called with (point, command, measurements) for a failed run before
    anything is recorded of it; it may raise to stop the run.
  """

  def __init__(self, points: Sequence[Point], parallel: int = 1, retry_failed: bool = False,
               popen: Optional[Callable] = None, log: Callable[[str], None] = print,
               describe: Callable[[Mapping[str, object]], str] = default_describe,
               write_results: Optional[Callable[[Dict[str, dict]], None]] = None,
               on_finished: Optional[Callable[[Point, dict], None]] = None,
               on_failure: Optional[Callable[[Point, Command, dict], None]] = None):
    if parallel < 1:
      raise errors.UserError(f"--parallel={parallel}: must be at least 1")
    keys = [p.key for p in points]
    if len(set(keys)) != len(keys):
      raise ValueError(f"two points have one key: {sorted(k for k in keys if keys.count(k) > 1)}")
    self.points = list(points)
    self.parallel = parallel
    self.retry_failed = retry_failed
    self.popen = popen
    self.log = log
    self.describe = describe
    self.write_results = write_results
    self.on_finished = on_finished
    self.on_failure = on_failure
    # Key -> record of each done point: read from disk now, added as points finish.
    self.records: Dict[str, dict] = {}
    for point in self.points:
      record = read_record(point)
      if record is not None:
        self.records[point.key] = record
    self._lock = threading.Lock()
    self._write_lock = threading.Lock()
    self._stopping = threading.Event()  # Stopped by a signal: Ctrl-C or SIGTERM.
    self._halted = threading.Event()  # Stopped by a point that raised.
    self._processes = set()

  def pending(self) -> List[Point]:
    """The points to run: without a record, or failed ones with retry_failed."""
    return [p for p in self.points if p.key not in self.records
            or (self.retry_failed and _status(self.records[p.key]) != "ok")]

  def incomplete(self) -> List[Point]:
    """The done points (not pending) whose `complete` says they lack something."""
    pending = {p.key for p in self.pending()}
    return [p for p in self.points if p.key not in pending and p.complete is not None
            and p.completion is not None and not p.complete()]

  def snapshot(self) -> Dict[str, dict]:
    """The records so far, by key in the points' order."""
    with self._lock:
      return {p.key: self.records[p.key] for p in self.points if p.key in self.records}

  def prepare(self) -> List[Work]:
    """What is to run, in the points' order, with each command built; raises
    before anything runs if a command cannot be built or cannot run as asked."""
    pending = {p.key for p in self.pending()}
    incomplete = {p.key for p in self.incomplete()}
    work = []
    for point in self.points:
      if point.key in pending:
        command = point.command() if callable(point.command) else point.command
        work.append((point, list(command), False))
      elif point.key in incomplete:
        work.append((point, list(point.completion), True))
    if self.parallel > 1 and any(launch.uses_tpu(cmd) for _, cmd, _ in work):
      raise errors.UserError(
          f"--parallel={self.parallel} with --use_tpu: a TPU runs one run at a time (its "
          "chips open in one process); give --parallel=1")
    return work

  def run(self, work: Optional[List[Work]] = None) -> Dict[str, int]:
    """Runs `work` (default: prepare()'s), `parallel` at a time; returns the
    points' counts by status (summary())."""
    work = self.prepare() if work is None else work
    to_run = sum(not completing for _, _, completing in work)
    self.log(f"{len(self.points)} points, {len(self.points) - to_run} done before, "
             f"{len(work)} to run, {self.parallel} at a time")
    done = 0
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=self.parallel)
    try:
      futures = [executor.submit(self._run_point, *w) for w in work]
      for future in concurrent.futures.as_completed(futures):
        finished = future.result()
        if finished is None:
          continue
        point, record = finished
        done += 1
        self.log(f"[{done}/{len(work)}] {point.key}: " + self.describe(record))
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (stop_signals.interrupts).
      self.log("Stopping: SIGTERM to the running points; they are not recorded")
      self.stop()
      raise
    finally:
      executor.shutdown(wait=True, cancel_futures=True)
    return self.summary()

  def summary(self) -> Dict[str, int]:
    counts = {"ok": 0, "failed": 0, "pending": 0}
    for point in self.points:
      record = self.records.get(point.key)
      counts["pending" if record is None else _status(record)] += 1
    return counts

  def stop(self) -> None:
    """SIGTERM to the running points; the points not started yet do not start."""
    self._stopping.set()
    with self._lock:
      processes = list(self._processes)
    for process in processes:
      if process.poll() is None:
        process.send_signal(signal.SIGTERM)

  def _started(self, process) -> None:
    with self._lock:
      self._processes.add(process)
    if self._stopping.is_set():  # Stopped while it started.
      process.send_signal(signal.SIGTERM)

  def _run_point(self, point: Point, cmd: List[str],
                 completing: bool) -> Optional[Tuple[Point, dict]]:
    if self._stopping.is_set() or self._halted.is_set():
      return None
    try:
      return self._run(point, cmd, completing)
    except BaseException:
      # Stops the run: no other point starts (a worker would take the next at
      # once, before the main thread sees this).
      self._halted.set()
      raise

  def _run(self, point: Point, cmd: List[str], completing: bool) -> Optional[Tuple[Point, dict]]:
    if point.fresh and not completing:
      file_io.remove_quietly(point.output_dir)
    measured = runs.run(cmd, point.output_dir, self.popen, on_start=self._started,
                        cwd=point.cwd)
    with self._lock:
      self._processes = {p for p in self._processes if p.poll() is None}
    if self._stopping.is_set() and measured["status"] != "ok":
      return None  # Stopped by the runner: not a result; the next run resumes it.
    if measured["status"] != "ok" and self.on_failure is not None:
      self.on_failure(point, cmd, measured)
    if completing:
      if measured["status"] != "ok":
        self.log(f"{point.key}: completing it failed ({measured.get('error')}); its "
                 "record is kept")
      return point, self.records[point.key]
    record = point.record(measured, cmd)
    if point.record_file is not None:
      tables.write_json(posixpath.join(point.output_dir, point.record_file), record)
    with self._lock:
      self.records[point.key] = record
    if self.write_results is not None:
      # One writer at a time, each taking the records inside its turn: the last
      # write then holds every record, whichever thread wrote last.
      with self._write_lock:
        self.write_results(self.snapshot())
    if self.on_finished is not None:
      self.on_finished(point, record)
    return point, record
