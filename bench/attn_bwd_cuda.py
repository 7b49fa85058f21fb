"""The attention backward's CUDA kernels side by side on one GPU, in one process: the mma.sync kernel (the default)
and the warp-specialized wgmma one (schedule.pipeline.kind: warp_specialized: FlashAttention-3's form, dQ summed by
red.global.add into the runtime's zeroed f32 workspace, 5 matmuls a step), next to torch SDPA's cuDNN backward. The
wgmma launcher's time includes the runtime's per-call workspace allocation and memset on the stream (printed with
its size). The earlier wgmma form (separate dQ blocks recomputing S and dP: 7 matmuls) was replaced; its numbers
come from this script at the commit before the change (git log -- schedgen/families/attention_backward/wgmma.py).

Each is built from the bundled spec at the given sizes, verified against a float64 reference computed with torch on
the GPU (fresh random inputs; o and lse the forward's; outputs poisoned with NaN before the checked run; the
family's tolerance), then timed interleaved with CUDA events (rounds of `--iters` launches each, the median round).
Prints TFLOP/s (10 D flops per unmasked pair, FlashAttention's convention) and the ratios.

    python bench/attn_bwd_cuda.py [--b 1 --s 4096 --h 16 --d 128] [--causal] [--consumers 2] [--stages 2]
                                  [--dq-own] [--dq-bulk] [--delta-preprocess] [--overlap] [--desc-offsets]

--dq-own and --dq-bulk each add a variant of the wgmma kernel, built with a planner choice monkeypatched: --dq-own
the consumers each adding all of dQ's columns over their own keys (wgmma.shares_ds False), --dq-bulk dQ's partials
staged in SMEM and added by cp.reduce.async.bulk (wgmma.dq_reduce_of "bulk", FlashAttention-3's form). Both together
also try the two combined, which needs a staging tile a consumer: it does not fit at head_dim 128 with 2 consumers
and 2 stages (249856 B of SMEM), and the script says so and times the others.

--overlap adds the wgmma kernel with FlashAttention-3's waits (wgmma.overlap_of True: S^T and dP^T two commit
groups, P^T computed while dP^T runs, dS^T while dV runs, dQ's wgmma queued behind dK's; docs/perf-notes.md,
"Attention backward, CUDA wgmma: static analysis"); with --dq-bulk also the bulk form with it. --desc-offsets adds the
wgmma kernel whose consumers add each k-step's offset to a tile's wgmma descriptor (wgmma.desc_offsets_of True), and
with --overlap also the two together.

--delta-preprocess adds the wgmma kernel with pipeline.delta: preprocess (delta = rowsum(dO * O) computed once by
the launch's first blocks, which also zero the dQ sums; a stage of Q, dO, lse, delta): at --stages, and again at the
most stages its SMEM allows (the plan's max_stages, capped at 4) when that is more; with --dq-bulk also the bulk form
with it. Its launcher's time includes the runtime's memset of only the workspace's tickets and flags.
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _build(spec: Path, overrides: dict, tmp: Path, label: str):
    from schedgen.build import build_spec, package
    from schedgen.runtime.kernel import load_package
    built = build_spec(str(spec), overrides)
    for w in built.warnings:
        print(f"  {label}: {w}")
    return built.plan, load_package(package(built, tmp / label))


def _build_variant(spec: Path, overrides: dict, tmp: Path, label: str, own: bool, bulk: bool, overlap: bool = False,
                   desc: bool = False):
    """The wgmma kernel built with the planner's choices patched: own: each consumer adds all of dQ's columns over its
    own keys (wgmma.shares_ds False); bulk: dQ's partials through SMEM to a TMA bulk reduce-add (dq_reduce_of);
    overlap: FlashAttention-3's wgmma waits (overlap_of); desc: descriptors by offset (desc_offsets_of)."""
    from schedgen.families.attention_backward import wgmma as wgmma_plan
    saved = wgmma_plan.shares_ds, wgmma_plan.dq_reduce_of, wgmma_plan.overlap_of, wgmma_plan.desc_offsets_of
    if own:
        wgmma_plan.shares_ds = lambda nc, d: False
    if bulk:
        wgmma_plan.dq_reduce_of = lambda nc, d: "bulk"
    if overlap:
        wgmma_plan.overlap_of = lambda nc, d: True
    if desc:
        wgmma_plan.desc_offsets_of = lambda nc, d: True
    try:
        return _build(spec, overrides, tmp, label)
    finally:
        wgmma_plan.shares_ds, wgmma_plan.dq_reduce_of, wgmma_plan.overlap_of, wgmma_plan.desc_offsets_of = saved


def _add_preprocess(kernels: dict, spec: Path, ws: dict, tmp: Path, stages: int, bulk: bool) -> None:
    """--delta-preprocess: the wgmma kernel with pipeline.delta preprocess at `stages`, then at the most stages it
    fits (max_stages, at most 4) when more; with bulk also the bulk dQ form with it at `stages`."""
    from schedgen.errors import SpecErrors
    pre = {**ws, "schedule.pipeline.delta": "preprocess"}
    try:
        kernels["wgmma_pre"] = _build(spec, pre, tmp, "wgmma_pre")
    except SpecErrors as e:
        print(f"  wgmma_pre: not built (the planner's error: {e})")
        return
    most = min(4, kernels["wgmma_pre"][0].wgmma.max_stages)
    if most > stages:
        label = f"wgmma_pre_s{most}"
        kernels[label] = _build(spec, {**pre, "schedule.pipeline.max_concurrent_steps": most}, tmp, label)
    if bulk:
        try:
            kernels["wgmma_pre_bulk"] = _build_variant(spec, pre, tmp, "wgmma_pre_bulk", False, True)
        except SpecErrors as e:
            print(f"  wgmma_pre_bulk: not built (the planner's error: {e})")


def _forward(torch, q, k, v, scale: float, causal: bool):
    """o (bf16) and lse (f32, [B, H, S]) of the forward, in float32, one head at a time."""
    b, s, h, _ = q.shape
    o, lse = torch.empty_like(q), torch.empty(b, h, s, device=q.device, dtype=torch.float32)
    mask = torch.ones(s, s, device=q.device, dtype=torch.bool).tril() if causal else None
    for hh in range(h):
        sc = torch.einsum("bqd,bkd->bqk", q[:, :, hh].float(), k[:, :, hh].float()) * scale
        if mask is not None:
            sc = sc.masked_fill(~mask, -math.inf)
        ls = torch.logsumexp(sc, dim=-1)
        o[:, :, hh] = torch.einsum("bqk,bkd->bqd", torch.exp(sc - ls[..., None]), v[:, :, hh].float()).to(q.dtype)
        lse[:, hh] = ls
    return o, lse


def _reference(torch, q, k, v, do, scale: float, causal: bool):
    """dq, dk, dv in float64 (one head at a time): P = softmax(scale q k^T), dV = P^T dO, dS = P (dO V^T - delta)."""
    b, s, h, _ = q.shape
    out = [torch.empty(q.shape, device=q.device, dtype=torch.float64) for _ in range(3)]
    mask = torch.ones(s, s, device=q.device, dtype=torch.bool).tril() if causal else None
    for hh in range(h):
        qd, kd, vd, dod = (x[:, :, hh].double() for x in (q, k, v, do))
        sc = torch.einsum("bqd,bkd->bqk", qd, kd) * scale
        if mask is not None:
            sc = sc.masked_fill(~mask, -math.inf)
        p = torch.softmax(sc, dim=-1)
        dp = torch.einsum("bqd,bkd->bqk", dod, vd)
        ds = p * (dp - (p * dp).sum(-1, keepdim=True))
        out[0][:, :, hh] = torch.einsum("bqk,bkd->bqd", ds, kd) * scale
        out[1][:, :, hh] = torch.einsum("bqk,bqd->bkd", ds, qd) * scale
        out[2][:, :, hh] = torch.einsum("bqk,bqd->bkd", p, dod)
    return out


def _time(torch, runs: dict, iters: int, rounds: int) -> dict:
    """Median ms a call of each contender, timed interleaved (one round of each in turn)."""
    times = {n: [] for n in runs}
    for fn in runs.values():
        fn()
    torch.cuda.synchronize()
    for _ in range(rounds):
        for n, fn in runs.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            end.synchronize()
            times[n].append(start.elapsed_time(end) / iters)
    return {n: sorted(t)[len(t) // 2] for n, t in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--b", type=int, default=1)
    ap.add_argument("--s", type=int, default=4096)
    ap.add_argument("--h", type=int, default=16)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--consumers", type=int, default=2, help="pipeline.num_compute_wgs of the wgmma kernel")
    ap.add_argument("--stages", type=int, default=2, help="pipeline.max_concurrent_steps of both kernels")
    ap.add_argument("--dq-own", action="store_true",
                    help="also time the wgmma kernel whose consumers each add all of dQ's columns over their own "
                         "keys (no dS shared between them: wgmma.shares_ds False)")
    ap.add_argument("--dq-bulk", action="store_true",
                    help="also time the wgmma kernel whose dQ partials go through SMEM to a TMA bulk reduce-add "
                         "(wgmma.dq_reduce_of 'bulk'); with --dq-own also the two combined where they fit")
    ap.add_argument("--delta-preprocess", action="store_true",
                    help="also time the wgmma kernel with pipeline.delta: preprocess (delta computed once by the "
                         "launch's first blocks; a stage without O), at --stages and at the most stages that fit")
    ap.add_argument("--overlap", action="store_true",
                    help="also time the wgmma kernel with FlashAttention-3's wgmma waits (wgmma.overlap_of True); "
                         "with --dq-bulk also the bulk form with them")
    ap.add_argument("--desc-offsets", action="store_true",
                    help="also time the wgmma kernel with descriptors by offset (wgmma.desc_offsets_of True); with "
                         "--overlap also the two together")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from schedgen.errors import SpecErrors
    from schedgen.families.attention_backward.records import backward_flops
    from schedgen.reference import tolerance
    spec = ROOT / "specs" / f"attention_backward{'_causal' if args.causal else ''}_bf16_4096.yaml"
    sizes = {"B": args.b, "S": args.s, "H": args.h, "D": args.d}
    common = {"op.sizes": sizes, "schedule.backends": ["cuda"], "schedule.in_specs.q.block_shape": [64, args.d],
              "schedule.in_specs.k.block_shape": [64, args.d], "schedule.pipeline.max_concurrent_steps": args.stages}
    tmp = Path(tempfile.mkdtemp(prefix="attn_bwd_cuda_"))
    ws = {**common, "schedule.pipeline.kind": "warp_specialized", "schedule.pipeline.num_compute_wgs": args.consumers}
    kernels = {"mma_sync": _build(spec, common, tmp, "mma_sync"), "wgmma": _build(spec, ws, tmp, "wgmma")}
    for label, own, bulk in (("wgmma_own", True, False), ("wgmma_bulk", False, True), ("wgmma_own_bulk", True, True)):
        if (own and not args.dq_own) or (bulk and not args.dq_bulk):
            continue
        try:
            kernels[label] = _build_variant(spec, ws, tmp, label, own, bulk)
        except SpecErrors as e:
            print(f"  {label}: not built (the planner's error: {e})")
    for label, bulk, overlap, desc in (("wgmma_overlap", False, True, False), ("wgmma_overlap_bulk", True, True, False),
                                       ("wgmma_desc", False, False, True), ("wgmma_overlap_desc", False, True, True)):
        if (args.overlap or not overlap) and (args.desc_offsets or not desc) and (args.dq_bulk or not bulk):
            kernels[label] = _build_variant(spec, ws, tmp, label, False, bulk, overlap=overlap, desc=desc)
    if args.delta_preprocess:
        _add_preprocess(kernels, spec, ws, tmp, args.stages, args.dq_bulk)
    plan = kernels["wgmma"][0]
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    shape = (args.b, args.s, args.h, args.d)
    q, k, v, do = (torch.randn(shape, device=dev, generator=g).bfloat16() for _ in range(4))
    o, lse = _forward(torch, q, k, v, plan.scale, args.causal)
    ref = _reference(torch, q, k, v, do, plan.scale, args.causal)
    tol = tolerance("bf16", plan.approx_math, k=args.s)
    runs, ok = {}, True
    stream = torch.cuda.current_stream().cuda_stream
    for name, (p, kern) in kernels.items():
        outs = [torch.full(shape, float("nan"), device=dev, dtype=torch.bfloat16) for _ in range(3)]
        launch = kern.prepare([q, k, v, o, do, lse], outs, stream=stream)
        launch()
        torch.cuda.synchronize()
        errs = [float(torch.linalg.norm((a.double() - r).flatten()) / torch.linalg.norm(r.flatten()))
                for a, r in zip(outs, ref)]
        good = all(e <= tol for e in errs)          # NaN (an unwritten element) fails
        ok &= good
        print(f"{name:14s} {p.kernel_name}: rel. errors dq {errs[0]:.2e} dk {errs[1]:.2e} dv {errs[2]:.2e} "
              f"(tolerance {tol:.1e}) {'ok' if good else 'FAILED'}")
        if p.wgmma is not None:
            w = p.wgmma
            zeroed = (f"{w.workspace_zero} B of it zeroed each call, delta by {w.pre_blocks} preprocessing blocks"
                      if w.delta == "preprocess" else "zeroed each call")
            print(f"{'':14s} {w.dkv_blocks} blocks; dQ workspace {w.workspace_bytes / 2**20:.1f} MiB {zeroed}; "
                  f"{'64 columns a consumer over all keys' if w.dq_column_split else 'all columns over 64 keys'}; "
                  f"dQ by {'red.global.add' if w.dq_reduce == 'red' else 'cp.reduce.async.bulk'}; {p.stages} stages "
                  f"(up to {w.max_stages} fit); {w.smem_bytes} B SMEM")
        runs[name] = launch
    qt, kt, vt = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=args.causal)
    dot = do.transpose(1, 2)

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            torch.autograd.grad(out, (qt, kt, vt), dot, retain_graph=True)
    runs["cudnn"] = cudnn
    ms = _time(torch, runs, args.iters, args.rounds)
    flops = backward_flops(args.b, args.h, args.s, args.s, args.d, "bottom_right" if args.causal else None)
    print(f"B{args.b} S{args.s} H{args.h} D{args.d} {'causal' if args.causal else 'non-causal'}, "
          f"{flops / 1e9:.1f} GFLOP (cudnn: the torch autograd call, its preprocessing included)")
    for name, t in ms.items():
        print(f"  {name:14s} {t:8.3f} ms  {flops / t / 1e9:7.1f} TFLOP/s")
    print(f"  wgmma / mma_sync {ms['mma_sync'] / ms['wgmma']:.2f}x   wgmma / cudnn {ms['cudnn'] / ms['wgmma']:.2f}x")
    for label in ("wgmma_own", "wgmma_bulk", "wgmma_own_bulk", "wgmma_overlap", "wgmma_overlap_bulk", "wgmma_desc",
                  "wgmma_overlap_desc", *(n for n in ms if n.startswith("wgmma_pre"))):
        if label in ms:
            print(f"  {label} / wgmma {ms['wgmma'] / ms[label]:.2f}x   {label} / cudnn {ms['cudnn'] / ms[label]:.2f}x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
