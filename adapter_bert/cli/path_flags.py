"""The path flags of a command, checked before anything is read or written.

A command names what each of its path flags must be (storage.path_checks'
kinds) and checks them first thing in `main`, so that a file given for a
directory, a missing input, an output that cannot be written or a file system
that does not answer ends in one line naming the flag and its value:

  ERROR: flag --output_dir=/tmp/out: a file, where a directory is expected

Not at parse time (as cli/flag_checks' checks): these touch the file system,
which absl's validators would do again whenever a flag is set.
"""

import posixpath
from typing import Mapping, Optional

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
  for name, kind in kinds.items():
    value = flag_values[name].value
    for path in value if isinstance(value, (list, tuple)) else [value]:
      if path and _kind(path, kind):
        local = "://" not in path and not posixpath.isabs(path)
        full = posixpath.join(relative_to, path) if relative_to and local else path
        path_checks.check(full, _kind(path, kind), f"flag --{name}={path}")
