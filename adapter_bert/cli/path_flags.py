"""The path flags of a command, checked before anything is read or written.

A command names what each of its path flags must be (storage.path_checks'
kinds) and checks them first thing in `main`, so that a file given for a
directory, a missing input, an output that cannot be written or a file system
that does not answer ends in one line naming the flag and its value:

  ERROR: flag --output_dir=/tmp/out: a file, where a directory is expected

With --use_tpu on a TPU Node (a grpc:// address), a local path is refused
first, whatever its kind: the TPU's host reads and writes buckets only.

Not at parse time (as cli/flag_checks' checks): these touch the file system,
which absl's validators would do again whenever a flag is set.
"""

import os
import posixpath
from typing import Iterable, Mapping, Optional, Sequence

from adapter_bert import errors
from adapter_bert.runtime import distribution
from adapter_bert.storage import path_checks

# --bert_hub_module_handle: a URL is the hub loader's to fetch; anything else a directory.
HUB_HANDLE = "hub_handle"


def _kind(path: str, kind: str) -> Optional[str]:
  if kind == HUB_HANDLE:
    return None if path.startswith(("http://", "https://")) else path_checks.INPUT_DIR
  return kind


def check_path_flags(flag_values, kinds: Mapping[str, str],
                     relative_to: Optional[str] = None) -> None:
  """Checks each given flag of `kinds` (name -> path_checks kind); a list flag
  (a comma list of paths) has each of its paths checked.

  Args:
    relative_to: the directory that relative paths are taken from, where the
      command does not use the working directory.

  Raises:
    errors.UserError: "flag --NAME=PATH: the problem", for the first bad one.
  """
  check_tpu_node_paths(flag_values, kinds)
  for name, kind in kinds.items():
    value = flag_values[name].value
    for path in _paths(value):
      if _kind(path, kind):
        local = "://" not in path and not posixpath.isabs(path)
        full = posixpath.join(relative_to, path) if relative_to and local else path
        path_checks.check(full, _kind(path, kind), f"flag --{name}={path}")


def _paths(value) -> Sequence[str]:
  return [p for p in (value if isinstance(value, (list, tuple)) else [value]) if p]


def check_tpu_node_paths(flag_values, names: Iterable[str]) -> None:
  """With --use_tpu on a TPU Node (a grpc:// address), no path flag of `names`
  is a local path: the TPU's host, not this machine, runs the ops that read
  the checkpoints and records and write the outputs, and it reaches buckets
  only. A TPU VM's own TPU (--tpu_name=local) reads local files.

  Raises:
    errors.UserError: "flag --NAME=PATH: a local path, ...", for the first one.
  """
  if "use_tpu" not in flag_values or not flag_values["use_tpu"].value:
    return
  try:
    target = distribution.find_tpu(flag_values["tpu_name"].value,
                                   flag_values["master"].value, os.environ,
                                   distribution.device_files())
  except errors.UserError:
    return  # No TPU found: create_strategy says so, naming --tpu_name.
  if not target.remote:
    return
  for name in names:
    for path in _paths(flag_values[name].value):
      if "://" not in path:
        raise errors.UserError(
            f"flag --{name}={path}: a local path, but the TPU is a TPU Node "
            f"({target.flag}), which reads and writes gs:// buckets only: copy it to a "
            "bucket and give its gs:// path, or run on a TPU VM (--tpu_name=local)")
