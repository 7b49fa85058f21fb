"""Specs with a backward section, built and imported as packages, differentiated by jax.grad through the Pallas
interpreter (the families' real hooks: the map body's and the rowwise body's derived kernels), against float64
gradients of the spec's own reference by finite differences."""
from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest
import yaml

from backward_util import bundled, finite_differences, spec_with

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))


def _f32(data):
    for part in ("inputs", "outputs"):
        data["op"][part] = {k: dict(v, dtype="f32") for k, v in data["op"][part].items()}
    return data


def _imported(tmp_path, data, backward):
    from schedgen.build import build_spec, package
    data = dict(data, backward=backward)
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    package(build_spec(str(path)), tmp_path / "pkgs")
    sys.path.insert(0, str(tmp_path / "pkgs"))
    try:
        return getattr(importlib.import_module(data["name"]), data["name"])
    finally:
        sys.path.remove(str(tmp_path / "pkgs"))
        sys.modules.pop(data["name"], None)


CASES = {
    "gelu_bias_saved_h": (lambda: _f32(dict(bundled("gelu_bias_bf16.yaml"), name="e2e_gelu_bias")),
                          {"M": 32, "N": 256}, {"save": ["h"]}),
    "layernorm": (lambda: _f32(dict(bundled("layernorm_bf16.yaml"), name="e2e_layernorm")), {"M": 4, "N": 256},
                  {}),
}


@pytest.mark.parametrize("case", CASES)
def test_jax_grad_through_the_package_matches_finite_differences(tmp_path, case):
    make, sizes, backward = CASES[case]
    data = make()
    data["op"]["sizes"] = sizes if case != "layernorm" else {"M": {"dynamic": True, "max": 64}, "N": sizes["N"]}
    data["schedule"] = {k: v for k, v in data.get("schedule", {}).items() if k == "grid_names"} or {}
    if case != "layernorm":
        data["schedule"] = bundled("gelu_bias_bf16.yaml")["schedule"]
        data["schedule"].pop("compiler_params")
        data["schedule"]["pipeline"]["max_concurrent_steps"] = 2     # f32 operands: 3 stages do not fit in SMEM
    fn = _imported(tmp_path, data, backward)
    spec, _ = spec_with(tmp_path, data, None)
    rng = np.random.default_rng(7)
    from schedgen.reference import shape_of
    inputs = {n: rng.standard_normal(shape_of(o, sizes)) for n, o in spec.op.inputs.items()}
    out = next(iter(spec.op.outputs))
    up = {out: rng.standard_normal(shape_of(spec.op.outputs[out], sizes))}
    names = list(spec.op.inputs)

    def loss(*args):
        y = fn(*args, interpret=True)
        return jnp.sum(y * up[out].astype(np.float32))

    got = jax.grad(loss, argnums=tuple(range(len(names))))(*[inputs[n].astype(np.float32) for n in names])
    small = {n: v for n, v in inputs.items()}
    want = finite_differences(spec, sizes, small, up, names)
    for n, gv in zip(names, got):
        np.testing.assert_allclose(np.asarray(gv), want[n], rtol=2e-4, atol=2e-4 * np.abs(want[n]).max(), err_msg=n)


def test_jax_jit_of_grad(tmp_path):
    data = _f32(dict(bundled("softmax_bf16.yaml"), name="e2e_softmax"))
    data["op"]["sizes"] = {"M": {"dynamic": True, "max": 64}, "N": 256}
    data.pop("schedule", None)
    fn = _imported(tmp_path, data, {})
    x = np.random.default_rng(1).standard_normal((8, 256)).astype(np.float32)
    w = np.random.default_rng(2).standard_normal((8, 256)).astype(np.float32)
    g = jax.jit(jax.grad(lambda x: jnp.sum(fn(x, interpret=True) * w)))(x)
    ref = jax.grad(lambda x: jnp.sum(jax.nn.softmax(x, axis=-1) * w))(x)
    np.testing.assert_allclose(np.asarray(g), np.asarray(ref), rtol=1e-4, atol=1e-6)


def test_attention_package_jax_grad_matches_jax_autodiff(tmp_path):
    """A causal attention spec with `backward: {}`: the forward writes its log-sum-exp, the attention_backward
    family's Pallas kernels give dq, dk, dv (jax.grad through the interpreter) against jax's autodiff of softmax
    attention in f32."""
    data = {"name": "e2e_attn", "op": {
        "kind": "attention", "sizes": {"B": 1, "S": 128, "H": 2, "D": 64}, "causal": True,
        "inputs": {n: {"shape": ["B", "S", "H", "D"], "dtype": "f16"} for n in ("q", "k", "v")},
        "outputs": {"o": {"shape": ["B", "S", "H", "D"], "dtype": "f16"}}},
        "schedule": {"compiler_params": {"approx_math": False}}}
    fn = _imported(tmp_path, data, {})
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 128, 2, 64)).astype(np.float16) for _ in range(3))
    w = rng.standard_normal((1, 128, 2, 64)).astype(np.float32)

    def loss(q, k, v):
        return jnp.sum(fn(q, k, v, interpret=True).astype(jnp.float32) * w)

    def ref(q, k, v):
        s = jnp.einsum("bqhd,bkhd->bhqk", q.astype(jnp.float32), k.astype(jnp.float32)) / 8.0
        p = jax.nn.softmax(jnp.where(jnp.tril(jnp.ones((128, 128), bool)), s, -jnp.inf), axis=-1)
        return jnp.sum(jnp.einsum("bhqk,bkhd->bqhd", p, v.astype(jnp.float32)) * w)

    got = jax.grad(loss, argnums=(0, 1, 2))(q, k, v)
    want = jax.grad(ref, argnums=(0, 1, 2))(q, k, v)
    for name, a, b in zip("qkv", got, want):
        err = float(jnp.max(jnp.abs(a.astype(jnp.float32) - b)) / jnp.max(jnp.abs(b)))
        assert err < 5e-3, (name, err)      # f16 inputs and gradients
