"""The rowwise family's backward: derived bodies with reductions (softmax, layernorm, rmsnorm, row sums) match
finite differences of the forward's float64 reference; the step specs plan and render on both backends."""
from __future__ import annotations

import numpy as np
import pytest

from backward_util import (bundled, finite_differences, graph_gradients, random_case, spec_with, step_spec,
                           validated)
from schedgen import families
from schedgen.errors import SourceMap, SpecErrors
from schedgen.plan import plan
from schedgen.render import render

SMALL = {"M": 2, "N": 256}   # N as the spec's: the step's mean derivative holds 1/N as a constant (N is fixed)


def _bundled(name: str, n: int = 256, **op):
    data = bundled(name)
    data["op"]["sizes"] = {"M": 64, "N": n}
    data["op"].update(op)
    data.pop("schedule", None)
    return data


CASES = {
    "softmax": (_bundled("softmax_bf16.yaml"), {}),
    "layernorm": (_bundled("layernorm_bf16.yaml"), {}),
    "rmsnorm": (_bundled("rmsnorm_bf16.yaml"), {}),
    "logsoftmax_min": (_bundled("softmax_bf16.yaml", body="y = x - logsumexp(x) + min(x) * 0.5"), {}),
    "layernorm_saved": (_bundled("layernorm_bf16.yaml"), {"save": ["var"]}),
}


@pytest.mark.parametrize("case", CASES)
def test_gradients_match_finite_differences(tmp_path, case):
    data, backward = CASES[case]
    spec, src = spec_with(tmp_path, data, backward)
    graph, problems = families.of(spec).backward(spec, src)
    assert not problems, problems
    sizes = SMALL
    inputs, upstream = random_case(spec, sizes, seed=3)
    got = graph_gradients(spec, graph, sizes, inputs, upstream)
    want = finite_differences(spec, sizes, inputs, upstream, graph.grads)
    for n in graph.grads:
        np.testing.assert_allclose(got[n], want[n], rtol=1e-5, atol=1e-6, err_msg=n)
    for data in [graph.steps[0].spec] + ([graph.forward] if graph.forward else []):
        p = plan(validated(data), SourceMap("<derived>"))
        for backend in p.launch.backends:
            assert render(p, backend)


def test_per_row_input_gradient_is_a_row_sum(tmp_path):
    data = {"name": "scaled", "op": {
        "kind": "rowwise", "sizes": {"M": 64, "N": 256},
        "inputs": {"x": {"shape": ["M", "N"], "dtype": "f32"}, "s": {"shape": ["M"], "dtype": "f32"},
                   "w": {"shape": ["N"], "dtype": "f32"}},
        "outputs": {"y": {"shape": ["M", "N"], "dtype": "f32"}, "r": {"shape": ["M"], "dtype": "f32"}},
        "body": "y = x * s * w - mean(x * s)\nr = sum(exp(y)) * s"}}
    spec, src = spec_with(tmp_path, data, {})
    graph, problems = families.of(spec).backward(spec, src)
    assert not problems
    assert "grad_s = sum(" in graph.steps[0].spec["op"]["body"]
    inputs, upstream = random_case(spec, SMALL, seed=4)
    got = graph_gradients(spec, graph, SMALL, inputs, upstream)
    want = finite_differences(spec, SMALL, inputs, upstream, ["x", "s", "w"])
    for n in ("x", "s", "w"):
        np.testing.assert_allclose(got[n], want[n], rtol=1e-5, atol=1e-6, err_msg=n)


def test_cross_entropy_backward_is_softmax_minus_onehot(tmp_path):
    """take(x, t)'s gradient: g at column t (the step reads the column indices, `arange:N`); t gets none."""
    data = _bundled("crossentropy_bf16.yaml")
    data["op"]["sizes"]["M"] = {"dynamic": True, "max": 64}
    spec, src = spec_with(tmp_path, data, {})
    graph, problems = families.of(spec).backward(spec, src)
    assert not problems and graph.grads == ("x",)
    step = graph.steps[0]
    assert step.inputs["col"] == "arange:256" and step.spec["op"]["inputs"]["col"] == {"shape": ["N"], "dtype": "f32"}
    rng = np.random.default_rng(5)
    inputs = {"x": rng.standard_normal((2, 256)), "t": np.array([7.0, 255.0])}
    upstream = {"loss": rng.standard_normal(2)}
    got = graph_gradients(spec, graph, SMALL, inputs, upstream)
    want = finite_differences(spec, SMALL, inputs, upstream, ["x"])
    np.testing.assert_allclose(got["x"], want["x"], rtol=1e-5, atol=1e-7)
    # softmax(x) - onehot(t), scaled by the upstream gradient of each row's loss
    soft = np.exp(inputs["x"] - inputs["x"].max(-1, keepdims=True))
    soft /= soft.sum(-1, keepdims=True)
    soft[[0, 1], [7, 255]] -= 1.0
    np.testing.assert_allclose(got["x"], soft * upstream["loss"][:, None], rtol=1e-9, atol=1e-12)
    spec, src = spec_with(tmp_path, data, {"wrt": ["t"]})
    graph, problems = families.of(spec).backward(spec, src)
    assert "backward.wrt[0]" in str(SpecErrors(problems, src)) and "'t'" in str(SpecErrors(problems, src))


def test_step_is_a_rowwise_kernel_with_the_row_length_constant(tmp_path):
    spec, src = spec_with(tmp_path, _bundled("layernorm_bf16.yaml", n=4096), {})
    graph, _ = families.of(spec).backward(spec, src)
    step = step_spec(graph.steps[0])
    assert step.op.kind == "rowwise" and step.op.constants["inv_n"] == pytest.approx(1 / 4096)
    # M = 64 fixed: P = M // 2 = 32 rows of partial column sums (the kernel's blocks), summed after the step
    assert step.op.outputs["grad_w"].dtype == "f32" and step.op.outputs["grad_w"].shape == [32, "N"]
    assert graph.steps[0].outputs["grad_w"] == "grad:w"
    assert step.op.outputs["grad_x"].dtype == "bf16"


@pytest.fixture
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))


CASES["crossentropy"] = (dict(_bundled("crossentropy_bf16.yaml"), op=dict(_bundled("crossentropy_bf16.yaml")["op"],
                          sizes={"M": {"dynamic": True, "max": 64}, "N": 256})), {})


@pytest.mark.parametrize("case", ["softmax", "layernorm", "crossentropy"])
def test_derived_kernel_runs_on_both_backends(tmp_path, _private_cache, case):
    """The step kernel verifies in the Pallas interpreter against float64 at small sizes and compiles for sm_90a
    with no spills."""
    pytest.importorskip("jax")
    import yaml
    from schedgen.build import build_spec
    from schedgen.verify import verify_file
    data, backward = CASES[case]
    spec, src = spec_with(tmp_path, data, backward)
    graph, _ = families.of(spec).backward(spec, src)
    path = tmp_path / "step.yaml"
    path.write_text(yaml.safe_dump(graph.steps[0].spec, sort_keys=False))
    checks = verify_file(str(path), ["pallas"], interpret=True, small=True, seed=0)
    assert checks and all(c.ok and c.rel_error <= c.tolerance for c in checks), checks
    built = build_spec(str(path))
    assert built.files["kernel.cubin"] and not built.warnings, built.warnings
