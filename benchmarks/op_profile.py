r"""Where one adapter-training step's time goes, op group by op group, here and in AdapterHub.

  .venv/bin/python benchmarks/op_profile.py               # both frameworks, interleaved
  .venv/bin/python benchmarks/op_profile.py --sides=tf    # this project alone
  .venv/bin/python benchmarks/op_profile.py --mixed_precision=bfloat16  # both in bfloat16

The same step as benchmarks/benchmark.py's adapters mode and
adapterhub_side_by_side.py's (MiniLM shape: 6 layers, hidden 384; seq 64,
batch 32, Houlsby adapters of 64, LayerNorms and head trained, dropout on), on
synthetic batches. Each framework runs in its own process (PyTorch only in
benchmarks/.venv-adapterhub, as a separate process), TensorFlow and PyTorch
alternating for --rounds rounds: each round warms up, then records
--profiled_steps steps with the framework's own profiler (TensorFlow's trace,
read from its XSpace file; torch.profiler) and times as many unprofiled ones.

Op time is summed per group (the op's own time: a kernel nested in another op
counts once). Groups: the matrix products by shape (dense 384x384: Q, K, V
and the attention output; the feed-forward's 384x1536 and 1536x384; the
adapters' 384x64 and 64x384; the pooler and head), forward and backward
together; the attention's two batched products; softmax with the mask add and
the 1/sqrt(d) scale; LayerNorm; GELU; dropout (random numbers, masks,
scaling); the adapters' other ops; the optimizer's update (with the global
norm clip); the casts between float32 and bfloat16 (--mixed_precision=bfloat16:
this project's Keras policy against torch.autocast); and the rest (residual
adds, gradient sums, reshapes).
"between ops" is the step's wall time minus the time at least one op ran
(TensorFlow's executor runs independent ops on two threads, so its op times
can sum to more than the wall time); for PyTorch, the step minus its ops'
summed time (PyTorch runs one op at a time): Python, autograd and dispatch.
AdapterHub's attention runs as aten::bmm and softmax (its own attention
module), though its config names sdpa. The GELU's XLA kernel
(adapter_layers.gelu on a large static shape) is not in TensorFlow's trace:
its time falls under "between ops". --show_ops=N lists each framework's N
costliest ops (TensorFlow's by node name, PyTorch's by input shapes).

Prints the table (medians over rounds, ms per step) and, with --json_out,
every figure.
"""

import argparse
import collections
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import bench_harness as harness  # Standard library only: both venvs import it.
import run_conditions  # Threads, oneDNN ISA, matmul ceilings, steal and load.

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

AH_PYTHON = os.path.join(HERE, ".venv-adapterhub", "bin", "python")
TF_PYTHON = os.path.join(REPO, ".venv", "bin", "python")

GROUPS = (
    "matmul 384x384 (Q, K, V, attention output)",
    "matmul 384x1536, 1536x384 (feed-forward)",
    "matmul 384x64, 64x384 (adapters)",
    "matmul pooler and head",
    "attention batched matmuls",  # With the heads' transposes.
    "softmax, mask add, scale",
    "LayerNorm",
    "GELU",
    "dropout",
    "adapters' other ops (bias, activation, residual)",
    "embeddings",
    "loss",
    "optimizer update (with global-norm clip)",
    "casts (mixed precision)",
    "other (residual adds, gradient sums, casts, copies)",
)


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--sides", default="tf,torch", help="tf, torch or both.")
  p.add_argument("--rounds", type=int, default=2, help="Processes per framework, alternating.")
  p.add_argument("--warmup_steps", type=int, default=8,
                 help="Untimed steps first (PyTorch needs several to reach its speed).")
  p.add_argument("--profiled_steps", type=int, default=3)
  p.add_argument("--seq_length", type=int, default=64)
  p.add_argument("--batch_size", type=int, default=32)
  p.add_argument("--adapter_size", type=int, default=64)
  p.add_argument("--seed", type=int, default=1)
  p.add_argument("--mixed_precision", default="none", choices=("none", "bfloat16"),
                 help="bfloat16: this project's --mixed_precision=bfloat16 against "
                 "torch.autocast('cpu', torch.bfloat16) (weights float32 on both sides).")
  p.add_argument("--show_ops", type=int, default=0,
                 help="Also print each framework's N costliest ops (node or shapes).")
  p.add_argument("--json_out", default=None)
  p.add_argument("--side", default=None, help=argparse.SUPPRESS)  # Internal: one worker.
  p.add_argument("--hf_dir", default=None, help=argparse.SUPPRESS)
  return p.parse_args(argv)


# --- This project (TensorFlow) --------------------------------------------------------


def tf_group(node, op_type):
  """The group of a TensorFlow op, from its node name and type."""
  node = re.sub(r"_\d+(?=/|$)", "", node)  # Keras' and tf.function's suffixes: layer_1_1.
  if "AdamWeightDecay" in node or "clip_by_global_norm" in node:
    return "optimizer update (with global-norm clip)"
  if "/dropout" in node:  # With its masks' casts from bool.
    return "dropout"
  if op_type in ("Cast", "_MklCast"):  # float32 <-> bfloat16: float32 itself has none.
    return "casts (mixed precision)"
  if "LayerNorm" in node:
    return "LayerNorm"
  if "gelu" in node:  # Its gradient; the forward is the intermediate layer's below.
    return "GELU"
  matmul = "MatMul" in op_type
  if "adapters" in node:
    return "matmul 384x64, 64x384 (adapters)" if matmul else (
        "adapters' other ops (bias, activation, residual)")
  if re.search(r"/(query|key|value|attention_output)/", node) and matmul:
    return "matmul 384x384 (Q, K, V, attention output)"
  if re.search(r"/(intermediate|output)/", node):
    if matmul:
      return "matmul 384x1536, 1536x384 (feed-forward)"
    return "GELU" if "/intermediate/" in node else GROUPS[-1]
  if "/pooler/" in node or "/head/" in node:
    return "matmul pooler and head"
  if "BatchMatMul" in op_type or "Einsum" in op_type or "Transpose" in op_type:
    return "attention batched matmuls"
  if op_type in ("Softmax", "_MklSoftmax") or re.search(
      r"/layer_\d+/(mul|add|sub|Sum|truediv)", node) or (  # Scale, mask add, softmax gradient,
      "/attention_gradient/" in node):  # and their recomputation (layers.ops.attention).
    return "softmax, mask add, scale"
  if "/embeddings/" in node:
    return "embeddings"
  if "sparse_categorical" in node.lower() or "softmax_cross_entropy" in node.lower() or (
      "/loss" in node):
    return "loss"
  return "other (residual adds, gradient sums, casts, copies)"


def tf_side(args):
  """Profiles this project's adapter step; answers the groups' ms per step."""
  import keras
  import numpy as np
  import tensorflow as tf
  from tensorflow.tsl.profiler.protobuf import xplane_pb2

  import benchmark  # For its MiniLM shape.
  from adapter_bert.model import modeling
  from adapter_bert.model import optimization
  from adapter_bert.model.adapter_layers import AdapterConfig
  from adapter_bert.classification import task as classifier_task
  from adapter_bert.runtime import loop, model_setup, trainable

  keras.utils.set_random_seed(args.seed)
  config = modeling.BertConfig(**benchmark.MINILM)
  with model_setup.dtype_policy(args.mixed_precision):
    model = modeling.BertClassifier(config, 2, AdapterConfig(size=args.adapter_size))
    model.ensure_built()
  trainable.set_trainable(model, trainable.TrainMode("adapters"))
  optimizer = optimization.create_optimizer(1e-4, 10_000, 100)
  optimizer.build(model.trainable_variables)
  B, S = args.batch_size, args.seq_length
  rng = np.random.default_rng(args.seed)
  features = {"input_ids": tf.constant(rng.integers(0, config.vocab_size, (B, S)), tf.int32),
              "input_mask": tf.ones((B, S), tf.int32), "segment_ids": tf.zeros((B, S), tf.int32)}
  labels = tf.constant(rng.integers(0, 2, B), tf.int32)
  iterator = iter(tf.data.Dataset.from_tensors((features, labels)).repeat())
  train_loop = loop.make_train_loop(tf.distribute.get_strategy(), model,
                                    classifier_task.loss_fn(False), optimizer, B)
  one = tf.constant(1)
  step = lambda: train_loop(iterator, one).numpy()
  for _ in range(args.warmup_steps):
    step()
  unprofiled = harness.time_steps(step, args.profiled_steps)
  with tempfile.TemporaryDirectory() as logdir:
    tf.profiler.experimental.start(logdir)
    profiled = harness.time_steps(step, args.profiled_steps)
    tf.profiler.experimental.stop()
    path = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))[-1]
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
      space.ParseFromString(f.read())
  plane = next(p for p in space.planes if p.name == "/host:CPU")
  groups = collections.Counter()
  ops = collections.Counter()
  nodes = collections.Counter()
  intervals = []
  for line in plane.lines:
    if not line.name.startswith("tf_Compute"):
      continue
    events = []
    for event in line.events:
      name = plane.event_metadata[event.metadata_id].name
      if ":" not in name or name.startswith(("Threadpool", "Executor")):
        continue
      start = line.timestamp_ns * 1000 + event.offset_ps
      events.append((start, start + event.duration_ps, name))
    # Each op's own time: a function call (the while loop, a PartitionedCall)
    # less the ops traced inside it; an XLA-compiled call has none inside, so
    # it keeps its kernel's time (the fused GELU: the intermediate layer's call).
    for start, end, name, own_ps in _self_times(events):
      node, op_type = name.rsplit(":", 1)
      ms = own_ps / 1e9
      groups[tf_group(node, op_type)] += ms
      ops[op_type] += ms
      nodes[f"{op_type} {re.sub(r'_[0-9]+(?=/|$)', '', node)}"] += ms
      if op_type not in ("While", "StatefulPartitionedCall", "PartitionedCall") or (
          "/intermediate/" in re.sub(r"_\d+(?=/|$)", "", node)):
        intervals.append((start, end))
  busy_ms = _union_ps(intervals) / 1e9
  peak_mib, live = _live_at_peak(plane)
  n = args.profiled_steps
  wall_ms = 1000 * sum(profiled) / n
  return {"framework": f"TensorFlow {tf.__version__}",
          "step_ms": 1000 * statistics.median(unprofiled), "profiled_step_ms": wall_ms,
          "groups": {g: v / n for g, v in groups.items()},
          "between_ops_ms": wall_ms - busy_ms / n,
          "op_sum_ms": sum(groups.values()) / n,
          "top_op_types": {k: v / n for k, v in ops.most_common(25)},
          "top_ops": {k: v / n for k, v in nodes.most_common(40)},
          "allocator_peak_mib": peak_mib, "live_at_peak_mib": live}


def _live_at_peak(plane):
  """TensorFlow's allocator at its peak during the profiled steps: its bytes in use
  (MiB) and the tensors then alive, MiB by the group of the op that allocated
  them (a buffer an op forwards to its output keeps its first op's name)."""
  stats = {k: v.name for k, v in plane.stat_metadata.items()}
  events = []
  for line in plane.lines:
    for event in line.events:
      kind = plane.event_metadata[event.metadata_id].name
      if kind not in ("MemoryAllocation", "MemoryDeallocation"):
        continue
      values = {}
      for stat in event.stats:
        values[stats.get(stat.metadata_id)] = (
            plane.stat_metadata[stat.ref_value].name if stat.ref_value else
            stat.str_value or stat.int64_value or stat.uint64_value)
      events.append((line.timestamp_ns * 1000 + event.offset_ps, kind, values))
  live, peak, at_peak = {}, 0, {}
  for _, kind, values in sorted(events, key=lambda e: e[0]):
    if kind == "MemoryAllocation":
      live[values.get("addr")] = (values.get("tf_op") or "", values.get("allocation_bytes", 0))
    else:
      live.pop(values.get("addr"), None)
    if values.get("bytes_allocated", 0) > peak:
      peak, at_peak = values["bytes_allocated"], dict(live)
  groups = collections.Counter()
  for op, size in at_peak.values():
    groups[tf_group(op, "MatMul" if "MatMul" in op or "BiasAdd" in op else "")] += size
  return peak / 2 ** 20, {g: b / 2 ** 20 for g, b in groups.most_common()}


def _self_times(events):
  """(start, end, name, own time) of nested (start, end, name) events of one thread."""
  out, stack = [], []
  for start, end, name in sorted(events, key=lambda e: (e[0], -e[1])):
    while stack and stack[-1][1] <= start:
      out.append(tuple(stack.pop()))
    if stack:
      stack[-1][3] -= min(end, stack[-1][1]) - start
    stack.append([start, end, name, end - start])
  return out + [tuple(e) for e in reversed(stack)]


def _union_ps(intervals):
  total, end = 0, None
  for a, b in sorted(intervals):
    if end is None or a > end:
      total += b - a
      end = b
    elif b > end:
      total += b - end
      end = b
  return total


# --- AdapterHub (PyTorch, its own venv) ----------------------------------------------


def torch_group(event, hidden, adapter_size, tokens):
  """The group of a torch.profiler op event, from its name, its shapes and where it ran."""
  name = event.name
  chain = []
  e = event
  while e is not None:
    chain.append(e.name)
    e = e.cpu_parent
  if any("Optimizer.step" in c or "clip_grad" in c or "AdamW" in c for c in chain):
    return "optimizer update (with global-norm clip)"
  if name in ("aten::to", "aten::_to_copy"):
    return "casts (mixed precision)"
  matrices = [tuple(s) for s in (event.input_shapes or []) if len(s) == 2]
  dims = {d for s in matrices for d in s}
  if name in ("aten::mm", "aten::addmm") and len(matrices) >= 2:
    if tokens not in dims:  # [batch, ...]: the pooler and the head read [CLS] only.
      return "matmul pooler and head"
    if adapter_size in dims and adapter_size != hidden:
      return "matmul 384x64, 64x384 (adapters)"
    if 4 * hidden in dims:
      return "matmul 384x1536, 1536x384 (feed-forward)"
    return "matmul 384x384 (Q, K, V, attention output)"
  if "scaled_dot_product" in name or "flash_attention" in name or name in (
      "aten::bmm", "aten::baddbmm"):
    return "attention batched matmuls"
  if "softmax" in name and "log_softmax" not in name:
    return "softmax, mask add, scale"
  if "layer_norm" in name:
    return "LayerNorm"
  if "gelu" in name:
    return "GELU"
  if "dropout" in name or "bernoulli" in name:
    return "dropout"
  if "silu" in name:
    return "adapters' other ops (bias, activation, residual)"
  if "embedding" in name:
    return "embeddings"
  if "nll_loss" in name or "log_softmax" in name or "cross_entropy" in name:
    return "loss"
  return "other (residual adds, gradient sums, casts, copies)"


def torch_side(args):
  import torch
  import adapterhub_side_by_side as ah

  torch.manual_seed(args.seed)
  ah_args = argparse.Namespace(hf_dir=args.hf_dir, adapter_size=args.adapter_size,
                               train_layer_norms=True)
  model = ah.houlsby_model(ah_args, 2)
  params = [p for p in model.parameters() if p.requires_grad]
  optimizer = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01)
  g = torch.Generator().manual_seed(args.seed)
  B, S = args.batch_size, args.seq_length
  inputs = dict(input_ids=torch.randint(0, model.config.vocab_size, (B, S), generator=g),
                attention_mask=torch.ones(B, S, dtype=torch.long),
                token_type_ids=torch.zeros(B, S, dtype=torch.long))
  labels = torch.randint(0, 2, (B,), generator=g)

  autocast = torch.autocast("cpu", torch.bfloat16, enabled=args.mixed_precision == "bfloat16")

  def step():  # As adapterhub_side_by_side.py's worker, with BERT's global-norm clip.
    model.train()
    with autocast:
      loss = model(**inputs, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

  for _ in range(args.warmup_steps):
    step()
  unprofiled = harness.time_steps(step, args.profiled_steps)
  from torch.profiler import ProfilerActivity, profile
  with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
    profiled = harness.time_steps(step, args.profiled_steps)
  groups = collections.Counter()
  ops = collections.Counter()
  shaped = collections.Counter()
  hidden = model.config.hidden_size
  for event in prof.events():
    self_ms = event.self_cpu_time_total / 1000
    if not event.name.startswith("aten::") and not event.name.startswith("autograd::"):
      continue
    groups[torch_group(event, hidden, args.adapter_size, B * S)] += self_ms
    ops[event.name] += self_ms
    shaped[f"{event.name} {event.input_shapes}"] += self_ms
  n = args.profiled_steps
  wall_ms = 1000 * sum(profiled) / n
  op_ms = sum(groups.values()) / n
  return {"framework": f"PyTorch {torch.__version__} (AdapterHub, attention "
                       f"{getattr(model.config, '_attn_implementation', None)})",
          "step_ms": 1000 * statistics.median(unprofiled), "profiled_step_ms": wall_ms,
          "groups": {k: v / n for k, v in groups.items()},
          "between_ops_ms": wall_ms - op_ms, "op_sum_ms": op_ms,
          "threads": torch.get_num_threads(),
          "top_op_types": {k: v / n for k, v in ops.most_common(25)},
          "top_ops": {k: v / n for k, v in shaped.most_common(40)}}


# --- Coordinator ------------------------------------------------------------------------


def run_side(args, side):
  python = TF_PYTHON if side == "tf" else AH_PYTHON
  argv = [python, os.path.abspath(__file__), f"--side={side}",
          f"--warmup_steps={args.warmup_steps}", f"--profiled_steps={args.profiled_steps}",
          f"--seq_length={args.seq_length}", f"--batch_size={args.batch_size}",
          f"--adapter_size={args.adapter_size}", f"--seed={args.seed}",
          f"--mixed_precision={args.mixed_precision}"]
  if side == "torch":
    argv.append(f"--hf_dir={args.hf_dir}")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
             HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
  run = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
  answers = [l for l in run.stdout.splitlines() if l.startswith(harness.MARKER)]
  if run.returncode or not answers:
    sys.exit(f"{' '.join(argv)} failed (status {run.returncode}):\n{run.stderr[-3000:]}")
  return json.loads(answers[-1][len(harness.MARKER):])


def main(argv=None):
  args = parse_args(argv)
  if args.side == "tf":
    return harness.answer(tf_side(args))
  if args.side == "torch":
    return harness.answer(torch_side(args))
  sides = [s for s in args.sides.split(",") if s]
  if "torch" in sides:
    if not os.path.exists(AH_PYTHON):
      sys.exit(f"{AH_PYTHON} not found: install AdapterHub first (benchmarks/README.md)")
    if args.hf_dir is None:
      import adapterhub_side_by_side as ah
      args.hf_dir = ah.default_hf_dir(TF_PYTHON)
  cpu = subprocess.run([TF_PYTHON, "-c", "from adapter_bert.runtime import machine; "
                        "print(machine.cpu_line())"], cwd=REPO, capture_output=True,
                       text=True, check=True).stdout.strip()
  print(f"one adapter-training step: MiniLM shape, seq {args.seq_length}, batch "
        f"{args.batch_size}, adapters {args.adapter_size}, precision {args.mixed_precision}; "
        f"{args.rounds} rounds of "
        f"{args.profiled_steps} profiled steps per framework")
  print(harness.machine_line(cpu), flush=True)
  conditions = run_conditions.Conditions(  # MiniLM's dense shapes: hidden 384, intermediate 1536.
      {"tensorflow": TF_PYTHON if "tf" in sides else None,
       "torch": AH_PYTHON if "torch" in sides else None},
      run_conditions.model_shapes(args.batch_size * args.seq_length, 384, 1536), cwd=REPO)
  start = time.perf_counter()
  runs = collections.defaultdict(list)
  for r in range(args.rounds):
    for side in (sides if r % 2 == 0 else list(reversed(sides))):
      runs[side].append(run_side(args, side))
      print(f"  round {r + 1} {side}: step {runs[side][-1]['step_ms']:.1f} ms", flush=True)
  med = lambda values: statistics.median(values) if values else 0.0
  table = {}
  for side in sides:
    table[side] = {g: med([run["groups"].get(g, 0.0) for run in runs[side]]) for g in GROUPS}
    table[side]["between ops"] = med([run["between_ops_ms"] for run in runs[side]])
    table[side]["step (unprofiled)"] = med([run["step_ms"] for run in runs[side]])
  names = {s: runs[s][0]["framework"] for s in sides}
  print("\n| ms per step | " + " | ".join(names[s] for s in sides)
        + (" | ratio |" if len(sides) == 2 else " |"))
  print("| --- |" + " --- |" * (len(sides) + (len(sides) == 2)))
  for g in GROUPS + ("between ops", "step (unprofiled)"):
    values = [table[s][g] for s in sides]
    ratio = (f" | {values[0] / values[1]:.2f}" if len(sides) == 2 and values[1] > 0.05
             else " | -" if len(sides) == 2 else "")
    print(f"| {g} | " + " | ".join(f"{v:.1f}" for v in values) + ratio + " |")
  if "tf" in sides:
    first = runs["tf"][0]
    print(f"\nTensorFlow's allocator at its peak in the step: {first['allocator_peak_mib']:.0f} "
          "MiB in use (weights included); tensors then alive, MiB, by the op group that "
          "allocated them: " + ", ".join(f"{g} {m:.0f}" for g, m in
                                         first["live_at_peak_mib"].items() if m >= 1))
  for side in sides if args.show_ops else ():
    print(f"\n{names[side]}: costliest ops, ms per step (first round)")
    for op, ms in list(runs[side][0]["top_ops"].items())[:args.show_ops]:
      print(f"  {ms:7.1f} {op}")
  results = {"args": vars(args), "runs": runs, "table": table}
  harness.finish(results, start, args.json_out, cpu, conditions)


if __name__ == "__main__":
  main()
