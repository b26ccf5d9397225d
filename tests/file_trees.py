"""What a directory holds, for the tests that check a command kept a user's files."""

import os


def files_under(directory):
  """Every file under `directory` (relative path -> bytes)."""
  out = {}
  for root, _, names in os.walk(directory):
    for n in names:
      path = os.path.join(root, n)
      with open(path, "rb") as f:
        out[os.path.relpath(path, directory)] = f.read()
  return out
