"""Golden runs: the refactor check: result files byte-identical before and after.

Runs the real entry points (run_classifier.py, run_squad.py, run_multitask.py and the
SavedModel export), each as its own subprocess on CPU, on a tiny seeded BERT
(tests/tiny_bert.py) and the project's samples under data/, then writes
OUT_DIR/golden_manifest.json: the sha256 of every result file, by its path under
OUT_DIR. Run it from the repository root whose code is to be checked (its entry
points and its adapter_bert/ are the ones run, whatever the installed copy is):

  python scripts/golden_runs.py --out_dir ~/golden/before
  ... refactor ...
  python scripts/golden_runs.py --out_dir ~/golden/after \\
      --compare ~/golden/before/golden_manifest.json

--compare prints one line per file (same / DIFFERENT / missing / new) and exits 1 if
any file differs or is missing. The runs take a few minutes on 2 CPU cores.

What is not in the manifest: checkpoints, adapter weights, TFRecords, event files,
the bank's bank.json (it holds the base's absolute path) and the SavedModel (its
bytes are not deterministic; the outputs of its serving signature on fixed texts
are, and are in serving/serving_outputs.json; its assets.extra/tasks.json is in).
Every path the runs are given is relative to OUT_DIR (data/ is a symbolic link to the
repository's), so no file depends on where OUT_DIR or the repository is.
"""

import argparse
import fnmatch
import hashlib
import json
import os
import re
import subprocess
import sys
import time

# The SavedModel export's command line (after the Python interpreter). Another
# command may replace it: the first of these whose file exists in the repository is
# used (a module given as ("-m", name) is looked for as its .py file).
EXPORT_COMMANDS = (
    ("export_savedmodel.py",),
    ("-m", "adapter_bert.serving.export"),  # Where the command was before export_savedmodel.py.
)

# The tiny base (tests/tiny_bert.TINY_CONFIG, seed 0 weights), as every run's flags.
BASE_FLAGS = ["--bert_config_file=base/bert_config.json", "--vocab_file=base/vocab.txt",
              "--init_checkpoint=base/bert_model.ckpt"]
SMALL = ["--max_seq_length=32", "--train_batch_size=4", "--eval_batch_size=4",
         "--predict_batch_size=4", "--seed=1"]
SQUAD_SMALL = ["--max_seq_length=64", "--doc_stride=24", "--max_query_length=16",
               "--train_batch_size=4", "--predict_batch_size=4"]
ALL_STEPS = ["--do_train", "--do_eval", "--do_predict"]
MULTITASK_DATA = ["--task_name=mrpc,sst-2,sts-b,tsv",
                  "--data_dir=data/glue/MRPC,data/glue/SST-2,data/glue/STS-B,"
                  "data/tsv_example"]
TINY_HYPER = ["--task_embedding_dim=8", "--projector_hidden_dim=16", "--projected_dim=8"]


def _classifier(task, out, *extra):
  return (["run_classifier.py"] + BASE_FLAGS + SMALL +
          [f"--task_name={task}", f"--data_dir=data/glue/{task}", f"--output_dir={out}",
           *extra])


# (name, command line after the interpreter), in order: later runs read earlier ones'
# outputs (the bank). Each output directory is runs/<name>.
RUNS = (
    ("classifier_houlsby", _classifier("MRPC", "runs/classifier_houlsby", *ALL_STEPS,
                                       "--eval_predictions",
                                       "--adapter_size=8", "--learning_rate=1e-3",
                                       "--num_train_epochs=1")),
    ("classifier_lora", _classifier("MRPC", "runs/classifier_lora", *ALL_STEPS,
                                    "--adapter_design=lora", "--adapter_size=8",
                                    "--learning_rate=1e-3", "--num_train_epochs=1")),
    ("squad_v1", ["run_squad.py"] + BASE_FLAGS + SQUAD_SMALL + [
        "--output_dir=runs/squad_v1", "--adapter_size=8", "--do_train",
        "--train_file=data/squad/train-v1.1.json", "--do_predict",
        "--predict_file=data/squad/dev-v1.1.json", "--num_train_epochs=1",
        "--learning_rate=1e-3", "--seed=1"]),
    ("squad_v2", ["run_squad.py"] + BASE_FLAGS + SQUAD_SMALL + [
        "--output_dir=runs/squad_v2", "--adapter_size=8", "--version_2_with_negative",
        "--do_train", "--train_file=data/squad/train-v2.0.json", "--do_predict",
        "--predict_file=data/squad/dev-v2.0.json", "--num_train_epochs=1",
        "--learning_rate=1e-3", "--seed=2"]),
    ("multitask_hyperformer", ["run_multitask.py"] + BASE_FLAGS + SMALL + MULTITASK_DATA +
     TINY_HYPER + ALL_STEPS + ["--eval_predictions",
                               "--multitask_adapters=hyperformer", "--adapter_size=8",
                               "--learning_rate=1e-2", "--num_train_epochs=1",
                               "--output_dir=runs/multitask_hyperformer"]),
    ("multitask_shared", ["run_multitask.py"] + BASE_FLAGS + SMALL + MULTITASK_DATA +
     ALL_STEPS + ["--multitask_adapters=shared", "--adapter_size=8",
                  "--learning_rate=1e-2", "--num_train_epochs=1",
                  "--output_dir=runs/multitask_shared"]),
    # Two tasks trained into the bank (one step, a learning rate that moves the
    # adapters), then SST-2 as a fusion of them (tests/test_fusion_bank.py's runs).
    ("bank_mrpc", _classifier("MRPC", "runs/bank_mrpc", "--do_train", "--do_eval",
                              "--adapter_size=8", "--num_train_epochs=0.5",
                              "--learning_rate=0.02", "--adapter_bank=runs/bank")),
    ("bank_rte", _classifier("RTE", "runs/bank_rte", "--do_train", "--do_eval",
                             "--adapter_size=8", "--num_train_epochs=0.5",
                             "--learning_rate=0.02", "--adapter_bank=runs/bank")),
    ("fusion_sst2", _classifier("SST-2", "runs/fusion_sst2", *ALL_STEPS,
                                "--learning_rate=1e-3", "--num_train_epochs=1",
                                "--save_checkpoints_steps=1", "--adapter_bank=runs/bank",
                                "--fusion_tasks=mrpc,rte", "--fusion_attentions")),
)
EXPORT_DIR = "runs/export/1"
SERVING_OUTPUTS = "serving/serving_outputs.json"
# Fixed texts for the exported SavedModel's serving_default: every task of the bank.
SERVING_INPUTS = (
    ("mrpc", "the man reads a book .", "a man reads the story ."),
    ("mrpc", "paris is the capital of france", "the river is cold"),
    ("rte", "the dog runs in the city", "a dog ran"),
    ("rte", "she was not good", "she was bad ."),
    ("sst-2", "a great movie !", ""),
    ("sst-2", "this film is terrible", ""),
    ("sst-2", "xyzzy qwerty", ""),
)

# Result files, by name, under OUT_DIR/runs and OUT_DIR/serving.
RESULT_PATTERNS = (
    "eval_results.txt", "eval_results.json", "test_results.tsv", "eval_predictions.tsv",
    "predictions.json", "nbest_predictions.json", "null_odds.json",
    "*_fusion_attentions.tsv", "*_fusion_attentions.png", "*_results.txt",
    "*_results.tsv", "*_results.json", "serving_outputs.json", "run_config.json",
    "adapter_config.json",
)
# Files that say where they were written (bank.json has the base's absolute path)
# are left out: these count only without absolute paths or times in them, checked
# per file. At commit 830c87a no run_config.json or adapter_config.json had any;
# the export's tasks.json has ("base": "checkpoint /abs/path/base/bert_model.ckpt"),
# so it is left out (logged) until it has none.
CHECKED_FOR_PATHS = ("run_config.json", "adapter_config.json", "tasks.json")
# The SavedModel is not a result (its bytes differ run to run), but the task table
# the export writes beside it is.
SKIP_DIRS = ("runs/export",)
EXTRA_FILES = (EXPORT_DIR + "/assets.extra/tasks.json",)


def _export_command(repo):
  for command in EXPORT_COMMANDS:
    if command[0] == "-m":
      path = os.path.join(repo, *command[1].split(".")) + ".py"
    else:
      path = os.path.join(repo, command[0])
    if os.path.exists(path):
      return list(command)
  raise SystemExit(f"golden_runs: none of the export commands {EXPORT_COMMANDS} exists "
                   f"under {repo}: update EXPORT_COMMANDS")


def _child_env(repo):
  """The repository's modules before the installed ones (an entry point's own
  directory comes first anyway; -m and -c need PYTHONPATH), and tests/ for
  tiny_bert; CPU only."""
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(
      [repo, os.path.join(repo, "tests")] +
      ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
  env.update(CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="2", PYTHONHASHSEED="0")
  return env


def _run(name, argv, out_dir, env, log_dir):
  start = time.time()
  log_path = os.path.join(log_dir, name + ".log")
  with open(log_path, "w") as log:
    status = subprocess.call([sys.executable] + argv, cwd=out_dir, env=env, stdout=log,
                             stderr=subprocess.STDOUT)
  print(f"{name}: {'ok' if status == 0 else f'FAILED (exit {status})'} in "
        f"{time.time() - start:.0f} s", flush=True)
  if status:
    with open(log_path) as f:
      sys.stdout.write("".join(f.readlines()[-30:]))
    raise SystemExit(f"golden_runs: {name} failed; its log: {log_path}")


def _serve(export_dir, out_path):
  """The exported SavedModel's serving_default on SERVING_INPUTS, to JSON (run in a
  child process: `golden_runs.py --serve EXPORT_DIR OUT`)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  import tensorflow_text  # pylint: disable=import-outside-toplevel,unused-import
  served = tf.saved_model.load(export_dir)
  tasks, texts_a, texts_b = zip(*SERVING_INPUTS)
  outputs = served.signatures["serving_default"](
      text_a=tf.constant(texts_a), text_b=tf.constant(texts_b), task=tf.constant(tasks))
  result = {"inputs": [list(x) for x in SERVING_INPUTS],
            "outputs": {k: v.numpy().tolist() for k, v in sorted(outputs.items())}}
  os.makedirs(os.path.dirname(out_path), exist_ok=True)
  with open(out_path, "w") as f:
    json.dump(result, f, indent=1, sort_keys=True, default=bytes.decode)
    f.write("\n")


# CHECKED_FOR_PATHS files count only without absolute paths or times in them.
_ABSOLUTE_OR_TIME = re.compile(r'"/|"[A-Za-z]:\\\\|\d{4}-\d\d-\d\dT\d\d:\d\d|"(time|date|'
                               r'timestamp|start_time|wall_time)[a-z_]*"\s*:')


def _where_or_when(text, places):
  return bool(_ABSOLUTE_OR_TIME.search(text)) or any(p in text for p in places)


def _result_files(out_dir, repo):
  found = []
  for d in ("runs", "serving"):
    for root, dirs, files in os.walk(os.path.join(out_dir, d)):
      rel_root = os.path.relpath(root, out_dir).replace(os.sep, "/")
      dirs[:] = sorted(x for x in dirs if f"{rel_root}/{x}" not in SKIP_DIRS)
      for name in sorted(files):
        if any(fnmatch.fnmatch(name, p) for p in RESULT_PATTERNS):
          found.append(f"{rel_root}/{name}")
  found += [rel for rel in EXTRA_FILES if os.path.exists(os.path.join(out_dir, rel))]
  kept = []
  for rel in found:
    if rel.endswith(CHECKED_FOR_PATHS):
      with open(os.path.join(out_dir, rel)) as f:
        places = {out_dir, os.path.realpath(out_dir), repo, os.path.realpath(repo)}
        if _where_or_when(f.read(), places):
          print(f"left out (absolute path or time in it): {rel}")
          continue
    kept.append(rel)
  return kept


def _sha256(path):
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


def _compare(manifest, old_path):
  with open(old_path) as f:
    old = json.load(f)["files"]
  bad = False
  for rel in sorted(set(old) | set(manifest)):
    if rel not in manifest:
      state, bad = "missing", True
    elif rel not in old:
      state = "new"
    elif old[rel] == manifest[rel]:
      state = "same"
    else:
      state, bad = "DIFFERENT", True
    print(f"{state}\t{rel}")
  return 1 if bad else 0


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out_dir", help="A new or empty directory for the runs.")
  parser.add_argument("--compare", help="An earlier golden_manifest.json to compare with.")
  parser.add_argument("--serve", nargs=2, metavar=("EXPORT_DIR", "OUT"),
                      help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.serve:
    _serve(*args.serve)
    return 0
  if not args.out_dir:
    parser.error("--out_dir is required")
  repo = os.getcwd()
  if not os.path.exists(os.path.join(repo, "run_classifier.py")):
    raise SystemExit("golden_runs: run it from the repository root (no run_classifier.py "
                     "in the current directory)")
  out_dir = os.path.abspath(args.out_dir)
  if os.path.exists(out_dir) and os.listdir(out_dir):
    raise SystemExit(f"golden_runs: --out_dir {out_dir} is not empty")
  os.makedirs(os.path.join(out_dir, "logs"))
  os.symlink(os.path.join(repo, "data"), os.path.join(out_dir, "data"))
  env = _child_env(repo)
  log_dir = os.path.join(out_dir, "logs")
  start = time.time()
  # The base, written by the repository's tests/tiny_bert.py; and which adapter_bert
  # the children import (logged).
  _run("base", ["-c", "import adapter_bert, tiny_bert; "
                "print('adapter_bert:', adapter_bert.__file__); "
                "tiny_bert.write_google_dir('base')"], out_dir, env, log_dir)
  with open(os.path.join(log_dir, "base.log")) as f:
    print("children import", *[l for l in f if l.startswith("adapter_bert:")], end="")
  for name, argv in RUNS:
    _run(name, [os.path.join(repo, argv[0])] + argv[1:], out_dir, env, log_dir)
  export = _export_command(repo)
  if export[0] != "-m":
    export[0] = os.path.join(repo, export[0])
  _run("export", export + ["--adapter_bank=runs/bank", f"--export_dir={EXPORT_DIR}"],
       out_dir, env, log_dir)
  _run("serve", [os.path.abspath(__file__), "--serve", EXPORT_DIR, SERVING_OUTPUTS],
       out_dir, env, log_dir)

  manifest = {rel: _sha256(os.path.join(out_dir, rel)) for rel in _result_files(out_dir, repo)}
  with open(os.path.join(out_dir, "golden_manifest.json"), "w") as f:
    json.dump({"files": manifest}, f, indent=1, sort_keys=True)
    f.write("\n")
  print(f"{len(manifest)} result files in {os.path.join(out_dir, 'golden_manifest.json')} "
        f"({time.time() - start:.0f} s)")
  return _compare(manifest, args.compare) if args.compare else 0


if __name__ == "__main__":
  sys.exit(main())
