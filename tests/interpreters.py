"""CPython interpreters of given versions on this machine, for the install tests
(tests/test_tpu_install.py, tests/test_python_versions.py)."""

import glob
import os
import shutil
import subprocess
from typing import Optional


def find(version: str) -> Optional[str]:
  """A CPython `version` ("3.12") that runs: on PATH, else one of pyenv's; None if
  there is none (a pyenv shim of a version that is not selected does not run)."""
  root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
  candidates = [shutil.which("python" + version)] + sorted(
      glob.glob(os.path.join(root, "versions", version + ".*", "bin", "python" + version)))
  for candidate in filter(None, candidates):
    done = subprocess.run([candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True, check=False)
    if done.returncode == 0 and done.stdout.strip() == version:
      return candidate
  return None
