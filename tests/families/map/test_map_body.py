"""The map plan carries its body as validated expressions (PlanExpr, schedgen/plan/exprs.py) over the spec's names
with the role of every name, rendered to C++ and jnp only by the templates' filters (spelled, cxx, jnp): the text
is exactly what schedgen.frontend.expr renders from the validated AST, and the plan itself holds no backend
syntax."""
from __future__ import annotations

import ast
import json
import pickle

import pytest

from conftest import SPECS_DIR
from schedgen.frontend import expr as ex
from schedgen.frontend import spelling
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan, to_json
from schedgen.plan.exprs import PlanExpr
from schedgen.render import render

BODIES = [
    "o = x + y",
    "o = -x * 2 + +y / 3.5",
    "o = x ** 2 + y ** 3 - (x - y) ** 4",
    "t = x * alpha\no = t - y * alpha",
    "o = clamp(x, -1.0, 1.0) + minimum(x, y) * maximum(x, 0.5)",
    "o = " + " + ".join(f"{fn}(x)" for fn, n in ex.FUNCTIONS.items() if n == 1 and fn != "gelu_erf"),
    "h = sigmoid(x) * y\ng = h * h\no = square(g) + 1e-3",
]

SPEC = """\
name: body_case
op:
  kind: map
  sizes: {{N: 4096}}
  constants: {{alpha: 0.1}}
  inputs:
    x: {{shape: [N], dtype: f32}}
    y: {{shape: [N], dtype: f32}}
  outputs:
    o: {{shape: [N], dtype: f32}}
  body: {body}
schedule:
  out_specs:
    o: {{block_shape: [256]}}
"""


def _plan(tmp_path, body: str):
    path = tmp_path / "body_case.yaml"
    path.write_text(SPEC.format(body=json.dumps(body)))
    spec, src = load_spec(str(path))
    return plan(spec, src)


def _unparsed(body: ex.Body) -> list[tuple[str, str]]:
    return [(t, ast.dump(v.tree)) for t, v in body.statements]


@pytest.mark.parametrize("text", BODIES)
def test_the_plan_keeps_the_validated_body_and_the_templates_spell_it(tmp_path, text):
    p = _plan(tmp_path, text)
    body = ex.parse_body(text, inputs=["x", "y"], outputs=["o"], constants=["alpha"])
    assert [t for t, _ in p.body] == [t for t, _ in body.statements]
    assert all(isinstance(v, PlanExpr) for _, v in p.body)
    # the plan's JSON text is faithful: parsed again, it is the same validated body
    data = json.loads(to_json(p))
    again = ex.parse_body("\n".join(f"{t} = {v}" for t, v in data["body"]), inputs=["x", "y"], outputs=["o"],
                          constants=["alpha"])
    assert _unparsed(again) == _unparsed(body)
    assert data["body_roles"] == {"x": "operand", "y": "operand", "alpha": "constant", "o": "output",
                                  **{t: "temporary" for t, _ in body.statements if t != "o"}}
    # each language's text is exactly the validated expression's, through that template's identifiers
    cxx_names = {"x": "v_x", "y": "v_y", "alpha": "c_alpha"}
    jnp_names = {"x": "v_x", "y": "v_y", "alpha": "_c_alpha"}
    cuda, pallas = render(p, "cuda"), render(p, "pallas")
    for target, value in body.statements:
        ident = "r_o" if target == "o" else f"t_{target}"
        assert f"        const float {ident} = {spelling.render_cxx(value, cxx_names)};\n" in cuda
        assert f"        {ident} = {spelling.render_jnp(value, jnp_names)}\n" in pallas
        cxx_names[target] = jnp_names[target] = ident
    # a plan pickles with its trees (the build cache and worker processes)
    back = pickle.loads(pickle.dumps(p))
    assert [(t, v.expr.tree.__class__, str(v)) for t, v in back.body] == \
        [(t, v.expr.tree.__class__, str(v)) for t, v in p.body]


def test_plan_carries_validated_trees_and_the_templates_render_them():
    spec, src = load_spec(str(SPECS_DIR / "gelu_bias_bf16.yaml"))
    p = plan(spec, src)
    assert p.body == (("h", "x * w + b"), ("y", "gelu(h)"))
    assert p.body_roles == {"x": "operand", "w": "operand", "b": "operand", "h": "temporary", "y": "output"}
    data = json.loads(to_json(p))
    for gone in ("body_cxx", "body_jnp", "temporaries", "constants_cxx"):
        assert gone not in data
    assert "sg_gelu" not in to_json(p) and "jax.nn" not in to_json(p)       # no backend syntax in the plan
    assert "const float r_y = sg_gelu(t_h);" in render(p, "cuda")
    assert "r_y = jax.nn.gelu(t_h, approximate=True)" in render(p, "pallas")


def test_constants_are_spelled_by_the_templates(tmp_path):
    p = _plan(tmp_path, "o = x * alpha + y")
    assert p.constants == {"alpha": 0.1}
    assert "[[maybe_unused]] constexpr float c_alpha = 0x1.99999a0000000p-4f;\n" in render(p, "cuda")
    assert "_c_alpha = 0.1\n" in render(p, "pallas")
