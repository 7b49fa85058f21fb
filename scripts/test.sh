#!/usr/bin/env bash
# Set up if needed, then run the test suite (GPU tests are skipped without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m pytest -q "$@"
