"""One call on the GPU machine for the attention family: the issue's benchmark shapes, each built for both
backends, verified against a float64 reference on sampled rows (outputs poisoned first), then timed side by
side with torch SDPA and JAX's attention_mgpu (a small tuning sweep of it, best kept), all by CUPTI kernel time
in interleaved rounds. Small correctness variants (GQA, bhsd, LSE, 1 warpgroup, d64/d256, ragged) run first.

    python3 bench/attn_gpu.py [--out DIR] [--only LABEL...] [--skip-checks] [--no-sweep] [--budget S]

A kernel that hangs or faults must not lose the run: every step is recorded in DIR/attn_progress.json before it
starts, a watchdog ends the process after --step-timeout seconds, and the wrapper loop below (`--resume`)
skips what is done and marks the step that was in flight. Run it as

    for i in 1 2 3 4; do python3 bench/attn_gpu.py --resume && break; done
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
BASE = str(ROOT / "specs/attention_bf16_4096.yaml")


def blocks(d: int, bq: int = 128, bkv: int = 128) -> dict:
    return {"D": d, "schedule.in_specs.q.block_shape": [bq, d], "schedule.in_specs.k.block_shape": [bkv, d],
            "schedule.in_specs.v.block_shape": [bkv, d]}


D64, D256 = blocks(64), blocks(256, 128, 64)
LSE = {"op.outputs.lse": {"shape": ["B", "H", "S"], "dtype": "f32"}}


def nc3(d: int, bkv: int, stages: int = 2) -> dict:
    """Three consumer warpgroups: 192 query rows a CTA, 160 registers each."""
    return {**blocks(d, 192, bkv), "schedule.pipeline.num_compute_wgs": 3, "schedule.pipeline.compute_registers": 160,
            "schedule.barriers.schedule.num_arrivals": 3, "schedule.pipeline.max_concurrent_steps": stages}


NC3_D64 = nc3(64, 128)
NOPP = {"schedule.barriers": {}}
BHSD = {"op.layout": "bhsd", "op.inputs.q.shape": ["B", "H", "S", "D"], "op.inputs.k.shape": ["B", "H", "S", "D"],
        "op.inputs.v.shape": ["B", "H", "S", "D"], "op.outputs.o.shape": ["B", "H", "S", "D"]}


def gqa(hq: int, hkv: int, b: int = 1, s: int = 1024, d: int = 128) -> dict:
    return {"op.sizes": {"B": b, "S": s, "H": hq, "G": hkv, "D": d}, "op.inputs.k.shape": ["B", "S", "G", "D"],
            "op.inputs.v.shape": ["B", "S", "G", "D"]}


SMALL = {"S": 1024, "H": 4, "B": 2}
CUDA_ONLY = {"schedule.backends": ["cuda"]}
PERSIST = {"schedule.persistent.loop": "nd_loop", **CUDA_ONLY}
# a persistent grid claiming tiles from a counter: its producer needs 32 registers, 232 left to each of 2 consumers
DYN = {"schedule.persistent.loop": "dynamic", **CUDA_ONLY, "schedule.pipeline.memory_registers": 32,
       "schedule.pipeline.compute_registers": 232}
# q and kv lengths that differ (causal: true is bottom-right, the last query sees the last key; top_left: query i sees
# keys j <= i, and may have more queries than keys)
CROSS = {"op.sizes": {"B": 2, "S": 512, "T": 1536, "H": 4, "D": 128}, "op.inputs.k.shape": ["B", "T", "H", "D"],
         "op.inputs.v.shape": ["B", "T", "H", "D"]}
CAUSAL = {"op.causal": True}
TOP_LEFT = {"op.causal": "top_left"}
FEWER_KEYS = {**CROSS, "op.sizes": {**CROSS["op.sizes"], "S": 1536, "T": 512}}
# (label, overrides): correctness at small sizes, both backends
CHECKS = [
    ("c-base", SMALL), ("c-causal", {**SMALL, **CAUSAL}), ("c-nopp", {**SMALL, **NOPP}),
    ("c-lse", {**SMALL, **LSE}), ("c-causal-lse", {**SMALL, **LSE, **CAUSAL}),
    ("c-d64", {**SMALL, **D64}), ("c-d256", {**SMALL, **D256}), ("c-d64-causal", {**SMALL, **D64, **CAUSAL}),
    ("c-gqa", gqa(8, 2, b=2)), ("c-gqa-causal", {**gqa(8, 2, b=2), **CAUSAL}),
    ("c-bhsd", {**SMALL, **BHSD}),
    ("c-1wg", {**SMALL, **NOPP, "schedule.pipeline.num_compute_wgs": 1, "schedule.in_specs.q.block_shape": [64, 128]}),
    ("c-s3", {**SMALL, "schedule.pipeline.max_concurrent_steps": 3}),
    ("c-kv64", {**SMALL, **blocks(128, 128, 64)}),
    ("c-cross", CROSS), ("c-cross-causal", {**CROSS, **CAUSAL}), ("c-cross-top-left", {**CROSS, **TOP_LEFT}),
    ("c-fewer-keys-top-left", {**FEWER_KEYS, **TOP_LEFT, **LSE}),
    ("c-fewer-keys-top-left-ragged", {**FEWER_KEYS, "op.sizes": {**FEWER_KEYS["op.sizes"], "S": 1000, "T": 600},
                                      **TOP_LEFT, **CUDA_ONLY}),
    # a ragged last key block (CUDA masks it): Skv = 1000 with 128-key blocks, and 1536 keys in 176-key blocks
    ("c-ragged-kv", {**CROSS, "op.sizes": {**CROSS["op.sizes"], "T": 1000}, **CUDA_ONLY}),
    ("c-ragged-kv-causal", {**CROSS, "op.sizes": {**CROSS["op.sizes"], "T": 1000}, **CAUSAL, **CUDA_ONLY}),
    ("c-kv176", {**SMALL, **blocks(128, 128, 176), **CUDA_ONLY}),
    # three consumer warpgroups (192 query rows, round-robin ping-pong), with ragged last query blocks (1000 % 192)
    ("c-nc3-d64", {**SMALL, **NC3_D64, **CUDA_ONLY}),
    ("c-nc3-d64-causal-ragged", {**CROSS, "op.sizes": {**CROSS["op.sizes"], "S": 1000, "T": 1000, "D": 64},
                                 **NC3_D64, **CAUSAL, **CUDA_ONLY, **LSE}),
    ("c-nc3-d128-kv64", {**SMALL, **nc3(128, 64), **CUDA_ONLY}),
    ("c-ragged-q-lse", {**CROSS, "op.sizes": {**CROSS["op.sizes"], "S": 700, "T": 900}, **CUDA_ONLY, **LSE}),
    # persistent grids (one CTA an SM walking the tiles; small problems so that every CTA takes several tiles)
    ("c-persist", {**SMALL, "H": 40, **PERSIST}), ("c-persist-causal-lse", {**SMALL, "H": 40, **PERSIST, **CAUSAL, **LSE}),
    ("c-persist-bhsd", {**SMALL, "H": 40, **BHSD, **PERSIST}),
    ("c-persist-ragged", {**CROSS, "op.sizes": {**CROSS["op.sizes"], "S": 700, "T": 900, "H": 40}, **PERSIST, **LSE}),
    ("c-persist-nc3", {**SMALL, "H": 40, **NC3_D64, **PERSIST}),
    ("c-persist-d256-kv80", {**SMALL, "H": 40, **blocks(256, 128, 80), **PERSIST}),
    ("c-persist-gqa-causal", {**gqa(16, 4, b=2), **PERSIST, **CAUSAL}),
    # dynamic persistent grids (tiles claimed from a counter; each checked after a second launch)
    ("c-dyn", {**SMALL, "H": 40, **DYN}), ("c-dyn-causal-lse", {**SMALL, "H": 40, **DYN, **CAUSAL, **LSE}),
    ("c-dyn-ragged-bhsd", {**BHSD, "op.sizes": {**CROSS["op.sizes"], "S": 700, "T": 900, "H": 40},
                           "op.inputs.k.shape": ["B", "H", "T", "D"], "op.inputs.v.shape": ["B", "H", "T", "D"], **DYN}),
    ("c-dyn-nc3-causal", {**SMALL, "H": 40, **NC3_D64, **DYN, **CAUSAL, "schedule.pipeline.compute_registers": 160}),
    ("c-dyn-gqa-causal", {**gqa(16, 4, b=2), **DYN, **CAUSAL}),
    ("c-dyn-d256-causal", {**SMALL, "H": 40, **D256, **DYN, **CAUSAL}),
]
# the issue's shapes (batch, heads, seq, head_dim), each causal and not, plus GQA 32 q / 8 kv heads
PERF = []


def cuda_tuned(d: int, causal: bool) -> dict | None:
    """The CUDA kernel's own schedule where it measured faster than the Pallas one's (runs 3, 5, 6 of 2026-12-02 and
    9 of 2026-12-03): 3 consumers at D = 64 (specs/attention_bf16_d64_4096.yaml); a persistent grid for D = 128
    (specs/attention_bf16_16384_persistent.yaml); causal tiles claimed from a counter (dynamic,
    specs/attention_causal_bf16_4096_dynamic.yaml) at D = 64 and 128, +2-4% over one CTA a tile in lpt order;
    at D = 256 that measured 2% slower (232 registers a consumer spill 8 bytes) and the Pallas schedule stays."""
    if d == 64:
        return {**nc3(64, 128, 2), **CUDA_ONLY, **({**DYN, "schedule.pipeline.compute_registers": 160} if causal else {})}
    if d == 128:
        return DYN if causal else {"schedule.persistent.loop": "nd_loop", **CUDA_ONLY}
    return None
for _b, _h, _s, _d in [(1, 16, 4096, 128), (1, 16, 16384, 128), (2, 32, 8192, 128), (1, 16, 4096, 64),
                       (1, 16, 4096, 256)]:
    _ov = {"B": _b, "H": _h, "S": _s, **({128: {}, 64: D64, 256: D256}[_d])}
    PERF.append((f"p-{_b}x{_h}x{_s}x{_d}", _ov))
    PERF.append((f"p-{_b}x{_h}x{_s}x{_d}-causal", {**_ov, **CAUSAL}))
PERF.append(("p-gqa32x8-8192", gqa(32, 8, s=8192)))
PERF.append(("p-gqa32x8-8192-causal", {**gqa(32, 8, s=8192), **CAUSAL}))
# schedule variants of our CUDA kernel (timed against SDPA only): block_kv and stages
CUDA_ONLY = {"schedule.backends": ["cuda"]}
TUNE = []
for _s in (4096, 16384):
    for _bkv, _st in ((192, 2), (128, 3)):
        TUNE.append((f"t-{_s}x128-kv{_bkv}-s{_st}", {"S": _s, **blocks(128, 128, _bkv), **CUDA_ONLY,
                                                      "schedule.pipeline.max_concurrent_steps": _st}))
    TUNE.append((f"t-{_s}x128-causal-kv128-s3", {"S": _s, **CAUSAL, **CUDA_ONLY,
                                                   "schedule.pipeline.max_concurrent_steps": 3}))
for _bkv, _st in ((192, 2), (128, 3)):
    TUNE.append((f"t-4096x64-kv{_bkv}-s{_st}", {**blocks(64, 128, _bkv), **CUDA_ONLY,
                                                "schedule.pipeline.max_concurrent_steps": _st}))
for _s in (4096, 16384):
    for _bkv, _st in ((128, 2), (128, 3), (96, 3), (64, 4)):
        TUNE.append((f"t-{_s}x64-nc3-kv{_bkv}-s{_st}", {"S": _s, **nc3(64, _bkv, _st), **CUDA_ONLY}))
    TUNE.append((f"t-{_s}x64-nc3-causal", {"S": _s, **nc3(64, 128, 2), **CAUSAL, **CUDA_ONLY}))
    TUNE.append((f"t-{_s}x128-nc3-kv64-s3", {"S": _s, **nc3(128, 64, 3), **CUDA_ONLY}))
    TUNE.append((f"t-{_s}x128-nc3-causal-kv64-s3", {"S": _s, **nc3(128, 64, 3), **CAUSAL, **CUDA_ONLY}))
for _lab, _ov in (("4096x128", {}), ("16384x128", {"S": 16384}), ("2x32x8192x128", {"B": 2, "H": 32, "S": 8192}),
                  ("gqa32x8-8192", gqa(32, 8, s=8192)), ("4096x64-nc3", NC3_D64), ("4096x256-kv80", blocks(256, 128, 80))):
    TUNE.append((f"t-{_lab}-persist", {**_ov, **PERSIST}))
for _lab, _ov in (("4096x128", {}), ("16384x128", {"S": 16384})):
    TUNE.append((f"t-{_lab}-causal-persist", {**_ov, **PERSIST, **CAUSAL}))
TUNE.append(("t-4096x256-kv80-s2", {**blocks(256, 128, 80), **CUDA_ONLY}))
TUNE.append(("t-4096x256-causal-kv80-s2", {**blocks(256, 128, 80), **CAUSAL, **CUDA_ONLY}))
# tile order and grid A/B (--order), CUDA vs SDPA: the causal shapes one CTA a tile in the old order (q blocks fastest,
# the longest of each head first) and in the default lpt order (the longest tiles of all heads first, heads fastest
# in L2-sized sections), and on a dynamic persistent grid claiming lpt-ordered tiles; non-causal D = 128 on the
# static and the dynamic persistent grid
ORDER = []
for _lab, _ov in PERF:
    if _ov.get("op.causal"):
        _base = {**_ov, **(nc3(64, 128, 2) if _ov.get("D") == 64 else {}), **CUDA_ONLY}   # one CTA a tile
        ORDER.append((f"o-{_lab[2:]}-lpt", _base))
        ORDER.append((f"o-{_lab[2:]}-rowmajor", {**_base, "schedule.persistent.tile_order": "row_major"}))
        _dyn = {**_base, **DYN} if _ov.get("D") != 64 else {**_base, **DYN, "schedule.pipeline.compute_registers": 160}
        ORDER.append((f"o-{_lab[2:]}-dyn", _dyn))
for _lab, _ov in PERF:
    if not _ov.get("op.causal") and _ov.get("D", 128) == 128:
        ORDER.append((f"o-{_lab[2:]}-dyn", {**_ov, **DYN}))
        ORDER.append((f"o-{_lab[2:]}-persist", {**_ov, **PERSIST}))


# ---------------------------------------------------------------------------------------------- one case
# inputs from schedgen.reference.random_inputs, errors against schedgen's float64 reference (sampled rows at the
# big shapes), timing by schedgen.bench.interleaved: this script only chooses the cases and prints the table


def _errors(prefix: str, plan, got: list, ref: dict) -> dict:
    """rel. error of each output (numpy) against the reference: {prefix}_err, {prefix}_lse_err."""
    from schedgen.reference import rel_error
    out = {f"{prefix}_err": rel_error(got[0], ref[plan.outputs[0].name])}
    if plan.with_lse and len(got) > 1:
        out[f"{prefix}_lse_err"] = rel_error(got[1], ref[plan.outputs[1].name])
    return out


def _our_cuda(built, kern, ins: list, stream: int) -> tuple[list, list]:
    """Launchers over every input set into NaN-poisoned outputs, launched once (dynamic grids twice: the tile
    counter must be back at zero for the next launch); (launchers, the first set's outputs as numpy)."""
    import torch
    from schedgen.bench.case import from_torch, torch_dtypes
    p = built.plan
    tdt = torch_dtypes(torch)
    outs = [[torch.full(tuple(o.shape), float("nan"), device="cuda", dtype=tdt[o.dtype]) for o in p.outputs]
            for _ in ins]
    launch = [kern.prepare(ins[i], outs[i], stream=stream) for i in range(len(ins))]
    launch[0]()
    if p.dynamic:
        torch.cuda.synchronize()
        for t in outs[0]:
            t.fill_(float("nan"))
        launch[0]()
    torch.cuda.synchronize()
    return launch, [from_torch(torch, t, o.dtype) for t, o in zip(outs[0], p.outputs)]


def _jax_sweep(p, ins: list, ref: dict, args, row: dict):
    """JAX's attention_mgpu over its small sweep, each config checked, the verified fastest returned as a
    contender (on f16 copies with q pre-scaled: schedgen.families.attention.peers.jax_attention_inputs)."""
    import jax
    import jax.dlpack
    import torch
    from schedgen.bench.timing import interleaved, jax_contender
    from schedgen.families.attention.peers import jax_attention_configs, jax_attention_peer
    from schedgen.reference import rel_error
    j16 = [[(t.float() * (p.scale if n == 0 else 1.0)).half() for n, t in enumerate(s)] for s in ins]
    jins16 = [[jax.dlpack.from_dlpack(t) for t in s] for s in j16]
    best, sweep = None, []
    for cfg in jax_attention_configs(p, sweep=not args.no_sweep):
        fn, note = jax_attention_peer(p, cfg)
        if fn is None:       # e.g. its causal mask is not ours
            row["jax_skipped"] = note
            break
        try:
            f = jax.jit(fn)
            err = rel_error(torch.from_dlpack(f(*jins16[0])).float().cpu().numpy(), ref[p.outputs[0].name])
            ms = interleaved([jax_contender("x", f, jins16)], block=10, rounds=1, warmup=1)["x"]["time_ms"]
            sweep.append({"cfg": list(cfg), "ms": ms, "err": err})
            if err < 2e-2 and ms and (best is None or ms < best[0]):
                best = (ms, f, list(cfg), err)
        except Exception as exc:
            sweep.append({"cfg": list(cfg), "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
    row["jax_sweep"] = sweep
    if best is None:
        return None
    row["jax_cfg"], row["jax_err"] = best[2], best[3]
    return jax_contender("jax", best[1], jins16)


def run_case(label: str, ov: dict, perf: bool, args, tmp: Path) -> dict:
    import torch
    from schedgen.bench.case import from_torch, to_torch
    from schedgen.bench.timing import Contender, interleaved, jax_contender
    from schedgen.build import build_spec, package
    from schedgen.reference import random_inputs, reference
    from schedgen.runtime.kernel import load_package
    t0 = time.time()
    built = build_spec(BASE, ov)
    p = built.plan
    kern = load_package(package(built, tmp / label))
    row = {"label": label, "kernel": p.kernel_name, "B": p.batch, "Hq": p.heads_q, "Hkv": p.heads_kv, "Sq": p.seq_q,
           "Skv": p.seq_kv, "D": p.head_dim, "causal": p.causal, "causal_alignment": p.causal_alignment,
           "layout": p.layout, "lse": p.with_lse,
           "block_q": p.block_q, "block_kv": p.block_kv, "stages": p.stages, "pingpong": p.pingpong,
           "flops": p.flops, "build_s": round(time.time() - t0, 1)}
    host = random_inputs(built.spec, p.sizes, seed=abs(hash(label)) % (1 << 31))
    ref = reference(built.spec, p.sizes, host)
    in_bytes = sum(math.prod(o.shape) * o.itemsize for o in p.inputs)
    sets = max(1, min(4, math.ceil(400e6 / in_bytes))) if perf else 1
    ins = [[to_torch(torch, host[o.name], o.dtype) for o in p.inputs]]
    ins += [[t.clone() for t in ins[0]] for _ in range(sets - 1)]
    stream = torch.cuda.current_stream().cuda_stream
    launch, got = _our_cuda(built, kern, ins, stream)
    row.update(_errors("cuda", p, got, ref))
    row["cuda_all_written"] = bool(np.isfinite(np.asarray(got[0], dtype=np.float32)).all())  # poisoned with NaN
    tuned = cuda_tuned(p.head_dim, p.causal) if perf is True else None
    launch_same = None
    if tuned is not None:     # the CUDA kernel at its own best schedule: "cuda"; at the Pallas one's: "cuda_same"
        bt = build_spec(BASE, {**ov, **tuned})
        launch_same, (launch, got) = launch, _our_cuda(bt, load_package(package(bt, tmp / (label + "-tuned"))),
                                                      ins, stream)
        row["cuda_same_err"] = row["cuda_err"]
        row.update(_errors("cuda", p, got, ref), cuda_kernel=bt.plan.kernel_name)

    contenders = [Contender("cuda", lambda i: launch[i % sets](), stream=stream)]
    if launch_same is not None:
        contenders.append(Contender("cuda_same", lambda i: launch_same[i % sets](), stream=stream))
    if "pallas" in p.backends and not args.no_pallas and perf != "tune":
        try:
            import jax
            import jax.dlpack
            jfn = jax.jit(getattr(kern.pallas_module(), p.name))
            jins = [[jax.dlpack.from_dlpack(t) for t in s] for s in ins]
            res = jfn(*jins[0])
            res = res if isinstance(res, tuple) else (res,)
            row.update(_errors("pallas", p, [torch.from_dlpack(r).float().cpu().numpy() for r in res], ref))
            contenders.append(jax_contender("pallas", jfn, jins))
        except Exception as exc:
            row["pallas_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    if not perf:
        row["total_s"] = round(time.time() - t0, 1)
        return row

    from schedgen.families.attention.peers import sdpa_call, sdpa_verified
    bhsd = (lambda t: t.transpose(1, 2)) if p.layout == "bshd" else (lambda t: t)
    views = [[bhsd(t) for t in s] for s in ins]
    # SDPA with our mask (its alignment included), the first form of it that matches the reference
    chosen, row["sdpa_masks"] = sdpa_verified(torch, p, views[0], ref[p.outputs[0].name], "cuda")
    if chosen is None:
        row["sdpa_error"] = "no form of our mask verified in torch SDPA"
    else:
        row["sdpa_mask"], mask = chosen

        def sdpa(i):
            return sdpa_call(torch, p, views[i % sets], mask)
        s_out = bhsd(sdpa(0))
        row["sdpa_err"] = _errors("sdpa", p, [from_torch(torch, s_out, p.dtype)], ref)["sdpa_err"]
        del s_out
        contenders.append(Contender("sdpa", sdpa, stream=stream))
    if p.layout == "bshd" and not p.with_lse and not args.no_jax and perf != "tune":
        try:
            jax_c = _jax_sweep(p, ins, ref, args, row)
            if jax_c is not None:
                contenders.append(jax_c)
        except Exception as exc:
            row["jax_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    calls = max(5, min(50, int(2e12 / max(p.flops, 1))))
    for c in contenders:
        c.sync = c.sync or torch.cuda.synchronize
    res = interleaved(contenders, block=calls, rounds=5, warmup=3)
    for n, r in res.items():
        ms = r.get("cupti_ms") or r.get("time_ms")     # CUPTI kernel time for every contender where it is there
        if not ms:
            row[f"{n}_error"] = r.get("error", "not timed")
            continue
        row[f"{n}_ms"], row[f"{n}_timing"] = ms, "cupti" if r.get("cupti_ms") else r["timing"]
        row[f"{n}_spread"] = round(r["spread"], 3)
        row[f"{n}_tflops"] = p.flops / (ms * 1e-3) / 1e12
    row["total_s"] = round(time.time() - t0, 1)
    return row


# ---------------------------------------------------------------------------------------------- driver

def table(rows: list[dict]) -> str:
    head = f"{'label':28} {'err cuda':>9} {'err pal':>9} {'cuda TF':>8} {'pal TF':>7} {'sdpa TF':>8} {'jax TF':>7} " \
           f"{'c/sdpa':>6} {'c/jax':>6} {'p/jax':>6}"
    lines = [head]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['label']:28} {r['error'][:110]}")
            continue
        c, s, j, pa = (r.get(f"{n}_tflops") for n in ("cuda", "sdpa", "jax", "pallas"))
        ratio = lambda a, b: f"{a / b:6.3f}" if a and b else f"{'-':>6}"
        lines.append(f"{r['label']:28} {r.get('cuda_err', math.nan):9.2e} {r.get('pallas_err', math.nan):9.2e} "
                     f"{c or 0:8.1f} {pa or 0:7.1f} {s or 0:8.1f} {j or 0:7.1f} {ratio(c, s)} {ratio(c, j)} {ratio(pa, j)}"
                     + (f"  jax {r['jax_cfg']} err {r.get('jax_err', 0):.1e}" if r.get("jax_cfg") else "")
                     + (f"  cuda@same {r['cuda_same_tflops']:.0f}" if r.get("cuda_same_tflops") else ""))
    perf = [r for r in rows if r.get("cuda_tflops")]
    for name, key in (("cuda/sdpa", "sdpa"), ("cuda/jax", "jax")):
        rs = [r["cuda_tflops"] / r[f"{key}_tflops"] for r in perf if r.get(f"{key}_tflops")]
        if rs:
            lines.append(f"geomean {name}: {math.exp(sum(map(math.log, rs)) / len(rs)):.3f} over {len(rs)}")
    rs = [r["pallas_tflops"] / r["jax_tflops"] for r in perf if r.get("pallas_tflops") and r.get("jax_tflops")]
    if rs:
        lines.append(f"geomean pallas/jax: {math.exp(sum(map(math.log, rs)) / len(rs)):.3f} over {len(rs)}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "attn-out"))
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--skip-checks", action="store_true")
    ap.add_argument("--skip-perf", action="store_true")
    ap.add_argument("--tune", action="store_true", help="also time the TUNE schedule variants (CUDA vs SDPA)")
    ap.add_argument("--order", action="store_true", help="also time the ORDER tile-order variants (CUDA vs SDPA)")
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--no-pallas", action="store_true")
    ap.add_argument("--no-jax", action="store_true")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--budget", type=float, default=float(os.environ.get("ATTN_BUDGET", 500)))
    ap.add_argument("--step-timeout", type=float, default=150.0)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prog_path = out / "attn_progress.json"
    prog = json.loads(prog_path.read_text()) if (args.resume and prog_path.exists()) else {"rows": [], "t0": time.time()}
    done = {r["label"] for r in prog["rows"]}
    if prog.get("inflight") and prog["inflight"] not in done:
        prog["rows"].append({"label": prog["inflight"], "error": "hung or crashed the process (watchdog / fault)"})
        done.add(prog["inflight"])
    prog["inflight"] = None
    cases = ([] if args.skip_checks else [(l, o, False) for l, o in CHECKS]) + \
            ([] if args.skip_perf else [(l, o, True) for l, o in PERF]) + \
            ([(l, o, "tune") for l, o in TUNE] if args.tune else []) + \
            ([(l, o, "tune") for l, o in ORDER] if args.order else [])
    if args.only:
        cases = [c for c in cases if c[0] in args.only]
    tmp = Path(tempfile.mkdtemp())
    import torch
    torch.cuda.init()
    for label, ov, perf in cases:
        if label in done:
            continue
        if time.time() - prog["t0"] > args.budget:
            prog["rows"].append({"label": label, "error": "skipped: budget spent"})
            continue
        prog["inflight"] = label
        prog_path.write_text(json.dumps(prog, indent=1))
        faulthandler.dump_traceback_later(args.step_timeout * (3 if perf else 1), exit=True)
        try:
            row = run_case(label, ov, perf, args, tmp)
        except Exception as exc:
            row = {"label": label, "error": f"{type(exc).__name__}: {str(exc)[:400]}"}
            if "CUDA" in str(exc) or "illegal" in str(exc).lower():
                prog["rows"].append(row)
                prog["inflight"] = None
                prog_path.write_text(json.dumps(prog, indent=1))
                print(json.dumps(row), flush=True)
                return 3          # the context is gone: the wrapper restarts us
        faulthandler.cancel_dump_traceback_later()
        prog["rows"].append(row)
        prog["inflight"] = None
        prog_path.write_text(json.dumps(prog, indent=1))
        print(json.dumps(row), flush=True)
        torch.cuda.empty_cache()
    (out / "attn_gpu.json").write_text(json.dumps(prog["rows"], indent=1))
    print()
    print(table(prog["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
