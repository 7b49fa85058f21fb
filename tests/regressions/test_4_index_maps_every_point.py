"""Defect group 4 (issue 14): large grids were checked at sample points only.

Before: `_check_index_map` (schedgen/plan/map.py) evaluated every grid point up to 65,536 points and above that
only 0, 1, g/2, g-1 per dimension, so a wrong index map was accepted on a big grid (and rejected on a small one),
and a division by zero at an unsampled grid point reached the kernel.

Now a map is proved for every grid point: affine components are compared exactly as affine forms (any grid
size); anything else is evaluated at every point (numpy int64, chunked) up to 2^26 points, and rejected above
that with a message saying what to write.
"""
from __future__ import annotations

import copy


from conftest import ROOT
from schedgen.errors import SpecErrors
from schedgen.plan import plan
MAX_EXHAUSTIVE_POINTS = 1 << 26   # schedgen.families.map.operands.MAX_EXHAUSTIVE_POINTS (a literal: the test must run on the old code too)
from schedgen.frontend.load import load_file
from schedgen.frontend.validate import validate_data

BIG = {"M": 65536, "N": 65536}          # 2048 x 256 = 524,288 grid points (> 65,536: sampled before)


def _map(index_map: str, sizes=BIG, block=(32, 256)):
    data, src = load_file(ROOT / "tests" / "data" / "add_bf16.yaml")
    data = copy.deepcopy(data)
    data["op"]["sizes"].update(sizes)
    for group in ("in_specs", "out_specs"):
        for spec in data["schedule"][group].values():
            spec["block_shape"] = list(block)
    data["schedule"]["in_specs"]["x"]["index_map"] = index_map
    return data, src


def _lines(data, src) -> list[str]:
    try:
        plan(validate_data(data, src), src)
    except SpecErrors as e:
        return e.lines()
    return []


def test_wrong_block_at_one_unsampled_point_of_a_big_grid_is_rejected():
    # (i + (i + 1997) // 2000 - (i + 1998) // 2000) is i except where i % 2000 == 2: first at (2, 0)
    lines = _lines(*_map("(i + (i + 1997) // 2000 - (i + 1998) // 2000, j)"))
    assert len(lines) == 1 and ": schedule.in_specs.x.index_map: index_map (i + (i + 1997) // 2000 - " in lines[0]
    assert "sends grid point (2, 0) to block (1, 0) of 'x', but the elementwise body reads block (2, 0)" in lines[0]


def test_division_by_zero_at_one_unsampled_point_of_a_big_grid_is_rejected():
    lines = _lines(*_map("(i + j // (i - 1000) * 0, j)"))
    assert len(lines) == 1 and lines[0].endswith(
        "schedule.in_specs.x.index_map: division by zero in 'i + j // (i - 1000) * 0' at grid point (1000, 0)"), lines


def test_right_maps_on_big_grids_are_accepted():
    assert _lines(*_map("(i + N - N, j * 1)")) == []                 # affine: proved as a form
    assert _lines(*_map("(i // 1, j % 100000)")) == []               # not affine: every point evaluated


def test_unprovable_map_on_a_grid_past_the_exhaustive_bound_is_rejected_with_advice():
    sizes, block = {"M": 131072, "N": 131072}, (8, 16)                # 16384 x 8192 = 2^27 points
    assert (131072 // 8) * (131072 // 16) > MAX_EXHAUSTIVE_POINTS
    lines = _lines(*_map("(i // 1, j % 100000)", sizes, block))
    assert len(lines) == 1 and "is not affine in the grid names" in lines[0] and "2^26" not in lines[0]
    assert f"more than the {MAX_EXHAUSTIVE_POINTS} this check evaluates" in lines[0]
    assert "e.g. (i, j)" in lines[0]
    assert _lines(*_map("(i + M - M, j)", sizes, block)) == []       # affine maps: any grid size
    wrong = _lines(*_map("(j - j + i * 2 - i, j + 0)", sizes, block)) # affine, right
    assert wrong == []
    wrong = _lines(*_map("(i, i + j - i + (i - i) * 3 + 1)", sizes, block))
    assert len(wrong) == 1 and "sends grid point (0, 0) to block (0, 1)" in wrong[0], wrong


def test_the_bound_is_the_planners():
    from schedgen.families.map.operands import MAX_EXHAUSTIVE_POINTS as bound
    assert bound == MAX_EXHAUSTIVE_POINTS
