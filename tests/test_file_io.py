"""file_io: outputs appear whole or not at all, on local and ram:// paths."""

import os

import pytest
import tensorflow as tf

from adapter_bert.storage import file_io


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
def test_atomic_directory_replaces_its_own_files_and_keeps_the_users(tmp_path, root):
  root = str(tmp_path) if root == "local" else root
  target = f"{root}/out"
  file_io.atomic_write(f"{target}/a.txt", "old a")
  file_io.atomic_write(f"{target}/own-old.txt", "the writer's, not written again")
  file_io.atomic_write(f"{target}/notes.txt", "the user's")
  file_io.atomic_write(f"{target}/sub/user.bin", b"\x00user", binary=True)
  inode = os.stat(f"{target}/notes.txt").st_ino if root == str(tmp_path) else None
  with file_io.AtomicDirectory(target + "/", owned=["own-*"]) as tmp:
    file_io.atomic_write(f"{tmp}/a.txt", "a")
    assert _tree(target)["a.txt"] == "old a"  # Not visible before the end.
  assert sorted(_tree(target)) == ["a.txt", "notes.txt", "sub/user.bin"]
  assert _tree(target)["a.txt"] == "a"
  assert _tree(target)["notes.txt"] == "the user's"
  with tf.io.gfile.GFile(f"{target}/sub/user.bin", "rb") as f:
    assert f.read() == b"\x00user"
  if inode is not None:  # A hard link: the user's own file, not a copy of it.
    assert os.stat(f"{target}/notes.txt").st_ino == inode
  before = _tree(target)
  with pytest.raises(file_io.WriteFailed, match=r"out: cannot write the directory: disk full"):
    with file_io.AtomicDirectory(target) as tmp:
      file_io.atomic_write(f"{tmp}/b.txt", "b")
      raise OSError("disk full")
  assert _tree(target) == before
  assert [n.rstrip("/") for n in tf.io.gfile.listdir(root)] == ["out"]


@pytest.mark.parametrize("root", ["local", "ram://file_io_leftover_test"])
def test_the_next_write_removes_what_a_killed_one_left(tmp_path, root, caplog):
  root = str(tmp_path) if root == "local" else root
  target = f"{root}/out"
  # What a write killed before its commit leaves: its hidden temporary, half full.
  leftover = file_io.temp_path(target)
  file_io.atomic_write(f"{leftover}/a.txt", "half")
  other = f"{root}/.other.tmp-0123456789ab"  # Another path's: not this write's to remove.
  file_io.atomic_write(f"{other}/b.txt", "b")
  with caplog.at_level("INFO", logger="absl"):
    with file_io.AtomicDirectory(target) as tmp:
      file_io.atomic_write(f"{tmp}/a.txt", "a")
  assert sorted(n.rstrip("/") for n in tf.io.gfile.listdir(root)) == [
      ".other.tmp-0123456789ab", "out"]
  assert _tree(target) == {"a.txt": "a"}
  removed = [r.getMessage() for r in caplog.records if "interrupted write" in r.getMessage()]
  assert removed == [f"Removed {leftover}, left by an interrupted write of {target}"]


def test_temp_path_is_a_hidden_sibling_that_does_not_prefix_the_target():
  tmp = file_io.temp_path("gs://bucket/dir/model.json")
  assert os.path.dirname(tmp) == "gs://bucket/dir"
  assert os.path.basename(tmp).startswith(".model.json.tmp-")
  assert file_io.temp_path("gs://bucket/dir/model.json") != tmp


def _tree(root):
  """{relative file path: content} of every file under `root`."""
  files = {}
  for d, _, names in tf.io.gfile.walk(root):
    for n in names:
      with tf.io.gfile.GFile(f"{d}/{n}") as f:
        files[os.path.relpath(f"{d}/{n}", root)] = f.read()
  return files


def _old_dir(root):
  target = f"{root}/out"
  with file_io.AtomicDirectory(target) as tmp:
    file_io.atomic_write(f"{tmp}/a.txt", "old a")
    file_io.atomic_write(f"{tmp}/sub/b.txt", "old b")
  return target


def _write_new(target):
  # Every file there is the writer's own: the new directory replaces the old whole.
  with file_io.AtomicDirectory(target, owned=["*"]) as tmp:
    file_io.atomic_write(f"{tmp}/c.txt", "new c")


class _Crash(BaseException):
  """Stands for the process dying: nothing after it runs."""


def _failing_moves(monkeypatch, failing):
  """Makes the file_io._move calls numbered in `failing` (1-based) raise _Crash."""
  real, calls = file_io._move, []

  def move(src, dst, **order):
    calls.append((src, dst))
    if len(calls) in failing:
      raise _Crash(f"crash moving {src}")
    real(src, dst, **order)

  monkeypatch.setattr(file_io, "_move", move)
  return calls


@pytest.mark.parametrize("root", ["local", "ram://file_io_crash_rollback"])
def test_atomic_directory_failing_move_in_keeps_the_old_one(tmp_path, root, monkeypatch):
  root = str(tmp_path) if root == "local" else root
  target = _old_dir(root)
  calls = _failing_moves(monkeypatch, {2})  # Old -> backup works, new -> final fails.
  with pytest.raises(_Crash):
    _write_new(target)
  assert len(calls) == 3
  assert _tree(target) == {"a.txt": "old a", "sub/b.txt": "old b"}  # Rolled back.
  assert [n.rstrip("/") for n in tf.io.gfile.listdir(root)] == ["out"]


@pytest.mark.parametrize("root", ["local", "ram://file_io_crash_between"])
def test_atomic_directory_crash_between_the_moves_is_recovered(tmp_path, root,
                                                               monkeypatch):
  root = str(tmp_path) if root == "local" else root
  target = _old_dir(root)
  calls = _failing_moves(monkeypatch, {2, 3})  # The roll-back fails too: a crash.
  with pytest.raises(_Crash):
    _write_new(target)
  assert len(calls) == 3  # Old -> backup, new -> final (crash), backup -> final (crash).
  monkeypatch.undo()
  assert not tf.io.gfile.exists(target)  # Only the backup holds the old directory...
  backup = calls[0][1]
  assert _tree(backup) == {"a.txt": "old a", "sub/b.txt": "old b"}
  file_io.recover_directory(target)  # ...which a reader or the next writer restores.
  assert _tree(target) == {"a.txt": "old a", "sub/b.txt": "old b"}
  assert not tf.io.gfile.exists(backup)
  _write_new(target)
  assert _tree(target) == {"c.txt": "new c"}
  assert [n.rstrip("/") for n in tf.io.gfile.listdir(root)] == ["out"]


@pytest.mark.parametrize("root", ["local", "ram://file_io_crash_after"])
def test_atomic_directory_crash_before_the_backup_is_deleted(tmp_path, root, monkeypatch):
  root = str(tmp_path) if root == "local" else root
  target = _old_dir(root)
  real_remove = file_io.remove_quietly

  def remove(path):
    if ".out.old-" in path:
      raise _Crash(path)
    real_remove(path)

  monkeypatch.setattr(file_io, "remove_quietly", remove)
  with pytest.raises(_Crash):
    _write_new(target)
  monkeypatch.undo()
  assert _tree(target) == {"c.txt": "new c"}  # The new directory is in place.
  assert any(n.startswith(".out.old-") for n in tf.io.gfile.listdir(root))
  file_io.recover_directory(target)  # The old one is a leftover: deleted.
  assert _tree(target) == {"c.txt": "new c"}
  assert [n.rstrip("/") for n in tf.io.gfile.listdir(root)] == ["out"]
