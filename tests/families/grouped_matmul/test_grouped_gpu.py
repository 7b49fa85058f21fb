"""The grouped_matmul CUDA kernel on the GPU (marked gpu): built, run and checked against the float64 reference per
group, with skewed counts that include empty groups, a one-row group, groups of a tile minus one, a tile and a tile
plus one row, a group holding every row, rows outside every group (written as zeros), all three layouts of the group
operand, both weight layouts, a fused epilogue with f32 out and masked stores only, torch tensors (torch._grouped_mm's
offs) and the bundled full-size specs through verify (three token counts, skewed random counts); each also with the
2-CTA cluster (schedule.cluster [1, 2]: x multicast to two tile columns of a group), over poisoned outputs too."""
from __future__ import annotations

import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from conftest import ROOT
from schedgen.build import build_spec, package
from schedgen.cache import Cache
from schedgen.families.grouped_matmul.reference import encode_counts, group_rows
from schedgen.reference import reference, rel_error, tolerance
from schedgen.runtime.kernel import load_package

pytestmark = pytest.mark.gpu

MIXTRAL = ROOT / "specs" / "grouped_moe_mixtral_bf16_dynamic.yaml"
DEEPSEEK = ROOT / "specs" / "grouped_moe_deepseek_bf16_dynamic.yaml"
SMALL = {"op.sizes": {"T": {"dynamic": True, "max": 8192}, "N": 1024, "K": 512}}
BF16 = ml_dtypes.bfloat16

# per-group row counts (8 groups): empty groups, a one-row group, 127 / 128 / 129 rows around the 128-row tile,
# a group past several tiles; a group holding every row; the first group empty
COUNTS = {
    "skewed_edges": [0, 1, 127, 128, 129, 0, 700, 15],
    "one_group": [0, 0, 0, 1000, 0, 0, 0, 0],
    "tiny": [3, 0, 0, 0, 0, 0, 0, 2],
    "all_small": [63, 64, 65, 1, 2, 3, 4, 5],
}
VARIANTS = {
    "default": {},
    "ends": {"op.offsets_format": "ends"},
    "counts": {"op.offsets_format": "counts"},
    "kn_weights": {"op.transpose_rhs": False, "op.inputs.w.shape": [8, "K", "N"],
                 "schedule.in_specs.w.block_shape": [64, 256]},
    "silu_f32_direct": {"op.outputs.out.dtype": "f32", "op.epilogue": "out = silu(acc) * alpha",
                        "op.constants": {"alpha": 0.5}, "schedule.epilogue.store": "direct"},
    "tile_64x128": {"schedule.in_specs.x": {"block_shape": [64, 64], "delay_release": 1},
                    "schedule.in_specs.w": {"block_shape": [128, 64], "delay_release": 1},
                    "schedule.out_specs.out": {"block_shape": [64, 128]}, "schedule.pipeline.num_compute_wgs": 1,
                    "schedule.persistent": {"loop": "nd_loop", "tile_order": "row_major"}},
    "few_blocks": {"schedule.persistent.num_blocks": 3},     # each CTA walks many tiles across the groups
    "wg_axis_n": {"schedule.pipeline.wg_axis": "n"},         # consumers split the columns: two 64-row blocks each
    # the [1, 2] cluster: the pair's tile columns, x multicast (each CTA loads half of its rows into both)
    "cluster": {"schedule.cluster": [1, 2]},
    "cluster_ends_row_major": {"schedule.cluster": [1, 2], "op.offsets_format": "ends",
                               "schedule.persistent": {"loop": "nd_loop", "tile_order": "row_major"}},
    "cluster_few_blocks": {"schedule.cluster": [1, 2], "schedule.persistent.num_blocks": 4},   # two clusters
    "cluster_kn_silu_direct": {"schedule.cluster": [1, 2], "op.transpose_rhs": False,
                               "op.inputs.w.shape": [8, "K", "N"], "schedule.in_specs.w.block_shape": [64, 256],
                               "op.outputs.out.dtype": "f32", "op.epilogue": "out = silu(acc) * alpha",
                               "op.constants": {"alpha": 0.5}, "schedule.epilogue.store": "direct"},
    "cluster_64x128": {"schedule.cluster": [1, 2],
                       "schedule.in_specs.x": {"block_shape": [64, 64], "delay_release": 1},
                       "schedule.in_specs.w": {"block_shape": [128, 64], "delay_release": 1},
                       "schedule.out_specs.out": {"block_shape": [64, 128]}, "schedule.pipeline.num_compute_wgs": 1},
}


def _build(path, overrides):
    b = build_spec(str(path), overrides, cache=Cache(Path(tempfile.mkdtemp(prefix="schedgen-grouped-"))))
    return b, load_package(package(b, tempfile.mkdtemp(prefix="schedgen-grouped-pkg-")))


@pytest.fixture(scope="module")
def kernels():
    return {}


def _kernel(kernels, name):
    if name not in kernels:
        kernels[name] = _build(MIXTRAL, {**SMALL, **VARIANTS[name]})
    return kernels[name]


def _inputs(spec, counts, t, rng):
    op = spec.op
    k, n = 512, 1024
    x = rng.standard_normal((t, k), dtype=np.float32).astype(BF16)
    w_shape = (8, n, k) if op.transpose_rhs else (8, k, n)
    w = (rng.standard_normal(w_shape, dtype=np.float32) / 8).astype(BF16)
    return {"x": x, "w": w, "offsets": encode_counts(counts, op.offsets_format)}


def _check(b, out, ins, t):
    spec, p = b.spec, b.plan
    ref = reference(spec, {"T": t, "N": 1024, "K": 512}, ins)["out"]
    rows = group_rows(ins["offsets"], spec.op.offsets_format, 8)
    tol = tolerance(p.out_dtype, False, p.k)
    out = np.asarray(out, dtype=np.float32)
    for g, (s, e) in enumerate(rows):
        if e > s:
            err = rel_error(out[s:e], ref[s:e])
            assert err <= tol, f"group {g} rows {s}..{e}: rel error {err}"
    covered = np.zeros(t, bool)
    for s, e in rows:
        covered[s:e] = True
    return covered


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("case", list(COUNTS))
def test_groups_against_float64(kernels, variant, case):
    b, k = _kernel(kernels, variant)
    counts = COUNTS[case]
    t = sum(counts)
    ins = _inputs(b.spec, counts, t, np.random.default_rng(len(case)))
    out = k(ins["x"], ins["w"], ins["offsets"], backend="cuda")
    covered = _check(b, out, ins, t)
    assert covered.all()


@pytest.mark.parametrize("variant", ["default", "silu_f32_direct", "few_blocks", "cluster", "cluster_few_blocks",
                                     "cluster_kn_silu_direct"])
def test_rows_outside_every_group_are_zeros(kernels, variant):
    """offsets[0] > 0 and offsets[G] < T: the rows before and past them are in no group; the kernel writes them as
    zeros over an out= tensor of NaNs (torch: written in place), whatever the epilogue (a backward's dx is zero
    there)."""
    torch = pytest.importorskip("torch")
    b, k = _kernel(kernels, variant)
    t = 1000
    ins = _inputs(b.spec, [100, 0, 37, 300, 0, 0, 0, 0], t, np.random.default_rng(7))
    ins["offsets"] = np.array([13, 100, 100, 137, 437, 437, 437, 437, 437], np.int32)
    dev = {nm: torch.from_numpy(a.view(np.int16) if a.dtype == BF16 else a).cuda() for nm, a in ins.items()}
    dev["x"], dev["w"] = dev["x"].view(torch.bfloat16), dev["w"].view(torch.bfloat16)
    dtype = torch.float32 if b.plan.out_dtype == "f32" else torch.bfloat16
    poison = torch.full((t, 1024), float("nan"), dtype=dtype, device="cuda")
    k(dev["x"], dev["w"], dev["offsets"], out=poison)      # written in place
    torch.cuda.synchronize()
    out = poison.float().cpu().numpy()
    assert not out[:13].any() and not out[437:].any(), "rows in no group are zeros"
    assert np.isfinite(out).all()
    _check(b, out, ins, t)


def test_torch_tensors_with_grouped_mm_offs():
    torch = pytest.importorskip("torch")
    b, k = _build(DEEPSEEK, {"op.sizes": {"T": {"dynamic": True, "max": 32768}, "N": 1024, "K": 512}})
    rng = np.random.default_rng(11)
    counts = np.zeros(64, np.int64)
    counts[[0, 5, 9, 33, 63]] = [1, 200, 129, 64, 900]
    t = int(counts.sum())
    x = torch.randn(t, 512, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(64, 1024, 512, dtype=torch.bfloat16, device="cuda") / 8
    offs = torch.tensor(np.cumsum(counts), dtype=torch.int32, device="cuda")
    out = k(x, w, offs)
    torch.cuda.synchronize()
    assert out.shape == (t, 1024) and out.dtype == torch.bfloat16
    if hasattr(torch, "_grouped_mm"):
        want = torch._grouped_mm(x, w.transpose(-1, -2), offs=offs)
        assert torch.allclose(out.float(), want.float(), rtol=2e-2, atol=2e-2)
    xs = x.float().cpu().numpy()
    ws = w.float().cpu().numpy()
    got = out.float().cpu().numpy()
    s = 0
    for g, c in enumerate(counts):
        if c:
            ref = xs[s:s + c].astype(np.float64) @ ws[g].T.astype(np.float64)
            assert rel_error(got[s:s + c], ref) <= 1e-2
        s += c
    del rng


@pytest.mark.parametrize("path, count, overrides", [(MIXTRAL, 3, {}), (DEEPSEEK, 2, {}),
                                                   (MIXTRAL, 2, {"schedule.cluster": [1, 2]}),
                                                   (DEEPSEEK, 2, {"schedule.cluster": [1, 2]})],
                         ids=["mixtral", "deepseek", "mixtral_cluster", "deepseek_cluster"])
def test_bundled_specs_verify(path, count, overrides):
    """Full-size weights, skewed random counts with empty experts, `count` token counts up to the max."""
    from schedgen.verify import verify_built
    b = build_spec(str(path), overrides, cache=Cache(Path(tempfile.mkdtemp(prefix="schedgen-grouped-v-"))))
    assert b.plan.cluster_n == (2 if overrides else 1)
    checks = verify_built(b, ["cuda"], count=count)
    assert checks and all(c.ok for c in checks), checks
