#!/usr/bin/env bash
# This project vs AdapterHub (PyTorch), same shape, same MiniLM, in one run:
# four worker processes (adapters and full fine-tuning of each) timed in
# interleaved rounds; the last lines give this project's examples/s over
# AdapterHub's. Extra arguments go to adapterhub_side_by_side.py, e.g.
#   bash benchmarks/compare_adapterhub.sh --steps=60 --json_out=benchmarks/out/compare.json
# --real_data compares whole adapter-training runs on a real task instead (3
# epochs, seq 128, batch 32, with the dev accuracy; benchmarks/README.md):
#   bash benchmarks/compare_adapterhub.sh --real_data --json_out=benchmarks/out/real.json
# Needs .venv/ (scripts/install.sh) and benchmarks/.venv-adapterhub/ (see
# benchmarks/README.md; installed here on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x benchmarks/.venv-adapterhub/bin/python ]; then
  echo "== Installing AdapterHub into benchmarks/.venv-adapterhub (torch first: the CPU build)"
  python3 -m venv benchmarks/.venv-adapterhub
  benchmarks/.venv-adapterhub/bin/pip install torch==2.13.0
  benchmarks/.venv-adapterhub/bin/pip install -r benchmarks/requirements-adapterhub.txt
elif ! benchmarks/.venv-adapterhub/bin/python -c "import accelerate" 2>/dev/null; then
  echo "== Adding accelerate to benchmarks/.venv-adapterhub (--real_data's Trainer needs it)"
  benchmarks/.venv-adapterhub/bin/pip install -r benchmarks/requirements-adapterhub.txt
fi
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
exec python3 benchmarks/adapterhub_side_by_side.py --with_tf "$@"
