"""A Llama-style decoder twice over one set of weights (issue 43): `TorchLlama` on torch ops (the reference) and
`SchedgenLlama` on the schedgen packages of specs.py (every op a schedgen kernel but the embedding lookup).

    x = embed[tokens]                                  F.embedding in both (no gather family yet)
    per layer:
        h  = rmsnorm(x) * attn_norm                    llama_rmsnorm        (rowwise)
        qkv = h @ Wqkv^T                               llama_qkv            (matmul)
        q, k = rope(q, k)                              apply_rope: llama_rope_halves (map; see apply_rope)
        a  = causal GQA attention(q, k, v)             llama_attention      (attention; q, k, v views of qkv)
        x  = a @ Wo^T + x                              llama_out_proj       (matmul, residual in the epilogue)
        h  = rmsnorm(x) * mlp_norm                     llama_rmsnorm
        g, u = h @ [Wg; Wu]^T                          llama_gate_up        (matmul, one [T, 2F] output)
        m  = silu(g) * u                               llama_swiglu         (map; g, u column views)
        x  = m @ Wd^T + x                              llama_down_proj      (matmul, residual in the epilogue)
    logits = rmsnorm(x) * final_norm @ Wlm^T           llama_rmsnorm, llama_lm_head
    loss = mean cross-entropy(logits, targets)         llama_cross_entropy  (rowwise, int64 targets, -100 ignored)

Both models take tokens [B, S] int64 (any B, and S a multiple of config.seq_multiple for the schedgen one) and
return the mean loss, or the logits [B, S, vocab] without targets (prefill). Parameters live in one dict of
tensors (`init_params`), which both models take as is: give both the same dict to share the weights, or copies
(`clone_params`) to train them side by side.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

try:
    from .config import LlamaConfig
except ImportError:                      # examples/llama on sys.path
    from config import LlamaConfig       # type: ignore[no-redef]

IGNORE_INDEX = -100


def param_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter's name and shape (torch.nn.Linear's [out, in] layout for the projections)."""
    d, f = cfg.d_model, cfg.d_ff
    shapes = {"embed": (cfg.vocab, d)}
    for i in range(cfg.n_layers):
        shapes.update({f"l{i}_attn_norm": (d,), f"l{i}_wqkv": (cfg.qkv_width, d), f"l{i}_wo": (d, cfg.attn_width),
                       f"l{i}_mlp_norm": (d,), f"l{i}_w_gate_up": (2 * f, d), f"l{i}_w_down": (d, f)})
    shapes.update({"final_norm": (d,), "lm_head": (cfg.vocab, d)})
    return shapes


def init_params(cfg: LlamaConfig, seed: int = 0, dtype=torch.bfloat16, device="cpu") -> dict[str, nn.Parameter]:
    """The weights, drawn on the CPU from `seed` (so every device and dtype gets the same values): norms 1,
    the embedding N(0, 0.02^2), projections N(0, 1 / fan_in), the residual-branch outputs (wo, w_down) scaled by
    1 / sqrt(2 n_layers)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    out = {}
    for name, shape in param_shapes(cfg).items():
        if len(shape) == 1:
            t = torch.ones(shape)
        elif name == "embed":
            t = torch.randn(shape, generator=g) * 0.02
        else:
            t = torch.randn(shape, generator=g) * shape[1] ** -0.5
            if name.endswith(("_wo", "_w_down")):
                t = t / math.sqrt(2 * cfg.n_layers)
        out[name] = nn.Parameter(t.to(device=device, dtype=dtype))
    return out


def clone_params(params: dict, dtype=None, device=None) -> dict[str, nn.Parameter]:
    """Independent copies (same values) of a parameter dict, optionally cast / moved."""
    return {k: nn.Parameter(v.detach().to(dtype=dtype or v.dtype, device=device or v.device, copy=True))
            for k, v in params.items()}


def rope_tables(cfg: LlamaConfig, batch: int, seq: int, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every token's position, [B * S, 1, head_dim] each (HF's `cat(freqs, freqs)` layout),
    computed in f32 and cast to the activations' dtype as HF does."""
    d = cfg.head_dim
    inv = cfg.rope_theta ** -(torch.arange(0, d, 2, device=device, dtype=torch.float32) / d)
    pos = torch.arange(seq, device=device, dtype=torch.float32)
    freqs = torch.outer(pos, inv)
    emb = torch.cat((freqs, freqs), dim=-1)                      # [S, D]
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
    rows = (batch, 1)
    return cos.repeat(*rows).unsqueeze(1), sin.repeat(*rows).unsqueeze(1)   # [B * S, 1, D]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kernels: dict | None = None) -> torch.Tensor:
    """RoPE on x [T, H, head_dim] (a strided view is fine), HF rotate-half: x * cos + rotate_half(x) * sin, with
    cos / sin [T, 1, head_dim] from rope_tables. The ONE place the model rotates, with two implementations, the
    first whose package is there:

    - `llama_rope_halves` (builds today): the map kernel reads the two halves as strided views of x and writes the
      two rotated halves, joined here by torch.cat (a copy, not a computation).
    - TORCH FALLBACK (kernels None, or neither package): the torch expression itself.
    """
    kernels = kernels or {}
    h = x.shape[-1] // 2
    if "llama_rope_halves" in kernels:
        c, s = cos[..., :h].contiguous(), sin[..., :h].contiguous()   # the two halves of the tables are equal
        o1, o2 = kernels["llama_rope_halves"](x[..., :h], x[..., h:], c, s)
        return torch.cat((o1, o2), dim=-1)
    # --- TORCH FALLBACK: not a schedgen kernel ---
    return x * cos + rotate_half(x) * sin


class _Llama(nn.Module):
    def __init__(self, cfg: LlamaConfig, params: dict):
        super().__init__()
        self.cfg = cfg
        missing = set(param_shapes(cfg)) - set(params)
        if missing:
            raise ValueError(f"parameters missing: {sorted(missing)}")
        self.p = nn.ParameterDict(params)      # the tensors given, not copies: one dict can serve both models

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """tokens [B, S] int64 -> the mean cross-entropy against targets [B, S] (IGNORE_INDEX rows left out), or
        the logits [B, S, vocab] without targets."""
        b, s = tokens.shape
        p = self.p
        x = F.embedding(tokens.reshape(-1), p["embed"])        # [T, d], not a schedgen kernel (no gather family)
        cos, sin = rope_tables(self.cfg, b, s, x.dtype, x.device)
        for i in range(self.cfg.n_layers):
            x = self.layer(i, x, b, s, cos, sin)
        logits = self.head(x)
        if targets is None:
            return logits.view(b, s, -1)
        return self.loss(logits, targets.reshape(-1))


class TorchLlama(_Llama):
    """The reference: torch ops (cuBLAS / SDPA under the hood), each rounding where the schedgen kernel does."""

    def rmsnorm(self, x, w):
        xf = x.float() if x.dtype != torch.float64 else x
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.cfg.rms_eps) * w.to(xf.dtype)).to(x.dtype)

    def layer(self, i, x, b, s, cos, sin):
        c, p = self.cfg, self.p
        H, G, D = c.n_heads, c.n_kv_heads, c.head_dim
        t = x.shape[0]
        qkv = F.linear(self.rmsnorm(x, p[f"l{i}_attn_norm"]), p[f"l{i}_wqkv"]).view(t, H + 2 * G, D)
        qk = apply_rope(qkv[:, :H + G], cos, sin)
        q = qk[:, :H].reshape(b, s, H, D).transpose(1, 2)
        k = qk[:, H:].reshape(b, s, G, D).transpose(1, 2)
        v = qkv[:, H + G:].reshape(b, s, G, D).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = F.linear(a.transpose(1, 2).reshape(t, H * D), p[f"l{i}_wo"]) + x
        gu = F.linear(self.rmsnorm(x, p[f"l{i}_mlp_norm"]), p[f"l{i}_w_gate_up"])
        g, u = gu[:, :c.d_ff], gu[:, c.d_ff:]
        up = torch.float64 if x.dtype == torch.float64 else torch.float32
        m = (F.silu(g.to(up)) * u.to(up)).to(x.dtype)
        return F.linear(m, p[f"l{i}_w_down"]) + x

    def head(self, x):
        return F.linear(self.rmsnorm(x, self.p["final_norm"]), self.p["lm_head"])

    def loss(self, logits, targets):
        up = torch.float64 if logits.dtype == torch.float64 else torch.float32
        return F.cross_entropy(logits.to(up), targets, ignore_index=IGNORE_INDEX)


class SchedgenLlama(_Llama):
    """The same math on the schedgen packages: `kernels` maps each kernel name of specs.py to its package function
    (specs.load(cfg, folder)). bf16 weights and activations, as the specs say."""

    def __init__(self, cfg: LlamaConfig, params: dict, kernels: dict):
        super().__init__(cfg, params)
        self.k = dict(kernels)

    def layer(self, i, x, b, s, cos, sin):
        c, p, k = self.cfg, self.p, self.k
        H, G, D = c.n_heads, c.n_kv_heads, c.head_dim
        t = x.shape[0]
        qkv = k["llama_qkv"](k["llama_rmsnorm"](x, p[f"l{i}_attn_norm"]), p[f"l{i}_wqkv"]).view(t, H + 2 * G, D)
        qk = apply_rope(qkv[:, :H + G], cos, sin, k)               # q and k heads in one call: [T, H + G, D]
        q = qk[:, :H].view(b, s, H, D)                             # strided views: attention reads them by TMA
        kk = qk[:, H:].view(b, s, G, D)
        v = qkv[:, H + G:].view(b, s, G, D)
        a = k["llama_attention"](q, kk, v)                         # [B, S, H, D]
        x = k["llama_out_proj"](a.view(t, H * D), p[f"l{i}_wo"], x)
        gu = k["llama_gate_up"](k["llama_rmsnorm"](x, p[f"l{i}_mlp_norm"]), p[f"l{i}_w_gate_up"])
        m = k["llama_swiglu"](gu[:, :c.d_ff], gu[:, c.d_ff:])
        return k["llama_down_proj"](m, p[f"l{i}_w_down"], x)

    def head(self, x):
        return self.k["llama_lm_head"](self.k["llama_rmsnorm"](x, self.p["final_norm"]), self.p["lm_head"])

    def loss(self, logits, targets):
        return self.k["llama_cross_entropy"](logits, targets).reshape(())
