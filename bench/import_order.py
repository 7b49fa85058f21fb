"""Which import order breaks `import torch` on the GPU machine (seen twice on the H200 under pytest:
"expected ident but found ')'" from torch's schema parser). Each case runs in a fresh process and prints one row."""
import subprocess
import sys

CASES = {
    "torch alone": "import torch",
    "jax then torch": "import jax, jax.numpy as jnp; jnp.ones(3).block_until_ready(); import torch",
    "pallas mgpu then torch": "import jax; from jax.experimental.pallas import mosaic_gpu; import torch",
    "cuda-python then torch": "from cuda.bindings import driver, nvrtc; import torch",
    "schedgen runtime then torch": "import schedgen.runtime, schedgen.bench.case; import torch",
    "cupy then torch": "import cupy; cupy.ones(3); import torch",
    "pytest plugins then torch": "import pytest, numpy; import jax; from cuda.bindings import driver; import cupy; import torch",
}
for name, code in CASES.items():
    p = subprocess.run([sys.executable, "-c", code + "; print(torch.__version__)"], capture_output=True, text=True,
                       timeout=120)
    err = (p.stderr.strip().splitlines() or [""])[-1][:150]
    print(f"{name:32s} rc {p.returncode}  {p.stdout.strip()[:20]}  {err}", flush=True)
