"""The map plan carries its body as expression trees (schedgen/frontend/trees.py), rendered to C++ and jnp only by the
templates' filters: the text is exactly what schedgen.frontend.expr renders from the validated AST, and the plan
itself holds no backend syntax."""
from __future__ import annotations

import json

import pytest

from conftest import SPECS_DIR
from schedgen.frontend import trees as mb
from schedgen.frontend import expr as ex
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan, to_json
from schedgen.render import environment, render

BODIES = [
    "o = x + y",
    "o = -x * 2 + +y / 3.5",
    "o = x ** 2 + y ** 3 - (x - y) ** 4",
    "t = x * alpha\no = t - y * alpha",
    "o = clamp(x, -1.0, 1.0) + minimum(x, y) * maximum(x, 0.5)",
    "o = " + " + ".join(f"{fn}(x)" for fn, n in ex.FUNCTIONS.items() if n == 1),
    "h = sigmoid(x) * y\ng = h * h\no = square(g) + 1e-3",
]


@pytest.mark.parametrize("text", BODIES)
def test_trees_render_as_the_validated_expressions(text):
    body = ex.parse_body(text, inputs=["x", "y"], outputs=["o"], constants=["alpha"])
    cxx_names = {"x": "v_x", "y": "v_y", "alpha": "c_alpha"}
    jnp_names = {"x": "v_x", "y": "v_y", "alpha": "_c_alpha"}
    for target, value in body.statements:
        tree = mb.tree_of(value.tree, cxx_names, jnp_names)
        assert mb.cxx(tree) == ex.render_cxx(value, cxx_names)
        assert mb.jnp(tree) == ex.render_jnp(value, jnp_names)
        # plain data: through JSON (tuples become lists, as in the build manifest) it renders the same
        back = json.loads(json.dumps(tree))
        assert mb.cxx(back) == mb.cxx(tree) and mb.jnp(back) == mb.jnp(tree)
        cxx_names[target] = jnp_names[target] = f"t_{target}"


def test_plan_carries_trees_and_the_templates_render_them():
    spec, src = load_spec(str(SPECS_DIR / "gelu_bias_bf16.yaml"))
    p = plan(spec, src)
    assert [s.target for s in p.body] == ["t_h", "r_y"]
    assert p.body[1].value == ("call", "gelu", ("name", "t_h", "t_h"))
    data = json.loads(to_json(p))
    assert "body_cxx" not in data and "body_jnp" not in data
    assert "sg_gelu" not in to_json(p) and "jax.nn" not in to_json(p)       # no backend syntax in the plan
    assert "const float r_y = sg_gelu(t_h);" in render(p, "cuda")
    assert "r_y = jax.nn.gelu(t_h, approximate=True)" in render(p, "pallas")
    assert environment().filters["tree_cxx"] is mb.cxx and environment().filters["tree_jnp"] is mb.jnp


def test_a_tree_that_is_not_a_body_is_refused():
    with pytest.raises(ValueError, match="not a map body tree"):
        mb.cxx(("lambda", "x"))
    with pytest.raises(ex.ExprError, match="cannot render"):
        mb.cxx(("call", "print", ("lit", 1.0)))    # an unknown function: the renderer re-checks every node
