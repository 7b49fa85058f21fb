"""Validated expressions spelled in the kernels' languages: float32 C++, jax.numpy, and 32-bit integer C++ and Python
(Python's floor semantics in both), each re-checking every node of the tree it spells."""
from __future__ import annotations

import ast
from collections.abc import Callable, Mapping

from .intmath import Interval, check_int32
from .expr import _FLOAT_SYMBOLS, FUNCTIONS, Expr, ExprError, _describe, _f32_literal, _literal_problem, _pow_exponent


_JNP_CALL: dict[str, str] = {
    "abs": "jnp.abs({0})", "exp": "jnp.exp({0})", "exp2": "jnp.exp2({0})", "log": "jnp.log({0})",
    "log2": "jnp.log2({0})", "sqrt": "jnp.sqrt({0})", "rsqrt": "jax.lax.rsqrt({0})", "tanh": "jnp.tanh({0})",
    "sigmoid": "jax.nn.sigmoid({0})", "relu": "jnp.maximum({0}, 0.0)", "gelu": "jax.nn.gelu({0}, approximate=True)",
    "gelu_erf": "jax.nn.gelu({0}, approximate=False)", "silu": "jax.nn.silu({0})", "square": "({0} * {0})",
    "minimum": "jnp.minimum({0}, {1})", "maximum": "jnp.maximum({0}, {1})", "clamp": "jnp.clip({0}, {1}, {2})",
    "erf": "jax.lax.erf({0})", "heaviside": "jnp.where({0} > 0.0, 1.0, 0.0)",
    "sign": "jnp.where({0} > 0.0, 1.0, jnp.where({0} < 0.0, -1.0, 0.0))",
}


_CXX_CALL = {fn: f"sg_{fn}({', '.join(f'{{{i}}}' for i in range(n))})" for fn, n in FUNCTIONS.items()}


# C++ '/' and '%' truncate toward zero; Python's '//' and '%' floor. The CUDA templates define
# sg_floordiv / sg_floormod with Python's semantics so index maps mean the same in both languages.
_CXX_INT_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "sg_floordiv({0}, {1})",
                    ast.Mod: "sg_floormod({0}, {1})"}


_PY_INT_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}


def _render(node: ast.expr, names: Mapping[str, str], symbols: Mapping[type, str],
            literal: Callable[[float], str] | None, calls: Mapping[str, str]) -> str:
    """Fully parenthesized text of a tree; ``literal`` is None for integer math.  Re-checks every node."""

    def r(n: ast.expr) -> str:
        if isinstance(n, ast.Constant) and _literal_problem(n.value, literal is None) is None:
            return str(n.value) if literal is None else literal(_f32_literal(float(n.value)))  # type: ignore[arg-type]
        if isinstance(n, ast.Name):
            return names[n.id]
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.UAdd, ast.USub)):
            return f"(-{r(n.operand)})" if isinstance(n.op, ast.USub) else r(n.operand)
        if isinstance(n, ast.BinOp) and literal is not None and isinstance(n.op, ast.Pow) \
                and (exponent := _pow_exponent(n)) is not None:
            return "(" + " * ".join([r(n.left)] * exponent) + ")"
        if isinstance(n, ast.BinOp) and type(n.op) in symbols:
            sym = symbols[type(n.op)]
            if "{" in sym:
                return sym.format(r(n.left), r(n.right))
            return f"({r(n.left)} {sym} {r(n.right)})"
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in calls \
                and not n.keywords and len(n.args) == FUNCTIONS[n.func.id]:
            arg = n.args[0] if n.args else None
            if calls is _CXX_CALL and n.func.id == "exp" and isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Sub):
                # exp(a - b): one FFMA and ex2 under approx_math (b log2(e) hoisted where b is invariant)
                return f"sg_exp_sub({r(arg.left)}, {r(arg.right)})"
            return calls[n.func.id].format(*(r(a) for a in n.args))
        raise ExprError(f"cannot render {_describe(n)} here (not a validated expression of this kind)")

    return r(node)


def render_cxx(expr: Expr, names: Mapping[str, str]) -> str:
    """float32 C++ text; literals like ``2.0f``; functions call the template's ``sg_<name>`` helpers."""
    return _render(expr.tree, names, _FLOAT_SYMBOLS, lambda v: repr(v) + "f", _CXX_CALL)


def _require_int32(expr: Expr, ranges: Mapping[str, Interval] | None) -> None:
    if ranges is not None and (err := check_int32(expr, ranges)) is not None:
        raise err


def render_cxx_int(expr: Expr, names: Mapping[str, str], *, ranges: Mapping[str, Interval] | None = None) -> str:
    """C++ ``int`` text of an integer expression ('//' and '%' become sg_floordiv / sg_floormod).

    With ``ranges`` (every free name's [lo, hi]) the expression is refused (ExprError) unless every intermediate
    provably fits 32 bits over them (check_int32). The planners pass it at every call (the planner reports the
    problem with a location first; this is the backstop); tests/regressions checks that they do."""
    _require_int32(expr, ranges)
    return _render(expr.tree, names, _CXX_INT_SYMBOLS, None, {})


def render_jnp(expr: Expr, names: Mapping[str, str]) -> str:
    """jax.numpy source text (``jnp`` and ``jax`` must be imported); Python float literals."""
    return _render(expr.tree, names, _FLOAT_SYMBOLS, repr, _JNP_CALL)


def render_py_int(expr: Expr, names: Mapping[str, str], *, ranges: Mapping[str, Interval] | None = None) -> str:
    """Python source text of an integer expression (Pallas index maps and device ids: int32 tracers); refused
    unless every intermediate provably fits 32 bits over ``ranges`` (see render_cxx_int)."""
    _require_int32(expr, ranges)
    return _render(expr.tree, names, _PY_INT_SYMBOLS, None, {})
