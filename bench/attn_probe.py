"""GPU probe for the attention family: variants checked against torch SDPA (float32 math on the same inputs),
then timed against torch SDPA in interleaved launch blocks.

    python3 bench/attn_probe.py [--out DIR] [--perf]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
BASE = str(ROOT / "specs/attention_bf16_4096.yaml")
LSE = {"op.outputs.lse": {"shape": ["B", "H", "S"], "dtype": "f32"}}
NOPP = {"schedule.barriers": {}}
D64 = {"D": 64, "schedule.in_specs.q.block_shape": [128, 64], "schedule.in_specs.k.block_shape": [128, 64],
       "schedule.in_specs.v.block_shape": [128, 64]}
D256 = {"D": 256, "schedule.in_specs.q.block_shape": [128, 256], "schedule.in_specs.k.block_shape": [64, 256],
        "schedule.in_specs.v.block_shape": [64, 256]}
GQA = {"op.sizes": {"B": 1, "S": 1024, "H": 8, "G": 2, "D": 128}, "op.inputs.k.shape": ["B", "S", "G", "D"],
       "op.inputs.v.shape": ["B", "S", "G", "D"]}
BHSD = {"op.layout": "bhsd", "op.inputs.q.shape": ["B", "H", "S", "D"], "op.inputs.k.shape": ["B", "H", "S", "D"],
        "op.inputs.v.shape": ["B", "H", "S", "D"], "op.outputs.o.shape": ["B", "H", "S", "D"]}
SMALL = {"S": 1024, "H": 4, "B": 2}
CHECKS = [
    ("small", {**SMALL}), ("small-causal", {**SMALL, "op.causal": True}), ("small-nopp", {**SMALL, **NOPP}),
    ("small-lse", {**SMALL, **LSE}), ("small-causal-lse", {**SMALL, **LSE, "op.causal": True}),
    ("d64", {**SMALL, **D64}), ("d256", {**SMALL, **D256}), ("gqa", GQA), ("bhsd", {**SMALL, **BHSD}),
    ("1wg", {**SMALL, **NOPP, "schedule.pipeline.num_compute_wgs": 1, "schedule.in_specs.q.block_shape": [64, 128]}),
    ("s3", {**SMALL, "schedule.pipeline.max_concurrent_steps": 3}),
]
PERF = [
    ("4k", {}), ("4k-causal", {"op.causal": True}), ("4k-nopp", NOPP), ("16k", {"S": 16384}),
    ("16k-causal", {"S": 16384, "op.causal": True}), ("8k-b2h32", {"S": 8192, "B": 2, "H": 32}),
    ("4k-d64", D64), ("4k-d256", D256), ("4k-s3", {"schedule.pipeline.max_concurrent_steps": 3}),
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "attn-out"))
    ap.add_argument("--perf", action="store_true")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from schedgen.build import build_spec, package
    from schedgen.runtime import load_package
    tmp = Path(tempfile.mkdtemp())
    rows = []

    def run(label, ov, perf):
        built = build_spec(BASE, ov)
        p = built.plan
        k = load_package(package(built, tmp / label))
        ins = [torch.randn(tuple(o.shape), device="cuda", dtype=torch.bfloat16) for o in p.inputs]
        outs = [torch.full(tuple(o.shape), float("nan"), device="cuda",
                           dtype=torch.bfloat16 if o.role == "o" else torch.float32) for o in p.outputs]
        stream = torch.cuda.current_stream().cuda_stream
        go = k.prepare(ins, outs, stream=stream)
        go()
        torch.cuda.synchronize()
        q, kk, v = (t.float() for t in ins)
        if p.layout == "bshd":
            q, kk, v = (t.transpose(1, 2) for t in (q, kk, v))       # -> [B, H, S, D]
        g = p.heads_q // p.heads_kv
        kk, v = kk.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        s = (q @ kk.transpose(-1, -2)) * p.scale
        if p.causal:
            mask = torch.ones(p.seq_q, p.seq_kv, device="cuda", dtype=torch.bool).tril(p.seq_kv - p.seq_q)
            s = s.masked_fill(~mask, float("-inf"))
        ref = torch.softmax(s, -1) @ v
        lse_ref = torch.logsumexp(s, -1)
        got = outs[0].float()
        if p.layout == "bshd":
            got = got.transpose(1, 2)
        fin = bool(torch.isfinite(got).all())
        err = float((got - ref).norm() / ref.norm()) if fin else math.inf
        row = {"label": label, "kernel": p.kernel_name, "rel_err": err}
        if p.with_lse:
            lg = outs[1]
            row["lse_err"] = float((lg - lse_ref).norm() / lse_ref.norm()) if bool(torch.isfinite(lg).all()) else math.inf
        if perf:
            qs, ks, vs = ((t.transpose(1, 2) if p.layout == "bshd" else t) for t in ins)
            fns = {"ours": lambda: go(),
                   "sdpa": lambda: F.scaled_dot_product_attention(qs, ks, vs, is_causal=p.causal,
                                                                  enable_gqa=p.heads_q != p.heads_kv)}
            for f in fns.values():
                for _ in range(3):
                    f()
            torch.cuda.synchronize()
            times = {n: [] for n in fns}
            inner = max(3, min(20, int(3e9 / max(p.flops, 1) * 100)))
            for _ in range(9):
                for n, f in fns.items():
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    for _ in range(inner):
                        f()
                    e1.record()
                    e1.synchronize()
                    times[n].append(e0.elapsed_time(e1) / inner)
            for n, ts in times.items():
                ms = statistics.median(ts)
                row[f"{n}_ms"] = ms
                row[f"{n}_tflops"] = p.flops / (ms * 1e-3) / 1e12
            row["ratio_sdpa"] = row["sdpa_ms"] / row["ours_ms"]
        rows.append(row)
        print(json.dumps(row), flush=True)

    for label, ov in CHECKS + (PERF if args.perf else []):
        try:
            run(label, ov, (label, ov) in PERF)
        except Exception as exc:
            rows.append({"label": label, "error": repr(exc)[:400]})
            print(label, "ERROR", repr(exc)[:400], flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "attn_probe.json").write_text(json.dumps(rows, indent=1))
    print(f"\n{'label':18} {'err':>9} {'lse':>9} {'ours TF':>8} {'sdpa TF':>8} {'ratio':>6}")
    for r in rows:
        if "error" in r:
            print(f"{r['label']:18} ERROR {r['error'][:90]}")
        else:
            print(f"{r['label']:18} {r['rel_err']:9.2e} {r.get('lse_err', 0):9.2e} {r.get('ours_tflops', 0):8.1f} "
                  f"{r.get('sdpa_tflops', 0):8.1f} {r.get('ratio_sdpa', 0):6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
