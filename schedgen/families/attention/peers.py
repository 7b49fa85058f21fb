"""The attention family's benchmark peers: torch's scaled_dot_product_attention with one backend each, `sdpa_cudnn`
(SDPBackend.CUDNN_ATTENTION) and `sdpa_flash` (SDPBackend.FLASH_ATTENTION, FA2-class), and `jax_pallas` (JAX's own
Pallas flash attention, attention_mgpu, at the best of a small verified sweep of its tuning). Each peer runs with
our causal mask (its alignment included) and is checked against the float64 reference before it is timed; one that
cannot take our mask, cannot run the case (torch's reason: its error and the warnings that say why each kernel was
not used), or fails the check, is skipped with the reason. Each timed peer's info says what it is: backend, config
and mask. FLOPs = 4 D per unmasked (q, k) pair per head and batch (the plan's `flops`); rows add flops, causal, its
alignment, sets and iters."""
from __future__ import annotations

import contextlib
import re
import sys
import types
import warnings

import numpy as np

from ...bench.case import Peer, from_torch, guard, out_bytes, to_torch, why
from ...bench.timing import Contender, jax_contender, matmul_sets, time_jax_fn

sets = matmul_sets

# peer name -> the torch.nn.attention.SDPBackend member its SDPA calls are restricted to
SDPA_BACKENDS = {"sdpa_cudnn": "CUDNN_ATTENTION", "sdpa_flash": "FLASH_ATTENTION"}
PEER_LABELS = {"sdpa_cudnn": "SDPA cuDNN", "sdpa_flash": "SDPA flash", "jax_pallas": "JAX attention_mgpu"}
_LABELS = {**PEER_LABELS, "sdpa": "torch SDPA"}     # `sdpa`: records made before the backends were separate


def row_fields(case) -> dict:
    p = case.plan
    return {"dtype": p.dtype, "flops": p.flops, "causal": p.causal, "causal_alignment": p.causal_alignment,
            "sets": case.sets, "iters": case.iters}


def peer_names() -> list[str]:
    """The peers every attention row is timed against, in the table's order."""
    return [*SDPA_BACKENDS, "jax_pallas"]


def peers(case) -> dict[str, Peer]:
    ref = _ReferenceOnce(case)
    out = {name: guard("torch", lambda b=backend: sdpa_peer(case, b, ref)) for name, backend in SDPA_BACKENDS.items()}
    out["jax_pallas"] = guard("jax", lambda: jax_peer(case, ref))
    return out


class _ReferenceOnce:
    """The float64 reference of the case's output (sampled rows), computed on first use and shared by the peers."""

    def __init__(self, case):
        self.case, self.value = case, None

    def __call__(self):
        if self.value is None:
            from ...reference import reference
            plan = self.case.plan
            self.value = reference(self.case.spec, plan.sizes, self.case.host, sample=True, seed=2)[plan.outputs[0].name]
        return self.value


def _checked(err: float, plan) -> bool:
    from ...reference import tolerance
    return err <= tolerance(plan.dtype, True)   # the tolerance verify gives our approx_math kernels


def sdpa_scope(torch, backend: str | None):
    """A context factory restricting SDPA to `backend` (an SDPBackend member's name), or None for torch's own pick."""
    if backend is None:
        return None
    from torch.nn.attention import SDPBackend, sdpa_kernel
    member = getattr(SDPBackend, backend)
    return lambda: sdpa_kernel(member)


def sdpa_masks(torch, plan, device) -> list[tuple[str, dict]]:
    """The ways to give torch SDPA our mask, in the order to try them: (label, keyword arguments). No mask: none.
    Top-left (or Sq = Skv, where the alignments agree): `is_causal=True` (torch's causal is top-left). Bottom-right:
    torch's `causal_lower_right` bias (its fused kernels where they take it), then an explicit boolean mask (key j
    visible to query i iff j <= i + Skv - Sq)."""
    if not plan.causal:
        return [("no mask", {})]
    sq, skv = plan.seq_q, plan.seq_kv
    if plan.causal_alignment == "top_left" or sq == skv:
        return [("is_causal=True (top-left)", {"is_causal": True})]
    out = []
    try:
        from torch.nn.attention.bias import causal_lower_right
        out.append(("causal_lower_right (bottom-right)", {"attn_mask": causal_lower_right(sq, skv)}))
    except ImportError:
        pass
    rows = torch.arange(sq, device=device)[:, None] + (skv - sq)
    out.append(("boolean bottom-right mask", {"attn_mask": torch.arange(skv, device=device)[None, :] <= rows}))
    return out


def sdpa_call(torch, plan, views, kwargs: dict):
    """SDPA on [B, H, S, D] views of q, k, v with our scale, GQA and `kwargs` (the mask)."""
    import torch.nn.functional as F
    q, k, v = views
    return F.scaled_dot_product_attention(q, k, v, scale=plan.scale, enable_gqa=plan.heads_q != plan.heads_kv,
                                          **kwargs)


_TRIGGERED = re.compile(r"\s*\(Triggered internally at [^)]*\)\.?\s*$")


def _torch_says(caught) -> list[str]:
    """The distinct warnings torch gave (why a backend's kernel was not used), without its source locations."""
    out: list[str] = []
    for w in caught:
        text = _TRIGGERED.sub("", str(w.message).strip()).strip()
        if text and text not in out:
            out.append(text)
    return out


def sdpa_try(torch, plan, views, kwargs: dict, scope=None):
    """One SDPA call with `kwargs` (the mask) inside `scope()` (a backend restriction, or none); its output as
    [B, S, H, D] where our layout is bshd, and torch's warnings while it ran (raised errors carry them: see
    `SdpaError`)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with scope() if scope is not None else contextlib.nullcontext():
                out = sdpa_call(torch, plan, views, kwargs)
        except Exception as exc:
            raise SdpaError(why(exc), _torch_says(caught)) from exc
    return (out.transpose(1, 2) if plan.layout == "bshd" else out), _torch_says(caught)


class SdpaError(RuntimeError):
    """SDPA refused or failed: torch's error and the warnings it gave saying why (each backend's reason)."""

    def __init__(self, error: str, said: list[str]):
        super().__init__(error + (f" (torch: {'; '.join(said)})" if said else ""))
        self.error, self.said = error, said


def sdpa_verified(torch, plan, views, ref, device, scope=None) -> tuple[tuple[str, dict] | None, list[dict]]:
    """The first of sdpa_masks whose output (SDPA inside `scope()`: one backend, or torch's pick without it) matches
    the float64 reference `ref` of our op (mask included), and what each try gave: [{mask, rel_error, verified} or
    {mask, error}]."""
    from ...reference import rel_error
    tried = []
    for label, kwargs in sdpa_masks(torch, plan, device):
        try:
            out, _ = sdpa_try(torch, plan, views, kwargs, scope)
            err = rel_error(from_torch(torch, out, plan.dtype), ref)
        except Exception as exc:
            tried.append({"mask": label, "error": str(exc) if isinstance(exc, SdpaError) else why(exc)})
            continue
        ok = _checked(err, plan)
        tried.append({"mask": label, "rel_error": err, "verified": ok})
        if ok:
            return (label, kwargs), tried
    return None, tried


def sdpa_skip_reason(backend: str | None, tried: list[dict]) -> str:
    """Why no form of our mask ran and verified in SDPA (with `backend` only): each form's error or error."""
    who = f"torch SDPA with SDPBackend.{backend} only" if backend else "torch SDPA"
    return f"no form of our mask verified in {who}: " + "; ".join(
        f"{t['mask']}: " + (t["error"] if "error" in t else f"rel. error {t['rel_error']:.2e}") for t in tried)


def sdpa_info(torch, plan, backend: str | None, label: str, tried: list[dict]) -> dict:
    """What a timed SDPA peer is: backend, config, mask, and the check it passed."""
    gqa = plan.heads_q != plan.heads_kv
    config = {"scale": plan.scale, "enable_gqa": gqa, "layout": "[B, H, S, D] views of our "
              f"{plan.layout} tensors", "dtype": plan.dtype}
    where = f"SDPBackend.{backend} only (sdpa_kernel, entered once per timed block)" if backend else "torch's pick"
    return {"backend": f"SDPBackend.{backend}" if backend else "torch's pick", "mask": label, "config": config,
            "note": f"torch {torch.__version__}, {where}, mask: {label}" + (", enable_gqa" if gqa else ""),
            "rel_error": tried[-1]["rel_error"], "verified": True, "sweep": tried}


def sdpa_peer(case, backend: str | None = None, ref=None) -> Peer:
    """torch SDPA restricted to `backend` (an SDPBackend member's name; None: torch's own pick) with our mask, the
    first form of it (sdpa_masks) that runs and passes the check, timed; else skipped with torch's reasons."""
    import torch

    plan = case.plan
    name = next((n for n, b in SDPA_BACKENDS.items() if b == backend), "sdpa")
    scope = sdpa_scope(torch, backend)
    dev = [[to_torch(torch, case.host[o.name], o.dtype) for o in plan.inputs]]
    dev += [[t.clone() for t in dev[0]] for _ in range(case.sets - 1)]
    held = {"views": [[t.transpose(1, 2) if plan.layout == "bshd" else t for t in s] for s in dev]}
    del dev
    ref = (ref or _ReferenceOnce(case))()
    chosen, tried = sdpa_verified(torch, plan, held["views"][0], ref, "cuda", scope)
    if chosen is None:
        held.clear()
        torch.cuda.empty_cache()
        return Peer.skipped(sdpa_skip_reason(backend, tried), backend=f"SDPBackend.{backend}" if backend else None,
                            sweep=tried)
    label, kwargs = chosen

    def call(i: int) -> None:
        sdpa_call(torch, plan, held["views"][i % len(held["views"])], kwargs)
    with scope() if scope is not None else contextlib.nullcontext():
        call(0)

    def close() -> None:
        held.clear()
        torch.cuda.empty_cache()
    return Peer(Contender(name, call, stream=int(torch.cuda.current_stream().cuda_stream), scope=scope),
                sdpa_info(torch, plan, backend, label, tried), close)


def jax_peer(case, ref=None) -> Peer:
    """attention_mgpu at the best of its sweep: each config checked against the float64 reference, the verified
    ones timed briefly, the fastest timed in full (side by side with ours)."""
    import jax

    from ...reference import rel_error
    plan = case.plan
    fn, note = jax_attention_peer(plan)
    if fn is None and "2 consumers" not in note:
        return Peer.skipped(note)
    base = [jax.device_put(x) for x in jax_attention_inputs(plan, case.host)]
    arg_sets = [base] + [[jax.numpy.array(x, copy=True) for x in base] for _ in range(case.sets - 1)]
    ref = (ref or _ReferenceOnce(case))()
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
        ok = _checked(err, plan)
        tried.append({"config": list(cfg), "rel_error": err, "verified": ok, "time_ms": quick})
        if ok and quick is not None and (best is None or quick < best[0]):
            best = (quick, f, cnote, err, cfg)
    if best is None:
        return Peer.skipped("no attention_mgpu config verified", sweep=tried)
    bq, bkv, st = best[4]
    info = {"backend": "jax attention_mgpu", "mask": jax_mask_label(plan),
            "config": {"block_q": bq, "block_kv": bkv, "max_concurrent_steps": st, "consumers": 2},
            "note": best[2] + " (best of its sweep)", "rel_error": best[3], "verified": True, "sweep": tried}
    return Peer(jax_contender("jax_pallas", best[1], arg_sets), info, close=arg_sets.clear)


def jax_mask_label(plan) -> str:
    """The mask attention_mgpu runs for the plan (its causal flag: top-left, which is ours where it is timed)."""
    if not plan.causal:
        return "no mask"
    return "causal=True (top-left; Sq = Skv)" if plan.seq_q == plan.seq_kv else "causal=True (top-left)"


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


def jax_mask_mismatch(plan) -> str | None:
    """Why attention_mgpu cannot run our mask, or None. jax 0.11.2's causal mask is top-left (query i sees keys
    j <= i: `(q_ids + q_seq_base) >= (kv_ids + kv_step * block_kv)`), and its causal key-block count,
    cdiv(query block end, block_kv), is not capped at Skv (Sq > Skv would read keys past the end)."""
    if not plan.causal or plan.seq_q == plan.seq_kv:
        return None
    if plan.causal_alignment == "bottom_right":
        return (f"attention_mgpu's causal mask is top-left (query i sees keys j <= i); ours is bottom-right (j <= i "
                f"+ Skv - Sq) and Sq = {plan.seq_q} != Skv = {plan.seq_kv}")
    if plan.seq_q > plan.seq_kv:
        return (f"attention_mgpu's causal loop runs past the keys when Sq > Skv ({plan.seq_q} > {plan.seq_kv}): its key "
                f"block count is not capped at Skv")
    return None


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
    if (why_not := jax_mask_mismatch(plan)) is not None:
        return None, why_not
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


def _mask(row: dict) -> str:
    """The causal column: False, or the alignment (True in records made before it was recorded)."""
    return str(row.get("causal_alignment") or row.get("causal"))


def _names(rows: list[dict]) -> list[str]:
    """The peers of the table: ours in order, then any other a row holds (the single `sdpa` of older records)."""
    names = peer_names()
    for r in rows:
        names += [n for n in (r.get("peers") or {}) if n not in names]
    return names


def _peer_cell(r: dict, name: str, notes: dict[str, str]) -> str:
    p = (r.get("peers") or {}).get(name) or {}
    if p.get("ratio"):
        bad = "" if p.get("verified", True) else ", UNVERIFIED"
        if p.get("note"):
            notes.setdefault(f"{r['spec']} {name}", p["note"])
        return f"{p['ratio']:.2f}x ({p.get('tflops') or 0:.0f} TFLOP/s{bad})"
    if p.get("skipped"):
        notes.setdefault(f"{r['spec']} {r['backend']} {name}", p["skipped"])
        return "skipped"
    return "-"


def markdown(rows: list[dict]) -> str:
    """Attention rows: time, TFLOP/s (4 D per unmasked (q, k) pair per head and batch) and the ratio to each peer
    (its time / ours: above 1, ours is faster); under the table what each peer is (backend, config, mask) and why a
    peer was not timed."""
    names = _names(rows)
    head = (["spec", "backend", "kernel", "shape", "causal", "time (ms)", "TFLOP/s"]
            + [f"vs {_LABELS.get(n, n)}" for n in names]
            + ["verified", "rel. error"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes: dict[str, str] = {}
    for r in rows:
        shape = " ".join(f"{k}={v}" for k, v in r.get("shape", {}).items())
        t = f"{r['time_ms']:.4f}" if r.get("time_ms") else r.get("error", "-")
        tf = f"{r['tflops']:.0f}" if r.get("tflops") else "-"
        err = f"{r['rel_error']:.2e}" if r.get("rel_error") is not None else "-"
        cells = [_peer_cell(r, n, notes) for n in names]
        lines.append("| " + " | ".join([r["spec"], r["backend"], f"`{r['kernel']}`", shape, _mask(r), t, tf, *cells,
                                        "yes" if r.get("verified") else "NO", err]) + " |")
    out = "\n".join(lines) + "\n"
    if notes:    # what each peer is (per spec), why a peer was not timed (the first reason per spec, backend, peer)
        out += "\n" + "\n".join(f"- {k}: {v}" for k, v in notes.items()) + "\n"
    return out


attention_markdown = markdown
