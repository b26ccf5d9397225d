#!/usr/bin/env bash
# Remakes tests/fixtures/interop/ with the real PyTorch libraries: the tiny base,
# then every fixture script here (AdapterHub, PEFT), the PyTorch ones in the venv that
# benchmarks/compare_adapterhub.sh also uses (created here on first use, torch
# first: the CPU build). The test suite only reads the files this writes.
#   bash scripts/interop_fixtures/make.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=benchmarks/.venv-adapterhub
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install torch==2.13.0
fi
"$VENV/bin/pip" install -q -r scripts/interop_fixtures/requirements.txt
export PYTHONHASHSEED=0
"$VENV/bin/python" scripts/interop_fixtures/tiny_base.py
# This project's side first (*_tf.py, in its own .venv: adapters made here and
# exported), then the libraries' (which also load those exports).
for script in scripts/interop_fixtures/*_tf.py; do
  TF_CPP_MIN_LOG_LEVEL=2 .venv/bin/python "$script"
done
for script in scripts/interop_fixtures/*.py; do
  case "$script" in */tiny_base.py|*_tf.py) continue ;; esac
  "$VENV/bin/python" "$script"
done
