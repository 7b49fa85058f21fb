"""The generated Pallas Mosaic GPU kernels, on the CPU: run in the Mosaic GPU interpreter (race detection on)
at small sizes against the numpy reference, and lowered for CUDA without a GPU."""
from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import spec_files
from schedgen.build import build_spec, package
from schedgen.plan import dims
from schedgen.runtime.kernel import load_package
from schedgen.verify import small_overrides, verify_file

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))


@pytest.mark.parametrize("path", spec_files("map"), ids=lambda p: p.stem)
def test_pallas_interpret_matches_reference_without_races(path):
    checks = verify_file(str(path), ["pallas"], interpret=True, small=True, seed=0)
    assert checks, "no pallas check ran"
    for c in checks:
        assert c.backend == "pallas"
        assert c.rel_error <= c.tolerance, c
        assert c.ok, c
        # a spec with a backward section (rope_bf16_dynamic) adds its gradients' rows
        assert c.note in ("interpreted, no races", "backward; interpreted, no races"), c.note
        # small sizes really were used: at most 2 tiles per named dimension
        assert all(v <= 2 * 256 for v in c.shape.values()), c.shape


def test_small_overrides_gives_two_tiles_per_dim():
    b = build_spec(str(spec_files()[0]))
    assert b.plan.launch.name == "add_bf16"
    assert small_overrides(b) == {"M": 64, "N": 512}
    assert small_overrides(b, tiles_per_dim=1) == {"M": 32, "N": 256}


def test_interpreter_catches_a_wrong_result(tmp_path):
    """verify is not vacuous: a body that differs from its reference fails (here: the reference of the original
    spec against a kernel computing x - y)."""
    from schedgen.reference import random_inputs, reference, rel_error, tolerance
    from schedgen.verify import run_pallas
    text = spec_files()[0].read_text().replace("body: o = x + y", "body: o = x - y")
    bad = tmp_path / "add_bf16.yaml"
    bad.write_text(text)
    good = build_spec(str(spec_files()[0]), {"M": 64, "N": 512})
    wrong = build_spec(str(bad), {"M": 64, "N": 512})
    kernel = load_package(package(wrong, tmp_path / "pkg"))
    inputs = random_inputs(good.spec, good.plan.sizes, seed=3)
    (out,), note = run_pallas(kernel, wrong.plan, inputs, interpret=True)
    err = rel_error(out, reference(good.spec, good.plan.sizes, inputs)["o"])
    assert err > tolerance("bf16", False)
    assert note == "interpreted, no races"


# ------------------------------------------------------------------------------------ lowering for CUDA on CPU

@pytest.mark.parametrize("path", spec_files("map"), ids=lambda p: p.stem)
def test_pallas_make_lowers_for_cuda(path, tmp_path):
    b = build_spec(str(path))
    mod = load_package(package(b, tmp_path)).pallas_module()
    # a dynamic size at a third of its max (rounded to its step): one call's values
    sizes = {r.name: max(r.min, r.max // 3 // r.multiple_of * r.multiple_of) for r in b.plan.launch.dynamic_sizes}
    shape = {o.name: tuple(dims.evaluate(x, sizes) for x in o.shape) for o in b.plan.operands}
    args = [jax.ShapeDtypeStruct(shape[o.name], mod._DTYPES[o.dtype]) for o in b.plan.inputs]
    assert mod.sizes_of(args) == sizes
    lowered = jax.jit(mod.make(sizes)).trace(*args).lower(lowering_platforms=("cuda",))
    text = lowered.as_text()
    calls = re.findall(r"stablehlo\.custom_call @(\w+)\(([^)]*)\)", text)
    assert [c[0] for c in calls] == ["mosaic_gpu_v2"], calls
    assert len(calls[0][1].split(",")) == len(b.plan.inputs)       # one operand per kernel input
    assert "kernel_hash" in text
    assert b.plan.launch.kernel_name in text                                # the serialized Mosaic module names the kernel
    out = b.plan.outputs[0]
    dt = {"bf16": "bf16", "f32": "f32", "f16": "f16"}[out.dtype]
    assert re.search(r"->\s*\(?tensor<{}x{}>".format("x".join(map(str, shape[out.name])), dt), text), "result type"


def test_pallas_function_runs_in_interpret_mode(tmp_path):
    """The generated module's public function (not just run_into) works and matches numpy."""
    from schedgen.verify import interpret_params
    b = build_spec(str(next(p for p in spec_files() if p.stem == "scale_f32")), {"B": 2, "M": 64, "N": 256})
    assert b.plan.launch.name == "scale_f32"
    mod = load_package(package(b, tmp_path)).pallas_module()
    x = np.random.default_rng(0).standard_normal((2, 64, 256)).astype(np.float32)
    out = np.asarray(mod.scale_f32(jnp.asarray(x), interpret=interpret_params()))
    np.testing.assert_allclose(out, x * 2.5, rtol=1e-6)
