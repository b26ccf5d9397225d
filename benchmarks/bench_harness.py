"""Worker processes timed in interleaved rounds: the plumbing shared by the benchmarks.

Standard library only, so that both venvs (the project's TensorFlow one and
the AdapterHub / PyTorch one) and a bare python3 (adapterhub_side_by_side.py's
coordinator) can import it. The CPU line comes from the caller: the project's
runtime/machine.py, asked in the project's venv.

Each setting (a train mode of one framework) lives in its own worker
subprocess, so that its peak memory is its own: when a worker exits, the
coordinator reads that process's rusage with `os.wait4` (ru_maxrss of that
child alone, not RUSAGE_CHILDREN's maximum over every child).

Protocol: the coordinator writes one JSON command a line to the worker's
stdin; the worker answers with one line `@@BENCH {json}` on stdout (anything
else on stdout is passed through to stderr; the worker's stderr goes to a log
file, shown if the worker fails). Workers sit idle (blocked on stdin) while
another one runs, so interleaving A F A F ... gives each setting the same share
of a noisy machine's good and bad moments.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence

MARKER = "@@BENCH "


class WorkerError(RuntimeError):
  pass


class Worker:
  """A worker subprocess: `call(cmd, **args)` -> its answer (a dict)."""

  def __init__(self, name: str, argv: Sequence[str], env: Optional[dict] = None,
               cwd: Optional[str] = None):
    self.name = name
    self.argv = list(argv)
    self.log = tempfile.NamedTemporaryFile(
        "w+", prefix=f"bench_{name.replace(' ', '_')}_", suffix=".log", delete=False)
    full_env = dict(os.environ)
    full_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    full_env["PYTHONUNBUFFERED"] = "1"
    full_env.update(env or {})
    self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=self.log, text=True, bufsize=1, env=full_env,
                                 cwd=cwd)
    self.rusage = None
    self.exit_status = None

  def call(self, cmd: str, **args) -> dict:
    if self.proc.poll() is not None:
      self._fail(f"exited with status {self.proc.returncode} before '{cmd}'")
    try:
      self.proc.stdin.write(json.dumps(dict(args, cmd=cmd)) + "\n")
      self.proc.stdin.flush()
    except BrokenPipeError:
      self._fail(f"closed its input before '{cmd}'")
    return self.read()

  def read(self) -> dict:
    while True:
      line = self.proc.stdout.readline()
      if not line:
        self.proc.wait()
        self._fail(f"exited with status {self.proc.returncode}")
      if line.startswith(MARKER):
        answer = json.loads(line[len(MARKER):])
        if "error" in answer:
          self._fail(answer["error"])
        return answer
      sys.stderr.write(f"[{self.name}] {line}")

  def close(self) -> dict:
    """Ends the worker; returns its own rusage peak RSS (MiB) and CPU seconds."""
    answer = {}
    if self.proc.poll() is None:
      try:
        answer = self.call("exit")
      except WorkerError:
        pass
      self.proc.stdin.close()
    _, status, usage = os.wait4(self.proc.pid, 0)
    self.exit_status = status
    self.rusage = usage
    self.log.close()
    os.unlink(self.log.name)
    return dict(answer, peak_rss_mib=usage.ru_maxrss / 1024,  # Linux: KiB.
                cpu_s=usage.ru_utime + usage.ru_stime)

  def kill(self):
    if self.proc.poll() is None:
      self.proc.kill()
      self.proc.wait()

  def _fail(self, what: str):
    self.log.flush()
    try:
      with open(self.log.name) as f:
        tail = f.read()[-4000:]
    except OSError:
      tail = ""
    self.kill()
    raise WorkerError(f"worker {self.name} ({' '.join(self.argv)}): {what}\n"
                      f"--- end of its stderr ---\n{tail}")


def interleave(workers: Sequence[Worker], cmd: str, total_steps: int,
             steps_per_round: int, **args) -> Dict[str, List[float]]:
  """Runs `cmd` on A, B, ... A, B, ... in rounds of `steps_per_round` steps each.

  The order within a round alternates (A B, then B A, ...) so that neither
  setting always runs right after the other. Returns per-step seconds by worker.
  """
  times = {w.name: [] for w in workers}
  rounds = -(-total_steps // steps_per_round)
  for r in range(rounds):
    n = min(steps_per_round, total_steps - r * steps_per_round)
    order = workers if r % 2 == 0 else list(reversed(workers))
    for w in order:
      times[w.name] += w.call(cmd, steps=n, **args)["seconds"]
  return times


def summary(seconds: Sequence[float]) -> dict:
  """Median step time with its spread (quartiles), in seconds."""
  s = sorted(seconds)
  q = statistics.quantiles(s, n=4) if len(s) >= 2 else [s[0]] * 3
  return {"median_s": statistics.median(s), "q1_s": q[0], "q3_s": q[2],
          "min_s": s[0], "steps": len(s)}


# --- Worker side ---------------------------------------------------------------


def answer(payload: dict) -> None:
  sys.stdout.write(MARKER + json.dumps(payload) + "\n")
  sys.stdout.flush()


def status_mib() -> Dict[str, float]:
  """This process's sizes from /proc/self/status ("VmRSS", "RssAnon", ...), MiB;
  empty where there is no such file (not Linux)."""
  sizes = {}
  try:
    with open("/proc/self/status") as f:
      for line in f:
        fields = line.split()  # "VmRSS:", "123456", "kB"
        if len(fields) == 3 and fields[2] == "kB":
          sizes[fields[0].rstrip(":")] = int(fields[1]) / 1024
  except OSError:
    pass
  return sizes


def self_peak_rss_mib() -> float:
  """This process's peak RSS so far (VmHWM), MiB."""
  peak = status_mib().get("VmHWM")
  if peak is not None:
    return peak
  import resource
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def self_rss_mib() -> float:
  return status_mib().get("VmRSS", float("nan"))


class RssSplitPeaks:
  """The peaks of a process's RSS split the way Linux splits it (sampled every
  `interval_s` on a thread): anonymous memory (what the process allocated:
  weights, activations, Python objects) and file-backed pages (the libraries'
  code and data read from disk, kept in the page cache and shared with every
  process that maps them). VmHWM gives only their sum's peak; the kernel keeps
  no peak of each, hence the sampling."""

  FIELDS = {"RssAnon": "anon_mib", "RssFile": "file_mib"}

  def __init__(self, interval_s: float = 0.01):
    self.peaks = {name: 0.0 for name in self.FIELDS.values()}
    self._interval_s = interval_s
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._run, daemon=True)

  def start(self) -> "RssSplitPeaks":
    self.sample()
    self._thread.start()
    return self

  def sample(self) -> None:
    sizes = status_mib()
    if not sizes:  # Not Linux: no split.
      self._stop.set()
    for key, name in self.FIELDS.items():
      if key in sizes:
        self.peaks[name] = max(self.peaks[name], sizes[key])

  def stop(self) -> dict:
    """The peaks, MiB: {"anon_mib": ..., "file_mib": ...} (empty off Linux)."""
    self._stop.set()
    if self._thread.is_alive():
      self._thread.join()
    self.sample()
    return {k: v for k, v in self.peaks.items() if v}

  def _run(self):
    while not self._stop.wait(self._interval_s):
      self.sample()


class MemoryStages:
  """The RSS a worker process has after each stage of its work, and the peak within it.

  Each `stage(name)` records the RSS now and the peak RSS since the previous
  stage (VmHWM, reset after each stage through /proc/self/clear_refs where
  Linux allows it; elsewhere the peak so far).
  """

  def __init__(self):
    self.stages = []
    self._reset_peak()

  def stage(self, name: str) -> None:
    self.stages.append({"stage": name, "rss_mib": self_rss_mib(),
                        "peak_mib": self_peak_rss_mib()})
    self._reset_peak()

  @staticmethod
  def _reset_peak():
    try:
      with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # Resets VmHWM to the current RSS.
    except OSError:
      pass


def describe_split(closed: dict) -> str:
  """'; peaks: anonymous 700, file-backed 330 MiB' from a worker's close(), or ''."""
  split = closed.get("peak_rss_split") or {}
  if not split:
    return ""
  return (f"; peaks: anonymous {split['anon_mib']:.0f}, file-backed "
          f"{split['file_mib']:.0f} MiB")


def describe_stages(stages: Sequence[dict]) -> str:
  """'runtime 741 MiB, model +180, ...': what each stage added to the RSS."""
  parts, previous = [], 0.0
  for s in stages:
    added = s["rss_mib"] - previous
    peak = (f" (peak {s['peak_mib']:.0f})" if s["peak_mib"] > s["rss_mib"] + 1 else "")
    parts.append(f"{s['stage']} {'+' if previous else ''}{added:.0f}{peak}")
    previous = s["rss_mib"]
  return ", ".join(parts) + " MiB"


def serve(handlers: Dict[str, Callable[..., dict]], ready: dict) -> None:
  """The worker's loop: answers `ready`, then one answer per command until 'exit'."""
  split = RssSplitPeaks().start()
  answer(dict(ready, rss_mib=self_rss_mib()))
  for line in sys.stdin:
    if not line.strip():
      continue
    request = json.loads(line)
    cmd = request.pop("cmd")
    if cmd == "exit":
      answer({"peak_rss_self_mib": self_peak_rss_mib(), "peak_rss_split": split.stop()})
      return
    try:
      result = handlers[cmd](**request)
    except Exception as e:  # Reported to the coordinator, which stops.
      import traceback
      traceback.print_exc()
      answer({"error": f"{cmd}: {type(e).__name__}: {e}"})
      return
    answer(result)


def time_steps(step: Callable[[], None], steps: int) -> List[float]:
  """Seconds of each of `steps` calls of `step` (which must block until done)."""
  out = []
  for _ in range(steps):
    start = time.perf_counter()
    step()
    out.append(time.perf_counter() - start)
  return out


def machine_line(cpu: str) -> str:
  """The CPU (runtime/machine.cpu_line: timings compare only between like CPUs)
  and how busy it is."""
  load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",) * 3
  return (f"machine: {cpu}; load average {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f} (a busy machine gives noisy timings)")


def finish(results: dict, start: float, json_out: Optional[str], cpu: str,
           conditions=None) -> None:
  """Prints the conditions block (run_conditions.Conditions, if given) and the
  closing machine line, and writes every figure, the CPU line and the
  conditions to `json_out`."""
  results["cpu"] = cpu
  if conditions is not None:
    results["conditions"] = conditions.as_dict()
    print("\n".join(conditions.lines()))
  results["load_average_end"] = os.getloadavg()
  results["wall_s"] = time.perf_counter() - start
  print(f"{machine_line(cpu)}; benchmark took {results['wall_s']:.0f} s")
  if json_out:
    os.makedirs(os.path.dirname(os.path.abspath(json_out)), exist_ok=True)
    with open(json_out, "w") as f:
      json.dump(results, f, indent=2, sort_keys=True, default=str)
      f.write("\n")
    print(f"wrote {json_out}")
