"""Training with schedgen kernels (issue 19): a causal attention block and a two-layer MLP, a few hundred steps of
AdamW from torch on the GPU, against the same model built from torch ops (cuDNN / flash SDPA, cuBLAS).

    schedgen build examples/train/*.yaml -o build/train && python examples/train_mlp_attention.py [--steps 300]

Status (2026-12-06): the attention block's backward runs the attention_backward family's CUDA kernel that the
planner picks for fixed sizes at head_dim 128: FlashAttention-3's form (wgmma, dQ through a workspace; 1.79x the
mma.sync kernel it replaced, 0.54x cuDNN's backward at B1 S4096 H16). `--attention sdpa` runs that one block with
torch's SDPA in both models instead.

The model, per block of T = B x 1024 tokens of width d = 1024:
    qkv = x @ Wqkv^T                     (train_qkv:  matmul)
    a   = attention(q, k, v), causal      (train_attn: attention, 8 heads of 128)
    x1  = x + a @ Wo^T                    (train_proj: matmul, residual fused in the epilogue)
    h   = gelu(x1 @ W1^T + b1)            (train_up:   matmul, bias + gelu fused; the pre-activation saved)
    y   = h @ W2^T + b2                   (train_down: matmul, bias fused)
    loss = mean((y - target)^2)
Every backward runs the kernels schedgen derived from those specs (their `backward:` sections), wired into torch
autograd through the packages' custom ops. Both models start from the same weights and see the same batches; the
script prints both loss curves, their largest relative gap, and the step time of each (CUDA events, median of the
timed steps), and exits non-zero when the curves part by more than the tolerance.
"""
from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
D_MODEL, HEADS, HEAD_DIM, SEQ, D_FF = 1024, 8, 128, 1024, 4096


def packages(folder: Path, attention: str):
    sys.path.insert(0, str(folder))
    names = ["train_qkv", "train_proj", "train_up", "train_down"] + (["train_attn"] if attention == "schedgen" else [])
    return {n: getattr(importlib.import_module(n), n) for n in names}


def init_weights(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator(device="cpu").manual_seed(seed)

    def w(*shape, scale):
        return (torch.randn(*shape, generator=g) * scale).to("cuda", torch.bfloat16)
    return {"wqkv": w(3 * D_MODEL, D_MODEL, scale=D_MODEL ** -0.5), "wo": w(D_MODEL, D_MODEL, scale=D_MODEL ** -0.5),
            "w1": w(D_FF, D_MODEL, scale=D_MODEL ** -0.5), "w2": w(D_MODEL, D_FF, scale=D_FF ** -0.5),
            "b1": torch.zeros(D_FF, device="cuda"), "b2": torch.zeros(D_MODEL, device="cuda")}


def sdpa_bshd(q, k, v):
    """torch's causal SDPA on [B, S, H, D] tensors."""
    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                          is_causal=True).transpose(1, 2)


def forward_ours(k, p, x, batch):
    t = x.shape[0]
    qkv = k["train_qkv"](x, p["wqkv"])
    q, kk, v = (qkv.view(batch, SEQ, 3, HEADS, HEAD_DIM)[:, :, i] for i in range(3))
    attend = k.get("train_attn") or sdpa_bshd
    a = attend(q.contiguous(), kk.contiguous(), v.contiguous())
    x1 = k["train_proj"](a.reshape(t, D_MODEL), p["wo"], x)
    h = k["train_up"](x1, p["w1"], p["b1"])
    return k["train_down"](h, p["w2"], p["b2"])


def forward_torch(p, x, batch):
    t = x.shape[0]
    qkv = F.linear(x, p["wqkv"]).view(batch, SEQ, 3, HEADS, HEAD_DIM)
    q, kk, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))          # SDPA takes [B, H, S, D]
    a = F.scaled_dot_product_attention(q, kk, v, is_causal=True).transpose(1, 2).reshape(t, D_MODEL)
    x1 = x + F.linear(a, p["wo"])
    h = F.gelu(F.linear(x1, p["w1"]).float() + p["b1"], approximate="tanh").to(torch.bfloat16)
    return (F.linear(h, p["w2"]).float() + p["b2"]).to(torch.bfloat16)


def train(step_fn, params, data, steps: int, lr: float, warm: int):
    leaves = [t.requires_grad_() for t in params.values()]
    opt = torch.optim.AdamW(leaves, lr=lr, weight_decay=0.0)
    losses, times = [], []
    for i in range(steps):
        x, target, batch = data(i)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        y = step_fn(params, x, batch)
        loss = F.mse_loss(y.float(), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        end.record()
        losses.append(loss.detach())
        if i >= warm:
            times.append((start, end))
    torch.cuda.synchronize()
    return [x.item() for x in losses], statistics.median(s.elapsed_time(e) for s, e in times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packages", default=str(ROOT / "build" / "train"))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=4, help="sequences of 1024 tokens a step")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--tolerance", type=float, default=0.05, help="largest relative gap of the two loss curves")
    ap.add_argument("--json", default="", help="write both curves and the step times here")
    ap.add_argument("--attention", choices=("sdpa", "schedgen"), default="schedgen",
                    help="the attention block: the train_attn package (default) or torch SDPA in both models")
    args = ap.parse_args()
    if args.batch != 4:
        sys.exit("--batch: examples/train/attn.yaml fixes B = 4 (the attention backward takes no dynamic sizes yet)")
    k = packages(Path(args.packages), args.attention)
    batch, t = args.batch, args.batch * SEQ
    gen = torch.Generator(device="cuda").manual_seed(1)
    teacher = torch.randn(D_MODEL, D_MODEL, device="cuda", generator=gen) * D_MODEL ** -0.5
    batches = []
    for _ in range(16):    # a fixed set of batches, cycled: the loss must fall, and fall the same in both models
        x = torch.randn(t, D_MODEL, device="cuda", generator=gen).to(torch.bfloat16)
        batches.append((x, torch.tanh(x.float() @ teacher), batch))

    def data(i):
        return batches[i % len(batches)]
    ours, ours_ms = train(lambda p, x, b: forward_ours(k, p, x, b), init_weights(0), data, args.steps, args.lr, 10)
    ref, ref_ms = train(forward_torch, init_weights(0), data, args.steps, args.lr, 10)
    gap = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(ours, ref))
    print(f"{'step':>6} {'schedgen':>10} {'torch':>10}")
    for i in sorted({0, 1, 2, 5, 10, 20, 50, 100, 200, args.steps - 1} & set(range(args.steps))):
        print(f"{i:6d} {ours[i]:10.5f} {ref[i]:10.5f}")
    print(f"loss {ours[0]:.4f} -> {ours[-1]:.4f} (schedgen), {ref[0]:.4f} -> {ref[-1]:.4f} (torch); "
          f"largest relative gap {gap:.3%} (tolerance {args.tolerance:.0%})")
    print(f"step time: schedgen {ours_ms:.3f} ms, torch {ref_ms:.3f} ms ({ref_ms / ours_ms:.3f}x), "
          f"T = {t} tokens, {torch.cuda.get_device_name()}")
    if args.json:
        Path(args.json).write_text(json.dumps({"schedgen": ours, "torch": ref, "schedgen_ms": ours_ms,
                                               "torch_ms": ref_ms, "tokens": t, "gap": gap}))
    ok = gap <= args.tolerance and ours[-1] < 0.5 * ours[0]
    print("ok" if ok else "FAIL: the curves part, or the loss did not fall")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
