"""Defect group 3 (issue 14): integer expressions checked in Python integers but computed in int32.

Before: an index map (map family) or the collective family's remote-ref device id whose intermediate value
overflows 32 bits passed the planner's exact (Python int) check, and the kernels (C++ int; Pallas int32 tracers)
computed something else: silent wrong results. E.g. `(i * M * M // (M * M), j)` at M = 8192 is (i, j) in Python
and garbage in int32; `(x * 1073741824 * 4 + x + 1) % 2` is the ring (x + 1) % 2 in Python, not in int32.

Now every intermediate is bounded by interval arithmetic over the whole grid (mesh) and one that may leave
[-(2^31 - 1), 2^31 - 1] is a located error naming the sub-expression and its range (rejected, not widened to
64 bits: the Pallas backend has no 64-bit ints); the int renderers refuse it too.
"""
from __future__ import annotations

import ast
import copy
import itertools
import random

import pytest

from conftest import ROOT
from schedgen.errors import SpecErrors
from schedgen.plan import plan
from schedgen.frontend import expr as ex
from schedgen.frontend import intmath, spelling
from schedgen.frontend.load import load_file
from schedgen.frontend.validate import validate_data
from schedgen.render import environment

DATA = ROOT / "tests" / "data"


def _plan(data, src):
    return plan(validate_data(data, src), src)


def _map(index_map: str, **sizes):
    data, src = load_file(DATA / "add_bf16.yaml")
    data = copy.deepcopy(data)
    data["op"]["sizes"].update(sizes)
    data["schedule"]["in_specs"]["x"]["index_map"] = index_map
    return data, src


@pytest.mark.parametrize("index_map, sizes, sub, lo_hi", [
    ("(i * M * M // (M * M), j)", {"M": 8192}, "i * M * M", "[0, 17112760320]"),
    ("((i + 2147483647) - 2147483647, j)", {}, "i + 2147483647", "[2147483647, 2147483774]"),
    ("(i, j - N * N // N + N * 1)", {"N": 65536}, "N * N", "[4294967296, 4294967296]"),
    ("(i, -(j * 65536 * 65536) + j)", {}, "j * 65536 * 65536", "[0, 64424509440]"),
])
def test_index_map_with_an_int32_overflowing_intermediate_is_rejected(index_map, sizes, sub, lo_hi):
    data, src = _map(index_map, **sizes)
    with pytest.raises(SpecErrors) as info:
        _plan(data, src)
    (line,) = info.value.lines()
    col = index_map.index(sub)
    assert f": schedule.in_specs.x.index_map: '{sub}' ranges over {lo_hi} on the grid" in line, line
    assert "32-bit int" in line and "rejected, not widened to 64 bits" in line
    # located at the sub-expression (the index map is a flow scalar in quotes on its line)
    text = (DATA / "add_bf16.yaml").read_text().splitlines()
    row = next(n for n, t in enumerate(text, 1) if t.strip().startswith("x: {block_shape"))
    assert line.split(":")[1:3] == [str(row), str(text[row - 1].index('"(i, j)"') + 2 + col)], line


def test_index_map_that_fits_int32_still_plans():
    data, src = _map("(i * 64 // 64 + M - M, j)")
    p = _plan(data, src)
    names = {"i": "g_i", "j": "g_j", "M": "S_M", "N": "S_N"}
    assert environment().filters["cxxint"](p.inputs[0].block_index[0], names) == \
        "((sg_floordiv((g_i * 64), 64) + S_M) - S_M)"


def test_collective_device_id_overflowing_int32_is_rejected():
    data, src = load_file(DATA / "collective_matmul_base.yaml")
    data = copy.deepcopy(data)
    data["schedule"]["collective"] = {"remote_refs": {"gather": {"device_id": "(x * 1073741824 * 4 + x + 1) % 2"}}}
    with pytest.raises(SpecErrors) as info:
        _plan(data, src)
    lines = info.value.lines()
    assert any(": schedule.collective.remote_refs.gather.device_id: 'x * 1073741824 * 4' ranges over "
               "[0, 4294967296] on the mesh (x in 0..1)" in ln for ln in lines), lines
    data["schedule"]["collective"]["remote_refs"]["gather"]["device_id"] = "(x * 1073741824 + x + 1) % 2"
    assert _plan(data, src).send_to == (1, 0)  # in range: planned


def test_renderers_refuse_what_does_not_fit():
    (e,) = ex.parse_index_map("(i * 65536 * 65536,)", grid_names=["i"], sizes=[])
    for render in (spelling.render_cxx_int, spelling.render_py_int):
        with pytest.raises(ex.ExprError, match="outside the 32-bit int range"):
            render(e, {"i": "g_i"}, ranges={"i": (0, 3)})


def test_every_planner_call_of_an_int_renderer_passes_ranges():
    calls = 0
    for path in (ROOT / "schedgen").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                    "render_cxx_int", "render_py_int"):
                calls += 1
                assert any(k.arg == "ranges" for k in node.keywords), f"{path}:{node.lineno} renders without ranges"
    assert calls >= 2   # the render filters cxxint and pyint (schedgen/render): plans keep trees, never int text


def _random_tree(rng: random.Random, names, depth: int) -> str:
    if depth == 0 or rng.random() < 0.3:
        return rng.choice(list(names) + [str(rng.randint(-9, 9)), str(rng.randint(-100000, 100000))])
    if rng.random() < 0.1:
        return f"-({_random_tree(rng, names, depth - 1)})"
    op = rng.choice(["+", "-", "*", "//", "%"])
    return f"({_random_tree(rng, names, depth - 1)} {op} {_random_tree(rng, names, depth - 1)})"


def test_interval_bounds_contain_every_value_of_every_sub_expression():
    """Soundness of int_bounds: exhaustive evaluation of random expressions never leaves a node's interval."""
    rng = random.Random(14)
    ranges = {"i": (0, 5), "j": (0, 3), "M": (7, 7)}
    checked = 0
    for _ in range(300):
        text = _random_tree(rng, ranges, 4)
        try:
            e = ex.parse_int_expr(text, names=ranges)
        except ex.ExprError:   # a literal division by zero
            continue
        bounds = intmath.int_bounds(e, ranges)
        for point in itertools.product(range(6), range(4)):
            env = {"i": point[0], "j": point[1], "M": 7}
            for node, (lo, hi) in bounds:
                try:
                    v = ex.eval_int(ex.Expr("", node, frozenset()), env)
                except ex.ExprError:
                    continue   # a division by zero at this point: nothing computed
                assert lo <= v <= hi, (text, ast.unparse(node), point, v, (lo, hi))
                checked += 1
    assert checked > 10_000
