"""The bottleneck designs' shared base: h + A(a), an Adapter layer's weights,
with a (what the adapter reads) each design's own (houlsby.py, pfeiffer.py,
parallel.py)."""

import numpy as np

from adapter_bert.model.designs.registry import Design, PlaceInputs, pad
from adapter_bert.model.layers.adapters import Adapter, apply_adapter


class Bottleneck(Design):
  """h + A(a), A(a) = s (W2 act(W1 a + b1) + b2), an Adapter layer's weights
  (TF1 names weights1, biases1, weights2, biases2); a: what `reads` gives."""

  def reads(self, inputs: PlaceInputs):
    del inputs
    return None  # h itself.

  def make_layer(self, config, units, name):
    del units  # The hidden size, from the input.
    return Adapter(config.size, config.init_scale, config.activation, config.layer_norm,
                   config.scaling, name=name)

  def apply_layer(self, layer, h, inputs):
    return layer(h, adapter_input=self.reads(inputs))

  def task_weights(self, layer, config):
    return self.weights_types[0](*layer.adapter_weights().scaled(config.scaling))

  def apply(self, h, weights, inputs):
    return apply_adapter(h, weights, inputs.activation, inputs.batch_size,
                         adapter_input=self.reads(inputs))

  def stack(self, items, hidden):
    # Bottleneck widths padded to the largest (zero units: act(0) = 0 for every
    # activation, and their rows of weights2 are 0); adapters with and without
    # their own LayerNorm are two in turn (gamma = beta = 0 adds exactly 0).
    stacked = []
    for normalized in sorted({bool(w.layer_norm) for w in items if w is not None}):
      owners = [w is not None and bool(w.layer_norm) == normalized for w in items]
      size = max(w.weights1.shape[-1] for w, owner in zip(items, owners) if owner)
      shapes = [(hidden, size), (size,), (size, hidden), (hidden,)]
      shapes += [(hidden,), (hidden,)] if normalized else []
      rows = [[pad(np.reshape(a, (-1,)) if len(shape) == 1 else a, shape)  # Biases [1, n].
               for a, shape in zip(list(w[:4]) + list(w.layer_norm), shapes)] if owner else
              [np.zeros(shape, np.float32) for shape in shapes]
              for w, owner in zip(items, owners)]
      arrays = [np.stack(column) for column in zip(*rows)]
      stacked.append(self.weights_types[0](*arrays[:4], layer_norm=tuple(arrays[4:])))
    return tuple(stacked)
