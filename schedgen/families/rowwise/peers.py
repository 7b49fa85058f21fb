"""The rowwise family's benchmark peers:

- `copy`: a device-to-device copy of the same number of bytes (half the bytes the kernel moves, read and written):
  what a memory-bound kernel can reach;
- `torch`: torch's own op where the spec computes one: torch.softmax, torch.log_softmax, F.layer_norm, F.rms_norm
  (after the residual add when the spec fuses one), torch.logsumexp, F.cross_entropy(reduction="none"), a row sum /
  max. Each candidate whose operands fit is run on the same tensors and checked against the float64 reference;
  the first that matches is timed (none matches: skipped, with the reason);
- `torch_compile`: torch.compile of the body as eager torch ops (reductions as torch.sum / amax / amin / mean /
  logsumexp / gather), checked the same way.

Inputs of one value a row that `take` reads (cross-entropy's targets) are replaced, for the torch peers, by valid
class indices (random integers in [0, N), as floats; each peer is checked against the float64 reference of those):
torch's cross_entropy asserts on the device for an index out of range, which would end the process's CUDA context.
Our kernel reads the case's own inputs (an index value does not change its time: every element is read once)."""
from __future__ import annotations

import ast

import numpy as np

from . import body as rb
from ...bench.case import Peer, device_copy_peer, from_torch, guard, to_torch, torch_dtypes, torch_fn_peer, torch_sync

FLAT_PEER = "copy"
PEER_LABELS = {"copy": "device copy", "torch": "torch op", "torch_compile": "torch.compile"}


def peer_names() -> list[str]:
    return list(PEER_LABELS)




def index_inputs(plan) -> list[str]:
    """The per-row inputs a `take` reads as its column (cross-entropy's targets)."""
    per_row = {o.name for o in plan.inputs if o.kind == "per_row"}
    used = set()
    for r in plan.reductions:
        if r.index_arg is not None:
            used |= {n.id for n in ast.walk(r.index_arg.expr.tree) if isinstance(n, ast.Name)}
    return sorted(per_row & used)


def valid_targets(plan, host: dict, seed: int = 0) -> dict:
    """`host` with every take index input replaced by random integers in [0, N) (as its dtype)."""
    out = dict(host)
    rng = np.random.default_rng(seed)
    for name in index_inputs(plan):
        a = host[name]
        out[name] = rng.integers(0, plan.n, a.shape).astype(a.dtype)
    return out


# ------------------------------------------------------------------------------------------ torch functions

def _torch_reduce(torch, op, a, idx, n):
    """One reduction along the row, as the float64 reference defines it (take: 0 off the row)."""
    a = a.expand(*a.shape[:-1], n) if a.shape[-1] != n else a
    if op in ("sum", "mean"):
        return a.sum(-1, keepdim=True) if op == "sum" else a.mean(-1, keepdim=True)
    if op in ("max", "min"):
        return a.amax(-1, keepdim=True) if op == "max" else a.amin(-1, keepdim=True)
    if op == "logsumexp":
        return torch.logsumexp(a, -1, keepdim=True)
    col = idx.long().clamp(0, n - 1)
    hit = (idx >= 0) & (idx < n)
    return torch.where(hit, a.gather(-1, col), torch.zeros_like(col, dtype=a.dtype))


def torch_body_fn(torch, plan, spec):
    """f(*inputs) -> outputs: the body as eager torch ops in f32 (reductions along the last axis)."""
    from ...bench.torch_expr import torch_body
    from ...frontend import expr as ex
    from .reference import parsed
    body, kinds = parsed(spec)
    consts = {c: float(v) for c, v in spec.op.constants.items()}

    def one(e):
        return torch_body(torch, ex.Body((("sg_v", e),), "", ("sg_v",)), consts)

    steps = []
    for i, (target, e) in enumerate(body.statements):
        for r in body.reductions:
            if r.statement == i:
                steps.append((rb.PLACEHOLDER.format(r.index), r.op, one(r.arg),
                              one(r.index_arg) if r.index_arg is not None else None))
        steps.append((target, None, one(e), None))
    names = [o.name for o in plan.inputs]
    tdt = torch_dtypes(torch)
    n = plan.n

    integer = {o.name for o in plan.index_inputs}
    scalar_in = {o.name for o in plan.scalar_inputs}

    def fn(*inputs):
        env = {}
        m = next(t for t, o in zip(inputs, plan.inputs) if o.kind == "row").shape[0]
        keep = torch.ones(m, dtype=torch.bool, device=inputs[0].device)   # rows not ignored (class indices)
        for name, t in zip(names, inputs):
            if name in integer:
                keep = keep & (t.reshape(-1) != plan.ignore_index)
        count = keep.sum()
        for name, t in zip(names, inputs):
            if name in integer:        # a column where 0 <= i < N, else -1 (the kernels' masking)
                t = torch.where((t >= 0) & (t < n), t, torch.full_like(t, -1))
            t = t.float()
            if name in scalar_in:      # the reduction's adjoint
                t = (t / count if plan.reduction == "mean" else t).reshape(1, 1)
            env[name] = t.reshape(1, -1) if kinds[name] == "col" else t.reshape(-1, 1) if kinds[name] == "per_row" else t
        env.update(consts)
        for target, op, f, fi in steps:
            v = f(env)["sg_v"]
            env[target] = _torch_reduce(torch, op, v, fi(env)["sg_v"] if fi else None, n) if op else v
        outs = []
        for o in plan.outputs:
            v = env[o.name]
            if not isinstance(v, torch.Tensor):
                v = torch.tensor(v, device=inputs[0].device)
            v = torch.where(keep.reshape(-1, 1), v, torch.zeros_like(v)) if integer else v
            if o.kind == "scalar":
                total = v.expand(m, 1).sum().reshape(1)
                outs.append((total / count if plan.reduction == "mean" else total).to(tdt[o.dtype]))
                continue
            shape = (m, n) if o.kind == "row" else (m,) + tuple(o.shape[1:])
            outs.append(v.expand(m, n if o.kind == "row" else 1).reshape(shape).to(tdt[o.dtype]))
        return tuple(outs)
    return fn


def torch_candidates(torch, plan, spec) -> list[tuple[str, object]]:
    """(label, f(*inputs) -> outputs) of torch's own ops that may compute this spec, by its operands' kinds."""
    F = torch.nn.functional
    ins, outs = plan.inputs, plan.outputs
    kinds = [o.kind for o in ins]
    tdt = torch_dtypes(torch)
    n = plan.n
    eps = [float(v) for v in spec.op.constants.values()] or [1e-5]
    out_dt = [tdt[o.dtype] for o in outs]
    cands = []
    if [o.kind for o in outs] == ["row"]:
        if kinds == ["row"]:
            cands += [("torch.softmax", lambda x: (torch.softmax(x, -1).to(out_dt[0]),)),
                      ("torch.log_softmax", lambda x: (torch.log_softmax(x, -1).to(out_dt[0]),))]
            cands += [(f"F.rms_norm(eps={e})", lambda x, e=e: (F.rms_norm(x, (n,), eps=e).to(out_dt[0]),)) for e in eps]
            cands += [(f"F.layer_norm(eps={e})", lambda x, e=e: (F.layer_norm(x, (n,), eps=e).to(out_dt[0]),))
                      for e in eps]
        if kinds == ["row", "col"]:
            cands += [(f"F.rms_norm(eps={e})", lambda x, w, e=e: (F.rms_norm(x, (n,), w, eps=e).to(out_dt[0]),))
                      for e in eps]
        if kinds == ["row", "col", "col"]:
            cands += [(f"F.layer_norm(eps={e})", lambda x, w, b, e=e: (F.layer_norm(x, (n,), w, b, eps=e)
                                                                       .to(out_dt[0]),)) for e in eps]
    if [o.kind for o in outs] == ["row", "row"] and kinds == ["row", "row", "col"]:
        def fused(x, r, w, e):
            h = x + r
            return F.rms_norm(h, (n,), w, eps=e).to(out_dt[0]), h.to(out_dt[1])
        cands += [(f"x + residual, F.rms_norm(eps={e})", lambda x, r, w, e=e: fused(x, r, w, e)) for e in eps]
    if [o.kind for o in outs] == ["per_row"]:
        shape = tuple(outs[0].shape[1:])
        if kinds == ["row"]:
            cands += [("torch.logsumexp", lambda x: (torch.logsumexp(x.float(), -1).reshape(-1, *shape).to(out_dt[0]),)),
                      ("torch.sum", lambda x: (x.float().sum(-1).reshape(-1, *shape).to(out_dt[0]),)),
                      ("torch.amax", lambda x: (x.amax(-1).reshape(-1, *shape).to(out_dt[0]),))]
    if [o.kind for o in outs] in (["per_row"], ["scalar"]) and kinds == ["row", "per_row"]:
        cands += _cross_entropy(F, plan, out_dt[0])
    return cands


def _cross_entropy(F, plan, dtype) -> list[tuple[str, object]]:
    """F.cross_entropy with the plan's reduction (none: one loss a row, in the output's shape) and, for class
    indices, its ignore_index."""
    shape = tuple(plan.outputs[0].shape[1:])
    if plan.reduction == "none":
        ig = plan.ignore_index if plan.index_inputs else -100
        return [("F.cross_entropy(reduction='none')", lambda x, t: (
            F.cross_entropy(x.float(), t.reshape(-1).long(), reduction="none", ignore_index=ig)
            .reshape(-1, *shape).to(dtype),))]
    if not plan.index_inputs:
        return []
    return [(f"F.cross_entropy(reduction='{plan.reduction}')", lambda x, t: (
        F.cross_entropy(x.float(), t.reshape(-1).long(), reduction=plan.reduction,
                        ignore_index=plan.ignore_index).reshape(1).to(dtype),))]


def _checked(torch, fn, plan, spec, host, device) -> tuple[bool, float]:
    from ...reference import reference, rel_error, tolerance
    args = [to_torch(torch, host[o.name], o.dtype, device) for o in plan.inputs]
    got = fn(*args)
    torch_sync(torch, device)
    ref = reference(spec, {k: v for k, v in _sizes(plan, host).items()}, host)
    errs = [rel_error(from_torch(torch, t, o.dtype), ref[o.name]) for t, o in zip(got, plan.outputs)]
    ok = all(e <= max(tolerance(o.dtype, False), 2e-2 if o.dtype == "bf16" else 0) for e, o in zip(errs, plan.outputs))
    return ok, max(errs)


def _sizes(plan, host) -> dict:
    from ...plan import dims
    out = {}
    for o in plan.inputs:
        for d, x in zip(o.shape, host[o.name].shape):
            if isinstance(d, dims.Dim):
                out[str(d.args[0])] = int(x)
    return {**{k: v for k, v in plan.sizes.items() if isinstance(v, int)}, **out}


def _held(torch, plan, host, case, device):
    first = [to_torch(torch, host[o.name], o.dtype, device) for o in plan.inputs]
    return {"args": [first] + [[t.clone() for t in first] for _ in range(case.sets - 1)]}


def torch_peer(case, device: str = "cuda") -> Peer:
    import torch
    plan, spec = case.plan, case.spec
    host = valid_targets(plan, case.host)
    tried = []
    for label, fn in torch_candidates(torch, plan, spec):
        try:
            ok, err = _checked(torch, fn, plan, spec, host, device)
        except Exception as exc:   # noqa: BLE001  (a candidate that does not apply is skipped)
            tried.append(f"{label}: {type(exc).__name__}")
            continue
        if ok:
            info = {"backend": label, "rel_error": err, "verified": True,
                    "note": f"{label} on the same tensors (checked against the float64 reference); torch "
                            f"{torch.__version__}"}
            return torch_fn_peer("torch", fn, _held(torch, plan, host, case, device), torch, device, info)
        tried.append(f"{label}: rel. error {err:.2e}")
    return Peer.skipped("no torch op computes this body" + (f" (tried {'; '.join(tried)})" if tried else ""))


def compile_peer(case, device: str = "cuda") -> Peer:
    import torch
    plan, spec = case.plan, case.spec
    host = valid_targets(plan, case.host)
    fn = torch.compile(torch_body_fn(torch, plan, spec), dynamic=False)
    ok, err = _checked(torch, fn, plan, spec, host, device)
    info = {"backend": "torch.compile", "rel_error": err, "verified": ok,
            "note": f"torch.compile of the body as eager torch ops in f32 (inductor fuses it); torch {torch.__version__}"}
    return torch_fn_peer("torch_compile", fn, _held(torch, plan, host, case, device), torch, device, info)


def peers(case) -> dict[str, Peer]:
    return {"copy": guard("copy", lambda: device_copy_peer(case)), "torch": guard("torch", lambda: torch_peer(case)),
            "torch_compile": guard("torch", lambda: compile_peer(case))}


def markdown(rows: list[dict]) -> str:
    """Rowwise rows: time, GB/s and the ratio to each peer (its time / ours: above 1, ours is faster)."""
    head = ["spec", "backend", "shape", "time (ms)", "GB/s", "vs device copy", "vs torch op", "vs torch.compile",
            "verified", "rel. error"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes: dict[str, str] = {}
    for r in rows:
        shape = " ".join(f"{k}={v}" for k, v in r["shape"].items())
        t = f"{r['time_ms']:.4f}" if r.get("time_ms") else r.get("error", "-")
        rate = f"{r['gbps']:.0f}" if r.get("gbps") else "-"
        cells = []
        for name in peer_names():
            p = (r.get("peers") or {}).get(name) or {}
            if p.get("ratio"):
                bad = "" if p.get("verified", True) else ", UNVERIFIED"
                cells.append(f"{p['ratio']:.3f}{bad}")
                if p.get("note"):
                    notes.setdefault(f"{r['spec']} {name}", p["note"])
            elif p.get("skipped"):
                cells.append("skipped")
                notes.setdefault(f"{r['spec']} {r['backend']} {name}", p["skipped"])
            else:
                cells.append("-")
        err = f"{r['rel_error']:.2e}" if r.get("rel_error") is not None else "-"
        lines.append("| " + " | ".join([r["spec"], r["backend"], shape, t, rate, *cells,
                                        "yes" if r["verified"] else "NO", err]) + " |")
    out = "\n".join(lines) + "\n"
    if notes:
        out += "\n" + "\n".join(f"- {k}: {v}" for k, v in notes.items()) + "\n"
    return out
