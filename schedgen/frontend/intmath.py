"""Integer expressions as the kernels compute them, in 32 bits: bounds of every intermediate over given ranges
(interval arithmetic over the validated tree), the int32 check that says where an expression can overflow,
vectorized evaluation over a whole grid, and the affine form of an index map."""
from __future__ import annotations

import ast
import re
from collections.abc import Mapping

import numpy as np

from .expr import MAX_INT, _INT_OPS, Expr, ExprError, _describe, _literal_problem


# Generated index math is 32-bit (C++ ``int``; Pallas int32 tracers, and jax has no 64-bit integers without
# jax_enable_x64). Every intermediate must stay in [-INT32_BOUND, INT32_BOUND]: symmetric, so INT_MIN never
# appears and INT_MIN // -1, INT_MIN % -1 (undefined in C++) cannot happen.
INT32_BOUND = MAX_INT


Interval = tuple[int, int]


def _div_bounds(a: Interval, b: Interval) -> Interval:
    """Bounds of a // b (floor) for a in ``a``, b in ``b`` with b != 0 (an always-zero divisor bounds to a)."""
    parts = [p for p in ((b[0], min(b[1], -1)), (max(b[0], 1), b[1])) if p[0] <= p[1]]
    if not parts:  # the divisor is always 0: a division by zero, reported by evaluation; bound by |a|
        m = max(abs(a[0]), abs(a[1]))
        return -m, m
    # floor(x / y) is monotone in x and in y on a box where y keeps its sign: the corners are the extremes
    values = [x // y for lo, hi in parts for x in a for y in (lo, hi)]
    return min(values), max(values)


def _mod_bounds(a: Interval, b: Interval) -> Interval:
    """Bounds of a % b (Python: the sign of the divisor, |result| < |b|)."""
    if b[0] > 0:
        return (0, min(a[1], b[1] - 1)) if a[0] >= 0 else (0, b[1] - 1)
    if b[1] < 0:
        return (max(a[0], b[0] + 1), 0) if a[1] <= 0 else (b[0] + 1, 0)
    return min(b[0] + 1, 0), max(b[1] - 1, 0)


def int_bounds(expr: Expr, ranges: Mapping[str, Interval]) -> list[tuple[ast.expr, Interval]]:
    """Interval bounds of every node of an integer expression, innermost first (post-order).

    ``ranges`` gives each free name's [lo, hi] (a grid name over [0, g - 1], a size as [v, v]). Exact for the
    leaves, sound (possibly wider than reachable) for the operators."""
    out: list[tuple[ast.expr, Interval]] = []

    def b(node: ast.expr) -> Interval:
        if isinstance(node, ast.Constant) and _literal_problem(node.value, True) is None:
            r = (node.value, node.value)
        elif isinstance(node, ast.Name):
            lo, hi = ranges[node.id]
            r = (int(lo), int(hi))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
            x = b(node.operand)
            r = (-x[1], -x[0]) if isinstance(node.op, ast.USub) else x
        elif isinstance(node, ast.BinOp) and type(node.op) in _INT_OPS:
            x, y = b(node.left), b(node.right)
            if isinstance(node.op, ast.Add):
                r = (x[0] + y[0], x[1] + y[1])
            elif isinstance(node.op, ast.Sub):
                r = (x[0] - y[1], x[1] - y[0])
            elif isinstance(node.op, ast.Mult):
                c = [p * q for p in x for q in y]
                r = (min(c), max(c))
            elif isinstance(node.op, ast.FloorDiv):
                r = _div_bounds(x, y)
            else:
                r = _mod_bounds(x, y)
        else:
            raise ExprError(f"{_describe(node)} cannot be bounded as an integer expression")
        out.append((node, r))
        return r

    b(expr.tree)
    return out


def _where(expr: Expr, node: ast.AST) -> tuple[int, int]:
    """(line, character column) of ``node`` in the expression's source text."""
    lines = re.split(r"\r\n?|\n", expr.source or expr.text)
    lineno, offset = getattr(node, "lineno", 1), getattr(node, "col_offset", 0)
    line = lines[lineno - 1] if 0 < lineno <= len(lines) else ""
    return lineno - 1, len(line.encode()[:offset].decode("utf-8", "ignore"))


def check_int32(expr: Expr, ranges: Mapping[str, Interval], over: str = "the grid") -> ExprError | None:
    """None when every intermediate of ``expr`` provably fits the generated code's 32-bit int math for all values
    in ``ranges``; else a located ExprError naming the first (innermost) sub-expression that may not, and its range.

    Rejected rather than computed in 64 bits: the Pallas backend has no 64-bit integers (jax_enable_x64 is off),
    and both backends must compute the same thing."""
    for node, (lo, hi) in int_bounds(expr, ranges):
        if lo < -INT32_BOUND or hi > INT32_BOUND:
            seg = ast.get_source_segment(expr.source or expr.text, node) or expr.text
            line, col = _where(expr, node)
            return ExprError(f"{seg!r} ranges over [{lo}, {hi}] on {over}, outside the 32-bit int range "
                             f"[{-INT32_BOUND}, {INT32_BOUND}] the generated index math computes in (both backends; "
                             f"rejected, not widened to 64 bits): reorder it so every intermediate fits, e.g. divide "
                             f"before multiplying", col, line)
    return None


class GridZeroDivision(ExprError):
    """A division or modulo by zero at ``index`` (a flat index into the evaluated arrays)."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


def eval_int_array(expr: Expr, env: Mapping[str, np.ndarray | int], shape: tuple[int, ...]) -> np.ndarray:
    """Exact evaluation over arrays (numpy int64, Python's floor semantics), broadcast to ``shape``.

    Callers bound the expression with check_int32 first, so no intermediate can overflow int64. A zero divisor
    raises GridZeroDivision with the flat index of its first occurrence."""

    def ev(node: ast.expr) -> np.ndarray:
        if isinstance(node, ast.Constant) and _literal_problem(node.value, True) is None:
            return np.int64(node.value)
        if isinstance(node, ast.Name):
            return np.asarray(env[node.id], dtype=np.int64)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and type(node.op) in _INT_OPS:
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, (ast.FloorDiv, ast.Mod)):
                zero = np.broadcast_to(b == 0, shape)
                if zero.any():
                    raise GridZeroDivision(f"division by zero in {expr.text!r}", int(np.argmax(zero.reshape(-1))))
                return np.floor_divide(a, b) if isinstance(node.op, ast.FloorDiv) else np.mod(a, b)
            return {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply}[type(node.op)](a, b)
        raise ExprError(f"{_describe(node)} cannot be evaluated as an integer expression")

    return np.broadcast_to(ev(expr.tree), shape)


def affine_form(expr: Expr, constants: Mapping[str, int]) -> dict[str, int] | None:
    """``expr`` as an exact affine form {name: coefficient, "": constant} over its names not in ``constants``, or
    None when it is not affine (a product of two variable terms, or // and % of a variable term)."""

    def f(node: ast.expr) -> dict[str, int] | None:
        if isinstance(node, ast.Constant) and _literal_problem(node.value, True) is None:
            return {"": node.value}
        if isinstance(node, ast.Name):
            return {"": int(constants[node.id])} if node.id in constants else {node.id: 1, "": 0}
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
            v = f(node.operand)
            return None if v is None else {k: -c for k, c in v.items()} if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and type(node.op) in _INT_OPS:
            a, b = f(node.left), f(node.right)
            if a is None or b is None:
                return None
            a_const, b_const = set(a) <= {""}, set(b) <= {""}
            if isinstance(node.op, (ast.Add, ast.Sub)):
                sign = 1 if isinstance(node.op, ast.Add) else -1
                return {k: a.get(k, 0) + sign * b.get(k, 0) for k in a.keys() | b.keys()}
            if isinstance(node.op, ast.Mult):
                if a_const:
                    return {k: a.get("", 0) * c for k, c in b.items()}
                if b_const:
                    return {k: b.get("", 0) * c for k, c in a.items()}
                return None
            if a_const and b_const and b.get("", 0) != 0:
                return {"": _INT_OPS[type(node.op)](a.get("", 0), b.get("", 0))}
            return None
        return None

    form = f(expr.tree)
    return None if form is None else {k: c for k, c in form.items() if c or k == ""}
