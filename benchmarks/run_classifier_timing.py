"""Whole run_classifier.py processes, timed: `benchmark.py --through_run_classifier`.

Two kinds of figure:
  * per-step time (`through_run_classifier`): a short and a long training run
    per mode on the real MiniLM and wordnet_lexname, interleaved; the per-step
    time is the difference of their wall times over the difference of their
    step counts (start-up, tokenization, compiling and the final save cancel
    out).
  * real data (`compare_whole_runs`, with --real_data here and in
    adapterhub_side_by_side.py): the wall time of a whole adapter-training run
    (tokenization, training, the final save, evaluation on dev) and its dev
    accuracy, for this project's padding settings and, from the side by side,
    AdapterHub's; interleaved, several samples each.

Standard library only at import (absl is imported where benchmark.py's flags
are read), so that adapterhub_side_by_side.py's coordinator can use it from
any python3.
"""

import csv
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# This project's padding settings in --real_data: run_classifier.py's flags for each.
PROJECT_VARIANTS = {
    "per-batch": [],  # The default: each batch padded to its longest example.
    "group-by-length": ["--group_by_length"],
    "pad-to-max": ["--pad_to_max_seq_length"],  # The original's: every example to the max.
    # Several examples per row of max_seq_length tokens (runtime/packing.py).
    "packed": ["--pack_sequences"],
    "packed-bfloat16": ["--pack_sequences", "--mixed_precision=bfloat16"],
}


def _flags():
  from absl import flags  # pylint: disable=import-outside-toplevel
  return flags.FLAGS


def _usage_error(message):
  from absl import app  # pylint: disable=import-outside-toplevel
  return app.UsageError(message)


def _count_rows(path):
  with open(path, encoding="utf-8") as f:
    return sum(1 for line in f if line.strip()) - 1  # Less the header.


def check_model_dir(model_dir):
  """None, or what to tell the user when the converted MiniLM is missing."""
  for path in ("bert_config.json", "vocab.txt", "bert_model.ckpt.index"):
    if not os.path.exists(os.path.join(model_dir, path)):
      return (f"{model_dir}/{path} is missing: convert MiniLM first (demo.sh does), e.g. "
              ".venv/bin/python convert_checkpoint.py --hf_dir=\"$(.venv/bin/python -c "
              "'from adapter_bert.checkpoints import huggingface; print(huggingface.minilm_package_dir())')\""
              f" --output_dir={model_dir}")
  return None


def classifier_argv(python, model_dir, data_dir, output_dir, *, mode, seq_length, batch_size,
                    epochs, learning_rate, seed, adapter_size=64, text_a="sentence",
                    text_b=None, label_column="label", extra=()):
  """run_classifier.py's command line for a tsv task on a converted BERT in `model_dir`."""
  adapter_flags = ([f"--adapter_size={adapter_size}"] if mode == "adapters" else
                   ["--adapter_size=0", "--train_mode=full"] if mode == "full" else
                   [f"--train_mode={mode}"])
  return ([python, os.path.join(REPO, "run_classifier.py"),
           "--task_name=tsv", f"--data_dir={data_dir}", f"--text_a_column={text_a}"]
          + ([f"--text_b_column={text_b}"] if text_b else [])
          + [f"--label_column={label_column}",
             f"--vocab_file={model_dir}/vocab.txt",
             f"--bert_config_file={model_dir}/bert_config.json",
             f"--init_checkpoint={model_dir}/bert_model.ckpt",
             f"--max_seq_length={seq_length}", f"--train_batch_size={batch_size}",
             f"--num_train_epochs={epochs!r}", f"--learning_rate={learning_rate!r}",
             f"--seed={seed}", f"--output_dir={output_dir}"]
          + adapter_flags + list(extra))


def run_logged(argv, log_path, env=None):
  """Runs `argv` to its end, output into `log_path`; its wall time, peak RSS and log text.

  Peak RSS is the child's own (wait4's rusage), not the maximum over all children.
  """
  full_env = dict(os.environ)
  full_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  full_env.update(env or {})
  with open(log_path, "w") as log:
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                            env=full_env)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
  with open(log_path, encoding="utf-8", errors="replace") as f:
    text = f.read()
  if os.waitstatus_to_exitcode(status) != 0:
    raise RuntimeError(f"{' '.join(argv)} failed; end of {log_path}:\n" + text[-4000:])
  return {"seconds": seconds, "peak_rss_mib": usage.ru_maxrss / 1024, "text": text}


def run_classifier_once(mode, steps, work_dir, tag):
  """One whole run_classifier.py training run; returns its wall time and peak RSS."""
  FLAGS = _flags()
  B = FLAGS.batch_size
  num_examples = _count_rows(os.path.join(FLAGS.data_dir, "train.tsv"))
  # num_train_steps = int(num_examples / B * epochs): aim half a step above.
  epochs = (steps + 0.5) * B / num_examples
  output_dir = os.path.join(work_dir, tag)
  shutil.rmtree(output_dir, ignore_errors=True)  # A kept dir would resume, not train.
  argv = classifier_argv(
      sys.executable, FLAGS.model_dir, FLAGS.data_dir, output_dir, mode=mode,
      seq_length=FLAGS.seq_length, batch_size=B, epochs=epochs,
      learning_rate=5e-5 if mode == "full" else 1e-3, seed=FLAGS.seed,
      adapter_size=FLAGS.adapter_size,
      extra=["--do_train", "--save_checkpoints_steps=1000000",
             f"--use_xla={str(FLAGS.use_xla).lower()}",
             f"--mixed_precision={FLAGS.mixed_precision}"] + list(FLAGS.run_classifier_flags))
  log_path = os.path.join(work_dir, tag + ".log")
  try:
    run = run_logged(argv, log_path)
  finally:
    shutil.rmtree(output_dir, ignore_errors=True)
  found = re.search(r"Num steps = (\d+)", run["text"])
  if not found or int(found.group(1)) != steps:
    raise RuntimeError(f"{log_path}: expected Num steps = {steps}, got "
                       f"{found.group(1) if found else 'none'}")
  reported = re.findall(r"examples/sec = ([0-9.]+)", run["text"])
  return {"seconds": run["seconds"], "peak_rss_mib": run["peak_rss_mib"],
          "last_reported_examples_per_s": float(reported[-1]) if reported else None,
          "log": log_path}


def through_run_classifier(results):
  FLAGS = _flags()
  problem = check_model_dir(FLAGS.model_dir)
  if problem:
    raise _usage_error(problem)
  B, short, long_ = FLAGS.batch_size, FLAGS.short_steps, FLAGS.long_steps
  if not 0 < short < long_:
    raise _usage_error("need 0 < --short_steps < --long_steps")
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


# --- Real data: whole adapter-training runs and their dev metric ------------------------


def parse_task(spec):
  """'DIR:TEXT_A[:TEXT_B]' (as benchmarks/padding_tokens.py takes) -> (dir, text_a, text_b)."""
  parts = spec.split(":")
  if len(parts) not in (2, 3) or not all(parts):
    raise ValueError(f"--task={spec!r}: expected DIR:TEXT_A[:TEXT_B], e.g. "
                     "data/wordnet/wordnet_example:gloss:example")
  return parts[0], parts[1], parts[2] if len(parts) == 3 else None


def prepare_task(data_dir, work_dir, max_train_examples=0, max_eval_examples=0):
  """The task directory to train on: `data_dir`, or a copy of the first rows of its
  train.tsv and dev.tsv when limited (for a quick check). Returns (dir, train rows, dev rows).

  Both frameworks read the same copy, so they train and evaluate on the same examples.
  """
  for split in ("train", "dev"):
    if not os.path.exists(os.path.join(data_dir, f"{split}.tsv")):
      raise ValueError(f"{data_dir}/{split}.tsv not found (--task)")
  if max_train_examples or max_eval_examples:
    limited = os.path.join(work_dir, "task")
    os.makedirs(limited, exist_ok=True)
    for split, limit in (("train", max_train_examples), ("dev", max_eval_examples)):
      with open(os.path.join(data_dir, f"{split}.tsv"), encoding="utf-8") as f:
        lines = f.readlines()
      with open(os.path.join(limited, f"{split}.tsv"), "w", encoding="utf-8") as f:
        f.writelines(lines[:1 + limit] if limit else lines)  # The header and `limit` rows.
    data_dir = limited
  return (data_dir, _count_rows(os.path.join(data_dir, "train.tsv")),
          _count_rows(os.path.join(data_dir, "dev.tsv")))


def read_labels(data_dir, label_column):
  """train.tsv's labels, sorted: run_classifier.py's default label ids for a tsv task."""
  with open(os.path.join(data_dir, "train.tsv"), encoding="utf-8", newline="") as f:
    rows = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
    return sorted({row[label_column] for row in rows})


# startup.pack_training's log line (packing.PackingStats.describe).
_PACKED = re.compile(r"packed (\d+) examples into (\d+) rows of (\d+) tokens "
                     r"\(([0-9.]+)% real tokens\), (\d+) rows per batch")


def packing_logged(text):
  """{real_token_share, packed_rows_per_batch, packed_rows} from a packed run's log, or {}."""
  found = _PACKED.search(text)
  if not found:
    return {}
  return {"real_token_share": float(found.group(4)) / 100,
          "packed_rows_per_batch": int(found.group(5)), "packed_rows": int(found.group(2))}


def padding_table(python, task_dir, text_a, text_b, vocab_file, seq_length, batch_size):
  """benchmarks/padding_tokens.py's lines for the task (run with the project's `python`):
  the positions each padding setting computes per epoch and the share of real tokens."""
  spec = ":".join([task_dir, text_a] + ([text_b] if text_b else []))
  env = dict(os.environ)
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  run = subprocess.run(
      [python, os.path.join(REPO, "benchmarks", "padding_tokens.py"), f"--tasks={spec}",
       f"--vocab_file={vocab_file}", f"--max_seq_length={seq_length}",
       f"--batch_size={batch_size}"], cwd=REPO, env=env, capture_output=True, text=True)
  if run.returncode:
    return f"(padding_tokens.py failed: {run.stderr.strip().splitlines()[-1:]})"
  return run.stdout.rstrip()


_LOG_TIME = re.compile(r"^[IWEF]\d{4} (\d\d):(\d\d):(\d\d\.\d+) .*?\] (.*)$", re.M)


def _phase_seconds(text, start_marker, end_marker):
  """Seconds between the absl log lines containing `start_marker` and (the last)
  `end_marker`; None when either is missing."""
  start = end = None
  for h, m, s, message in _LOG_TIME.findall(text):
    t = int(h) * 3600 + int(m) * 60 + float(s)
    if start is None and start_marker in message:
      start = t
    elif start is not None and end_marker in message:
      end = t
  if start is None or end is None:
    return None
  return (end - start) % 86400  # Across midnight too.


def project_real_run(python, variant, data_dir, text_a, text_b, model_dir, output_dir,
                     log_path, *, epochs, seq_length, batch_size, eval_batch_size,
                     adapter_size, learning_rate, seed, label_column="label", extra=()):
  """One whole run_classifier.py --do_train --do_eval with `variant`'s padding flags.

  Returns its wall time, peak RSS, the training loop's and evaluation's seconds
  (from the log's timestamps) and eval_results.txt's accuracy and loss.
  """
  shutil.rmtree(output_dir, ignore_errors=True)  # A kept dir would resume, not train.
  argv = classifier_argv(
      python, model_dir, data_dir, output_dir, mode="adapters", seq_length=seq_length,
      batch_size=batch_size, epochs=epochs, learning_rate=learning_rate, seed=seed,
      adapter_size=adapter_size, text_a=text_a, text_b=text_b, label_column=label_column,
      extra=["--do_train", "--do_eval", f"--eval_batch_size={eval_batch_size}"]
      + PROJECT_VARIANTS[variant] + list(extra))
  try:
    run = run_logged(argv, log_path)
    metrics = {}
    with open(os.path.join(output_dir, "eval_results.txt"), encoding="utf-8") as f:
      for line in f:
        key, _, value = line.partition(" = ")
        if key.strip() != "checkpoint_path":  # The one value that is not a number.
          metrics[key.strip()] = float(value)
  finally:
    shutil.rmtree(output_dir, ignore_errors=True)
  return {**packing_logged(run["text"]),
          "seconds": run["seconds"], "peak_rss_mib": run["peak_rss_mib"],
          "train_s": _phase_seconds(run["text"], "Running training from step",
                                    "Saving checkpoints for"),
          "eval_s": _phase_seconds(run["text"], "Running evaluation", "Eval results"),
          "eval_accuracy": metrics.get("eval_accuracy"), "eval_loss": metrics.get("eval_loss"),
          "steps": int(metrics.get("global_step", 0)), "argv": argv, "log": log_path}


def compare_whole_runs(runners, samples, examples_per_run):
  """Runs every (name, run(sample) -> dict) `samples` times, interleaved: A B C, C B A, ...

  so that every setting sees the same moments of a noisy machine. Prints each
  run as it ends; returns {name: [run dicts]}.
  """
  runs = {name: [] for name, _ in runners}
  width = max(len(name) for name, _ in runners)
  for sample in range(samples):
    order = runners if sample % 2 == 0 else runners[::-1]
    for name, run in order:
      result = run(sample)
      runs[name].append(result)
      print(f"sample {sample + 1}/{samples} {name:<{width}} {result['seconds']:7.1f} s "
            f"({examples_per_run / result['seconds']:5.1f} examples/s; training "
            f"{_seconds(result.get('train_s'))}, eval {_seconds(result.get('eval_s'))}), "
            f"dev accuracy {result['eval_accuracy']:.4f}, peak RSS "
            f"{result['peak_rss_mib']:.0f} MiB{_packing_note(result)}; load average "
            f"{os.getloadavg()[0]:.2f}", flush=True)
  return runs


def _packing_note(result):
  if "real_token_share" not in result:
    return ""
  return (f"; packed {result['packed_rows_per_batch']} rows a batch, "
          f"{100 * result['real_token_share']:.1f}% real tokens")


def _seconds(value):
  return "n/a" if value is None else f"{value:.1f} s"


def summarize_whole_runs(runs, examples_per_run, project_prefix="this-project ",
                         reference_names=("adapterhub default", "adapterhub best")):
  """Median wall time, examples/s and dev accuracy per setting, printed, and each of this
  project's settings' speed-up over each reference setting present (its wall time over
  ours: above 1, this project is faster). Returns the summary dict."""
  summary = {}
  width = max(len(name) for name in runs)
  for name, rs in runs.items():
    wall = statistics.median(r["seconds"] for r in rs)
    accuracies = [r["eval_accuracy"] for r in rs]
    summary[name] = {
        "wall_s": wall, "wall_s_samples": [r["seconds"] for r in rs],
        "examples_per_s": examples_per_run / wall,
        "train_s": _median_or_none(r.get("train_s") for r in rs),
        "eval_s": _median_or_none(r.get("eval_s") for r in rs),
        "eval_accuracy_samples": accuracies,
        "eval_accuracy_mean": statistics.mean(accuracies),
        "peak_rss_mib": max(r["peak_rss_mib"] for r in rs),
        **({"real_token_share": rs[0]["real_token_share"]} if "real_token_share" in rs[0]
           else {})}
    s = summary[name]
    print(f"whole run {name:<{width}} {wall:7.1f} s (median of "
          f"{', '.join(f'{t:.1f}' for t in s['wall_s_samples'])}) = "
          f"{s['examples_per_s']:5.1f} examples/s; training {_seconds(s['train_s'])}, eval "
          f"{_seconds(s['eval_s'])}; dev accuracy {', '.join(f'{a:.4f}' for a in accuracies)}; "
          f"peak RSS {s['peak_rss_mib']:.0f} MiB")
  ratios = {}
  for name in runs:
    if not name.startswith(project_prefix):
      continue
    for reference in reference_names:
      if reference in summary and reference != name:
        ratio = summary[reference]["wall_s"] / summary[name]["wall_s"]
        ratios[f"{name} / {reference}"] = ratio
        print(f"ratio {name} / {reference}: {ratio:.2f}x the examples/s "
              f"({summary[name]['examples_per_s']:.1f} vs "
              f"{summary[reference]['examples_per_s']:.1f}); dev accuracy "
              f"{summary[name]['eval_accuracy_mean']:.4f} vs "
              f"{summary[reference]['eval_accuracy_mean']:.4f} (mean of samples)")
  return {"settings": summary, "ratios": ratios}


def _median_or_none(values):
  values = [v for v in values if v is not None]
  return statistics.median(values) if values else None


def real_data(results):
  """benchmark.py --through_run_classifier --real_data: this project's padding settings."""
  FLAGS = _flags()
  problem = check_model_dir(FLAGS.model_dir)
  if problem:
    raise _usage_error(problem)
  try:
    task_dir, text_a, text_b = parse_task(FLAGS.task)
    work_dir = tempfile.mkdtemp(prefix="bench_real_data_")
    data_dir, num_train, num_dev = prepare_task(
        os.path.abspath(task_dir), work_dir, FLAGS.max_train_examples, FLAGS.max_eval_examples)
  except ValueError as e:
    raise _usage_error(str(e)) from None
  examples_per_run = num_train * FLAGS.num_train_epochs
  print(f"real data: {FLAGS.task} ({num_train} train, {num_dev} dev examples), "
        f"{FLAGS.num_train_epochs:g} epochs, max_seq_length {FLAGS.seq_length}, batch "
        f"{FLAGS.batch_size}, adapter_size {FLAGS.adapter_size}, learning rate "
        f"{FLAGS.learning_rate:g}, {FLAGS.samples} samples (seed {FLAGS.seed} + sample)",
        flush=True)
  padding = padding_table(sys.executable, data_dir, text_a, text_b,
                          os.path.join(FLAGS.model_dir, "vocab.txt"), FLAGS.seq_length,
                          FLAGS.batch_size)
  print(padding, flush=True)

  def runner(variant):
    def run(sample):
      tag = f"{variant}_{sample}"
      return project_real_run(
          sys.executable, variant, data_dir, text_a, text_b, FLAGS.model_dir,
          os.path.join(work_dir, tag), os.path.join(work_dir, tag + ".log"),
          epochs=FLAGS.num_train_epochs, seq_length=FLAGS.seq_length,
          batch_size=FLAGS.batch_size, eval_batch_size=FLAGS.eval_batch_size,
          adapter_size=FLAGS.adapter_size, learning_rate=FLAGS.learning_rate,
          seed=FLAGS.seed + sample, extra=FLAGS.run_classifier_flags)
    return run

  runs = compare_whole_runs([(f"this-project {v}", runner(v)) for v in FLAGS.variants],
                            FLAGS.samples, examples_per_run)
  results["real_data"] = dict(
      summarize_whole_runs(runs, examples_per_run,
                           reference_names=("this-project pad-to-max",)), runs=runs, task=FLAGS.task,
      num_train=num_train, num_dev=num_dev, padding_tokens=padding)
  print(f"logs: {work_dir}")
