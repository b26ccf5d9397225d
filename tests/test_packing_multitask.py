"""Packed batches of the multi-task model (--pack_sequences): one task's examples
per batch, so the task ids follow the examples; each example's logits, loss and
gradients are those it has alone, unpadded (test_packing_squad's reference).
"""

import numpy as np
import pytest
import tensorflow as tf

from adapter_layers import AdapterConfig
import modeling
from adapter_bert.multitask import model as multitask_model
from adapter_bert.multitask.hypernetwork import HyperFormerConfig
from adapter_bert.multitask.model import MultiTaskClassifier, TaskHead
from adapter_bert.runtime import packing
from test_packing_squad import CONFIG, LENGTHS, MAX_EXAMPLES, ROWS, pack_by_hand

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
