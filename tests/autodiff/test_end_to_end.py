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
