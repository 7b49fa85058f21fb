"""A Llama-style decoder twice over one set of weights (issue 43): `TorchLlama` on torch ops (the reference) and
`SchedgenLlama` on the schedgen packages of specs.py (every op a schedgen kernel but the embedding lookup).

    x = embed[tokens]                                  F.embedding in both (no gather family yet)
    per layer:
        h  = rmsnorm(x) * attn_norm                    llama_rmsnorm        (rowwise)
        qkv = h @ Wqkv^T                               llama_qkv            (matmul)
        q, k = rope(q, k)                              apply_rope: llama_rope_halves (map; see apply_rope)
        a  = causal GQA attention(q, k, v)             llama_attention      (attention; q, k, v views of qkv)
                                                       decode: llama_decode_attention over the KV cache
        x  = a @ Wo^T + x                              llama_out_proj       (matmul, residual in the epilogue)
        h  = rmsnorm(x) * mlp_norm                     llama_rmsnorm
        g, u = h @ [Wg; Wu]^T                          llama_gate_up        (matmul, one [T, 2F] output)
        m  = silu(g) * u                               llama_swiglu         (map; g, u column views)
        x  = m @ Wd^T + x                              llama_down_proj      (matmul, residual in the epilogue)
    logits = rmsnorm(x) * final_norm @ Wlm^T           llama_rmsnorm, llama_lm_head
    loss = mean cross-entropy(logits, targets)         llama_cross_entropy  (rowwise, int64 targets, -100 ignored)

Both models take tokens [B, S] int64 (any B, and S a multiple of config.seq_multiple for the schedgen one) and
return the mean loss, or the logits [B, S, vocab] without targets (every position; `prefill` below keeps the
last). Parameters live in one dict of tensors (`init_params`), which both models take as is: give both the same
dict to share the weights, or copies (`clone_params`) to train them side by side.

Inference (no autograd; both models alike):

    logits, cache = model.prefill(prompt)        # prompt [B, S]: logits of the last position [B, vocab] and a
                                                 # KVCache holding the prompt's k and v (cache.length = S)
    logits = model.decode(new, cache)            # new [B, Sq] (Sq <= config.max_new): logits [B, Sq, vocab]; the
                                                 # new tokens' k and v are appended at cache.length (then += Sq)

The cache (KVCache) is contiguous, preallocated: per layer one k and one v tensor [B, max_len, G, D] (bf16 for the
schedgen model), token t of sequence b at [b, t]; positions [0, length) are filled, the rest is free. A decode step
at start = cache.length rotates the new q and k at positions start..start+Sq-1, writes the new k and v into
[:, start:start+Sq], and attends with llama_decode_attention over the strided views [:, :start+Sq] (bottom-right
causal: new query i sees keys j <= start + i). The schedgen model's rope kernel writes the rotated k halves
straight into the cache (out= strided views) when the slot is one [T, G, D] view (Sq = 1 or B = 1); else, and for
v (a column slice of the fused qkv output, which no kernel writes alone), it is a copy_ into the cache.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

try:
    from .config import LlamaConfig
except ImportError:                      # examples/llama on sys.path
    from config import LlamaConfig       # type: ignore[no-redef]

IGNORE_INDEX = -100


def init_params(cfg: LlamaConfig, seed: int = 0, dtype=torch.bfloat16, device="cpu") -> dict[str, nn.Parameter]:
    """The weights, drawn on the CPU from `seed` (so every device and dtype gets the same values): norms 1,
    the embedding N(0, 0.02^2), projections N(0, 1 / fan_in), the residual-branch outputs (wo, w_down) scaled by
    1 / sqrt(2 n_layers)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    out = {}
    for name, shape in cfg.param_shapes().items():
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


def rope_tables(cfg: LlamaConfig, batch: int, seq: int, dtype, device, start: int = 0
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every token's position (start .. start + seq - 1 in each of the batch's sequences: a decode
    step's new tokens sit after the cache's `start` tokens), [B * S, 1, head_dim] each (HF's `cat(freqs, freqs)`
    layout), computed in f32 and cast to the activations' dtype as HF does."""
    d = cfg.head_dim
    inv = cfg.rope_theta ** -(torch.arange(0, d, 2, device=device, dtype=torch.float32) / d)
    pos = torch.arange(start, start + seq, device=device, dtype=torch.float32)
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


@dataclass
class KVCache:
    """A contiguous, preallocated KV cache: k[i] and v[i] are layer i's keys (rotated) and values, each
    [B, max_len, G, head_dim] (C-contiguous; token t of sequence b at [b, t]); positions [0, length) hold the
    sequences so far (every sequence of the batch has the same length), the rest is free. A decode step reads the
    strided views k[i][:, :length] (batch stride max_len * G * head_dim elements), so nothing is repacked as the
    cache grows."""
    k: list = field(default_factory=list)
    v: list = field(default_factory=list)
    length: int = 0

    @classmethod
    def allocate(cls, cfg: LlamaConfig, batch: int, max_len: int | None = None, dtype=torch.bfloat16,
                 device="cpu") -> "KVCache":
        max_len = cfg.max_cache if max_len is None else max_len
        shape = (batch, max_len, cfg.n_kv_heads, cfg.head_dim)
        return cls([torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.n_layers)],
                   [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.n_layers)], 0)

    @property
    def batch(self) -> int:
        return self.k[0].shape[0]

    @property
    def max_len(self) -> int:
        return self.k[0].shape[1]

    def store(self, i: int, start: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Layer i's new k and v [B, S, G, D] into positions start .. start + S - 1 (a copy)."""
        s = k.shape[1]
        self.k[i][:, start:start + s].copy_(k)
        self.v[i][:, start:start + s].copy_(v)


class _Llama(nn.Module):
    def __init__(self, cfg: LlamaConfig, params: dict):
        super().__init__()
        self.cfg = cfg
        missing = set(cfg.param_shapes()) - set(params)
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

    # ------------------------------------------------------------------------------------------- inference

    def new_cache(self, batch: int, max_len: int | None = None) -> KVCache:
        """An empty cache for `batch` sequences of up to max_len (default config.max_cache) tokens, in the
        parameters' dtype and device."""
        e = self.p["embed"]
        return KVCache.allocate(self.cfg, batch, max_len, dtype=e.dtype, device=e.device)

    def prefill_chunk(self) -> int:
        """The prompt length prefill runs in one forward: a multiple of this (the rest goes through decode
        steps); 1 for the torch model."""
        return 1

    @torch.no_grad()
    def prefill(self, tokens: torch.Tensor, cache: KVCache | None = None, max_len: int | None = None
                ) -> tuple[torch.Tensor, KVCache]:
        """tokens [B, S] (the prompt) -> (the logits of its last position [B, vocab], the cache holding its k and
        v, length S). The first S - S % prefill_chunk() tokens run as one causal forward (the training attention
        kernel) that also stores k and v; the rest, if any, as decode steps of up to config.max_new tokens."""
        b, s = tokens.shape
        cache = self.new_cache(b, max_len) if cache is None else cache
        if cache.length or cache.batch != b or s > cache.max_len:
            raise ValueError(f"prefill: an empty cache of batch {b} and at least {s} positions is needed "
                             f"(got length {cache.length}, batch {cache.batch}, max_len {cache.max_len})")
        s0 = s - s % self.prefill_chunk()
        if s0 == 0:
            raise ValueError(f"prefill: the prompt has {s} tokens, fewer than {self.prefill_chunk()}")
        p = self.p
        x = F.embedding(tokens[:, :s0].reshape(-1), p["embed"])
        cos, sin = rope_tables(self.cfg, b, s0, x.dtype, x.device)
        for i in range(self.cfg.n_layers):
            x = self.layer(i, x, b, s0, cos, sin, cache=cache)
        cache.length = s0
        logits = self.head(x.view(b, s0, -1)[:, -1].contiguous())           # [B, vocab]: the last position only
        for c in range(s0, s, self.cfg.max_new):
            logits = self.decode(tokens[:, c:c + self.cfg.max_new], cache)[:, -1]
        return logits, cache

    @torch.no_grad()
    def decode(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """tokens [B, Sq] (the next Sq tokens of each sequence, Sq <= config.max_new) -> logits [B, Sq, vocab];
        their k and v are appended to the cache at cache.length, which grows by Sq."""
        b, sq = tokens.shape
        start = cache.length
        if sq > self.cfg.max_new or start + sq > cache.max_len or cache.batch != b:
            raise ValueError(f"decode: {b} x {sq} new tokens at {start}: Sq <= max_new {self.cfg.max_new}, the "
                             f"cache's batch {cache.batch} and {cache.max_len} positions")
        x = F.embedding(tokens.reshape(-1), self.p["embed"])
        cos, sin = rope_tables(self.cfg, b, sq, x.dtype, x.device, start=start)
        for i in range(self.cfg.n_layers):
            x = self.decode_layer(i, x, b, sq, cos, sin, cache, start)
        cache.length = start + sq
        return self.head(x).view(b, sq, -1)


class TorchLlama(_Llama):
    """The reference: torch ops (cuBLAS / SDPA under the hood), each rounding where the schedgen kernel does."""

    def rmsnorm(self, x, w):
        xf = x.float() if x.dtype != torch.float64 else x
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.cfg.rms_eps) * w.to(xf.dtype)).to(x.dtype)

    def layer(self, i, x, b, s, cos, sin, cache: KVCache | None = None, start: int = 0):
        """One decoder layer over x [B * S, d]. With a cache, the S tokens sit at positions start.. of it: their k
        and v are stored there and the queries attend over the cache's [:, :start + S] (bottom-right causal)."""
        c, p = self.cfg, self.p
        H, G, D = c.n_heads, c.n_kv_heads, c.head_dim
        t = x.shape[0]
        qkv = F.linear(self.rmsnorm(x, p[f"l{i}_attn_norm"]), p[f"l{i}_wqkv"]).view(t, H + 2 * G, D)
        qk = apply_rope(qkv[:, :H + G], cos, sin)
        q = qk[:, :H].reshape(b, s, H, D).transpose(1, 2)
        if cache is None:
            k = qk[:, H:].reshape(b, s, G, D).transpose(1, 2)
            v = qkv[:, H + G:].reshape(b, s, G, D).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            cache.store(i, start, qk[:, H:].reshape(b, s, G, D), qkv[:, H + G:].reshape(b, s, G, D))
            skv = start + s
            k, v = cache.k[i][:, :skv].transpose(1, 2), cache.v[i][:, :skv].transpose(1, 2)
            seen = (torch.arange(s, device=x.device)[:, None] + start
                    >= torch.arange(skv, device=x.device)[None, :])        # bottom-right: i sees j <= start + i
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=seen, enable_gqa=True)
        x = F.linear(a.transpose(1, 2).reshape(t, H * D), p[f"l{i}_wo"]) + x
        gu = F.linear(self.rmsnorm(x, p[f"l{i}_mlp_norm"]), p[f"l{i}_w_gate_up"])
        g, u = gu[:, :c.d_ff], gu[:, c.d_ff:]
        up = torch.float64 if x.dtype == torch.float64 else torch.float32
        m = (F.silu(g.to(up)) * u.to(up)).to(x.dtype)
        return F.linear(m, p[f"l{i}_w_down"]) + x

    def decode_layer(self, i, x, b, s, cos, sin, cache, start):
        return self.layer(i, x, b, s, cos, sin, cache=cache, start=start)

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

    def prefill_chunk(self) -> int:
        return self.cfg.seq_multiple        # llama_attention's S is a multiple of it

    def layer(self, i, x, b, s, cos, sin, cache: KVCache | None = None, start: int = 0):
        """One decoder layer over x [B * S, d] (training and prefill: llama_attention, causal over these S
        tokens); with a cache (prefill, start 0), their k and v are copied into its [:, :S] as well."""
        c, p, k = self.cfg, self.p, self.k
        H, G, D = c.n_heads, c.n_kv_heads, c.head_dim
        t = x.shape[0]
        qkv = k["llama_qkv"](k["llama_rmsnorm"](x, p[f"l{i}_attn_norm"]), p[f"l{i}_wqkv"]).view(t, H + 2 * G, D)
        qk = apply_rope(qkv[:, :H + G], cos, sin, k)               # q and k heads in one call: [T, H + G, D]
        q = qk[:, :H].view(b, s, H, D)                             # strided views: attention reads them by TMA
        kk = qk[:, H:].view(b, s, G, D)
        v = qkv[:, H + G:].view(b, s, G, D)
        if cache is not None:
            if start:
                raise ValueError("SchedgenLlama.layer: a cache is filled from position 0 (later tokens: decode)")
            cache.store(i, 0, kk, v)                               # a copy: [B, S] rows are no [T] view of it
        a = k["llama_attention"](q, kk, v)                         # [B, S, H, D]
        return self.mlp(i, a.view(t, H * D), x)

    def mlp(self, i, a, x):
        """The attention output projection (+ residual x) and the SwiGLU MLP (+ residual), a [T, H * D]."""
        c, p, k = self.cfg, self.p, self.k
        x = k["llama_out_proj"](a, p[f"l{i}_wo"], x)
        gu = k["llama_gate_up"](k["llama_rmsnorm"](x, p[f"l{i}_mlp_norm"]), p[f"l{i}_w_gate_up"])
        m = k["llama_swiglu"](gu[:, :c.d_ff], gu[:, c.d_ff:])
        return k["llama_down_proj"](m, p[f"l{i}_w_down"], x)

    def decode_layer(self, i, x, b, s, cos, sin, cache: KVCache, start: int):
        """One decoder layer over the S new tokens x [B * S, d] at positions start.. of the cache (no autograd:
        the rope kernel's out= views). q is rotated into a fresh [T, H, D]; k into the cache's slot itself when
        that slot is one [T, G, D] strided view (S = 1: rows B apart by max_len; B = 1: contiguous), else into a
        scratch tensor copied in; v (a column slice of the qkv output) is copied. llama_decode_attention then reads
        q and the cache's strided [:, :start + S] views."""
        c, p, k = self.cfg, self.p, self.k
        H, G, D = c.n_heads, c.n_kv_heads, c.head_dim
        t, h = x.shape[0], D // 2
        qkv = k["llama_qkv"](k["llama_rmsnorm"](x, p[f"l{i}_attn_norm"]), p[f"l{i}_wqkv"]).view(t, H + 2 * G, D)
        v = qkv[:, H + G:].view(b, s, G, D)
        kslot = cache.k[i][:, start:start + s]                     # [B, S, G, D]
        kdst = kslot[:, 0] if s == 1 else kslot[0] if b == 1 else None   # the slot as one [T, G, D] view
        if "llama_rope_halves" in k:
            rope = k["llama_rope_halves"]
            cs, sn = cos[..., :h].contiguous(), sin[..., :h].contiguous()
            q = torch.empty(t, H, D, dtype=x.dtype, device=x.device)
            rope(qkv[:, :H, :h], qkv[:, :H, h:], cs, sn, out=(q[..., :h], q[..., h:]))
            kr = kdst if kdst is not None else torch.empty(t, G, D, dtype=x.dtype, device=x.device)
            rope(qkv[:, H:H + G, :h], qkv[:, H:H + G, h:], cs, sn, out=(kr[..., :h], kr[..., h:]))
        else:                                                      # TORCH FALLBACK (apply_rope's)
            q, kr = apply_rope(qkv[:, :H], cos, sin), apply_rope(qkv[:, H:H + G], cos, sin)
            if kdst is not None:
                kdst.copy_(kr)
                kr = kdst
        if kr is not kdst:
            kslot.copy_(kr.view(b, s, G, D))
        cache.v[i][:, start:start + s].copy_(v)
        skv = start + s
        a = k["llama_decode_attention"](q.view(b, s, H, D), cache.k[i][:, :skv], cache.v[i][:, :skv])
        return self.mlp(i, a.view(t, H * D), x)

    def head(self, x):
        return self.k["llama_lm_head"](self.k["llama_rmsnorm"](x, self.p["final_norm"]), self.p["lm_head"])

    def loss(self, logits, targets):
        return self.k["llama_cross_entropy"](logits, targets).reshape(())
