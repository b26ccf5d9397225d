"""The serving process of serving_load.py: a Python that cannot import this repository.

Run by serving_load.py, never by hand: it reads its settings as one JSON object
on stdin and prints its results as one JSON line on stdout. It imports only the
standard library, NumPy, TensorFlow and tensorflow_text (the SavedModel's
tokenizer ops), and first makes the repository's modules unimportable (the
editable install would otherwise find them from anywhere), so what it measures
is the SavedModel alone, as a model server runs it.

What it does:
  1. loads the SavedModel and answers every example of the pool alone, one
     request after another: the sequential answer;
  2. warms up: every batch size for `warmup_s` from all client threads, each
     sending at least two requests;
  3. for each batch size, `clients` threads send requests of that many
     examples drawn at random from the pool, back to back, for `duration_s`;
     every response row is checked against the example's sequential answer
     (probabilities and score within `atol`, the same predicted label unless
     the sequential answer's two best labels are within `atol`); a request
     that raises counts as failed;
  4. samples its own resident memory (VmRSS) every 0.2 s throughout, and
     reads it at the end of each batch size's load.
"""

import json
import os
import sys
import threading
import time

SIGNATURE = "serving_default"


def forbid_repository_imports(repo):
  """Makes the modules of the repository at `repo` unimportable in this process."""
  names = {n[:-3] if n.endswith(".py") else n for n in os.listdir(repo)
           if n.endswith(".py") or os.path.exists(os.path.join(repo, n, "__init__.py"))}

  class Blocker:
    def find_spec(self, name, path=None, target=None):
      if name.split(".")[0] in names:
        raise ImportError(f"{name} belongs to the repository, which a serving process lacks")
      return None

  sys.meta_path.insert(0, Blocker())
  # This Python's own venv may lie in the repository (.venv, .venv-tf2.19): kept.
  inside = lambda p: (p + os.sep).startswith(repo + os.sep) and not (p + os.sep).startswith(
      sys.prefix + os.sep)
  sys.path[:] = [p for p in sys.path if not inside(os.path.abspath(p or "."))]


def rss_bytes():
  with open("/proc/self/status") as f:  # Linux; the process's own resident set.
    for line in f:
      if line.startswith("VmRSS:"):
        return int(line.split()[1]) * 1024
  raise RuntimeError("no VmRSS in /proc/self/status")


class MemorySampler(threading.Thread):
  """(seconds since start, RSS bytes) every `period` seconds until stopped."""

  def __init__(self, period=0.2):
    super().__init__(daemon=True)
    self.period, self.samples, self._done = period, [], threading.Event()
    self._start_time = time.monotonic()

  def run(self):
    while not self._done.is_set():
      self.samples.append((time.monotonic() - self._start_time, rss_bytes()))
      self._done.wait(self.period)

  def mark(self):
    """A point in time to compare later samples against."""
    return time.monotonic() - self._start_time

  def stop(self):
    self._done.set()
    self.join()


def wrong_rows(outputs, indices, reference, atol):
  """Positions of the rows of `outputs` (numpy, one row per entry of `indices`)
  that differ from the sequential answers `reference[index]`."""
  wrong = []
  for row, index in enumerate(indices):
    want = reference[index]
    probabilities = outputs["probabilities"][row]
    close = (abs(probabilities - want["probabilities"]).max() <= atol and
             abs(outputs["score"][row] - want["score"]) <= atol)
    top2 = sorted(want["probabilities"])[-2:] if len(want["probabilities"]) > 1 else [0, 1]
    tie = top2[1] - top2[0] <= atol
    same_label = outputs["predicted_label"][row] == want["predicted_label"] or tie
    if not (close and same_label):
      wrong.append(row)
  return wrong


def main():
  config = json.loads(sys.stdin.read())
  forbid_repository_imports(config["repo"])
  import numpy as np  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  import tensorflow_text  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import

  memory = MemorySampler()
  memory.start()
  serve = tf.saved_model.load(config["export_dir"]).signatures[SIGNATURE]
  pool = config["pool"]
  examples = list(zip(pool["text_a"], pool["text_b"], pool["task"]))

  def call(indices):
    picked = [examples[i] for i in indices]
    outputs = serve(text_a=tf.constant([e[0] for e in picked]),
                    text_b=tf.constant([e[1] for e in picked]),
                    task=tf.constant([e[2] for e in picked]))
    return {k: outputs[k].numpy() for k in ("probabilities", "score", "predicted_label")}

  reference = []
  for i in range(len(examples)):
    answer = call([i])
    reference.append({k: v[0] for k, v in answer.items()})
  for index in config.get("corrupt", []):  # For the check's own test: a wrong reference.
    reference[index] = dict(reference[index],
                            probabilities=reference[index]["probabilities"] + 0.5)

  def load(batch_size, duration_s, clients, seed, record, min_requests=0):
    """Clients sending back-to-back requests for duration_s (and each at least
    min_requests); per-request records."""
    deadline = time.monotonic() + duration_s
    lock = threading.Lock()

    def client(number):
      rng = np.random.default_rng([seed, batch_size, number])
      sent = 0
      while time.monotonic() < deadline or sent < min_requests:
        sent += 1
        indices = rng.integers(0, len(examples), batch_size).tolist()
        start = time.monotonic()
        try:
          outputs = call(indices)
          latency, wrong, error = time.monotonic() - start, wrong_rows(
              outputs, indices, reference, config["atol"]), None
        except Exception as e:  # pylint: disable=broad-except
          latency, wrong, error = time.monotonic() - start, [], f"{type(e).__name__}: {e}"
        with lock:
          record.append((latency, batch_size, len(wrong), error))

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    started = time.monotonic()
    for t in threads:
      t.start()
    for t in threads:
      t.join()
    return time.monotonic() - started  # The last requests end after the deadline.

  clients, seed = config["clients"], config["seed"]
  # Warm: every batch size, each client at least twice (a batch of 64 takes
  # seconds here), so that every concurrent shape has been allocated once.
  for batch_size in config["batch_sizes"]:
    load(batch_size, config["warmup_s"], clients, seed, [], min_requests=2)
  baseline = memory.mark()
  results = []
  for batch_size in config["batch_sizes"]:
    record = []
    elapsed = load(batch_size, config["duration_s"], clients, seed + 1, record)
    latencies = sorted(r[0] for r in record)
    errors = [r[3] for r in record if r[3]]
    results.append({
        "batch_size": batch_size, "requests": len(record), "seconds": elapsed,
        "requests_per_s": len(record) / elapsed,
        "examples_per_s": len(record) * batch_size / elapsed,
        "p50_ms": 1000 * float(np.percentile(latencies, 50)) if latencies else None,
        "p99_ms": 1000 * float(np.percentile(latencies, 99)) if latencies else None,
        "wrong_rows": sum(r[2] for r in record),
        "wrong_responses": sum(1 for r in record if r[2]),
        "failed_responses": len(errors), "first_error": errors[0] if errors else None,
        "rss_end_bytes": rss_bytes()})
  memory.stop()
  after = [rss for t, rss in memory.samples if t >= baseline]
  at_baseline = after[0]
  print(json.dumps({
      "results": results, "examples": len(examples),
      "rss_at_warm_bytes": at_baseline, "rss_max_after_warm_bytes": max(after),
      "rss_end_bytes": after[-1], "rss_peak_bytes": max(s[1] for s in memory.samples),
      "memory_samples": len(after), "tensorflow": tf.__version__,
      "repository_modules_loaded": repository_modules(config["repo"])}))


def repository_modules(repo):
  """Modules loaded from the repository (this script aside; a venv inside it aside)."""
  venv = sys.prefix + os.sep
  this_script = ("__main__", "__mp_main__")
  return sorted(m for m, module in sys.modules.items()
                if m not in this_script and (getattr(module, "__file__", None) or "").startswith(
                    repo + os.sep) and not module.__file__.startswith(venv))


if __name__ == "__main__":
  main()
