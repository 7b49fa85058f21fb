"""The attention forward's CUDA kernel as built today and with its wgmma descriptors by offset (plan.desc_offsets_of
True: a tile's descriptor built once, each k-step's offset added; docs/perf-notes.md, "Attention forward, CUDA:
wgmma descriptors by offset"), side by side on one GPU, in one process, next to torch SDPA's cuDNN and flash
forwards. Both ours are built from specs/attention_bf16_4096.yaml at the given sizes, verified against a float64
reference on sampled query rows computed with torch on the GPU (fresh random inputs, outputs poisoned with NaN
before the checked run, the family's tolerance), then timed interleaved with CUDA events (bench/attn_bwd_cuda.py's
_time: rounds of `--iters` launches each, the median round). Prints TFLOP/s (4 D flops per unmasked pair) and the
ratios; exits 1 when a check fails.

    python bench/attn_fwd_cuda.py [--b 1 --s 4096 --h 16 --d 128] [--causal] [--rows 256] [--iters 10 --rounds 7]
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from attn_bwd_cuda import _build, _time  # noqa: E402  (bench/ on the path above)


def _build_desc(spec: Path, overrides: dict, tmp: Path, label: str):
    """The forward built with plan.desc_offsets_of patched to True."""
    from schedgen.families.attention import plan as attn_plan
    saved = attn_plan.desc_offsets_of
    attn_plan.desc_offsets_of = lambda nc, d: True
    try:
        return _build(spec, overrides, tmp, label)
    finally:
        attn_plan.desc_offsets_of = saved


def _reference_rows(torch, q, k, v, rows, scale: float, causal: bool):
    """o at the query rows `rows` (all batches and heads) in float64: softmax(scale q k^T (masked)) v."""
    s = q.shape[1]
    qd = q[:, rows].double()                                   # [B, R, H, D]
    sc = torch.einsum("brhd,bshd->bhrs", qd, k.double()) * scale
    if causal:                                                 # Sq = Skv: query i sees keys j <= i
        sc = sc.masked_fill(torch.arange(s, device=q.device)[None, :] > rows[:, None], -math.inf)
    return torch.einsum("bhrs,bshd->brhd", torch.softmax(sc, dim=-1), v.double())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--b", type=int, default=1)
    ap.add_argument("--s", type=int, default=4096)
    ap.add_argument("--h", type=int, default=16)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--rows", type=int, default=256, help="query rows checked against float64 (random, fresh)")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from schedgen.families.attention.records import attention_flops
    from schedgen.reference import tolerance
    spec = ROOT / "specs" / "attention_bf16_4096.yaml"
    d = args.d
    ov = {"op.sizes": {"B": args.b, "S": args.s, "H": args.h, "D": d}, "op.causal": args.causal,
          "schedule.backends": ["cuda"], **{f"schedule.in_specs.{n}.block_shape": [128, d] for n in "qkv"}}
    tmp = Path(tempfile.mkdtemp(prefix="attn_fwd_cuda_"))
    kernels = {"cuda": _build(spec, ov, tmp, "cuda"), "cuda_desc": _build_desc(spec, ov, tmp, "cuda_desc")}
    plan = kernels["cuda"][0]
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(torch.seed() % 2**31)
    shape = (args.b, args.s, args.h, d)
    q, k, v = (torch.randn(shape, device=dev, generator=g).bfloat16() for _ in range(3))
    rows = torch.randperm(args.s, device=dev, generator=g)[:args.rows].sort().values
    ref = _reference_rows(torch, q, k, v, rows, plan.scale, args.causal)
    tol = tolerance("bf16", plan.approx_math, k=args.s)
    runs, ok = {}, True
    stream = torch.cuda.current_stream().cuda_stream
    for name, (p, kern) in kernels.items():
        o = torch.full(shape, float("nan"), device=dev, dtype=torch.bfloat16)
        launch = kern.prepare([q, k, v], [o], stream=stream)
        launch()
        torch.cuda.synchronize()
        got = o[:, rows].double()
        err = float(torch.linalg.norm((got - ref).flatten()) / torch.linalg.norm(ref.flatten()))
        good = err <= tol                               # NaN (an unwritten element) fails
        ok &= good
        print(f"{name:10s} {p.kernel_name} (desc_offsets {p.desc_offsets}): rel. error {err:.2e} on {args.rows} rows "
              f"(tolerance {tol:.1e}) {'ok' if good else 'FAILED'}")
        runs[name] = launch
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    for label, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        def sdpa(backend=backend):
            with sdpa_kernel(backend):
                torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=args.causal)
        runs[label] = sdpa
    ms = _time(torch, runs, args.iters, args.rounds)
    flops = attention_flops(args.b, args.h, args.s, args.s, d, "bottom_right" if args.causal else None)
    print(f"B{args.b} S{args.s} H{args.h} D{d} {'causal' if args.causal else 'non-causal'}, {flops / 1e9:.1f} GFLOP")
    for name, t in ms.items():
        print(f"  {name:10s} {t:8.3f} ms  {flops / t / 1e9:7.1f} TFLOP/s")
    print(f"  cuda / cudnn {ms['cudnn'] / ms['cuda']:.3f}x   cuda_desc / cudnn {ms['cudnn'] / ms['cuda_desc']:.3f}x   "
          f"cuda_desc / cuda {ms['cuda'] / ms['cuda_desc']:.3f}x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
