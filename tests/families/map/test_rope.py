"""RoPE (rotary position embedding, Hugging Face's rotate-half convention) as a map spec: specs/rope_bf16_dynamic.yaml.

The map family computes each output block from the inputs' blocks at the same place (its index maps spell numpy
broadcasting, nothing else), so the rotation's partner half is a second input: the head [T, H, 128] comes in as its
halves x1 = x[..., :64] and x2 = x[..., 64:] (views, no copy) and goes out as o1, o2, with cos and sin [T, 1, 64]
broadcast over the heads. Checked on the CPU against a float64 transcription of transformers'
apply_rotary_pos_emb: the forward and jax.grad in the Mosaic GPU interpreter, torch autograd through views of a
fused QKV projection (the CUDA path stubbed with the float64 reference: the wiring), the CUDA kernels compiled by
NVRTC, the strided views through the call path's argument checks (fake driver), and the refusal of the
one-input design with a "partner block" index map `1 - p` (why the halves are separate inputs)."""
from __future__ import annotations

import re
import sys

import numpy as np
import pytest

from conftest import ROOT, SPECS_DIR, import_package, plan_errors, stub_cuda_with_references
from schedgen.build import build_spec, package
from schedgen.cache import Cache
from schedgen.toolchain.nvrtc import sass
from schedgen.verify import verify_file

SPEC = SPECS_DIR / "rope_bf16_dynamic.yaml"
D, D2 = 128, 64
BF16_REL = 2.0 ** -8          # bf16's rounding of one result (8 bits of mantissa)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rope")
    b = build_spec(str(SPEC), cache=Cache(tmp / "cache"))
    return b, package(b, tmp / "out")


@pytest.fixture(scope="module")
def mod(built):
    b, root = built
    return import_package(root.parent, b.name)


# ------------------------------------------------------------------------------------------ float64 reference

def tables(T: int, seed: int, base: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    """HF's cos and sin [T, 128] (LlamaRotaryEmbedding) at random positions: emb = cat(freqs, freqs)."""
    pos = np.random.default_rng(seed).integers(0, 8192, T)
    inv_freq = base ** (-np.arange(0, D, 2, dtype=np.float64) / D)
    freqs = pos[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb), np.sin(emb)


def rotate_half(x: np.ndarray) -> np.ndarray:
    return np.concatenate([-x[..., D2:], x[..., :D2]], axis=-1)


def apply_rotary_pos_emb64(x, cos, sin) -> np.ndarray:
    """transformers' apply_rotary_pos_emb on x [T, H, 128] (unsqueeze_dim 1: cos, sin [T, 128] over the heads)."""
    x, cos, sin = (np.asarray(a, np.float64) for a in (x, cos, sin))
    return x * cos[:, None, :] + rotate_half(x) * sin[:, None, :]


def rope_vjp64(g, cos, sin) -> np.ndarray:
    """The gradient of sum(apply_rotary_pos_emb(x) * g) in x: R^T g (rotate_half's transpose is -rotate_half)."""
    g, cos, sin = (np.asarray(a, np.float64) for a in (g, cos, sin))
    return g * cos[:, None, :] - rotate_half(g * sin[:, None, :])


def vjp_scale64(g, cos, sin) -> np.ndarray:
    """The sum of the magnitudes of the vjp's terms: the scale of its rounding (the upstream gradient reaches the
    kernel in bf16, the output's dtype, so a gradient that cancels is off by bf16's rounding of its terms)."""
    g, cos, sin = (np.abs(np.asarray(a, np.float64)) for a in (g, cos, sin))
    return g * cos[:, None, :] + np.abs(rotate_half(g * sin[:, None, :]))


def assert_vjp_close(got, g, cos, sin, rounding: float) -> None:
    want = rope_vjp64(g, cos, sin)
    bound = rounding * vjp_scale64(g, cos, sin) + 1e-6 * np.abs(want).max()
    bad = np.abs(np.asarray(got, np.float64) - want) > bound
    assert not bad.any(), (np.argwhere(bad)[:5], np.asarray(got)[bad][:5], want[bad][:5])


def test_the_reference_is_hf_rope():
    """The reference itself: a rotation by the token's angle in each (i, i + 64) plane (norm kept, angle added),
    and its vjp the transpose (R^T R = 1)."""
    T, H = 5, 3
    rng = np.random.default_rng(7)
    x = rng.standard_normal((T, H, D))
    cos, sin = tables(T, seed=8)
    o = apply_rotary_pos_emb64(x, cos, sin)
    z_in = x[..., :D2] + 1j * x[..., D2:]
    z_out = o[..., :D2] + 1j * o[..., D2:]
    np.testing.assert_allclose(z_out, z_in * np.exp(1j * np.arctan2(sin, cos)[:, None, :D2]), atol=1e-12)
    np.testing.assert_allclose(rope_vjp64(o, cos, sin), x, atol=1e-12)


# ------------------------------------------------------------------------------------------ the proposed design

def _partner_spec(tmp_path, rank4: bool):
    """The one-input design: x twice, xr's index map reading the other half (1 - p) of the size-2 axis."""
    if rank4:
        shapes, block, grid = ("[T, H, 2, D2]", "[T, 1, 2, D2]"), ("[4, 8, 1, 64]", "[4, 1, 1, 64]"), "[t, h, p, d]"
        maps = ("(t, h, p, d)", "(t, h, 1 - p, d)", "(t, 0, p, d)")
        sizes = "T: {dynamic: true, max: 65536}\n    H: {dynamic: true, max: 128, multiple_of: 8}\n    D2: 64"
    else:   # [T*H, 2, D2]: rank 3, tables full-size (the family's rank limit aside)
        shapes, block, grid = ("[R, 2, D2]", "[R, 2, D2]"), ("[8, 1, 64]", "[8, 1, 64]"), "[r, p, d]"
        maps = ("(r, p, d)", "(r, 1 - p, d)", "(r, p, d)")
        sizes = "R: {dynamic: true, max: 65536, multiple_of: 8}\n    D2: 64"
    text = f"""name: rope_partner
op:
  kind: map
  sizes:
    {sizes}
  inputs:
    x: {{shape: {shapes[0]}, dtype: bf16}}
    xr: {{shape: {shapes[0]}, dtype: bf16}}
    c: {{shape: {shapes[1]}, dtype: bf16}}
    s: {{shape: {shapes[1]}, dtype: bf16}}
  outputs:
    o: {{shape: {shapes[0]}, dtype: bf16}}
  body: o = x * c + xr * s
schedule:
  grid_names: {grid}
  in_specs:
    x: {{block_shape: {block[0]}, index_map: "{maps[0]}"}}
    xr: {{block_shape: {block[0]}, index_map: "{maps[1]}"}}
    c: {{block_shape: {block[1]}, index_map: "{maps[2]}"}}
    s: {{block_shape: {block[1]}, index_map: "{maps[2]}"}}
  out_specs:
    o: {{block_shape: {block[0]}, index_map: "{maps[0]}"}}
backward: {{}}
"""
    path = tmp_path / "rope_partner.yaml"
    path.write_text(text)
    return path


def test_a_partner_block_index_map_is_refused_located(tmp_path):
    """The map family's index maps must pick the block numpy broadcasting reads (operands.py _check_index_map):
    `1 - p` is refused at the index map, with the grid point where it differs; the [T, H, 2, 64] view is refused
    too (the family takes 1-D to 3-D arrays). So the partner half comes in as an input of its own."""
    errs = plan_errors(_partner_spec(tmp_path, rank4=False))
    assert len(errs) == 1, errs
    assert re.search(r"schedule\.in_specs\.xr\.index_map: index_map \(r, 1 - p, d\) sends grid point \(0, 0, 0\) "
                     r"to block \(0, 1, 0\) of 'xr', but the elementwise body reads block \(0, 0, 0\)", errs[0]), errs
    errs = plan_errors(_partner_spec(tmp_path, rank4=True))
    assert any("op.outputs.o.shape: the map family handles 1-D to 3-D arrays, got rank 4" in e for e in errs), errs


# ------------------------------------------------------------------------------------------ plan and compile

def test_validates_and_plans_on_both_backends_forward_and_backward(built):
    b, _ = built
    assert b.plan.launch.backends == ("cuda", "pallas")
    assert [r.name for r in b.plan.launch.dynamic_sizes] == ["T", "H"]
    assert [o.name for o in b.plan.inputs] == ["x1", "x2", "c", "s"]
    assert [o.name for o in b.plan.outputs] == ["o1", "o2"]
    (step,) = b.backward.steps.values()
    assert step.plan.launch.backends == ("cuda", "pallas")
    # the tables are constants (backward.wrt: [x1, x2]); the step reads them and the upstream gradients, not x
    assert sorted(o.name for o in step.plan.inputs) == ["c", "g_o1", "g_o2", "s"]
    assert [(o.name, o.dtype, tuple(map(str, o.shape))) for o in step.plan.outputs] == [
        ("grad_x1", "bf16", ("T", "H", "64")), ("grad_x2", "bf16", ("T", "H", "64"))]


def test_cuda_kernels_compile_through_nvrtc_to_tma_code(built):
    """Forward and backward step: 3-D TMA loads and stores (the tables' [T, 64] maps 2-D), no local memory."""
    b, _ = built
    for k in (b, *b.backward.steps.values()):
        text = sass(k.files["kernel.cubin"])
        assert re.search(r"\bUTMALDG\.3D\b", text) and re.search(r"\bUTMALDG\.2D\b", text), k.name
        assert re.search(r"\bUTMASTG\.3D\b", text), k.name
        assert not re.search(r"\b(LDL|STL)\b", text), k.name


# ------------------------------------------------------------------------------------------ Pallas interpreter

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: E402

INTERPRET = plgpu.InterpretGPUParams()


def _inputs(T, H, seed):
    x = np.random.default_rng(seed).standard_normal((T, H, D)).astype(np.float32)
    cos, sin = tables(T, seed + 1)
    return (jnp.asarray(a, jnp.bfloat16) for a in (x, cos, sin))


def _rope(mod, x, cos, sin):
    """The calling convention: halves of x, tables as [T, 1, 64] views of HF's [T, 128] cos and sin."""
    o1, o2 = mod.rope_bf16_dynamic(x[..., :D2], x[..., D2:], cos[:, None, :D2], sin[:, None, :D2],
                                   interpret=INTERPRET)
    return jnp.concatenate([o1, o2], axis=-1)


def _f64(a):
    return np.asarray(jnp.asarray(a, jnp.float32), np.float64)


@pytest.mark.parametrize("T, H", [(13, 8), (6, 32)], ids=["T13-H8", "T6-H32"])
def test_forward_in_the_interpreter_matches_hf_rope(mod, T, H):
    """Llama's key heads (8) at a token count that is no multiple of the 4-token block, and its query heads (32)."""
    x, cos, sin = _inputs(T, H, seed=T)
    got = _f64(_rope(mod, x, cos, sin))
    want = apply_rotary_pos_emb64(_f64(x), _f64(cos), _f64(sin))
    assert got.shape == (T, H, D) and np.isfinite(got).all()
    # each element: bf16's rounding of the result, plus f32 arithmetic on two products
    np.testing.assert_allclose(got, want, rtol=BF16_REL, atol=1e-6 * np.abs(want).max())


def test_jax_grad_in_the_interpreter_is_the_transpose_rotation(mod):
    """jax.grad of sum(rope(x) * g) through the halves (slices of one x, their cotangents added back into it)
    against R^T g in float64."""
    T, H = 7, 8
    x, cos, sin = _inputs(T, H, seed=3)
    g = np.random.default_rng(4).standard_normal((T, H, D)).astype(np.float32)
    gx = jax.grad(lambda x: jnp.sum(_rope(mod, x, cos, sin).astype(jnp.float32) * g))(x)
    assert gx.dtype == jnp.bfloat16 and gx.shape == (T, H, D)
    assert_vjp_close(_f64(gx), g, _f64(cos), _f64(sin), 3 * BF16_REL)


def test_verify_checks_the_outputs_and_both_gradients():
    """`schedgen verify --interpret`: o1, o2, grad:x1 and grad:x2 rows, each against the float64 graph."""
    checks = verify_file(str(SPEC), ["pallas"], interpret=True, small=True, seed=5)
    rows = {c.output for c in checks}
    assert rows == {"o1", "o2", "grad:x1", "grad:x2"}, rows
    assert all(c.ok and c.rel_error <= c.tolerance for c in checks), checks


# ------------------------------------------------------------------------------------------ torch autograd

torch = pytest.importorskip("torch")


@pytest.fixture
def ran(built, monkeypatch):
    """Kernel._call_cuda stubbed with each kernel's float64 reference (outputs in the kernel's dtype): the names
    and argument strides of the kernels run."""
    b, _ = built
    specs = {b.name: b.spec} | {s.name: s.spec for s in b.backward.steps.values()}
    return stub_cuda_with_references(monkeypatch, specs,
                                     record=lambda k, args: (k.name, [tuple(a.stride()) for a in args]))


def test_torch_autograd_through_views_of_a_fused_qkv(mod, ran):
    """Llama's attention input: q (32 heads) and k (8 heads) as head-range views of one fused projection
    qkv [T, (H + 2 Hkv) * 128], each split into halves (views); the tables views of HF's cos / sin [T, 128].
    The kernels get the views as they are; the gradient reaching qkv is R^T g on q's and k's columns, 0 on v's."""
    T, H, G = 9, 32, 8
    rng = np.random.default_rng(11)
    qkv = torch.tensor(rng.standard_normal((T, (H + 2 * G) * D)), dtype=torch.bfloat16, requires_grad=True)
    cos64, sin64 = tables(T, seed=12)
    cos, sin = (torch.tensor(a, dtype=torch.bfloat16) for a in (cos64, sin64))
    heads = qkv.view(T, H + 2 * G, D)
    f = mod.rope_bf16_dynamic
    outs, ups = [], []
    for lo, n in ((0, H), (H, G)):
        x = heads[:, lo:lo + n]
        o1, o2 = f(x[..., :D2], x[..., D2:], cos[:, None, :D2], sin[:, None, :D2])
        outs.append(torch.cat([o1, o2], dim=-1))
        ups.append(torch.tensor(rng.standard_normal((T, n, D)), dtype=torch.float32))
    q_rot, k_rot = outs
    c, s = cos.to(torch.float64).numpy(), sin.to(torch.float64).numpy()
    x64 = qkv.detach().to(torch.float64).numpy().reshape(T, H + 2 * G, D)
    for o, lo, n in ((q_rot, 0, H), (k_rot, H, G)):
        want = apply_rotary_pos_emb64(x64[:, lo:lo + n], c, s)
        np.testing.assert_allclose(o.detach().to(torch.float64).numpy(), want, rtol=BF16_REL,
                                   atol=1e-6 * np.abs(want).max())
    loss = sum((o.float() * g).sum() for o, g in zip(outs, ups))
    loss.backward()
    names = [n for n, _ in ran]
    assert names == ["rope_bf16_dynamic"] * 2 + ["rope_bf16_dynamic_grad"] * 2, names
    row = (H + 2 * G) * D
    assert ran[0][1][:2] == [(row, D, 1), (row, D, 1)]            # x1, x2: the views themselves, no copy
    assert ran[0][1][2:] == [(D, D, 1), (D, D, 1)]                  # cos[:, None, :64]: a view of [T, 128]
    grad = qkv.grad.to(torch.float64).numpy().reshape(T, H + 2 * G, D)
    for g, lo, n in ((ups[0], 0, H), (ups[1], H, G)):
        assert_vjp_close(grad[:, lo:lo + n], g.numpy(), c, s, 3 * BF16_REL)
    assert not grad[:, H + G:].any()                                 # v: no gradient


# ------------------------------------------------------------------------------------------ strided views (CUDA call path)

sys.path.insert(0, str(ROOT / "tests" / "runtime"))
from fake_driver import FakeDriver  # noqa: E402
from test_call_path import Tensor, Torch  # noqa: E402

BASE = 0x7F0000000000


@pytest.fixture
def fakes(monkeypatch):
    return FakeDriver(monkeypatch), Torch(monkeypatch)


def _views(T, H, G, which):
    """x1, x2 of q (which 0), k (1) or q and k at once (2: their heads are adjacent) as views of a fused qkv
    [T, (H + 2G) * 128] bf16, cos / sin views of [T, 128] tables, and out= views of one o [T, n, 128]."""
    row = (H + 2 * G) * D
    lo, n = ((0, H), (H, G), (0, H + G))[which]
    st = (row, D, 1)
    x1 = Tensor((T, n, D2), "bf16", ptr=BASE + lo * D * 2, strides=st)
    x2 = Tensor((T, n, D2), "bf16", ptr=BASE + (lo * D + D2) * 2, strides=st)
    c = Tensor((T, 1, D2), "bf16", ptr=BASE + (1 << 32), strides=(D, D, 1))
    s = Tensor((T, 1, D2), "bf16", ptr=BASE + (2 << 32), strides=(D, D, 1))
    o1 = Tensor((T, n, D2), "bf16", ptr=BASE + (3 << 32), strides=(n * D, D, 1))
    o2 = Tensor((T, n, D2), "bf16", ptr=BASE + (3 << 32) + D2 * 2, strides=(n * D, D, 1))
    return (x1, x2, c, s), (o1, o2)


def _maps_of(fake, ptr):
    return [e for e in fake.encoded if e[0] == ptr]


@pytest.mark.parametrize("which", [0, 1, 2], ids=["q", "k", "q and k"])
def test_strided_views_reach_the_tensor_maps_as_is(built, fakes, which):
    """Every operand is reached through tensor maps only, so the views of the fused projection (row stride
    (H + 2G) * 128), the tables' [T, 1, 64] views of [T, 128] and out= halves of one [T, n, 128] array are taken
    as they are: one launch, no copy, each map over the view's own strides. q's 32 heads and k's 8 are adjacent
    in the projection: one call rotates both (n = 40 heads)."""
    fake, _ = fakes
    b, root = built
    from schedgen.runtime.kernel import load_package
    kernel = load_package(root)
    assert kernel.tmap_only == (True,) * 6
    T, H, G = 40, 32, 8
    ins, outs = _views(T, H, G, which)
    n = (H, G, H + G)[which]
    assert kernel.check_args(ins, outs) == {"T": T, "H": n}
    assert kernel(*ins, out=outs) == outs
    assert len(fake.launches) == 1 and fake.buffers == []
    row = (H + 2 * G) * D * 2
    for x in ins[:2]:
        (m,) = _maps_of(fake, x.ptr)
        assert m[2] == (T, n, D2) and m[3] == (row, D * 2, 2)
    for t in ins[2:]:
        (m,) = _maps_of(fake, t.ptr)
        assert m[2] == (T, D2) and m[3] == (D * 2, 2)
    for o in outs:
        (m,) = _maps_of(fake, o.ptr)
        assert m[2] == (T, n, D2) and m[3] == (n * D * 2, D * 2, 2)


def test_views_tma_cannot_address_are_refused_located(built, fakes):
    """A view with the halves interleaved (inner stride 2) and outputs overlapping each other's... own elements:
    located ArgumentErrors, nothing launched."""
    from schedgen.runtime.arrays import ArgumentError
    from schedgen.runtime.kernel import load_package
    fake, _ = fakes
    kernel = load_package(built[1])
    T, H, G = 16, 32, 8
    (x1, x2, c, s), outs = _views(T, H, G, 0)
    odd = Tensor((T, H, D2), "bf16", ptr=BASE, strides=((H + 2 * G) * D, D, 2))
    with pytest.raises(ArgumentError, match=r"^x1: its innermost dimension has stride 2, not 1"):
        kernel(odd, x2, c, s, out=outs)
    same = Tensor((T, H, D2), "bf16", ptr=BASE + (3 << 32), strides=(D2, 0, 1))
    with pytest.raises(ArgumentError, match=r"^out\[o1\]: dimension 1 has stride 0"):
        kernel(x1, x2, c, s, out=(same, outs[1]))
    assert fake.launches == []


def test_calls_outside_the_package_are_refused_located(built, fakes):
    """The package's argument checks: a head count that is no multiple of 8, more heads or tokens than the range,
    tables of another token count or not broadcast over the heads; each a located ArgumentError naming the argument
    and what is legal, nothing launched."""
    from schedgen.runtime.arrays import ArgumentError
    from schedgen.runtime.kernel import load_package
    fake, _ = fakes
    kernel = load_package(built[1])

    def args(T=16, n=32, tT=None, th=1):
        x1 = Tensor((T, n, D2), "bf16", ptr=BASE)
        x2 = Tensor((T, n, D2), "bf16", ptr=BASE + (1 << 32))
        c = Tensor((tT or T, th, D2), "bf16", ptr=BASE + (2 << 32))
        s = Tensor((tT or T, th, D2), "bf16", ptr=BASE + (3 << 32))
        return x1, x2, c, s

    assert kernel.check_args(args(), None) == {"T": 16, "H": 32}
    for bad, match in ((args(n=12), r"^x1: dimension 1 \(H\) is 12; H must be a multiple of 8 \(in 8\.\.256\)"),
                       (args(n=264), r"^x1: dimension 1 \(H\) is 264; H must be in 8\.\.256"),
                       (args(T=65537), r"^x1: dimension 0 \(T\) is 65537; T must be in 1\.\.65536"),
                       (args(tT=15), r"^c: dimension 0 \(T\) is 15, but x1 dimension 0 gave T = 16"),
                       (args(th=32), r"^c: expected shape \(T, 1, 64\), got \(16, 32, 64\)")):
        with pytest.raises(ArgumentError, match=match):
            kernel(*bad)
    assert fake.launches == []
