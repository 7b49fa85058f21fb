"""The matmul family's backward: the graph (recompute acc, the epilogue's derivative as a map kernel, dA = gacc @ B^T
and dB = A^T @ gacc as matmuls reading A, B and gacc as stored) run with the families' float64 references matches
finite differences of the forward's reference, for plain, fused (bias + gelu: acc kept, a temporary kept, recomputed),
Linear-layout, transposed-lhs, batched (shared and batched weights) and f32-output products; every step spec plans
at the bundled shapes and renders on both backends; wrt / save / fp8 are located errors."""
from __future__ import annotations

import numpy as np
import pytest

from backward_util import (bundled, finite_differences, graph_gradients, random_case, spec_with, step_spec,
                           validated)
from schedgen import families
from schedgen.autodiff.graph import sum_to
from schedgen.autodiff.graph import BackwardGraph, check
from schedgen.errors import SourceMap, SpecErrors
from schedgen.plan import plan
from schedgen.render import render

SMALL = {"M": 5, "N": 4, "K": 3}


def _mm(name="mm", epilogue=None, *, transpose_lhs=False, transpose_rhs=False, batch=None, rhs_batched=True,
        extras=None, out_dtype="bf16", sizes=None):
    a = ["K", "M"] if transpose_lhs else ["M", "K"]
    b = ["N", "K"] if transpose_rhs else ["K", "N"]
    o = ["M", "N"]
    if batch:
        a, o = ["B", *a], ["B", *o]
        b = ["B", *b] if rhs_batched else b
    op = {"kind": "matmul", "sizes": sizes or {"M": 256, "N": 512, "K": 128, **({"B": 2} if batch else {})},
          "inputs": {"a": {"shape": a, "dtype": "bf16"}, "b": {"shape": b, "dtype": "bf16"}, **(extras or {})},
          "outputs": {"out": {"shape": o, "dtype": out_dtype}}}
    if transpose_lhs:
        op["transpose_lhs"] = True
    if transpose_rhs:
        op["transpose_rhs"] = True
    if epilogue:
        op["epilogue"] = epilogue
    return {"name": name, "op": op}


def _small(spec):
    sizes = dict(SMALL)
    if "B" in spec.op.sizes:
        sizes["B"] = 2
    return sizes


def _check_gradients(tmp_path, data, backward, *, seed=0, positive=()):
    spec, src = spec_with(tmp_path, data, backward)
    graph, problems = families.of(spec).backward(spec, src)
    assert not problems, problems
    outputs = set(spec.op.outputs) | set(graph.saved)
    assert not check(graph, set(spec.op.inputs), outputs)
    sizes = _small(spec)
    inputs, upstream = random_case(spec, sizes, seed=seed, positive=positive)
    got = graph_gradients(spec, graph, sizes, inputs, upstream)
    want = finite_differences(spec, sizes, inputs, upstream, graph.grads)
    assert set(got) == set(graph.grads), (set(got), graph.grads)
    for n in graph.grads:
        assert got[n].shape == inputs[n].shape, n
        np.testing.assert_allclose(got[n], want[n], rtol=1e-5, atol=1e-6, err_msg=n)
    return spec, graph


BIAS = {"bias": {"shape": ["N"], "dtype": "f32"}}
CASES = {
    "plain": (_mm(), {}),
    "bias_gelu_save_acc": (_mm(epilogue="out = gelu(acc + bias)", extras=BIAS), {"save": ["acc"]}),
    "bias_gelu_default": (_mm(epilogue="out = gelu(acc + bias)", extras=BIAS), {}),
    "bias_gelu_recompute": (_mm(epilogue="out = gelu(acc + bias)", extras=BIAS), {"save": "recompute"}),
    "bias_gelu_save_h": (_mm(epilogue="h = acc + bias\nout = gelu(h)", extras=BIAS), {"save": ["h"]}),
    "linear_layout": (_mm(epilogue="out = gelu(acc + bias)", extras=BIAS, transpose_rhs=True), {}),
    "transpose_lhs": (_mm(epilogue="out = silu(acc)", transpose_lhs=True), {}),
    "transpose_both": (_mm(epilogue="out = tanh(acc)", transpose_lhs=True, transpose_rhs=True), {"save": "recompute"}),
    "batched": (_mm(epilogue="out = relu(acc) * s", batch=True, extras={"s": {"shape": [1], "dtype": "f32"}}), {}),
    "batched_shared_rhs": (_mm(epilogue="out = sigmoid(acc + c)", batch=True, rhs_batched=False,
                               extras={"c": {"shape": ["B", "M", "N"], "dtype": "bf16"}}), {}),
    "batched_shared_linear": (_mm(batch=True, rhs_batched=False, transpose_rhs=True), {}),
    "linear_epilogue": (_mm(epilogue="out = alpha * acc + beta * c", extras={"c": {"shape": ["M", "N"], "dtype": "bf16"}}),
                        {}),
    "column_scale_f32_out": (_mm(epilogue="out = acc * col", out_dtype="f32",
                                 extras={"col": {"shape": ["M", 1], "dtype": "f32"}}), {}),
    "f32_out_identity": (_mm(out_dtype="f32"), {}),
    "wrt_rhs_only": (_mm(epilogue="out = gelu(acc + bias)", extras=BIAS, transpose_rhs=True), {"wrt": ["b"]}),
    "wrt_bias_only": (_mm(epilogue="out = gelu(acc + bias)", extras=BIAS), {"wrt": ["bias"]}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_gradients_match_finite_differences(tmp_path, case):
    data, backward = CASES[case]
    if case == "linear_epilogue":
        data["op"]["constants"] = {"alpha": 0.75, "beta": -1.5}
    _check_gradients(tmp_path, data, backward, seed=hash(case) % 100)


def test_what_is_saved_and_which_steps(tmp_path):
    gelu = _mm(epilogue="out = gelu(acc + bias)", extras=BIAS)
    spec, graph = _check_gradients(tmp_path, gelu, {})
    assert graph.saved == ("pre",) and [s.name for s in graph.steps] == ["dacc", "dlhs", "drhs"]
    assert graph.forward["op"]["outputs"]["pre"] == {"shape": ["M", "N"], "dtype": "bf16"}
    assert graph.forward["op"]["epilogue"].splitlines()[-1] == "pre = acc"
    assert graph.steps[0].inputs["pre"] == "out:pre" and "backward" not in graph.forward
    # recompute: no saved output, a matmul step first
    spec, graph = _check_gradients(tmp_path, gelu, {"save": "recompute"})
    assert graph.forward is None and graph.saved == ()
    assert [s.name for s in graph.steps] == ["acc", "dacc", "dlhs", "drhs"]
    assert graph.steps[0].spec["op"]["epilogue"] == "pre = acc" and "bias" not in graph.steps[0].spec["op"]["inputs"]
    assert any("recompute" in n for n in graph.notes)
    # a kept temporary is that output
    spec, graph = _check_gradients(tmp_path, _mm(epilogue="h = acc + bias\nout = gelu(h)", extras=BIAS), {"save": ["h"]})
    assert graph.saved == ("h",) and graph.steps[0].inputs["h"] == "out:h"
    assert graph.forward["op"]["epilogue"] == "h = acc + bias\nout = gelu(h)"
    # the identity epilogue: no dacc step, gacc is the upstream gradient; nothing saved
    spec, graph = _check_gradients(tmp_path, _mm(), {})
    assert graph.forward is None and [s.name for s in graph.steps] == ["dlhs", "drhs"]
    assert graph.steps[0].inputs["gacc"] == "grad:out"
    # a linear epilogue keeps nothing by default (its derivative reads no forward value)
    lin = _mm(epilogue="out = alpha * acc + beta * c", extras={"c": {"shape": ["M", "N"], "dtype": "bf16"}})
    lin["op"]["constants"] = {"alpha": 0.5, "beta": 2.0}
    spec, graph = _check_gradients(tmp_path, lin, {})
    assert graph.forward is None and [s.name for s in graph.steps] == ["dacc", "dlhs", "drhs"]
    assert graph.steps[0].spec["op"]["outputs"]["grad_c"]["dtype"] == "bf16"   # full shape: the input's dtype
    # wrt: only what is asked for is built
    spec, graph = _check_gradients(tmp_path, gelu, {"wrt": ["bias"]})
    assert [s.name for s in graph.steps] == ["dacc"] and "gacc" not in graph.steps[0].outputs
    spec, graph = _check_gradients(tmp_path, gelu, {"wrt": ["a"]})
    assert [s.name for s in graph.steps] == ["dacc", "dlhs"]


def test_matmul_steps_read_operands_as_stored(tmp_path):
    """The transpose bits of dA / dB for each forward layout: no copies, the stored arrays are read directly."""
    want = {  # (forward transpose_lhs, transpose_rhs) -> dlhs (tl, tr, lhs, rhs), drhs (tl, tr, lhs, rhs)
        (False, False): ((False, True, "gacc", "b"), (True, False, "a", "gacc")),
        (False, True): ((False, False, "gacc", "b"), (True, False, "gacc", "a")),
        (True, False): ((False, True, "b", "gacc"), (False, False, "a", "gacc")),
        (True, True): ((True, True, "b", "gacc"), (True, True, "gacc", "a")),
    }
    for (tl, tr), steps in want.items():
        spec, src = spec_with(tmp_path, _mm(transpose_lhs=tl, transpose_rhs=tr), {})
        graph, _ = families.of(spec).backward(spec, src)
        got = {s.name: s.spec["op"] for s in graph.steps}
        for name, (wtl, wtr, lhs, rhs) in zip(("dlhs", "drhs"), steps):
            op = got[name]
            assert (op["transpose_lhs"], op["transpose_rhs"], op["lhs"], op["rhs"]) == (wtl, wtr, lhs, rhs), \
                (tl, tr, name, op)
        assert got["dlhs"]["outputs"]["grad_a"]["shape"] == spec.op.inputs["a"].shape
        assert got["drhs"]["outputs"]["grad_b"]["shape"] == spec.op.inputs["b"].shape


def _plans_and_renders(graph: BackwardGraph):
    specs = ([graph.forward] if graph.forward else []) + [s.spec for s in graph.steps]
    plans = []
    for data in specs:
        p = plan(validated(data), SourceMap(f"<{data['name']}>"))
        for backend in p.launch.backends:
            assert render(p, backend), (data["name"], backend)
        plans.append(p)
    return plans


@pytest.mark.parametrize("bundle, backward", [
    ("matmul_bias_gelu_bf16.yaml", {}),
    ("matmul_bias_gelu_bf16.yaml", {"save": "recompute"}),
    ("matmul_bf16_4096.yaml", {}),
    ("linear_gelu_bf16_train.yaml", None),
])
def test_step_specs_plan_and_render_at_bundled_shapes(tmp_path, bundle, backward):
    data = bundled(bundle)
    spec, src = spec_with(tmp_path, data, backward)
    graph, problems = families.of(spec).backward(spec, src)
    assert not problems
    plans = _plans_and_renders(graph)
    assert all(set(p.launch.backends) == {"cuda", "pallas"} for p in plans)       # both backends take every kernel
    for s in graph.steps:
        if s.spec["op"]["kind"] == "matmul":
            p = plan(step_spec(s), SourceMap("<step>"))
            assert p.in_dtype == "bf16" and p.out_dtype in ("bf16", "f32")


def test_dynamic_m_backward_plans(tmp_path):
    """linear_gelu_bf16_dynamic: M (dynamic, any value) is the contraction of dW's GEMM, a dynamic ragged K."""
    spec, src = spec_with(tmp_path, bundled("linear_gelu_bf16_dynamic.yaml"), {})
    graph, problems = families.of(spec).backward(spec, src)
    assert not problems
    plans = {s.name: p for s, p in zip(graph.steps, _plans_and_renders(graph)[1:])}
    assert [r.name for r in plans["drhs"].launch.dynamic_sizes] == ["M"]
    assert not isinstance(plans["drhs"].k, int)            # K of dW = x^T @ gacc is M
    assert any("contraction" in n for n in graph.notes)


@pytest.mark.parametrize("backward, path, words", [
    ({"wrt": ["a", "zz"]}, "backward.wrt[1]", "is not an input"),
    ({"save": ["q"]}, "backward.save[0]", "cannot be saved"),
    ({"save": ["acc", "h"]}, "backward.save", "one value"),
    ({"save": ["h"], "_epilogue": "h = acc * bias\nout = h * acc"}, "backward.save[0]", "also reads acc"),
])
def test_wrt_and_save_errors_are_located(tmp_path, backward, path, words):
    backward = dict(backward)
    epilogue = backward.pop("_epilogue", "h = acc + bias\nout = gelu(h)")
    spec, src = spec_with(tmp_path, _mm(epilogue=epilogue, extras=BIAS), backward)
    graph, problems = families.of(spec).backward(spec, src)
    assert graph is None
    text = str(SpecErrors(problems, src))
    assert path in text and words in text, text


def test_fp8_has_no_backward_yet(tmp_path):
    spec, src = spec_with(tmp_path, bundled("matmul_fp8_e4m3_4096.yaml"), {})
    graph, problems = families.of(spec).backward(spec, src)
    assert graph is None
    text = str(SpecErrors(problems, src))
    assert "backward" in text and "fp8" in text


def test_batched_transposed_lhs_with_shared_rhs_is_a_located_error(tmp_path):
    spec, src = spec_with(tmp_path, _mm(transpose_lhs=True, batch=True, rhs_batched=False), {})
    graph, problems = families.of(spec).backward(spec, src)
    assert graph is None and "op.transpose_lhs" in str(SpecErrors(problems, src))
    # the rhs alone is fine
    spec, src = spec_with(tmp_path, _mm(transpose_lhs=True, batch=True, rhs_batched=False), {"wrt": ["b"]})
    _check_gradients(tmp_path, _mm(transpose_lhs=True, batch=True, rhs_batched=False), {"wrt": ["b"]})


def test_the_planner_takes_a_matmul_backward_section(tmp_path):
    """A matmul spec with a backward section plans (the family has a backward now)."""
    spec, src = spec_with(tmp_path, bundled("matmul_bias_gelu_bf16.yaml"), {"save": ["acc"]})
    assert plan(spec, src).launch.family == "matmul"


# ------------------------------------------------------------------------------------ the kernels, interpreted


def _pallas_module(data: dict, folder):
    """Build a spec (plain data) for the Pallas backend and import its module."""
    import importlib.util
    import sys

    import yaml
    from schedgen.build import build_spec
    data = dict(data, schedule={**data.get("schedule", {}), "backends": ["pallas"]})
    path = folder / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    built = build_spec(str(path))
    mod_path = folder / f"{data['name']}_pallas.py"
    mod_path.write_bytes(built.files["pallas_kernel.py"])
    name = f"_test_mm_bwd_{data['name']}_{abs(hash(str(folder)))}"
    spec = importlib.util.spec_from_file_location(name, mod_path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return built.plan, mod


def _run_interpreted(plan, mod, values: dict) -> dict:
    import jax.numpy as jnp
    from schedgen.verify import interpret_params, races_found
    ins = [jnp.asarray(values[o.name], mod._DTYPES[o.dtype]) for o in plan.inputs]
    outs = [jnp.full(o.shape, jnp.nan, mod._DTYPES[o.dtype]) for o in plan.outputs]
    got = mod.run_into(ins, outs, interpret=interpret_params())
    assert races_found() is False, plan.name
    return {o.name: np.asarray(g, np.float64) for o, g in zip(plan.outputs, got)}


@pytest.mark.parametrize("backward", [{"save": ["acc"]}, {"save": "recompute"}])
def test_linear_gelu_train_kernels_interpreted_match_float64(tmp_path, backward):
    """The forward (writing acc as a second output) and every backward kernel of linear_gelu_bf16_train, run by the
    Mosaic GPU interpreter at 256 x 256 x 128, give the float64 gradients (bf16 tolerances)."""
    pytest.importorskip("jax")
    import ml_dtypes
    from schedgen.autodiff.graph import evaluate
    from schedgen.reference import rel_error
    data = bundled("linear_gelu_bf16_train.yaml")
    data["op"]["sizes"] = {"M": 256, "N": 256, "K": 128}
    data["backward"] = backward
    spec, src = spec_with(tmp_path, data)
    graph, problems = families.of(spec).backward(spec, src)
    assert not problems
    sizes = {"M": 256, "N": 256, "K": 128}
    rng = np.random.default_rng(7)
    as_stored = {n: rng.standard_normal(tuple(sizes[d] for d in o.shape)).astype(
        ml_dtypes.bfloat16 if o.dtype == "bf16" else np.float32) for n, o in spec.op.inputs.items()}
    inputs = {n: np.asarray(v, np.float64) for n, v in as_stored.items()}
    upstream = {"y": np.asarray(rng.standard_normal((256, 256)).astype(ml_dtypes.bfloat16), np.float64)}
    fwd_data = graph.forward or {k: v for k, v in data.items() if k != "backward"}
    fwd_plan, fwd_mod = _pallas_module(fwd_data, tmp_path)
    outputs = _run_interpreted(fwd_plan, fwd_mod, inputs)
    assert set(outputs) == {"y", *graph.saved}
    modules = {s.name: _pallas_module(s.spec, tmp_path) for s in graph.steps}

    def run(step, values):
        plan, mod = modules[step.name]
        return _run_interpreted(plan, mod, values)

    got = evaluate(graph, inputs, outputs, upstream, run)
    want = graph_gradients(spec, graph, sizes, inputs, upstream)
    for n in ("x", "w", "bias"):
        err = rel_error(sum_to(got[n], inputs[n].shape), want[n])     # bias: [M, N] f32, summed to [N]
        assert err <= 2e-2, (n, err)


def test_linear_gelu_train_kernels_compile_for_sm90a(tmp_path):
    """NVRTC builds the forward (acc written as a second output) and every backward kernel at the bundled shape."""
    import yaml
    from conftest import opcodes
    from schedgen.build import build_spec
    from schedgen.toolchain.nvrtc import sass
    spec, src = spec_with(tmp_path, bundled("linear_gelu_bf16_train.yaml"))
    graph, _ = families.of(spec).backward(spec, src)
    for data in [graph.forward] + [s.spec for s in graph.steps]:
        data = dict(data, schedule={**data.get("schedule", {}), "backends": ["cuda"]})
        path = tmp_path / f"{data['name']}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        built = build_spec(str(path))
        ops = opcodes(sass(built.files["kernel.cubin"]))
        assert not [op for op in ops if op.split(".")[0] in ("LDL", "STL")], data["name"]
        if data["op"]["kind"] == "matmul":
            assert any(op.startswith("HGMMA") for op in ops), data["name"]
    assert graph.forward["op"]["outputs"]["pre"]["dtype"] == "bf16"
