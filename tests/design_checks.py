"""What a design defined in a test shows end to end, shared by the tests of a new
design (test_new_design) and of a design at a new place (test_new_place): one
training step, its tasks served beside Houlsby's in one batch, and a run of it
into an adapter bank whose exported SavedModel gives the run's predictions."""

import types

import keras
import numpy as np
import tensorflow as tf

from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.model import modeling
import tiny_bert

CONFIG = modeling.BertConfig.from_dict(tiny_bert.TINY_CONFIG)  # 2 layers, hidden 32.
L = CONFIG.num_hidden_layers


def train_step(model, optimizer, inputs, labels):
  """One step of `optimizer` on the cross-entropy of `model`'s logits for `labels`."""
  with tf.GradientTape() as tape:
    logits = model(inputs, training=True)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
  grads = tape.gradient(loss, model.trainable_variables)
  optimizer.apply_gradients(zip(grads, model.trainable_variables))


def served_beside_houlsby(new_config):
  """StackedTasksBert over a task of `new_config` and a Houlsby task, on one base:
  each example gets its own task model's logits."""
  from adapter_bert.serving import stacked_tasks
  keras.utils.set_random_seed(0)
  configs = {"new": new_config, "houlsby": AdapterConfig(size=2)}
  base, models, tasks = None, {}, []
  for i, (name, config) in enumerate(configs.items()):
    model = modeling.BertClassifier(CONFIG, 2, config)
    model.ensure_built()
    names = model.tf1_variable_map()
    values = tiny_bert.random_weights({n: tuple(v.shape) for n, v in names.items()}, seed=i)
    trained = {n for n in names if modeling.variable_role(n) in ("adapter", "layer_norm",
                                                                 "head")}
    if base is None:
      base = {n: values[n] for n in names if modeling.variable_role(n) not in
              ("adapter", "head")}
    for n, v in names.items():
      v.assign(values[n] if n in trained else base[n])
    models[name] = model
    tasks.append(types.SimpleNamespace(name=name, path=name, adapter_config=config,
                                       arrays={n: v.numpy() for n, v in names.items()
                                               if n in trained}))
  served = stacked_tasks.StackedTasksBert(CONFIG, base, tasks)
  inputs = tiny_bert.random_inputs(seed=4, batch=6, seq=7, padded_from=5,
                                   second_segment_from=3)
  task_index = np.arange(6) % 2
  logits = served(inputs, task_index).numpy()
  for i, model in enumerate(models.values()):
    own = model(inputs, training=False).numpy()
    rows = np.flatnonzero(task_index == i)
    np.testing.assert_allclose(logits[rows], own[rows], atol=2e-5)
  assert np.abs(logits[0] - models["houlsby"](inputs, training=False).numpy()[0]).max() > 1e-3


def run_bank_and_export(base, tmp_path, design, scope, extra_task=None):
  """The run of `design` into a bank (its adapters under `scope`), the bank
  reopened (and `extra_task` added from the run's adapter_model/ and reopened),
  and the exported bank's predictions of each task the run's."""
  import os
  from adapter_bert.bank import adapter_bank
  from adapter_bert.bank import bank_tasks
  from adapter_bert.classification import processors
  from adapter_bert.serving import export as serving_export
  from run_harness import GLUE, classifier_flags, run_main
  out, bank_dir = str(tmp_path / "run"), str(tmp_path / "bank")
  data_dir = os.path.join(GLUE, "MRPC")
  run_main(**classifier_flags(base, task_name="MRPC", data_dir=data_dir, output_dir=out,
                              do_train=True, do_predict=True, num_train_epochs=0.5,
                              adapter_size=3,
                              adapter_init_scale=0.3,  # Adapters that matter to the predictions.
                              adapter_design=design, adapter_bank=bank_dir, bank_task="mrpc-new"))
  names = ["mrpc-new"]
  if extra_task:
    adapter_bank.add_task(bank_dir, extra_task, os.path.join(out, "adapter_model"))
    names.append(extra_task)
  for name in names:
    task = bank_tasks.read_task(bank_dir, adapter_bank.open_bank(bank_dir), name)
    assert task.adapter_config == AdapterConfig(size=3, init_scale=0.3, design=design)
    assert {n for n in task.arrays if modeling.variable_role(n) == "adapter"} == {
        f"bert/encoder/layer_{i}/{scope}/{p}"
        for i in range(L) for p in ("weights1", "biases1", "weights2", "biases2")}
  export_dir = str(tmp_path / "export")
  serving_export.export(bank_dir, export_dir)
  served = tf.saved_model.load(export_dir).signatures["serving_default"]
  examples = processors.get_processor("MRPC").get_test_examples(data_dir)
  with open(os.path.join(out, "test_results.tsv")) as f:
    expected = np.array([[float(x) for x in line.split("\t")] for line in f.read().splitlines()])
  assert expected.shape == (len(examples), 2)
  for name in names:
    outputs = served(text_a=tf.constant([e.text_a for e in examples]),
                     text_b=tf.constant([e.text_b for e in examples]),
                     task=tf.constant([name] * len(examples)))
    np.testing.assert_allclose(outputs["probabilities"].numpy()[:, :2], expected, atol=1e-5)
