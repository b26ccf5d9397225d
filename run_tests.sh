#!/usr/bin/env bash
# Installs what the project needs (into .venv) and runs the test suite.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/install.sh
# Two pytest-xdist workers, each test file whole in one of them (its module
# fixtures are built once): one process leaves the second core mostly idle,
# since a tiny model's steps are Python-bound. PYTEST_WORKERS=0 runs the suite
# in this one process.
exec .venv/bin/python -m pytest -q -n "${PYTEST_WORKERS:-2}" --dist loadfile "$@"
