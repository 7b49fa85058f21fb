"""Every bundled matmul spec (and layout variants) compiles with NVRTC, no GPU, to sm_90a SASS with the
instructions the design promises: HGMMA of the planned shape (transposed B when rhs is N-major), TMA loads
(multicast when a cluster shares an operand) and stores, setmaxnreg, mbarrier waits, and no spills."""
from __future__ import annotations

import re

import pytest

from conftest import SPECS_DIR, spec_files
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.toolchain.nvrtc import resource_usage, sass
from conftest import opcodes

CUDA = {"schedule.backends": ["cuda"]}
BASE = SPECS_DIR.parent / "tests" / "data" / "matmul_base.yaml"
VARIANTS = {
    "nocluster": {"schedule.cluster": [1, 1], "schedule.in_specs.b.collective_axes": []},
    "cluster1x2": {"schedule.cluster": [1, 2], "schedule.in_specs.b.collective_axes": []},
    "rhs_nk": {"op.transpose_rhs": True, "op.inputs.b.shape": ["N", "K"], "schedule.in_specs.b.block_shape": [256, 64]},
    "lhs_km": {"op.transpose_lhs": True, "op.inputs.a.shape": ["K", "M"], "schedule.in_specs.a.block_shape": [64, 128]},
    "f32_out_bias": {"op.outputs.out.dtype": "f32", "schedule.epilogue.tile": [64, 32],
                     "op.inputs.bias": {"shape": ["N"], "dtype": "f32"}, "op.epilogue": "out = silu(acc + bias)"},
    "one_consumer": {"schedule.pipeline.num_compute_wgs": 1, "schedule.in_specs.a.block_shape": [64, 64],
                     "schedule.out_specs.out.block_shape": [64, 256]},
    "wg_n": {"schedule.pipeline.wg_axis": "n"},
    "batched": {"op.sizes": {"M": 512, "N": 512, "K": 256, "B": 2}, "op.inputs.a.shape": ["B", "M", "K"],
                "op.inputs.b.shape": ["B", "K", "N"], "op.outputs.out.shape": ["B", "M", "N"]},
    # every size dynamic (launch arguments): a batched 3-D tensor-map problem with a runtime k-loop bound
    "dynamic_bmnk": {"op.sizes": {"B": {"dynamic": True, "max": 8},
                                  "M": {"dynamic": True, "min": 256, "max": 8192, "multiple_of": 256},
                                  "N": {"dynamic": True, "min": 256, "max": 8192, "multiple_of": 256},
                                  "K": {"dynamic": True, "min": 64, "max": 8192, "multiple_of": 64}},
                     "op.inputs.a.shape": ["B", "M", "K"], "op.inputs.b.shape": ["B", "K", "N"],
                     "op.outputs.out.shape": ["B", "M", "N"]},
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = Cache(tmp_path_factory.mktemp("cache"))
    out = {}
    for path in spec_files("matmul", target="sm_90a"):
        b = build_spec(path, CUDA, cache=cache)
        out[path.stem] = (b, sass(b.files["kernel.cubin"]))
    for name, ov in VARIANTS.items():
        b = build_spec(BASE, {**CUDA, **ov}, cache=cache)
        out[name] = (b, sass(b.files["kernel.cubin"]))
    return out


NAMES = [p.stem for p in spec_files("matmul", target="sm_90a")] + list(VARIANTS)


@pytest.mark.parametrize("name", NAMES)
def test_sass_has_hgmma_tma_setmaxnreg(built, name):
    b, text = built[name]
    p = b.plan
    ops = opcodes(text)
    hgmma = set(re.findall(r"\b[HQ]GMMA\.[0-9A-Za-z_.]+", text))
    # nvdisasm names the bf16 form HGMMA...F32.BF16, the f16 form plain HGMMA...F32 and the fp8 forms
    # QGMMA.64xNx32.F32.E4M3.E4M3 / .E5M2.E5M2
    fp8 = {"f8e4m3": "E4M3", "f8e5m2": "E5M2"}.get(p.in_dtype)
    want = (f"QGMMA.64x{p.warps.wg_tile_n}x32.F32.{fp8}.{fp8}" if fp8 else
            f"HGMMA.64x{p.warps.wg_tile_n}x16.F32" + (".BF16" if p.in_dtype == "bf16" else ""))
    assert want in hgmma, hgmma
    # the transpose bits: an N-major rhs (the [K, N] default) and an M-major lhs show as tnspB / tnspA
    lines = [l for l in text.splitlines() if "GMMA" in l]
    assert any("tnspB" in l for l in lines) == (not p.layout.k_major_b)
    assert any("tnspA" in l for l in lines) == (not p.layout.k_major_a)
    rank = {len(a.shape) for a in p.launch.kernel_args if a.kind == "tmap"}
    assert any(op.startswith(f"UTMALDG.{max(rank)}D") for op in ops)
    assert any(op.startswith("UTMASTG") for op in ops)
    assert ("UTMALDG.%dD.MULTICAST" % len(p.launch.kernel_args[1 if p.cluster.multicast == "rhs" else 0].shape) in ops) == bool(p.cluster.multicast)
    assert ops.count("USETMAXREG.DEALLOC.CTAPOOL") + ops.count("USETMAXREG.TRYALLOC.CTAPOOL") >= 2 or \
        sum(op.startswith("USETMAXREG") for op in ops) >= 2, sorted(set(ops))
    assert "SYNCS.PHASECHK.TRANS64.TRYWAIT" in ops
    assert "WARPGROUP.ARRIVE" in ops or any(op.startswith("WARPGROUP") for op in ops)


@pytest.mark.parametrize("name", NAMES)
def test_no_spills_and_no_stack(built, name):
    b, text = built[name]
    ops = opcodes(text)
    assert not [op for op in ops if op.split(".")[0] in ("LDL", "STL")], "local-memory spills"
    usage = resource_usage(b.files["kernel.cubin"])[b.plan.launch.kernel_name]
    assert usage["STACK"] == 0 and usage["LOCAL"] == 0
    # the entry cap that setmaxnreg needs: 65536 / threads, so the budgets are honoured (no C7508 warning)
    assert usage["REG"] <= 65536 // b.plan.launch.threads


@pytest.mark.parametrize("name", NAMES)
def test_setmaxnreg_budgets_in_ptx(built, name):
    b, _ = built[name]
    ptx = b.files["kernel.ptx"].decode()
    p = b.plan
    assert f"setmaxnreg.dec.sync.aligned.u32 {p.warps.producer_regs}" in ptx
    assert f"setmaxnreg.inc.sync.aligned.u32 {p.warps.consumer_regs}" in ptx
    assert re.search(r"^\.target sm_90a\b", ptx, re.M)
