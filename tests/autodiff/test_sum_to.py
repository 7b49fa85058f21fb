"""autodiff/graph.py's sum_to: a step output bound to grad:<input> of another shape than the input (an operand
broadcast in the forward) is summed back over the broadcast dims, numpy's broadcasting read backwards; and the
graph's float64 evaluation (the families' references) against finite differences of the forward."""
from __future__ import annotations

import numpy as np
import pytest

import handgraph as hg
from handgraph import closed_form, host_inputs, upstream
from schedgen.autodiff.graph import BackwardGraph, Step, evaluate, sum_dims, sum_to


@pytest.mark.parametrize("shape, to, lead, keep", [
    ((4, 5), (5,), (0,), ()),              # a row broadcast over the rows: leading dim dropped
    ((4, 5), (4, 1), (), (1,)),            # a column: the size-1 dim kept
    ((2, 4, 5), (1, 5), (0,), (1,)),       # both
    ((4, 5), (4, 5), (), ()),              # no broadcast
    ((3, 1, 5), (1, 5), (0,), ()),         # a size-1 dim of both shapes is no broadcast
    ((4, 5), (), (0, 1), ()),              # a scalar
])
def test_sum_dims_reads_numpy_broadcasting_backwards(shape, to, lead, keep):
    assert sum_dims(shape, to) == (lead, keep)
    rng = np.random.default_rng(0)
    small = rng.standard_normal(to)
    big = np.broadcast_to(small, shape)
    g = rng.standard_normal(shape)
    got = sum_to(g, to)
    assert got.shape == to
    # sum_to is the adjoint of broadcast_to: <broadcast(s), g> == <s, sum_to(g)>
    np.testing.assert_allclose(np.sum(big * g), np.sum(small * got), rtol=1e-12)


@pytest.mark.parametrize("shape, to", [((4, 5), (4,)), ((4, 5), (2, 5)), ((5,), (4, 5))])
def test_a_shape_that_does_not_broadcast_is_a_clear_error(shape, to):
    with pytest.raises(ValueError, match=r"cannot be summed to .*does not broadcast to it"):
        sum_dims(shape, to)


def test_evaluate_sums_a_broadcast_gradient_and_adds_two_steps_into_one():
    b = np.arange(3.0)
    g = np.ones((2, 3))
    graph = BackwardGraph(forward=None, saved=(), grads=("b",), steps=(
        Step("s1", {}, {"g": "grad:y"}, {"o": "grad:b"}), Step("s2", {}, {"g": "grad:y"}, {"o": "grad:b"})))
    got = evaluate(graph, {"b": b}, {"y": g}, {"y": g * 2}, lambda step, v: {"o": v["g"]})
    np.testing.assert_array_equal(got["b"], np.full(3, 8.0))   # two steps, each 2 summed over 2 rows


@pytest.mark.parametrize("which", ["plain", "saving"])
def test_the_hand_graphs_float64_evaluation_matches_finite_differences(which):
    """The graph run with the map family's float64 reference is the backward's reference: it agrees with the
    worked-out gradients and with central differences of the float64 forward."""
    ins = {k: v.astype(np.float64) for k, v in host_inputs().items()}
    gy = upstream().astype(np.float64)
    spec = hg.step_spec(hg.Step("f", hg.map_spec("f", {"M": hg.M, "N": hg.N}, {"x": hg.MN, "w": hg.MN, "b": hg.NN},
                                                 {"y": hg.MN}, "y = x * w + b"), {}, {}))
    graph, problems = getattr(hg, which)(_Spec(spec), None)
    assert problems == []
    fwd = hg.step_spec(hg.Step("f", graph.forward, {}, {})) if graph.forward else spec
    got = hg.float64_grads(graph, fwd, ins, gy)
    want = closed_form(which, ins, gy)
    for n in "xwb":
        assert got[n].shape == ins[n].shape
        np.testing.assert_allclose(got[n], want[n], rtol=1e-12, atol=1e-12)
    for n, idx in (("x", (3, 7)), ("w", (60, 500)), ("b", (11,))):
        fd = hg.finite_difference(which, ins, gy, n, idx)
        assert abs(fd - got[n][idx]) <= 1e-6 * max(1.0, abs(fd))


class _Spec:
    """The parts of a user spec the hand hooks read."""

    def __init__(self, spec):
        self.op, self.name = spec.op, "fma"
        self.backward = type("B", (), {"wrt": None})()
