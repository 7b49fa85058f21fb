"""The grouped_matmul CUDA kernel compiled by NVRTC to sm_90a on the CPU, its SASS checked: wgmma (HGMMA) of the
consumer's width, no local memory (no spills, no stack), TMA loads of x (2-D) and w (3-D, a group a box), TMA stores
where the epilogue stages chunks and masked global stores for a group's last block, 16-byte stores of the zeros in
rows outside every group, the warp scans that build the group tables, and the block's static + dynamic SMEM within
the H200's 227 KiB."""
from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT, opcodes
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.toolchain.nvrtc import resource_usage, sass

MIXTRAL = ROOT / "specs" / "grouped_moe_mixtral_bf16_dynamic.yaml"
DEEPSEEK = ROOT / "specs" / "grouped_moe_deepseek_bf16_dynamic.yaml"
SMALL = {"T": {"dynamic": True, "max": 8192}, "N": 1024, "K": 512}
VARIANTS = {
    "mixtral": (MIXTRAL, {}),
    "deepseek_ends": (DEEPSEEK, {}),
    # f32 out, a fused silu epilogue, masked stores everywhere, counts, N-major [G, K, N] weights
    "direct_f32_silu_counts_kn": (MIXTRAL, {"op.sizes": SMALL, "op.transpose_rhs": False,
                                            "op.inputs.w.shape": [8, "K", "N"],
                 "schedule.in_specs.w.block_shape": [64, 256], "op.outputs.out.dtype": "f32",
                                            "op.epilogue": "out = silu(acc)", "op.offsets_format": "counts",
                                            "schedule.epilogue.store": "direct"}),
    # one consumer of 64-row tiles, 128 columns, row-major order inside a group
    "tile_64x128_one_consumer": (MIXTRAL, {"op.sizes": SMALL,
                                           "schedule.in_specs.x": {"block_shape": [64, 64], "delay_release": 1},
                                           "schedule.in_specs.w": {"block_shape": [128, 64], "delay_release": 1},
                                           "schedule.out_specs.out": {"block_shape": [64, 128]},
                                           "schedule.pipeline.num_compute_wgs": 1,
                                           "schedule.persistent": {"loop": "nd_loop", "tile_order": "row_major"}}),
    # the consumers split the columns (64 x 128 wgmma, two 64-row blocks each)
    "wg_axis_n": (MIXTRAL, {"op.sizes": SMALL, "schedule.pipeline.wg_axis": "n"}),
    # a fixed T (literals, no size argument), f16 in and out
    "static_t_f16": (MIXTRAL, {"op.sizes": {"T": 4096, "N": 1024, "K": 512}, "op.inputs.x.dtype": "f16",
                               "op.inputs.w.dtype": "f16", "op.outputs.out.dtype": "f16"}),
}


@pytest.fixture(scope="module")
def built():
    cache = Cache(Path(tempfile.mkdtemp(prefix="schedgen-grouped-sass-")))
    out = {name: build_spec(str(path), ov, cache=cache) for name, (path, ov) in VARIANTS.items()}
    return {name: (b, sass(b.files["kernel.cubin"])) for name, b in out.items()}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_sass_has_wgmma_tma_and_no_local_memory(built, name):
    b, text = built[name]
    p = b.plan
    ops = opcodes(text)
    want = f"HGMMA.64x{p.mm.warps.wg_tile_n}x16.F32" + (".BF16" if p.in_dtype == "bf16" else "")   # f16 has no suffix
    assert want in set(re.findall(r"\bHGMMA\.[0-9A-Za-z_.]+", text))
    assert not [op for op in ops if op.split(".")[0] in ("LDL", "STL")], "local-memory spills"
    usage = resource_usage(b.files["kernel.cubin"])[p.launch.kernel_name]
    assert usage["STACK"] == 0 and usage["LOCAL"] == 0
    assert usage["SHARED"] >= p.table_bytes and usage["SHARED"] + p.launch.smem_bytes <= 232448
    assert "UTMALDG.2D" in ops and "UTMALDG.3D" in ops           # x rows; w[g] through the 3-D map
    assert "SHFL.UP" in ops                                      # the warp scans of the group tables
    assert any(op.startswith("STG.E") for op in ops)             # masked stores of a group's last block
    assert "STG.E.128" in ops                                    # the zeros of the rows in no group, 16 B a store
    assert ("UTMASTG.2D" in ops) == (p.epi_store == "tma")
    assert "USETMAXREG.TRY_ALLOC.CTAPOOL" in ops and "USETMAXREG.DEALLOC.CTAPOOL" in ops
    assert not any(op.endswith("MULTICAST") for op in ops)
