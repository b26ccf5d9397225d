"""What the entry points import: TensorFlow and Keras without the packages Keras
imports only for features this project does not use (adapter_bert/cli/launch.py).

A fresh interpreter is the thing tested: the test process itself imported most
of them long ago.
"""

import json
import os
import subprocess
import sys

import pytest

from adapter_bert.cli import launch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEFT_OUT = ("sklearn", "pandas", "pyarrow", "matplotlib", "cv2", "PIL", "h5py", "scipy",
            "tf_keras")

_PROBE = """
import json, sys
import {entry_point}
left_out = {names!r}
loaded_by_entry_points = sorted(n for n in left_out if n in sys.modules)
import keras, tensorflow as tf
keras_works = float(keras.layers.Dense(1, kernel_initializer="ones")(tf.ones([1, 2]))[0, 0])
# Only a BFC allocator keeps these statistics: malloc's raises ValueError.
host_peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
later = None
if {later!r}:
  # Imported later, each is the real package, not what stood in while Keras imported.
  import sklearn.metrics, pandas, matplotlib.figure, scipy.special, tf_keras
  import official.nlp.tools.tokenization as mg_tokenization
  later = {{
      "f1": float(sklearn.metrics.f1_score([0, 1, 1], [0, 1, 0])),
      "frame": int(pandas.DataFrame({{"a": [1, 2]}})["a"].sum()),
      "tf_keras_dense": tf_keras.layers.Dense.__name__,
      "model_garden_tokens": mg_tokenization.BasicTokenizer().tokenize("Hello, World"),
  }}
print(json.dumps({{"loaded": loaded_by_entry_points, "keras": keras_works, "later": later,
                  "host_peak": host_peak}}))
"""


@pytest.mark.parametrize("entry_point", ["run_classifier", "run_squad", "run_multitask"])
def test_commands_import_frameworks_without_unused_packages_which_still_import_later(
    entry_point):
  # Without the allocator variables this process set: the command must set them itself.
  env = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPU_")}
  env.update(TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
  # What comes back after the import is launch.import_frameworks' doing, the same
  # call in each entry point: checked once, where it costs a second and a half.
  later = entry_point == "run_classifier"
  probe = _PROBE.format(entry_point=entry_point, names=LEFT_OUT, later=later)
  run = subprocess.run([sys.executable, "-c", probe], cwd=REPO,
                       env=env, capture_output=True, text=True, timeout=300, check=False)
  assert run.returncode == 0, run.stderr[-3000:]
  result = json.loads(run.stdout.strip().splitlines()[-1])
  assert result["loaded"] == []  # Each of them held RSS in every training process.
  assert result["keras"] == 2.0
  assert result["host_peak"] > 0  # Host tensors came from TensorFlow's BFC allocator.
  if later:
    assert result["later"] == {"f1": 2 / 3, "frame": 3, "tf_keras_dense": "Dense",
                               "model_garden_tokens": ["hello", ",", "world"]}


def test_the_bfc_host_allocator_is_a_default_that_a_users_setting_overrides():
  environ = {"TF_CPU_ALLOCATOR_USE_BFC": "false"}
  launch.use_bfc_host_allocator(environ)
  assert environ["TF_CPU_ALLOCATOR_USE_BFC"] == "false"
  environ = {}
  launch.use_bfc_host_allocator(environ)
  physical_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
  assert environ["TF_CPU_ALLOCATOR_USE_BFC"] == "true"
  assert abs(int(environ["TF_CPU_BFC_MEM_LIMIT_IN_MB"]) - physical_mib) < 1  # Not 64 GiB.
