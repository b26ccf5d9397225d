r"""The stall at the end of a training run, with and without tf.data's autotuner.

  .venv/bin/python benchmarks/iterator_teardown.py              # 4 runs each, 100 steps
  .venv/bin/python benchmarks/iterator_teardown.py --samples=8 --num_train_epochs=2

Training reads its batches inside a compiled loop (runtime/loop.py). Deleting
that iterator, once the loop returns, waits for tf.data's autotuner thread to
wake up, which it does less and less often as a run goes on, so a run used to
stall there, between its last checkpoint and its adapter-only file.
runtime.loop.training_dataset turns the autotuner off. This times that gap in
whole run_classifier.py processes (head-only training on the real MiniLM and
wordnet_pos, then the dev evaluation; the gap is read from the log's
timestamps): as the project runs, and with the autotuner turned back on over
loop.training_dataset's pipeline. The two alternate (on, off, off, on, ...)
so both see the same machine. MiniLM must be converted first (the README of
benchmarks/ says how).
"""

import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

from absl import app, flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = flags.FLAGS
flags.DEFINE_integer("samples", 4, "Runs per setting.")
flags.DEFINE_float("num_train_epochs", 0.8, "Epochs of wordnet_pos (0.8: 100 steps).")
flags.DEFINE_string("model_dir", os.path.join(REPO, "models", "minilm"), "Converted MiniLM.")
flags.DEFINE_string("json_out", None, "Also write the figures here as JSON.")

# Runs run_classifier.py with loop.training_dataset's pipeline autotuned again.
_WITH_AUTOTUNER = """
import runpy, sys
import tensorflow as tf
from adapter_bert.runtime import loop
without = loop.training_dataset
def with_autotuner(dataset, step):
  options = tf.data.Options()
  options.autotune.enabled = True
  return without(dataset, step).with_options(options)
loop.training_dataset = with_autotuner
sys.argv = ["run_classifier.py"] + sys.argv[1:]
runpy.run_path("run_classifier.py", run_name="__main__")
"""
_TIME = re.compile(r"^I\d{4} (\d\d:\d\d:\d\d\.\d+) ")


def _gap_seconds(log: str) -> float:
  """Seconds from the last checkpoint's line to the adapter-only file's line."""
  def time_of(marker):
    line = [l for l in log.splitlines() if marker in l and _TIME.match(l)][-1]
    return datetime.datetime.strptime(_TIME.match(line).group(1), "%H:%M:%S.%f")
  return (time_of("adapter-only variables") - time_of("Saving checkpoints")).total_seconds()


def _run(autotuner: bool, seed: int, output_dir: str) -> float:
  m = FLAGS.model_dir
  args = ["--do_train", "--do_eval", "--task_name=tsv",
          f"--data_dir={os.path.join(REPO, 'data', 'wordnet', 'wordnet_pos')}",
          "--text_a_column=sentence", f"--vocab_file={m}/vocab.txt",
          f"--bert_config_file={m}/bert_config.json", f"--init_checkpoint={m}/bert_model.ckpt",
          "--max_seq_length=64", "--train_batch_size=32", "--iterations_per_loop=100",
          f"--num_train_epochs={FLAGS.num_train_epochs:g}", f"--seed={seed}",
          "--train_mode=head", "--learning_rate=0.003", f"--output_dir={output_dir}"]
  program = ["-c", _WITH_AUTOTUNER] if autotuner else ["run_classifier.py"]
  done = subprocess.run([sys.executable] + program + args, cwd=REPO, capture_output=True,
                        text=True, check=True)
  return _gap_seconds(done.stderr)


def main(argv):
  del argv
  print(f"load average at start: {os.getloadavg()}")
  gaps = {True: [], False: []}
  with tempfile.TemporaryDirectory() as tmp:
    for i in range(FLAGS.samples):
      for autotuner in ((True, False) if i % 2 == 0 else (False, True)):
        gaps[autotuner].append(_run(autotuner, i + 1, os.path.join(tmp, f"{autotuner}-{i}")))
  figures = {}
  for autotuner, name in ((True, "with the autotuner"), (False, "as run (without)")):
    values = gaps[autotuner]
    figures[name] = values
    print(f"last checkpoint to adapter-only file, {name}: median "
          f"{statistics.median(values):.2f} s, max {max(values):.2f} s "
          f"({', '.join(f'{v:.2f}' for v in values)})")
  print(f"load average at end: {os.getloadavg()}")
  if FLAGS.json_out:
    with open(FLAGS.json_out, "w") as f:
      json.dump(figures, f, indent=2)


if __name__ == "__main__":
  app.run(main)
