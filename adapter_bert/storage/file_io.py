"""Output files that appear whole or not at all, on any tf.io.gfile path.

What a run writes is read again by a later step: a resumed run reuses feature
records, an eval-only run reads run_config.json and adapter weights, a scorer
reads predictions. A crash or an error mid-write must therefore leave the old
file (or none) under the final name, never a truncated one. So every output is
written under a temporary sibling name and renamed into place when complete;
on an error the temporary is removed and the error goes on.

Everything goes through tf.io.gfile, so gs:// and ram:// paths work like local
ones (on gs:// a rename copies: not atomic, but still only after all writes).
A directory rename there copies file by file, so a reader that watches for a
directory's files can see some of them: AtomicDirectory's `last` names the file
such a reader waits for (a SavedModel's saved_model.pb), moved in after all
others and out before them.

Temporary names are hidden siblings, `.NAME.tmp-<random>`:
  * in the same directory, so the rename stays on one file system;
  * random, so two runs sharing an output_dir never write the same temporary;
  * not `NAME.tmp`: on ram:// a path that is a prefix of an existing path
    "exists" (and is a directory), so `NAME.tmp` would make NAME appear.
A process killed mid-write (SIGKILL, power loss) cannot remove its temporary:
it stays behind, hidden and never read, and the final name keeps the old file.
The next AtomicDirectory of the same path removes such leftovers (and logs
it): two writers of one directory at once are not supported anyway, as the
last to finish would replace the other's.

A directory written where a user keeps other files keeps them: AtomicDirectory
replaces only the files it writes and those its caller names as its own
(`owned`); every other file of the old directory is carried into the new one
(a hard link where the file system has them, else a copy) before the swap.
Whether a command may write into a non-empty directory at all is
path_checks.check_output_dir's to say (the --overwrite rule).

A write that the file system refuses (no space left, a directory made
read-only, a bucket that fails) is the user's environment, not a bug: it
becomes a `WriteFailed`, a UserError of one line naming the path and what was
being written, after the temporary is removed (`write_failure`).
"""

import fnmatch
import os
import posixpath
import uuid
from typing import List, Sequence

import tensorflow as tf
from absl import logging

from adapter_bert import errors

_TEMP_MARK = ".tmp-"
_BACKUP_MARK = ".old-"  # AtomicDirectory's old directory while it is replaced.


# Errors of a write the environment refused. Not InvalidArgument/Unimplemented:
# those are what the code asked for, i.e. bugs, and keep their traceback.
_NOT_THE_ENVIRONMENT = (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError)


class WriteFailed(errors.UserError):
  """A write the file system refused: "cannot write WHAT: REASON" for `path`."""

  def __init__(self, path: str, what: str, reason: str):
    self.what, self.reason = what, reason
    super().__init__(f"cannot write {what}: {reason} (nothing was replaced; free space "
                     f"or fix the permissions and run the same command again)", path)


def is_write_failure(e: BaseException) -> bool:
  """Whether `e` is the file system refusing a write (see the module docstring)."""
  if isinstance(e, tf.errors.OpError):
    return not isinstance(e, _NOT_THE_ENVIRONMENT)
  return isinstance(e, OSError)


def write_failure(e: BaseException, path: str, what: str) -> WriteFailed:
  """`e` (a write failure, or an inner WriteFailed) as one line for `path`."""
  if isinstance(e, WriteFailed):
    reason = e.reason
  elif isinstance(e, tf.errors.OpError):
    reason = e.message.split(";")[0].strip() or type(e).__name__
  else:
    reason = e.strerror or str(e)
  return WriteFailed(path, what, reason)


def _sibling(path: str, mark: str) -> str:
  # The scheme is set aside first: posixpath would fold "ram://name" into "ram:/".
  scheme, sep, rest = path.rstrip("/").rpartition("://")
  parent, base = posixpath.split(rest)
  sibling = posixpath.join(parent, f".{base}{mark}{uuid.uuid4().hex[:12]}")
  return scheme + sep + sibling


def temp_path(path: str) -> str:
  """A fresh temporary name beside `path` (see the module docstring)."""
  return _sibling(path, _TEMP_MARK)


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

  A write failure in the block or in the commit becomes a WriteFailed naming
  `path` and `what` (e.g. "eval results"), the temporary removed.
  """

  def __init__(self, path: str, what: str = "the file"):
    self.path = path.rstrip("/")
    self.what = what
    self.temp = temp_path(self.path)
    self._guarded(make_parent_dirs, self.path)

  def _guarded(self, write, *args) -> None:
    """Runs `write(*args)`; a write failure becomes a WriteFailed."""
    try:
      write(*args)
    except (tf.errors.OpError, OSError) as e:
      if is_write_failure(e):
        raise write_failure(e, self.path, self.what) from e
      raise

  def commit(self) -> None:
    tf.io.gfile.rename(self.temp, self.path, overwrite=True)

  def abort(self) -> None:
    remove_quietly(self.temp)

  def __enter__(self) -> str:
    return self.temp

  def __exit__(self, exc_type, exc, tb) -> bool:
    if exc_type is not None:
      self.abort()
      if isinstance(exc, WriteFailed) or is_write_failure(exc):
        raise write_failure(exc, self.path, self.what) from exc
      return False
    try:
      self._guarded(self.commit)
    except BaseException:
      self.abort()
      raise
    return False


class AtomicDirectory(AtomicFile):
  """An AtomicFile for a directory: the temporary directory replaces `path`, with
  the files of `path` that are not the writer's carried over (module docstring).

  A directory cannot be swapped by one rename, so `commit` moves the old one
  aside (`.NAME.old-<random>`), moves the new one in, then deletes the old
  one. A crash between the two moves leaves the old directory under that
  backup name; `recover_directory` (run by the next AtomicDirectory for the
  same path, and by readers that want it) moves it back. So `path` holds the
  old directory or the new one, never a mix and never nothing for good.

  Off the local file system (gs://, ram://) each move goes file by file, and
  `last` (paths inside the directory, e.g. "saved_model.pb") are moved in
  after every other file and out before them: a reader that takes them as the
  sign of a complete directory (TensorFlow Serving polling a model's versions)
  never finds them beside a missing file.
  """

  def __init__(self, path: str, last: Sequence[str] = (), what: str = "the directory",
               owned: Sequence[str] = ()):
    """`owned`: glob patterns of paths inside the directory that are the caller's
    own even where this write does not make them (a SavedModel's variables/*),
    replaced or removed; every other file the directory holds is kept."""
    super().__init__(path, what)
    self.last = tuple(last)
    self.owned = tuple(owned)
    recover_directory(self.path)
    remove_leftovers(self.path)

  def __enter__(self) -> str:
    try:
      self._guarded(tf.io.gfile.makedirs, self.temp)
    except BaseException:
      self.abort()  # A directory made before the failure (e.g. its parent only).
      raise
    return self.temp

  def commit(self) -> None:
    backup = None
    if tf.io.gfile.exists(self.path):
      _keep_others(self.path, self.temp, self.owned)
      backup = _sibling(self.path, _BACKUP_MARK)
      _move(self.path, backup, first=self.last)
    try:
      _move(self.temp, self.path, last=self.last)
    except BaseException:
      if backup is not None:  # Put the old directory back: as if never started.
        remove_quietly(self.path)
        _move(backup, self.path)
      raise
    if backup is not None:
      remove_quietly(backup)


def _files_under(root: str) -> List[str]:
  """Paths relative to `root` of every file under it (on ram://, only those that
  exist: a listing there also holds names that only share a prefix)."""
  return [posixpath.relpath(posixpath.join(d, n), root)
          for d, _, names in tf.io.gfile.walk(root) for n in names
          if tf.io.gfile.exists(posixpath.join(d, n))]


def _keep_others(old: str, new: str, owned: Sequence[str]) -> None:
  """Carries into `new` every file of `old` that `new` does not hold and no
  pattern of `owned` names: a user's files beside a command's outputs."""
  new_files = set(_files_under(new))
  others = [f for f in _files_under(old) if f not in new_files
            and not any(fnmatch.fnmatchcase(f, p) for p in owned)]
  for f in others:
    src, dst = posixpath.join(old, f), posixpath.join(new, f)
    make_parent_dirs(dst)
    try:  # A hard link costs no copy, and the file stays the user's own inode.
      if not _is_local(src):
        raise OSError("no hard links off the local file system")
      os.link(src.removeprefix("file://"), dst.removeprefix("file://"))
    except OSError:
      tf.io.gfile.copy(src, dst, overwrite=True)
  if others:
    logging.info("Kept %d file(s) in %s that this command does not write: %s%s",
                 len(others), old, ", ".join(others[:5]), ", ..." if len(others) > 5 else "")


def remove_leftovers(path: str) -> None:
  """Removes the temporaries of `path` (`.NAME.tmp-*`) that a killed write left."""
  path = path.rstrip("/")
  parent, base = posixpath.split(path)
  parent = parent or "."
  if not tf.io.gfile.isdir(parent):
    return
  prefix = f".{base}{_TEMP_MARK}"
  leftovers = sorted(posixpath.join(parent, n.rstrip("/"))
                     for n in tf.io.gfile.listdir(parent) if n.startswith(prefix))
  leftovers = [p for p in leftovers if tf.io.gfile.exists(p)]
  for leftover in leftovers:
    remove_quietly(leftover)
  if leftovers:
    logging.info("Removed %s, left by an interrupted write of %s",
                 ", ".join(leftovers), path)


def current_contents(path: str) -> str:
  """Where the contents of directory `path` are now, found without changing anything:
  `path`, or, while a crash between an AtomicDirectory commit's two moves is not yet
  recovered (`path` missing, its backup beside), that backup: the old directory,
  which `recover_directory` would move back. For readers that only look."""
  path = path.rstrip("/")
  if tf.io.gfile.exists(path):
    return path
  backups = _backups(path)
  return backups[0] if backups else path


def _backups(path: str) -> List[str]:
  """The backups of directory `path` that AtomicDirectory commits left beside it."""
  parent, base = posixpath.split(path)
  parent = parent or "."
  if not tf.io.gfile.isdir(parent):
    return []
  prefix = f".{base}{_BACKUP_MARK}"
  return sorted(posixpath.join(parent, n.rstrip("/"))
                for n in tf.io.gfile.listdir(parent) if n.startswith(prefix))


def recover_directory(path: str) -> None:
  """Completes what an AtomicDirectory commit interrupted by a crash left undone.

  `path` missing with a backup of it beside: the crash came between the two
  moves, and the backup (the old directory) goes back to `path`. `path`
  present: backups are leftovers of a commit that got the new one in place,
  and are deleted.
  """
  path = path.rstrip("/")
  backups = _backups(path)
  if backups and not tf.io.gfile.exists(path):
    logging.warning("Restoring %s from %s, left there by an interrupted replacement",
                    path, backups[0])
    _move(backups.pop(0), path)
  for backup in backups:
    remove_quietly(backup)


def _is_local(path: str) -> bool:
  return "://" not in path or path.startswith("file://")


def _move(src: str, dst: str, first: Sequence[str] = (), last: Sequence[str] = ()) -> None:
  """Renames the file or directory tree `src` to `dst`, which must not exist.

  Off the local file system, with `first` or `last` (paths inside `src`), file
  by file: those of `first` before the others, those of `last` after them.
  """
  if not tf.io.gfile.isdir(src):
    tf.io.gfile.rename(src, dst)
    return
  # On ram:// a listing also holds names that only share a prefix ("assets" lists
  # ".extra" of "assets.extra/"): those do not exist and are not moved.
  files = _files_under(src)
  if (first or last) and not _is_local(src):
    files.sort(key=lambda f: (f not in first) + (f in last))
  else:
    tf.io.gfile.rename(src, dst)
    if all(tf.io.gfile.exists(posixpath.join(dst, f)) for f in files):
      return
  # In that order, or where a rename moved only the directory entry (ram://).
  tf.io.gfile.makedirs(dst)
  for f in files:
    make_parent_dirs(posixpath.join(dst, f))
    tf.io.gfile.rename(posixpath.join(src, f), posixpath.join(dst, f), overwrite=True)
  remove_quietly(src)  # The subdirectory entries left behind.


def name_from(directory: str, path: str) -> str:
  """`path` as a file written in `directory` names it: its base name if it is in
  `directory` (as TensorFlow's `checkpoint` state file names a run's checkpoints,
  so that a copied or moved directory still says the same), else `path` itself."""
  if posixpath.normpath(posixpath.dirname(path)) == posixpath.normpath(directory):
    return posixpath.basename(path)
  return path


def atomic_write(path: str, data, binary: bool = False, what: str = "the file") -> None:
  """Writes `data` (str, or bytes with `binary`) to `path` atomically; makes its parent.

  Raises:
    WriteFailed: the file system refused the write; `path` keeps its old file.
  """
  with AtomicFile(path, what) as tmp:
    with tf.io.gfile.GFile(tmp, "wb" if binary else "w") as f:
      f.write(data)
