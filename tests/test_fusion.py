"""AdapterFusion (Pfeiffer et al., EACL 2021): the layer against its equations in
NumPy, its parameter count by hand, and the Transformer block applying it."""

import numpy as np
import pytest
import tensorflow as tf

from adapter_bert.model.adapter_layers import AdapterConfig, AdapterWeights
from adapter_bert.model.layers.fusion import AdapterFusion, FusedAdapters
from adapter_bert.model import modeling
import numpy_bert
import tiny_bert

H = 32  # tiny_bert.TINY_CONFIG's hidden size.


def _adapter_arrays(rng, size, scale=0.3):
  return {"weights1": rng.normal(0, scale, (H, size)).astype(np.float32),
          "biases1": rng.normal(0, scale, (1, size)).astype(np.float32),
          "weights2": rng.normal(0, scale, (size, H)).astype(np.float32),
          "biases2": rng.normal(0, scale, (1, H)).astype(np.float32)}


def _weights(arrays):
  return AdapterWeights(*(tf.constant(arrays[k])
                          for k in ("weights1", "biases1", "weights2", "biases2")))


def _numpy_fusion(h, adapters, q, bq, k, bk, v):
  """The paper's Sec. 3.2, written out per token: z_n the adapters' outputs
  before their residual, s = softmax(Q h . K z_n), o = h + sum_n s_n V z_n."""
  h = h.astype(np.float64)
  z = np.stack([numpy_bert.adapter(h, a, "") - h for a in adapters], axis=1)  # [t, N, H]
  out, attention = np.empty_like(h), np.empty(z.shape[:2])
  for t in range(h.shape[0]):
    scores = np.array([(h[t] @ q + bq) @ (z[t, n] @ k + bk) for n in range(z.shape[1])])
    s = np.exp(scores - scores.max())
    s /= s.sum()
    out[t] = h[t] + sum(s[n] * (z[t, n] @ v) for n in range(z.shape[1]))
    attention[t] = s
  return out, attention


def test_fusion_is_the_papers_equations():
  rng = np.random.default_rng(0)
  adapters = [_adapter_arrays(rng, m) for m in (8, 4, 16)]  # Sizes may differ.
  fusion = AdapterFusion()
  fusion.build((None, H))
  values = {"query": rng.normal(0, 0.05, (H, H)), "query_bias": rng.normal(0, 0.05, H),
            "key": rng.normal(0, 0.05, (H, H)), "key_bias": rng.normal(0, 0.05, H),
            "value": rng.normal(0, 0.2, (H, H))}
  for name, value in values.items():
    getattr(fusion, name).assign(value.astype(np.float32))
  h = rng.normal(0, 1, (2, 5, H)).astype(np.float32)
  out = fusion.fuse(tf.constant(h), tuple(_weights(a) for a in adapters))
  expected, attention = _numpy_fusion(h.reshape(-1, H), adapters, *(
      getattr(fusion, n).numpy().astype(np.float64) for n in values))
  assert out.shape == h.shape
  np.testing.assert_allclose(out.numpy().reshape(-1, H), expected, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(fusion.last_attention.numpy(), attention, rtol=1e-4, atol=1e-5)
  # Attention that is not trivially uniform or one-hot: the test tells orders apart.
  assert 0.01 < attention.min() and attention.max() < 0.9 and attention.std() > 0.05


def test_a_new_fusion_has_identity_value_and_no_regularization():
  fusion = AdapterFusion()
  fusion.build((None, H))
  np.testing.assert_array_equal(fusion.value.numpy(), np.eye(H))
  assert float(fusion.regularization()) == 0.0
  fusion.value.assign(np.eye(H, dtype=np.float32) * 0.5 + 0.25)
  # ||I - V||^2: diagonal (1 - 0.75)^2 = 1/16 each, off-diagonal 0.25^2 = 1/16 each.
  assert float(fusion.regularization()) == pytest.approx(H * H / 16)


def test_parameter_count_by_hand():
  fusion = AdapterFusion()
  fusion.build((None, H))
  # query and key [H, H] + bias [H] each, value [H, H] without bias.
  assert sum(int(np.prod(v.shape)) for v in fusion.weights) == 3 * H * H + 2 * H == 3136
  assert sorted(fusion.tf1_variable_names()) == [
      "key/bias", "key/kernel", "query/bias", "query/kernel", "value/kernel"]


def test_block_with_one_fused_adapter_is_that_adapter():
  """Softmax over one adapter is 1 and V starts as the identity: a fusion of one
  adapter computes what the block computes with that adapter given directly."""
  rng = np.random.default_rng(1)
  config = modeling.BertConfig.from_dict(tiny_bert.TINY_CONFIG)
  block = modeling.TransformerBlock(config, AdapterConfig(size=0))
  x = tf.constant(rng.normal(0, 1, (2, 3, H)).astype(np.float32))
  bias = tf.zeros([2, 1, 1, 3])
  a, b = _weights(_adapter_arrays(rng, 8)), _weights(_adapter_arrays(rng, 8))
  fusions = [AdapterFusion(), AdapterFusion()]
  for f in fusions:
    f.build((None, H))
  fused = modeling.LayerTaskWeights((FusedAdapters((a,), fusions[0]),),
                                    (FusedAdapters((b,), fusions[1]),))
  direct = modeling.LayerTaskWeights((a,), (b,))
  np.testing.assert_allclose(block(x, bias, task_weights=fused).numpy(),
                             block(x, bias, task_weights=direct).numpy(), atol=1e-5)
  assert not np.allclose(block(x, bias).numpy(), block(x, bias, task_weights=direct).numpy(),
                         atol=1e-3)


def _tiny_fusion_model(rng, num_tasks=3, regularization=0.5):
  """A FusionClassifier of the tiny config without dropout, over random adapters."""
  from adapter_bert.fusion import model as fusion_model  # pylint: disable=g-import-not-at-top
  config = modeling.BertConfig.from_dict(dict(tiny_bert.TINY_CONFIG, hidden_dropout_prob=0.0,
                                              attention_probs_dropout_prob=0.0))
  adapter_config = AdapterConfig(size=8)
  fused = []
  for t in range(num_tasks):
    arrays = {}
    for i in range(config.num_hidden_layers):
      for scope in ("attention/output", "output"):
        arrays.update({f"bert/encoder/layer_{i}/{scope}/adapters/{k}": v
                       for k, v in _adapter_arrays(rng, 8).items()})
    fused.append(fusion_model.FusedTask(f"task{t}", arrays))
  model = fusion_model.FusionClassifier(config, 2, adapter_config, fused, regularization)
  model.ensure_built()
  model.head.dropout.rate = 0.0
  return model


def test_training_loss_adds_the_regularization_once_per_batch():
  """loop's train step: the mean cross-entropy plus regularization * sum ||I - V||^2."""
  import keras  # pylint: disable=g-import-not-at-top
  import scipy.special  # pylint: disable=g-import-not-at-top
  from adapter_bert.classification import task as classifier_task  # pylint: disable=g-import-not-at-top
  from adapter_bert.runtime import loop  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(2)
  model = _tiny_fusion_model(rng)
  values = []
  for fusion in model.fusion_layers:
    fusion.value.assign(np.eye(H, dtype=np.float32) + rng.normal(0, 0.05, (H, H)).astype(
        np.float32))
    values.append(fusion.value.numpy().astype(np.float64))
  features = {"input_ids": tf.constant(rng.integers(5, 99, (4, 6)), tf.int32),
              "input_mask": tf.ones([4, 6], tf.int32), "segment_ids": tf.zeros([4, 6], tf.int32)}
  labels = tf.constant([0, 1, 1, 0])
  logits = model(features, training=False).numpy().astype(np.float64)
  cross_entropy = -scipy.special.log_softmax(logits, axis=-1)[np.arange(4), labels.numpy()]
  regularization = 0.5 * sum(((np.eye(H) - v) ** 2).sum() for v in values)
  assert regularization > 0.1  # Not lost in the tolerance below.
  optimizer = keras.optimizers.SGD(0.0)
  optimizer.build(model.trainable_variables)
  step = loop.make_train_step(model, classifier_task.loss_fn(False), optimizer, 4)
  loss = float(step(features, labels))
  assert loss == pytest.approx(cross_entropy.mean() + regularization, rel=1e-5)


def test_per_example_fusion_is_each_examples_own_over_its_own_adapters():
  """FusionWeights (a multi-task SavedModel's): example b fuses the adapters its mask
  keeps, with its own query, key and value; NumPy per example, over those alone."""
  from adapter_bert.model.layers.fusion import FusionWeights  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(3)
  adapters = [_adapter_arrays(rng, m) for m in (8, 4, 16)]
  batch, seq = 3, 4
  weights = {"query": rng.normal(0, 0.05, (batch, H, H)),
             "query_bias": rng.normal(0, 0.05, (batch, H)),
             "key": rng.normal(0, 0.05, (batch, H, H)),
             "key_bias": rng.normal(0, 0.05, (batch, H)),
             "value": rng.normal(0, 0.2, (batch, H, H))}
  mask = np.array([[1, 1, 1], [1, 0, 1], [0, 1, 0]], np.float32)
  h = rng.normal(0, 1, (batch * seq, H)).astype(np.float32)
  fusion = FusionWeights(tuple(_weights(a) for a in adapters),
                         **{k: tf.constant(v, tf.float32) for k, v in weights.items()},
                         mask=tf.constant(mask))
  out = fusion(tf.constant(h), "gelu", batch).numpy()
  for b in range(batch):
    kept = [a for a, m in zip(adapters, mask[b]) if m]
    expected, _ = _numpy_fusion(h[b * seq:(b + 1) * seq], kept, *(
        weights[n][b].astype(np.float32).astype(np.float64) for n in weights))
    np.testing.assert_allclose(out[b * seq:(b + 1) * seq], expected, rtol=1e-4, atol=1e-4)
  # Query, key and value 0 (a SavedModel's task without fusion there): exactly the input.
  zeros = fusion._replace(**{k: tf.zeros_like(getattr(fusion, k)) for k in weights})
  np.testing.assert_array_equal(zeros(tf.constant(h), "gelu", batch).numpy(), h)


def test_fusion_model_under_mixed_precision_computes_what_float32_does():
  """bfloat16 compute (--mixed_precision): the fusion casts its float32 variables and
  the fused adapters to the tokens' dtype; logits within bfloat16's precision."""
  from adapter_bert.runtime import model_setup  # pylint: disable=g-import-not-at-top
  model_setup.set_seed(4)
  full = _tiny_fusion_model(np.random.default_rng(4))
  with model_setup.dtype_policy("bfloat16"):
    mixed = _tiny_fusion_model(np.random.default_rng(4))
  names = mixed.tf1_variable_map()
  for name, variable in full.tf1_variable_map().items():
    names[name].assign(variable)
  features = {"input_ids": tf.constant(np.random.default_rng(5).integers(5, 99, (2, 7)),
                                       tf.int32),
              "input_mask": tf.ones([2, 7], tf.int32), "segment_ids": tf.zeros([2, 7], tf.int32)}
  expected = full(features).numpy()
  got = mixed(features)
  assert got.dtype == tf.float32
  error = np.abs(got.numpy() - expected).max()
  assert error < 5e-4
  # Far within what the fusion changes: without it the logits are 5x further off.
  for block in mixed.bert.transformer_layers:
    block.adapters_enabled = False
  assert np.abs(mixed(features).numpy() - expected).max() > 5 * error
