"""A stand-in for run_classifier.py, for the tests of experiments/' runner and the
commands that describe its points (test_sweep.py, test_sweep_runner.py,
test_paper_table.py).

STAND_IN writes eval_results.txt and the parameter lines as run_classifier.py
does; the accuracy is a known function of the flags (accuracy()); a
learning_rate >= 1 "diverges" (exit status 2) unless FAKE_NO_FAIL is set. Each
call appends its flags and start / end times to $FAKE_CALLS; FAKE_SLEEP seconds
pass before it does anything.
"""

import json
import sys

STAND_IN = r'''
import json, os, sys, time
args = dict((a[2:].split("=", 1) + ["true"])[:2] for a in sys.argv[1:])
start = time.time()
time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
with open(os.environ["FAKE_CALLS"], "a") as f:
  f.write(json.dumps({"args": args, "start": start, "end": time.time(),
                      "cwd": os.getcwd()}) + "\n")
lr, seed = float(args["learning_rate"]), int(args.get("seed", 0))
size = int(args.get("adapter_size", 64))
if lr >= 1 and not os.environ.get("FAKE_NO_FAIL"):
  print("ERROR: training diverged: the loss is nan at step 3", file=sys.stderr)
  sys.exit(2)
rows = 10
if "data_dir" in args and os.path.exists(os.path.join(args["data_dir"], "train.tsv")):
  with open(os.path.join(args["data_dir"], "train.tsv")) as f:
    rows = sum(1 for line in f if line.strip()) - 1
trainable = 1000 + 10 * size
print("***** Total Parameters = 100000 *****", file=sys.stderr)
print("***** Adapter Parameters = %d *****" % (10 * size), file=sys.stderr)
print("***** Total Trainable Parameters = %d *****" % trainable, file=sys.stderr)
print("I0101 classifier.py:1] ***** Running training *****", file=sys.stderr)
print("I0101 classifier.py:2]   Num examples = %d" % rows, file=sys.stderr)
os.makedirs(args["output_dir"], exist_ok=True)
accuracy = round(0.5 + 10 * lr + size / 1000 + seed / 100, 6)
with open(os.path.join(args["output_dir"], "eval_results.txt"), "w") as f:
  f.write("eval_accuracy = %r\neval_loss = %r\nglobal_step = 4\n" % (accuracy, 1 - accuracy))
'''


def accuracy(learning_rate, adapter_size=64, seed=0):
  """The dev accuracy STAND_IN writes for these flags."""
  return round(0.5 + 10 * learning_rate + adapter_size / 1000 + seed / 100, 6)


def stand_in(tmp_path, monkeypatch):
  """(program, calls): the command that runs STAND_IN (written under tmp_path), and
  a function giving the calls it has logged so far, oldest first."""
  script = tmp_path / "fake_runner.py"
  script.write_text(STAND_IN)
  calls = tmp_path / "calls.jsonl"
  monkeypatch.setenv("FAKE_CALLS", str(calls))

  def read_calls():
    if not calls.exists():
      return []
    return [json.loads(line) for line in calls.read_text().splitlines()]
  return [sys.executable, str(script)], read_calls
