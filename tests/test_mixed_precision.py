"""--mixed_precision: 16-bit compute with float32 weights, float16 with loss scaling.

The reference is the float32 model with the same weights: outputs must agree
to the 16-bit formats' precision (bfloat16 keeps 8 significant bits, float16
11), training must reach the same losses to within that noise, and the
checkpoints must be the float32 run's (same variables, float32), so that a run
can resume or be evaluated in either precision.
"""


import keras
import numpy as np
import pytest
import tensorflow as tf

from scipy import special

from adapter_bert.model.activations import get_activation
from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.checkpoints import run_checkpoints
from adapter_bert.model import modeling
from adapter_bert.model.layers import ops as modeling_ops
from adapter_bert.runtime import distribution
from adapter_bert.runtime import loop
from adapter_bert.runtime import model_setup
from adapter_bert.runtime import trainable
import numpy_bert

CONFIG = modeling.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=4, intermediate_size=37,
                             max_position_embeddings=64, hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0)
BATCH, SEQ, LABELS = 16, 12, 2


def _model(mixed_precision, reference=None, adapter_config=AdapterConfig(size=8)):
  with model_setup.dtype_policy(mixed_precision):
    model = modeling.BertClassifier(CONFIG, LABELS, adapter_config)
    model.ensure_built()
  if reference is not None:
    for mine, theirs in zip(model.weights, reference.weights):
      mine.assign(theirs)
  return model


def _inputs(seed, n=BATCH):
  rng = np.random.RandomState(seed)
  ids = rng.randint(5, 99, size=(n, SEQ)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[: n // 2, SEQ // 2:] = 0  # Half the rows padded: the attention bias matters.
  return {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}


@pytest.fixture(scope="module")
def reference():
  keras.utils.set_random_seed(3)
  return _model("none")


# Largest |difference| over the largest |logit|: a few units in the last kept
# bit of each format, accumulated over two layers.
@pytest.mark.parametrize("mixed_precision,tolerance", [("bfloat16", 3e-2),
                                                        ("float16", 4e-3)])
def test_outputs_match_float32_to_16_bit_precision(reference, mixed_precision, tolerance):
  model = _model(mixed_precision, reference)
  assert model.dtype_policy.name == model_setup.DTYPE_POLICIES[mixed_precision]
  assert {v.dtype for v in model.weights} == {"float32"}  # Checkpoints stay float32.
  inputs = _inputs(0)
  expected = reference(inputs).numpy()
  logits = model(inputs)
  assert logits.dtype == tf.float32  # The loss and metrics see float32.
  error = np.abs(logits.numpy() - expected).max() / np.abs(expected).max()
  assert error < tolerance
  # Not the float32 computation under another name.
  assert error > 1e-6
  sequence = model.bert(inputs)["sequence_output"]
  assert sequence.dtype == tf.as_dtype(mixed_precision)
  assert keras.config.dtype_policy().name == "float32"  # The policy was restored.


@pytest.mark.parametrize("design", ["pfeiffer", "parallel", "lora"])
def test_each_adapter_design_in_bfloat16_matches_float32(design):
  keras.utils.set_random_seed(3)
  config = AdapterConfig(size=8, init_scale=0.5, design=design)
  reference = _model("none", adapter_config=config)
  for v in reference.weights:  # LoRA's B starts at 0: made to count.
    if "lora_b" in v.path:
      v.assign(np.random.RandomState(0).normal(0, 0.5, v.shape))
  inputs = _inputs(0)
  expected = reference(inputs).numpy()
  logits = _model("bfloat16", reference, config)(inputs).numpy()
  error = np.abs(logits - expected).max() / np.abs(expected).max()
  assert 1e-6 < error < 3e-2
  plain = _model("none", adapter_config=AdapterConfig(size=0))
  for mine, theirs in zip(plain.weights, [w for w in reference.weights
                                          if "adapters" not in w.path and "lora" not in w.path]):
    mine.assign(theirs)
  assert np.abs(plain(inputs).numpy() - expected).max() > 10 * np.abs(logits - expected).max()


def _examples(seed, n):
  """Label 1 iff the first token is 7: learnable in a few dozen steps."""
  rng = np.random.RandomState(seed)
  ids = rng.randint(8, 99, size=(n, SEQ)).astype(np.int32)
  labels = rng.randint(0, 2, size=n).astype(np.int32)
  ids[labels == 1, 0] = 7  # At the pooled position: a short path to the head.
  features = {"input_ids": ids, "input_mask": np.ones_like(ids),
              "segment_ids": np.zeros_like(ids)}
  return features, labels


def _dataset():
  return tf.data.Dataset.from_tensor_slices(_examples(1, 256)).repeat().batch(
      BATCH, drop_remainder=True)


def _train(model, output_dir, steps=16):
  trainable.set_trainable(model, trainable.TrainMode.parse("adapters"))
  settings = loop.TrainSettings(output_dir=output_dir, train_batch_size=BATCH,
                                num_train_steps=steps, num_warmup_steps=4,
                                learning_rate=1e-2, save_checkpoints_steps=steps,
                                iterations_per_loop=8)
  def loss(labels, logits):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
  return loop.train(distribution.create_strategy(), model, loss, _dataset(), settings)


@pytest.fixture(scope="module")
def trained(reference, tmp_path_factory):
  """The reference trained 16 steps in each precision (_train): per precision its
  final loss and step, its checkpoint's variables, held-out accuracy, the trained
  layer-0 attention adapter's weights1, the model and its output_dir."""
  keras.utils.set_random_seed(5)
  features, labels = _examples(2, 128)  # Held out.
  runs = {}
  for mixed_precision in ("none", "float16", "bfloat16"):
    model = _model(mixed_precision, reference)
    out = str(tmp_path_factory.mktemp("trained") / mixed_precision)
    result = _train(model, out)
    ckpt = run_checkpoints.latest(out)
    runs[mixed_precision] = dict(
        loss=result["loss"], step=result["global_step"],
        variables=dict(tf.train.list_variables(ckpt)),
        accuracy=float(np.mean(np.argmax(model(features).numpy(), -1) == labels)),
        trained=model.get_layer("bert").get_layer("layer_0").attention_adapters.weights1.numpy(),
        model=model, output_dir=out)
  return runs


def test_float16_training_scales_the_loss_and_matches_float32(reference, trained):
  runs = trained
  f32 = runs["none"]
  assert f32["step"] == 16
  assert f32["loss"] < 0.5  # Learning: chance is ln 2 = 0.69.
  assert f32["accuracy"] > 0.85
  for mixed_precision in ("float16", "bfloat16"):
    run = runs[mixed_precision]
    assert run["step"] == 16  # No step lost to a skipped (overflowing) update.
    assert abs(run["loss"] - f32["loss"]) < 0.05, (mixed_precision, run["loss"], f32["loss"])
    assert abs(run["accuracy"] - f32["accuracy"]) <= 0.05, (mixed_precision, run, f32)
    # The same checkpoint: same variables, same shapes, no loss-scale state.
    assert run["variables"] == f32["variables"]
    assert not any("loss_scale" in name or "dynamic_scale" in name
                   for name in run["variables"])
    # Training moved the adapters about as far as in float32.
    moved = np.abs(run["trained"] - reference.get_layer("bert").get_layer(
        "layer_0").attention_adapters.weights1.numpy()).max()
    assert moved > 1e-3


def test_float16_checkpoint_evaluates_in_float32(trained):
  """The float16 run of `trained`: its checkpoint restored into a float32 model."""
  model, out = trained["float16"]["model"], trained["float16"]["output_dir"]
  restored = _model("none")
  run_checkpoints.restore(restored, out)
  inputs = _inputs(2)
  np.testing.assert_allclose(restored(inputs).numpy(), model(inputs).numpy(), atol=5e-3)
  for mine, theirs in zip(restored.weights, model.weights):
    np.testing.assert_array_equal(mine.numpy(), theirs.numpy())


def _gelu_derivative(name, x):
  """d gelu / dx in float64, by hand."""
  if name == "gelu_erf":
    return 0.5 * (1 + special.erf(x / np.sqrt(2))) + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi)
  c = np.sqrt(2 / np.pi)
  t = np.tanh(c * (x + 0.044715 * x ** 3))
  return 0.5 * (1 + t) + 0.5 * x * (1 - t ** 2) * c * (1 + 3 * 0.044715 * x ** 2)


@pytest.mark.parametrize("name", ["gelu", "gelu_erf"])
@pytest.mark.parametrize("rows", [3, 2048])  # Below and above activations._FUSE_FROM_ELEMENTS.
@pytest.mark.parametrize("dtype,bits", [(tf.bfloat16, 8), (tf.float16, 11)])
def test_16_bit_gelus_are_rounded_once_from_float32(name, rows, dtype, bits):
  """A 16-bit GELU and its derivative are within half a unit in the last place of
  the exact values, as the float32 formula rounded once is. The formula run in 16
  bits, its roundings adding up, is not (seen failing every case here)."""
  x = np.linspace(-6.0, 6.0, rows * 512).reshape(rows, 512)
  x16 = tf.cast(tf.constant(x, tf.float32), dtype)
  x = tf.cast(x16, tf.float64).numpy()  # The inputs the 16-bit function sees, exactly.
  gelu = get_activation(name)

  @tf.function
  def value_and_derivative(x):
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = gelu(x)
    return y, tape.gradient(y, x)  # dy = 1: the derivative itself.

  y, dy_dx = value_and_derivative(x16)
  assert y.dtype == dy_dx.dtype == dtype
  exact = {"gelu": numpy_bert.gelu, "gelu_erf": numpy_bert.gelu_erf}[name](x)
  for got, want in ((y, exact), (dy_dx, _gelu_derivative(name, x))):
    error = np.abs(tf.cast(got, tf.float64).numpy() - want)
    # Half a unit in the last of `bits` significant bits, plus the float32 formula's
    # own error (below 1e-5: where tanh rounds to -1, test_modeling_ops says).
    np.testing.assert_array_less(error, np.abs(want) * 2.0 ** -bits * 1.001 + 1e-5)


@pytest.mark.parametrize("rows", [3, 256])  # Below and at ops._FUSE_FROM_ELEMENTS (2^16).
@pytest.mark.parametrize("dtype,bits", [(tf.bfloat16, 8), (tf.float16, 11)])
def test_16_bit_layer_norms_are_rounded_once_from_float32(rows, dtype, bits):
  """A 16-bit LayerNorm's output and input gradient are within half a unit in the last
  place of the exact values (float64, by hand), gamma's and beta's gradients within
  float32 rounding, on both paths: the op-by-op one, and two XLA kernels (forward and
  backward) for a large static shape, which the traced graph must call."""
  rng = np.random.default_rng(rows)
  width = 256
  x16 = tf.cast(tf.constant(rng.normal(1.0, 3.0, (rows, width)), tf.float32), dtype)
  dy16 = tf.cast(tf.constant(rng.normal(size=(rows, width)), tf.float32), dtype)
  x, dy = (tf.cast(t, tf.float64).numpy() for t in (x16, dy16))  # Exactly what it sees.
  layer = modeling.LayerNorm(epsilon=1e-12, dtype=f"mixed_{dtype.name}")
  layer.build((None, width))
  gamma, beta = rng.normal(size=width), rng.normal(size=width)
  layer.gamma.assign(gamma)
  layer.beta.assign(beta)
  gamma, beta = layer.gamma.numpy().astype(np.float64), layer.beta.numpy().astype(np.float64)

  @tf.function
  def outputs_and_gradients(x, dy):
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = layer(x)
    return [y] + tape.gradient(y, [x, layer.gamma, layer.beta], dy)

  y, dx, dgamma, dbeta = outputs_and_gradients(x16, dy16)
  assert y.dtype == dx.dtype == dtype and dgamma.dtype == dbeta.dtype == tf.float32
  library = outputs_and_gradients.get_concrete_function(x16, dy16).graph.as_graph_def().library
  kernels = {f.signature.name.split("_layer_norm_")[-1].split("_")[0]
             for f in library.function if "_layer_norm_" in f.signature.name}
  assert kernels == ({"forward", "backward"} if rows * width >= 2 ** 16 else set())

  mean = x.mean(-1, keepdims=True)
  scale = 1.0 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-12)
  normalized = (x - mean) * scale
  g = dy * gamma
  exact_dx = scale * (g - g.mean(-1, keepdims=True)
                      - normalized * (g * normalized).mean(-1, keepdims=True))
  for got, want in ((y, numpy_bert.layer_norm(x, gamma, beta)), (dx, exact_dx)):
    error = np.abs(tf.cast(got, tf.float64).numpy() - want)
    # Half a unit in the last of `bits` significant bits, plus float32's own error.
    np.testing.assert_array_less(
        error, np.abs(want) * 2.0 ** -bits * 1.001 + 1e-5 * np.abs(want).max())
  np.testing.assert_allclose(dgamma.numpy(), (dy * normalized).sum(0), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(dbeta.numpy(), dy.sum(0), rtol=1e-5, atol=1e-4)


def _ops_run(dtype, product):
  """The op types TensorFlow runs for `product(x, kernel)` + a bias add in `dtype`,
  after its graph rewrites (a TF1 session's partition graphs show them)."""
  graph = tf.Graph()
  with graph.as_default():
    x, kernel, bias = (tf.compat.v1.placeholder(tf.float32, s) for s in ([64, 32], [32, 16], [16]))
    y = tf.nn.bias_add(product(tf.cast(x, dtype), tf.cast(kernel, dtype)), tf.cast(bias, dtype))
    meta = tf.compat.v1.RunMetadata()
    with tf.compat.v1.Session(graph=graph) as session:
      session.run(y, {x: np.ones([64, 32]), kernel: np.ones([32, 16]), bias: np.ones([16])},
                  options=tf.compat.v1.RunOptions(output_partition_graphs=True),
                  run_metadata=meta)
  return {node.op for partition in meta.partition_graphs for node in partition.node}


def test_bfloat16_token_products_run_apart_from_their_bias_add():
  """TensorFlow's oneDNN rewrite fuses MatMul + BiasAdd into an inner product,
  which oneDNN runs without AMX in bfloat16 (ops.token_matmul); TokenDense and the
  adapters' products in bfloat16 must stay a product of their own, float32 fused."""
  fused = lambda ops_run: {op for op in ops_run if "FusedMatMul" in op}
  if not fused(_ops_run(tf.float32, tf.matmul)):
    pytest.skip("this TensorFlow build does not fuse MatMul + BiasAdd (no oneDNN)")
  assert fused(_ops_run(tf.float32, modeling_ops.token_matmul))
  assert not fused(_ops_run(tf.bfloat16, modeling_ops.token_matmul))
  for policy, product in (("float32", "MatMul"), ("mixed_bfloat16", "BatchMatMulV2")):
    layer = modeling.TokenDense(16, dtype=policy)
    traced = tf.function(layer).get_concrete_function(tf.TensorSpec([None, 32], tf.float32))
    assert product in {op.type for op in traced.graph.get_operations()}, policy


@pytest.mark.parametrize("dtype,bits", [(tf.bfloat16, 8), (tf.float16, 11)])
def test_16_bit_attention_keeps_its_probabilities_and_matches_float32(dtype, bits):
  """A 16-bit attention's output and gradients agree with float32's (the same
  mask: the same seed) to the 16-bit format's precision, and its backward pass
  reads the probabilities kept from the forward pass (one softmax in the traced
  step) where float32 computes them again (two)."""
  rng = np.random.default_rng(3)
  q, k, v, dy = (tf.constant(rng.normal(size=(2, 3, 6, 4)), tf.float32) for _ in range(4))
  bias = np.zeros((2, 1, 1, 6), np.float32)
  bias[1, ..., 4:] = -10000.0

  def run(dtype):
    dropout = modeling.Dropout(0.3, seed=7)

    @tf.function
    def step(q, k, v, dy):
      with tf.GradientTape() as tape:
        tape.watch([q, k, v])
        y = modeling_ops.attention(*(tf.cast(t, dtype) for t in (q, k, v)),
                                   tf.constant(bias), dropout, training=True)
        y = tf.cast(y, tf.float32)
      return [y] + tape.gradient(y, [q, k, v], dy)

    graph = step.get_concrete_function(q, k, v, dy).graph
    softmaxes = sum(op.type == "Softmax" for op in graph.get_operations())
    return [t.numpy() for t in step(q, k, v, dy)], softmaxes

  (want, float32_softmaxes), (got, softmaxes) = run(tf.float32), run(dtype)
  assert (float32_softmaxes, softmaxes) == (2, 1)
  for g, w in zip(got, want):  # Rounded inputs, products and probabilities: a few units.
    np.testing.assert_allclose(g, w, rtol=0, atol=8 * 2.0 ** -bits * np.abs(w).max())
