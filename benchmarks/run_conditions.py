r"""What explains a difference between two machines that print the same CPU line.

The CPU line (runtime/machine.py) names the CPU; two machines of that name
still gave 2.0x and 1.26x for the same equal-work command. What differs between
them is printed by every benchmark, in one block with its figures (and under
"conditions" in its JSON), from this one owner:

  * the threads each framework runs on: TensorFlow's intra- and inter-op
    settings (tf.config.threading; 0 is its default, the CPUs of the process's
    affinity mask unless TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS say
    otherwise) and the threads its oneDNN pool reports; torch's
    get_num_threads / get_num_interop_threads (asked in the PyTorch venv's own
    process: torch is never imported into TensorFlow's);
  * the ISA oneDNN picked in each (its verbose line "info,cpu,isa:..."), and
    torch's ATen CPU capability and BLAS; read from a short probe subprocess
    run with ONEDNN_VERBOSE=1, so the benchmark's own processes stay quiet;
  * a matmul ceiling measured by that probe at the start, on the model's own
    shapes (tokens x hidden @ hidden x hidden and @ hidden x intermediate), in
    float32 and, where the run uses it, bfloat16; and the achieved GFLOP/s of
    each measured step (its counted matrix FLOPs, benchmark.matmul_flops, over
    its median time) as a share of that ceiling;
  * the steal time (/proc/stat: the hypervisor ran someone else on our CPUs)
    and the load average, sampled from the start to the end of the run.

Standard library only, like bench_harness (a bare python3 runs
adapterhub_side_by_side.py's coordinator); the probes run in the venv given.
"""

import json
import os
import re
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

PROBE_MARKER = "@@CONDITIONS "

# --- Parsing (pure functions: tests/test_benchmark_conditions.py) ---------------

# oneDNN v3: "onednn_verbose,v1,info,cpu,isa:Intel AVX2"; older builds print
# "onednn_verbose,info,cpu,isa:..." or "dnnl_verbose,info,cpu,isa:...", and
# with ONEDNN_VERBOSE_TIMESTAMP a time field comes first.
_ISA = re.compile(r"^(?:onednn|dnnl)_verbose,(?:[^,\n]*,)*?info,cpu,isa:(.*?)\s*$", re.M)
_RUNTIME = re.compile(
    r"^(?:onednn|dnnl)_verbose,(?:[^,\n]*,)*?info,cpu,runtime:([^,\n]*)(?:,nthr:(\d+))?", re.M)
_VERSION = re.compile(r"^(?:onednn|dnnl)_verbose,(?:[^,\n]*,)*?info,(?:oneDNN|DNNL) (v[\d.]+)",
                      re.M)


def onednn_isa(text: str) -> Optional[str]:
  """The ISA oneDNN reported in its verbose output, e.g. "Intel AVX2"; None if none."""
  found = _ISA.search(text)
  return found.group(1) if found else None


def onednn_info(text: str) -> dict:
  """oneDNN's version, ISA, CPU runtime and thread count from its verbose output."""
  runtime = _RUNTIME.search(text)
  version = _VERSION.search(text)
  return {"version": version.group(1) if version else None, "isa": onednn_isa(text),
          "runtime": runtime.group(1) if runtime else None,
          "threads": int(runtime.group(2)) if runtime and runtime.group(2) else None}


# /proc/stat's "cpu" line: user nice system idle iowait irq softirq steal guest
# guest_nice, in clock ticks. guest and guest_nice are already inside user and
# nice, so the total is the first eight.
_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def cpu_times(stat_text: str) -> Dict[str, int]:
  """The all-CPU line of /proc/stat as {field: ticks} (fields it lacks count 0)."""
  for line in stat_text.splitlines():
    parts = line.split()
    if parts and parts[0] == "cpu":
      values = [int(v) for v in parts[1:1 + len(_FIELDS)]]
      values += [0] * (len(_FIELDS) - len(values))
      return dict(zip(_FIELDS, values))
  raise ValueError("no 'cpu' line in /proc/stat's text")


def steal_share(before: Dict[str, int], after: Dict[str, int]) -> Optional[float]:
  """Steal ticks over all ticks between two cpu_times samples (None if none passed)."""
  total = sum(after[f] - before[f] for f in _FIELDS)
  return (after["steal"] - before["steal"]) / total if total > 0 else None


def busy_share(before: Dict[str, int], after: Dict[str, int]) -> Optional[float]:
  """Ticks not idle (nor waiting on I/O) over all ticks: every process's, ours too."""
  total = sum(after[f] - before[f] for f in _FIELDS)
  idle = sum(after[f] - before[f] for f in ("idle", "iowait"))
  return (total - idle) / total if total > 0 else None


def achieved(flops: float, seconds: float, ceiling_gflops: Optional[float]
             ) -> Tuple[float, Optional[float]]:
  """(GFLOP/s of `flops` done in `seconds`, that as a share of the ceiling or None)."""
  gflops = flops / seconds / 1e9
  return gflops, (gflops / ceiling_gflops if ceiling_gflops else None)


def step_dtype(mixed_precision: str) -> str:
  """The dtype a step's products run in under --mixed_precision: its ceiling's."""
  return {"none": "float32"}.get(mixed_precision, mixed_precision)


def model_shapes(tokens: int, hidden: int, intermediate: int) -> List[Tuple[int, int, int]]:
  """(M, K, N) of the encoder's dense layers: tokens x hidden @ hidden x {hidden, intermediate}."""
  return [(tokens, hidden, hidden), (tokens, hidden, intermediate)]


# --- Load and steal, sampled while the benchmark runs ---------------------------


def _read(path: str) -> Optional[str]:
  try:
    with open(path) as f:
      return f.read()
  except OSError:
    return None


class Sampler:
  """/proc/stat and the load average at the start, every `interval` s and at the end."""

  def __init__(self, interval: float = 2.0):
    self.interval = interval
    self._stop = threading.Event()
    self.loads = []
    self._start_times = self._times()
    self.load_start = self._load()
    self._thread = threading.Thread(target=self._run, daemon=True)
    self._thread.start()
    self.result = None

  @staticmethod
  def _times():
    text = _read("/proc/stat")
    return cpu_times(text) if text else None

  @staticmethod
  def _load():
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None

  def _run(self):
    while not self._stop.wait(self.interval):
      self.loads.append(self._load())

  def stop(self) -> dict:
    if self.result is None:
      self._stop.set()
      self._thread.join()
      end = self._times()
      load_end = self._load()
      loads = [l for l in [self.load_start] + self.loads + [load_end] if l is not None]
      have = self._start_times is not None and end is not None
      self.result = {
          "steal_share": steal_share(self._start_times, end) if have else None,
          "busy_share": busy_share(self._start_times, end) if have else None,
          "load_average_start": self.load_start, "load_average_end": load_end,
          "load_average_max": max(loads) if loads else None}
    return self.result


# --- Probes (short subprocesses in each framework's venv) ----------------------

_TF_PROBE = r"""
import json, os, sys, time
import tensorflow as tf
shapes, dtypes, repeats = json.loads(sys.argv[1])
intra = tf.config.threading.get_intra_op_parallelism_threads()
inter = tf.config.threading.get_inter_op_parallelism_threads()
ceilings = {}
for dtype in dtypes:
  for m, k, n in shapes:
    a = tf.cast(tf.random.normal([m, k], seed=1), dtype)
    b = tf.cast(tf.random.normal([k, n], seed=2), dtype)
    f = tf.function(lambda: tf.reduce_sum(tf.cast(tf.matmul(a, b), tf.float32)))
    f().numpy(); f().numpy()
    times = []
    for _ in range(repeats):
      t = time.perf_counter(); f().numpy(); times.append(time.perf_counter() - t)
    ceilings.setdefault(dtype, {})[f"{m}x{k}x{n}"] = 2 * m * k * n / sorted(times)[len(times) // 2] / 1e9
print("@@CONDITIONS " + json.dumps({"version": tf.__version__,
    "threads": {"intra_op": intra, "inter_op": inter}, "ceilings": ceilings}))
"""

_TORCH_PROBE = r"""
import json, os, sys, time
import torch
shapes, dtypes, repeats = json.loads(sys.argv[1])
threads = {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}
# A reorder to oneDNN's layout and a convolution big enough for oneDNN (a small one
# takes ATen's own path) make oneDNN print its ISA; float32 matmul goes to BLAS.
if torch.backends.mkldnn.is_available():
  torch.ones(2, 64, 32, 32).to_mkldnn().to_dense()
  torch.nn.functional.conv2d(torch.ones(4, 64, 56, 56), torch.ones(64, 64, 3, 3))
config = torch.__config__.show()
blas = [l.split("BLAS_INFO=")[1].split(",")[0] for l in config.splitlines() if "BLAS_INFO=" in l]
ceilings = {}
for dtype in dtypes:
  for m, k, n in shapes:
    g = torch.Generator().manual_seed(1)
    a = torch.randn(m, k, generator=g).to(getattr(torch, dtype))
    b = torch.randn(k, n, generator=g).to(getattr(torch, dtype))
    with torch.inference_mode():
      torch.mm(a, b); torch.mm(a, b)
      times = []
      for _ in range(repeats):
        t = time.perf_counter(); torch.mm(a, b).sum().item(); times.append(time.perf_counter() - t)
    ceilings.setdefault(dtype, {})[f"{m}x{k}x{n}"] = 2 * m * k * n / sorted(times)[len(times) // 2] / 1e9
print("@@CONDITIONS " + json.dumps({"version": torch.__version__, "threads": threads,
    "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    "mkldnn": torch.backends.mkldnn.is_available(), "blas": blas[0] if blas else None,
    "ceilings": ceilings}))
"""

PROBES = {"tensorflow": _TF_PROBE, "torch": _TORCH_PROBE}
_THREAD_ENV = ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS",
               "MKL_NUM_THREADS", "TF_ENABLE_ONEDNN_OPTS")


def affinity_cpus() -> int:
  return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def tf_effective_threads(configured: int, env: Dict[str, str], cpus: int) -> int:
  """The threads a TensorFlow pool runs: its setting, else the environment's, else the CPUs."""
  if configured > 0:
    return configured
  try:
    from_env = int(env or 0)
  except ValueError:
    from_env = 0
  return from_env if from_env > 0 else cpus


def probe(framework: str, python: str, shapes: Sequence[Tuple[int, int, int]],
          dtypes: Sequence[str] = ("float32",), repeats: int = 5,
          cwd: Optional[str] = None, timeout: float = 600) -> dict:
  """Runs the framework's probe in `python` (its venv) with ONEDNN_VERBOSE=1."""
  env = dict(os.environ, ONEDNN_VERBOSE="1", TF_CPP_MIN_LOG_LEVEL="2")
  env.pop("ONEDNN_VERBOSE_TIMESTAMP", None)
  out = {"framework": framework, "shapes": [list(s) for s in shapes],
         "env": {k: os.environ[k] for k in _THREAD_ENV if k in os.environ}}
  try:
    run = subprocess.run([python, "-c", PROBES[framework], json.dumps(
        [[list(s) for s in shapes], list(dtypes), repeats])], capture_output=True, text=True,
                         env=env, cwd=cwd, timeout=timeout)
  except (OSError, subprocess.TimeoutExpired) as e:
    return dict(out, error=f"{type(e).__name__}: {e}")
  answers = [l for l in run.stdout.splitlines() if l.startswith(PROBE_MARKER)]
  if run.returncode or not answers:
    return dict(out, error=f"probe exited with {run.returncode}: {run.stderr[-500:]}")
  out.update(json.loads(answers[-1][len(PROBE_MARKER):]))
  out["onednn"] = onednn_info(run.stdout + run.stderr)
  out["affinity_cpus"] = affinity_cpus()
  if framework == "tensorflow":
    t = out["threads"]
    out["threads"].update(
        intra_op_effective=tf_effective_threads(t["intra_op"], os.environ.get(
            "TF_NUM_INTRAOP_THREADS"), out["affinity_cpus"]),
        inter_op_effective=tf_effective_threads(t["inter_op"], os.environ.get(
            "TF_NUM_INTEROP_THREADS"), out["affinity_cpus"]))
  out["ceiling"] = {d: max(c.values()) for d, c in out.get("ceilings", {}).items()}
  return out


# --- The block -------------------------------------------------------------------


class Conditions:
  """Probes at the start, samples steal and load until `stop`, and describes it all.

    conditions = run_conditions.Conditions({"tensorflow": sys.executable}, shapes)
    ... the benchmark ...
    conditions.add_step("train adapters", "tensorflow", flops, median_s)
    harness.finish(results, start, json_out, cpu, conditions)  # prints the block
  """

  def __init__(self, pythons: Dict[str, Optional[str]], shapes: Sequence[Tuple[int, int, int]],
               dtypes: Sequence[str] = ("float32",), repeats: int = 5,
               cwd: Optional[str] = None):
    self.probes = {fw: probe(fw, py, shapes, dtypes, repeats, cwd=cwd)
                   for fw, py in pythons.items() if py}
    self.steps = []
    self.sampler = Sampler()  # After the probes: the benchmark's own run.

  def add_step(self, name: str, framework: str, flops: float, seconds: float,
               dtype: str = "float32") -> dict:
    ceiling = self.probes.get(framework, {}).get("ceiling", {}).get(dtype)
    gflops, share = achieved(flops, seconds, ceiling)
    step = {"name": name, "framework": framework, "dtype": dtype, "flops": flops,
            "seconds": seconds, "gflops_per_s": gflops, "ceiling_gflops_per_s": ceiling,
            "share_of_ceiling": share}
    self.steps.append(step)
    return step

  def as_dict(self) -> dict:
    return {"probes": self.probes, "steps": self.steps, "load": self.sampler.stop(),
            "cpu_count": os.cpu_count(), "affinity_cpus": affinity_cpus()}

  def lines(self) -> List[str]:
    return describe(self.as_dict())


def _pct(share):
  return "?" if share is None else f"{100 * share:.1f}%"


def describe(conditions: dict) -> List[str]:
  """The block's lines, from Conditions.as_dict() (or a JSON file's "conditions")."""
  lines = ["conditions (what differs between two machines of the same CPU line):"]
  for fw, p in conditions["probes"].items():
    if "error" in p:
      lines.append(f"  {fw}: probe failed ({p['error'].splitlines()[0][:200]})")
      continue
    t, d = p["threads"], p.get("onednn") or {}
    if fw == "tensorflow":
      threads = (f"intra-op {t['intra_op']} (runs {t['intra_op_effective']}), inter-op "
                 f"{t['inter_op']} (runs {t['inter_op_effective']}); 0 = the affinity mask's "
                 f"{p['affinity_cpus']} CPUs")
    else:
      threads = (f"intra-op {t['intra_op']}, inter-op {t['inter_op']}; ATen CPU capability "
                 f"{p.get('cpu_capability')}, BLAS {p.get('blas')}")
    env = "".join(f", {k}={v}" for k, v in sorted(p.get("env", {}).items()))
    lines.append(f"  {fw} {p['version']}: threads {threads}{env}")
    lines.append(f"  {fw} oneDNN {d.get('version') or '?'}: isa {d.get('isa') or 'not reported'}"
                 + (f", {d['runtime']} runtime, {d['threads']} threads" if d.get("runtime")
                    else ""))
    for dtype, by_shape in p.get("ceilings", {}).items():
      shapes = ", ".join(f"{s} {g:.1f}" for s, g in by_shape.items())
      lines.append(f"  {fw} matmul ceiling at the start, {dtype}: {p['ceiling'][dtype]:.1f} "
                   f"GFLOP/s (the best of the model's shapes M x K x N: {shapes})")
  for s in conditions["steps"]:
    of = (f" = {_pct(s['share_of_ceiling'])} of {s['framework']}'s {s['dtype']} ceiling"
          if s["share_of_ceiling"] is not None else " (no ceiling measured)")
    lines.append(f"  achieved {s['name']}: {s['flops'] / 1e9:.1f} GFLOP in "
                 f"{1000 * s['seconds']:.1f} ms = {s['gflops_per_s']:.1f} GFLOP/s{of}")
  if not conditions["steps"]:
    lines.append("  achieved: no step with counted FLOPs in this benchmark")
  load = conditions["load"]
  fmt = lambda v: "?" if v is None else f"{v:.2f}"
  lines.append(f"  while it ran: steal {_pct(load['steal_share'])} of CPU time, all CPUs busy "
               f"{_pct(load['busy_share'])}; load average {fmt(load['load_average_start'])} "
               f"at the start, {fmt(load['load_average_end'])} at the end, max "
               f"{fmt(load['load_average_max'])}, on {conditions['affinity_cpus']} of "
               f"{conditions['cpu_count']} CPUs")
  return lines


if __name__ == "__main__":  # A quick look: python3 benchmarks/run_conditions.py [python]
  c = Conditions({"tensorflow": sys.argv[1] if len(sys.argv) > 1 else sys.executable},
                 model_shapes(256, 64, 256), repeats=3)
  print("\n".join(c.lines()))
