"""No plan carries backend syntax (issue 13 item 3): a plan keeps numbers, validated names and validated
expressions (PlanExpr, shown as their canonical source over the spec's names); C++ and jnp text exists only in
what the templates render. Checked on the plan JSON of every bundled spec, every string in it."""
from __future__ import annotations

import json
import re

import pytest

from conftest import spec_files
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan, to_json

# What C++ or jax text looks like, and no plan string may: casts and scopes, jax/jnp/lax calls, the templates'
# sg_ helpers and __ intrinsics / CUDA types, float literals with an f32 suffix (2.0f, 0x1.8p+1f), C++ '->'/';'.
BACKEND_SYNTAX = {
    "C++ cast": re.compile(r"\b(static|reinterpret|const|bit)_cast\b"),
    "C++ scope": re.compile(r"::"),
    "jax module": re.compile(r"\b(jnp|jax|lax|plgpu|pl)\."),
    "template helper": re.compile(r"\bsg_\w+\("),
    "dunder": re.compile(r"__"),
    "f32 literal": re.compile(r"(\d|p[+-]\d+)f\b"),
    "C++ statement": re.compile(r";|->"),
}


def _strings(value, where="$"):
    """Every string in a JSON value (keys too), with where it is."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield f"{where}.{k} (key)", k
            yield from _strings(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{where}[{i}]")


def backend_syntax(data) -> list[str]:
    return [f"{where}: {kind} in {text!r}" for where, text in _strings(data)
            for kind, pattern in BACKEND_SYNTAX.items() if pattern.search(text)]


@pytest.mark.parametrize("path", spec_files(), ids=lambda p: p.stem)
def test_no_plan_json_carries_backend_syntax(path):
    spec, src = load_spec(str(path))
    assert backend_syntax(json.loads(to_json(plan(spec, src)))) == []


@pytest.mark.parametrize("text", ["static_cast<float>(x)", "jnp.exp(v_x)", "jax.nn.gelu(t)", "__nv_bfloat16",
                                  "0x1.99999a0000000p-4f", "2.0f", "sg_floordiv(g_i, 2)", "std::min", "r = x;"])
def test_the_check_sees_backend_syntax(text):
    assert backend_syntax({"field": [text]}) != []


@pytest.mark.parametrize("text", ["x * w + b", "gelu(h)", "(i, j)", "i + 0", "j * 2 // 2", "uint16_t", "in_x",
                                  "map_add_bf16_64x128_s4_wg1", "mbarrier per stage: TMA loads landed", "g_i"])
def test_the_check_passes_spec_syntax_and_plain_names(text):
    assert backend_syntax({"field": [text]}) == []


@pytest.mark.parametrize("path", spec_files("map"), ids=lambda p: p.stem)
def test_the_map_plan_keeps_only_plain_identifiers_for_names(path):
    """What the map plan keeps spelled: operand identifiers (role prefix + the validated name), the dtype's C
    storage type, the grid variables; each one plain identifier, nothing an expression could hide in."""
    spec, src = load_spec(str(path))
    p = plan(spec, src)
    ident = re.compile(r"\A[A-Za-z][A-Za-z0-9_]*\Z")
    for o in p.operands:
        assert ident.match(o.cname) and o.cname == f"{o.role}_{o.name}"
        assert o.ctype in ("uint16_t", "uint8_t", "float")
    assert all(ident.match(g) for g in p.grid_vars)
