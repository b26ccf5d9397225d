"""The README's "Python API" block, run exactly as written on a tiny BERT.

The block reads `models/minilm` (Google's format) and
`data/wordnet/wordnet_lexname` relative to the working directory, so the test
runs it in a temporary directory holding a tiny checkpoint and a small TSV task
under those names. It checks what the README says the block does: only the
adapters, LayerNorms and head change in `model.fit`, the adapter-only file holds
exactly them and is small beside the model, and the model loaded from the base
plus that file is the trained one, weight for weight and prediction for
prediction.
"""

import os
import re

import keras
import numpy as np
import pytest
import safetensors.numpy

from adapter_bert.checkpoints import adapter_weights
import modeling
import optimization
import tiny_bert

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "README.md")
# Wide enough that adapters of the README's size 64 are a small part of the model.
CONFIG = dict(tiny_bert.TINY_CONFIG, hidden_size=128, intermediate_size=512)
LABELS = ("noun.animal", "noun.state", "verb.motion")
NUM_EXAMPLES = 96
TRAINED_ROLES = ("adapter", "layer_norm", "head")


def readme_snippet() -> str:
  """The one ```python block of the README's "## Python API" section."""
  with open(README, encoding="utf-8") as f:
    text = f.read()
  section = re.search(r"^## Python API\n(.*?)(?=^## )", text, re.M | re.S)
  assert section, 'README.md has no "## Python API" section'
  blocks = re.findall(r"^```python\n(.*?)^```", section.group(1), re.M | re.S)
  assert len(blocks) == 1, f"expected one python block in Python API, got {len(blocks)}"
  return blocks[0]


def write_task(directory):
  """train.tsv with the columns the snippet names, words of the tiny vocabulary."""
  os.makedirs(directory)
  rng = np.random.default_rng(0)
  words = [w for w in tiny_bert.tiny_vocab()[5:50] if w.isalpha()]
  with open(os.path.join(directory, "train.tsv"), "w") as f:
    f.write("id\tsentence\tlabel\n")
    for i in range(NUM_EXAMPLES):
      sentence = " ".join(rng.choice(words, size=rng.integers(3, 12)))
      f.write(f"{i}\t{sentence}\t{LABELS[i % len(LABELS)]}\n")


def values(model):
  return {n: keras.ops.convert_to_numpy(v).copy()
          for n, v in model.tf1_variable_map().items()}


@pytest.fixture
def readme_run(tmp_path, monkeypatch):
  """Runs the snippet in tmp_path; returns its namespace, the checkpoint's
  weights and every variable's value just before and after `fit`."""
  _, _, _, base_weights = tiny_bert.write_google_dir(str(tmp_path / "models" / "minilm"),
                                                     CONFIG)
  write_task(str(tmp_path / "data" / "wordnet" / "wordnet_lexname"))
  fits = []
  real_fit = keras.Model.fit

  def recording_fit(self, *args, **kwargs):
    before = values(self)
    history = real_fit(self, *args, **kwargs)
    fits.append((before, values(self)))
    return history

  monkeypatch.setattr(modeling.BertClassifier, "fit", recording_fit)
  monkeypatch.chdir(tmp_path)
  namespace = {"__name__": "readme_python_api"}
  exec(compile(readme_snippet(), f"{README} (Python API)", "exec"), namespace)
  assert len(fits) == 1, "the snippet should call model.fit once"
  return namespace, base_weights, fits[0]


def test_readme_python_api(readme_run, tmp_path):
  namespace, base_weights, (before, after) = readme_run
  model, restored = namespace["model"], namespace["restored"]
  names = model.tf1_variable_map()
  roles = {n: modeling.variable_role(n) for n in names}

  # What trains: exactly the adapters, every LayerNorm and the head.
  trained = {n for n, v in names.items() if v.trainable}
  assert trained == {n for n in names if roles[n] in TRAINED_ROLES}
  assert any(roles[n] == "adapter" for n in trained)
  # fit ran the two epochs the snippet asks for, with BERT's optimizer.
  assert isinstance(model.optimizer, optimization.AdamWeightDecay)
  assert int(model.optimizer.iterations) == 2 * NUM_EXAMPLES // 32

  # The frozen weights are the checkpoint's, before and after fit; everything
  # that trains moved.
  for name in names:
    if name in trained:
      assert not np.array_equal(before[name], after[name]), f"{name} did not train"
    else:
      np.testing.assert_array_equal(before[name], base_weights[name], err_msg=name)
      np.testing.assert_array_equal(after[name], base_weights[name], err_msg=name)

  # The adapter-only file holds exactly what trained, and little else.
  path = tmp_path / "output" / "api" / "adapter_model" / adapter_weights.WEIGHTS_FILE
  arrays = safetensors.numpy.load_file(str(path))
  assert set(arrays) == trained
  for name, value in arrays.items():
    np.testing.assert_array_equal(value, after[name], err_msg=name)
  trained_bytes = 4 * sum(after[n].size for n in trained)
  model_bytes = 4 * sum(v.size for v in after.values())
  assert trained_bytes <= path.stat().st_size < trained_bytes + 64 * 1024
  assert path.stat().st_size < 0.25 * model_bytes

  # Base + adapter file = the trained model: same weights, same predictions.
  restored_values = values(restored)
  assert set(restored_values) == set(after)
  for name, value in after.items():
    np.testing.assert_array_equal(restored_values[name], value, err_msg=name)
  batch = next(iter(namespace["train_set"]))[0]
  inputs = {k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}
  np.testing.assert_allclose(restored(inputs, training=False),
                             model(inputs, training=False), rtol=0, atol=1e-6)


def test_readme_python_api_block_is_found():
  """The extraction itself: a renamed section or a second block fails loudly."""
  code = readme_snippet()
  assert "model.fit(" in code and "save_adapter_weights(" in code
  assert "load_adapter_weights(" in code
