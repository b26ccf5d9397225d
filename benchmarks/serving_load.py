r"""The exported SavedModel under concurrent load, as a model server runs it.

  .venv/bin/python benchmarks/serving_load.py                       # builds what it needs
  .venv/bin/python benchmarks/serving_load.py --export_dir=DIR      # a raw-text export

Without --export_dir it builds a multi-task export in --work_dir (default: a
temporary directory): three WordNet tasks (data/wordnet: lexname and pos,
single sentences with 10 and 4 labels, max_seq_length 32; example, sentence
pairs, 64) each trained briefly (--train_steps) with run_classifier.py into
one adapter bank on the real MiniLM (models/minilm, from convert_checkpoint.py),
then `python export_savedmodel.py`. The request pool is --pool_size dev examples
of the export's tasks, mixed and shuffled (with --export_dir: of those WordNet
tasks the export serves).

The SavedModel is served by serving_load_server.py in its own process: a
Python that cannot import this repository (what a model server has: the
SavedModel, TensorFlow and tensorflow-text's ops). It answers every pool
example alone first (the sequential answer), warms up, then for each of
--batch_sizes runs --clients threads sending requests of that many random
pool examples back to back for --duration_s, and checks every response row
against the sequential answer. Printed per batch size: requests/s,
examples/s, p50 and p99 request latency, wrong and failed responses, the
server's resident memory (RSS) at the end of that load; and its RSS when warm
and its largest value after, with the growth. The command fails (status 1) on any wrong or failed response, or a
growth of --max_rss_growth or more.
"""

import csv
import json
import os
import subprocess
import sys
import tempfile
import time

from absl import app, flags
import numpy as np
import tensorflow as tf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "serving_load_server.py")

# bank task -> (data directory, text_a column, text_b column or None, max_seq_length).
WORDNET_TASKS = {
    "lexname": ("wordnet_lexname", "sentence", None, 32),
    "pos": ("wordnet_pos", "sentence", None, 32),
    "example": ("wordnet_example", "gloss", "example", 64),
}

FLAGS = flags.FLAGS


def wordnet_pool(tasks, size, seed):
  """`size` dev examples of `tasks` (bank task names of WORDNET_TASKS), mixed and
  shuffled, as the signature's inputs: {"text_a", "text_b", "task"} lists."""
  rows = []
  for task in tasks:
    data, column_a, column_b, _ = WORDNET_TASKS[task]
    with tf.io.gfile.GFile(os.path.join(REPO, "data", "wordnet", data, "dev.tsv")) as f:
      for record in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
        rows.append((record[column_a], record[column_b] if column_b else "", task))
  picked = np.random.default_rng(seed).permutation(len(rows))[:size]
  return {"text_a": [rows[i][0] for i in picked], "text_b": [rows[i][1] for i in picked],
          "task": [rows[i][2] for i in picked]}


def build_export(work_dir, model_dir, train_steps):
  """Trains each WORDNET_TASKS task for train_steps into one bank and exports it."""
  if not tf.io.gfile.exists(os.path.join(model_dir, "bert_config.json")):
    raise SystemExit(f"no BERT in --model_dir={model_dir}: convert MiniLM first "
                     f"(benchmarks/README.md), or give --export_dir")
  bank, export_dir = os.path.join(work_dir, "bank"), os.path.join(work_dir, "export", "1")
  batch_size = 16
  for task, (data, column_a, column_b, length) in WORDNET_TASKS.items():
    train_examples = 4000  # Each WordNet task's train.tsv (data/wordnet/README.md).
    command = [
        sys.executable, os.path.join(REPO, "run_classifier.py"), "--task_name=tsv",
        f"--data_dir={os.path.join(REPO, 'data', 'wordnet', data)}",
        f"--text_a_column={column_a}", f"--bank_task={task}", f"--adapter_bank={bank}",
        f"--output_dir={os.path.join(work_dir, task)}",
        f"--vocab_file={model_dir}/vocab.txt", f"--bert_config_file={model_dir}/bert_config.json",
        f"--init_checkpoint={model_dir}/bert_model.ckpt", "--do_train",
        f"--max_seq_length={length}", f"--train_batch_size={batch_size}",
        "--learning_rate=1e-3", "--seed=1",
        f"--num_train_epochs={(train_steps + 0.5) * batch_size / train_examples}"]
    if column_b:
      command.append(f"--text_b_column={column_b}")
    _run(command, f"training {task}")
  _run([sys.executable, "export_savedmodel.py", f"--adapter_bank={bank}",
        f"--export_dir={export_dir}", "--overwrite"], "exporting")
  return export_dir


def _run(command, what):
  started = time.monotonic()
  result = subprocess.run(command, cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  if result.returncode:
    raise SystemExit(f"{what} failed:\n{result.stderr[-3000:]}")
  print(f"{what}: {time.monotonic() - started:.0f} s", flush=True)


def serve_under_load(export_dir, pool, batch_sizes, duration_s, warmup_s, clients,
                     atol=1e-4, seed=1, corrupt=()):
  """Runs serving_load_server.py on export_dir (module docstring); its results.

  Args:
    corrupt: pool indices whose sequential answer the server replaces with a
      wrong one before the load (a test that the check finds wrong answers).
  """
  config = dict(export_dir=os.path.abspath(export_dir), pool=pool,
                batch_sizes=[int(b) for b in batch_sizes], duration_s=duration_s,
                warmup_s=warmup_s, clients=clients, atol=atol, seed=seed,
                corrupt=list(corrupt), repo=REPO)
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  env["TF_CPP_MIN_LOG_LEVEL"] = "2"
  with tempfile.TemporaryDirectory() as elsewhere:  # cwd outside the repository.
    result = subprocess.run([sys.executable, SERVER], input=json.dumps(config), cwd=elsewhere,
                            capture_output=True, text=True, env=env)
  if result.returncode:
    raise RuntimeError(f"the serving process failed:\n{result.stderr[-3000:]}")
  return json.loads(result.stdout.strip().splitlines()[-1])


def rss_growth(results):
  return results["rss_max_after_warm_bytes"] / results["rss_at_warm_bytes"] - 1


def report(results):
  """The printed table and memory line."""
  mib = lambda b: b / 2**20
  lines = [f"{'batch':>5} {'requests':>8} {'requests/s':>10} {'examples/s':>10} "
           f"{'p50 ms':>8} {'p99 ms':>8} {'wrong':>5} {'failed':>6} {'RSS after, MiB':>14}"]
  for r in results["results"]:
    lines.append(f"{r['batch_size']:>5} {r['requests']:>8} {r['requests_per_s']:>10.1f} "
                 f"{r['examples_per_s']:>10.1f} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} "
                 f"{r['wrong_responses']:>5} {r['failed_responses']:>6} "
                 f"{mib(r['rss_end_bytes']):>14.0f}")
    if r["first_error"]:
      lines.append(f"      first error: {r['first_error'][:300]}")
  lines.append(f"server RSS: {mib(results['rss_at_warm_bytes']):.0f} MiB warm, at most "
               f"{mib(results['rss_max_after_warm_bytes']):.0f} MiB after "
               f"({100 * rss_growth(results):+.1f}%), {mib(results['rss_end_bytes']):.0f} MiB "
               f"at the end; {results['memory_samples']} samples; "
               f"{results['examples']} distinct examples; TensorFlow {results['tensorflow']}")
  return "\n".join(lines)


def define_flags():
  """The command's flags (in main only: a test imports this module)."""
  flags.DEFINE_string("export_dir", None, "A raw-text SavedModel of export_savedmodel.py; default: "
                      "build one in --work_dir.")
  flags.DEFINE_string("work_dir", None, "Where to build the bank and export (default: a "
                      "temporary directory, removed after).")
  flags.DEFINE_string("model_dir", os.path.join(REPO, "models", "minilm"),
                      "The base BERT (bert_config.json, vocab.txt, bert_model.ckpt).")
  flags.DEFINE_integer("train_steps", 12, "Training steps per task when building.")
  flags.DEFINE_list("batch_sizes", ["1", "8", "64"], "Examples per request.")
  flags.DEFINE_float("duration_s", 30, "Measured seconds per batch size.")
  flags.DEFINE_float("warmup_s", 5, "Warm-up seconds per batch size, before any measurement.")
  flags.DEFINE_integer("clients", 8, "Concurrent client threads.")
  flags.DEFINE_integer("pool_size", 256, "Distinct examples the requests draw from.")
  flags.DEFINE_float("atol", 1e-4, "Largest difference from the sequential answer.")
  flags.DEFINE_float("max_rss_growth", 0.05, "Largest allowed RSS growth after warm-up.")
  flags.DEFINE_integer("seed", 1, "Seed of the pool and the clients' draws.")
  flags.DEFINE_string("json_out", None, "Also write the results here.")


def main(argv):
  del argv
  with tempfile.TemporaryDirectory() as scratch:
    export_dir = FLAGS.export_dir
    if not export_dir:
      work_dir = FLAGS.work_dir or scratch
      export_dir = build_export(work_dir, FLAGS.model_dir, FLAGS.train_steps)
    with tf.io.gfile.GFile(os.path.join(export_dir, "assets.extra", "tasks.json")) as f:
      served = [t["name"] for t in json.load(f)["tasks"]]
    tasks = [t for t in WORDNET_TASKS if t in served]
    if not tasks:
      raise SystemExit(f"{export_dir} serves none of the tasks {', '.join(WORDNET_TASKS)}")
    pool = wordnet_pool(tasks, FLAGS.pool_size, FLAGS.seed)
    print(f"load average {os.getloadavg()[0]:.2f}; {FLAGS.clients} clients, "
          f"{FLAGS.duration_s:g} s per batch size after {FLAGS.warmup_s:g} s warm-up each; "
          f"tasks {', '.join(tasks)}", flush=True)
    results = serve_under_load(export_dir, pool, FLAGS.batch_sizes, FLAGS.duration_s,
                               FLAGS.warmup_s, FLAGS.clients, FLAGS.atol, FLAGS.seed)
  print(report(results))
  print(f"load average {os.getloadavg()[0]:.2f}")
  if FLAGS.json_out:
    with tf.io.gfile.GFile(FLAGS.json_out, "w") as f:
      json.dump(results, f, indent=2)
  bad = sum(r["wrong_responses"] + r["failed_responses"] for r in results["results"])
  if bad or rss_growth(results) >= FLAGS.max_rss_growth or results["repository_modules_loaded"]:
    raise SystemExit(f"FAILED: {bad} wrong or failed responses, RSS growth "
                     f"{100 * rss_growth(results):.1f}%, repository modules loaded: "
                     f"{results['repository_modules_loaded']}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
