"""experiments/multitask_comparison.py: its commands, its table (hand-computed) and SIGTERM."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from absl import flags

from experiments import multitask_comparison as comparison
from experiments.points import runner as runner_lib


def _flags(*args):
  fv = flags.FlagValues()
  comparison.define_flags(fv)
  fv(["x", "--output_dir=/tmp/cmp", *args])
  return fv


def test_commands_give_every_method_the_same_tasks_and_budget():
  F = _flags("--num_train_epochs=0.5", "--learning_rate=3e-4")
  houlsby = comparison.commands(F, "houlsby", 2)
  assert [d.split("/")[-1] for d, _ in houlsby] == list(comparison.WORDNET_TASKS)
  example = dict(a.lstrip("-").split("=", 1) for a in houlsby[2][1][2:] if "=" in a)
  assert example["text_a_column"] == "gloss" and example["text_b_column"] == "example"
  assert example["adapter_size"] == "64" and example["seed"] == "2"
  assert houlsby[2][1][1].endswith("run_classifier.py")
  assert "text_b_column" not in " ".join(houlsby[0][1])  # Single-sentence task.
  [(out, hyper)] = comparison.commands(F, "hyperformer", 2)
  assert out == "/tmp/cmp/hyperformer/seed-2" and hyper[1].endswith("run_multitask.py")
  args = dict(a.lstrip("-").split("=", 1) for a in hyper[2:] if "=" in a)
  assert args["multitask_adapters"] == "hyperformer" and args["adapter_size"] == "16"
  assert args["text_a_column"] == "sentence,sentence,gloss,word_a"
  assert args["text_b_column"] == ",,example,word_b"
  assert args["num_train_epochs"] == "0.5" and args["learning_rate"] == "0.0003"
  assert "--train_mode=layer_norm" not in hyper
  [(_, with_ln)] = comparison.commands(F, "hyperformer_ln", 1)
  assert "--multitask_adapters=hyperformer" in with_ln and "--train_mode=layer_norm" in with_ln
  [(_, shared)] = comparison.commands(F, "shared", 1)
  assert "--adapter_size=64" in shared and "--multitask_adapters=shared" in shared
  # HyperFormer++'s initial scales reach its runs (both), and only them.
  F = _flags("--generator_init_stddev=0.1", "--task_embedding_init_stddev=0.5")
  for method in ("hyperformer", "hyperformer_ln"):
    [(_, cmd)] = comparison.commands(F, method, 1)
    assert "--generator_init_stddev=0.1" in cmd and "--task_embedding_init_stddev=0.5" in cmd
  for method in ("shared", "houlsby"):
    assert not any("stddev" in a for _, cmd in comparison.commands(F, method, 1) for a in cmd)
  # Every run writes its dev predictions (the study's bootstrap reads them), and
  # the eval-only command of a run is the same run without training.
  for method in comparison.METHODS:
    trains, evals = comparison.commands(F, method, 1), comparison.commands(F, method, 1, False)
    for (out, cmd), (eval_out, eval_cmd) in zip(trains, evals):
      assert "--eval_predictions" in cmd and "--do_train" in cmd and "--do_eval" in cmd
      assert eval_out == out
      assert eval_cmd == [("--nodo_train" if a == "--do_train" else a) for a in cmd]
    assert [comparison.eval_predictions_path("/tmp/cmp", method, 1, t)
            for t in comparison.WORDNET_TASKS] == [
        f"/tmp/cmp/{method}/seed-1/{t}/eval_predictions.tsv" for t in comparison.WORDNET_TASKS]


def test_a_finished_run_without_predictions_is_evaluated_again(tmp_path):
  """A run finished before the comparison wrote eval_predictions.tsv: its last
  checkpoint is evaluated once (the eval-only command), its record kept."""
  out = tmp_path / "houlsby" / "seed-1" / "wordnet_pos"
  out.mkdir(parents=True)
  record = {"status": "ok", "wall_seconds": 100.0, "per_task": [], "all_tasks": []}
  (out / comparison.DONE_FILE).write_text(json.dumps(record))
  predictions = out / "eval_predictions.tsv"
  started = []

  def popen(cmd, **kwargs):  # The eval-only run: its results and predictions.
    started.append(cmd)
    script = (f"import pathlib; pathlib.Path({str(out / 'eval_results.txt')!r})"
              ".write_text('eval_accuracy = 0.5\\n'); "
              f"pathlib.Path({str(predictions)!r}).write_text('0.5\\t0.5\\n')")
    return subprocess.Popen([sys.executable, "-c", script], **kwargs)

  points = {p.key: p for p in comparison.points(_flags(f"--output_dir={tmp_path}"),
                                                "houlsby", 1)}
  assert list(points) == [f"houlsby/seed-1/{t}" for t in comparison.WORDNET_TASKS]
  point = points["houlsby/seed-1/wordnet_pos"]
  assert point.output_dir == str(out) and point.record_file == comparison.DONE_FILE
  for _ in range(2):
    run = runner_lib.Runner([point], popen=popen, log=lambda _: None)
    assert run.pending() == [] and run.run() == {"ok": 1, "failed": 0, "pending": 0}
    assert run.records == {point.key: record}
  assert started == [point.completion]  # Once: the second time the predictions are there.
  assert "--nodo_train" in point.completion and "--do_train" in point.command
  assert predictions.read_text() == "0.5\t0.5\n"
  assert json.loads((out / comparison.DONE_FILE).read_text()) == record


def test_rows_are_means_and_stds_over_seeds():
  tasks = list(comparison.WORDNET_TASKS)
  records = {}
  for seed, accs in ((1, [0.8, 0.9, 0.6, 0.5]), (2, [0.6, 0.9, 0.7, 0.7])):
    for task, acc in zip(tasks, accs):
      records[("hyperformer", seed, task)] = {"accuracy": acc}
    records[("hyperformer", seed, "params")] = {"trained_per_task": 1000,
                                                "total_multiple": 1.02}
  rows = {r["task"]: r for r in comparison.rows_of(records)}
  assert rows[tasks[0]]["mean"] == 0.7
  assert rows[tasks[0]]["std"] == round(float(np.std([0.8, 0.6], ddof=1)), 4)
  assert rows["average"]["values"] == [0.7, 0.725]
  assert rows["average"]["mean"] == 0.7125
  table = comparison.markdown(comparison.rows_of(records))
  assert "| hyperformer | 1,000 | 1.020 | 0.700 ± 0.141 |" in table


# A stand-in for a run: it says it started, then waits; SIGTERM makes it
# write what it received and end as run_classifier.py does (status 143).
_CHILD = """
import pathlib, signal, sys, time
def stop(signum, frame):
  pathlib.Path(sys.argv[1]).write_text("SIGTERM")
  sys.exit(143)
signal.signal(signal.SIGTERM, stop)
print("started", flush=True)
time.sleep(60)
"""


def test_sigterm_reaches_the_running_child_and_stops_the_comparison(tmp_path):
  received = tmp_path / "received"
  started = threading.Event()

  def popen(cmd, **kwargs):
    process = subprocess.Popen([sys.executable, "-c", _CHILD, str(received)], **kwargs)
    started.set()
    return process

  def send_sigterm():
    started.wait(30)
    time.sleep(1.0)  # The child has installed its handler.
    os.kill(os.getpid(), signal.SIGTERM)
  threading.Thread(target=send_sigterm, daemon=True).start()
  previous = signal.getsignal(signal.SIGTERM)
  F = _flags(f"--output_dir={tmp_path / 'cmp'}", f"--model_dir={tmp_path}",
             f"--data_root={tmp_path}", "--methods=hyperformer", "--seeds=1")
  with pytest.raises(KeyboardInterrupt):
    comparison.main([], F, popen=popen)
  assert received.read_text() == "SIGTERM"  # Ended by the forwarded signal, not orphaned.
  log = (tmp_path / "cmp" / "hyperformer" / "seed-1" / "run.log").read_text()
  assert "started" in log
  assert signal.getsignal(signal.SIGTERM) == previous  # The handler was put back.
