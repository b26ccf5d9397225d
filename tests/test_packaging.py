"""`pip install .` adds one package, `adapter_bert`, and the original repository's
top-level modules to site-packages: no generic name such as `cli` or `runtime`
that could clash with another library's (Model Garden installs only `official`)."""

import os
import shutil
import subprocess
import sys
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# google-research/bert's table of contents, plus this project's other entry points.
ORIGINAL_MODULES = {"run_classifier", "run_squad", "modeling", "optimization", "tokenization"}
TOP_LEVEL = ORIGINAL_MODULES | {"adapter_layers", "run_multitask", "convert_checkpoint",
                                "manage_bank", "export_savedmodel", "adapter_bert"}


def _built_wheel(tmp_path):
  """Builds the wheel from a copy of the sources (a build writes build/ and
  *.egg-info beside the sources); returns the zip's top-level names."""
  src = tmp_path / "src"
  shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
      ".git", ".venv*", "tests", "docs", "data", "output", "models", "__pycache__"))
  subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                  "--no-build-isolation", "-w", str(tmp_path / "wheel"), str(src)],
                 check=True, capture_output=True)
  (wheel,) = os.listdir(tmp_path / "wheel")
  with zipfile.ZipFile(tmp_path / "wheel" / wheel) as z:
    names = {n.split("/")[0] for n in z.namelist()}
  return {n[:-3] if n.endswith(".py") else n for n in names if ".dist-info" not in n}


def test_the_wheel_installs_one_package_and_the_original_modules(tmp_path):
  assert _built_wheel(tmp_path) == TOP_LEVEL


def test_every_source_file_of_the_package_is_in_a_package():
  """A folder under adapter_bert/ without __init__.py would be left out of the wheel."""
  for root, dirs, files in os.walk(os.path.join(REPO, "adapter_bert")):
    dirs[:] = [d for d in dirs if d != "__pycache__"]
    if any(f.endswith(".py") for f in files):
      assert "__init__.py" in files, root


def test_the_top_level_is_the_table_of_contents():
  """Every .py file at the top level is one that the wheel installs."""
  modules = {n[:-3] for n in os.listdir(REPO) if n.endswith(".py")}
  assert modules == TOP_LEVEL - {"adapter_bert"}
