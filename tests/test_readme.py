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
from adapter_bert.model import modeling
from adapter_bert.model import optimization
import tiny_bert

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
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


def _section(title):
  with open(README, encoding="utf-8") as f:
    text = f.read()
  section = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", text, re.M | re.S)
  assert section, f'README.md has no "## {title}" section'
  return section.group(1)


def _repository_file(name):
  with open(os.path.join(ROOT, name), encoding="utf-8") as f:
    return f.read()


def test_readme_demo_output_is_what_demo_sh_prints():
  """The result lines the README quotes are the ones demo.sh prints, in its
  format and with its default settings: a changed demo.sh fails here until
  the README says what it prints now."""
  demo = _repository_file("demo.sh")
  commands = _section("Two commands")
  assert re.search(r"^bash demo\.sh\s+#", commands, re.M)
  assert re.search(r"^bash run_tests\.sh\s+#", commands, re.M)
  assert "pytest -q" in _repository_file("run_tests.sh")
  assert "===== Result ($OUTPUT_DIR) =====" in demo
  assert "`===== Result (output/demo) =====`" in commands
  (block,) = [body for info, body in re.findall(r"^```(\w*)\n(.*?)^```$", commands, re.M | re.S)
              if not info]
  lines = block.strip().split("\n")

  # The three parameter lines: what demo.sh's grep keeps of the log.
  grep = re.search(r'^grep -E "(.*?)" "\$LOG"', demo, re.M).group(1)
  counts = [line for line in lines if line.startswith("*****")]
  assert len(counts) == 3 and all(re.search(grep, line) for line in counts)
  # Then eval_results.txt as run_classifier.py writes it: sorted "key = value",
  # the checkpoint evaluated named in its directory.
  results = lines[3:-1]
  assert [r.split(" = ")[0] for r in results] == sorted(
      ["checkpoint_path", "eval_accuracy", "eval_loss", "global_step", "loss"])
  assert "checkpoint_path = model.ckpt-250" in results
  # The last line is demo.sh's echo, with the README's settings as demo.sh's
  # defaults (adapter size 64; 2 epochs of 4,000 examples in batches of 32 is
  # the 250 steps of global_step).
  echo = re.search(r'echo "(Dev accuracy of .*?:)" \\\n\s*"\$\(.*?\) (\(.*?\))"', demo)
  template = echo.group(1).replace("$ADAPTER_SIZE", '${ADAPTER_SIZE}')
  assert 'ADAPTER_SIZE="${ADAPTER_SIZE:-64}"' in demo
  assert 'EPOCHS="${EPOCHS:-2}"' in demo and 'SEED="${SEED:-1}"' in demo
  expected = template.replace("${ADAPTER_SIZE}", "64")
  accuracy = dict(r.split(" = ") for r in results)["eval_accuracy"]
  assert lines[-1] == f"{expected} {accuracy} {echo.group(2)}"
  assert "global_step = 250" in results and "--train_batch_size=32" in demo
  assert "adapter size 64, 2 epochs, seed 1" in " ".join(commands.split())


def test_readme_demo_figures_are_in_the_detail_page():
  """The demo's figures the README quotes are kept, with their measurement,
  on the page it links to for the detail; the README gives the current time
  only, and the page the earlier ones."""
  commands = " ".join(_section("Two commands").split())
  assert "(docs/getting_started.md#bash-demosh)" in commands
  page = " ".join(_repository_file("docs/getting_started.md").split())
  for figure in ("226 s", "0.844", "23312266", "609034"):
    assert figure in commands, figure
    assert figure in page, figure
  for figure in ("6 min 4 s", "240 s", "170 s"):
    assert figure not in commands, figure
    assert figure in page, figure
  assert "`time bash demo.sh`" in page
