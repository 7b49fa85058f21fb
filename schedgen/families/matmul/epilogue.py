"""The validated expressions a matmul (or collective) plan keeps, and the epilogue's render-time helpers.

A plan holds no backend syntax: the epilogue is kept as its validated statements over the spec's names
(`PlanExpr`, schedgen/plan/exprs.py: the one way every plan carries expressions), with the role of every name it
reads or writes (`epilogue_roles`). The templates spell them through the render filters (schedgen/render:
`spelled`, `cxx`, `jnp`, `pyint`, `cxxfloat`); the Python helpers here (explain, bench) spell them the way the
Pallas template does.
"""
from __future__ import annotations

import ast

from ...frontend import spelling
from ...plan.exprs import spell

# The identifiers the Pallas template gives the epilogue's names, by role (the CUDA template: c_{} for constants).
JNP_SPELLING = {"accumulator": "v_acc", "operand": "v_{}", "constant": "_c_{}", "temporary": "t_{}",
                "output": "r_out"}


def epilogue_jnp(plan) -> tuple[tuple[str, str], ...]:
    """The epilogue as the Pallas template spells it: (target, jnp expression) over v_acc, v_<operand>, _c_<const>,
    t_<temporary>; the output is r_out."""
    names = spell(plan.epilogue_roles, JNP_SPELLING)
    return tuple((names[target], spelling.render_jnp(value.expr, names)) for target, value in plan.epilogue)


def epilogue_text(plan) -> list[str]:
    """The epilogue's statements over the spec's names, with only the parentheses they need (jnp's spelling of the
    functions, without the `jnp.` prefix)."""
    names = {name: name for name in plan.epilogue_roles}
    return [f"{target} = " + ast.unparse(ast.parse(spelling.render_jnp(value.expr, names), mode="eval")).replace("jnp.", "")
            for target, value in plan.epilogue]
