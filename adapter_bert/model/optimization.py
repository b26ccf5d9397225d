"""BERT's optimizer for Keras 3: AdamWeightDecay with warmup + linear decay.

Reproduces `optimization.py` of google-research/bert and google-research/
adapter-bert (TF1): Adam *without* bias correction, decoupled weight decay with
a name-based exclusion list and a separate rate for adapter weights, gradients
clipped by global norm 1.0, and a learning rate that warms up linearly and then
decays linearly to 0 at `num_train_steps`.

`keras.optimizers.AdamW` is not a substitute: it bias-corrects m and v and has a
single decay rate. Without bias correction the first updates are larger than
Adam's (m / sqrt(v) starts at (1 - 0.9) / sqrt(1 - 0.999) = 3.2 times Adam's),
which at adapter learning rates of 1e-3 can drive training to chance level; the
opt-in `OPTIMIZERS["adamw"]` is the same optimizer with Adam's bias correction
(PyTorch's AdamW, which AdapterHub and PEFT train with).
"""

import re

import keras
import tensorflow as tf
from keras import ops

from adapter_bert.model.serialization import KERAS_PACKAGE as _PACKAGE

# --optimizer: the original's Adam (the default), or with Adam's bias correction.
OPTIMIZERS = {"bert": False, "adamw": True}  # Name -> bias_correction.

# The original create_optimizer's exclusion list, searched (re.search) in names.
DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")


@keras.saving.register_keras_serializable(package=_PACKAGE)
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
  """Linear warmup from 0, then linear decay to 0, as the original BERT.

  For integer step s, warmup W and total T (all evaluated in float32):
    s <  W: init_lr * (s / W)
    s >= W: init_lr * (1 - min(s, T) / T)
  The decay is `tf.train.polynomial_decay(power=1.0, end_learning_rate=0.0)` on
  the *global* step (it does not restart after warmup), so the rate drops from
  init_lr * (W - 1) / W at s = W - 1 to init_lr * (1 - W / T) at s = W. With
  W = 0 there is no warmup. Keras evaluates the schedule at
  `optimizer.iterations` before incrementing it, like the original's
  global_step, so the first update (s = 0) has learning rate 0.
  """

  def __init__(self, init_lr, num_train_steps, num_warmup_steps=0):
    if num_train_steps <= 0:
      raise ValueError(f"num_train_steps must be > 0, got {num_train_steps}")
    if num_warmup_steps < 0:
      raise ValueError(
          f"num_warmup_steps must be >= 0, got {num_warmup_steps}")
    self.init_lr = float(init_lr)
    self.num_train_steps = int(num_train_steps)
    self.num_warmup_steps = int(num_warmup_steps)

  def __call__(self, step):
    """step: int scalar Tensor (optimizer.iterations) -> float32 scalar."""
    step = ops.cast(step, "float32")
    total = float(self.num_train_steps)
    decayed = self.init_lr * (1.0 - ops.minimum(step, total) / total)
    if not self.num_warmup_steps:
      return decayed
    warmup = float(self.num_warmup_steps)
    return ops.where(step < warmup, self.init_lr * (step / warmup), decayed)

  def get_config(self):
    return {"init_lr": self.init_lr,
            "num_train_steps": self.num_train_steps,
            "num_warmup_steps": self.num_warmup_steps}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class AdamWeightDecay(keras.optimizers.Optimizer):
  """BERT's AdamWeightDecayOptimizer (adapter-bert variant), Keras 3 / TF.

  Per variable p with gradient g (after global-norm clipping):
    m = beta_1 * m + (1 - beta_1) * g
    v = beta_2 * v + (1 - beta_2) * g^2
    p = p - lr * (m / (sqrt(v) + epsilon) + rate * p)
  with no bias correction (the original's). With `bias_correction`, at the t-th
  update (t = 1, 2, ...) m and v in the update are m / (1 - beta_1^t) and
  v / (1 - beta_2^t), as Adam and PyTorch's AdamW (whose decoupled decay
  p * (1 - lr * rate) is the same step). `rate` is `adapter_weight_decay_rate` when the
  variable's name matches `adapter_pattern`, else `weight_decay_rate`; it is 0
  when any `exclude_from_weight_decay` regex matches the name (so adapter
  biases "biases1/2" are not decayed, as in adapter-bert). The name is
  `variable.path` (a Keras 3 path, e.g. "bert/layer_0/output/adapters/
  weights1"), falling back to `variable.name` without ":0".

  Gradients are clipped by global norm `global_clipnorm` *after* the
  cross-replica sum, so under any tf.distribute strategy the clip sees the
  gradient of the whole global batch (Keras' own `global_clipnorm` clips each
  replica's partial gradient before the sum). Slots "adam_m"/"adam_v" exist
  only for the variables the optimizer is built with; build it inside the
  strategy scope before the first distributed step.

  Args:
    learning_rate: float, or a LearningRateSchedule (see `create_optimizer`).
    weight_decay_rate: float, decay for non-adapter, non-excluded variables.
    adapter_weight_decay_rate: float, decay for adapter variables.
    beta_1, beta_2, epsilon: Adam constants (BERT: 0.9, 0.999, 1e-6).
    exclude_from_weight_decay: sequence of regexes; a match means no decay.
    adapter_pattern: regex that marks adapter variables (adapter-bert used
      the "adapters" collection; our variables have "adapters" in the path).
    global_clipnorm: float or None; None disables clipping.
    bias_correction: Adam's bias correction of m and v (the original: none).
    task_row_variables: names (as matched above) of variables whose first
      axis is a task (multi-task heads, task embeddings): a row whose gradient
      is all zero (its task was not in the batch) keeps its value and its
      moments, as PyTorch's optimizers skip a per-task parameter that got no
      gradient in a step. Keras has no such lazy update, hence this one.
  """

  def __init__(self,
               learning_rate,
               weight_decay_rate=0.01,
               adapter_weight_decay_rate=0.01,
               beta_1=0.9,
               beta_2=0.999,
               epsilon=1e-6,
               exclude_from_weight_decay=DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
               adapter_pattern="adapters",
               global_clipnorm=1.0,
               task_row_variables=(),
               bias_correction=False,
               name="AdamWeightDecay",
               **kwargs):
    # Keras' per-tensor clipping and its own (single-rate) weight decay would
    # silently diverge from BERT; from_config passes them back as None.
    for key in ("clipnorm", "clipvalue", "weight_decay"):
      if kwargs.pop(key, None) is not None:
        raise ValueError(f"AdamWeightDecay does not support `{key}`; use "
                         "global_clipnorm / weight_decay_rate.")
    super().__init__(learning_rate=learning_rate,
                     global_clipnorm=global_clipnorm, name=name, **kwargs)
    self.weight_decay_rate = float(weight_decay_rate)
    self.adapter_weight_decay_rate = float(adapter_weight_decay_rate)
    self.beta_1 = float(beta_1)
    self.beta_2 = float(beta_2)
    self.epsilon = float(epsilon)
    # Not `self.exclude_from_weight_decay`: that would shadow a base method.
    self._exclude_patterns = tuple(exclude_from_weight_decay or ())
    self.adapter_pattern = adapter_pattern
    self.task_row_variables = tuple(task_row_variables)
    self.bias_correction = bool(bias_correction)

  def decay_rate_for(self, name):
    """Weight decay rate (float) for a variable name, as the original chose."""
    if self.adapter_pattern and re.search(self.adapter_pattern, name):
      rate = self.adapter_weight_decay_rate
    else:
      rate = self.weight_decay_rate
    if not rate or any(re.search(r, name) for r in self._exclude_patterns):
      return 0.0
    return rate

  def build(self, var_list):
    """Creates "adam_m"/"adam_v" (zeros, like var) for each var in var_list."""
    if self.built:
      return
    super().build(var_list)
    # Slot names follow the original checkpoints' "<var>/adam_m", "<var>/adam_v"
    # (Keras names them "<path with _>_adam_m"), which eases name mapping.
    self._adam_m, self._adam_v = self.add_optimizer_variables(
        var_list, ["adam_m", "adam_v"])
    # Decided once here, from the Keras variables: inside update_step under a
    # strategy the variable is a per-replica component with another name.
    self._decay_rates = [self.decay_rate_for(variable_name(v))
                         for v in var_list]
    self._task_rows = [variable_name(v) in self.task_row_variables for v in var_list]

  def _clip_gradients(self, grads):
    # The base class would clip here, per replica, before aggregation; we clip
    # in _all_reduce_sum_gradients instead, after it.
    return grads

  def _all_reduce_sum_gradients(self, grads_and_vars):
    """Sums gradients across replicas (TF backend), then clips by global norm.

    In replica context every replica holds the same summed gradients, so each
    computes the same clip; outside replica context nothing is summed.
    """
    grads_and_vars = super()._all_reduce_sum_gradients(grads_and_vars)
    if not self.global_clipnorm:
      return grads_and_vars
    # tf.clip_by_global_norm is what the original called; it skips None,
    # keeps IndexedSlices and yields NaN for a non-finite norm.
    clipped, _ = tf.clip_by_global_norm([g for g, _ in grads_and_vars],
                                        self.global_clipnorm)
    return [(g, v) for g, (_, v) in zip(clipped, grads_and_vars)]

  def update_step(self, gradient, variable, learning_rate):
    """One BERT Adam step for `variable` (any shape) with `gradient` (same)."""
    index = self._get_variable_index(variable)
    dtype = variable.dtype
    lr = ops.cast(learning_rate, dtype)
    # IndexedSlices -> dense: the original's m/v update decays every row.
    grad = ops.cast(tf.convert_to_tensor(gradient), dtype)
    m, v = self._adam_m[index], self._adam_v[index]
    # Same expression order as the original, for identical float32 rounding.
    next_m = self.beta_1 * m + (1.0 - self.beta_1) * grad
    next_v = self.beta_2 * v + (1.0 - self.beta_2) * ops.square(grad)
    if self.bias_correction:
      t = ops.cast(self.iterations + 1, dtype)
      update = ((next_m / (1.0 - ops.power(ops.cast(self.beta_1, dtype), t)))
                / (ops.sqrt(next_v / (1.0 - ops.power(ops.cast(self.beta_2, dtype), t)))
                   + self.epsilon))
    else:
      update = next_m / (ops.sqrt(next_v) + self.epsilon)
    rate = self._decay_rates[index]
    if rate:
      update += rate * variable
    if self._task_rows[index]:  # Rows of tasks not in the batch stay as they are.
      axes = list(range(1, len(variable.shape)))
      touched = ops.any(ops.not_equal(grad, 0.0), axis=axes, keepdims=True)
      next_m = ops.where(touched, next_m, m)
      next_v = ops.where(touched, next_v, v)
      update = ops.where(touched, update, 0.0)
    self.assign(m, next_m)
    self.assign(v, next_v)
    self.assign_sub(variable, lr * update)

  def get_config(self):
    config = super().get_config()
    config.update({
        "weight_decay_rate": self.weight_decay_rate,
        "adapter_weight_decay_rate": self.adapter_weight_decay_rate,
        "beta_1": self.beta_1,
        "beta_2": self.beta_2,
        "epsilon": self.epsilon,
        "exclude_from_weight_decay": list(self._exclude_patterns),
        "adapter_pattern": self.adapter_pattern,
        "task_row_variables": list(self.task_row_variables),
        "bias_correction": self.bias_correction,
    })
    return config


def variable_name(variable):
  """Keras path if present, else the TF name without the ":0" suffix."""
  name = getattr(variable, "path", None) or variable.name
  return re.sub(r":\d+$", "", name)


def create_optimizer(init_lr, num_train_steps, num_warmup_steps,
                     weight_decay_rate=0.01, adapter_weight_decay_rate=0.01,
                     task_row_variables=(), optimizer="bert"):
  """The original create_optimizer's optimizer (without the train op).

  Args:
    init_lr: float, peak learning rate.
    num_train_steps: int > 0, step at which the learning rate reaches 0.
    num_warmup_steps: int >= 0, linear warmup steps (0: none).
    weight_decay_rate, adapter_weight_decay_rate: floats (original: 0.01).
    task_row_variables: see AdamWeightDecay (multi-task models only).
    optimizer: a name of OPTIMIZERS: "bert" (the original's), "adamw" (with
      Adam's bias correction).

  Returns:
    AdamWeightDecay with a WarmupLinearDecay schedule, beta_1 0.9, beta_2
    0.999, epsilon 1e-6, exclusions LayerNorm/layer_norm/bias and global
    norm clipping 1.0. `optimizer.iterations` plays the original global_step.
  """
  schedule = WarmupLinearDecay(init_lr, num_train_steps, num_warmup_steps)
  return AdamWeightDecay(
      learning_rate=schedule,
      weight_decay_rate=weight_decay_rate,
      adapter_weight_decay_rate=adapter_weight_decay_rate,
      beta_1=0.9,
      beta_2=0.999,
      epsilon=1e-6,
      exclude_from_weight_decay=DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
      global_clipnorm=1.0,
      task_row_variables=task_row_variables,
      bias_correction=OPTIMIZERS[optimizer])
