"""The one way a plan carries expressions: validated trees, never backend syntax.

A plan keeps each expression as a `PlanExpr`: the `frontend.expr.Expr` the front end checked, over the spec's own
names (and, for an integer expression, `.ranges`: the interval of every name it was proved to fit 32 bits over).
As a string a PlanExpr is its canonical source text (ast.unparse), so the plan's JSON stays plain, deterministic
and readable. Beside the expressions a plan keeps a {name: role} map (matmul's `epilogue_roles`, map's
`body_roles` and `index_roles`); the templates turn roles into identifiers with the `spelled` filter and spell the
trees with `cxx` / `jnp` (float math), `cxxint` / `pyint` (32-bit integer math) and constants with `cxxfloat`
(schedgen/render). Python helpers (explain, bench) use `spell` and frontend.expr's renderers the same way.
"""
from __future__ import annotations

import ast
from typing import Mapping

from ..frontend import expr as ex


class PlanExpr(str):
    """A validated expression kept in a plan: `.expr` is its checked tree over the spec's names (and `.ranges` the
    intervals an integer expression was proved to fit 32 bits over); as a string it is its canonical source text
    (ast.unparse)."""

    expr: ex.Expr
    ranges: Mapping[str, tuple[int, int]] | None

    def __new__(cls, expr: ex.Expr, ranges: Mapping[str, tuple[int, int]] | None = None) -> PlanExpr:
        self = super().__new__(cls, ast.unparse(expr.tree))
        self.expr = expr
        self.ranges = None if ranges is None else dict(ranges)
        return self

    def __reduce__(self):
        return (PlanExpr, (self.expr, self.ranges))


def spell(roles: Mapping[str, str], spelling: Mapping[str, str | Mapping[str, object]]) -> dict[str, str]:
    """Each name -> its identifier: the spelling of its role, a format string with `{}` standing for the name, or
    a {name: value} map (a name spelled as the number it stands for, e.g. a size in the Pallas index maps).
    Every role in `roles` must have a spelling."""
    missing = sorted(set(roles.values()) - set(spelling))
    if missing:
        raise ValueError(f"no spelling for the role(s) {', '.join(missing)}")
    out = {}
    for name, role in roles.items():
        how = spelling[role]
        out[name] = how.format(name) if isinstance(how, str) else str(how[name])
    return out
