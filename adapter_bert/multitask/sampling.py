"""Temperature-based task sampling: which task each training batch comes from.

With n_t training examples in task t and temperature T, a batch comes from
task t with probability

    p_t = n_t^(1/T) / sum_s n_s^(1/T)

(Mahabadi et al., 2021, after Raffel et al., 2020): T = 1 samples in
proportion to the data, larger T flattens towards uniform, so small tasks are
not drowned out. Each batch holds one task's examples.
"""

from typing import Optional, Sequence

import numpy as np
import tensorflow as tf


def task_probabilities(num_examples: Sequence[int], temperature: float) -> np.ndarray:
  """p_t above, float64 [num_tasks]; `temperature` = inf gives the uniform distribution."""
  sizes = np.asarray(num_examples, np.float64)
  if sizes.ndim != 1 or not sizes.size or (sizes <= 0).any():
    raise ValueError(f"every task needs training examples, got sizes {list(num_examples)}")
  if not temperature > 0:
    raise ValueError(f"the sampling temperature must be > 0, got {temperature}")
  # In log space: n^(1/T) of large n and small T would overflow.
  logits = np.log(sizes) / temperature
  weights = np.exp(logits - logits.max())
  return weights / weights.sum()


def sample_batches(datasets: Sequence[tf.data.Dataset], probabilities: Sequence[float],
                   seed: Optional[int] = None) -> tf.data.Dataset:
  """Each element drawn from dataset t with probability p_t (tf.data's sampler).

  Args:
    datasets: one per task, repeated forever and batched: an element is a
      whole batch of one task.
    seed: the draw's seed; with the datasets' own seeds it fixes the stream,
      so a resumed run can skip the batches it trained on.
  """
  return tf.data.Dataset.sample_from_datasets(
      list(datasets), weights=[float(p) for p in probabilities], seed=seed)
