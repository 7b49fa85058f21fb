"""Defect groups 1 and 5 of issue 41: the names a backward derives from the user's.

Before: a map body temporary of 62 characters with `backward: {}` validated, then explain, build, verify and tune
never returned (derive's namer lengthened `d_<name>` forever, every candidate past 63 characters being illegal); a
legal 59-63 character input, output or spec name failed the backward build as "a schedgen bug" (`grad_<input>`,
`g_<output>`, `<spec>_grad` passed 63 characters unchecked); a saved temporary named like a parameter of the
generated function (`out`, `key`, `i`: legal temporaries, reserved input names) failed the same way when the step
read it as an input. Now every derived name comes from autodiff/names.py (legal, at most 63 characters, unique,
found in a bounded number of tries) and a saved temporary a step cannot read under its own name is read as
`saved_<name>`.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cli import run_child, write  # noqa: E402
from schedgen.autodiff import names  # noqa: E402
from schedgen.build import derived_specs  # noqa: E402
from schedgen.frontend.expr import check_identifier  # noqa: E402
from schedgen.frontend.validate import load_spec  # noqa: E402
from schedgen.plan import plan  # noqa: E402
from schedgen.reserved import INPUT_NAME  # noqa: E402


def _long(stem: str, n: int) -> str:
    return (stem + "_" + "z" * 80)[:n]


def _map(temp: str = "h", name: str = "m", inp: str = "x", out: str = "o", backward: str = "{}") -> str:
    return f"""name: {name}
op:
  kind: map
  sizes: {{M: 256, N: 512}}
  inputs:
    {inp}: {{shape: [M, N], dtype: bf16}}
    y: {{shape: [M, N], dtype: bf16}}
  outputs:
    {out}: {{shape: [M, N], dtype: bf16}}
  body: |
    {temp} = {inp} * y
    {out} = gelu({temp}) * {inp}
backward: {backward}
"""


def _rowwise(temp: str, name: str = "r", backward: str = "{}") -> str:
    return f"""name: {name}
op:
  kind: rowwise
  sizes: {{M: 256, N: 1024}}
  constants: {{eps: 1.0e-5}}
  inputs:
    x: {{shape: [M, N], dtype: bf16}}
    w: {{shape: [N], dtype: bf16}}
  outputs:
    y: {{shape: [M, N], dtype: bf16}}
  body: |
    {temp} = rsqrt(mean(x * x) + eps)
    y = x * {temp} * w
backward: {backward}
"""


def _matmul(temp: str, name: str = "mm", bias: str = "bias", out: str = "y", backward: str = "{}") -> str:
    return f"""name: {name}
op:
  kind: matmul
  sizes: {{M: 256, N: 256, K: 256}}
  inputs:
    a: {{shape: [M, K], dtype: bf16}}
    b: {{shape: [N, K], dtype: bf16}}
    {bias}: {{shape: [N], dtype: f32}}
  outputs:
    {out}: {{shape: [M, N], dtype: bf16}}
  lhs: a
  rhs: b
  transpose_rhs: true
  epilogue: |
    {temp} = acc + {bias}
    {out} = gelu({temp})
backward: {backward}
"""


def _attention(q: str, o: str, name: str = "att", backward: str = "{}") -> str:
    return f"""name: {name}
op:
  kind: attention
  sizes: {{B: 1, S: 512, H: 2, D: 64}}
  inputs:
    {q}: {{shape: [B, S, H, D], dtype: bf16}}
    k: {{shape: [B, S, H, D], dtype: bf16}}
    v: {{shape: [B, S, H, D], dtype: bf16}}
  outputs:
    {o}: {{shape: [B, S, H, D], dtype: bf16}}
backward: {backward}
"""


def _grouped(x: str, w: str, out: str, name: str = "g", backward: str = "{}") -> str:
    return f"""name: {name}
op:
  kind: grouped_matmul
  groups: 4
  sizes:
    T: {{dynamic: true, max: 2048}}
    N: 512
    K: 256
  inputs:
    {x}: {{shape: [T, K], dtype: bf16}}
    {w}: {{shape: [4, N, K], dtype: bf16}}
  outputs:
    {out}: {{shape: [T, N], dtype: bf16}}
  lhs: {x}
  rhs: {w}
  transpose_rhs: true
  group_offsets: offs
  offsets_format: offsets
  epilogue: {out} = silu(acc)
backward: {backward}
"""


def _every_name(data) -> set[str]:
    """The names a derived spec defines: its own, sizes, constants, inputs, outputs, body / epilogue targets."""
    op = data["op"]
    found = {data["name"], *op.get("sizes", {}), *op.get("constants", {}), *op["inputs"], *op["outputs"]}
    for text in (op.get("body"), op.get("epilogue")):
        found |= {line.split("=")[0].strip() for line in (text or "").splitlines() if "=" in line}
    return found


def _derived_ok(tmp_path, text: str) -> None:
    """The spec's backward derives, validates and plans (what build does before it renders), with legal names."""
    spec, src = load_spec(str(write(tmp_path, text)))
    graph, forward, steps = derived_specs(spec, src)
    assert graph.steps
    plan(forward, src)
    for step in graph.steps:
        plan(steps[step.name], src)
        bad = {n: check_identifier(n) for n in _every_name(step.spec) if check_identifier(n)}
        assert not bad, bad
        assert not set(step.spec["op"]["inputs"]) & set(INPUT_NAME), step.spec["op"]["inputs"]


def test_explain_of_a_62_character_temporary_returns(tmp_path):
    """The reported case: explain never returned (the old namer's loop); now it shows the backward."""
    path = write(tmp_path, _map(temp="t" * 62))
    got = run_child("explain", str(path), timeout=120)
    assert got.returncode == 0, got.stderr
    assert "backward pass" in got.stdout and "grad_x" in got.stdout


@pytest.mark.parametrize("text", [
    _map(temp="t" * 62),
    _map(temp="t" * 63),
    _map(temp=_long("h", 60), backward=f"{{save: [{_long('h', 60)}]}}"),
    _map(name=_long("n", 63), inp=_long("x", 63), out=_long("o", 62)),
    _map(inp=_long("x", 59), out=_long("o", 61)),
    _rowwise(_long("r", 62)),
    _rowwise(_long("r", 63), name=_long("n", 63), backward=f"{{save: [{_long('r', 63)}]}}"),
    _matmul(_long("h", 62), name=_long("n", 63), bias=_long("b", 63), out=_long("y", 62)),
    _matmul(_long("h", 63), bias=_long("b", 60), backward=f"{{save: [{_long('h', 63)}]}}"),
    _matmul("h", name=_long("n", 62), backward="{save: recompute}"),
    _grouped(_long("x", 63), _long("w", 62), _long("o", 63), name=_long("n", 63)),
    _grouped(_long("x", 61), _long("w", 63), _long("o", 60), backward="{save: recompute}"),
    _attention(_long("q", 63), _long("o", 63), name=_long("n", 63)),
    _attention(_long("q", 62), _long("o", 62), name=_long("n", 62), backward="{save: recompute}"),
], ids=["map-temp62", "map-temp63", "map-saved60", "map-name63", "map-io59", "rowwise-temp62", "rowwise-saved63",
        "matmul-names63", "matmul-saved63", "matmul-recompute", "grouped-63", "grouped-recompute", "attention-63", "attention-recompute"])
def test_legal_long_names_build_their_backward(tmp_path, text):
    _derived_ok(tmp_path, text)


@pytest.mark.parametrize("temp", ["out", "key", "i", "lhs", "o"])
def test_a_saved_temporary_named_like_a_generated_parameter(tmp_path, temp):
    """A temporary may be named `out` (an input may not): the step reads it saved as `saved_out`."""
    out = "z" if temp == "o" else "o"
    _derived_ok(tmp_path, _map(temp=temp, out=out, backward=f"{{save: [{temp}]}}"))
    _derived_ok(tmp_path, _rowwise(temp, backward=f"{{save: [{temp}]}}"))
    _derived_ok(tmp_path, _matmul(temp, out=out if temp != "o" else "z", backward=f"{{save: [{temp}]}}"))


def test_fresh_is_legal_unique_and_bounded():
    base = "d_" + "t" * 62
    taken = {base[:63], *(base[:55] + str(k) for k in range(2, 200))}
    got = [names.fresh(base, taken) for _ in range(50)]
    assert len(set(got)) == 50 and all(check_identifier(n) is None and len(n) <= 63 for n in got)
    # a predicate refusing everything ends (the candidates are finite), it does not spin
    with pytest.raises(ValueError):
        names.fresh("x", set(), legal=lambda n: False)
    assert names.fresh("for", set()) == "for2"                    # a reserved word is skipped
    assert names.suffixed("n" * 63, "_grad") == "n" * 58 + "_grad"

