"""Packed batches of the multi-task model (--pack_sequences): one task's examples
per batch, so the task ids follow the examples; each example's logits, loss and
gradients are those it has alone, unpadded (test_packing_squad's reference).
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.classification import features as classifier_features
from adapter_bert.classification import task as classifier_task
from adapter_bert.model import modeling
from adapter_bert.multitask import model as multitask_model
from adapter_bert.multitask.hypernetwork import HyperFormerConfig
from adapter_bert.multitask.model import MultiTaskClassifier, TaskHead
from adapter_bert.multitask import tasks as multitask_tasks
from adapter_bert.runtime import packing
from adapter_bert.runtime import startup
from adapter_bert.tasks import multitask
from packed_batches import CONFIG, LENGTHS, MAX_EXAMPLES, ROWS, pack_by_hand
from adapter_bert import tokenization

GLUE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "glue")

HEADS = [TaskHead("a", ("x", "y")), TaskHead("b", ("p", "q", "r")),
         TaskHead("c", (), is_regression=True)]


def _model(adapter_type):
  tf.keras.utils.set_random_seed(2)
  config = modeling.BertConfig.from_dict(CONFIG)
  if adapter_type == "hyperformer":
    model = MultiTaskClassifier(config, HEADS, "hyperformer", hyperformer_config=HyperFormerConfig(
        adapter_size=4, task_embedding_dim=8, projector_hidden_dim=16, projected_dim=8,
        generator_init_stddev=0.3))
  else:
    model = MultiTaskClassifier(config, HEADS, "shared", AdapterConfig(size=4, init_scale=0.5))
  model.ensure_built()
  # Heads far from zero, so that each example's pooled vector shows in its logits.
  model.head.output_weights.assign(tf.random.stateless_normal(
      model.head.output_weights.shape, [3, 4], stddev=1.0))
  return model


def _examples(task, seed):
  rng = np.random.default_rng(seed)
  examples = []
  for n in LENGTHS:
    label = rng.normal() if HEADS[task].is_regression else rng.integers(HEADS[task].num_outputs)
    examples.append(dict(
        input_ids=rng.integers(5, CONFIG["vocab_size"], n).astype(np.int32),
        segment_ids=np.array([0] * (n // 2) + [1] * (n - n // 2), np.int32),
        label=np.float32(label), task_index=np.int32(task)))
  return examples


@pytest.mark.parametrize("adapter_type,task", [("hyperformer", 1), ("hyperformer", 2),
                                               ("shared", 0)])
def test_packed_logits_loss_and_gradients_are_each_examples_own(adapter_type, task):
  model = _model(adapter_type)
  examples = _examples(task, seed=task)
  loss_fn = multitask_model.loss_fn(HEADS)
  variables = model.trainable_variables
  packed = pack_by_hand(examples, per_example=("label", "task_index"))
  labels = packed.pop("label")
  with tf.GradientTape() as tape:
    outputs = model(packed, training=False)
    loss = packing.mean_over_examples(loss_fn(labels, outputs),
                                      packed[modeling.EXAMPLE_LENGTHS])
  grads = tape.gradient(loss, variables)
  assert outputs["logits"].shape == (len(ROWS), MAX_EXAMPLES, model.max_outputs)
  with tf.GradientTape() as tape:
    alone = [model({"input_ids": e["input_ids"][None], "segment_ids": e["segment_ids"][None],
                    "input_mask": tf.ones([1, len(e["input_ids"])], tf.int32),
                    "task_index": tf.constant([task])}, training=False) for e in examples]
    expected = tf.reduce_mean(tf.concat(
        [loss_fn(tf.constant([e["label"]]), o) for e, o in zip(examples, alone)], 0))
  expected_grads = tape.gradient(expected, variables)

  for b, row in enumerate(ROWS):
    for k, i in enumerate(row):
      np.testing.assert_allclose(outputs["logits"].numpy()[b, k], alone[i]["logits"].numpy()[0],
                                 atol=1e-5, rtol=1e-5)
  # Distinct examples, distinct logits: each slot reads its own [CLS].
  assert len({round(float(o["logits"][0, 0]), 4) for o in alone}) == len(examples)
  assert float(loss) == pytest.approx(float(expected), rel=1e-5)
  compared = 0
  for v, got, want in zip(variables, grads, expected_grads):
    if want is None:
      assert got is None, v.path
      continue
    got, want = tf.convert_to_tensor(got).numpy(), tf.convert_to_tensor(want).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4, err_msg=v.path)
    compared += np.abs(want).max() > 0
  assert compared > len(variables) // 2


def test_packed_training_batches_hold_one_tasks_examples(base, tmp_path):
  """multitask.train_dataset, packed: every batch is one task's, its task ids
  that task's, and each slot an example of that task's records with its label."""
  tasks = multitask_tasks.tasks_from_flags(
      ["sst-2", "sts-b"], [os.path.join(GLUE, "SST-2"), os.path.join(GLUE, "STS-B")],
      ["sentence"], None, ["label"])
  examples = {t.name: classifier_task.read_examples(t.processor, t.data_dir, True, False, False)
              for t in tasks}
  options = startup.RunOptions(output_dir=str(tmp_path), max_seq_length=32,
                               train_batch_size=4, seed=1, pack_sequences=True)
  tokenizer = tokenization.FullTokenizer(base["vocab_file"], do_lower_case=True)
  record_files = multitask.train_records(options, tasks, examples, tokenizer)
  # Each task's (tokens, label) pairs, read back unpacked.
  known = []
  for task, path in zip(tasks, record_files):
    batches = classifier_features.make_dataset(path, 32, 64, is_training=False,
                                               drop_remainder=False,
                                               is_regression=task.is_regression)
    known.append({(tuple(ids[mask == 1]), float(label)) for features, labels in batches
                  for ids, mask, label in zip(features["input_ids"].numpy(),
                                              features["input_mask"].numpy(), labels.numpy())})
  dataset = multitask.train_dataset(options, tasks, examples, tokenizer, [0.5, 0.5],
                                        rows_per_batch=3, record_files=record_files)
  seen_tasks, num_examples = set(), 0
  for features, labels in dataset.take(12):
    task_index = features["task_index"].numpy()
    assert task_index.shape == labels.shape == (3, packing.max_examples_per_row(32))
    assert features["input_ids"].shape == (3, 32)
    task = int(task_index[0, 0])
    assert (task_index == task).all()
    seen_tasks.add(task)
    starts, lengths = (features[k].numpy() for k in (modeling.EXAMPLE_STARTS,
                                                      modeling.EXAMPLE_LENGTHS))
    num_examples += (lengths > 0).sum()
    for b, k in zip(*np.nonzero(lengths)):
      tokens = features["input_ids"].numpy()[b, starts[b, k]:starts[b, k] + lengths[b, k]]
      assert (tuple(tokens), float(labels.numpy()[b, k])) in known[task]
  assert seen_tasks == {0, 1}
  assert num_examples > 12 * 3  # More examples than rows: SST-2's short sentences share rows.
