"""The render filters that spell a plan's validated expressions (schedgen/render: spelled, cxx, jnp, cxxint, pyint,
cxxfloat): what they write, and what they refuse."""
from __future__ import annotations

import pytest

import ast

from schedgen.plan.exprs import PlanExpr
from schedgen.frontend import expr as ex
from schedgen.render import environment


def _render(source: str, **ctx) -> str:
    return environment().from_string(source).render(**ctx)


def _body_value(text: str, **kw):
    body = ex.parse_body(text, **kw)
    return PlanExpr(body.statements[-1][1])


def test_cxx_and_jnp_spell_a_tree_through_the_names():
    value = _body_value("out = gelu(acc + b) * k", inputs=["acc", "b"], outputs=["out"], constants=["k"])
    assert value == "gelu(acc + b) * k"          # the plan's text: the canonical source over the spec's names
    names = {"acc": "v_acc", "b": "v_b", "k": "c_k"}
    assert _render("{{ v | cxx(n) }}", v=value, n=names) == "(sg_gelu((v_acc + v_b)) * c_k)"
    assert _render("{{ v | jnp(n) }}", v=value, n={**names, "k": "_c_k"}) == \
        "(jax.nn.gelu((v_acc + v_b), approximate=True) * _c_k)"
    with pytest.raises(KeyError):                 # a name the template did not spell
        _render("{{ v | cxx(n) }}", v=value, n={"acc": "v_acc"})
    with pytest.raises(TypeError, match="not a validated expression"):
        _render("{{ v | cxx(n) }}", v="acc + b", n=names)


def test_spelled_maps_roles_to_identifiers_and_needs_every_role():
    roles = {"acc": "accumulator", "b": "operand", "t": "temporary"}
    assert _render("{{ (r | spelled(accumulator='v_acc', operand='v_{}', temporary='t_{}')).items() | list }}",
                   r=roles) == "[('acc', 'v_acc'), ('b', 'v_b'), ('t', 't_t')]"
    with pytest.raises(ValueError, match="no spelling for the role.s. temporary"):
        _render("{{ r | spelled(accumulator='v_acc', operand='v_{}') }}", r=roles)


def test_spelled_takes_a_map_for_names_spelled_as_their_values():
    roles = {"i": "grid", "M": "size", "N": "size"}
    assert _render("{{ (r | spelled(grid='g_{}', size=s)).items() | list }}", r=roles, s={"M": 64, "N": 8}) == \
        "[('i', 'g_i'), ('M', '64'), ('N', '8')]"


def test_cxx_rechecks_every_node_of_the_tree():
    value = _body_value("out = acc + b", inputs=["acc", "b"], outputs=["out"], constants=[])
    value.expr.tree.right = ast.Call(ast.Name("print", ast.Load()), [ast.Constant(1.0)], [])  # not validated
    with pytest.raises(ex.ExprError, match="cannot render"):
        _render("{{ v | cxx(n) }}", v=value, n={"acc": "v_acc", "b": "v_b"})


def test_pyint_checks_the_ranges_the_expression_carries():
    expr = ex.parse_int_expr("(x - 1) % 4", names=["x"])
    assert _render("{{ v | pyint({'x': 'dev'}) }}", v=PlanExpr(expr, {"x": (0, 3)})) == "((dev - 1) % 4)"
    with pytest.raises(ValueError, match="carries no ranges"):
        _render("{{ v | pyint({'x': 'dev'}) }}", v=PlanExpr(expr))
    big = ex.parse_int_expr("x * 1073741824 * 4", names=["x"])
    with pytest.raises(ex.ExprError):            # the backstop: refused unless it fits 32 bits over its ranges
        _render("{{ v | pyint({'x': 'dev'}) }}", v=PlanExpr(big, {"x": (0, 3)}))


def test_cxxint_is_cxx_int_math_and_checks_the_ranges():
    expr = ex.parse_int_expr("(i * 2 - 1) // 2 + M % 3", names=["i", "M"])
    names = {"i": "g_i", "M": "S_M"}
    assert _render("{{ v | cxxint(n) }}", v=PlanExpr(expr, {"i": (0, 7), "M": (64, 64)}), n=names) == \
        "(sg_floordiv(((g_i * 2) - 1), 2) + sg_floormod(S_M, 3))"
    with pytest.raises(ValueError, match="carries no ranges"):
        _render("{{ v | cxxint(n) }}", v=PlanExpr(expr), n=names)
    big = ex.parse_int_expr("i * 1073741824 * 4", names=["i"])
    with pytest.raises(ex.ExprError):
        _render("{{ v | cxxint(n) }}", v=PlanExpr(big, {"i": (0, 3)}), n=names)


def test_cxxfloat_is_the_exact_float32_literal():
    assert _render("{{ 0.1 | cxxfloat }} {{ -1.25 | cxxfloat }} {{ 0.0 | cxxfloat }}") == \
        "0x1.99999a0000000p-4f -0x1.4000000000000p+0f 0.0f"
