"""The attention_backward family's benchmark peers: the backward of torch's scaled_dot_product_attention with one
backend each, `sdpa_cudnn` (SDPBackend.CUDNN_ATTENTION) and `sdpa_flash` (SDPBackend.FLASH_ATTENTION), timed as
`torch.autograd.grad` of a forward built once (retain_graph: the backward kernels only), and `jax_pallas`: JAX's
attention_mgpu backward (`_attention_bwd`, what jax.grad through `attention` runs after the forward) on the
forward's residuals. Each peer is checked against the float64 reference (dq, dk, dv) before it is timed; one that
cannot run the case is skipped with the reason.

FLOPs convention (the plan's `flops`, as FlashAttention's and torch's benchmarks count): 5 matmul-equivalents of
2 D per unmasked (query, key) pair per head and batch (S recomputed, dP, dV, dQ, dK) = 2.5 x the forward's 4 D;
causal counts the unmasked pairs only (about half)."""
from __future__ import annotations

import contextlib

import numpy as np

from ...bench.case import Peer, from_torch, guard, to_torch, why
from ...bench.timing import Contender, jax_contender, matmul_sets
from ..attention.peers import SDPA_BACKENDS, sdpa_masks, sdpa_scope
from ..attention.peers import peer_names as peer_names, row_fields as row_fields   # the forward's: the same peers, fields

sets = matmul_sets

PEER_LABELS = {"sdpa_cudnn": "SDPA cuDNN backward", "sdpa_flash": "SDPA flash backward",
               "jax_pallas": "JAX attention_mgpu backward"}


def peers(case) -> dict[str, Peer]:
    ref = _reference(case)
    out = {name: guard("torch", lambda b=backend: sdpa_backward_peer(case, b, ref))
           for name, backend in SDPA_BACKENDS.items()}
    out["jax_pallas"] = guard("jax", lambda: jax_backward_peer(case, ref))
    return out


def _reference(case):
    held = {}

    def get():
        if "ref" not in held:
            from ...reference import reference
            plan = case.plan
            held["ref"] = reference(case.spec, plan.sizes, case.host)
        return held["ref"]
    return get


def _errors(plan, outs, ref) -> float:
    from ...reference import rel_error
    return max(rel_error(np.asarray(x, dtype=np.float32), ref[o.name]) for o, x in zip(plan.outputs, outs))


def _ok(err: float, plan) -> bool:
    from ...reference import tolerance
    return err <= tolerance(plan.dtype, True)


def _roles(plan) -> dict:
    return {o.role: o for o in plan.inputs}


def sdpa_backward_peer(case, backend: str, ref) -> Peer:
    """torch SDPA restricted to `backend`: the forward once (requires_grad q, k, v), then each call
    torch.autograd.grad(out, (q, k, v), do, retain_graph=True); checked first against the reference."""
    import torch

    plan = case.plan
    name = next(n for n, b in SDPA_BACKENDS.items() if b == backend)
    scope = sdpa_scope(torch, backend)
    r = _roles(plan)
    bshd = plan.layout == "bshd"

    def view(t):
        return t.transpose(1, 2) if bshd else t

    tried, held = [], {}
    for label, kwargs in sdpa_masks(torch, plan, "cuda"):
        try:
            leaves = [to_torch(torch, case.host[r[x].name], plan.dtype).requires_grad_() for x in ("q", "k", "v")]
            do = view(to_torch(torch, case.host[r["do"].name], plan.dtype))
            with scope():
                import torch.nn.functional as F
                out = F.scaled_dot_product_attention(*(view(t) for t in leaves), scale=plan.scale,
                                                     enable_gqa=plan.heads_q != plan.heads_kv, **kwargs)
                grads = torch.autograd.grad(out, leaves, do, retain_graph=True)
            err = _errors(plan, [from_torch(torch, g, plan.dtype) for g in grads], ref())
        except Exception as exc:
            tried.append({"mask": label, "error": why(exc)})
            continue
        tried.append({"mask": label, "rel_error": err, "verified": _ok(err, plan)})
        if _ok(err, plan):
            held.update(out=out, leaves=leaves, do=do)
            break
    if not held:
        return Peer.skipped(f"no form of our mask ran and verified in SDPA's backward with SDPBackend.{backend} only: "
                            + "; ".join(f"{t['mask']}: {t.get('error') or t.get('rel_error')}" for t in tried),
                            sweep=tried)

    def call(i: int) -> None:
        torch.autograd.grad(held["out"], held["leaves"], held["do"], retain_graph=True)

    def close() -> None:
        held.clear()
        torch.cuda.empty_cache()
    info = {"backend": f"SDPBackend.{backend}", "mask": tried[-1]["mask"], "rel_error": tried[-1]["rel_error"],
            "verified": True, "note": f"torch {torch.__version__}: autograd.grad of one SDPA forward "
                                      f"(retain_graph), SDPBackend.{backend} only", "sweep": tried}
    return Peer(Contender(name, call, stream=int(torch.cuda.current_stream().cuda_stream), scope=scope), info, close)


def jax_backward_peer(case, ref) -> Peer:
    """attention_mgpu's backward (jax 0.11.2: non-causal only, [B, S, H, D], f16 SMEM staging, no softmax scale:
    q pre-scaled, dq scaled back), on the residuals of its own forward."""
    import jax
    import jax.numpy as jnp

    from ..attention.peers import _attention_mgpu
    plan = case.plan
    if plan.causal:
        return Peer.skipped("jax 0.11.2's attention_mgpu backward raises NotImplementedError for causal attention")
    if plan.layout != "bshd":
        return Peer.skipped("attention_mgpu takes [B, S, H, D] only")
    if plan.seq_q % 128 or plan.seq_kv % 128:
        return Peer.skipped("attention_mgpu's backward needs Sq and Skv multiples of 128 (64-row blocks x 2 consumers)")
    am = _attention_mgpu()
    r = _roles(plan)
    host = {x: np.asarray(case.host[r[x].name], dtype=np.float32) for x in ("q", "k", "v", "do")}
    q = jnp.asarray(host["q"] * np.float32(plan.scale), jnp.float16)
    k, v, do = (jnp.asarray(host[x], jnp.float16) for x in ("k", "v", "do"))
    cfg = am.TuningConfig(block_q=64, block_kv=64, max_concurrent_steps=2, use_schedule_barrier=True, causal=False,
                          block_q_dkv=64, block_kv_dkv=64, block_q_dq=64, block_kv_dq=64)
    try:
        out, res = jax.jit(lambda q, k, v: am._attention_fwd(q, k, v, cfg, False))(q, k, v)
        bwd = jax.jit(lambda res, do: am._attention_bwd(cfg, False, res, do))
        dq, dk, dv = bwd(res, do)
        err = _errors(plan, [np.asarray(dq, np.float32) * plan.scale, dk, dv], ref())
    except Exception as exc:
        return Peer.skipped(f"attention_mgpu's backward failed: {why(exc)}")
    if not _ok(err, plan):
        return Peer.skipped(f"attention_mgpu's backward did not verify: rel. error {err:.2e}")
    arg_sets = [(res, do)] + [(jax.tree.map(lambda x: jnp.array(x, copy=True), res), jnp.array(do, copy=True))
                              for _ in range(case.sets - 1)]
    info = {"backend": "jax attention_mgpu _attention_bwd", "mask": "no mask", "rel_error": err, "verified": True,
            "config": {"block_q_dq": 64, "block_kv_dq": 64, "block_q_dkv": 64, "block_kv_dkv": 64, "stages": 2},
            "note": "jax 0.11.2 attention_mgpu backward (delta in XLA, a dQ kernel and a dK/dV kernel); f16 "
                    "inputs, q pre-scaled"}
    with contextlib.suppress(Exception):
        del out
    return Peer(jax_contender("jax_pallas", bwd, arg_sets), info, close=arg_sets.clear)
