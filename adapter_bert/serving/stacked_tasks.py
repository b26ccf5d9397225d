"""One frozen BERT encoder, every task's adapters, LayerNorms and head at once.

Each task of a bank trained its own adapters, LayerNorms (gamma and beta of
every one, the embeddings' included) and classifier head on the same frozen
encoder; a task of a multi-task run (run_multitask.py) has its own head and
its HyperFormer++ adapters, generated once at export, or the run's shared
ones. The encoder is the project's own, modeling.BertEncoder, loaded with the
base weights and no adapters of its own. What a task adds is what its own
model (a modeling.BertClassifier of the task's adapter config, given the
task's arrays through the model's one table of TF1 names) would pass to
that encoder's call as `task_weights` (BertEncoder.own_task_weights). Those
are stacked along a leading task axis, and every example of a batch gathers
its own task's slice: the encoder's call takes weights with a batch axis, so
one batch of fixed shape mixes tasks in any order, with no splitting into
per-task sub-batches and no shapes that depend on the data (the same graph
runs on CPU, GPU and TPU, and compiles with XLA).

Stacking is exact: at each place of a layer, each design that some task has
there stacks its tasks' weights (adapter_layers.Design.stack), in turn:
  * adapters of different sizes (LoRA: ranks) are zero-padded to the largest:
    the padded bottleneck units get 0 in, act(0) = 0 out for every adapter
    activation (gelu, relu, tanh, linear), and their rows of weights2 are 0;
  * a task without adapters (--train_mode=layer_norm), without one of a
    layer's two (--adapter_placement=attention or feed_forward), or with
    another design's, gets all-zero weights there, which add exactly 0 (each
    design reads the sub-layer's output as it came, whatever the others
    added); weights no task has are left out;
  * an adapter with its own LayerNorm (HyperFormer++'s) and one without
    (Houlsby's) are two adapters in turn at that place, each task's other
    one all zeros: gamma = beta = 0 makes the normalized one add exactly 0;
  * heads are zero-padded to the widest; the caller masks the padded logits;
  * a LayerNorm a task did not train keeps the base's values.
"""

import types
from typing import List, Mapping, Sequence

import numpy as np
import tensorflow as tf

from adapter_bert.model import adapter_layers
from adapter_bert.model.adapter_layers import AdapterConfig
from adapter_bert.checkpoints import checkpoint_io
from adapter_bert import errors
from adapter_bert.fusion import serving as fusion_serving
from adapter_bert.model.layers.head import classifier_logits
from adapter_bert.model import modeling

class StackedTasksBert(tf.Module):
  """BertClassifier for many tasks at once (see the module docstring).

  Call arguments:
    inputs: dict of int32 Tensors [batch_size, seq_length], "input_ids",
      "input_mask", "segment_ids", as for modeling.BertEncoder.
    task_index: int32 Tensor [batch_size], each example's task (index into
      `task_names`); must be in range (checked by the caller).
  Returns:
    float32 logits [batch_size, num_outputs]: the example's task head, zeros
    beyond its width (`num_outputs[task]`).
  """

  def __init__(self, config: modeling.BertConfig, base: Mapping[str, np.ndarray],
               tasks: Sequence, name: str = "multi_task_bert", fusions=None):
    """Args:
      config: the encoder's BertConfig.
      base: every encoder variable (no adapters) by original name.
      tasks: bank_tasks.BankTask-like objects (name, path, arrays, adapter_config),
        in task-index order; arrays by original name: what the task trained.
      fusions: the fusion tasks' fusions by task name (fusion/serving.py),
        whose tasks in `tasks` have no adapters.
    Raises:
      errors.UserError: tasks whose adapters have different activations (the
        encoder applies one).
    """
    super().__init__(name=name)
    if not tasks:
      raise ValueError("StackedTasksBert needs at least one task")
    self.task_names = tuple(t.name for t in tasks)
    self.num_outputs = tuple(int(t.arrays["output_weights"].shape[0]) for t in tasks)
    activations = sorted({t.adapter_config.activation for t in tasks
                          if t.adapter_config.enabled})
    if len(activations) > 1:
      raise errors.UserError(
          f"the tasks' adapters use different activations ({', '.join(activations)}); "
          f"export them separately")
    encoder = modeling.BertEncoder(
        config, AdapterConfig(size=0, activation=(activations or ["gelu"])[0]))
    encoder.ensure_built()
    checkpoint_io.load_arrays(encoder, base, "the base weights")
    # The SavedModel keeps the encoder's variables, not the Keras object (as
    # keras.export.ExportArchive tracks a model): tf.saved_model.save would
    # also trace the Keras model's own default signature, with float inputs.
    # The tf.Variables inside the Keras ones: a SavedModel that tracks Keras
    # variables loads in TF2 but not in a TF1 session, as TensorFlow Serving
    # and `saved_model_cli run` load it ("Could not find variable ...": the
    # restore does not reach them).
    self.encoder_variables = [v.value for v in encoder.variables]
    models = {}  # One per adapter config and head width (_task_weights).
    own = [_task_weights(models, config, base, task) for task in tasks]
    stacked = _stack([weights for weights, _ in own], config)
    variable = lambda a: tf.Variable(a, trainable=False)
    # AdapterFusion: each place's fusion item, after the stacked adapters; its
    # fused adapters are shared by the batch, kept apart from what is gathered.
    fused = fusion_serving.stack_fusions(config, tasks, fusions or {},
                                         (activations or ["gelu"])[0])
    stacked = stacked._replace(layers=tuple(
        layer._replace(**{field: getattr(layer, field) + (fused[(i, field)][0],)
                          for field, _ in fusion_serving.PLACES if (i, field) in fused})
        for i, layer in enumerate(stacked.layers)))
    shared = {place: adapters for place, (_, adapters) in fused.items()}
    self.fused_adapters = [variable(a) for a in tf.nest.flatten(shared)]
    # A flat list (tf.Module tracks it; the SavedModel keeps it) and, in
    # Python only, the structure the encoder's call takes (task_weights()).
    self.stacked_weights = [variable(a) for a in tf.nest.flatten(stacked)]
    self._python = types.SimpleNamespace(
        encoder=encoder, structure=stacked,
        fused=tf.nest.pack_sequence_as(shared, self.fused_adapters))
    width = max(self.num_outputs)
    self.output_weights = variable(np.stack([_pad(w, (width, config.hidden_size))
                                             for (_, (w, _)) in own]))
    self.output_bias = variable(np.stack([_pad(b, (width,)) for (_, (_, b)) in own]))

  def __call__(self, inputs: Mapping[str, tf.Tensor], task_index: tf.Tensor) -> tf.Tensor:
    task_index = tf.convert_to_tensor(task_index, tf.int32)
    inputs = {k: tf.convert_to_tensor(inputs[k], tf.int32)
              for k in ("input_ids", "input_mask", "segment_ids")}
    per_example = self._with_fused_adapters(tf.nest.map_structure(
        lambda v: tf.gather(v, task_index), self.task_weights()))
    pooled = self._python.encoder(inputs, task_weights=per_example)["pooled_output"]
    # Each example's own task's head (BertClassifier's, in its stacked form).
    return classifier_logits(pooled, tf.gather(self.output_weights, task_index),
                             tf.gather(self.output_bias, task_index))

  def _with_fused_adapters(self, weights: modeling.EncoderTaskWeights):
    """`weights` with each fusion item's shared adapters in place (fusion/serving.py)."""
    fused = self._python.fused
    if not fused:
      return weights
    def place(i, items, field):
      if (i, field) not in fused:
        return items
      return items[:-1] + (items[-1]._replace(adapters=fused[(i, field)]),)
    return weights._replace(layers=tuple(
        layer._replace(**{field: place(i, getattr(layer, field), field)
                          for field, _ in fusion_serving.PLACES})
        for i, layer in enumerate(weights.layers)))

  def task_weights(self, stacked_weights=None) -> modeling.EncoderTaskWeights:
    """Every task's weights, [num_tasks, ...] each, in the structure the
    encoder's call takes: `stacked_weights` (default: this model's; e.g. those
    of a loaded SavedModel) in their order."""
    return tf.nest.pack_sequence_as(self._python.structure,
                                    list(stacked_weights or self.stacked_weights))


# What a task adds to the frozen encoder: the variables its arrays may hold.
_TASK_ROLES = ("adapter", "layer_norm", "head")


def _task_weights(models: dict, config: modeling.BertConfig, base: Mapping[str, np.ndarray],
                  task):
  """(its EncoderTaskWeights, (output_weights, output_bias)) as NumPy arrays: what
  its own BertClassifier computes with. One such model serves every task of the
  same adapter config and head width (`models`): the base is loaded into it
  once, and each task's variables (a LayerNorm it did not train: the base's)
  are assigned in turn.

  Raises:
    errors.UserError: the task's arrays lack an adapter or head variable.
  """
  key = (task.adapter_config, int(task.arrays["output_weights"].shape[0]))
  if key not in models:
    models[key] = modeling.BertClassifier(config, key[1], key[0])
    models[key].ensure_built()
    checkpoint_io.load_arrays(models[key], base, "the base weights")
  model = models[key]
  for name, variable in model.tf1_variable_map().items():
    if modeling.variable_role(name) in _TASK_ROLES:
      value = task.arrays.get(name, base.get(name))
      if value is None:
        raise errors.UserError(f"task {task.name} lacks variable {name} of its model",
                               task.path)
      variable.assign(value)
  # Copies: the model's variables take the next task's values.
  copy = lambda v: np.array(v, np.float32)
  weights = tf.nest.map_structure(copy, model.bert.own_task_weights())
  return weights, (copy(model.head.output_weights), copy(model.head.output_bias))


def _stack(weights: List[modeling.EncoderTaskWeights], config: modeling.BertConfig):
  """One EncoderTaskWeights whose arrays have a leading task axis (module docstring)."""
  stack = lambda arrays: np.stack([np.asarray(a, np.float32) for a in arrays])
  layers = []
  for i in range(len(weights[0].layers)):
    mine = [w.layers[i] for w in weights]
    places = {}
    for place in modeling.ADAPTER_PLACES:
      # A task's own weights at a place: one item of its design, or none.
      items = [(m.at(place) or (None,))[0] for m in mine]
      places[place] = ()
      for design in adapter_layers.designs():
        owned = [w if w is not None and adapter_layers.design_of(w) is design else None
                 for w in items]
        if any(w is not None for w in owned):
          # Padded to the width at the place (the hidden size but at a site
          # of another width, e.g. the feed-forward's intermediate activation).
          places[place] += design.stack(owned, modeling.place_units(config, place))
    norm = lambda field: tuple(stack(getattr(m, field)[k] for m in mine) for k in (0, 1))
    layers.append(modeling.LayerTaskWeights.of(
        places, attention_layer_norm=norm("attention_layer_norm"),
        output_layer_norm=norm("output_layer_norm")))
  return modeling.EncoderTaskWeights(
      tuple(layers), tuple(stack(w.embeddings_layer_norm[k] for w in weights)
                           for k in (0, 1)))


def _pad(value: np.ndarray, shape) -> np.ndarray:
  """`value` zero-padded at the end of every axis to `shape`."""
  value = np.asarray(value, np.float32)
  out = np.zeros(shape, np.float32)
  out[tuple(slice(0, d) for d in value.shape)] = value
  return out
