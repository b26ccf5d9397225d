"""The README's two commands on a machine whose python3 is 3.11, 3.12 or 3.13.

scripts/install.sh makes .venv from python3 (or $PYTHON). CI installs and runs the
suite on 3.13 (Colab's runtimes) and the TPU pin set on 3.12 (.ci/run); here pip
resolves requirements.txt in a venv of each of 3.11 and 3.12 (pyenv's, or on PATH), so
a pin without a wheel for one of them fails. Skipped when an interpreter is missing or
the package registry cannot be reached.
"""

import json
import os
import re
import shutil
import subprocess
import sys

from packaging.utils import canonicalize_name
import pytest

import interpreters

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pins():
  with open(os.path.join(ROOT, "requirements.txt"), encoding="utf-8") as f:
    return {canonicalize_name(k): v
            for k, v in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", f.read(), re.M)}


@pytest.fixture(scope="module")
def resolutions(tmp_path_factory):
  """{version: pip's report of requirements.txt resolved in a venv of that Python}."""
  pythons = {v: interpreters.find(v) for v in ("3.11", "3.12")}
  if not all(pythons.values()):
    pytest.skip(f"no Python 3.11 and 3.12 here: {pythons}")
  tmp = tmp_path_factory.mktemp("python_versions")
  started = {}
  for version, python in pythons.items():
    venv, report = tmp / version, tmp / f"{version}.json"
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True)
    # The suite's pip (scripts/install.sh upgrades a venv's pip before it installs the
    # requirements, so the newest pip resolves them), run by the venv's Python
    # (--python): the wheels it picks are for that Python. Faster than the venv's
    # bundled pip, which would also have to be installed into it first.
    started[version] = (subprocess.Popen(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
         "--dry-run", "--ignore-installed", "--quiet", "--retries", "0", "--timeout", "60",
         "--report", str(report), "-r", os.path.join(ROOT, "requirements.txt")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), report)
  reports = {}
  for version, (process, report) in started.items():
    output = process.communicate(timeout=900)[0]
    if process.returncode and "NewConnectionError" in output:
      pytest.skip("the package registry cannot be reached")
    assert process.returncode == 0, output[-3000:]
    reports[version] = json.loads(report.read_text())
  return reports


@pytest.mark.parametrize("version", ["3.11", "3.12"])
def test_every_pin_resolves_for_the_python_of_the_venv(resolutions, version):
  report = resolutions[version]
  assert report["environment"]["python_version"] == version
  resolved = {canonicalize_name(e["metadata"]["name"]): e["metadata"]["version"]
              for e in report["install"]}
  assert {name: resolved.get(name) for name in _pins()} == _pins()


def test_install_sh_refuses_another_python_in_one_line(tmp_path):
  fake = tmp_path / "python"
  fake.write_text("#!/usr/bin/env bash\necho 3.10\n")
  fake.chmod(0o755)
  checkout = tmp_path / "checkout"
  (checkout / "scripts").mkdir(parents=True)
  shutil.copy(os.path.join(ROOT, "scripts", "install.sh"), checkout / "scripts")
  done = subprocess.run(["bash", str(checkout / "scripts" / "install.sh")], capture_output=True,
                        text=True, env=dict(os.environ, PYTHON=str(fake)), check=False)
  assert done.returncode == 1 and not (checkout / ".venv").exists()
  assert done.stderr == (f"{fake} is Python 3.10; the pinned requirements are for 3.11 to "
                         "3.13: set PYTHON to one, e.g. PYTHON=python3.13 bash run_tests.sh\n")
