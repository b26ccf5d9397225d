"""scripts/install_tpu.sh, the one install command for a Cloud TPU VM, resolved by pip.

The script runs with a stand-in for Python whose `pip install` is pip's own dry run
(`--dry-run --ignore-installed --report`: the resolution into an empty environment,
nothing installed), so what is checked is the resolution of the script's own commands:
tensorflow-tpu and libtpu are in it, plain `tensorflow` is not, and every dependency of
the packages installed with --no-deps is met by what the other commands install.
Skipped when the package registry cannot be reached.
"""

import json
import os
import re
import subprocess
import sys
import time

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "install_tpu.sh")

# Stands in for `python`: `-m pip install ARGS` becomes pip's dry run of ARGS, its report
# numbered in the order the script runs them; `-m pip show` answers "not installed"
# unless SHOW_INSTALLED=1; with DRY=0 an install only records its arguments. The TPU
# check (scripts/check_tpu.py) records the TPU_LOAD_LIBRARY it was given and exits with
# CHECK_STATUS. The dry runs go on in the background, each writing its exit status when
# it ends: they wait on the registry, and none needs another's result.
_FAKE_PYTHON = """#!/usr/bin/env bash
if [ "$1 $2 $3" = "-m pip install" ]; then
  shift 3
  n=$(ls "$REPORT_DIR" | grep -c '\\.args$' || true)
  printf '%s\\n' "$@" > "$REPORT_DIR/$n.args"
  [ "$DRY" = 1 ] || exit 0
  status="$REPORT_DIR/$n.status"
  # The project itself: nothing to resolve.
  [ "$*" = "-q --no-deps -e ." ] && { echo 0 > "$status"; exit 0; }
  # Without retries first: each host that cannot be reached (Google's libtpu page, here)
  # costs a retry's back-off of seconds; a failure is tried once more with them.
  dry_run() {
    "$REAL_PYTHON" -m pip install --dry-run --ignore-installed --quiet --timeout 60 \\
        --retries "$1" --report "$REPORT_DIR/$n.json" "${@:2}" 2> "$REPORT_DIR/$n.err"
  }
  ( (dry_run 0 "$@" || dry_run 2 "$@")
   echo $? > "$status.part" && mv "$status.part" "$status") > /dev/null &
  exit 0
fi
if [ "$1 $2 $3" = "-m pip show" ]; then
  [ "$SHOW_INSTALLED" = 1 ]; exit
fi
if [ "$1" = "scripts/check_tpu.py" ]; then
  echo "TPU_LOAD_LIBRARY=${TPU_LOAD_LIBRARY-unset}" > "$REPORT_DIR/check"
  exit "$CHECK_STATUS"
fi
echo "unexpected: $*" >&2; exit 99
"""


def _run_script(tmp_path, dry, show_installed=False, check_status=0, environ=None):
  fake = tmp_path / "python"
  fake.write_text(_FAKE_PYTHON)
  fake.chmod(0o755)
  reports = tmp_path / "reports"
  reports.mkdir()
  env = dict(environ or os.environ, REAL_PYTHON=sys.executable, REPORT_DIR=str(reports),
             DRY="1" if dry else "0", SHOW_INSTALLED="1" if show_installed else "0",
             CHECK_STATUS=str(check_status))
  result = subprocess.run(["bash", SCRIPT, str(fake)], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
  steps = []
  for n in range(len(list(reports.glob("*.args")))):
    args = (reports / ("%d.args" % n)).read_text().splitlines()
    if dry:
      status = reports / ("%d.status" % n)
      _wait_for(status, deadline=time.time() + 600)
      assert status.read_text() == "0\n", (args, (reports / ("%d.err" % n)).read_text()[-3000:])
    report = reports / ("%d.json" % n)
    steps.append((args, json.loads(report.read_text())["install"] if report.exists() else None))
  return result, steps


def _wait_for(path, deadline):
  while not path.exists():
    assert time.time() < deadline, f"no {path.name} in time"
    time.sleep(0.2)


def _registry_reachable():
  probe = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "tensorflow-tpu",
                          "--timeout", "5", "--retries", "0"],
                         capture_output=True, text=True, timeout=60, check=False)
  return probe.returncode == 0 and "2.19.1" in probe.stdout


@pytest.fixture(scope="module")
def resolution(tmp_path_factory):
  """[(pip arguments, [installed distributions' report entries])] per pip install of the script."""
  if not _registry_reachable():
    pytest.skip("the package registry cannot be reached (pip index versions tensorflow-tpu "
                "failed): the TPU install resolution needs it")
  tmp_path = tmp_path_factory.mktemp("tpu_install")
  result, steps = _run_script(tmp_path, dry=True)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  assert (tmp_path / "reports" / "check").exists()
  return steps


def _versions(entries):
  return {canonicalize_name(e["metadata"]["name"]): Version(e["metadata"]["version"])
          for e in entries}


def test_the_script_installs_tensorflow_tpu_and_libtpu_and_never_plain_tensorflow(resolution):
  (first_args, first), (no_deps_args, no_deps), (minilm_args, _), (project_args, _) = resolution
  assert "--no-deps" not in first_args and first_args[-2:] == ["-r", "requirements-tpu.txt"]
  assert "--no-deps" in no_deps_args and no_deps_args[-1] == "requirements-tpu-no-deps.txt"
  assert "--no-deps" in minilm_args
  assert project_args == ["-q", "--no-deps", "-e", "."]
  # The public TF-on-TPU-VM recipes' build (Keras' TPU CI, the Keras RS TPU example) and
  # the libtpu it asks for: tensorflow-tpu 2.19.1's metadata says libtpu==0.0.10.
  first_versions = _versions(first)
  assert first_versions["tensorflow-tpu"] == Version("2.19.1")
  assert first_versions["libtpu"] == Version("0.0.10")
  tpu = next(e for e in first if canonicalize_name(e["metadata"]["name"]) == "tensorflow-tpu")
  assert "libtpu==0.0.10" in [r.replace(" ", "") for r in tpu["metadata"]["requires_dist"]]
  every = [e for _, entries in resolution for e in entries or ()]
  assert "tensorflow" not in _versions(every)
  assert set(_versions(no_deps)) == {"tensorflow-text", "tf-models-official", "tf-keras",
                                     "tensorflow-hub", "tensorflow-model-optimization"}


def test_the_script_names_googles_libtpu_wheels_for_tensorflow():
  # As the public recipes install tensorflow-tpu: pip also looks there (and here, where
  # it cannot reach the page, takes libtpu 0.0.10 from PyPI).
  with open(os.path.join(ROOT, "requirements-tpu.txt"), encoding="utf-8") as f:
    lines = f.read().splitlines()
  assert "--find-links https://storage.googleapis.com/libtpu-tf-releases/index.html" in lines


def test_what_goes_in_without_dependencies_has_them_all(resolution):
  """Every requirement of the --no-deps packages is met by the resolution, plain
  `tensorflow` by tensorflow-tpu (the same module); a missing one would be missing on the
  TPU VM, where pip does not install it."""
  installed = _versions(e for _, entries in resolution for e in entries or ())
  provided = dict(installed, tensorflow=installed["tensorflow-tpu"])
  unmet = []
  for entry in resolution[1][1]:
    for line in entry["metadata"].get("requires_dist") or []:
      requirement = Requirement(line)
      if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
        continue
      version = provided.get(canonicalize_name(requirement.name))
      if version is None or not requirement.specifier.contains(version, prereleases=True):
        unmet.append("%s needs %s, resolved: %s" % (entry["metadata"]["name"], line, version))
  assert not unmet
  # ... and each of them needs plain tensorflow, itself or through another of them,
  # or it would not need --no-deps.
  no_deps = _versions(resolution[1][1])
  for entry in resolution[1][1]:
    assert any(not Requirement(r).marker and
               canonicalize_name(Requirement(r).name) in {"tensorflow", *no_deps}
               for r in entry["metadata"]["requires_dist"]), entry["metadata"]["name"]


def _pins(name):
  with open(os.path.join(ROOT, name), encoding="utf-8") as f:
    return {canonicalize_name(k): v
            for k, v in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", f.read(), re.M)}


# What follows TensorFlow's release: tensorflow-text and tf-models-official ask for
# ~=2.19.0, tf-keras is released with it, and tensorflow 2.19 asks for numpy<2.2.
_TENSORFLOW_BOUND = {"tensorflow", "tensorflow-text", "tf-models-official", "tf-keras",
                     "numpy"}


def test_the_tpu_pins_are_tensorflow_2_19s_and_otherwise_those_of_requirements_txt():
  cpu = _pins("requirements.txt")
  tpu = {**_pins("requirements-tpu.txt"), **_pins("requirements-tpu-no-deps.txt")}
  tpu["tensorflow"] = tpu.pop("tensorflow-tpu")
  assert tpu.pop("libtpu") == "0.0.10"
  # Pinned for --no-deps (as tf-models-official resolves with requirements.txt).
  assert tpu.pop("tensorflow-model-optimization")
  assert {k: tpu[k] for k in _TENSORFLOW_BOUND} == {
      "tensorflow": "2.19.1", "tensorflow-text": "2.19.0", "tf-models-official": "2.19.1",
      "tf-keras": "2.19.0", "numpy": "2.1.3"}
  assert cpu["tensorflow"] == "2.20.0"  # The CPU default (docs/tpu.md says why).
  assert ({k: v for k, v in tpu.items() if k not in _TENSORFLOW_BOUND} ==
          {k: v for k, v in cpu.items() if k not in _TENSORFLOW_BOUND})


def test_the_script_ends_with_the_tpu_check_in_a_process_that_may_load_the_tpu(tmp_path):
  # A notebook's kernel runs the script with TPU_LOAD_LIBRARY=0 (it leaves the TPU to its
  # children): the check is such a child, and its failure is the script's.
  environ = dict(os.environ, TPU_LOAD_LIBRARY="0")
  result, steps = _run_script(tmp_path, dry=False, environ=environ)
  assert result.returncode == 0 and len(steps) == 4, result.stderr
  assert (tmp_path / "reports" / "check").read_text() == "TPU_LOAD_LIBRARY=unset\n"
  (tmp_path / "failing").mkdir()
  result, _ = _run_script(tmp_path / "failing", dry=False, check_status=1, environ=environ)
  assert result.returncode == 1


def test_the_script_stops_when_plain_tensorflow_is_installed(tmp_path):
  # E.g. a runtime that came with it: tensorflow-tpu's files would be overwritten.
  result, steps = _run_script(tmp_path, dry=False, show_installed=True)
  assert result.returncode == 1 and len(steps) == 4
  assert not (tmp_path / "reports" / "check").exists()
  assert ("plain tensorflow is installed beside tensorflow-tpu; remove both and rerun: "
          in result.stderr)
  assert "pip uninstall -y tensorflow tensorflow-tpu" in result.stderr
  (tmp_path / "fresh").mkdir()
  result, steps = _run_script(tmp_path / "fresh", dry=False)
  assert result.returncode == 0 and len(steps) == 4, result.stderr
