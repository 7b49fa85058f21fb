"""The map family's benchmark peers: `copy`, a device-to-device copy of the same number of bytes (what a memory-bound
kernel can reach: half the bytes moved read, the same written), and `torch_eager`, torch's own eager ops on the same
tensors (the body rendered as torch ops from its checked tree, schedgen/bench/torch_expr.py: `o = x + y` is one
torch add, `y = gelu(x * w + b)` three kernels, as a torch user's code runs it), checked against the float64
reference before it is timed. Rows give GB/s (the plan's bytes moved, for ours and each peer), the nested peers and
the flat peer / peer_time_ms / ratio fields naming the copy."""
from __future__ import annotations

import ast

from ...bench.case import Peer, device_copy_peer, from_torch, guard, to_torch, torch_dtypes, torch_fn_peer, torch_sync

FLAT_PEER = "copy"
PEER_LABELS = {"copy": "device copy", "torch_eager": "torch eager"}


def peer_names() -> list[str]:
    return list(PEER_LABELS)




def body_of(spec):
    """The spec's body parsed and checked as the float64 reference parses it."""
    from ...frontend import expr as ex
    op = spec.op
    return ex.parse_body(op.body, inputs=list(op.inputs), outputs=list(op.outputs), constants=list(op.constants))


def torch_map_fn(torch, spec, shapes: dict, dtypes: dict, device=None):
    """f(*inputs in the spec's order) -> the outputs in its order: the body in eager torch ops (nothing eval'ed),
    each output at `shapes[name]` in torch dtype `dtypes[name]`."""
    from ...bench.torch_expr import as_output, torch_body
    op = spec.op
    run = torch_body(torch, body_of(spec), {c: float(v) for c, v in op.constants.items()})
    names, outs = list(op.inputs), list(op.outputs)

    def fn(*inputs):
        got = run(dict(zip(names, inputs)))
        return tuple(as_output(torch, got[o], shapes[o], dtypes[o], device) for o in outs)
    return fn


def eager_peer(case, device: str = "cuda") -> Peer:
    """torch's eager ops of the body on device copies of the same inputs, checked against the float64 reference
    (`device` "cpu": the same construction on CPU tensors, for the tests)."""
    import torch

    from ...reference import reference, rel_error, tolerance
    plan, spec = case.plan, case.spec
    tdt = torch_dtypes(torch)
    first = [to_torch(torch, case.host[o.name], o.dtype, device) for o in plan.inputs]
    held = {"args": [first] + [[t.clone() for t in first] for _ in range(case.sets - 1)]}
    fn = torch_map_fn(torch, spec, {o.name: tuple(o.shape) for o in plan.outputs},
                      {o.name: tdt[o.dtype] for o in plan.outputs}, device)
    outs = fn(*first)
    torch_sync(torch, device)
    ref = reference(spec, plan.sizes, case.host)
    errs = [rel_error(from_torch(torch, t, o.dtype), ref[o.name]) for t, o in zip(outs, plan.outputs)]
    del outs
    err = max(errs)
    ok = all(e <= tolerance(o.dtype, False) for e, o in zip(errs, plan.outputs))
    body = "; ".join(f"{t} = {ast.unparse(v.tree)}" for t, v in body_of(spec).statements)
    info = {"backend": "torch eager", "body": body, "rel_error": err,
            "verified": ok, "note": f"the body `{body}` as eager torch ops on the same tensors (outputs allocated by "
                                    f"torch's caching allocator); torch {torch.__version__}"}
    return torch_fn_peer("torch_eager", fn, held, torch, device, info)


def peers(case) -> dict[str, Peer]:
    return {"copy": guard("copy", lambda: device_copy_peer(case)), "torch_eager": guard("torch", lambda: eager_peer(case))}


def markdown(rows: list[dict]) -> str:
    """Map rows: time, GB/s (bytes read + written) and the ratio to each peer (its time / ours: above 1, ours is
    faster), what each peer is and why one was not timed under the table."""
    head = ["spec", "variant", "backend", "shape", "dtype", "time (ms)", "GB/s", "vs device copy", "vs torch eager",
            "verified", "rel. error"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes: dict[str, str] = {}
    for r in rows:
        shape = " ".join(f"{k}={v}" for k, v in r["shape"].items())
        t = f"{r['time_ms']:.4f}" if r.get("time_ms") else r.get("error", "-")
        rate = f"{r['gbps']:.0f}" if r.get("gbps") else "-"
        cells = []
        peers = dict(r.get("peers") or {})
        if "copy" not in peers and r.get("peer") == "copy":      # rows made before map rows nested their peers
            peers["copy"] = {"ratio": r.get("ratio"), "time_ms": r.get("peer_time_ms")}
        for name in peer_names():
            p = peers.get(name) or {}
            if p.get("ratio"):
                bad = "" if p.get("verified", True) else ", UNVERIFIED"
                cells.append(f"{p['ratio']:.3f} ({p['gbps']:.0f} GB/s{bad})" if p.get("gbps") else f"{p['ratio']:.3f}")
                if p.get("note"):
                    notes.setdefault(f"{r['spec']} {name}", p["note"])
            elif p.get("skipped"):
                cells.append("skipped")
                notes.setdefault(f"{r['spec']} {r['backend']} {name}", p["skipped"])
            else:
                cells.append("-")
        err = f"{r['rel_error']:.2e}" if r.get("rel_error") is not None else "-"
        lines.append("| " + " | ".join([r["spec"], r.get("variant", "default"), r["backend"], shape, r["dtype"], t,
                                        rate, *cells, "yes" if r["verified"] else "NO", err]) + " |")
    out = "\n".join(lines) + "\n"
    if notes:
        out += "\n" + "\n".join(f"- {k}: {v}" for k, v in notes.items()) + "\n"
    return out

