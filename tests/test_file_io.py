"""file_io: outputs appear whole or not at all, on local and ram:// paths."""

import os

import pytest
import tensorflow as tf

from storage import file_io


@pytest.mark.parametrize("root", ["local", "ram://file_io_test"])
def test_atomic_write_replaces_whole_and_leaves_nothing_on_error(tmp_path, root):
  root = str(tmp_path) if root == "local" else root
  path = f"{root}/sub/result.txt"
  file_io.atomic_write(path, "old\n")  # Creates the parent directory.
  file_io.atomic_write(path, b"\x00new", binary=True)
  with tf.io.gfile.GFile(path, "rb") as f:
    assert f.read() == b"\x00new"
  with pytest.raises(RuntimeError, match="mid-write"):
    with file_io.AtomicFile(path) as tmp:
      with tf.io.gfile.GFile(tmp, "w") as f:
        f.write("half")
      raise RuntimeError("mid-write")
  with tf.io.gfile.GFile(path, "rb") as f:
    assert f.read() == b"\x00new"  # The old file, untouched.
  assert tf.io.gfile.listdir(f"{root}/sub") == ["result.txt"]  # No temporary left.


@pytest.mark.parametrize("root", ["local", "ram://file_io_dir_test"])
def test_atomic_directory_replaces_the_whole_directory(tmp_path, root):
  root = str(tmp_path) if root == "local" else root
  target = f"{root}/out"
  file_io.atomic_write(f"{target}/stale.txt", "from before")
  with file_io.AtomicDirectory(target + "/") as tmp:
    file_io.atomic_write(f"{tmp}/a.txt", "a")
    assert not tf.io.gfile.exists(f"{target}/a.txt")  # Not visible before the end.
  assert sorted(tf.io.gfile.listdir(target)) == ["a.txt"]
  with pytest.raises(OSError):
    with file_io.AtomicDirectory(target) as tmp:
      file_io.atomic_write(f"{tmp}/b.txt", "b")
      raise OSError("disk full")
  assert sorted(tf.io.gfile.listdir(target)) == ["a.txt"]
  assert [n.rstrip("/") for n in tf.io.gfile.listdir(root)] == ["out"]


def test_temp_path_is_a_hidden_sibling_that_does_not_prefix_the_target():
  tmp = file_io.temp_path("gs://bucket/dir/model.json")
  assert os.path.dirname(tmp) == "gs://bucket/dir"
  assert os.path.basename(tmp).startswith(".model.json.tmp-")
  assert file_io.temp_path("gs://bucket/dir/model.json") != tmp
