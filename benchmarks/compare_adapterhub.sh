#!/usr/bin/env bash
# This project vs AdapterHub (PyTorch), same shape, same MiniLM, in one run:
# four worker processes (adapters and full fine-tuning of each) timed in
# interleaved rounds; the last lines give this project's examples/s over
# AdapterHub's. Extra arguments go to adapterhub_side_by_side.py, e.g.
#   bash benchmarks/compare_adapterhub.sh --steps=60 --json_out=benchmarks/out/compare.json
# Needs .venv/ (scripts/install.sh) and benchmarks/.venv-adapterhub/ (see
# benchmarks/README.md; installed here on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x benchmarks/.venv-adapterhub/bin/python ]; then
  echo "== Installing AdapterHub into benchmarks/.venv-adapterhub (torch first: the CPU build)"
  python3 -m venv benchmarks/.venv-adapterhub
  benchmarks/.venv-adapterhub/bin/pip install torch==2.13.0
  benchmarks/.venv-adapterhub/bin/pip install -r benchmarks/requirements-adapterhub.txt
fi
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
exec python3 benchmarks/adapterhub_side_by_side.py --with_tf "$@"
