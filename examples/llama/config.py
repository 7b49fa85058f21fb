"""The Llama-style decoder's shapes (issue 43): one dataclass, and the named configs the example and its test use.

Nothing else in examples/llama/ names a shape: the specs (specs.py), both models (model.py) and the comparison
(run.py) derive every extent from a LlamaConfig, so a config not listed here works the same way."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class LlamaConfig:
    name: str
    d_model: int
    n_heads: int           # query heads
    n_kv_heads: int        # key / value heads (GQA: n_heads a multiple of it)
    head_dim: int
    d_ff: int              # the SwiGLU MLP's hidden width
    vocab: int
    n_layers: int
    rms_eps: float = 1e-5
    rope_theta: float = 500000.0
    max_tokens: int = 65536    # the largest B x S a call takes (every spec's dynamic token count T)
    max_batch: int = 16        # the attention kernel's dynamic B
    max_seq: int = 8192        # the attention kernel's dynamic S
    seq_multiple: int = 64     # S a multiple of this: the attention backward takes no ragged 64-row blocks yet
    max_cache: int = 32768     # decode: the KV cache's length (the decode attention's largest Skv)
    max_new: int = 16          # decode: the most new tokens a decode step takes (the decode attention's Sq)
    max_decode_batch: int = 64  # decode: the decode attention's largest B

    def __post_init__(self):
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"{self.name}: n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if self.max_seq % self.seq_multiple:
            raise ValueError(f"{self.name}: max_seq {self.max_seq} is not a multiple of {self.seq_multiple}")
        if not 1 <= self.max_new <= self.max_cache:
            raise ValueError(f"{self.name}: max_new {self.max_new} must be in 1..max_cache {self.max_cache} (a "
                             "bottom-right causal Skv is at least the largest Sq)")
        if self.head_dim % 16:
            # RoPE reads the two halves of a head as strided views: each half's start must be 16-byte aligned (TMA)
            raise ValueError(f"{self.name}: head_dim {self.head_dim} must be a multiple of 16 (RoPE's bf16 halves "
                             "are read by TMA at 16-byte aligned offsets)")
        if self.d_ff % 8:
            raise ValueError(f"{self.name}: d_ff {self.d_ff} must be a multiple of 8 (the up half of the gate/up "
                             "output is a view at a 16-byte aligned offset)")

    @property
    def qkv_width(self) -> int:
        """The fused q, k, v projection's output width: (n_heads + 2 n_kv_heads) heads of head_dim."""
        return (self.n_heads + 2 * self.n_kv_heads) * self.head_dim

    @property
    def attn_width(self) -> int:
        return self.n_heads * self.head_dim

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every parameter's name and shape (torch.nn.Linear's [out, in] layout for the projections), the one list
        both models (model.py, jax_model.py) are built from."""
        d, f = self.d_model, self.d_ff
        shapes: dict[str, tuple[int, ...]] = {"embed": (self.vocab, d)}
        for i in range(self.n_layers):
            shapes.update({f"l{i}_attn_norm": (d,), f"l{i}_wqkv": (self.qkv_width, d), f"l{i}_wo": (d, self.attn_width),
                           f"l{i}_mlp_norm": (d,), f"l{i}_w_gate_up": (2 * f, d), f"l{i}_w_down": (d, f)})
        shapes.update({"final_norm": (d,), "lm_head": (self.vocab, d)})
        return shapes

    def replace(self, **fields) -> "LlamaConfig":
        return dataclasses.replace(self, **fields)


CONFIGS: dict[str, LlamaConfig] = {
    # CPU tests: small, but every extent a multiple of what the specs' TMA boxes and tiles need (16-byte rows,
    # 64-wide bf16 blocks, head_dim 128 as the models below)
    "tiny": LlamaConfig("tiny", d_model=256, n_heads=4, n_kv_heads=2, head_dim=64, d_ff=512, vocab=512, n_layers=2,
                        max_tokens=4096, max_batch=8, max_seq=2048, max_cache=2048, max_decode_batch=8),
    # a ~1.5B-class shape (SmolLM2 / Qwen-like width), a few layers
    "1.5b": LlamaConfig("1.5b", d_model=2560, n_heads=20, n_kv_heads=4, head_dim=128, d_ff=6912, vocab=49152,
                        n_layers=4),
    # Llama-3-8B's layer shapes, a few layers
    "8b-layer": LlamaConfig("8b-layer", d_model=4096, n_heads=32, n_kv_heads=8, head_dim=128, d_ff=14336,
                            vocab=128256, n_layers=2),
}


def get(name: str, **overrides) -> LlamaConfig:
    """A named config, with fields overridden (`get("1.5b", n_layers=2)`)."""
    try:
        cfg = CONFIGS[name]
    except KeyError:
        raise SystemExit(f"unknown config {name!r}: one of {', '.join(CONFIGS)}") from None
    return cfg.replace(**overrides) if overrides else cfg
