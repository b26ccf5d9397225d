"""A SavedModel written to a bucket is never seen half-written by a server polling it.

On gs:// a directory rename is a copy, object by object (in name order:
saved_model.pb before variables/), and TensorFlow Serving loads a numeric
version directory once it finds saved_model.pb there. The in-memory ram://
file system stands in for the bucket (a directory rename there moves file by
file too); after every rename, a poller lists the numeric versions and
records the files of each that holds saved_model.pb. Each record must then
hold every file of the finished version.
"""

import posixpath
import uuid

import pytest
import tensorflow as tf

from adapter_bert.serving import export
from adapter_bert.storage import file_io
from export_checks import Poller, files_in


def _save_model(directory, scratch):
  """A SavedModel with variables and an asset, as export writes one (smaller)."""
  module = tf.Module()
  module.weights = tf.Variable(tf.ones([4, 4]))
  vocab = posixpath.join(scratch, "vocab.txt")
  tf.io.gfile.makedirs(scratch)
  with tf.io.gfile.GFile(vocab, "w") as f:
    f.write("a\nb\n")
  module.vocab = tf.saved_model.Asset(vocab)
  module.serve = tf.function(lambda x: tf.matmul(x, module.weights),
                             input_signature=[tf.TensorSpec([None, 4])])
  tf.saved_model.save(module, directory)
  tf.io.gfile.makedirs(posixpath.join(directory, posixpath.dirname(export.TASKS_FILE)))
  with tf.io.gfile.GFile(posixpath.join(directory, export.TASKS_FILE), "w") as f:
    f.write("{}\n")


@pytest.mark.parametrize("last", [[export.SAVED_MODEL_FILE], []], ids=["export", "reference"])
def test_a_poller_never_finds_saved_model_pb_beside_a_missing_file(monkeypatch, last):
  """A new version and its replacement, moved in as export moves them; the
  reference (no file last) shows that the poller sees a partial version without it."""
  root = f"ram://export_{uuid.uuid4().hex}"
  base = root + "/models"
  version = posixpath.join(base, "1")
  poller = Poller(base, monkeypatch)
  for _ in range(2):  # The new version, then a re-export over it.
    with file_io.AtomicDirectory(version, last=last) as tmp:
      _save_model(tmp, root + "/scratch")
  final = files_in(version)
  assert {export.SAVED_MODEL_FILE, "variables/variables.index", export.TASKS_FILE} <= final
  assert poller.seen  # The poller did look while the version was there.
  partial = [sorted(final - seen) for seen in poller.seen if seen != final]
  if last:
    assert not partial
  else:
    assert partial  # Without the order, saved_model.pb came before variables/.
  assert not [n for n in tf.io.gfile.listdir(base) if not n.rstrip("/").isdigit()]


def test_local_directories_are_still_renamed_whole(tmp_path, monkeypatch):
  """On the local file system one rename moves the directory (atomic), as before."""
  renames = []
  rename = tf.io.gfile.rename
  monkeypatch.setattr(tf.io.gfile, "rename",
                      lambda src, dst, overwrite=False: renames.append(dst) or
                      rename(src, dst, overwrite))
  version = str(tmp_path / "models" / "1")
  with file_io.AtomicDirectory(version, last=[export.SAVED_MODEL_FILE]) as tmp:
    _save_model(tmp, str(tmp_path / "scratch"))
  assert renames == [version]
  assert export.SAVED_MODEL_FILE in files_in(version)
