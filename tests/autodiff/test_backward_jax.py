"""A package's backward under jax.grad (schedgen/runtime/pallas_call.py's custom_vjp, runtime/autograd.py), on
the CPU in Mosaic GPU interpret mode: the forward's Pallas kernel keeps its residuals, the backward runs each
step's Pallas kernel, the bias gradient is summed back to [N]; eager and jitted, against float64."""
from __future__ import annotations

import numpy as np
import pytest

import handgraph as hg
from handgraph import closed_form, host_inputs, import_package, upstream, hand_packages

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: E402

INTERPRET = plgpu.InterpretGPUParams()


@pytest.fixture(scope="module")
def hand(tmp_path_factory):
    return hand_packages(tmp_path_factory)


@pytest.fixture(scope="module")
def mods(hand):
    return {w: import_package(hand[w][1].parent, hand[w][0].name)
            for w in ("plain", "saving", "wrt_x")}


def call(mods, which):
    mod = mods[which]
    return getattr(mod, mod.kernel.name)


@pytest.mark.parametrize("jit", [False, True], ids=["grad", "jit(grad)"])
@pytest.mark.parametrize("which", ["plain", "saving"])
def test_jax_grad_matches_float64(mods, which, jit):
    f = call(mods, which)
    ins = host_inputs()
    gy = upstream()

    def loss(x, w, b):
        return jnp.sum(f(x, w, b, interpret=INTERPRET) * gy)

    grad = jax.grad(loss, argnums=(0, 1, 2))
    got = (jax.jit(grad) if jit else grad)(*(jnp.asarray(v) for v in ins.values()))
    want = closed_form(which, ins, gy)
    for g, n in zip(got, "xwb"):
        assert g.shape == ins[n].shape and g.dtype == jnp.float32
        np.testing.assert_allclose(np.asarray(g), want[n], rtol=1e-5, atol=1e-5 * np.abs(want[n]).max())
    fd = hg.finite_difference(which, ins, gy, "b", (7,))
    assert abs(fd - float(got[2][7])) <= 1e-3 * max(1.0, abs(fd))


def test_the_call_returns_the_users_outputs_only(mods):
    f = call(mods, "saving")
    ins = host_inputs()
    y = f(*ins.values(), interpret=INTERPRET)             # numpy in, numpy out: y only (h dropped)
    assert isinstance(y, np.ndarray) and y.shape == (hg.M, hg.N)
    np.testing.assert_allclose(y, hg.forward64("saving", ins), rtol=1e-5)
    yj = jax.jit(lambda x, w, b: f(x, w, b, interpret=INTERPRET))(*(jnp.asarray(v) for v in ins.values()))
    np.testing.assert_allclose(np.asarray(yj), y, rtol=1e-6)


def test_an_input_outside_wrt_gets_a_zero_cotangent(mods):
    f = call(mods, "wrt_x")
    ins = host_inputs()
    gx, gw = jax.grad(lambda x, w, b: jnp.sum(f(x, w, b, interpret=INTERPRET)), argnums=(0, 1))(
        *(jnp.asarray(v) for v in ins.values()))
    np.testing.assert_allclose(np.asarray(gx), ins["w"])
    assert not np.asarray(gw).any()


@pytest.mark.gpu
@pytest.mark.parametrize("which", ["plain", "saving"])
def test_gpu_jax_grad_compiled_for_the_gpu(mods, which):
    """jax.jit(jax.grad) with the Pallas kernels compiled for the GPU (no interpreter) against float64."""
    f = call(mods, which)
    ins = host_inputs()
    gy = upstream()
    got = jax.jit(jax.grad(lambda x, w, b: jnp.sum(f(x, w, b) * gy), argnums=(0, 1, 2)))(
        *(jnp.asarray(v) for v in ins.values()))
    want = closed_form(which, ins, gy)
    for g, n in zip(got, "xwb"):
        np.testing.assert_allclose(np.asarray(g), want[n], rtol=1e-4, atol=1e-4 * np.abs(want[n]).max())
