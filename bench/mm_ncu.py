"""Profile one matmul spec's CUDA and Pallas kernels (for ncu): build, warm up, launch each a few times.

    ncu --clock-control none -k regex:matmul --section SpeedOfLight --section WarpStateStats \\
        python3 bench/mm_ncu.py specs/matmul_bf16_4096.yaml
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    import torch
    from schedgen.build import build_spec, package
    from schedgen.runtime.kernel import load_package
    spec = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "specs/matmul_bf16_4096.yaml")
    built = build_spec(spec)
    k = load_package(package(built, Path(tempfile.mkdtemp())))
    p = built.plan
    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    ins = [torch.randn(tuple(o.shape), device="cuda", dtype=dt[o.dtype]) for o in p.inputs]
    out = torch.empty(tuple(p.outputs[0].shape), device="cuda", dtype=dt[p.out_dtype])
    go = k.prepare(ins, [out], stream=torch.cuda.current_stream().cuda_stream)
    for _ in range(3):
        go()
    torch.cuda.synchronize()
    if "pallas" in p.backends:
        import jax
        import jax.numpy as jnp
        xs = [jnp.asarray(t.float().cpu().numpy()).astype(jnp.bfloat16 if o.dtype == "bf16" else jnp.float16)
              for t, o in zip(ins, p.inputs)]
        fn = jax.jit(getattr(k.pallas_module(), p.name))
        for _ in range(3):
            fn(*xs).block_until_ready()
    print("done", p.kernel_name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
