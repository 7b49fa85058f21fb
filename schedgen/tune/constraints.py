"""Constraints of a tune section: comparisons over knob names and sizes, parsed with ast against the specs'
integer-expression whitelist; nothing is eval'ed."""
from __future__ import annotations

import ast
import operator
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ..frontend import expr as ex

_CMP = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Eq: operator.eq,
        ast.NotEq: operator.ne}
_CONSTRAINT_HELP = ("a constraint is a comparison of integer expressions over knob names and sizes, e.g. "
                    "'tile_m * tile_n <= 32768'; join comparisons with and / or / not; string knobs compare with "
                    "== and != against quoted strings")


@dataclass(frozen=True)
class Constraint:
    text: str
    test: Callable[[Mapping[str, Any]], bool]
    names: frozenset


def parse_constraint(text: str, int_names: Sequence[str], str_names: Sequence[str]) -> Constraint:
    """Parse one constraint with Python's ast; every arithmetic operand goes through the specs'
    integer-expression whitelist (spec/expr.py). Raises ExprError (column inside `text`)."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as err:
        raise ex.ExprError(f"syntax error: {err.msg}; {_CONSTRAINT_HELP}", max(0, (err.offset or 1) - 1)) from None
    used: set[str] = set()

    def operand(node: ast.expr) -> tuple[str, Callable]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            value = node.value
            return "str", lambda env: value
        if isinstance(node, ast.Name) and node.id in str_names:
            name = node.id
            used.add(name)
            return "str", lambda env: env[name]
        seg = ast.get_source_segment(text, node) or ""
        try:
            e = ex.parse_int_expr(seg, names=list(int_names))
        except ex.ExprError as err:
            raise ex.ExprError(err.message, node.col_offset + err.col) from None
        used.update(e.names)
        return "int", lambda env: ex.eval_int(e, env)

    def build(node: ast.expr) -> Callable[[Mapping[str, Any]], bool]:
        if isinstance(node, ast.BoolOp):
            parts = [build(v) for v in node.values]
            if isinstance(node.op, ast.And):
                return lambda env: all(p(env) for p in parts)
            return lambda env: any(p(env) for p in parts)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = build(node.operand)
            return lambda env: not inner(env)
        if isinstance(node, ast.Compare):
            sides = [operand(n) for n in [node.left, *node.comparators]]
            ops = []
            for op, (lk, _), (rk, _), rnode in zip(node.ops, sides, sides[1:], node.comparators):
                if type(op) not in _CMP:
                    raise ex.ExprError(f"comparison '{type(op).__name__}' is not allowed; {_CONSTRAINT_HELP}",
                                       rnode.col_offset)
                if lk != rk:
                    raise ex.ExprError("compares a string with a number", rnode.col_offset)
                if lk == "str" and type(op) not in (ast.Eq, ast.NotEq):
                    raise ex.ExprError("strings compare with == and != only", rnode.col_offset)
                ops.append(_CMP[type(op)])
            fns = [f for _, f in sides]
            return lambda env: all(op(a(env), b(env)) for op, a, b in zip(ops, fns, fns[1:]))
        raise ex.ExprError(_CONSTRAINT_HELP, getattr(node, "col_offset", 0))

    return Constraint(text, build(tree.body), frozenset(used))
