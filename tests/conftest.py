"""Makes the repository root importable in tests and keeps TensorFlow quiet; the
fixtures that several test files share."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position

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
