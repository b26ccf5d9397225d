"""adapter-bert for TensorFlow 2 / Keras 3: the plumbing under the original's scripts.

The repository's top level is the original google-research/bert table of
contents (run_classifier.py, run_squad.py, modeling.py, adapter_layers.py,
optimization.py, tokenization.py); this package holds everything else, one
folder per concern: cli (flags), runtime (training loop and set-up),
checkpoints (every weight format), storage (files on any gfile path),
classification and squad (the tasks' pipelines), multitask, fusion, bank and
serving (the commands built on one frozen encoder).
"""

import contextlib as _contextlib
import importlib as _importlib
import sys as _sys
import types as _types

# Keras 3 (and TensorFlow's legacy Keras under tf.compat) import these whenever they are
# installed, for features this project never uses: Keras' scikit-learn wrappers, pandas
# inputs, image plots (matplotlib, OpenCV), PIL images, legacy .h5 models (h5py), SciPy
# sparse inputs. They held ~180 MiB of a training process's RSS before any model
# existed (benchmarks/README.md, "Memory"). While TensorFlow and Keras import, each one
# not yet imported is marked absent (None in sys.modules, so Keras' `try: import`
# takes its not-installed branch); the marks go right after, so any later import of
# them (this project's plots, a user's code) works as always.
_KERAS_EXTRAS = ("sklearn", "pandas", "matplotlib", "cv2", "PIL", "h5py", "scipy")
# Model Garden modules whose header imports tf_keras (Keras 2, ~110 MiB more) and
# which never use it (tokenization.py and the SQuAD pipeline import them): imported
# here with an empty module in its place. Model Garden's other modules,
# tensorflow_hub and a user's code import the real one.
_TF_KERAS_IN_HEADER_ONLY = ("official.nlp.tools.tokenization", "official.nlp.data.squad_lib")


def _import_frameworks():
  """Imports TensorFlow, Keras and the Model Garden modules above without the packages
  they do not need, unless TensorFlow was imported before."""
  if "tensorflow" in _sys.modules:
    return
  # pylint: disable=g-import-not-at-top,unused-import,import-outside-toplevel
  with _standing_in({name: None for name in _KERAS_EXTRAS}):
    import tensorflow
    import keras
  with _standing_in({"tf_keras": _types.ModuleType("tf_keras", "Not loaded: see adapter_bert.")}):
    for name in _TF_KERAS_IN_HEADER_ONLY:
      _importlib.import_module(name)


@_contextlib.contextmanager
def _standing_in(marks):
  """sys.modules[name] = mark for each name not yet imported, for the block's imports."""
  marks = {name: mark for name, mark in marks.items() if name not in _sys.modules}
  _sys.modules.update(marks)
  try:
    yield
  finally:
    for name, mark in marks.items():
      if _sys.modules.get(name, False) is mark:
        del _sys.modules[name]


_import_frameworks()
