"""The attention family's benchmark peers: `sdpa` (torch's scaled_dot_product_attention) and `jax_pallas` (JAX's
own Pallas flash attention, attention_mgpu, at the best of a small verified sweep of its tuning). FLOPs =
4 B H Sq Skv D (halved for causal); rows add flops, causal, sets and iters."""
from __future__ import annotations

import sys
import types

import numpy as np

from ...bench.case import Peer, guard, out_bytes, to_torch, why
from ...bench.timing import Contender, jax_contender, matmul_sets, time_jax_fn

sets = matmul_sets


def row_fields(case) -> dict:
    p = case.plan
    return {"dtype": p.dtype, "flops": p.flops, "causal": p.causal, "sets": case.sets, "iters": case.iters}


def peers(case) -> dict[str, Peer]:
    return {"sdpa": guard("torch", lambda: sdpa_peer(case)), "jax_pallas": guard("jax", lambda: jax_peer(case))}


def sdpa_peer(case) -> Peer:
    import torch
    import torch.nn.functional as F
    plan = case.plan
    dev = [[to_torch(torch, case.host[o.name], o.dtype) for o in plan.inputs]]
    dev += [[t.clone() for t in dev[0]] for _ in range(case.sets - 1)]
    held = {"views": [[t.transpose(1, 2) if plan.layout == "bshd" else t for t in s] for s in dev]}
    del dev
    gqa = plan.heads_q != plan.heads_kv

    def call(i: int) -> None:
        q, k, v = held["views"][i % len(held["views"])]
        F.scaled_dot_product_attention(q, k, v, is_causal=plan.causal, scale=plan.scale, enable_gqa=gqa)
    call(0)

    def close() -> None:
        held.clear()
        torch.cuda.empty_cache()
    return Peer(Contender("sdpa", call, stream=int(torch.cuda.current_stream().cuda_stream)),
                {"note": f"torch {torch.__version__}"}, close)


def jax_peer(case) -> Peer:
    """attention_mgpu at the best of its sweep: each config checked against the float64 reference, the verified
    ones timed briefly, the fastest timed in full (side by side with ours)."""
    import jax

    from ...reference import reference, rel_error, tolerance
    plan = case.plan
    fn, note = jax_attention_peer(plan)
    if fn is None and "2 consumers" not in note:
        return Peer.skipped(note)
    base = [jax.device_put(x) for x in jax_attention_inputs(plan, case.host)]
    arg_sets = [base] + [[jax.numpy.array(x, copy=True) for x in base] for _ in range(case.sets - 1)]
    ref = reference(case.spec, plan.sizes, case.host, sample=True, seed=2)[plan.outputs[0].name]
    tried, best = [], None
    for cfg in jax_attention_configs(plan):
        f, cnote = jax_attention_peer(plan, cfg)
        try:
            f = jax.jit(f)
            err = rel_error(np.asarray(f(*base)), ref)
            quick = time_jax_fn(f, arg_sets, warmup=2, iters=10, out_bytes=out_bytes(plan))["time_ms"]
        except Exception as exc:
            tried.append({"config": list(cfg), "error": why(exc)})
            continue
        ok = err <= tolerance(plan.dtype, True)   # the tolerance verify gives our approx_math kernels
        tried.append({"config": list(cfg), "rel_error": err, "verified": ok, "time_ms": quick})
        if ok and quick is not None and (best is None or quick < best[0]):
            best = (quick, f, cnote, err)
    if best is None:
        return Peer.skipped("no attention_mgpu config verified", sweep=tried)
    info = {"note": best[2] + " (best of its sweep)", "rel_error": best[3], "verified": True, "sweep": tried}
    return Peer(jax_contender("jax_pallas", best[1], arg_sets), info, close=arg_sets.clear)


def _attention_mgpu():
    name = "jax._src.test_util"
    saved = sys.modules.get(name)
    if saved is None:
        sys.modules[name] = types.ModuleType(name)
    try:
        from jax.experimental.pallas.ops.gpu import attention_mgpu as am
    finally:
        if saved is None:
            sys.modules.pop(name, None)
    return am


def jax_attention_configs(plan, sweep: bool = True) -> list[tuple[int, int, int]]:
    """(block_q, block_kv, stages) of attention_mgpu to try: the plan's own tuning first (where it has one), then
    with `sweep` every other block_kv (64, 128) x stages (2, 3) whose Q, K and V tiles fit the SMEM."""
    same = [(64, plan.block_kv, max(2, plan.stages))] if plan.block_kv % 64 == 0 and plan.num_consumers == 2 else []
    out = list(same)
    for bkv in (64, 128) if sweep else ():
        for st in (2, 3):
            smem = 2 * 64 * plan.head_dim * 2 + 2 * st * bkv * plan.head_dim * 2
            if (64, bkv, st) not in out and smem <= 231424 and plan.seq_kv % bkv == 0:
                out.append((64, bkv, st))
    return out


def jax_attention_peer(plan, config: tuple[int, int, int] | None = None):
    """JAX's own Pallas flash attention (attention_mgpu) at `config` (block_q, block_kv, stages; default: the
    plan's tuning), as a jitted f(q, k, v) on bshd arrays; (None, note) where the plan has no equivalent."""
    if plan.layout != "bshd":
        return None, "attention_mgpu takes [B, S, H, D] only"
    if plan.with_lse:
        return None, "timed without the log-sum-exp output"
    if plan.seq_q % 128 or plan.seq_kv % 64:
        return None, "attention_mgpu needs Sq a multiple of 128 and Skv of its block_kv"
    configs = jax_attention_configs(plan, sweep=False)
    if config is None and not configs:
        return None, "attention_mgpu has 2 consumers and block_kv a multiple of 64"
    bq, bkv, st = config or configs[0]
    am = _attention_mgpu()
    cfg = am.TuningConfig(block_q=bq, block_kv=bkv, max_concurrent_steps=st, use_schedule_barrier=True,
                          causal=plan.causal)
    # jax 0.11.2's attention_mgpu stages q, k and v in float16 SMEM whatever their dtype and applies no softmax
    # scale: it runs on f16 copies (exact for bf16 values in f16 range) with q pre-scaled; same tensor-core rate
    return (lambda q, k, v: am.attention(q, k, v, cfg)), f"block_q {bq} x 2 consumers, block_kv {bkv}, " \
                                                       f"{st} stages; f16 inputs, q pre-scaled"


def jax_attention_inputs(plan, host: dict) -> list:
    """The host inputs as attention_mgpu takes them: float16, q multiplied by the softmax scale."""
    arrs = [np.asarray(host[o.name], dtype=np.float32) for o in plan.inputs]
    arrs[0] = arrs[0] * np.float32(plan.scale)
    return [a.astype(np.float16) for a in arrs]


def markdown(rows: list[dict]) -> str:
    """Attention rows: time, TFLOP/s (4 B H Sq Skv D, halved for causal) and the ratio to each peer."""
    lines = ["| spec | backend | kernel | shape | causal | time (ms) | TFLOP/s | vs torch SDPA | vs JAX attention_mgpu | "
             "verified | rel. error |", "|---|---|---|---|---|---|---|---|---|---|---|"]

    notes: dict[str, str] = {}

    def peer(r: dict, name: str) -> str:
        p = (r.get("peers") or {}).get(name) or {}
        if p.get("ratio"):
            return f"{p['ratio']:.2f}x ({p.get('tflops') or 0:.0f} TFLOP/s)"
        if p.get("skipped"):
            notes.setdefault(f"{r['spec']} {r['backend']} {name}", p["skipped"])
            return "skipped"
        return "-"
    for r in rows:
        shape = " ".join(f"{k}={v}" for k, v in r.get("shape", {}).items())
        t = f"{r['time_ms']:.4f}" if r.get("time_ms") else r.get("error", "-")
        tf = f"{r['tflops']:.0f}" if r.get("tflops") else "-"
        err = f"{r['rel_error']:.2e}" if r.get("rel_error") is not None else "-"
        lines.append(f"| {r['spec']} | {r['backend']} | `{r['kernel']}` | {shape} | {r.get('causal')} | {t} | {tf} | "
                     f"{peer(r, 'sdpa')} | {peer(r, 'jax_pallas')} | {'yes' if r.get('verified') else 'NO'} | {err} |")
    out = "\n".join(lines) + "\n"
    if notes:    # why a peer was not timed (the first reason per spec, backend and peer)
        out += "\n" + "\n".join(f"- {k}: {v}" for k, v in notes.items()) + "\n"
    return out


attention_markdown = markdown
