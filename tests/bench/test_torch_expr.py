"""schedgen/bench/torch_expr.py: a checked body as eager torch ops (the torch peers' function), on CPU tensors against
the float64 numpy reference (`expr.eval_numpy`), constants folded while it is built, nothing eval'ed."""
from __future__ import annotations

import ast

import numpy as np
import pytest

from schedgen.bench import torch_expr as te
from schedgen.frontend import expr as ex

torch = pytest.importorskip("torch")

EVERY_FUNCTION = """t = 2.0 * s + 1
h = x * y + b / 3.0
u = gelu(h) + gelu_erf(h) + silu(h) + sigmoid(h) + relu(-h) + tanh(h) + abs(h) + square(h) + h ** 3 + h ** 4
v = exp(minimum(h, 1.5)) + exp2(maximum(0.5, h) - 4) + log(abs(h) + 1) + log2(sqrt(abs(h)) + 1) + rsqrt(abs(h) + 2)
w = clamp(h, -0.5, t) + clamp(x, y, 2.0) + minimum(x, y) + maximum(y, x) + minimum(0.25, x) + exp(t) - t ** 2
o = u + v + w + -h + +h - h / 4
"""


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((6, 16)), "y": rng.standard_normal((6, 16)), "b": rng.standard_normal(16)}


def _body(text=EVERY_FUNCTION, inputs=("x", "y", "b"), outputs=("o",), constants=("s",)):
    return ex.parse_body(text, inputs=list(inputs), outputs=list(outputs), constants=list(constants))


def test_every_function_and_operator_matches_the_float64_reference():
    body = _body()
    inputs = _inputs()
    ref = ex.eval_numpy(body, {**inputs, "s": 0.25})["o"]
    got = te.torch_body(torch, body, {"s": 0.25})({k: torch.from_numpy(v) for k, v in inputs.items()})["o"]
    assert got.dtype == torch.float64 and got.shape == ref.shape
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-12, atol=1e-12)


def test_a_wrong_spelling_would_be_caught():
    """Not vacuous: the comparison above sees a one-function difference (the erf GELU where the tanh one is meant)."""
    body = _body("o = gelu(x)", constants=())
    erf = _body("o = gelu_erf(x)", constants=())
    inputs = _inputs()
    ref = ex.eval_numpy(body, inputs)["o"]
    got = te.torch_body(torch, erf)({k: torch.from_numpy(v) for k, v in inputs.items()})["o"].numpy()
    assert np.abs(got - ref).max() > 1e-5


def test_bf16_tensors_compute_in_torch_dtype_and_stay_within_tolerance():
    from schedgen.reference import rel_error
    body = _body("h = x * y + b\no = gelu(h)", constants=())
    inputs = _inputs(1)
    ref = ex.eval_numpy(body, inputs)["o"]
    got = te.torch_body(torch, body)({k: torch.from_numpy(v).to(torch.bfloat16) for k, v in inputs.items()})["o"]
    assert got.dtype == torch.bfloat16                              # torch's own eager semantics, as a user's code
    assert 1e-4 < rel_error(got.float().numpy(), ref) < 1e-2


def test_constants_are_folded_while_the_body_is_built():
    """A sub-expression of constants only (and a temporary holding one) is a number before any call: a call runs
    torch ops on tensors only (what torch.compile traces whole)."""
    body = _body("t = exp(s) * 2\no = x * t + sqrt(s)", inputs=("x",), constants=("s",))
    tree = body.statements[0][1].tree
    assert isinstance(te._node(torch, tree, {"s": 0.5}), te._Const)
    fn = te.torch_body(torch, body, {"s": 0.5})
    x = torch.ones(3, dtype=torch.float64)
    np.testing.assert_allclose(fn({"x": x})["o"].numpy(), np.exp(0.5) * 2 + np.sqrt(0.5))
    # x / 0 is inf (the reference's IEEE result), constants only included
    inf = te.torch_body(torch, _body("o = x / (s - s) + 1 / (s - s)", inputs=("x",)), {"s": 1.0})({"x": x})["o"]
    assert bool(torch.isinf(inf).all())


def test_a_tree_that_was_not_checked_is_refused_not_run():
    """The walker builds only from the whitelisted node kinds: anything else is an ExprError, never evaluated."""
    tree = ast.parse("__import__('os').getcwd()", mode="eval").body
    bad = ex.Body((("o", ex.Expr("x", tree, frozenset())),), "", ("o",))
    with pytest.raises(ex.ExprError, match="cannot spell Call"):
        te.torch_body(torch, bad)
    attr = ex.Body((("o", ex.Expr("x", ast.parse("x.real", mode="eval").body, frozenset())),), "", ("o",))
    with pytest.raises(ex.ExprError, match="cannot spell Attribute"):
        te.torch_body(torch, attr)


def test_as_output_broadcasts_casts_and_fills():
    row = torch.arange(4, dtype=torch.float64)
    out = te.as_output(torch, row, (3, 4), torch.float32)
    assert out.shape == (3, 4) and out.dtype == torch.float32 and out.is_contiguous() and float(out[2, 3]) == 3.0
    full = te.as_output(torch, 1.5, (2, 2), torch.bfloat16, "cpu")
    assert full.dtype == torch.bfloat16 and bool((full == 1.5).all())
