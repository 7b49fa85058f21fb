"""The epilogue reads its operands a column pair at a time (issue 17: `acc + bias + residual` at 4096x4096x1024 ran at
0.67x cuBLAS on the H200, 2026-12-04, its residual read one 2-byte element a load): a consumer thread's fragment holds
columns (c, c + 1) with c even, so where N is even at every call one 4-byte (16-bit operands) or 8-byte (f32) load
serves both. On the CPU: when pairs are used, the rendered loads, SASS without local memory; on the GPU (marked gpu):
ragged, column-broadcast and f32 operands against float64. An odd N is a located error (its rows cannot be a
tensor map's)."""
from __future__ import annotations

import re
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

RESIDUAL = ROOT / "bench" / "user_shapes" / "linear_bias_residual_4096x4096x1024.yaml"   # bias [N] f32, res [M, N] bf16
CUDA = {"schedule.backends": ["cuda"]}


def _plan(path, overrides=None):
    spec, src = load_spec(str(path), overrides or {})
    return plan(spec, src)


def test_even_n_reads_pairs_odd_n_reads_elements():
    assert _plan(RESIDUAL).pair_loads
    # a dynamic N: pairs only when its multiple_of makes it even
    assert _plan(RESIDUAL, {**CUDA, "op.sizes.N": {"dynamic": True, "max": 8192, "multiple_of": 64}}).pair_loads
    # no epilogue operands: nothing to read
    assert not _plan(ROOT / "bench" / "user_shapes" / "linear_4096x4096x1024_noepi.yaml").pair_loads


def test_rendered_pairs():
    cu = render(_plan(RESIDUAL, CUDA), "cuda")
    assert "__ldg(reinterpret_cast<const unsigned int*>(ptr + i))" in cu          # res: two bf16 in 4 B
    assert "__ldg(reinterpret_cast<const float2*>(ptr + i))" in cu                 # bias: two f32 in 8 B
    assert "ld2_in_res(in_res, b, grow + 8, gcol, p_res[1]);" in cu
    assert "const float v_res = p_res[q >> 1][q & 1];" in cu


def test_sass_loads_pairs_without_local_memory(tmp_path):
    b = build_spec(str(RESIDUAL), CUDA, cache=Cache(tmp_path))
    ops = opcodes(sass(b.files["kernel.cubin"]))
    loads = {op for op in ops if op.startswith("LDG")}
    assert any(".64" in op for op in loads), loads                  # the f32 bias pairs
    assert not any(re.search(r"\.(U16|S16)\b", op) for op in loads), loads   # no 2-byte loads of the residual
    usage = resource_usage(b.files["kernel.cubin"])[b.plan.launch.kernel_name]
    assert usage["LOCAL"] == 0 and usage["STACK"] == 0


GPU_CASES = {
    "ragged_even_n": {"op.sizes": {"M": 1000, "N": 3000, "K": 1000}},
    "f32_residual_column_bias": {"op.sizes": {"M": 1000, "N": 2048, "K": 512},
                                 "op.inputs.res": {"shape": ["M", "N"], "dtype": "f32"},
                                 "op.inputs.bias": {"shape": ["M", 1], "dtype": "bf16"}},
    "direct_store": {"op.sizes": {"M": 1000, "N": 3000, "K": 1000}, "schedule.epilogue.store": "direct"},
}


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(GPU_CASES))
def test_pair_loads_match_float64_on_gpu(case):
    from schedgen.verify import verify_built
    b = build_spec(str(RESIDUAL), {**CUDA, **GPU_CASES[case]},
                   cache=Cache(Path(tempfile.mkdtemp(prefix="schedgen-pairs-"))))
    checks = verify_built(b, ["cuda"])
    assert checks and all(c.ok for c in checks), checks


def test_gpu_cases_plan_on_the_cpu():
    for case, ov in GPU_CASES.items():
        p = _plan(RESIDUAL, {**CUDA, **ov})
        assert p.pair_loads, case


def test_an_odd_n_is_a_located_error():
    """Regression (H200, 2026-12-04): N = 3001 planned, then failed at the call ("tensor map: strides[0] = 6002 B
    must be a positive multiple of 16 bytes"): the output's rows cannot be a tensor map's."""
    from schedgen.errors import SpecErrors
    with pytest.raises(SpecErrors) as info:
        _plan(RESIDUAL, {**CUDA, "op.sizes": {"M": 1000, "N": 3001, "K": 1000}})
    (line,) = [ln for ln in info.value.lines() if "steps 6002 B" in ln]   # the output's (res is read by pointer)
    assert ": op.sizes:" in line and "out [1000, 3001] bf16" in line and "a multiple of 8" in line
    assert "epilogue.store: direct" in line
