"""GPU probe for the matmul family: build variants of a spec, check them against torch, time against cuBLAS.

    python3 bench/mm_probe.py [--quick] [--out DIR]

A development tool (the committed record comes from bench/run_gpu.py); prints one row per variant.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BASE = str(ROOT / "tests/data/matmul_base.yaml")
CUDA = {"schedule.backends": ["cuda"]}
BIAS = {"op.inputs.bias": {"shape": ["N"], "dtype": "f32"}, "op.epilogue": "out = gelu(acc + bias)"}
CFULL = {"op.inputs.c": {"shape": ["M", "N"], "dtype": "bf16"}, "op.constants": {"alpha": 0.5, "beta": 2.0},
         "op.epilogue": "out = alpha * acc + beta * c"}
NOCL = {"schedule.cluster": [1, 1], "schedule.in_specs.b.collective_axes": []}

CHECKS = [  # (label, overrides): small and odd shapes for correctness
    ("base-1k", {"M": 1024, "N": 1024, "K": 1024}),
    ("nocluster-1k", {"M": 1024, "N": 1024, "K": 1024, **NOCL}),
    ("cluster1x2-1k", {"M": 1024, "N": 1024, "K": 1024, "schedule.cluster": [1, 2],
                       "schedule.in_specs.b.collective_axes": [], "schedule.in_specs.a.collective_axes": ["cluster"]}),
    ("rhsT-1k", {"M": 1024, "N": 1024, "K": 1024, "op.transpose_rhs": True, "op.inputs.b.shape": ["N", "K"],
                 "schedule.in_specs.b.block_shape": [256, 64]}),
    ("lhsT-1k", {"M": 1024, "N": 1024, "K": 1024, "op.transpose_lhs": True, "op.inputs.a.shape": ["K", "M"],
                 "schedule.in_specs.a.block_shape": [64, 128], "schedule.backends": ["cuda"]}),
    ("f32out-1k", {"M": 1024, "N": 1024, "K": 1024, "op.outputs.out.dtype": "f32", "schedule.epilogue.tile": [64, 32]}),
    ("bias-gelu-1k", {"M": 1024, "N": 1024, "K": 1024, **BIAS}),
    ("alpha-beta-c-1k", {"M": 1024, "N": 1024, "K": 1024, **CFULL}),
    ("wg-n-1k", {"M": 1024, "N": 1024, "K": 1024, "schedule.pipeline.wg_axis": "n"}),
    ("tile128x128", {"M": 1024, "N": 1024, "K": 1024, "schedule.in_specs.b.block_shape": [64, 128],
                     "schedule.out_specs.out.block_shape": [128, 128]}),
    ("ragged", {"M": 1000, "N": 1016, "K": 1000, **NOCL, "schedule.in_specs.a.out_of_bounds": "zero",
                "schedule.in_specs.b.out_of_bounds": "zero"}),
]
PERF = [  # (label, overrides) at the shapes
    ("4096^3", {}),
    ("8192^3", {"M": 8192, "N": 8192, "K": 8192}),
    ("4096x8192x4096", {"N": 8192}),
    ("8192^3-nocl", {"M": 8192, "N": 8192, "K": 8192, **NOCL}),
    ("16384x8192x1024", {"M": 16384, "N": 8192, "K": 1024}),
    ("8192x28672x4096", {"M": 8192, "N": 28672}),
    ("8192x4096x14336", {"M": 8192, "K": 14336}),
    ("2048x8192x8192", {"M": 2048, "N": 8192, "K": 8192}),
    ("256x8192x8192", {"M": 256, "N": 8192, "K": 8192}),
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT", "probe-out"))
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--spec", default=BASE)
    ap.add_argument("--exp", help="JSON list of [label, overrides, perf] to run instead of the built-in lists")
    args = ap.parse_args()
    import numpy as np
    import torch
    from schedgen.build import build_spec, package
    from schedgen.runtime.kernel import load_package

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp())
    rows = []
    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}

    def run(label: str, ov: dict, perf: bool) -> None:
        t0 = time.time()
        try:
            built = build_spec(args.spec, {**CUDA, **ov})
        except Exception as exc:
            rows.append({"label": label, "error": f"build: {exc}"})
            return
        p = built.plan
        k = load_package(package(built, tmp / label.replace("^", "p")))
        ins = []
        for o in p.inputs:
            shape = tuple(o.shape)
            ins.append(torch.randn(shape, device="cuda", dtype=dt[o.dtype]))
        out = torch.full(tuple(p.outputs[0].shape), float("nan"), device="cuda", dtype=dt[p.out_dtype])
        stream = torch.cuda.current_stream().cuda_stream
        go = k.prepare(ins, [out], stream=stream)
        go()
        torch.cuda.synchronize()
        named = {o.name: t for o, t in zip(p.inputs, ins)}
        a = named[next(o.name for o in p.inputs if o.role == "lhs")].double()
        b = named[next(o.name for o in p.inputs if o.role == "rhs")].double()
        if p.transpose_lhs:
            a = a.transpose(-1, -2)
        if p.transpose_rhs:
            b = b.transpose(-1, -2)
        acc = a @ b
        env = {"acc": acc, **{o.name: named[o.name].double() for o in p.extras}}
        ref = acc
        if not p.identity_epilogue:
            import torch.nn.functional as F
            if "bias" in env:
                ref = F.gelu(acc + env["bias"], approximate="tanh")
            elif "c" in env:
                ref = p.constants["alpha"] * acc + p.constants["beta"] * env["c"]
        got = out.double()
        finite = bool(torch.isfinite(got).all())
        err = float((got - ref).norm() / ref.norm()) if finite else math.inf
        row = {"label": label, "kernel": p.kernel_name, "M": p.m, "N": p.n, "K": p.k, "rel_err": err, "ok": err < 1e-2,
               "blocks": k._cache.get(("blocks", 0))}
        if perf:
            reps = max(3, min(8, int(3 * 2**28 // (sum(t.numel() * t.element_size() for t in ins) + 1))))
            sets = [ins] + [[t.clone() for t in ins] for _ in range(reps - 1)]
            outs = [torch.empty_like(out) for _ in sets]
            launchers = [k.prepare(s, [o], stream=stream) for s, o in zip(sets, outs)]
            bt = [s[1].t() if p.transpose_rhs else s[1] for s in sets]
            at = [s[0].t() if p.transpose_lhs else s[0] for s in sets]

            def timed_pair(fns, outer=12, inner=8):
                """Median per-launch time of each function: blocks of `inner` back-to-back launches between
                two events, the functions interleaved block by block so clock drift hits them alike."""
                for f in fns:
                    for i in range(3):
                        f(i)
                torch.cuda.synchronize()
                times = [[] for _ in fns]
                for _ in range(outer):
                    for fi, f in enumerate(fns):
                        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        e0.record()
                        for i in range(inner):
                            f(i)
                        e1.record()
                        e1.synchronize()
                        times[fi].append(e0.elapsed_time(e1) / inner)
                return [float(np.median(t)) for t in times]
            ours, cub = timed_pair([lambda i: launchers[i % reps](), lambda i: torch.matmul(at[i % reps], bt[i % reps])])
            ours2 = ours
            tf = p.flops / 1e9
            row.update(ms=ours, ms2=ours2, tflops=tf / ours, cublas_ms=cub, cublas_tflops=tf / cub, ratio=cub / ours)
        row["secs"] = round(time.time() - t0, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)

    if args.exp:
        for label, ov, perf in json.loads(Path(args.exp).read_text()):
            try:
                run(label, ov, perf=perf)
            except Exception as exc:
                rows.append({"label": label, "error": repr(exc)[:300]})
                print(label, "ERROR", repr(exc)[:300], flush=True)
        CHECKS.clear()
        PERF.clear()
    for label, ov in CHECKS:
        if args.only and label not in args.only:
            continue
        try:
            run(label, ov, perf=False)
        except Exception as exc:
            rows.append({"label": label, "error": repr(exc)[:300]})
            print(label, "ERROR", repr(exc)[:300], flush=True)
    if not args.quick:
        for label, ov in PERF:
            if args.only and label not in args.only:
                continue
            try:
                run(label, ov, perf=True)
            except Exception as exc:
                rows.append({"label": label, "error": repr(exc)[:300]})
                print(label, "ERROR", repr(exc)[:300], flush=True)
    (out_dir / "probe.json").write_text(json.dumps(rows, indent=1))
    print(f"\n{'label':18} {'err':>9} {'ms':>8} {'TFLOP/s':>8} {'cuBLAS':>8} {'ratio':>6}")
    for r in rows:
        if "error" in r:
            print(f"{r['label']:18} ERROR {r['error'][:100]}")
        else:
            print(f"{r['label']:18} {r['rel_err']:9.2e} {r.get('ms', 0):8.3f} {r.get('tflops', 0):8.1f} "
                  f"{r.get('cublas_tflops', 0):8.1f} {r.get('ratio', 0):6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
