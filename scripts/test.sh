#!/usr/bin/env bash
# Set up if needed, then run the test suite (GPU tests are skipped without a GPU), in parallel with pytest-xdist: one
# worker a CPU, at most 8 (SCHEDGEN_TEST_WORKERS=N chooses; 0 runs in this process). Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cpus=$(nproc 2>/dev/null || echo 1)
workers=${SCHEDGEN_TEST_WORKERS:-$(( cpus > 8 ? 8 : (cpus > 1 ? cpus : 0) ))}
.venv/bin/python -m pytest -q -n "$workers" "$@"
