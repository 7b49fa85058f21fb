"""What users type from other libraries: dtype names (bfloat16, float16, float32, half, float) and function names
(swish for silu, max for maximum, ...) are read as schedgen's own; a near miss of a function name is suggested."""
from __future__ import annotations

import pytest

from schedgen.errors import SpecErrors
from schedgen.frontend import expr as ex
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan, to_json

SPEC = """name: alias_map
op:
  kind: map
  sizes: {M: 256, N: 512}
  inputs:
    x: {shape: [M, N], dtype: DT}
    y: {shape: [M, N], dtype: bf16}
  outputs:
    o: {shape: [M, N], dtype: bf16}
  body: o = BODY
"""


def _spec(tmp_path, dtype="bf16", body="silu(x) + maximum(x, y)"):
    path = tmp_path / "alias_map.yaml"
    path.write_text(SPEC.replace("DT", dtype).replace("BODY", body))
    return load_spec(str(path))


@pytest.mark.parametrize("alias, dtype", [("bfloat16", "bf16"), ("float16", "f16"), ("half", "f16"),
                                          ("float32", "f32"), ("float", "f32"), ("fp32", "f32")])
def test_dtype_aliases_are_normalised(tmp_path, alias, dtype):
    spec, _ = _spec(tmp_path, dtype=alias)
    assert spec.op.inputs["x"].dtype == dtype


def test_a_misspelt_dtype_is_still_a_located_error(tmp_path):
    with pytest.raises(SpecErrors) as info:
        _spec(tmp_path, dtype="bfloat61")
    assert [p.path for p in info.value.problems] == [("op", "inputs", "x", "dtype")]
    assert info.value.problems[0].message.endswith("(got 'bfloat61'); also read as those: bfloat16, float16, half, "
                                                   "fp16, float32, float, fp32, float8_e4m3fn, float8_e5m2")


def test_function_aliases_plan_as_the_functions(tmp_path):
    spec, src = _spec(tmp_path, body="swish(x) + max(x, y)")
    want, src2 = _spec(tmp_path)
    assert to_json(plan(spec, src)) == to_json(plan(want, src2))


@pytest.mark.parametrize("typed, suggested", [("sliu", "silu"), ("Gelu", "gelu"), ("sigmod", "sigmoid"),
                                              ("swissh", "silu")])
def test_a_near_miss_is_suggested(typed, suggested):
    with pytest.raises(ex.ExprError, match=rf"function '{typed}' is not allowed \(did you mean {suggested}\?\)"):
        ex.parse_body(f"o = {typed}(x)", inputs=["x"], outputs=["o"], constants=[])


def test_no_suggestion_for_a_far_miss():
    with pytest.raises(ex.ExprError) as info:
        ex.parse_body("o = conv(x)", inputs=["x"], outputs=["o"], constants=[])
    assert "did you mean" not in info.value.message
