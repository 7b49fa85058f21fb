"""The sizes verify calls a kernel at: a dynamic-size package at three assignments (in range, one not a multiple of
a tile where the range allows it), a fixed-size spec at its own sizes and at rebuilt variants the planner accepts."""
from __future__ import annotations

from types import SimpleNamespace

from conftest import SPECS_DIR
from schedgen.build import build_spec
from schedgen.plan.dims import SizeRange
from schedgen.verify import VERIFY_VOLUME, call_sizes, static_variants


def _plan(sizes, *ranges):
    return SimpleNamespace(sizes=sizes, dynamic_sizes=tuple(ranges))


def test_a_fixed_size_plan_is_verified_at_its_sizes():
    assert call_sizes(_plan({"M": 4096, "N": 256})) == [{"M": 4096, "N": 256}]


def test_a_dynamic_plan_gets_three_legal_assignments_from_one_package():
    r = SizeRange("M", 1, 65536, 1)
    got = call_sizes(_plan({"M": r, "N": 4096}, r))
    assert [g["M"] for g in got] == [4096, 3073, 513] and all(g["N"] == 4096 for g in got)
    assert any(g["M"] % 64 for g in got)          # a size that is not a multiple of a tile


def test_assignments_respect_multiple_of_min_and_the_volume_cap():
    b, s = SizeRange("B", 1, 64, 1), SizeRange("S", 128, 16384, 128)
    got = call_sizes(_plan({"B": b, "S": s}, b, s))
    for g in got:
        assert 1 <= g["B"] <= 64 and g["S"] % 128 == 0 and 128 <= g["S"] <= 16384
        assert g["B"] * g["S"] <= VERIFY_VOLUME
    assert len({tuple(g.values()) for g in got}) == len(got) == 3
    # the family's few-tiles sizes (interpret mode) are the large assignment
    small = call_sizes(_plan({"B": b, "S": s}, b, s), small={"B": 1, "S": 256})
    assert small[0] == {"B": 1, "S": 256}


def test_static_variants_are_rebuilt_where_the_planner_accepts_them():
    path = str(SPECS_DIR / "add_bf16.yaml")
    built = build_spec(path, {"M": 256, "N": 512})
    others = static_variants(built, path, {"M": 256, "N": 512}, 3)
    sizes = [dict(o.plan.sizes) for o in others]
    # halved; then 3/4 (192 x 384) rounded down to the finest step the planner accepts: add_bf16's 32 x 256 block
    # without out_of_bounds: zero refuses 192 x 384 (384 is no multiple of 256) ... until 512 (max(512, 0) = 512)
    assert sizes[0] == {"M": 128, "N": 256}
    assert len(sizes) == 2 and sizes[1]["M"] % 32 == 0 and sizes[1]["N"] % 256 == 0
    assert sizes[1] not in ({"M": 256, "N": 512}, sizes[0])
