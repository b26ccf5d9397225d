"""`benchmark.py --through_run_classifier`: whole run_classifier.py processes, timed.

A short and a long training run per mode on the real MiniLM and wordnet_lexname,
interleaved; the per-step time is the difference of their wall times over the
difference of their step counts (start-up, tokenization, compiling and the
final save cancel out). The flags are benchmark.py's.
"""

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

FLAGS = flags.FLAGS
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _count_rows(path):
  with open(path, encoding="utf-8") as f:
    return sum(1 for line in f if line.strip()) - 1  # Less the header.


def run_classifier_once(mode, steps, work_dir, tag):
  """One whole run_classifier.py training run; returns its wall time and peak RSS."""
  B = FLAGS.batch_size
  num_examples = _count_rows(os.path.join(FLAGS.data_dir, "train.tsv"))
  # num_train_steps = int(num_examples / B * epochs): aim half a step above.
  epochs = (steps + 0.5) * B / num_examples
  output_dir = os.path.join(work_dir, tag)
  shutil.rmtree(output_dir, ignore_errors=True)  # A kept dir would resume, not train.
  adapter_flags = ([f"--adapter_size={FLAGS.adapter_size}", "--learning_rate=1e-3"]
                   if mode == "adapters" else
                   ["--adapter_size=0", "--train_mode=full", "--learning_rate=5e-5"]
                   if mode == "full" else [f"--train_mode={mode}", "--learning_rate=1e-3"])
  argv = [sys.executable, os.path.join(REPO, "run_classifier.py"),
          "--task_name=tsv", f"--data_dir={FLAGS.data_dir}",
          "--text_a_column=sentence", "--label_column=label",
          f"--vocab_file={FLAGS.model_dir}/vocab.txt",
          f"--bert_config_file={FLAGS.model_dir}/bert_config.json",
          f"--init_checkpoint={FLAGS.model_dir}/bert_model.ckpt",
          "--do_train", f"--max_seq_length={FLAGS.seq_length}",
          f"--train_batch_size={B}", f"--num_train_epochs={epochs!r}",
          f"--seed={FLAGS.seed}", "--save_checkpoints_steps=1000000",
          f"--use_xla={str(FLAGS.use_xla).lower()}",
          f"--mixed_precision={FLAGS.mixed_precision}", f"--output_dir={output_dir}",
          ] + adapter_flags + list(FLAGS.run_classifier_flags)
  log_path = os.path.join(work_dir, tag + ".log")
  env = dict(os.environ)
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  with open(log_path, "w") as log:
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
  shutil.rmtree(output_dir, ignore_errors=True)
  with open(log_path) as f:
    text = f.read()
  if os.waitstatus_to_exitcode(status) != 0:
    raise RuntimeError(f"run_classifier.py failed ({' '.join(argv)}); end of {log_path}:\n"
                       + text[-4000:])
  found = re.search(r"Num steps = (\d+)", text)
  if not found or int(found.group(1)) != steps:
    raise RuntimeError(f"{log_path}: expected Num steps = {steps}, got "
                       f"{found.group(1) if found else 'none'}")
  reported = re.findall(r"examples/sec = ([0-9.]+)", text)
  return {"seconds": seconds, "peak_rss_mib": usage.ru_maxrss / 1024,
          "last_reported_examples_per_s": float(reported[-1]) if reported else None,
          "log": log_path}


def through_run_classifier(results):
  for path in ("bert_config.json", "vocab.txt", "bert_model.ckpt.index"):
    if not os.path.exists(os.path.join(FLAGS.model_dir, path)):
      raise app.UsageError(
          f"{FLAGS.model_dir}/{path} is missing: convert MiniLM first (demo.sh does), e.g. "
          ".venv/bin/python convert_checkpoint.py --hf_dir=\"$(.venv/bin/python -c "
          "'from checkpoints import huggingface; print(huggingface.minilm_package_dir())')\""
          f" --output_dir={FLAGS.model_dir}")
  B, short, long_ = FLAGS.batch_size, FLAGS.short_steps, FLAGS.long_steps
  if not 0 < short < long_:
    raise app.UsageError("need 0 < --short_steps < --long_steps")
  work_dir = tempfile.mkdtemp(prefix="bench_run_classifier_")
  runs = {m: {short: [], long_: []} for m in FLAGS.modes}
  plan = []
  for r in range(FLAGS.repeats):
    pairs = [(m, n) for n in (short, long_) for m in FLAGS.modes]
    plan += pairs if r % 2 == 0 else pairs[::-1]
  for i, (mode, steps) in enumerate(plan):
    run = run_classifier_once(mode, steps, work_dir, f"{mode}_{steps}_{i}")
    runs[mode][steps].append(run)
    print(f"run {i + 1}/{len(plan)}: {mode:<8} {steps:>4} steps {run['seconds']:7.1f} s, "
          f"peak RSS {run['peak_rss_mib']:.0f} MiB", flush=True)
  for mode in FLAGS.modes:
    t_short = statistics.median(r["seconds"] for r in runs[mode][short])
    t_long = statistics.median(r["seconds"] for r in runs[mode][long_])
    step_s = (t_long - t_short) / (long_ - short)
    reported = [r["last_reported_examples_per_s"] for r in runs[mode][long_]
                if r["last_reported_examples_per_s"]]
    results.setdefault("run_classifier", {})[mode] = {
        "step_s": step_s, "examples_per_s": B / step_s if step_s > 0 else None,
        "short_steps": short, "long_steps": long_, "short_s": t_short, "long_s": t_long,
        "fixed_s": t_short - short * step_s,
        "peak_rss_mib": max(r["peak_rss_mib"] for rs in runs[mode].values() for r in rs),
        "reported_examples_per_s": statistics.median(reported) if reported else None,
        "runs": runs[mode]}
    r = results["run_classifier"][mode]
    rate = f"{r['examples_per_s']:6.1f}" if r["examples_per_s"] else "   n/a"
    if step_s <= 0:
      print(f"run_classifier {mode}: the long run took no longer than the short one: the "
            "machine's noise exceeds the steps' difference; raise --long_steps or --repeats")
    print(f"run_classifier {mode:<8} step {1000 * step_s:7.1f} ms = {rate} examples/s "
          f"(({t_long:.1f} s - {t_short:.1f} s) / ({long_} - {short}) steps; start-up and "
          f"the rest {r['fixed_s']:.1f} s; peak RSS {r['peak_rss_mib']:.0f} MiB; its own "
          f"last progress line said {r['reported_examples_per_s']} examples/sec)")
  rc = results["run_classifier"]
  if "adapters" in rc and "full" in rc and min(rc[m]["step_s"] for m in rc) > 0:
    ratio = rc["adapters"]["step_s"] / rc["full"]["step_s"]
    results["run_classifier_step_ratio_adapters_over_full"] = ratio
    print(f"run_classifier ratio adapter step / full step: {ratio:.3f}")
  if "adapters" in rc and rc["adapters"]["examples_per_s"]:
    rate = rc["adapters"]["examples_per_s"]
    print(f"run_classifier target: adapters >= {FLAGS.target_examples_per_s:g} examples/s "
          f"at seq {FLAGS.seq_length}, batch {B}: "
          f"{'met' if rate >= FLAGS.target_examples_per_s else 'NOT met'} ({rate:.1f})")
  print(f"logs: {work_dir}")
