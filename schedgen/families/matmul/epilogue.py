"""The validated expressions a matmul (or collective) plan keeps, and the epilogue's render-time helpers.

A plan holds no backend syntax: the epilogue is kept as its validated statements over the spec's names
(`PlanExpr`: the checked tree; as a string, its canonical source text, which is what the plan's JSON shows), with
the role of every name it reads or writes (`epilogue_roles`). The templates spell them through the render filters
(schedgen/render: `spelled`, `cxx`, `jnp`, `pyint`, `cxxfloat`); the Python helpers here (explain, bench) spell them
the way the Pallas template does.
"""
from __future__ import annotations

import ast
from typing import Mapping

from ...frontend import expr as ex

# The identifiers the Pallas template gives the epilogue's names, by role (the CUDA template: c_{} for constants).
JNP_SPELLING = {"accumulator": "v_acc", "operand": "v_{}", "constant": "_c_{}", "temporary": "t_{}",
                "output": "r_out"}


class PlanExpr(str):
    """A validated expression kept in a plan: `.expr` is its checked tree over the spec's names (and `.ranges` the
    intervals an integer expression was proved to fit 32 bits over); as a string it is its canonical source text
    (ast.unparse), so the plan's JSON stays plain, deterministic and readable."""

    expr: ex.Expr
    ranges: Mapping[str, tuple[int, int]] | None

    def __new__(cls, expr: ex.Expr, ranges: Mapping[str, tuple[int, int]] | None = None) -> PlanExpr:
        self = super().__new__(cls, ast.unparse(expr.tree))
        self.expr = expr
        self.ranges = None if ranges is None else dict(ranges)
        return self

    def __reduce__(self):
        return (PlanExpr, (self.expr, self.ranges))


def spell(roles: Mapping[str, str], spelling: Mapping[str, str]) -> dict[str, str]:
    """Each name -> its identifier: the spelling of its role, with `{}` standing for the name."""
    return {name: spelling[role].format(name) for name, role in roles.items()}


def epilogue_jnp(plan) -> tuple[tuple[str, str], ...]:
    """The epilogue as the Pallas template spells it: (target, jnp expression) over v_acc, v_<operand>, _c_<const>,
    t_<temporary>; the output is r_out."""
    names = spell(plan.epilogue_roles, JNP_SPELLING)
    return tuple((names[target], ex.render_jnp(value.expr, names)) for target, value in plan.epilogue)


def epilogue_text(plan) -> list[str]:
    """The epilogue's statements over the spec's names, with only the parentheses they need (jnp's spelling of the
    functions, without the `jnp.` prefix)."""
    names = {name: name for name in plan.epilogue_roles}
    return [f"{target} = " + ast.unparse(ast.parse(ex.render_jnp(value.expr, names), mode="eval")).replace("jnp.", "")
            for target, value in plan.epilogue]
