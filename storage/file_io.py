"""Output files that appear whole or not at all, on any tf.io.gfile path.

What a run writes is read again by a later step: a resumed run reuses feature
records, an eval-only run reads run_config.json and adapter weights, a scorer
reads predictions. A crash or an error mid-write must therefore leave the old
file (or none) under the final name, never a truncated one. So every output is
written under a temporary sibling name and renamed into place when complete;
on an error the temporary is removed and the error goes on.

Everything goes through tf.io.gfile, so gs:// and ram:// paths work like local
ones (on gs:// a rename copies: not atomic, but still only after all writes).

Temporary names are hidden siblings, `.NAME.tmp-<random>`:
  * in the same directory, so the rename stays on one file system;
  * random, so two runs sharing an output_dir never write the same temporary;
  * not `NAME.tmp`: on ram:// a path that is a prefix of an existing path
    "exists" (and is a directory), so `NAME.tmp` would make NAME appear.
"""

import posixpath
import uuid

import tensorflow as tf
from absl import logging


def temp_path(path: str) -> str:
  """A fresh temporary name beside `path` (see the module docstring)."""
  parent, base = posixpath.split(path.rstrip("/"))
  return posixpath.join(parent, f".{base}.tmp-{uuid.uuid4().hex[:12]}")


def make_parent_dirs(path: str) -> None:
  parent = posixpath.dirname(path.rstrip("/"))
  if parent:
    tf.io.gfile.makedirs(parent)


def remove_quietly(path: str) -> None:
  """Removes a file or directory tree if it exists.

  For clean-up while another error is handled: a failure here is logged, not
  raised, so that it does not hide that error.
  """
  try:
    if tf.io.gfile.isdir(path):
      tf.io.gfile.rmtree(path)
    elif tf.io.gfile.exists(path):
      tf.io.gfile.remove(path)
  except tf.errors.OpError as e:
    logging.warning("Could not remove %s: %s", path, e)


class AtomicFile:
  """A temporary name that becomes `path` on `commit()` and vanishes on `abort()`.

  As a context manager it yields the temporary name and commits on a clean
  exit, aborts on an error:

      with file_io.AtomicFile(record_path) as tmp:
        with tf.io.TFRecordWriter(tmp) as writer:
          ...
  """

  def __init__(self, path: str):
    self.path = path.rstrip("/")
    self.temp = temp_path(self.path)
    make_parent_dirs(self.path)

  def commit(self) -> None:
    tf.io.gfile.rename(self.temp, self.path, overwrite=True)

  def abort(self) -> None:
    remove_quietly(self.temp)

  def __enter__(self) -> str:
    return self.temp

  def __exit__(self, exc_type, exc, tb) -> bool:
    if exc_type is not None:
      self.abort()
      return False
    try:
      self.commit()
    except BaseException:
      self.abort()
      raise
    return False


class AtomicDirectory(AtomicFile):
  """An AtomicFile for a directory: the temporary directory replaces `path` whole."""

  def __enter__(self) -> str:
    tf.io.gfile.makedirs(self.temp)
    return self.temp

  def commit(self) -> None:
    if tf.io.gfile.exists(self.path):
      tf.io.gfile.rmtree(self.path)
    names = tf.io.gfile.listdir(self.temp)
    tf.io.gfile.rename(self.temp, self.path)
    # Where a rename moves only the directory entry (ram://), move file by file.
    if not all(tf.io.gfile.exists(posixpath.join(self.path, n)) for n in names):
      tf.io.gfile.makedirs(self.path)
      for n in names:
        tf.io.gfile.rename(posixpath.join(self.temp, n), posixpath.join(self.path, n),
                           overwrite=True)
      remove_quietly(self.temp)


def atomic_write(path: str, data, binary: bool = False) -> None:
  """Writes `data` (str, or bytes with `binary`) to `path` atomically; makes its parent."""
  with AtomicFile(path) as tmp:
    with tf.io.gfile.GFile(tmp, "wb" if binary else "w") as f:
      f.write(data)
