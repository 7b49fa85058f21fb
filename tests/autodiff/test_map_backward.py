"""The map family's backward: the derived step's float64 gradients match finite differences of the forward; the
step spec plans and renders on both backends; wrt / save are checked and located."""
from __future__ import annotations

import numpy as np
import pytest

from backward_util import (bundled, finite_differences, graph_gradients, random_case, spec_with, step_spec,
                           validated)
from schedgen import families
from schedgen.errors import SourceMap, SpecErrors
from schedgen.plan import plan
from schedgen.render import render

SMALL = {"M": 3, "N": 4}


def _gelu_bias(**over):
    data = bundled("gelu_bias_bf16.yaml")
    data["op"]["sizes"] = {"M": 64, "N": 512}
    data["op"].update(over)
    return data


@pytest.mark.parametrize("backward", [{}, {"save": ["h"]}, {"save": "recompute"}, {"wrt": ["w", "b"]}])
def test_gradients_match_finite_differences(tmp_path, backward):
    spec, src = spec_with(tmp_path, _gelu_bias(), backward)
    graph, problems = families.of(spec).backward(spec, src)
    assert not problems
    inputs, upstream = random_case(spec, SMALL, seed=1)
    got = graph_gradients(spec, graph, SMALL, inputs, upstream)
    want = finite_differences(spec, SMALL, inputs, upstream, graph.grads)
    assert set(got) == set(graph.grads) == set(backward.get("wrt", ["x", "w", "b"]))
    for n in graph.grads:
        np.testing.assert_allclose(got[n], want[n], rtol=1e-5, atol=1e-6, err_msg=n)
    assert (graph.forward is not None) == ("save" in backward and backward["save"] != "recompute")
    if graph.forward is not None:
        assert "h" in graph.forward["op"]["outputs"] and "h" in graph.saved
        assert graph.steps[0].inputs["h"] == "out:h"


def test_many_outputs_constants_and_a_column_operand(tmp_path):
    data = {"name": "two_out", "op": {
        "kind": "map", "sizes": {"M": 64, "N": 256}, "constants": {"alpha": 0.7},
        "inputs": {"x": {"shape": ["M", "N"], "dtype": "f32"}, "c": {"shape": ["M", 1], "dtype": "f32"},
                   "s": {"shape": [1], "dtype": "f32"}},
        "outputs": {"y": {"shape": ["M", "N"], "dtype": "f32"}, "z": {"shape": ["M", "N"], "dtype": "f32"}},
        "body": "t = silu(x * c) + s\ny = t * alpha\nz = exp(-square(t)) + y / (1.0 + abs(c))"}}
    spec, src = spec_with(tmp_path, data, {})
    graph, problems = families.of(spec).backward(spec, src)
    assert not problems
    inputs, upstream = random_case(spec, SMALL, seed=2)
    got = graph_gradients(spec, graph, SMALL, inputs, upstream)
    want = finite_differences(spec, SMALL, inputs, upstream, ["x", "c", "s"])
    for n in ("x", "c", "s"):
        np.testing.assert_allclose(got[n], want[n], rtol=1e-5, atol=1e-6, err_msg=n)
    out = graph.steps[0].spec["op"]["outputs"]
    assert out["grad_x"]["dtype"] == "f32" and out["grad_c"]["dtype"] == "f32"


def test_step_spec_plans_and_renders_on_both_backends(tmp_path):
    spec, src = spec_with(tmp_path, _gelu_bias(), {"save": ["h"]})
    graph, _ = families.of(spec).backward(spec, src)
    for data in (graph.forward, graph.steps[0].spec):
        p = plan(validated(data), SourceMap("<derived>"))
        for backend in ("cuda", "pallas"):
            assert render(p, backend)
    step = step_spec(graph.steps[0])
    assert step.op.outputs["grad_x"].dtype == "bf16"          # a full-shape input's gradient: its dtype
    assert step.op.outputs["grad_b"].dtype == "f32"           # a broadcast one: f32, summed back after
    assert step.op.outputs["grad_b"].shape == ["M", "N"]


def test_dynamic_spec_backward_plans(tmp_path):
    data = bundled("gelu_bias_bf16_dynamic.yaml")
    spec, src = spec_with(tmp_path, data, {})
    graph, problems = families.of(spec).backward(spec, src)
    assert not problems
    p = plan(step_spec(graph.steps[0]), SourceMap("<grad>"))
    assert [r.name for r in p.launch.dynamic_sizes] == ["M"]


def test_zero_gradient_has_no_step(tmp_path):
    data = _gelu_bias(body="h = x * w\ny = gelu(h) + 0.0 * b")
    spec, src = spec_with(tmp_path, data, {"wrt": ["b"]})
    graph, _ = families.of(spec).backward(spec, src)
    # 0.0 * b: the derivative is identically zero (no kernel), and the note says so
    assert graph.steps == () and graph.grads == ("b",) and any("zero gradient" in n for n in graph.notes)


@pytest.mark.parametrize("backward, path, fragment", [
    ({"wrt": ["q"]}, "backward.wrt[0]", "'q' is not an input"),
    ({"wrt": ["x", "x"]}, "backward.wrt[1]", "listed twice"),
    ({"save": ["y"]}, "backward.save[0]", "'y' cannot be saved"),
])
def test_bad_backward_fields_are_located(tmp_path, backward, path, fragment):
    spec, src = spec_with(tmp_path, _gelu_bias(), backward)
    graph, problems = families.of(spec).backward(spec, src)
    assert graph is None and problems
    err = SpecErrors(problems, src)
    text = str(err)
    assert path in text and fragment in text and ".yaml:" in text


@pytest.fixture
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))


def test_derived_kernel_runs_on_both_backends(tmp_path, _private_cache):
    """The step kernel (its body uses heaviside and sign: the derivatives of relu, abs and maximum) verifies in the
    Pallas interpreter against float64 at small sizes, and the CUDA rendering compiles to sm_90a with no spills."""
    pytest.importorskip("jax")
    import yaml
    from schedgen.build import build_spec
    from schedgen.verify import verify_file
    data = _gelu_bias(body="h = x * w + b\ny = relu(h) * abs(x) + maximum(h, w)")
    spec, src = spec_with(tmp_path, data, {})
    graph, _ = families.of(spec).backward(spec, src)
    assert "heaviside(" in graph.steps[0].spec["op"]["body"] and "sign(" in graph.steps[0].spec["op"]["body"]
    path = tmp_path / "step.yaml"
    path.write_text(yaml.safe_dump(graph.steps[0].spec, sort_keys=False))
    checks = verify_file(str(path), ["pallas"], interpret=True, small=True, seed=0)
    assert checks and all(c.ok and c.rel_error <= c.tolerance for c in checks), checks
    built = build_spec(str(path))
    assert built.files["kernel.cubin"] and not built.warnings, built.warnings


def test_saving_forward_that_outgrows_the_written_pipeline_depth_still_plans(tmp_path):
    """Regression: an f32 gelu_bias saving h with the bundled 3-stage pipeline needs 331800 B of SMEM; the forward
    that saves h now runs fewer stages (and says so) instead of failing the build as a family bug."""
    data = _gelu_bias()
    for part in ("inputs", "outputs"):
        data["op"][part] = {k: dict(v, dtype="f32") for k, v in data["op"][part].items()}
    spec, src = spec_with(tmp_path, data, {"save": ["h"]})
    graph, problems = families.of(spec).backward(spec, src)
    assert not problems
    assert graph.forward["schedule"]["pipeline"]["max_concurrent_steps"] < 3
    assert any("not the 3 written" in n for n in graph.notes)
    plan(validated(graph.forward), SourceMap("<forward>"))
    assert graph.forward["schedule"]["in_specs"] == data["schedule"]["in_specs"]   # the rest stays as written
