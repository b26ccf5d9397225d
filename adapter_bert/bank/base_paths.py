"""How a bank records its base's paths so that it can move, and reads them again.

A path is recorded relative to the bank's directory where the two share a root
(one tree below the file system's root, or one bucket), so that a bank copied
with its base finds it in its new place; a URL (https:// hub handles), another
bucket or scheme, or a tree that shares only "/" with the bank keeps its
absolute form (adapter_bank's module docstring says how a moved bank reads it).
"""

import os
import posixpath
from typing import Optional


def split_url(path: str):
  """scheme, bucket (or host) and the path in it ("/..." or "") of a URL."""
  scheme, _, rest = path.partition("://")
  bucket, slash, inside = rest.partition("/")
  return scheme, bucket, slash + inside


def relative_to_bank(path: Optional[str], bank_dir: str) -> Optional[str]:
  """How bank.json records `path` (absolute, or a URL): relative to the bank where the
  two share a root (module docstring), with "/" between its parts; else as it is."""
  if not path:
    return path
  if "://" in path or "://" in bank_dir:
    if "://" not in path or "://" not in bank_dir:
      return path
    scheme, bucket, inside = split_url(path)
    bank_scheme, bank_bucket, bank_inside = split_url(bank_dir)
    if scheme in ("http", "https") or (scheme, bucket) != (bank_scheme, bank_bucket):
      return path
    return posixpath.relpath(inside or "/", bank_inside or "/")
  path, bank = os.path.abspath(path), os.path.abspath(bank_dir)
  try:
    common = os.path.commonpath([path, bank])
  except ValueError:  # Another drive.
    return path
  if os.path.dirname(common) == common:  # Nothing in common but the file system's root.
    return path
  return os.path.relpath(path, bank).replace(os.sep, "/")


def resolve_in_bank(recorded: Optional[str], bank_dir: str) -> Optional[str]:
  """A path as bank.json records it, for reading: a relative one joined to bank_dir."""
  if not recorded or "://" in recorded or os.path.isabs(recorded):
    return recorded
  if "://" in bank_dir:
    scheme, bucket, inside = split_url(bank_dir)
    return (f"{scheme}://{bucket}"
            + posixpath.normpath(posixpath.join(inside or "/", recorded)))
  return os.path.normpath(os.path.join(os.path.abspath(bank_dir), recorded))


def bank_place(bank_dir: str) -> str:
  return bank_dir if "://" in bank_dir else os.path.abspath(bank_dir)
