"""Where the column-broadcast map kernel goes wrong on the GPU (issue 16: col_row_full at 200 x 640, 40-row blocks,
failed one check on the H200): each backend run on random inputs against the float64 reference, at several block
shapes, and for each wrong output the pattern of the wrong elements (rows mod the block, columns mod the block,
NaN = never written), so the fix aims at the cause.

    python3 bench/diag_columns.py [--save DIR]      (on the GPU machine; --save writes the rendered kernels)
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MIXED = ROOT / "tests" / "data" / "edge" / "col_row_full.yaml"


def variants():
    yield "default 40x128", {}
    for rows, cols in ((8, 128), (8, 64), (40, 64), (20, 128), (50, 128), (100, 64)):
        yield f"{rows}x{cols}", {"schedule.out_specs.o.block_shape": [rows, cols],
                                 "schedule.out_specs.r.block_shape": [rows, cols]}
    yield "40x128 one stage", {"schedule.pipeline.max_concurrent_steps": 1}
    yield "40x128 M=400", {"op.sizes.M": 400}
    yield "40x128 w bf16", {"op.inputs.w.dtype": "bf16"}
    yield "40x128 r bf16", {"op.outputs.r.dtype": "bf16"}
    yield "40x128 w,r bf16", {"op.inputs.w.dtype": "bf16", "op.outputs.r.dtype": "bf16"}


def pattern(out: np.ndarray, ref: np.ndarray, tol: float, block: tuple[int, int]) -> str:
    out = out.astype(np.float64)
    scale = max(float(np.max(np.abs(ref))), 1e-30)
    bad = ~(np.abs(out - ref) <= tol * scale * 4)
    if not bad.any():
        return "ok"
    rows, cols = np.nonzero(bad)
    nan = int(np.isnan(out).sum())
    br, bc = block
    rmod = sorted(set((rows % br).tolist()))
    cmod = sorted(set((cols % bc).tolist()))
    rblk = sorted(set((rows // br).tolist()))
    cblk = sorted(set((cols // bc).tolist()))
    sample = [(int(r), int(c), float(out[r, c]), float(ref[r, c])) for r, c in list(zip(rows, cols))[:4]]
    return (f"{bad.sum()}/{bad.size} wrong ({nan} NaN); row blocks {rblk[:12]}{'...' if len(rblk) > 12 else ''}, "
            f"rows mod {br}: {rmod[:24]}{'...' if len(rmod) > 24 else ''}; col blocks {cblk}, cols mod {bc}: "
            f"{cmod[:24]}{'...' if len(cmod) > 24 else ''}; e.g. {sample}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--save", default=None)
    ap.add_argument("--interpret", action="store_true", help="the CPU: Pallas in interpret mode only")
    args = ap.parse_args()
    from schedgen.build import build_spec, package
    from schedgen.reference import random_inputs, reference, tolerance
    from schedgen.runtime.kernel import load_package
    from schedgen.verify import run_cuda, run_pallas
    for name, ov in variants():
        try:
            built = build_spec(str(MIXED), ov)
        except Exception as exc:
            print(f"{name:22} build: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            continue
        plan = built.plan
        if args.save:
            d = Path(args.save) / name.replace(" ", "_")
            d.mkdir(parents=True, exist_ok=True)
            for fname, data in built.files.items():
                if fname.endswith((".py", ".cu")):
                    (d / fname).write_bytes(data)
        kernel = load_package(package(built, Path(tempfile.mkdtemp())))
        sizes = {"M": int(ov.get("op.sizes.M", 200)), "N": 640}
        inputs = random_inputs(built.spec, sizes, 7)
        refs = reference(built.spec, sizes, inputs, seed=7)
        block = tuple(ov.get("schedule.out_specs.o.block_shape", [40, 128]))
        for backend in [b for b in plan.backends if not args.interpret or b == "pallas"]:
            try:
                outs = run_cuda(kernel, plan, inputs) if backend == "cuda" else run_pallas(kernel, plan, inputs,
                                                                                           args.interpret)[0]
            except Exception as exc:
                print(f"{name:22} {backend:6} run: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                continue
            for o, out in zip(plan.outputs, outs):
                tol = tolerance(o.dtype, plan.approx_math, 0)
                print(f"{name:22} {backend:6} {o.name}: {pattern(out, np.asarray(refs[o.name]), tol, block)}",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
