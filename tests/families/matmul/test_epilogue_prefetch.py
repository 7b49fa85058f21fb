"""The producer prefetches the [M, N] (and [B, M, N]) epilogue operands into L2 a tile ahead of the epilogue that reads
them (issue 17: `acc + bias + residual` at 4096x4096x1024 ran at 0.67x cuBLAS on the H200, 2026-12-04, with its
residual read element by element from DRAM in every epilogue chunk). One bulk prefetch (cp.async.bulk.prefetch.L2)
per tile row: the CTA's first tile before its k-loop, each next tile after the current tile's loads. On the CPU: which
operands are prefetched (row and column operands are small and shared: not), the rendered producer, the SASS
(UBLKPF.L2, no local memory); on the GPU (marked gpu): residual epilogues against float64, ragged and batched."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from conftest import ROOT, opcodes
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan
from schedgen.render import render
from schedgen.toolchain.nvrtc import resource_usage, sass

RESIDUAL = ROOT / "bench" / "user_shapes" / "linear_bias_residual_4096x4096x1024.yaml"   # bias [N], res [M, N]
GELU = ROOT / "bench" / "user_shapes" / "linear_bias_gelu_f16_4096x4096x1024.yaml"       # bias [N] only
CUDA = {"schedule.backends": ["cuda"]}


def _plan(path, overrides=None):
    spec, src = load_spec(str(path), overrides or {})
    return plan(spec, src)


def test_full_operands_are_prefetched_row_and_column_ones_are_not():
    p = _plan(RESIDUAL)
    assert [e.name for e in p.l2_prefetch] == ["res"]
    assert _plan(GELU).l2_prefetch == ()
    col = _plan(RESIDUAL, {"op.inputs.res.shape": ["M", 1]})
    assert col.l2_prefetch == ()


def test_rows_that_are_not_16_byte_multiples_are_not_prefetched():
    # N = 4100 bf16: a row is 8200 B, so rows do not start on 16 B
    p = _plan(RESIDUAL, {**CUDA, "op.sizes.N": 4100})
    assert p.l2_prefetch == ()


def test_the_producer_prefetches_the_first_tile_then_each_next_one():
    cu = render(_plan(RESIDUAL, CUDA), "cuda")
    assert "cp.async.bulk.prefetch.L2.global" in cu
    first = cu.index("if (t == cluster_id) sg_prefetch_tile(t, rank, in_res);")
    loads = cu.index("for (int kb = 0; kb < 16; ++kb, ++it)", first)
    nxt = cu.index("if (t + num_clusters < 256) sg_prefetch_tile(t + num_clusters, rank, in_res);")
    assert first < loads < nxt < cu.index("} else {", nxt)
    assert "sg_prefetch_tile" not in render(_plan(GELU, CUDA), "cuda")


def test_dynamic_and_batched_prefetches_use_the_call_sizes():
    dyn = render(_plan(RESIDUAL, {**CUDA, "op.sizes.M": {"dynamic": True, "max": 8192, "multiple_of": 256}}), "cuda")
    assert "m0 + r < sz_M" in dyn
    bat = _plan(RESIDUAL, {**CUDA, "op.sizes": {"B": 2, "M": 512, "N": 1024, "K": 256},
                           "op.inputs.a.shape": ["B", "M", "K"], "op.inputs.b.shape": ["B", "N", "K"],
                           "op.inputs.res.shape": ["B", "M", "N"], "op.outputs.out.shape": ["B", "M", "N"]})
    assert [e.bcast for e in bat.l2_prefetch] == ["batch"]
    assert "(long long)b * 512 + (long long)(m0 + r)" in render(bat, "cuda")


def test_sass_has_the_bulk_prefetch_and_no_local_memory(tmp_path):
    b = build_spec(str(RESIDUAL), CUDA, cache=Cache(tmp_path))
    ops = opcodes(sass(b.files["kernel.cubin"]))
    assert "UBLKPF.L2" in ops
    usage = resource_usage(b.files["kernel.cubin"])[b.plan.kernel_name]
    assert usage["LOCAL"] == 0 and usage["STACK"] == 0


@pytest.mark.gpu
@pytest.mark.parametrize("overrides", [
    {},
    {"op.sizes": {"M": 1000, "N": 3000, "K": 1000}},        # ragged M, N, K: the last tile's rows and columns cut
])
def test_prefetched_residual_matches_float64_on_gpu(overrides):
    from schedgen.verify import verify_built
    b = build_spec(str(RESIDUAL), {**CUDA, **overrides},
                   cache=Cache(Path(tempfile.mkdtemp(prefix="schedgen-pf-"))))
    assert b.plan.l2_prefetch
    checks = verify_built(b, ["cuda"])
    assert checks and all(c.ok for c in checks), checks
