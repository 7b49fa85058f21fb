"""The benchmark peers of an fp8 matmul plan (peers.py hands them over): `scaled_mm_fast` and `scaled_mm`
(torch._scaled_mm, cuBLASLt's fp8 GEMM, with the spec's scales: per-tensor or row-wise, a bias row passed as its
`bias`; with and without use_fast_accum: the fast form accumulates as this kernel does, in the wgmma's own running
sum, the other promotes it to f32 at intervals) and `cublas` (torch.matmul of the fp8 values upcast to bf16: a bf16
GEMM of the same numbers, a reference point rather than an fp8 peer).

torch._scaled_mm computes `(a @ b) * scale_a * scale_b (+ bias)` with a [M, K] row-major and b [K, N] column-major
(the [N, K] rhs transposed: a view, no copy), scale_a / scale_b one f32 each (tensorwise) or [M, 1] and [1, N]
(rowwise). `scaled_mm_form` reads which of these the spec's epilogue is (its checked tree, never a text match); any
other epilogue is a skipped peer saying why."""
from __future__ import annotations

import ast

from ...bench.case import Peer, from_torch, guard, to_torch, torch_fn_peer, torch_sync
from .blockscale import is_block_scaled
from ...plan.gemm import FP8_DTYPES
from .reference import accumulation, check_peer, epilogue_body

FP8_PEERS = ("scaled_mm_fast", "scaled_mm", "cublas")
LABELS = {"scaled_mm_fast": "torch._scaled_mm (fast accum)", "scaled_mm": "torch._scaled_mm"}


def is_fp8(plan) -> bool:
    return plan.in_dtype in FP8_DTYPES


def _factors(tree) -> list | None:
    """The factors of a product tree (a * b * c), or None where it is not one."""
    if isinstance(tree, ast.BinOp) and isinstance(tree.op, ast.Mult):
        left, right = _factors(tree.left), _factors(tree.right)
        return None if left is None or right is None else left + right
    return [tree]


def scaled_mm_form(spec, plan) -> tuple[dict | None, str]:
    """({"scale_a", "scale_b", "bias", "kind"}, "") when the epilogue is `acc x scales (+ bias)` as torch._scaled_mm
    takes it: two scalar [1] scales (tensorwise), or a column [M, 1] and / or a row [N] / [1, N] (rowwise), in any
    order, plus at most one row added; (None, why) otherwise."""
    if is_block_scaled(plan):
        if not plan.identity_epilogue:
            return None, "block scales with an epilogue: torch._scaled_mm's blockwise form takes out = acc"
        return {"scale_a": spec.op.block_scales.lhs, "scale_b": spec.op.block_scales.rhs, "bias": None,
                "kind": "blockwise"}, ""
    stmts = epilogue_body(spec).statements
    if len(stmts) != 1:
        return None, "the epilogue has temporaries; torch._scaled_mm takes acc x scales (+ bias)"
    tree = stmts[0][1].tree
    bias = None
    if isinstance(tree, ast.BinOp) and isinstance(tree.op, ast.Add):
        for prod, other in ((tree.left, tree.right), (tree.right, tree.left)):
            if isinstance(other, ast.Name) and other.id != "acc" and _factors(prod) and \
                    any(isinstance(f, ast.Name) and f.id == "acc" for f in _factors(prod)):
                tree, bias = prod, other.id
                break
        else:
            return None, "the epilogue adds something other than a bias row to acc x scales"
    factors = _factors(tree)
    kinds = {e.name: e.bcast for e in plan.extras}
    names = [f.id for f in factors or [] if isinstance(f, ast.Name)]
    if factors is None or len(names) != len(factors) or names.count("acc") != 1:
        return None, "the epilogue is not a product of acc and scales"
    scales = [nm for nm in names if nm != "acc"]
    if bias is not None and kinds.get(bias) != "row":
        return None, f"'{bias}' is not a row [N]: torch._scaled_mm's bias is one value per column"
    by_kind = {k: [nm for nm in scales if kinds.get(nm) == k] for k in ("scalar", "col", "row")}
    if len(scales) != sum(len(v) for v in by_kind.values()):
        return None, "a scale is neither a scalar [1], a column [M, 1] nor a row [N]"
    if len(by_kind["scalar"]) == len(scales) and 1 <= len(scales) <= 2:
        return {"scale_a": scales[0], "scale_b": scales[1] if len(scales) == 2 else None, "bias": bias,
                "kind": "tensorwise"}, ""
    if not by_kind["scalar"] and len(by_kind["col"]) <= 1 and len(by_kind["row"]) <= 1:
        return {"scale_a": (by_kind["col"] or [None])[0], "scale_b": (by_kind["row"] or [None])[0], "bias": bias,
                "kind": "rowwise"}, ""
    return None, "torch._scaled_mm takes both scales per tensor or both per row / column, not a mix"


def _blockwise_layouts(torch, sa, sb):
    """Candidate (label, scale_a, scale_b) spellings of 1 x 128 (lhs) and 128 x 128 (rhs) block scales for
    torch._scaled_mm, whose accepted shapes and strides have moved between releases: tried in order, the first that
    runs and verifies is timed. sa is [M, KB], sb [NB, KB] (the [N, K] rhs's blocks)."""
    outer = lambda t: t.t().contiguous().t()  # noqa: E731  (same shape, the outer dimension contiguous)
    return [("scale_a [M, KB] outer-major, scale_b [KB, NB]", outer(sa), sb.t()),
            ("scale_a [M, KB] outer-major, scale_b [NB, KB]", outer(sa), sb),
            ("scale_a [M, KB], scale_b [NB, KB] row-major", sa, sb),
            ("scale_a [M, KB], scale_b [KB, NB] contiguous", sa, sb.t().contiguous())]


def _scales(torch, plan, form: dict, host: dict, device: str):
    """scale_a, scale_b as torch._scaled_mm takes them (f32 on the device; 1 where the spec has none)."""
    m, n = plan.m, plan.n
    if form["kind"] == "blockwise":
        return [to_torch(torch, host[form[r]], "f32", device) for r in ("scale_a", "scale_b")]
    shapes = ({"scale_a": (), "scale_b": ()} if form["kind"] == "tensorwise" else
              {"scale_a": (m, 1), "scale_b": (1, n)})
    out = []
    for role in ("scale_a", "scale_b"):
        nm = form[role]
        if nm is None:
            out.append(torch.ones(shapes[role], dtype=torch.float32, device=device))
            continue
        e = next(x for x in plan.extras if x.name == nm)
        out.append(to_torch(torch, host[nm], e.dtype, device).float().reshape(shapes[role]).contiguous())
    return out


def scaled_mm_peer(case, full_ref, *, fast: bool, device: str = "cuda") -> Peer:
    """torch._scaled_mm with the spec's scales (and bias) on device copies of the inputs, checked against the
    float64 reference of the whole epilogue, then timed."""
    import torch
    plan, spec = case.plan, case.spec
    name = "scaled_mm_fast" if fast else "scaled_mm"
    form, why_not = scaled_mm_form(spec, plan)
    if form is None:
        return Peer.skipped(why_not)
    lhs = next(o for o in plan.inputs if o.role == "lhs")
    rhs = next(o for o in plan.inputs if o.role == "rhs")
    out_dtype = getattr(torch, {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[plan.out_dtype])
    a0 = to_torch(torch, case.host[lhs.name], lhs.dtype, device)
    b0 = to_torch(torch, case.host[rhs.name], rhs.dtype, device)
    sa0, sb0 = _scales(torch, plan, form, case.host, device)
    bias0 = None
    if form["bias"] is not None:
        e = next(x for x in plan.extras if x.name == form["bias"])
        bias0 = to_torch(torch, case.host[e.name], e.dtype, device).reshape(plan.n).to(out_dtype)
    sets = []
    for i in range(case.sets):
        ts = [a0, b0] if i == 0 else [a0.clone(), b0.clone()]
        sets.append([ts[0], ts[1].t(), sa0, sb0, bias0])    # b [N, K] -> [K, N] column-major (a view)
    notes = [f"{form['kind']} scales", "use_fast_accum=" + str(fast)]
    if bias0 is not None:
        notes.append(f"bias '{form['bias']}' passed to torch._scaled_mm in {plan.out_dtype}")

    def fn(a, b, sa, sb, bias):
        return torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out_dtype, use_fast_accum=fast)
    if form["kind"] == "blockwise":               # the first spelling torch takes and computes right
        tried = []
        for label, sa, sb in _blockwise_layouts(torch, sa0, sb0):
            try:
                out = fn(sets[0][0], sets[0][1], sa, sb, None)
                torch_sync(torch, device)
            except Exception as exc:
                tried.append(f"{label}: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ''}")
                continue
            if check_peer(from_torch(torch, out, plan.out_dtype), full_ref, plan.out_dtype,
                          accumulation(plan))["verified"]:
                sets = [[x[0], x[1], sa, sb, None] for x in sets]
                notes.append(label)
                break
            tried.append(f"{label}: ran, wrong values")
        else:
            return Peer.skipped("torch._scaled_mm takes no blockwise spelling here: " + "; ".join(tried))
    out = fn(*sets[0])
    torch_sync(torch, device)
    info = {"backend": LABELS[name], "config": {"scales": form["kind"], "use_fast_accum": fast,
                                                 "out_dtype": plan.out_dtype}}
    info.update(check_peer(from_torch(torch, out, plan.out_dtype), full_ref, plan.out_dtype, accumulation(plan)))
    info["note"] = "; ".join(notes + [f"torch {torch.__version__}"])
    return torch_fn_peer(name, fn, {"args": sets}, torch, device, info)


def cublas_bf16_peer(case, product_ref, device: str = "cuda") -> Peer:
    """torch.matmul of the fp8 values upcast to bf16 (exact: every fp8 value is a bf16 one), the product only:
    what the same numbers cost as a bf16 GEMM."""
    import torch
    plan = case.plan
    lhs = next(o for o in plan.inputs if o.role == "lhs")
    rhs = next(o for o in plan.inputs if o.role == "rhs")
    a0 = to_torch(torch, case.host[lhs.name], lhs.dtype, device).to(torch.bfloat16)
    b0 = to_torch(torch, case.host[rhs.name], rhs.dtype, device).to(torch.bfloat16)
    sets = []
    for i in range(case.sets):
        a, b = (a0, b0) if i == 0 else (a0.clone(), b0.clone())
        sets.append([a, b.t(), torch.empty((plan.m, plan.n), dtype=torch.bfloat16, device=device)])

    def fn(a, b, out):
        return torch.matmul(a, b, out=out)
    out = fn(*sets[0])
    torch_sync(torch, device)
    info = {"backend": "cuBLAS (torch.matmul, bf16)", "config": {"output": "bf16", "epilogue": "none"}}
    info.update(check_peer(from_torch(torch, out, "bf16"), product_ref, "bf16", plan.k))
    info["note"] = (f"a bf16 GEMM of the same values (the fp8 inputs upcast to bf16), the product only: a reference "
                    f"point, not an fp8 peer; torch {torch.__version__}")
    return torch_fn_peer("cublas", fn, {"args": sets}, torch, device, info)


def fp8_peers(case, full_ref, product_ref) -> dict[str, Peer]:
    return {"scaled_mm_fast": guard("torch._scaled_mm", lambda: scaled_mm_peer(case, full_ref, fast=True)),
            "scaled_mm": guard("torch._scaled_mm", lambda: scaled_mm_peer(case, full_ref, fast=False)),
            "cublas": guard("torch", lambda: cublas_bf16_peer(case, product_ref))}
