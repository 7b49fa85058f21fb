"""A bucketed package with a backward pass (issue 21): one backward (backward.json, backward/<step>/) at the
package's root for every variant, each variant built from the family's rewritten forward (it writes the saved
value the backward reads), wired into jax.grad (each variant's jax.custom_vjp) and torch autograd (the package's one
op), on the CPU: jax.grad through the Pallas interpreter, and torch autograd with the CUDA calls of the variants and
of the backward step run by the Pallas interpreter instead, at sizes of two buckets against float64 gradients. A GPU
test at the end runs the same on the hardware.

The package: y = (x * w)^2 (f32, M dynamic in 16..512, multiples of 16, N = 128), `backward: {save: [h]}` with
h = x * w; buckets M <= 32 (16-row blocks), <= 128 and <= 512 (32-row blocks): two variants, table [0, 1, 1]."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import import_package as _import

from schedgen.bucketed import build_bucketed, describe, package_bucketed
from schedgen.cache import Cache
from schedgen.errors import SpecErrors
from schedgen.tune import buckets as B

SPEC = """name: sq_dyn
op:
  kind: map
  sizes:
    M: {dynamic: true, max: 512, multiple_of: 16}
    N: 128
  inputs:
    x: {shape: [M, N], dtype: f32}
    w: {shape: [M, N], dtype: f32}
  outputs:
    y: {shape: [M, N], dtype: f32}
  body: |
    h = x * w
    y = h * h
schedule:
  in_specs:
    x: {block_shape: [16, 128], out_of_bounds: zero}
    w: {block_shape: [16, 128], out_of_bounds: zero}
  out_specs:
    y: {block_shape: [16, 128], out_of_bounds: zero}
  pipeline: {kind: emit_pipeline, max_concurrent_steps: 2}
tune:
  buckets:
    M: [32, 128, 512]
backward: {save: [h]}
"""
N = 128


def row(block_m: int, at: int, edge: str = "zero") -> dict:
    """A database row as best_known gives it: the tuned shape and the schedule fields."""
    fields = {f"schedule.{side}.{n}.{f}": v for side, n in (("in_specs", "x"), ("in_specs", "w"), ("out_specs", "y"))
              for f, v in (("block_shape", [block_m, N]), ("out_of_bounds", edge))}
    return {"overrides": {"M": at, **fields}, "knobs": {"block_M": block_m}, "time_ms": 0.01, "gpu": "Fake H200",
            "gbps": 1.0}


CHOICES = [({"M": 32}, row(16, 32)), ({"M": 128}, row(32, 128)), ({"M": 512}, row(32, 512))]




def _spec(tmp):
    spec = tmp / "sq_dyn.yaml"
    spec.write_text(SPEC)
    return spec


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bucketed_bw")
    spec = _spec(tmp)
    bk, _ = B.load(spec)
    bb = build_bucketed(spec, {}, bk, CHOICES, cache=Cache(tmp / "cache"))
    return bb, package_bucketed(bb, tmp / "out")


@pytest.fixture(scope="module")
def pkg(built):
    bb, root = built
    return _import(root.parent, "sq_dyn")


def inputs(m: int, seed: int):
    rng = np.random.default_rng(seed)
    x, w, gy = (rng.standard_normal((m, N)) for _ in range(3))
    return x, w, gy


def want_grads(x, w, gy):
    """float64: y = h^2 with h = x w, so dx = 2 h w gy and dw = 2 h x gy."""
    h = x * w
    return 2 * h * w * gy, 2 * h * x * gy


def close(got, want, what):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-4, atol=1e-4 * np.abs(want).max(),
                               err_msg=what)


# ------------------------------------------------------------------------------------------------ the build


def test_the_package_carries_one_backward_and_variants_write_the_saved_value(built):
    bb, root = built
    assert bb.record.table == (0, 1, 1) and len(bb.variants) == 2
    assert bb.backward is not None and bb.backward.graph.saved == ("h",) and list(bb.backward.steps) == ["grad"]
    rec = json.loads((root / "backward.json").read_text())
    assert rec["user_outputs"] == ["y"] and rec["saved_outputs"] == ["h"]
    assert (root / "backward" / "grad" / "launch.json").is_file()
    for v, block in (("v0", 16), ("v1", 32)):
        launch = json.loads((root / "variants" / v / "launch.json").read_text())
        assert [o["name"] for o in launch["outputs"]] == ["y", "h"]          # the rewritten forward
        assert json.loads((root / "variants" / v / "plan.json").read_text())["block"][0] == block
        assert not (root / "variants" / v / "backward.json").exists()       # the one backward is the root's
    assert "backward (one for every variant): gradients of x, w; 1 kernel in backward/: grad" in describe(bb)
    assert "kernel.call_user(x, w," in (root / "__init__.py").read_text()


def test_a_winner_whose_forward_saves_something_else_takes_the_spec_s_schedule(tmp_path, monkeypatch):
    """A variant must write what the package's one backward reads: a winner built into another graph (here its
    forward saves nothing) falls back to the spec's own schedule, and the note says why."""
    from schedgen import bucketed
    spec = _spec(tmp_path)
    bk, _ = B.load(spec)
    real = bucketed.build_spec

    def other_graph(path, overrides, cache=None):
        b = real(path, overrides, cache=cache)
        if overrides.get("schedule.in_specs.x.block_shape") == [32, N]:
            from dataclasses import replace
            b = replace(b, backward=replace(b.backward, graph=replace(b.backward.graph, saved=())))
        return b
    monkeypatch.setattr(bucketed, "build_spec", other_graph)
    bb = build_bucketed(spec, {}, bk, CHOICES, cache=Cache(tmp_path / "c"))
    # the spec's own schedule (16-row blocks) is the M <= 32 winner's plan: one variant for every bucket
    assert bb.record.table == (0, 0, 0) and [b["schedule"] for b in bb.record.buckets] == ["tuned", "spec", "spec"]
    assert ("M 48..128: the winner at M=128 writes other saved outputs than the backward pass reads (saves nothing "
            "against saves h): the spec's own schedule") in bb.notes[1]


def test_a_winner_the_rewritten_forward_cannot_plan_is_located_and_falls_back(tmp_path):
    """out_of_bounds: reject with 32-row blocks cannot serve M = 48: the winner falls back (located in the note)."""
    spec = _spec(tmp_path)
    bk, _ = B.load(spec)
    choices = [CHOICES[0], ({"M": 128}, row(32, 128, "reject")), CHOICES[2]]
    bb = build_bucketed(spec, {}, bk, choices, cache=Cache(tmp_path / "c"))
    assert [b["schedule"] for b in bb.record.buckets] == ["tuned", "spec", "tuned"]
    assert "M 48..128: the winner at M=128 does not plan over the whole dynamic range (schedule." in bb.notes[1]
    assert bb.backward is not None


def test_build_tuned_of_a_spec_with_a_backward_is_no_longer_refused(tmp_path):
    spec = _spec(tmp_path)
    bk, _ = B.load(spec)
    try:
        bb = build_bucketed(spec, {}, bk, [(c, None) for c in bk.cells()], cache=Cache(tmp_path / "c"))
    except SpecErrors as exc:        # the refusal this replaces was located at tune.buckets
        pytest.fail(exc.render())
    assert len(bb.variants) == 1 and bb.backward is not None


def test_explain_and_verify_tuned_of_the_bucketed_training_package(tmp_path, capsys, monkeypatch):
    """explain --tuned shows the one backward after the variants; verify --tuned checks each variant's saved h as
    well as y at both edges of its buckets, and the package's backward there (a row per gradient: issue 43) (the
    database's winners replaced by CHOICES)."""
    from schedgen import cli
    monkeypatch.setattr(B, "winners", lambda *a, **k: CHOICES)
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    spec = _spec(tmp_path)
    assert cli.main(["explain", str(spec), "--tuned"]) == 0
    out = capsys.readouterr().out
    assert out.index("=== v0 (serves M 16..32) ===") < out.index("=== v1 (serves M 48..128; M 144..512) ===") < \
        out.index("backward pass (torch autograd, jax.grad):")
    assert "backward (one for every variant): gradients of x, w" in out
    assert cli.main(["verify", str(spec), "--tuned", "--interpret", "--timeout", "0"]) == 0
    rows = [ln.split() for ln in capsys.readouterr().out.splitlines() if ln.startswith("sq_dyn/")]
    assert {(r[0], r[2], r[4]) for r in rows} == {(f"sq_dyn/v{v}", o, f"N=128,M={m}") for o in ("y", "h", "grad:x", "grad:w")
                                                  for v, m in ((0, 16), (0, 32), (1, 48), (1, 128), (1, 144), (1, 512))}
    assert all(r[7] == "ok" for r in rows)


# ------------------------------------------------------------------------------------------------ jax.grad


@pytest.mark.parametrize("m, variant", [(32, "v0"), (144, "v1")])
def test_jax_grad_through_the_bucketed_package_matches_float64(pkg, monkeypatch, m, variant):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    k = pkg.kernel
    picked = []
    real = k.pick

    def spy(args):
        v = real(args)
        picked.append(v.root.name)
        return v
    monkeypatch.setattr(k, "pick", spy)
    x, w, gy = inputs(m, seed=m)
    y = pkg.sq_dyn(x.astype(np.float32), w.astype(np.float32), interpret=True)
    assert isinstance(y, np.ndarray) and y.shape == (m, N)          # y only: the saved h is dropped
    close(y, (x * w) ** 2, "y")

    def loss(a, b):
        return jnp.sum(pkg.sq_dyn(a, b, interpret=True) * gy.astype(np.float32))
    gx, gw = jax.grad(loss, argnums=(0, 1))(jnp.asarray(x, jnp.float32), jnp.asarray(w, jnp.float32))
    want_x, want_w = want_grads(x, w, gy)
    close(gx, want_x, "dx")
    close(gw, want_w, "dw")
    assert set(picked) == {variant}


# ------------------------------------------------------------------------------------------------ torch autograd


@pytest.fixture
def interpreted(pkg, monkeypatch):
    """The CUDA calls of the variants and of the backward step run by the Pallas interpreter on the CPU tensors'
    numpy copies (no GPU here); records which kernel ran at which M."""
    torch = pytest.importorskip("torch")
    seen = []
    k = pkg.kernel
    for kern in (*k.variants, *k.backward.steps.values()):
        def fake(args, out, stream, kern=kern):
            seen.append((kern.root.name, int(args[0].shape[0])))
            res = kern(*[a.detach().cpu().numpy() for a in args], backend="pallas", interpret=True)
            res = res if isinstance(res, tuple) else (res,)
            got = tuple(torch.from_numpy(np.array(r)) for r in res)
            return got[0] if len(got) == 1 else got
        monkeypatch.setattr(kern, "_call_cuda", fake)
    return torch, seen


@pytest.mark.parametrize("m, variant", [(16, "v0"), (512, "v1")])
def test_torch_autograd_through_the_bucketed_package_matches_float64(pkg, interpreted, m, variant):
    torch, seen = interpreted
    assert pkg.kernel.torch_op is not None and getattr(pkg.kernel.torch_op, "backward_registered", False)
    x, w, gy = inputs(m, seed=100 + m)
    xt = torch.tensor(x, dtype=torch.float32, requires_grad=True)
    wt = torch.tensor(w, dtype=torch.float32, requires_grad=True)
    y = pkg.sq_dyn(xt, wt)
    assert isinstance(y, torch.Tensor) and y.shape == (m, N) and y.requires_grad
    (y * torch.tensor(gy, dtype=torch.float32)).sum().backward()
    want_x, want_w = want_grads(x, w, gy)
    close(xt.grad.numpy(), want_x, "dx")
    close(wt.grad.numpy(), want_w, "dw")
    assert seen == [(variant, m), ("grad", m)]


def test_torch_without_grad_runs_the_variant_only(pkg, interpreted):
    torch, seen = interpreted
    x, w, _ = inputs(48, seed=5)
    with torch.no_grad():
        y = pkg.sq_dyn(torch.tensor(x, dtype=torch.float32, requires_grad=True), torch.tensor(w, dtype=torch.float32))
    close(y.numpy(), (x * w) ** 2, "y")
    assert seen == [("v1", 48)]


# ------------------------------------------------------------------------------------------------ GPU


@pytest.mark.gpu
def test_bucketed_backward_on_gpu(built):
    """The same package on the GPU: torch autograd (CUDA variants and the CUDA backward step) and jax.grad (the
    Pallas kernels) at a size of each variant's bucket, against float64 gradients."""
    torch = pytest.importorskip("torch")
    import jax
    import jax.numpy as jnp
    bb, root = built
    mod = _import(root.parent, "sq_dyn")
    for m in (16, 32, 48, 512):
        x, w, gy = inputs(m, seed=m)
        want_x, want_w = want_grads(x, w, gy)
        xt = torch.tensor(x, dtype=torch.float32, device="cuda", requires_grad=True)
        wt = torch.tensor(w, dtype=torch.float32, device="cuda", requires_grad=True)
        (mod.sq_dyn(xt, wt) * torch.tensor(gy, dtype=torch.float32, device="cuda")).sum().backward()
        close(xt.grad.cpu().numpy(), want_x, f"torch dx M={m}")
        close(wt.grad.cpu().numpy(), want_w, f"torch dw M={m}")
        gx, gw = jax.grad(lambda a, b, gy=gy: jnp.sum(mod.sq_dyn(a, b) * gy.astype(np.float32)), argnums=(0, 1))(
            jnp.asarray(x, jnp.float32), jnp.asarray(w, jnp.float32))
        close(gx, want_x, f"jax dx M={m}")
        close(gw, want_w, f"jax dw M={m}")
