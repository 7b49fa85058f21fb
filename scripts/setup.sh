#!/usr/bin/env bash
# Create .venv with Python >= 3.12 (JAX 0.11 needs it) and install schedgen with the Pallas and test extras:
# jax with its CUDA 13 plugin on a machine with an NVIDIA GPU (`pallas`), CPU-only jax elsewhere (`pallas-cpu`);
# then torch (the torch extra: the custom-op tests). SCHEDGEN_NO_TORCH=1 skips torch; the tune-cluster extra (Ray)
# unless SCHEDGEN_NO_RAY=1.
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
# tune-cluster: Ray, for `schedgen tune --ray` and tests/tune/test_ray.py (a local Ray instance on the CPU);
# SCHEDGEN_NO_RAY=1 leaves it out (that test then skips)
EXTRAS="$JAX_EXTRA,test,report"; if [ -z "${SCHEDGEN_NO_RAY:-}" ]; then EXTRAS="$EXTRAS,tune-cluster"; fi
"$VENV/bin/python" -m pip install -q -e ".[$EXTRAS]"

# torch: every torch wheel on PyPI pins the CUDA 13.0 wheels (cuda-toolkit==13.0.3), which would replace the NVRTC
# that schedgen builds with (cuda-toolkit above, 13.5 today) and so change what the SASS tests see. So torch goes in
# without its dependencies, then those dependencies at torch's pins except the toolkit pieces already installed
# (NVRTC, cudart, nvJitLink: newer minor versions of CUDA 13, which torch's libraries load). Only `import torch` on
# the CPU needs them here (the tests use meta and fake tensors). Pinned together: bump TORCH and the list as one.
# (pip then reports that torch wants cuda-toolkit==13.0.3: expected, and harmless for the reason above.)
# On a GPU machine jax's CUDA plugin (the pallas extra) has installed newer CUDA libraries than torch's pins: there the
# pins are lower bounds, so that nothing of jax's is downgraded.
TORCH="torch==2.14.1"
PIN="=="; if [ "$JAX_EXTRA" = pallas ]; then PIN=">="; fi
TORCH_DEPS=("triton==3.8.0" "sympy>=1.13.3" "networkx>=2.5.1" "filelock" "fsspec>=0.8.5" "setuptools>=77.0.3"
  "typing-extensions>=4.10" "nvidia-cudnn-cu13${PIN}9.24.0.43" "nvidia-cusparselt-cu13${PIN}0.8.1"
  "nvidia-nccl-cu13${PIN}2.30.7" "nvidia-nvshmem-cu13${PIN}3.4.5" "nvidia-cublas${PIN}13.1.1.3"
  "nvidia-cuda-cupti${PIN}13.0.85" "nvidia-cufft${PIN}12.0.0.61" "nvidia-cufile${PIN}1.15.1.6"
  "nvidia-curand${PIN}10.4.0.35" "nvidia-cusolver${PIN}12.0.4.66" "nvidia-cusparse${PIN}12.6.3.3"
  "nvidia-nvtx${PIN}13.0.85")
if [ -z "${SCHEDGEN_NO_TORCH:-}" ]; then
  if ! "$VENV/bin/python" -c 'import torch' >/dev/null 2>&1; then
    # torch and its CUDA libraries take about 5.5 GB in the venv: say so up front rather than fail half-way with
    # pip's "No space left on device" (a CI run on 2026-12-06 did, on a disk filled by old checkouts)
    free_kb=$(df -Pk "$VENV" | awk 'NR==2 {print $4}')
    if [ "${free_kb:-0}" -lt 6500000 ]; then
      echo "setup: only $((free_kb / 1024)) MiB free on the disk of $VENV; torch needs about 6 GB" \
        "(free some space, or SCHEDGEN_NO_TORCH=1 to leave torch out: its tests then skip)" >&2
      exit 1
    fi
    echo "installing $TORCH (torch extra)"
    "$VENV/bin/python" -m pip install -q --no-deps "$TORCH"
    "$VENV/bin/python" -m pip install -q "${TORCH_DEPS[@]}"
  fi
  "$VENV/bin/python" -c 'import torch' || { echo "torch does not import after install" >&2; exit 1; }
fi
echo "installed: $("$VENV/bin/schedgen" --help >/dev/null && echo schedgen) into $VENV"
