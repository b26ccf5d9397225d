#!/usr/bin/env bash
# Installs what the project needs (into .venv) and runs the test suite.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/install.sh
exec .venv/bin/python -m pytest -q "$@"
