"""The repository names no absolute path of a machine that worked on it.

A run's output directory, a checkout, a user's home, an installed package or a
temporary directory a test made belong to the machine that ran them; a
committed page or record shows a placeholder instead (OUTPUT_DIR, PAGE, a path
relative to the repository). Documented examples of the original's kind
(`--output_dir=/tmp/mrpc_output/`) name no machine's directory and are allowed.
"""

import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MACHINE_PATH = re.compile(
    r"(?<![\w.~-])/(?:work|root|home|Users|opt)/[\w.-]"  # a workspace, a home, /opt
    r"|site-package[s]/"                                  # an installed package
    r"|/tmp/(?:pytest-of-|tmp\w{6})"                      # a test's temporary directory
    r"|--work-[\w-]")                                     # /work/... folded into a name


def machine_paths(text: str):
  """(line number, the match) of each line of `text` that names a machine's path."""
  return [(number, found.group(0)) for number, line in enumerate(text.splitlines(), 1)
          if (found := MACHINE_PATH.search(line))]


def test_the_pattern_tells_machine_paths_from_documented_examples():
  assert machine_paths("--output_dir=/work/study-runs/study\nok\n/root/.cache/x\n"
                       "/usr/lib/python3/site-packages/tf\n/tmp/pytest-of-root/p0\n"
                       "adapter_bank--work-study-runs-fusion") == [
      (1, "/work/s"), (3, "/root/."), (4, "site-packages/"), (5, "/tmp/pytest-of-"),
      (6, "--work-s")]
  assert machine_paths("--output_dir=/tmp/mrpc_output/ $HOME/x ~/work/y a/work/b "
                       "OUTPUT_DIR/methods gs://bucket/home/x") == []


def test_no_tracked_file_names_a_machine_path():
  names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                         check=True).stdout.decode().split("\0")
  hits = []
  for name in filter(None, names):
    if name == "tests/test_repository.py":  # Its examples are machine paths on purpose.
      continue
    path = os.path.join(ROOT, name)
    if not os.path.isfile(path):  # Deleted in the work tree, not yet in the index.
      continue
    with open(path, "rb") as f:
      data = f.read()
    if b"\0" in data[:8192]:  # Binary (an image, a checkpoint).
      continue
    hits += [f"{name}:{number}: {found}"
             for number, found in machine_paths(data.decode("utf-8", "replace"))]
  assert not hits, "absolute paths of a machine:\n" + "\n".join(hits)
