"""The grouped_matmul family's benchmark peers: `torch_grouped_mm` (torch._grouped_mm, where torch has it: one
grouped cuBLAS/CUTLASS kernel given the groups' cumulative ends), `cublas_loop` (a Python loop of torch.matmul per
group into the output's rows: what MoE layers did before grouped kernels; the counts are read on the host once,
outside the timing) and `device_copy` (a device-to-device copy of half the bytes the kernel moves). Each product peer
is checked against the float64 reference on sampled rows; with an epilogue other than `out = acc` they time the
bare product (noted). The flat peer / peer_time_ms / ratio fields name torch._grouped_mm."""
from __future__ import annotations

from ...bench.case import Peer, device_copy_peer, from_torch, guard, to_torch, torch_dtypes
from ...bench.timing import Contender, matmul_sets
from ...plan.hardware import PEAK_TFLOPS
from .reference import group_rows

FLAT_PEER = "torch_grouped_mm"
PEER_LABELS = {"torch_grouped_mm": "torch._grouped_mm", "cublas_loop": "cuBLAS loop (torch.matmul per group)",
               "device_copy": "device copy"}
sets = matmul_sets


def rates(plan, ms: float | None) -> dict:
    if not ms:
        return {}
    tf = plan.flops / (ms * 1e-3) / 1e12
    return {"tflops": tf, "pct_peak": 100.0 * tf / PEAK_TFLOPS}


def row_fields(case) -> dict:
    p = case.plan
    rows = group_rows(case.host[p.offsets_name], p.offsets_format, p.groups)
    counts = [max(0, e - s) for s, e in rows]
    return {"dtype": p.out_dtype, "flops": p.flops, "peak_tflops": PEAK_TFLOPS, "sets": case.sets,
            "iters": case.iters, "groups": p.groups, "group_counts": counts}


def _ref(case):
    from ...reference import reference
    plan = case.plan
    spec = case.spec.model_copy(update={"op": case.spec.op.model_copy(update={"epilogue": None})})
    return plan, reference(spec, plan.sizes, case.host, sample=True, seed=2)[plan.outputs[0].name]


def _check(out, ref, dtype: str, k: int) -> dict:
    from ...reference import rel_error, tolerance
    err = rel_error(out, ref)
    return {"rel_error": err, "verified": bool(err <= tolerance(dtype, False, k))}


def _device_inputs(torch, plan, host, sets: int):
    x, w = plan.inputs[0], plan.inputs[1]
    x0, w0 = to_torch(torch, host[x.name], x.dtype), to_torch(torch, host[w.name], w.dtype)
    copies = [(x0, w0)] + [(x0.clone(), w0.clone()) for _ in range(sets - 1)]
    # [G, K, N] views: a transposed view of [G, N, K] weights (the column-major layout torch._grouped_mm takes)
    return [(a, b.transpose(-1, -2) if plan.transpose_rhs else b) for a, b in copies]


def _notes(torch, plan) -> list[str]:
    return ([] if plan.identity_epilogue else ["product only: the epilogue is not fused"]) + \
        [f"torch {torch.__version__}"]


def grouped_mm_peer(case, plan, ref) -> Peer:
    import torch
    from ...runtime import driver
    if not hasattr(torch, "_grouped_mm"):
        return Peer.skipped(f"torch {torch.__version__} has no torch._grouped_mm")
    rows = group_rows(case.host[plan.offsets_name], plan.offsets_format, plan.groups)
    ends = torch.tensor([e for _, e in rows], dtype=torch.int32, device="cuda")
    held = {"views": _device_inputs(torch, plan, case.host, case.sets), "ends": ends}
    tdt = torch_dtypes(torch)
    n = len(held["views"])

    def call(i: int):
        a, b = held["views"][i % n]
        return torch._grouped_mm(a, b, offs=held["ends"], out_dtype=tdt[plan.out_dtype])
    out = call(0)
    torch.cuda.synchronize()
    driver.ensure_context()
    info = _check(from_torch(torch, out, plan.out_dtype), ref, plan.out_dtype, plan.k)
    info.update(backend="torch._grouped_mm", note="; ".join(_notes(torch, plan)),
                config={"offs": "cumulative group ends, int32 [G]"})

    def close() -> None:
        held.clear()
        torch.cuda.empty_cache()
    return Peer(Contender("torch_grouped_mm", call, stream=int(torch.cuda.current_stream().cuda_stream)), info, close)


def cublas_loop_peer(case, plan, ref) -> Peer:
    import torch
    from ...runtime import driver
    rows = [(s, e) for s, e in group_rows(case.host[plan.offsets_name], plan.offsets_format, plan.groups)]
    tdt = torch_dtypes(torch)
    views = _device_inputs(torch, plan, case.host, case.sets)
    held = {"views": views, "outs": [torch.empty(plan.outputs[0].shape, dtype=tdt[plan.out_dtype], device="cuda")
                                     for _ in views]}
    n = len(views)
    same = plan.out_dtype == plan.in_dtype

    def call(i: int) -> None:
        a, b = held["views"][i % n]
        out = held["outs"][i % n]
        for g, (s, e) in enumerate(rows):
            if e > s:
                if same:
                    torch.matmul(a[s:e], b[g], out=out[s:e])
                else:
                    out[s:e] = torch.mm(a[s:e], b[g], out_dtype=tdt[plan.out_dtype])
    call(0)
    torch.cuda.synchronize()
    driver.ensure_context()
    info = _check(from_torch(torch, held["outs"][0], plan.out_dtype), ref, plan.out_dtype, plan.k)
    live = sum(1 for s, e in rows if e > s)
    info.update(backend="cuBLAS (torch.matmul per group)", note="; ".join(
        _notes(torch, plan) + [f"{live} calls (empty groups skipped), group rows read on the host outside the timing"]),
        config={"calls": live})

    def close() -> None:
        held.clear()
        torch.cuda.empty_cache()
    return Peer(Contender("cublas_loop", call, stream=int(torch.cuda.current_stream().cuda_stream)), info, close)




def cublas_loop_k_peer(case, plan, ref) -> Peer:
    """ragged: k: out[g] = a[rows of g]^T @ b[rows of g] by one torch.matmul a group (an empty group's block zeroed
    outside the timing: the loop writes the others)."""
    import torch
    from ...runtime import driver
    rows = group_rows(case.host[plan.offsets_name], plan.offsets_format, plan.groups)
    tdt = torch_dtypes(torch)
    a0 = to_torch(torch, case.host[plan.inputs[0].name], plan.in_dtype)
    b0 = to_torch(torch, case.host[plan.inputs[1].name], plan.in_dtype)
    views = [(a0, b0)] + [(a0.clone(), b0.clone()) for _ in range(case.sets - 1)]
    held = {"views": views, "outs": [torch.zeros(plan.outputs[0].shape, dtype=tdt[plan.out_dtype], device="cuda")
                                     for _ in views]}
    n = len(views)

    def call(i: int) -> None:
        a, b = held["views"][i % n]
        out = held["outs"][i % n]
        for g, (s, e) in enumerate(rows):
            if e > s:
                out[g] = torch.matmul(a[s:e].t(), b[s:e]).to(out.dtype)
    call(0)
    torch.cuda.synchronize()
    driver.ensure_context()
    info = _check(from_torch(torch, held["outs"][0], plan.out_dtype), ref, plan.out_dtype, plan.k)
    info.update(backend="cuBLAS (torch.matmul per group)", note="; ".join(_notes(torch, plan) + [
        "ragged: k: a[rows of g]^T @ b[rows of g] a group, empty groups skipped"]))

    def close() -> None:
        held.clear()
        torch.cuda.empty_cache()
    return Peer(Contender("cublas_loop", call, stream=int(torch.cuda.current_stream().cuda_stream)), info, close)


def peers(case) -> dict[str, Peer]:
    plan, ref = _ref(case)      # one sampled float64 reference (of the bare product) for both product peers
    if plan.ragged == "k":
        return {"cublas_loop": guard("torch", lambda: cublas_loop_k_peer(case, plan, ref)),
                "device_copy": guard("copy", lambda: device_copy_peer(case, "device_copy"))}
    return {"torch_grouped_mm": guard("torch", lambda: grouped_mm_peer(case, plan, ref)),
            "cublas_loop": guard("torch", lambda: cublas_loop_peer(case, plan, ref)),
            "device_copy": guard("copy", lambda: device_copy_peer(case, "device_copy"))}


def summary(rows: list[dict]) -> list[str]:
    """A short table of bench rows: time, TFLOP/s and the ratios to each peer."""
    head = f"{'spec':40} {'T':>6} {'G':>3} {'ms':>8} {'TF/s':>7} {'vs _grouped_mm':>15} {'vs cuBLAS loop':>15}"
    out = [head]
    for r in rows:
        peers_ = r.get("peers", {})

        def ratio(name, peers_=peers_, r=r):
            t = (peers_.get(name) or {}).get("time_ms")
            return f"{t / r['time_ms']:.3f}x" if t and r.get("time_ms") else "-"
        out.append(f"{r.get('spec', '?'):40} {r.get('shape', {}).get('T', '?'):>6} {r.get('groups', '?'):>3} "
                   f"{(r.get('time_ms') or float('nan')):8.4f} {(r.get('tflops') or float('nan')):7.1f} "
                   f"{ratio('torch_grouped_mm'):>15} {ratio('cublas_loop'):>15}")
    return out

