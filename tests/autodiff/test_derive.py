"""derive.vjp: the derived body's gradients match central finite differences of the forward body (float64)."""
from __future__ import annotations

import numpy as np
import pytest

from schedgen.autodiff.derive import vjp
from schedgen.frontend.expr import FUNCTIONS, ExprError, eval_numpy, parse_body

RNG = np.random.default_rng(19)


def _check(text: str, inputs: dict[str, np.ndarray], outputs: list[str], wrt: list[str], constants=None,
           saved=(), tol=1e-6):
    constants = constants or {}
    fwd = parse_body(text, inputs=inputs, outputs=outputs, constants=constants)
    cot = {o: f"g_{o}" for o in outputs}
    grads = {w: f"grad_{w}" for w in wrt}
    d = vjp(fwd, wrt=grads, cotangents=cot, saved=saved)
    names_in = set(inputs) | set(cot.values()) | set(saved)
    assert set(d.inputs) <= names_in | set(constants), d.inputs
    back = parse_body(d.text, inputs=names_in, outputs=[g for g in grads.values() if g not in d.zero],
                      constants=constants)            # re-validated like a user's body
    shape = np.broadcast_shapes(*(v.shape for v in inputs.values()))
    upstream = {f"g_{o}": RNG.standard_normal(shape) for o in outputs}
    env = dict(inputs) | upstream | constants
    if saved:
        full = parse_body(text, inputs=inputs, outputs=list(outputs) + list(saved), constants=constants)
        env |= {s: v for s, v in eval_numpy(full, dict(inputs) | constants).items() if s in saved}
    got = eval_numpy(back, env)

    def loss(vals):
        out = eval_numpy(fwd, vals | constants)
        return sum(float(np.sum(out[o] * upstream[f"g_{o}"])) for o in outputs)

    for w in wrt:
        x = inputs[w]
        h = 1e-6
        g = np.broadcast_to(got.get(grads[w], 0.0), shape)
        # the derived gradient has the broadcast shape; summed over the broadcast dims it is the input's gradient
        red = g.sum(axis=tuple(range(len(shape) - x.ndim)))
        red = red.sum(axis=tuple(i for i, s in enumerate(x.shape) if s == 1), keepdims=True) if x.ndim else red
        want = np.zeros(x.shape)
        for src in np.ndindex(*x.shape):
            p, m = dict(inputs), dict(inputs)
            p[w] = x.copy(); m[w] = x.copy()
            p[w][src] += h; m[w][src] -= h
            want[src] = (loss(p) - loss(m)) / (2 * h)
        np.testing.assert_allclose(red.reshape(x.shape), want, rtol=tol * 100, atol=tol * 100, err_msg=f"d/d{w}")


def _x(*shape, lo=None):
    v = RNG.standard_normal(shape)
    return np.abs(v) + 0.5 if lo == "pos" else v


UNARY = ["abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "gelu_erf",
         "silu", "square", "erf"]


@pytest.mark.parametrize("fn", UNARY)
def test_every_unary_function(fn):
    positive = fn in ("log", "log2", "sqrt", "rsqrt")
    _check(f"y = {fn}(x * w)", {"x": _x(3, 4, lo="pos" if positive else None), "w": _x(3, 4, lo="pos")},
           ["y"], ["x", "w"])


def test_every_function_has_a_rule():
    from schedgen.autodiff.derive import _RULES
    assert set(FUNCTIONS) <= set(_RULES)


@pytest.mark.parametrize("text", [
    "y = minimum(x, w)", "y = maximum(x, w * 0.5)", "y = clamp(x, w - 1.0, w + 1.0)",
    "y = x ** 2 + w ** 3 - x ** 4 / w", "y = -x / (w * w + 1.0)",
])
def test_binary_and_piecewise(text):
    _check(text, {"x": _x(4, 5), "w": _x(4, 5)}, ["y"], ["x", "w"])


def test_temporaries_broadcast_bias_and_two_outputs():
    # a broadcast bias row and column, a temporary used twice, two outputs one of which feeds the other
    text = "h = x * w + b\nt = tanh(h)\ny = gelu(h) * c + t\nz = y * t * scale"
    _check(text, {"x": _x(3, 4), "w": _x(3, 4), "b": _x(4), "c": _x(3, 1)}, ["y", "z"], ["x", "w", "b", "c"],
           constants={"scale": 1.5})


def test_saved_temporary_is_read_not_recomputed():
    fwd = parse_body("h = x * w + b\ny = gelu(h)", inputs=["x", "w", "b"], outputs=["y"], constants=[])
    d = vjp(fwd, wrt={"x": "gx", "b": "gb"}, cotangents={"y": "gy"}, saved=["h"])
    assert "h" in d.inputs and not d.text.startswith("h =")
    recomputed = vjp(fwd, wrt={"x": "gx"}, cotangents={"y": "gy"})
    assert recomputed.text.startswith("h = ")
    _check("h = x * w + b\ny = gelu(h)", {"x": _x(2, 3), "w": _x(2, 3), "b": _x(3)}, ["y"], ["x", "w", "b"],
           saved=["h"])


def test_zero_and_inactive_gradients():
    fwd = parse_body("y = exp(x) * 2.0", inputs=["x", "w"], outputs=["y"], constants=[])
    d = vjp(fwd, wrt={"x": "gx", "w": "gw"}, cotangents={"y": "gy"})
    assert d.zero == {"gw"} and "gw" not in d.text
    fwd = parse_body("y = relu(x) + heaviside(x)", inputs=["x"], outputs=["y"], constants=[])
    d = vjp(fwd, wrt={"x": "gx"}, cotangents={"y": "gy"})
    assert d.text == "gx = gy * heaviside(x)"


def test_names_never_collide():
    text = "d_y = x * 2.0\ny = d_y * d_y"
    fwd = parse_body(text, inputs=["x"], outputs=["y"], constants=[])
    d = vjp(fwd, wrt={"x": "gx"}, cotangents={"y": "d_y2"})
    targets = [line.split(" = ")[0] for line in d.text.splitlines()]
    assert len(targets) == len(set(targets)) and "d_y2" not in targets
    _check(text, {"x": _x(3)}, ["y"], ["x"])


def test_new_functions_render_and_evaluate():
    body = parse_body("y = heaviside(x) + sign(x) + erf(x)", inputs=["x"], outputs=["y"], constants=[])
    x = np.array([-2.0, 0.0, 0.5])
    import math
    want = np.array([0, 0, 1.0]) + np.array([-1, 0, 1.0]) + np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(eval_numpy(body, {"x": x})["y"], want)
    from schedgen.frontend.spelling import render_cxx, render_jnp
    e = body.statements[0][1]
    assert "sg_heaviside(" in render_cxx(e, {"x": "v"}) and "sg_erf(" in render_cxx(e, {"x": "v"})
    assert "jax.lax.erf(" in render_jnp(e, {"x": "v"})


def test_derived_body_of_a_bad_rule_input_is_refused():
    with pytest.raises(ValueError, match="not temporaries"):
        vjp(parse_body("y = x", inputs=["x"], outputs=["y"], constants=[]), wrt={"x": "g"}, cotangents={"y": "gy"},
            saved=["q"])
    with pytest.raises(ExprError):
        parse_body("y = heaviside(x, x)", inputs=["x"], outputs=["y"], constants=[])
