"""The sizes verify calls a kernel at: a dynamic-size package at three assignments (in range, one not a multiple of
a tile where the range allows it), a fixed-size spec at its own sizes and at rebuilt variants the planner accepts."""
from __future__ import annotations

from types import SimpleNamespace

from conftest import SPECS_DIR
from schedgen.build import build_spec
from schedgen.plan.dims import SizeRange
from schedgen.verify import VERIFY_VOLUME, call_sizes, static_variants


def _plan(sizes, *ranges):
    return SimpleNamespace(sizes=sizes, launch=SimpleNamespace(dynamic_sizes=tuple(ranges)))


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


def test_edges_are_the_smallest_a_ragged_and_the_largest_that_fits():
    from schedgen.verify import FIT_BYTES, edge_sizes, operand_bytes
    built = build_spec(str(SPECS_DIR / "bias_add_bf16_dynamic.yaml"))
    got = edge_sizes(built.plan)
    ranges = {r.name: r for r in built.plan.launch.dynamic_sizes}
    assert got[0] == {n: r.min for n, r in ranges.items()}          # M=1, N=256
    for g in got:
        for n, r in ranges.items():
            assert r.check(g[n]) is None, (n, g)
    largest = got[-1]
    assert operand_bytes(built.plan, largest) <= FIT_BYTES
    # the largest that fits: doubling the size that was halved would not fit any more (or it is at its max)
    assert any(largest[n] == r.max for n, r in ranges.items())
    assert got[1]["M"] % 64 != 0 and got[1]["M"] < largest["M"]   # ragged, off every tile
    assert edge_sizes(built.plan, fit_bytes=1 << 20)[-1]["M"] < largest["M"]


def test_large_magnitude_inputs_are_scaled_and_capped_per_dtype():
    import numpy as np

    from schedgen.reference import magnitude_for, random_inputs
    built = build_spec(str(SPECS_DIR / "add_bf16.yaml"), {"M": 64, "N": 256})
    plain = random_inputs(built.spec, built.plan.sizes, seed=3)
    big = random_inputs(built.spec, built.plan.sizes, seed=3, magnitude=1e3)
    for name in plain:
        ratio = np.asarray(big[name], np.float64) / np.asarray(plain[name], np.float64)
        assert np.allclose(ratio, 1e3, rtol=1e-2)
    assert magnitude_for("f8e4m3", 1e3) == 448 / 64 and magnitude_for("bf16", 1e3) == 1e3
    assert magnitude_for("i32", 1e3) == 1.0


def test_a_large_magnitude_set_that_would_overflow_the_output_is_scaled_down():
    from schedgen.verify import _inputs_and_references
    # f16 output of a K=4096 product of values ~1e3: |out| ~ 6e7 > 65504; drawn again smaller until it fits
    built = build_spec(str(SPECS_DIR / "matmul_f16_4096x8192x4096.yaml"), {"M": 256, "N": 512, "K": 4096})
    _, refs, magnitude = _inputs_and_references(built, built.plan.sizes, 1, 1e3)
    assert 1.0 <= magnitude < 1e3
    import numpy as np
    vals = next(iter(refs.values()))
    vals = np.asarray(getattr(vals, "values", vals))
    assert np.max(np.abs(vals)) < 65504 / 2
