"""The grouped matmul's 2-CTA cluster on the GPU (issue 18): the bundled Mixtral-like and DeepSeek-like specs built
without and with schedule.cluster [1, 2], timed interleaved (schedgen.bench.timing.interleaved: the same clocks and
thermal state) against torch._grouped_mm and a Python loop of cuBLAS calls (torch.matmul per group), on skewed
random expert counts with empty experts. Every contender's output is poisoned (NaN) first and checked against a
float64 product of sampled rows of every live group (on the GPU) before it is timed. Inputs are generated on the
GPU (torch), so the whole run is short:

    python3 bench/grouped_cluster.py [--json OUT.json] [--iters 20]        (about 1-2 minutes on the H200)
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from schedgen.bench.timing import Contender, block_for, interleaved, ratio_of  # noqa: E402
from schedgen.build import build_spec, package  # noqa: E402
from schedgen.cache import Cache  # noqa: E402
from schedgen.families.grouped_matmul.reference import encode_counts, group_rows, skewed_counts  # noqa: E402
from schedgen.reference import tolerance  # noqa: E402
from schedgen.runtime.kernel import load_package  # noqa: E402

CASES = (("specs/grouped_moe_mixtral_bf16_dynamic.yaml", 8192), ("specs/grouped_moe_mixtral_bf16_dynamic.yaml", 32768),
         ("specs/grouped_moe_deepseek_bf16_dynamic.yaml", 16384))
VARIANTS = {"ours": {}, "ours_cluster": {"schedule.cluster": [1, 2]}}
SAMPLE_ROWS = 8              # rows of each live group checked against float64


def _build(spec: str, overrides: dict, cache: Cache):
    b = build_spec(str(ROOT / spec), overrides, cache=cache)
    return b.plan, load_package(package(b, tempfile.mkdtemp(prefix="schedgen-gcluster-")))


def _check(torch, out, x, w, rows, rng, dtype: str, k: int) -> float:
    """The largest relative error over sampled rows of every live group, against float64 on the GPU."""
    worst = 0.0
    for g, (s, e) in enumerate(rows):
        if e <= s:
            continue
        pick = torch.as_tensor(rng.choice(np.arange(s, e), size=min(SAMPLE_ROWS, e - s), replace=False),
                               device="cuda")
        ref = x[pick].double() @ w[g].double().T
        got = out[pick].double()
        if not torch.isfinite(got).all():
            return float("inf")
        worst = max(worst, float((got - ref).norm() / ref.norm().clamp_min(1e-30)))
    assert worst <= tolerance(dtype, False, k), f"rel error {worst}"
    return worst


def _case(torch, spec: str, t: int, iters: int, cache: Cache, seed: int) -> dict:
    plans = {name: _build(spec, ov, cache) for name, ov in VARIANTS.items()}
    p = plans["ours"][0]
    assert p.transpose_rhs and p.out_dtype == "bf16", "the bundled specs: w [G, N, K], bf16 out"
    g, n, k = p.groups, p.n, p.k
    rng = np.random.default_rng(seed)
    counts = skewed_counts(t, g, rng)
    offs_host = encode_counts(counts, p.offsets_format)
    rows = group_rows(offs_host, p.offsets_format, g)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(t, k, dtype=torch.bfloat16, device="cuda", generator=gen)
    w = (torch.randn(g, n, k, dtype=torch.float32, device="cuda", generator=gen) / k ** 0.5).to(torch.bfloat16)
    offs = torch.as_tensor(offs_host, device="cuda")
    ends = torch.as_tensor(np.array([e for _, e in rows], np.int32), device="cuda")
    stream = torch.cuda.current_stream()
    outs = {name: torch.full((t, n), float("nan"), dtype=torch.bfloat16, device="cuda")
            for name in (*VARIANTS, "cublas_loop")}
    calls = {}
    for name, (_, kern) in plans.items():
        calls[name] = (lambda kern=kern, o=outs[name]: kern(x, w, offs, out=o, stream=stream))
    wt = w.transpose(-1, -2)
    if hasattr(torch, "_grouped_mm"):
        calls["torch_grouped_mm"] = lambda: torch._grouped_mm(x, wt, offs=ends)
    live = [(gi, s, e) for gi, (s, e) in enumerate(rows) if e > s]

    def loop():
        o = outs["cublas_loop"]
        for gi, s, e in live:
            torch.matmul(x[s:e], wt[gi], out=o[s:e])
    calls["cublas_loop"] = loop
    errors = {}
    for name, fn in calls.items():
        got = fn()
        torch.cuda.synchronize()
        out = got if name == "torch_grouped_mm" else outs[name]
        assert bool(torch.isfinite(out).all()), f"{name}: rows left unwritten (NaN poison) or non-finite"
        errors[name] = _check(torch, out, x, w, rows, rng, "bf16", k)
    contenders = [Contender(name, lambda i, fn=fn: fn(), stream=int(stream.cuda_stream)) for name, fn in calls.items()]
    timed = interleaved(contenders, block=block_for(iters))
    ours = timed["ours"]
    row = {"spec": Path(spec).name, "T": t, "groups": g, "N": n, "K": k, "counts": [int(c) for c in counts],
           "flops": 2 * t * n * k, "rel_error": errors, "kernels": {nm: pl.kernel_name for nm, (pl, _) in plans.items()}}
    for name, r in timed.items():
        row[name] = r
        if r.get("time_ms"):
            r["tflops"] = row["flops"] / (r["time_ms"] * 1e-3) / 1e12
    # ratios are peer time / our time (> 1: ours faster), on kernel time where CUPTI answered (ratio_of)
    row["cluster_speedup"] = ratio_of(timed["ours_cluster"], ours)[0]
    for name in ("torch_grouped_mm", "cublas_loop"):
        if name in timed:
            row[f"ours_vs_{name}"] = ratio_of(ours, timed[name])[0]
            row[f"cluster_vs_{name}"] = ratio_of(timed["ours_cluster"], timed[name])[0]
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args(argv)
    import torch
    cache = Cache(Path(tempfile.mkdtemp(prefix="schedgen-gcluster-cache-")))
    rows = []
    for i, (spec, t) in enumerate(CASES):
        try:
            rows.append(_case(torch, spec, t, args.iters, cache, seed=i))
        except Exception as exc:          # one case's failure is reported, the others still run
            rows.append({"spec": Path(spec).name, "T": t, "error": f"{type(exc).__name__}: {exc}"})
        torch.cuda.empty_cache()
    head = (f"{'spec':38} {'T':>6} {'ours ms':>8} {'cluster ms':>10} {'cl speedup':>10} {'cl vs cuBLAS loop':>18} "
            f"{'cl vs _grouped_mm':>18} {'ours vs loop':>13}")
    print(head)
    for r in rows:
        if "error" in r:
            print(f"{r['spec']:38} {r['T']:>6} ERROR {r['error']}")
            continue
        f = lambda v: f"{v:.3f}x" if v else "-"  # noqa: E731
        ms = {nm: r[nm].get("time_ms") or float("nan") for nm in VARIANTS}
        print(f"{r['spec']:38} {r['T']:>6} {ms['ours']:8.4f} {ms['ours_cluster']:10.4f} "
              f"{f(r['cluster_speedup']):>10} {f(r.get('cluster_vs_cublas_loop')):>18} "
              f"{f(r.get('cluster_vs_torch_grouped_mm')):>18} {f(r.get('ours_vs_cublas_loop')):>13}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
