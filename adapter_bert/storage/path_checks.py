"""Checks of the paths a user gives, run before anything is read or written.

A file where a directory is expected (or the reverse), a path that is not
there, a directory that cannot be written, a file system that cannot be
reached: each would otherwise surface as a TensorFlow traceback from deep in a
run (FailedPreconditionError from recursive_create_dir_v2), or after minutes.
`check(path, kind, what)` raises an errors.UserError saying which path is
wrong and why; `what` names where the path came from ("flag --output_dir=...").

A path on a remote file system (gs://, s3://, hdfs://) is reached once per
bucket, bounded by REMOTE_TIMEOUT_S: TensorFlow's GCS file system, with no
network, waits 61 s per attempt and retries up to 10 times; that is a setting
of the whole process (GCS_* environment variables), too short for real
transfers if lowered, so the bound is on this first probe alone.
"""

import os
import posixpath
import re
import threading
import uuid
from typing import Dict, Optional

import tensorflow as tf

from adapter_bert import errors

# What a path must be.
INPUT_FILE = "input_file"          # a file that is read
INPUT_DIR = "input_dir"            # a directory that is read
INPUT_FILE_OR_DIR = "input_path"   # either (e.g. adapter_model/ or the file in it)
CHECKPOINT = "checkpoint"          # a checkpoint prefix (PREFIX.index) or its directory
OUTPUT_DIR = "output_dir"          # a directory written into, created if missing
OUTPUT_FILE = "output_file"        # a file written, its directory created if missing
KINDS = (INPUT_FILE, INPUT_DIR, INPUT_FILE_OR_DIR, CHECKPOINT, OUTPUT_DIR, OUTPUT_FILE)

# Local file systems: no probe. ram:// is TensorFlow's in-memory one.
_LOCAL_SCHEMES = ("", "file", "ram")
REMOTE_TIMEOUT_S = 20.0
_reached: Dict[str, Optional[str]] = {}  # scheme://bucket -> None (reached) or the problem.


def _scheme_and_root(path: str):
  scheme, sep, rest = path.partition("://")
  if not sep:
    return "", ""
  return scheme, f"{scheme}://{rest.split('/', 1)[0]}"


def _one_line(message: str) -> str:
  return " ".join(message.split())


def _probe(path: str) -> Optional[str]:
  """None if the file system of `path` answers (whether or not `path` exists),
  else what went wrong."""
  outcome = {}

  def ask():
    try:
      tf.io.gfile.exists(path)
      outcome["problem"] = None
    except tf.errors.OpError as e:
      outcome["problem"] = _one_line(e.message)

  # A daemon thread: one still waiting on the network does not hold up the exit.
  thread = threading.Thread(target=ask, daemon=True)
  thread.start()
  thread.join(REMOTE_TIMEOUT_S)
  if "problem" not in outcome:
    return (f"no answer within {REMOTE_TIMEOUT_S:g} s (no network, or a firewall or proxy "
            f"that holds the connection?)")
  return outcome["problem"]


def check_reachable(path: str, what: Optional[str] = None) -> None:
  """Refuses a path on a remote file system that does not answer (bounded wait)."""
  scheme, root = _scheme_and_root(path)
  if scheme in _LOCAL_SCHEMES:
    return
  if root not in _reached:
    _reached[root] = _probe(path)
  if _reached[root] is not None:
    raise errors.UserError(f"cannot reach {root}: {_reached[root]}", what or path)


def _parent(path: str) -> str:
  scheme, sep, rest = path.rpartition("://")
  parent = posixpath.dirname(rest.rstrip("/"))
  return scheme + sep + parent if parent else ("" if not sep else path)


def _existing_ancestor(path: str) -> str:
  """The nearest of `path` and its parents that exists ("" for a relative
  path none of whose parents exist: the working directory)."""
  while path and not tf.io.gfile.exists(path):
    parent = _parent(path)
    if parent == path:
      break
    path = parent
  return path


def _can_write_in(directory: str) -> Optional[str]:
  """None if a file can be created in `directory`, else why not (a probe file,
  removed at once: permission bits say nothing for root, or on a remote store)."""
  probe = posixpath.join(directory or ".", f".write-check-{uuid.uuid4().hex[:12]}")
  try:
    with tf.io.gfile.GFile(probe, "w") as f:
      f.write("")
    tf.io.gfile.remove(probe)
  except tf.errors.OpError as e:
    return _one_line(e.message)
  return None


def _check_writable_dir(directory: str, what: str) -> None:
  """`directory` (or the nearest parent that exists, where it is created) takes new files."""
  if tf.io.gfile.exists(directory):
    if not tf.io.gfile.isdir(directory):
      raise errors.UserError(f"{directory} is a file, where a directory is expected", what)
    existing = directory
  else:
    existing = _existing_ancestor(_parent(directory))
    if existing and not tf.io.gfile.isdir(existing):
      raise errors.UserError(f"cannot create {directory}: {existing} is a file", what)
  problem = _can_write_in(existing)
  if problem:
    raise errors.UserError(f"cannot write in {existing or '.'}: {problem}", what)


# File systems a path names by scheme; "gs:/b" or "gs//b" is one of them misspelt,
# which TensorFlow would take for a local directory of that name.
_SCHEMES = ("gs", "s3", "hdfs", "ram", "file", "http", "https")
_MISSPELT_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)(:/?|//)(?!/)(.*)$", re.DOTALL)
# What a shell expands, and a path keeps when it did not: ~ (at the start), $NAME,
# ${NAME}, $(command), `command`.
_SHELL_EXPANSION = re.compile(r"^~|\$\{[^}]*\}|\$\([^)]*\)|\$[A-Za-z_][A-Za-z0-9_]*|`[^`]*`")


def check_form(path: str, what: Optional[str] = None) -> None:
  """Refuses a path that is not what it looks like: a file system's scheme misspelt
  (gs:/bucket, gs//bucket), or a shell expansion that did not happen ($HOME,
  ${GLUE_DIR}, ~, $(...)), each of which would become a local directory of
  that strange name. Touches no file system.

  Raises:
    errors.UserError: `what: the problem; the likely path`.
  """
  what = what or path
  match = _MISSPELT_SCHEME.match(path)
  if match and match.group(1).lower() in _SCHEMES and "://" not in path:
    scheme, _, rest = match.groups()
    raise errors.UserError(
        f"{path[:len(scheme) + len(match.group(2))]!r} is no file system's prefix: "
        f"likely {scheme.lower()}://{rest.lstrip('/')}", what)
  expansion = _SHELL_EXPANSION.search(path)
  if expansion:
    likely = os.path.expanduser(os.path.expandvars(path))
    # This process's environment may not be the shell's: "likely", not "is".
    hint = (f"likely {likely}" if not _SHELL_EXPANSION.search(likely)
            else "give the path itself")
    raise errors.UserError(
        f"{expansion.group(0)!r} is for a shell to expand, but none did (a path in single "
        f"quotes, or from a file or a notebook): {hint}", what)


def check(path: str, kind: str, what: Optional[str] = None) -> None:
  """Refuses `path` if it cannot be what `kind` says (module docstring), or is not
  what it looks like (check_form).

  Args:
    what: where the path came from, for the message (default: the path).
  Raises:
    errors.UserError: `what: the problem`.
  """
  what = what or path
  check_form(path, what)
  check_reachable(path, what)
  exists = tf.io.gfile.exists(path)
  if kind == INPUT_FILE:
    if not exists:
      raise errors.UserError("file not found", what)
    if tf.io.gfile.isdir(path):
      raise errors.UserError("a directory, where a file is expected", what)
  elif kind == INPUT_DIR:
    if not exists:
      raise errors.UserError("directory not found", what)
    if not tf.io.gfile.isdir(path):
      raise errors.UserError("a file, where a directory is expected", what)
  elif kind == INPUT_FILE_OR_DIR:
    if not exists:
      raise errors.UserError("not found", what)
  elif kind == CHECKPOINT:
    # Which files of a checkpoint exist is checkpoints.checkpoint_io's to say.
    if not exists and not tf.io.gfile.exists(path + ".index"):
      raise errors.UserError(
          f"checkpoint not found (no {posixpath.basename(path.rstrip('/'))}.index)", what)
  elif kind == OUTPUT_DIR:
    if exists and not tf.io.gfile.isdir(path):
      raise errors.UserError("a file, where a directory is expected", what)
    _check_writable_dir(path, what)
  elif kind == OUTPUT_FILE:
    if exists and tf.io.gfile.isdir(path):
      raise errors.UserError("a directory, where a file is expected", what)
    _check_writable_dir(_parent(path) or ".", what)
  else:
    raise ValueError(f"unknown kind of path {kind!r}; one of {KINDS}")


def check_output_dir(path: str, overwrite: bool, what: Optional[str] = None,
                     flag: str = "--overwrite") -> None:
  """The rule of every command that writes a directory of its own: a directory
  that already holds files is refused unless `overwrite`, and even then the
  command replaces only its own files there (file_io.AtomicDirectory keeps the
  others). Checked before any work, so that a long run does not fail at the end.

  Raises:
    errors.UserError: `what: not empty; pass --overwrite ...`.
  """
  if overwrite or not tf.io.gfile.isdir(path) or not tf.io.gfile.listdir(path):
    return
  raise errors.UserError(f"not empty; pass {flag} to replace what this command writes "
                         f"there (its other files are kept)", what or path)
