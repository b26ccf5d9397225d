"""The small regression problem on which tests/test_optimization.py compares optimizer
steps, and tests/distributed_run.py the same steps under MirroredStrategy (the
comparison test_distribution.py makes): variables named as our model's, a batch whose
gradient norm is far above the clip norm, and one training step."""

import keras
import numpy as np
import tensorflow as tf


def scoped_variable(path, value):
  """keras.Variable whose `.path` is `path` ("a/b/c"), like our model's."""
  *scopes, name = path.split("/")
  if not scopes:
    return keras.Variable(np.asarray(value, np.float32), name=name)
  with keras.name_scope(scopes[0]):
    return scoped_variable("/".join(scopes[1:] + [name]), value)


def train_step_fn(opt, variables, x, y, global_batch):
  """Squared error summed over outputs, averaged over the global batch."""
  kernel, bias, adapter = variables
  with tf.GradientTape() as tape:
    pred = tf.matmul(x, kernel * adapter) + bias
    per_example = tf.reduce_sum(tf.square(pred - y), axis=-1)
    loss = tf.reduce_sum(per_example) / global_batch
  opt.apply_gradients(zip(tape.gradient(loss, variables), variables))


def make_variables():
  rng = np.random.default_rng(1)
  return [scoped_variable("dense/kernel", rng.normal(size=(4, 3))),
          scoped_variable("dense/bias", rng.normal(size=(3,))),
          scoped_variable("output/adapters/weights1", rng.normal(size=(4, 3)))]


def batch():
  rng = np.random.default_rng(2)
  x = rng.normal(size=(8, 4)).astype(np.float32)
  y = (10.0 * rng.normal(size=(8, 3))).astype(np.float32)  # norm >> 1: clips
  return x, y
