"""The grouped kernel's tile walk, mirrored in Python line for line from the rendered CUDA (the group tables warp 0
builds, the forward-only group cursor, the planar-snake / row-major order inside a group, the rows each store
covers): over skewed counts with empty groups, every output element of every group is stored exactly once, none
outside the groups, for any number of persistent CTAs. The rendered source is checked to still hold the mirrored
lines, so the mirror cannot drift from the template unnoticed."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import ROOT
from schedgen.families.grouped_matmul.reference import encode_counts, group_rows, skewed_counts
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan
from schedgen.render import render

MIXTRAL = ROOT / "specs" / "grouped_moe_mixtral_bf16_dynamic.yaml"
SMALL = {"op.sizes": {"T": {"dynamic": True, "max": 65536}, "N": 1024, "K": 512}}
MIRRORED = (
    "s = min(max(s, 0), sg_rows_total);",
    "e = min(max(e, s), sg_rows_total);",
    "while (t >= sg_tile0[grp + 1]) ++grp;",
    "if (blk0 >= row_end) break;",
    "if (r >= row_end) continue;",
)
SNAKE = ("const int minor_idx = band * width + pos % w;", "if (band & 1) major_idx = major - 1 - major_idx;")
ROW_MAJOR = ("tm = t / TN;", "tn = t % TN;")
TMA = ("if (blk0 + 64 <= row_end) {",)


def _tables(rows, t_total, tm_, tn_):
    row0, row1, tile0, tiles = [], [], [], 0
    for s, e in rows:
        s = min(max(s, 0), t_total)
        e = min(max(e, s), t_total)
        row0.append(s)
        row1.append(e)
        tile0.append(tiles)
        tiles += -(-(e - s) // tm_) * tn_
    return row0, row1, tile0 + [tiles]


def _group_tile(t, TM, TN, order, width):
    if order == "row_major":
        return t // TN, t % TN
    major, minor = TN, TM
    tile_size, full = width * major, minor // width
    band, pos, w = t // tile_size, t % tile_size, width
    if band >= full:
        w, pos, band = minor - full * width, t - full * tile_size, full
    minor_idx = band * width + pos % w
    major_idx = pos // w
    if band & 1:
        major_idx = major - 1 - major_idx
    return minor_idx, major_idx


def _walk(p, rows, t_total, blocks, walks=None):
    """How many times each output element is stored. A [1, 2] cluster: CTA b is rank b % 2 of cluster b // 2, which
    walks the tiles (in cluster units: tile-column pairs) from its cluster's index by the cluster count, rank r
    taking column 2 x tn + r; `walks` (a dict) gets each CTA's list of (group, m0) per tile."""
    tm_, tn_ = p.tile_m, p.tile_n
    mm, cs = p.mm, p.cluster_n
    row0, row1, tile0 = _tables(rows, t_total, tm_, p.cluster_tiles_n)
    stored = np.zeros((t_total, p.n), np.int32)
    for b in range(blocks):
        grp = 0
        for t in range(b // cs, tile0[-1], blocks // cs):
            while t >= tile0[grp + 1]:
                grp += 1
            r0, row_end = row0[grp], row1[grp]
            tm, tn = _group_tile(t - tile0[grp], -(-(row_end - r0) // tm_), p.cluster_tiles_n, p.tile_order,
                                 mm.tiles.tile_width)
            m0, n0 = r0 + tm * tm_, (tn * cs + b % cs) * tn_
            if walks is not None:
                walks.setdefault(b, []).append((grp, m0))
            for w in range(mm.warps.num_consumers):
                m_off = w * mm.warps.wg_tile_m if mm.warps.wg_axis == "m" else 0
                n_off = w * mm.warps.wg_tile_n if mm.warps.wg_axis == "n" else 0
                for i in range(mm.mma.m_blocks):
                    blk0 = m0 + m_off + i * 64
                    if blk0 >= row_end:
                        break
                    hi = 64 if blk0 + 64 <= row_end and p.epi_store != "direct" else min(64, row_end - blk0)
                    cols = slice(n0 + n_off, min(n0 + n_off + mm.warps.wg_tile_n, p.n))
                    stored[blk0:blk0 + hi, cols] += 1
    return stored


@pytest.mark.parametrize("overrides", [
    {},
    {"schedule.persistent": {"loop": "nd_loop", "tile_order": "row_major"}},
    {"schedule.epilogue.store": "direct", "op.offsets_format": "counts"},
    {"schedule.pipeline.wg_axis": "n"},          # the consumers split the tile's columns: two 64-row blocks each
    {"schedule.in_specs.x": {"block_shape": [64, 64], "delay_release": 1},
     "schedule.in_specs.w": {"block_shape": [128, 64], "delay_release": 1},
     "schedule.out_specs.out": {"block_shape": [64, 128]}, "schedule.pipeline.num_compute_wgs": 1},
])
@pytest.mark.parametrize("seed, total, blocks", [(0, 3000, 132), (1, 700, 5), (2, 20000, 132), (3, 9, 1)])
def test_every_element_of_every_group_is_stored_once(overrides, seed, total, blocks):
    spec, src = load_spec(str(MIXTRAL), {**SMALL, **overrides})
    p = plan(spec, src)
    cu = render(p, "cuda")
    want = MIRRORED + (SNAKE if p.tile_order == "planar_snake" else ROW_MAJOR) + (TMA if p.epi_store == "tma" else ())
    assert all(line in cu for line in want), [line for line in want if line not in cu]
    counts = skewed_counts(total, 8, np.random.default_rng(seed))
    assert (counts == 0).any()
    rows = group_rows(encode_counts(counts, p.offsets_format), p.offsets_format, 8)
    stored = _walk(p, rows, total, blocks)
    assert (stored == 1).all(), np.argwhere(stored != 1)[:5]


PAIRED = ("for (int t = (int)(blockIdx.x / 2); t < num_tiles; t += (int)(gridDim.x / 2)) {{",
          "const int n0 = (tn * 2 + (int)(blockIdx.x % 2)) * {tn};",
          "const int TN = {ctn};   // tile column pairs of the [1, 2] cluster",
          "const int tiles = g < 8 ? (e - s + 127) / 128 * {ctn} : 0;   // cluster units")


@pytest.mark.parametrize("overrides", [
    {},
    {"schedule.persistent": {"loop": "nd_loop", "tile_order": "row_major"}},
    {"schedule.epilogue.store": "direct", "op.offsets_format": "ends"},
    {"op.sizes": {"T": {"dynamic": True, "max": 65536}, "N": 1536, "K": 512},          # 6 columns: 3 pairs
     "schedule.persistent": {"loop": "nd_loop", "tile_order": "planar_snake", "tile_width": 4}},
])
@pytest.mark.parametrize("seed, total, blocks", [(0, 3000, 132), (1, 700, 6), (2, 20000, 132), (3, 9, 2)])
def test_cluster_pairs_cover_every_tile_once_inside_one_group(overrides, seed, total, blocks):
    """schedule.cluster [1, 2]: every (group, tile row, tile column) is covered once (each element stored once), and
    the two CTAs of a cluster walk the same (group, first row) sequence: a pair never straddles two groups, and both
    run the same count of tiles (so of k-steps: their multicast rings stay in step)."""
    spec, src = load_spec(str(MIXTRAL), {**SMALL, "schedule.cluster": [1, 2], **overrides})
    p = plan(spec, src)
    assert p.cluster_n == 2 and p.tiles_n % 2 == 0
    cu = render(p, "cuda")
    want = [line.format(tn=p.tile_n, ctn=p.cluster_tiles_n) for line in PAIRED] + list(MIRRORED[2:])
    assert all(line in cu for line in want), [line for line in want if line not in cu]
    counts = skewed_counts(total, 8, np.random.default_rng(seed))
    rows = group_rows(encode_counts(counts, p.offsets_format), p.offsets_format, 8)
    walks: dict = {}
    stored = _walk(p, rows, total, blocks, walks)
    assert (stored == 1).all(), np.argwhere(stored != 1)[:5]
    for c in range(blocks // 2):
        assert walks.get(2 * c, []) == walks.get(2 * c + 1, []), c


def test_rows_in_no_group_are_never_stored():
    p = plan(*load_spec(str(MIXTRAL), SMALL))
    rows = group_rows(np.array([5, 5, 100, 100, 100, 300, 300, 301, 400], np.int32), "offsets", 8)
    stored = _walk(p, rows, 1000, 7)
    assert (stored[:5] == 0).all() and (stored[400:] == 0).all() and (stored[5:400] == 1).all()
