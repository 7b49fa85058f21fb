#!/usr/bin/env bash
# Create .venv with Python >= 3.12 (JAX 0.11 needs it) and install schedgen with the Pallas and test extras:
# jax with its CUDA 13 plugin on a machine with an NVIDIA GPU (`pallas`), CPU-only jax elsewhere (`pallas-cpu`).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${SCHEDGEN_VENV:-.venv}

find_python() {
  # (pyenv shims exist for versions that are not selected: check that a candidate really runs)
  for cand in python3.12 python3.13; do
    if "$cand" -c 'import sys' >/dev/null 2>&1; then command -v "$cand"; return; fi
  done
  if command -v pyenv >/dev/null 2>&1; then
    for dir in "$(pyenv root)"/versions/3.12* "$(pyenv root)"/versions/3.13*; do
      if [ -x "$dir/bin/python3" ]; then echo "$dir/bin/python3"; return; fi
    done
  fi
  if python3 -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then command -v python3; return; fi
  echo "schedgen needs Python >= 3.12 (JAX 0.11); none found (tried python3.13, python3.12, pyenv, python3)" >&2
  exit 1
}

if [ ! -x "$VENV/bin/python" ]; then
  PY=$(find_python)
  echo "creating $VENV with $($PY --version)"
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then JAX_EXTRA=pallas; else JAX_EXTRA=pallas-cpu; fi
"$VENV/bin/python" -m pip install -q -e ".[$JAX_EXTRA,test,report]"
echo "installed: $("$VENV/bin/schedgen" --help >/dev/null && echo schedgen) into $VENV"
