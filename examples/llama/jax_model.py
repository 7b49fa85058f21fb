"""The Llama-style decoder of model.py in jax (issue 43): pure functions over a params dict, differentiated by
`jax.jit(jax.grad(...))` through the schedgen packages' Pallas (Mosaic GPU) backend and their spec-derived
custom_vjp backward kernels, against a pure-jax XLA reference.

    loss(params, tokens, targets, kernels, interpret)   the packages' Pallas kernels (interpret=True: jax's Mosaic GPU
                                                         interpreter, on the CPU too)
    loss_ref(params, tokens, targets)                    jnp / jax.nn ops (XLA), rounding to bf16 where the kernels do

    python examples/llama/jax_model.py --config 1.5b --layers 2 --batch 2 --seq 2048    # GPU: train-step timing

The kernels are specs.py's at `spec_texts(cfg, pallas=True)` (every spec builds the Pallas backend as well; T = B x S
a multiple of 128, S of lcm(seq_multiple, 128), RoPE's tables broadcast over the heads by the caller), built into
<out>/<config>-pallas/. Which step runs where (ROUTES; `routes(kernels)` for a build, printed by the timing):

| step          | runs on                                    | why                                                         |
|---------------|--------------------------------------------|-------------------------------------------------------------|
| embedding     | XLA (`params["embed"][tokens]`)            | no gather family                                            |
| rmsnorm       | Pallas: llama_rmsnorm (rowwise)            |                                                             |
| qkv           | Pallas: llama_qkv (matmul)                 |                                                             |
| rope          | Pallas: llama_rope_halves (map)            | tables [T, H, D/2]: the map family's Pallas form takes no   |
|               |                                            | broadcast table at a dynamic H not a multiple of 8          |
| attention     | Pallas: llama_attention (attention)        | S a multiple of 128 (the backward's LSE: whole blocks)      |
| out_proj      | Pallas: llama_out_proj (matmul + residual) |                                                             |
| gate_up       | Pallas: llama_gate_up (matmul)             |                                                             |
| swiglu        | Pallas: llama_swiglu (map)                 |                                                             |
| down_proj     | Pallas: llama_down_proj (matmul + residual)|                                                             |
| lm_head       | Pallas: llama_lm_head (matmul)             |                                                             |
| cross_entropy | Pallas: llama_cross_entropy (rowwise) where| the rowwise family refuses its Pallas form when a block of  |
|               | it builds (tiny); XLA (`xla_cross_entropy`)| 4 whole vocab rows (the f32 loss rows go by 16-byte TMA)    |
|               | at 1.5b and 8b-layer                       | does not fit in SMEM: 1.5b (49152) and 8b-layer (128256)    |

The XLA stand-in for a refused cross-entropy is not silent: `build_kernels` returns it tagged with the validator's
message (`routes` and the timing table print it), and `loss` raises on a missing kernel that no refusal explains.
The q / k / v and gate / up splits and the joins of RoPE's halves are slices and concatenations (XLA copies, not
computations); jax has no strided views to hand the kernels as torch does.
"""
from __future__ import annotations

import argparse
import functools
import math
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

try:
    from .config import LlamaConfig, get
    from . import specs as _specs
except ImportError:                      # run as a script / examples/llama on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from config import LlamaConfig, get  # type: ignore[no-redef]
    import specs as _specs               # type: ignore[no-redef]

IGNORE_INDEX = -100
SEQ_MULTIPLE = _specs.PALLAS_TOKEN_MULTIPLE       # S (hence T = B x S) a multiple of this on the Pallas backend
BF16 = jnp.bfloat16
F32 = jnp.float32

# step -> the package that runs it on the Pallas backend (None: XLA always)
ROUTES: dict[str, str | None] = {
    "embedding": None, "rmsnorm": "llama_rmsnorm", "qkv": "llama_qkv", "rope": "llama_rope_halves",
    "attention": "llama_attention", "out_proj": "llama_out_proj", "gate_up": "llama_gate_up",
    "swiglu": "llama_swiglu", "down_proj": "llama_down_proj", "lm_head": "llama_lm_head",
    "cross_entropy": "llama_cross_entropy",
}


# ----------------------------------------------------------------------------------------------------- parameters

def init_params(cfg: LlamaConfig, seed: int = 0, dtype=BF16) -> dict[str, jax.Array]:
    """model.init_params's scheme (norms 1, embedding N(0, 0.02^2), projections N(0, 1 / fan_in), wo and w_down
    scaled by 1 / sqrt(2 n_layers)), drawn with numpy from `seed` (not the torch model's values)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in cfg.param_shapes().items():
        if len(shape) == 1:
            t = np.ones(shape, np.float32)
        elif name == "embed":
            t = rng.standard_normal(shape, np.float32) * 0.02
        else:
            t = rng.standard_normal(shape, np.float32) * shape[1] ** -0.5
            if name.endswith(("_wo", "_w_down")):
                t = t / math.sqrt(2 * cfg.n_layers)
        out[name] = jnp.asarray(t, dtype)
    return out


def rope_tables(cfg: LlamaConfig, seq: int, dtype=BF16) -> tuple[jax.Array, jax.Array]:
    """cos and sin of each position, [S, head_dim / 2] (the two halves of HF's cat(freqs, freqs) are equal),
    computed in f32 and cast to `dtype` as model.rope_tables does."""
    d = cfg.head_dim
    inv = cfg.rope_theta ** -(np.arange(0, d, 2, dtype=np.float32) / d)
    freqs = np.outer(np.arange(seq, dtype=np.float32), inv)
    return jnp.asarray(np.cos(freqs), dtype), jnp.asarray(np.sin(freqs), dtype)


# ------------------------------------------------------------------------------------------- the ops, two ways

class XlaOps:
    """The reference ops on jnp / jax.nn (XLA), each computing in f32 and rounding its result to the activations'
    dtype where the schedgen kernel does (bf16 in, f32 inside, bf16 out). `attention_impl` goes to
    jax.nn.dot_product_attention's `implementation` (None: jax picks; "xla", "cudnn")."""

    def __init__(self, cfg: LlamaConfig, attention_impl: str | None = None):
        self.cfg, self.attention_impl = cfg, attention_impl

    def rmsnorm(self, x, w):
        xf = x.astype(F32)
        return (xf * jax.lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + self.cfg.rms_eps) * w.astype(F32)
                ).astype(x.dtype)

    def linear(self, x, w, r=None):
        acc = jnp.dot(x, w.T, preferred_element_type=F32)
        return (acc if r is None else acc + r.astype(F32)).astype(x.dtype)

    def rope(self, x, c, s):
        """x [T, H, D] -> HF rotate-half RoPE; c, s [T, D/2]."""
        h = x.shape[-1] // 2
        x1, x2 = x[..., :h].astype(F32), x[..., h:].astype(F32)
        c, s = c[:, None].astype(F32), s[:, None].astype(F32)
        return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1).astype(x.dtype)

    def attention(self, q, k, v):
        """q [B, S, H, D], k / v [B, S, G, D] -> causal GQA attention [B, S, H, D]."""
        return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=self.attention_impl)

    def swiglu(self, g, u):
        return (jax.nn.silu(g.astype(F32)) * u.astype(F32)).astype(g.dtype)

    def cross_entropy(self, logits, targets):
        return xla_cross_entropy(logits, targets)


def xla_cross_entropy(logits, targets):
    """Mean over the rows whose target is not IGNORE_INDEX of logsumexp(x) - x[t], in f32 (the XLA stand-in for
    llama_cross_entropy where its Pallas form does not build)."""
    x = logits.astype(F32)
    keep = targets != IGNORE_INDEX
    t = jnp.where(keep, targets, 0)
    per_row = jax.nn.logsumexp(x, -1) - jnp.take_along_axis(x, t[:, None], -1)[:, 0]
    return jnp.sum(jnp.where(keep, per_row, 0.0)) / jnp.sum(keep)


def _xla_stand_in(reason: str):
    def ce(logits, targets, **_):
        return xla_cross_entropy(logits, targets)
    ce.xla_reason = reason
    return ce


class PallasOps:
    """The same ops on the packages' Pallas backend (each a jax.custom_vjp whose backward runs the spec's derived
    Pallas kernels). `kernels`: build_kernels's dict; a value with an `xla_reason` is an XLA stand-in."""

    def __init__(self, cfg: LlamaConfig, kernels: dict, interpret: bool = False):
        self.cfg, self.kernels = cfg, kernels
        self.kw = {"backend": "pallas", **({"interpret": True} if interpret else {})}

    def _k(self, name):
        try:
            fn = self.kernels[name]
        except KeyError:
            raise KeyError(f"kernel {name} missing: build_kernels(cfg, out) builds every one (or says why it "
                           "runs on XLA)") from None
        return functools.partial(fn, **self.kw) if not hasattr(fn, "xla_reason") else fn

    def rmsnorm(self, x, w):
        return self._k("llama_rmsnorm")(x, w)

    def linear(self, x, w, r=None, name=None):
        return self._k(name)(x, w) if r is None else self._k(name)(x, w, r)

    def rope(self, x, c, s):
        t, hh, d = x.shape
        h = d // 2
        c = jnp.broadcast_to(c[:, None], (t, hh, h))      # the Pallas form's tables are [T, H, D/2]
        s = jnp.broadcast_to(s[:, None], (t, hh, h))
        o1, o2 = self._k("llama_rope_halves")(x[..., :h], x[..., h:], c, s)
        return jnp.concatenate([o1, o2], -1)

    def attention(self, q, k, v):
        return self._k("llama_attention")(q, k, v)

    def swiglu(self, g, u):
        return self._k("llama_swiglu")(g, u)

    def cross_entropy(self, logits, targets):
        return self._k("llama_cross_entropy")(logits, targets).reshape(())


# ------------------------------------------------------------------------------------------------------ the model

def forward(ops, cfg: LlamaConfig, params: dict, tokens: jax.Array) -> jax.Array:
    """tokens [B, S] -> logits [T, vocab] (T = B x S), every step through `ops` (XlaOps or PallasOps)."""
    b, s = tokens.shape
    t = b * s
    H, G, D = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    pallas = isinstance(ops, PallasOps)
    lin = (lambda name, *a: ops.linear(*a, name=name)) if pallas else (lambda name, *a: ops.linear(*a))
    cos, sin = rope_tables(cfg, s, params["embed"].dtype)
    cos, sin = jnp.tile(cos, (b, 1)), jnp.tile(sin, (b, 1))          # [T, D/2]
    x = params["embed"][tokens.reshape(-1)]                            # [T, d]: XLA (no gather family)
    for i in range(cfg.n_layers):
        p = functools.partial(lambda i, n: params[f"l{i}_{n}"], i)
        qkv = lin("llama_qkv", ops.rmsnorm(x, p("attn_norm")), p("wqkv")).reshape(t, H + 2 * G, D)
        qk = ops.rope(qkv[:, :H + G], cos, sin)                        # q and k heads in one call
        q = qk[:, :H].reshape(b, s, H, D)
        k = qk[:, H:].reshape(b, s, G, D)
        v = qkv[:, H + G:].reshape(b, s, G, D)
        a = ops.attention(q, k, v).reshape(t, H * D)
        x = lin("llama_out_proj", a, p("wo"), x)
        gu = lin("llama_gate_up", ops.rmsnorm(x, p("mlp_norm")), p("w_gate_up"))
        m = ops.swiglu(gu[:, :cfg.d_ff], gu[:, cfg.d_ff:])
        x = lin("llama_down_proj", m, p("w_down"), x)
    return lin("llama_lm_head", ops.rmsnorm(x, params["final_norm"]), params["lm_head"])


def _check_seq(s: int) -> None:
    if s % SEQ_MULTIPLE:
        raise ValueError(f"S = {s}: the Pallas kernels take S a multiple of {SEQ_MULTIPLE} (specs.spec_texts(cfg, "
                         "pallas=True): the matmul's 128-row tile, the attention backward's whole blocks)")


def loss(params: dict, tokens: jax.Array, targets: jax.Array, kernels: dict, interpret: bool = False,
         cfg: LlamaConfig | None = None) -> jax.Array:
    """The mean cross-entropy (IGNORE_INDEX targets left out) of the decoder on the packages' Pallas backend.
    kernels: build_kernels(cfg, out)[0]; cfg: the config (default: the one build_kernels recorded in kernels)."""
    cfg = cfg or kernels["__config__"]
    _check_seq(tokens.shape[1])
    ops = PallasOps(cfg, kernels, interpret)
    return ops.cross_entropy(forward(ops, cfg, params, tokens), targets.reshape(-1).astype(jnp.int32))


def loss_ref(params: dict, tokens: jax.Array, targets: jax.Array, cfg: LlamaConfig,
             attention_impl: str | None = None) -> jax.Array:
    """The same loss on XLA (jnp, jax.nn.dot_product_attention), rounding to the params' dtype where the kernels
    do; give it f32 params for the float32 reference."""
    ops = XlaOps(cfg, attention_impl)
    return ops.cross_entropy(forward(ops, cfg, params, tokens), targets.reshape(-1))


# ------------------------------------------------------------------------------------------------------ building

def build_kernels(cfg: LlamaConfig, out: Path, log=print) -> tuple[dict, dict[str, str]]:
    """Build (as needed: specs.build's stamps) and import the config's Pallas-enabled packages into
    out/<config>-pallas. Returns (kernels, refused): kernels maps each kernel name to its package function (a
    refused one to its XLA stand-in, tagged `xla_reason`) plus "__config__"; refused maps a name to the validator's
    message. Only llama_cross_entropy may be refused (ROUTES); any other refusal raises."""
    from schedgen.errors import SpecErrors
    folder = Path(out) / f"{cfg.name}-pallas"
    names = [n for n in ROUTES.values() if n is not None]
    kernels = _specs.load(cfg, folder, names=set(names) - {"llama_cross_entropy"}, log=log, pallas=True)
    refused = {}
    try:
        kernels.update(_specs.load(cfg, folder, names={"llama_cross_entropy"}, log=log, pallas=True))
    except SpecErrors as exc:
        reason = " / ".join(sorted({p.message for p in exc.problems}))
        refused["llama_cross_entropy"] = reason
        kernels["llama_cross_entropy"] = _xla_stand_in(reason)
    kernels["__config__"] = cfg
    return kernels, refused


def routes(kernels: dict) -> list[tuple[str, str]]:
    """(step, where it runs) for a build_kernels result."""
    rows = []
    for step, name in ROUTES.items():
        if name is None:
            rows.append((step, "XLA (no gather family)"))
        elif hasattr(kernels.get(name), "xla_reason"):
            rows.append((step, f"XLA stand-in: {kernels[name].xla_reason}"))
        else:
            rows.append((step, f"Pallas: {name}"))
    return rows


# ------------------------------------------------------------------------------------------------------ timing

def _rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def data(cfg: LlamaConfig, batch: int, seq: int, seed: int = 1) -> tuple[jax.Array, jax.Array]:
    """Random tokens [B, S] and their next-token targets (the last position IGNORE_INDEX)."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, cfg.vocab, (batch, seq + 1))
    targets = tokens[:, 1:].copy()
    targets[:, -1] = IGNORE_INDEX
    return jnp.asarray(tokens[:, :-1], jnp.int32), jnp.asarray(targets, jnp.int32)


def time_train_step(cfg: LlamaConfig, batch: int, seq: int, out: Path, warmup: int = 3, steps: int = 10,
                    attention_impl: str | None = None, log=print) -> list[dict]:
    """The train step (jax.jit(jax.value_and_grad(loss)), bf16 params) ours vs the XLA reference's, on the
    default device: first checked (loss and every gradient against the float32 XLA reference, and the bf16 XLA
    reference's own distance from it beside), then `warmup` untimed steps and `steps` timed ones, each
    block_until_ready; the median. Returns the rows printed."""
    _check_seq(seq)
    kernels, refused = build_kernels(cfg, out, log=log)
    for step, where in routes(kernels):
        log(f"  {step:<14} {where}")
    params = init_params(cfg)
    tokens, targets = data(cfg, batch, seq)
    ours = jax.jit(jax.value_and_grad(functools.partial(loss, kernels=kernels, cfg=cfg)))
    ref = jax.jit(jax.value_and_grad(functools.partial(loss_ref, cfg=cfg, attention_impl=attention_impl)))
    ref32 = jax.jit(jax.value_and_grad(functools.partial(loss_ref, cfg=cfg, attention_impl="xla")))
    (l32, g32) = ref32({k: v.astype(F32) for k, v in params.items()}, tokens, targets)
    rows = []
    for name, fn in (("schedgen Pallas", ours), ("XLA reference", ref)):
        lv, g = fn(params, tokens, targets)
        jax.block_until_ready(g)
        worst = max(cfg.param_shapes(), key=lambda n: _rel_err(g[n], g32[n]))
        err = _rel_err(g[worst], g32[worst])
        log(f"{name}: loss {float(lv):.5f} (f32 reference {float(l32):.5f}), worst gradient {worst}: "
            f"max |g - g32| / max |g32| = {err:.3g}")
        for _ in range(warmup):
            jax.block_until_ready(fn(params, tokens, targets))
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(params, tokens, targets))
            times.append(time.perf_counter() - t0)
        rows.append({"contender": name, "median_ms": 1e3 * statistics.median(times),
                     "min_ms": 1e3 * min(times), "loss": float(lv), "grad_err": err})
    base = rows[1]["median_ms"]
    log(f"\n{cfg.name}, {cfg.n_layers} layers, B {batch} x S {seq}: train step (jax.jit(jax.value_and_grad)), "
        f"median of {steps} after {warmup} warmup, on {jax.devices()[0].device_kind}")
    log(f"{'contender':<18}{'median ms':>11}{'min ms':>9}{'tokens/s':>12}{'vs XLA':>8}{'grad err':>10}")
    for r in rows:
        log(f"{r['contender']:<18}{r['median_ms']:>11.2f}{r['min_ms']:>9.2f}"
            f"{batch * seq / r['median_ms'] * 1e3:>12.0f}{base / r['median_ms']:>7.2f}x{r['grad_err']:>10.3g}")
    if refused:
        log("on XLA in ours too: " + "; ".join(f"{n} ({why})" for n, why in refused.items()))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="tiny")
    ap.add_argument("--layers", type=int, default=None, help="override the config's n_layers")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--attention", default=None, choices=[None, "xla", "cudnn"],
                    help="the reference's jax.nn.dot_product_attention implementation (default: jax picks)")
    ap.add_argument("-o", "--out", default=str(_specs.ROOT / "build" / "llama"))
    args = ap.parse_args()
    cfg = get(args.config, **({"n_layers": args.layers} if args.layers else {}))
    time_train_step(cfg, args.batch, args.seq, Path(args.out), args.warmup, args.steps, args.attention)
    return 0


if __name__ == "__main__":
    sys.exit(main())
