"""examples/llama/jax_model.py on the CPU (issue 43): the Llama decoder's packages built with their Pallas backend,
differentiated through jax's Mosaic GPU interpreter (each package a custom_vjp whose backward runs the spec's
derived Pallas kernels), against jax.grad of the XLA reference. `jax.jit(jax.grad(loss))` is traced and lowered
whole here; its gradients are checked executed under jax.grad (each kernel its own jit), since executing the one
jitted program in the interpreter deadlocked at random on the 2-core host (see the slow test's docstring).

Tolerance: the Pallas model and the XLA reference round to bf16 at the same points in the forward, but the backward
kernels round their gradients to bf16 at other points than XLA's autodiff of the reference does, so neither is
the exact gradient. Both are compared with the float32 reference (the same weights upcast, every op in f32): the
Pallas model's error on each parameter's gradient (max |g - g32| / max |g32|) must stay within 2x the bf16 XLA
reference's own error plus 0.02 (bf16's ulp is 2^-8 = 0.004 relative; a wrong kernel or a dropped gradient term
is off by O(1))."""
from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from examples.llama import jax_model as jm      # noqa: E402
from examples.llama import specs                # noqa: E402
from examples.llama.config import get          # noqa: E402

B, S = 1, 128          # S: a multiple of 128 (jax_model.SEQ_MULTIPLE); the interpreter is slow: one sequence


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """tiny at one layer (the interpreter is slow), built with a private schedgen cache."""
    cfg = get("tiny", n_layers=1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))
        kernels, refused = jm.build_kernels(cfg, tmp_path_factory.mktemp("llama_jax"), log=lambda *a: None)
    return cfg, kernels, refused


def test_every_step_but_the_embedding_runs_on_pallas_at_tiny(built):
    cfg, kernels, refused = built
    assert refused == {}
    where = dict(jm.routes(kernels))
    assert where.pop("embedding").startswith("XLA")
    assert all(w.startswith("Pallas: ") for w in where.values()), where
    for name in jm.ROUTES.values():
        if name is not None:                  # the package module's Kernel: its launch.json's backends
            assert "pallas" in sys.modules[name].kernel.launch.backends, name


def test_cross_entropy_pallas_form_refused_at_large_vocab_and_said_why():
    """At 1.5b (vocab 49152) the rowwise family refuses the cross-entropy's Pallas form (a block of whole vocab
    rows does not fit in SMEM): the validator's located message, which build_kernels keeps as the XLA stand-in's
    reason; every other spec of every named config builds its Pallas form."""
    from schedgen.errors import SpecErrors
    from schedgen.frontend.validate import load_spec
    from schedgen.plan import plan
    import tempfile
    for name in ("tiny", "1.5b", "8b-layer"):
        cfg = get(name)
        with tempfile.TemporaryDirectory() as d:
            for kernel, path in specs.write_specs(cfg, Path(d), pallas=True).items():
                try:
                    plan(*load_spec(str(path)))
                    ok = True
                except SpecErrors as exc:
                    ok, why = False, exc.render()
                if kernel == "llama_cross_entropy" and name != "tiny":
                    assert not ok and "TMA" in why, (name, kernel)
                else:
                    assert ok, (name, kernel, why if not ok else "")


def test_the_default_specs_are_unchanged_by_the_pallas_option():
    for cfg in (get("tiny"), get("1.5b")):
        plain, pallas = specs.spec_texts(cfg), specs.spec_texts(cfg, pallas=True)
        assert all("pallas" not in t for t in plain.values())
        assert all("backends: [cuda]" not in t for t in pallas.values())     # both, or the family's default


def _check_gradients(cfg, params, tokens, targets, ours_loss, g):
    ref = functools.partial(jm.loss_ref, cfg=cfg, attention_impl="xla")
    g16 = jax.grad(ref)(params, tokens, targets)
    p32 = {k: v.astype(jnp.float32) for k, v in params.items()}
    l32, g32 = jax.value_and_grad(ref)(p32, tokens, targets)
    assert abs(float(ours_loss) - float(l32)) < 2e-2 * abs(float(l32))
    assert set(g) == set(cfg.param_shapes())
    for n in g:
        assert g[n].shape == params[n].shape and g[n].dtype == params[n].dtype, n
        ours, base = jm._rel_err(g[n], g32[n]), jm._rel_err(g16[n], g32[n])
        assert ours <= 2 * base + 0.02, (n, ours, base)


def test_grad_through_the_pallas_interpreter_matches_the_xla_reference(built):
    """jax.grad of the whole loss (each package call its own jitted kernel, forward and custom_vjp backward) in the
    Mosaic GPU interpreter, every parameter's gradient against the float32 XLA reference."""
    cfg, kernels, _ = built
    params = jm.init_params(cfg)
    tokens, targets = jm.data(cfg, B, S)
    ours_loss, g = jax.value_and_grad(functools.partial(jm.loss, kernels=kernels, interpret=True))(
        params, tokens, targets)
    _check_gradients(cfg, params, tokens, targets, ours_loss, g)


def test_jit_of_grad_traces_and_lowers_through_every_kernel(built):
    """jax.jit(jax.grad(loss)) traces the whole model (every package a custom_vjp on tracers) and lowers it to one
    XLA program holding the forward and backward Pallas kernels (run on the GPU by jax_model.time_train_step)."""
    cfg, kernels, _ = built
    params = jm.init_params(cfg)
    tokens, targets = jm.data(cfg, B, S)
    lowered = jax.jit(jax.grad(functools.partial(jm.loss, kernels=kernels, interpret=True))).lower(
        params, tokens, targets)
    out = lowered.out_info
    assert {n: o.shape for n, o in out.items()} == cfg.param_shapes()


@pytest.mark.slow
def test_jit_grad_through_the_pallas_interpreter_matches_the_xla_reference(built):
    """Executing jax.jit(jax.grad(loss)) in the interpreter: on the 2-core CPU host this was written on it
    deadlocked (jax 0.11.2's Mosaic GPU interpreter: the simulated threads of one kernel wait at its barriers
    (shared_memory._wait) while the others wait to run their nested jitted steps (pxla.__call__), within the one
    XLA program), at random, in the forward too; each kernel alone under jit(grad) runs, and so does the whole
    model under eager jax.grad (the test above). Marked slow (--slow): run it on a host with more cores, under
    pytest-timeout."""
    cfg, kernels, _ = built
    params = jm.init_params(cfg)
    tokens, targets = jm.data(cfg, B, S)
    f = functools.partial(jm.loss, kernels=kernels, interpret=True)
    g = jax.jit(jax.grad(f))(params, tokens, targets)
    _check_gradients(cfg, params, tokens, targets, f(params, tokens, targets), g)
