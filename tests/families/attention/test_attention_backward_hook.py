"""The attention family's backward hook (issue 19): the BackwardGraph it returns (the forward with its log-sum-exp,
one attention_backward step with the user's names), `graph.evaluate` with the families' float64 references against
finite differences of the forward reference, `backward.wrt` / `save` honoured, and the step's spec planning."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import SPECS_DIR
from schedgen import families
from schedgen.autodiff.graph import BackwardGraph, check, evaluate
from schedgen.errors import SourceMap, SpecErrors
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.families.attention.backward import attention_backward_graph
from schedgen.frontend.model import Backward
from schedgen.frontend.validate import load_spec, validate_data
from schedgen.plan import plan

FWD = SPECS_DIR / "attention_bf16_4096.yaml"


def _tiny(sizes, causal=False, gqa=False, layout="bshd", lse=False, backward=None, names=("q", "k", "v", "o")):
    q, k, v, o = names
    kvh = "G" if gqa else "H"
    qs, ks = ["B", "SQ", "H", "D"], ["B", "SKV", kvh, "D"]
    if layout == "bhsd":
        qs, ks = [qs[0], qs[2], qs[1], qs[3]], [ks[0], ks[2], ks[1], ks[3]]
    outs = {o: {"shape": qs, "dtype": "bf16"}}
    if lse:
        outs[lse] = {"shape": ["B", "H", "SQ"], "dtype": "f32"}
    ov = {"op.sizes": sizes, "op.inputs": {q: {"shape": qs, "dtype": "bf16"}, k: {"shape": ks, "dtype": "bf16"},
                                           v: {"shape": ks, "dtype": "bf16"}},
          "op.outputs": outs, "op.causal": causal, "op.layout": layout, "schedule.in_specs": {}}
    spec, src = load_spec(str(FWD), ov)
    return _with_backward(spec, backward), src


def _with_backward(spec, backward=None):
    """The spec with a `backward:` section (written, as a file would)."""
    return spec.model_copy(update={"backward": Backward(**(backward or {}))})


def _run_reference(step, args):
    spec = validate_data(step.spec, SourceMap("<step>"))
    return families.of(spec).reference(spec, spec.op.sizes, args)


def _forward(graph: BackwardGraph, spec, ins):
    fspec = validate_data(graph.forward, SourceMap("<fwd>")) if graph.forward is not None else spec
    return families.of(fspec).reference(fspec, fspec.op.sizes, ins, sample=False)


def _fd(spec, ins, g, eps=1e-6):
    o = list(spec.op.outputs)[0]
    ref = families.of(spec).reference
    out = {}
    for n in spec.op.inputs:
        grad = np.zeros_like(ins[n])
        for idx in np.ndindex(ins[n].shape):
            vals = []
            for sign in (1, -1):
                x = {m: a.copy() for m, a in ins.items()}
                x[n][idx] += sign * eps
                vals.append(float((ref(spec, spec.op.sizes, x, sample=False)[o] * g).sum()))
            grad[idx] = (vals[0] - vals[1]) / (2 * eps)
        out[n] = grad
    return out


CASES = {
    "plain": dict(sizes={"B": 1, "SQ": 4, "SKV": 5, "H": 2, "D": 3}),
    "causal_gqa": dict(sizes={"B": 1, "SQ": 4, "SKV": 4, "H": 4, "G": 2, "D": 2}, causal=True, gqa=True),
    "top_left_bhsd_user_lse": dict(sizes={"B": 1, "SQ": 5, "SKV": 3, "H": 1, "D": 2}, causal="top_left",
                                   layout="bhsd", lse="logz"),
    "recompute": dict(sizes={"B": 1, "SQ": 3, "SKV": 3, "H": 1, "D": 2}, causal=True,
                      backward={"save": "recompute"}),
    "other_names": dict(sizes={"B": 1, "SQ": 3, "SKV": 4, "H": 1, "D": 2}, names=("query", "key", "value", "out_x")),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_evaluate_matches_finite_differences(case):
    spec, src = _tiny(**CASES[case])
    graph, problems = attention_backward_graph(spec, src)
    assert not problems and graph is not None
    fwd_names = graph.forward["op"]["outputs"] if graph.forward is not None else spec.op.outputs
    assert check(graph, set(spec.op.inputs), set(fwd_names)) == []
    rng = np.random.default_rng(7)
    ins = {n: rng.standard_normal(tuple(spec.op.sizes[d] for d in o.shape)) for n, o in spec.op.inputs.items()}
    outs = _forward(graph, spec, ins)
    o = list(spec.op.outputs)[0]
    g = rng.standard_normal(outs[o].shape)
    got = evaluate(graph, ins, outs, {o: g}, _run_reference)
    want = _fd(spec, ins, g)
    assert set(got) == set(spec.op.inputs)
    for n in spec.op.inputs:
        np.testing.assert_allclose(got[n], want[n], rtol=1e-6, atol=1e-7, err_msg=f"{case} d{n}")


def test_graph_shape_default():
    spec, src = _tiny({"B": 1, "SQ": 64, "SKV": 64, "H": 2, "D": 64})
    graph, _ = attention_backward_graph(spec, src)
    assert graph.saved == ("lse",) and graph.grads == ("q", "k", "v")
    assert graph.forward["op"]["outputs"]["lse"] == {"shape": ["B", "H", "SQ"], "dtype": "f32"}
    (step,) = graph.steps
    assert step.spec["op"]["kind"] == "attention_backward"
    assert step.inputs == {"q": "in:q", "k": "in:k", "v": "in:v", "fwd_o": "out:o", "grad_o": "grad:o",
                           "lse": "out:lse"}
    assert step.outputs == {"dq": "grad:q", "dk": "grad:k", "dv": "grad:v"}
    assert BackwardGraph.from_json(graph.to_json()) == graph


def test_user_lse_kept_and_wrt_subset():
    spec, src = _tiny({"B": 1, "SQ": 64, "SKV": 64, "H": 2, "D": 64}, lse="logz",
                      backward={"wrt": ["q", "v"], "save": ["logz"]})
    graph, _ = attention_backward_graph(spec, src)
    assert graph.forward is None and graph.saved == ("logz",) and graph.grads == ("q", "v")
    assert graph.steps[0].outputs == {"dq": "grad:q", "dk": "value", "dv": "grad:v"}
    assert graph.steps[0].inputs["logz"] == "out:logz"
    assert any("only q, v are kept" in n for n in graph.notes)


def test_taken_lse_name():
    spec, src = _tiny({"B": 1, "SQ": 64, "SKV": 64, "H": 2, "D": 64}, names=("q", "lse", "v", "o"))
    graph, _ = attention_backward_graph(spec, src)
    assert graph.saved == ("lse_2",) and "lse_2" in graph.forward["op"]["outputs"]


@pytest.mark.parametrize("backward, path, text", [
    ({"wrt": ["q", "x"]}, ("backward", "wrt", 1), "'x' is not an input"),
    ({"save": ["h"]}, ("backward", "save", 0), "log-sum-exp only"),
])
def test_bad_backward_sections(backward, path, text):
    spec, src = _tiny({"B": 1, "SQ": 64, "SKV": 64, "H": 2, "D": 64}, backward=backward)
    graph, problems = attention_backward_graph(spec, src)
    assert graph is None and [p.path for p in problems] == [path] and text in problems[0].message


@pytest.mark.parametrize("causal", [False, True])
def test_step_specs_plan(causal):
    """The step spec (and the forward with its lse) of the bundled forward plan as written."""
    spec, src = load_spec(str(FWD), {"op.causal": causal})
    spec = _with_backward(spec)
    graph, _ = attention_backward_graph(spec, src)
    fwd = validate_data(graph.forward, SourceMap("<fwd>"))
    assert plan(fwd, SourceMap("<fwd>")).with_lse
    bwd = validate_data(graph.steps[0].spec, SourceMap("<bwd>"))
    p = plan(bwd, SourceMap("<bwd>"))
    assert (p.seq_q, p.heads_q, p.head_dim, p.causal, p.launch.backends) == (4096, 16, 128, causal, ("cuda", "pallas"))


def test_dynamic_forward_builds_one_dynamic_backward_step():
    spec, src = load_spec(str(SPECS_DIR / "attention_bf16_dynamic.yaml"))
    graph, problems = attention_backward_graph(_with_backward(spec), src)
    assert not problems and graph.steps[-1].spec["op"]["sizes"]["S"]["dynamic"] is True


@pytest.mark.parametrize("ov,where", [
    ({"op.sizes.S": {"dynamic": True, "max": 32768, "multiple_of": 32}}, "op.sizes.S"),
    ({"op.sizes": {"B": 1, "S": 4000, "H": 16, "D": 128}}, "op.inputs.q.shape[1]")], ids=["dynamic", "fixed"])
def test_ragged_sequences_give_a_located_error_at_the_size(ov, where, tmp_path):
    """Regression: a forward whose sequence length the backward step cannot take (not whole 64-row blocks) was
    reported as a bug of the attention family (its step failed its own checks); it is a located error in the user's
    file, at the size or shape the step copied, saying which kernel refuses it (build.py relocates a derived step's
    problem about a value the user wrote; the family states the rule once, in the step's planner)."""
    spec = tmp_path / "attn.yaml"
    spec.write_text((SPECS_DIR / "attention_bf16_dynamic.yaml").read_text() + "backward: {}\n")
    with pytest.raises(SpecErrors) as exc:
        build_spec(spec, ov, cache=Cache(tmp_path / "cache"))
    text = str(exc.value)
    assert where in text and "multiple of 64" in text and "the backward's step" in text, text
    assert "attn.yaml:" in text and "schedgen bug" not in text, text
