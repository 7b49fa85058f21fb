"""The grouped_matmul float64 reference, its random inputs (skewed counts: large, small and empty groups covering
every row once) and the group operand's three layouts, on the CPU."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import ROOT
from schedgen import families
from schedgen.families.grouped_matmul.reference import encode_counts, group_rows, skewed_counts
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan
from schedgen.reference import Sampled, random_inputs, reference, rel_error

MIXTRAL = ROOT / "specs" / "grouped_moe_mixtral_bf16_dynamic.yaml"
SMALL = {"op.sizes": {"T": {"dynamic": True, "max": 4096}, "N": 256, "K": 128}}


def _spec(overrides=None):
    return load_spec(str(MIXTRAL), {**SMALL, **(overrides or {})})[0]


@pytest.mark.parametrize("groups, total", [(8, 1000), (64, 4096), (64, 100), (1, 77), (2, 1)])
def test_skewed_counts_cover_every_row_with_empty_groups(groups, total):
    c = skewed_counts(total, groups, np.random.default_rng(0))
    assert c.sum() == total and len(c) == groups and (c >= 0).all()
    if groups > 1:
        assert (c == 0).sum() >= 1            # at least one empty group
    if groups >= 8 and total >= 1000:
        assert c.max() >= 3 * np.median(c[c > 0])    # skewed: a hot expert


@pytest.mark.parametrize("fmt", ["offsets", "ends", "counts"])
def test_formats_round_trip(fmt):
    counts = [5, 0, 130, 1, 0, 64]
    enc = encode_counts(counts, fmt)
    assert enc.dtype == np.int32 and len(enc) == len(counts) + (fmt == "offsets")
    rows = group_rows(enc, fmt, len(counts))
    assert [e - s for s, e in rows] == counts and rows[0][0] == 0 and rows[-1][1] == sum(counts)


@pytest.mark.parametrize("overrides", [{}, {"op.offsets_format": "ends"}, {"op.offsets_format": "counts"},
                                       {"op.transpose_rhs": False, "op.inputs.w.shape": [8, "K", "N"]},
                                       {"op.epilogue": "out = silu(acc) * alpha", "op.constants": {"alpha": 2.0}}])
def test_reference_is_each_groups_product(overrides):
    spec = _spec(overrides)
    sizes = {"T": 700, "N": 256, "K": 128}
    ins = random_inputs(spec, sizes, seed=3)
    op = spec.op
    assert set(ins) == {"x", "w", "offsets"} and ins["offsets"].dtype == np.int32
    ref = reference(spec, sizes, ins)["out"]
    assert ref.shape == (700, 256) and np.isfinite(ref).all()
    x = ins["x"].astype(np.float64)
    for g, (s, e) in enumerate(group_rows(ins["offsets"], op.offsets_format, 8)):
        wg = ins["w"][g].astype(np.float64)
        want = x[s:e] @ (wg.T if op.transpose_rhs else wg)
        if op.epilogue:
            want = want / (1 + np.exp(-want)) * 2.0
        np.testing.assert_allclose(ref[s:e], want, rtol=1e-12, atol=1e-12)


def test_sampled_reference_matches_the_full_one():
    spec = _spec()
    sizes = {"T": 900, "N": 256, "K": 128}
    ins = random_inputs(spec, sizes, seed=4)
    full = reference(spec, sizes, ins)["out"]
    s = reference(spec, sizes, ins, sample=True, seed=1)["out"]
    assert isinstance(s, Sampled) and s.shape == (900, 256) and len(s.rows) == 256
    np.testing.assert_array_equal(s.values, full[s.rows])
    assert rel_error(full.astype(np.float32), s) < 1e-6


def test_small_sizes_are_a_few_tiles():
    spec = _spec()
    p = plan(spec, load_spec(str(MIXTRAL), SMALL)[1])
    got = families.get("grouped_matmul").small_sizes(spec, p, 2)
    assert got == {"T": 512, "N": 256, "K": 128}
