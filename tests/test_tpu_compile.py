"""Every step a TPU runs compiles with XLA, on the shapes a TPU run feeds it.

No TPU can be reached from where the project is built and tested. What a TPU
compiles is each replica's step (runtime/loop.make_train_step and
make_predict_step: `strategy.run` hands it to the TPU compiler); the loops
around it, the input pipeline, metrics, summaries and files stay on the host.
These tests build the classifier, SQuAD and multi-task (HyperFormer++ and
shared adapters) models the way the entry points do, read batches from feature
records the way the entry points read them under --use_tpu (last eval /
predict batch filled, batch dimension static, sequences cut to multiples of
records.STATIC_SHAPE_MULTIPLE), and compile each step with XLA for every
batch shape (experimental_get_compiler_ir: the whole step, or an error naming
the op XLA cannot compile). They fail on:
  * an op without an XLA kernel (the compile raises);
  * a host callback (py_function, numpy_function, tf.print) or any string
    tensor inside a step, which a TPU cannot run;
  * a shape that is not static: an input or output with an unknown dimension,
    or a bounded dynamic dimension (`<=N`) in the HLO;
  * an input that is neither int32 nor float32 (the original cast int64
    features to int32 for TPUs).
bfloat16 (--mixed_precision=bfloat16, the TPU's mixed precision) is compiled too.
What only a real TPU shows (the TPU compiler's own op coverage, memory,
speed, the connection) is listed in docs/tpu.md, "What is shown without a TPU".
"""

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import types_pb2

from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.classification import features as classifier_features
from adapter_bert.classification import processors
from adapter_bert.classification import task as classifier_task
from adapter_bert.fusion import model as fusion_model
from adapter_bert.model import modeling
from adapter_bert.multitask import model as multitask_model
from adapter_bert.multitask import sampling
from adapter_bert.multitask import tasks as multitask_tasks
from adapter_bert.multitask.hypernetwork import HyperFormerConfig
from adapter_bert.runtime import loop
from adapter_bert.runtime import prediction
from adapter_bert.runtime import model_setup
from adapter_bert.runtime import packing
from adapter_bert.runtime import records
from adapter_bert.runtime import startup
from adapter_bert.runtime import trainable
from adapter_bert.tasks import multitask
from adapter_bert.tasks import question_answering
from adapter_bert.squad import examples as squad_examples
from adapter_bert import tokenization
import tiny_bert

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GLUE = os.path.join(REPO, "data", "glue")
SQUAD = os.path.join(REPO, "data", "squad")
BATCH = 4  # The dev and test sets' 6 examples leave a last batch of 2 to fill.
MAX_SEQ_LENGTH = 64  # Sequences of 16, 32, 48 or 64 tokens.
TRAIN_BATCHES = 6  # Training batches compiled for (their distinct shapes).

# Ops that call back into the host's Python or write to its log, which a TPU
# step cannot hold (tf.py_function, tf.numpy_function, tf.print, string ops).
# Assert is not one: XLA compiles it to nothing (tf2xla's Assert kernel), so
# its message strings never reach the device (tf.nn.compute_average_loss
# asserts a non-negative batch size).
HOST_OPS = {"PyFunc", "PyFuncStateless", "EagerPyFunc", "PrintV2", "Print",
            "StringFormat", "AsString", "StringJoin"}


def _options(base, output_dir, **model):
  return startup.RunOptions(
      output_dir=output_dir, model=model_setup.ModelOptions(
          init_checkpoint=base["init_checkpoint"], **model),
      bert_config_file=base["bert_config_file"], vocab_file=base["vocab_file"],
      max_seq_length=MAX_SEQ_LENGTH, train_batch_size=BATCH, use_tpu=True, seed=1)


def _model(options, make_model):
  """The task model as the entry points create it (weights from init_checkpoint)."""
  base = startup.read_base(options)
  model, _ = model_setup.create_model(tf.distribute.get_strategy(), make_model,
                                      options.model, base, options.output_dir)
  return model


def _optimizer(options, model):
  settings = loop.TrainSettings(output_dir=options.output_dir, train_batch_size=BATCH,
                                num_train_steps=10, num_warmup_steps=1, learning_rate=1e-3,
                                jit_compile=True)
  return loop.create_optimizer(tf.distribute.get_strategy(), model, settings)


def _tokenizer(base):
  return tokenization.FullTokenizer(base["vocab_file"], do_lower_case=True)


@dataclasses.dataclass
class Steps:
  """A model's compiled steps and the batches its run feeds them."""
  train_step: object
  predict_step: object
  batches: dict  # "train" / "eval" / "predict" -> [(features, labels)].


def _take(dataset, n=None):
  return list(dataset.take(n) if n else dataset)


def _classifier_steps(base, output_dir, mixed_precision, pack_sequences=False):
  """run_classifier.py's model and datasets under --use_tpu (SST-2); packed:
  batches of BATCH rows of packed examples (--pack_sequences)."""
  options = _options(base, output_dir, adapter={"size": 8}, mixed_precision=mixed_precision)
  options = dataclasses.replace(options, pack_sequences=pack_sequences)
  processor = processors.get_processor("sst-2")
  model = _model(options, lambda bert, adapters: modeling.BertClassifier(
      bert, processor.num_labels(), adapters))
  tokenizer, labels = _tokenizer(base), processor.get_labels()
  batches = {}
  for split, examples in (("train", processor.get_train_examples(os.path.join(GLUE, "SST-2"))),
                          ("eval", processor.get_dev_examples(os.path.join(GLUE, "SST-2"))),
                          ("predict", processor.get_test_examples(
                              os.path.join(GLUE, "SST-2")))):
    is_training = split == "train"
    if not is_training:  # run_classifier._outputs under --use_tpu.
      examples = classifier_features.pad_examples_for_tpu(examples, BATCH)
    record = os.path.join(output_dir, f"{split}.tf_record")
    classifier_features.ensure_feature_record(examples, labels, MAX_SEQ_LENGTH, tokenizer,
                                              record)
    dataset = classifier_features.make_dataset(
        record, MAX_SEQ_LENGTH, BATCH, is_training=is_training, drop_remainder=True,
        seed=1, pad_to_multiple_of=options.pad_to_multiple_of, pack_sequences=pack_sequences)
    batches[split] = _take(dataset, TRAIN_BATCHES if is_training else None)
  return Steps(loop.make_train_step(model, classifier_task.loss_fn(False),
                                    _optimizer(options, model), BATCH, jit_compile=True),
               prediction.make_predict_step(model, jit_compile=True), batches)


def _squad_steps(base, output_dir, mixed_precision):
  """run_squad.py's model and datasets under --use_tpu (the v1.1 files)."""
  options = _options(base, output_dir, adapter={"size": 8}, mixed_precision=mixed_precision)
  model = _model(options, modeling.BertSpanLabeler)
  convert = dict(tokenizer=_tokenizer(base), max_seq_length=MAX_SEQ_LENGTH, doc_stride=24,
                 max_query_length=16)
  train = question_answering.write_features(
      question_answering.read_train_examples(os.path.join(SQUAD, "train-v1.1.json"), False),
      path=os.path.join(output_dir, "train.tf_record"), is_training=True, **convert)
  predict = question_answering.write_features(
      squad_examples.read_squad_examples(os.path.join(SQUAD, "dev-v1.1.json"), False, False),
      path=os.path.join(output_dir, "eval.tf_record"), is_training=False, **convert)
  assert predict.num_features % BATCH  # The last batch is filled.
  batches = {
      "train": _take(question_answering.train_dataset(train.filename, MAX_SEQ_LENGTH, BATCH, 1,
                                             options.pad_to_multiple_of), TRAIN_BATCHES),
      "predict": _take(question_answering.predict_dataset(
          predict.filename, MAX_SEQ_LENGTH, BATCH, predict.num_features,
          pad_last_batch=True, pad_to_multiple_of=options.pad_to_multiple_of))}
  return Steps(loop.make_train_step(model, question_answering.span_loss, _optimizer(options, model),
                                    BATCH, jit_compile=True),
               prediction.make_predict_step(model, jit_compile=True), batches)


def multitask_tasks_and_examples():
  """A classification and a regression task (SST-2, STS-B), every split read."""
  tasks = multitask_tasks.tasks_from_flags(
      ["sst-2", "sts-b"], [os.path.join(GLUE, "SST-2"), os.path.join(GLUE, "STS-B")],
      ["sentence"], None, ["label"])
  examples = {t.name: classifier_task.read_examples(t.processor, t.data_dir, True, True, True)
              for t in tasks}
  return tasks, examples


def _multitask_steps(base, output_dir, mixed_precision, adapter_type):
  """run_multitask.py's model and datasets under --use_tpu."""
  tasks, examples = multitask_tasks_and_examples()
  heads = [t.head() for t in tasks]
  hyper = (HyperFormerConfig(adapter_size=8, task_embedding_dim=8, projector_hidden_dim=16,
                             projected_dim=8) if adapter_type == "hyperformer" else None)
  model_options = (dict(adapter={"size": 0}, train_mode="head") if hyper else
                   dict(adapter={"size": 8}, train_mode="adapters"))
  options = _options(base, output_dir, mixed_precision=mixed_precision, **model_options)
  model = _model(options, lambda bert, adapters: multitask_model.MultiTaskClassifier(
      bert, heads, adapter_type, adapters, hyper))
  tokenizer = _tokenizer(base)
  probabilities = sampling.task_probabilities([len(examples[t.name]["train"]) for t in tasks],
                                              1.0)
  batches = {"train": _take(multitask.train_dataset(options, tasks, examples, tokenizer,
                                                        probabilities), TRAIN_BATCHES)}
  for split in ("eval", "predict"):
    batches[split] = [b for index, task in enumerate(tasks) for b in _take(
        multitask.task_dataset(options, task, index, split, examples[task.name][split],
                                   tokenizer, BATCH))]
  return Steps(loop.make_train_step(model, multitask_model.loss_fn(heads),
                                    _optimizer(options, model), BATCH, jit_compile=True),
               prediction.make_predict_step(model, jit_compile=True), batches)


MODELS = {"classifier": _classifier_steps, "squad": _squad_steps,
          "hyperformer": lambda *a: _multitask_steps(*a, "hyperformer"),
          "shared": lambda *a: _multitask_steps(*a, "shared")}


@pytest.fixture(scope="module")
def steps(base, tmp_path_factory):
  """Steps of each (model, precision), built on first use."""
  built = {}

  def get(model, mixed_precision):
    if (model, mixed_precision) not in built:
      output_dir = str(tmp_path_factory.mktemp(f"{model}_{mixed_precision}"))
      built[model, mixed_precision] = MODELS[model](base, output_dir, mixed_precision)
    return built[model, mixed_precision]

  return get


def _graph_nodes(graph_def):
  """Every node of a graph and of the functions it calls (loops, gradients), less
  the constant messages of Assert ops (HOST_OPS)."""
  for nodes in [graph_def.node] + [f.node_def for f in graph_def.library.function]:
    scopes = tuple(n.name.rsplit("/", 1)[0] + "/" for n in nodes if n.op == "Assert")
    yield from (n for n in nodes if not (
        n.op == "Assert" or n.op == "Const" and n.name.startswith(scopes)))


def _has_string_type(node) -> bool:
  return any(a.type == types_pb2.DT_STRING or types_pb2.DT_STRING in a.list.type
             for a in node.attr.values())


def _shapes(structure):
  return [t.shape for t in tf.nest.flatten(structure)]


# The HLO of each (step, input signature) checked already: one step fed batches of
# the same shapes (an eval and a predict split) is one program, compiled once.
_COMPILED = {}


def assert_compiles_for_tpu(step, features, labels):
  """The step compiles into one XLA program on these static shapes (module docstring)."""
  for shape in _shapes((features, labels)):
    assert shape.is_fully_defined(), shape
  # int32, not int64, as the original cast every feature for TPUs.
  for t in tf.nest.flatten((features, labels)):
    assert t.dtype in (tf.int32, tf.float32), t.dtype
  key = (step, str(tf.nest.map_structure(tf.TensorSpec.from_tensor, (features, labels))))
  return _COMPILED.get(key) or _COMPILED.setdefault(key, _compile(step, features, labels))


def _compile(step, features, labels):
  """The checks of assert_compiles_for_tpu on the traced step and its HLO; the HLO."""
  concrete = step.get_concrete_function(features, labels)
  graph_def = concrete.graph.as_graph_def()
  host = sorted({n.op for n in _graph_nodes(graph_def) if n.op in HOST_OPS})
  assert not host, f"host ops in the step: {host}"
  strings = sorted({f"{n.op}:{n.name}" for n in _graph_nodes(graph_def)
                    if _has_string_type(n)})
  assert not strings, f"string tensors in the step: {strings[:10]}"
  for shape in _shapes(concrete.structured_outputs):
    assert shape.is_fully_defined(), shape
  hlo = step.experimental_get_compiler_ir(features, labels)(stage="hlo")
  assert "<=" not in hlo, "a bounded dynamic dimension in the HLO"
  return hlo


def _distinct_shapes(batches):
  seen = {}
  for features, labels in batches:
    seen.setdefault(tuple(tuple(s) for s in _shapes((features, labels))), (features, labels))
  return list(seen.values())


CASES = [(model, split) for model in MODELS
         for split in (("train", "predict") if model == "squad" else
                       ("train", "eval", "predict"))]


@pytest.mark.parametrize("mixed_precision", ["none", "bfloat16"])
@pytest.mark.parametrize("model,split", CASES, ids=[f"{m}-{s}" for m, s in CASES])
def test_step_compiles_for_tpu(steps, model, split, mixed_precision):
  s = steps(model, mixed_precision)
  batches = s.batches[split]
  # Static batch dimension (drop_remainder, the last batch filled), sequences
  # cut to a multiple of STATIC_SHAPE_MULTIPLE: a few programs, not one a length.
  for features, _ in batches:
    assert features["input_ids"].shape[0] == BATCH
    assert features["input_ids"].shape[1] % records.STATIC_SHAPE_MULTIPLE == 0
  step = s.train_step if split == "train" else s.predict_step
  for features, labels in _distinct_shapes(batches):
    hlo = assert_compiles_for_tpu(step, features, labels)
    if split == "train":  # Forward, gradients and the update in one program.
      assert "AdamWeightDecay" in hlo
    # bfloat16 compute where asked (float32 variables either way).
    assert ("bf16[" in hlo) == (mixed_precision == "bfloat16")


@pytest.fixture(scope="module")
def packed_steps(base, tmp_path_factory):
  return _classifier_steps(base, str(tmp_path_factory.mktemp("packed")), "none",
                           pack_sequences=True)


@pytest.mark.parametrize("split", ["train", "eval", "predict"])
def test_packed_classifier_steps_compile_once(packed_steps, split):
  """--pack_sequences: every batch of a split has one static shape, [BATCH rows,
  MAX_SEQ_LENGTH] (one XLA program), and each step compiles for a TPU."""
  batches = packed_steps.batches[split]
  (features, labels), = _distinct_shapes(batches)
  assert features["input_ids"].shape == (BATCH, MAX_SEQ_LENGTH)
  assert features[modeling.EXAMPLE_LENGTHS].shape[0] == BATCH
  assert labels.shape == features[modeling.EXAMPLE_LENGTHS].shape
  # Really packed: SST-2's short sentences share rows.
  assert max(int(np.count_nonzero(f[modeling.EXAMPLE_LENGTHS][0])) for f, _ in batches) > 1
  step = packed_steps.train_step if split == "train" else packed_steps.predict_step
  hlo = assert_compiles_for_tpu(step, features, labels)
  assert ("AdamWeightDecay" in hlo) == (split == "train")


def test_host_callbacks_and_strings_are_caught():
  """The checks above fail on what they look for (a reference for the test itself)."""
  features = {"x": tf.ones([2, 16])}
  labels = tf.zeros([2], tf.int32)

  def with_print(features, labels):
    tf.print("loss")
    return tf.reduce_sum(features["x"]) + tf.cast(tf.reduce_sum(labels), tf.float32)

  def with_py_function(features, labels):
    del labels
    return tf.py_function(lambda x: x * 2, [features["x"]], tf.float32)

  def with_string(features, labels):
    del labels
    return tf.strings.length(tf.strings.as_string(features["x"]))

  def dynamic(features, labels):
    del labels
    return tf.boolean_mask(features["x"], features["x"] > 0)

  for fn, message in ((with_print, "host ops"), (with_py_function, "host ops"),
                      (with_string, "host ops"), (dynamic, None)):
    with pytest.raises((AssertionError, tf.errors.InvalidArgumentError,
                        tf.errors.UnimplementedError, ValueError)) as error:
      assert_compiles_for_tpu(tf.function(fn, jit_compile=True), features, labels)
    if message:
      assert message in str(error.value)
  assert_compiles_for_tpu(tf.function(lambda f, l: tf.reduce_sum(f["x"]), jit_compile=True),
                          features, labels)


DESIGNS = ("houlsby", "pfeiffer", "parallel", "lora", "fusion")


def _design_model(design):
  """The tiny classifier with adapters of `design` training (AdapterFusion: its fusion
  layers, over the adapters of two Houlsby tasks)."""
  config = modeling.BertConfig.from_dict(tiny_bert.TINY_CONFIG)
  if design == "fusion":
    houlsby = modeling.BertClassifier(config, 2, AdapterConfig(size=8))
    houlsby.ensure_built()
    arrays = {n: v.numpy() for n, v in houlsby.tf1_variable_map().items()
              if modeling.variable_role(n) == "adapter"}
    model = fusion_model.FusionClassifier(
        config, 2, AdapterConfig(size=8), [fusion_model.FusedTask("a", arrays),
                                           fusion_model.FusedTask("b", dict(arrays))])
  else:
    model = modeling.BertClassifier(config, 2, AdapterConfig(size=8, design=design))
  model.ensure_built()
  trainable.set_trainable(model, trainable.TrainMode("adapters"))
  return model


def _captured_constants(step, features, labels):
  """Tensors the step captured from the host (not variables), which every call copies
  to the device: the shapes of those with more than one element."""
  captured = step.get_concrete_function(features, labels).captured_inputs
  return [tuple(t.shape) for t in captured
          if t.dtype != tf.resource and t.shape.num_elements() != 1]


@pytest.mark.parametrize("design", DESIGNS)
def test_every_adapter_design_compiles_for_tpu(design):
  """Each design's train and predict steps are one XLA program on a TPU's static
  shapes, reading their weights as variables (no constants captured)."""
  model = _design_model(design)
  optimizer = loop.create_optimizer(tf.distribute.get_strategy(), model, loop.TrainSettings(
      output_dir="", train_batch_size=BATCH, num_train_steps=10, num_warmup_steps=1,
      learning_rate=1e-3))
  rng = np.random.default_rng(0)
  features = {"input_ids": tf.constant(rng.integers(1, 99, (BATCH, 16)), tf.int32),
              "input_mask": tf.ones([BATCH, 16], tf.int32),
              "segment_ids": tf.zeros([BATCH, 16], tf.int32)}
  labels = tf.constant([0, 1, 1, 0], tf.int32)
  train_step = loop.make_train_step(model, classifier_task.loss_fn(False), optimizer, BATCH,
                                    jit_compile=True)
  predict_step = prediction.make_predict_step(model, jit_compile=True)
  assert "AdamWeightDecay" in assert_compiles_for_tpu(train_step, features, labels)
  assert_compiles_for_tpu(predict_step, features, labels)
  for step in (train_step, predict_step):
    assert not _captured_constants(step, features, labels)
  # What trains is the design's adapters (fusion: the fusion layers) and LayerNorms.
  roles = {modeling.variable_role(n) for n, v in model.tf1_variable_map().items()
           if v.trainable}
  assert roles == {"adapter", "layer_norm", "head"}
  if design == "fusion":  # The fused adapters: frozen variables of the model.
    fused = [v for adapters in model._fused_adapters for weights in adapters  # pylint: disable=protected-access
             for v in tf.nest.flatten(tuple(weights))]
    assert len(fused) == 2 * 2 * tiny_bert.TINY_CONFIG["num_hidden_layers"] * 4
    non_trainable = {id(v) for v in model.non_trainable_variables}
    assert all(id(v) in non_trainable for v in fused)
    assert not {id(v) for v in fused} & {id(v) for v in model.tf1_variable_map().values()}


CONDITIONALS = {"If", "StatelessIf", "Case", "StatelessCase"}


def _predict_loop_graph(model, batches, num_steps=2):
  """The graph of runtime/prediction.predict's compiled loop over `batches`, as predict runs it."""
  dataset = tf.data.Dataset.from_tensor_slices(batches[0][0]).batch(BATCH, drop_remainder=True)
  dataset = tf.data.Dataset.zip((dataset, tf.data.Dataset.from_tensor_slices(
      batches[0][1]).batch(BATCH, drop_remainder=True)))
  dataset = prediction._with_positions(dataset)  # pylint: disable=protected-access
  strategy = tf.distribute.get_strategy()
  iterator = iter(strategy.experimental_distribute_dataset(dataset))
  function = prediction.predict_function(strategy, model)
  return function.get_concrete_function(iterator, tf.constant(num_steps)).graph.as_graph_def()


def _functions_under_conditionals(graph_def):
  """The names of the functions a conditional op of the graph (or of its functions)
  calls as a branch, and every function those call in turn."""
  library = {f.signature.name: f for f in graph_def.library.function}
  conditionals = [n for n in _graph_nodes(graph_def) if n.op in CONDITIONALS]
  todo = [n.attr[key].func.name for n in conditionals
          for key in ("then_branch", "else_branch") if key in n.attr]
  todo += [f.name for n in conditionals for f in n.attr["branches"].list.func]
  seen = set()
  while todo:
    name = todo.pop()
    if name in seen or name not in library:
      continue
    seen.add(name)
    for node in library[name].node_def:
      todo += [a.func.name for a in node.attr.values() if a.func.name]
      todo += [f.name for a in node.attr.values() for f in a.list.func]
      if node.op in library:
        todo.append(node.op)
  return seen


def test_the_predict_loop_runs_the_model_outside_any_conditional():
  """runtime/prediction.predict counts its batches on the host and runs them in a
  tf.range loop, as training: the replicated step (and the model in it) is
  under no tf.cond, the least-trodden shape under TPUStrategy."""
  model = _design_model("houlsby")
  rng = np.random.default_rng(0)
  features = {"input_ids": rng.integers(1, 99, (3 * BATCH, 16)).astype(np.int32),
              "input_mask": np.ones([3 * BATCH, 16], np.int32),
              "segment_ids": np.zeros([3 * BATCH, 16], np.int32)}
  graph_def = _predict_loop_graph(model, [(features, np.zeros([3 * BATCH], np.int32))])
  products = {"MatMul", "BatchMatMulV2"}
  assert {n.op for n in _graph_nodes(graph_def)} >= products  # The model is in the trace.
  library = {f.signature.name: f for f in graph_def.library.function}
  under = {n.op for name in _functions_under_conditionals(graph_def)
           for n in library[name].node_def}
  assert not under & products, f"the model runs under a conditional: {sorted(under)[:20]}"
  # Exactly the batches counted on the host: no end-of-input test on the device.
  assert "IteratorGetNextAsOptional" not in {n.op for n in _graph_nodes(graph_def)}


REPLICAS = 4


def replica_task_ids(strategy, vocab_file, output_dir, num_steps=12):
  """Multi-task training batches as each replica of `strategy` (MirroredStrategy,
  which splits each global batch between the replicas as TPUStrategy does) reads
  multitask.train_dataset's stream under --use_tpu through loop.training_iterator.
  Returns, per step, each replica's task ids and input_ids shape."""
  assert strategy.num_replicas_in_sync == REPLICAS
  tasks, examples = multitask_tasks_and_examples()
  options = startup.RunOptions(output_dir=output_dir, max_seq_length=MAX_SEQ_LENGTH,
                             train_batch_size=2 * REPLICAS, use_tpu=True, seed=1)
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  steps = []
  for start in (0, num_steps // 2):  # From the start, and resumed halfway.
    # Built anew, as a resumed run builds it (a second iterator of one seeded
    # dataset is reshuffled).
    dataset = multitask.train_dataset(options, tasks, examples, tokenizer, [0.5, 0.5])
    iterator = loop.training_iterator(strategy, dataset, start)
    read = []
    for _ in range(start, num_steps):
      features, _ = next(iterator)
      read.append([(t.numpy().tolist(), i.shape.as_list()) for t, i in zip(
          strategy.experimental_local_results(features["task_index"]),
          strategy.experimental_local_results(features["input_ids"]))])
    steps.append(read)
  return steps


def replica_dropout(strategy):
  """The tiny classifier's forward pass with dropout, XLA-compiled in each replica of a
  two-replica `strategy`: the replica-id branch of layers/ops._replica_seed is compiled, as
  a TPU core's step compiles it. Each replica's logits and share of a packed batch's loss."""
  with strategy.scope():
    model = _design_model("houlsby")
  rng = np.random.default_rng(0)
  features = {"input_ids": tf.constant(rng.integers(1, 99, (BATCH, 16)), tf.int32),
              "input_mask": tf.ones([BATCH, 16], tf.int32),
              "segment_ids": tf.zeros([BATCH, 16], tf.int32)}
  forward = tf.function(lambda f: model(f, training=True), jit_compile=True)

  def replica_step():
    context = tf.distribute.get_replica_context()
    assert context.num_replicas_in_sync == 2
    hlo = forward.experimental_get_compiler_ir(features)(stage="hlo")
    assert "<=" not in hlo, "a bounded dynamic dimension in the HLO"
    return forward(features)

  logits = strategy.experimental_local_results(strategy.run(replica_step))
  # A packed global batch of 2 rows x 3 slots, a row a replica: 3 real examples in
  # all, 2 on replica 0. Each replica's loss is its share of the global mean.
  per_example = [[1.0, 2.0, 9.0], [4.0, 9.0, 9.0]]
  lengths = [[5, 3, 0], [7, 0, 0]]
  values = strategy.experimental_distribute_values_from_function(
      lambda context: (tf.constant([per_example[context.replica_id_in_sync_group]]),
                       tf.constant([lengths[context.replica_id_in_sync_group]])))
  shares = strategy.run(tf.function(packing.mean_over_examples), args=values)
  return {"logits": [t.numpy().tolist() for t in logits],
          "shares": [float(t) for t in strategy.experimental_local_results(shares)]}


def replica_runs(vocab_file, output_dir):
  """Both runs in one fresh interpreter (logical devices exist only if set before
  TensorFlow starts): REPLICAS logical CPUs for replica_task_ids, two for replica_dropout."""
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(
      cpu, [tf.config.LogicalDeviceConfiguration()] * REPLICAS)
  return {"task_ids": replica_task_ids(tf.distribute.MirroredStrategy(
              [f"/cpu:{i}" for i in range(REPLICAS)]), vocab_file, output_dir),
          "dropout": replica_dropout(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))}


@pytest.fixture(scope="module")
def replicas(base, tmp_path_factory):
  """replica_runs' results, from a fresh interpreter that imports TensorFlow as the
  commands do. Its CPU backend's LLVM optimizations are off: they only make the host's
  machine code faster, and cost most of each replica's compile; XLA still compiles
  the whole step (a TPU compiles the same HLO with its own backend)."""
  env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2", XLA_FLAGS=" ".join(
      [os.environ.get("XLA_FLAGS", ""), "--xla_backend_optimization_level=0"]).strip(),
             PYTHONPATH=os.pathsep.join([REPO, os.path.join(REPO, "tests")]))
  code = ("from adapter_bert.cli import launch; launch.import_frameworks(); import json, sys, "
          "test_tpu_compile; print(json.dumps(test_tpu_compile.replica_runs(*sys.argv[1:])))")
  done = subprocess.run([sys.executable, "-c", code, base["vocab_file"],
                         str(tmp_path_factory.mktemp("replicas"))], env=env,
                        capture_output=True, text=True, timeout=300, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_replica_gets_the_same_single_task_each_step(replicas):
  from_start, resumed = replicas["task_ids"]
  tasks_seen = set()
  for step in from_start:
    assert len(step) == REPLICAS
    ids = [i for replica, _ in step for i in replica]
    # 2 examples a replica, all of one task: the same task on every replica.
    assert [len(replica) for replica, _ in step] == [2] * REPLICAS
    assert len(set(ids)) == 1, step
    # The same (static) shape on every replica.
    assert len({tuple(shape) for _, shape in step}) == 1, step
    tasks_seen.add(ids[0])
  assert tasks_seen == {0, 1}  # Both tasks are drawn (else the test shows nothing).
  # A resumed run reads the rest of the same stream.
  assert resumed == from_start[len(from_start) - len(resumed):]


def test_replicas_compile_their_dropout_and_draw_distinct_masks(replicas):
  """Under two replicas each replica's dropout folds its replica id into the seed
  (layers/ops._replica_seed), compiled by XLA as a TPU compiles it; the same
  inputs then give each replica other logits. (The packed step's cross-replica
  mean cannot be compiled this way: MirroredStrategy's all-reduce inside a
  compiled replica function is a merge_call it does not support; it runs under
  MirroredStrategy in tests/test_distribution.py.)"""
  result = replicas["dropout"]
  first, second = (np.array(x) for x in result["logits"])
  assert first.shape == second.shape == (BATCH, 2)
  assert np.all(np.isfinite(first)) and not np.allclose(first, second)
  # The packed loss's count of real examples is summed across replicas: (1 + 2) / 3
  # and 4 / 3, which add up to the one-device mean over the 3 examples.
  assert result["shares"] == pytest.approx([1.0, 4.0 / 3.0])

