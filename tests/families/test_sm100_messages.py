"""sm_100a specs get sm_100a words (issue 20): a field the Blackwell kernels refuse or do not read is explained by
what those kernels do (tcgen05, the MMA-issuing thread or warp, TMEM, the softmax / epilogue warpgroup), not by
Hopper's wgmma and consumer warpgroups; the same field on an sm_90a spec keeps its Hopper explanation."""
from __future__ import annotations

import pytest

from conftest import SPECS_DIR
from schedgen.errors import SpecErrors
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan

MATMUL = SPECS_DIR / "matmul_bf16_4096_sm100.yaml"
MATMUL_PALLAS = SPECS_DIR / "matmul_bf16_4096_sm100_pallas.yaml"
ATTENTION = SPECS_DIR / "attention_bf16_4096_sm100_pallas.yaml"
HOPPER = ("wgmma", "consumer warpgroup", "each consumer", "every consumer", "per consumer")


def _lines_at(path, overrides, field: str) -> list[str]:
    spec, src = load_spec(str(path), overrides)
    with pytest.raises(SpecErrors) as info:
        plan(spec, src)
    at = [line for line in info.value.lines() if f"{field}:" in line]
    assert at, info.value.lines()
    return at


UNREAD = [
    (MATMUL, {"schedule.num_warpgroups": 2}, "schedule.num_warpgroups", "tcgen05.mma"),
    (MATMUL_PALLAS, {"schedule.num_warpgroups": 2}, "schedule.num_warpgroups", "epilogue warpgroup"),
    (ATTENTION, {"schedule.num_warpgroups": 2}, "schedule.num_warpgroups", "softmax warpgroup"),
    # (the epilogue, wg_axis and consumer_schedule are not attention fields: unknown keys, issue 42)
    (ATTENTION, {"schedule.in_specs.k.memory_space": "gmem"}, "schedule.in_specs.k.memory_space", "tcgen05.mma"),
    (ATTENTION, {"schedule.in_specs.q.transforms.swizzle": 64}, "schedule.in_specs.q.transforms.swizzle",
     "tcgen05.mma"),
    (ATTENTION, {"schedule.in_specs.v.transforms.tiling": [8, 64]}, "schedule.in_specs.v.transforms.tiling",
     "tcgen05.mma"),
    (ATTENTION, {"schedule.in_specs.k.transforms.transpose": [1, 0]}, "schedule.in_specs.k.transforms.transpose",
     "tcgen05.mma"),
    (ATTENTION, {"schedule.in_specs.v.delay_release": 1}, "schedule.in_specs.v.delay_release", "tcgen05.commit"),
]


@pytest.mark.parametrize("path, overrides, field, words", UNREAD,
                         ids=[f"{p.stem}-{f}" for p, _, f, _ in UNREAD])
def test_unread_fields_on_sm100a_speak_of_the_blackwell_kernel(path, overrides, field, words):
    at = _lines_at(path, overrides, field)
    assert any(words in line for line in at), at
    assert not any(h in line for line in at for h in HOPPER), at


@pytest.mark.parametrize("path, overrides, field, words", UNREAD,
                         ids=[f"{p.stem}-{f}" for p, _, f, _ in UNREAD])
def test_the_same_fields_on_sm90a_keep_the_hopper_explanation(path, overrides, field, words):
    at = _lines_at(path, {**overrides, "schedule.target": "sm_90a", "schedule.backends": ["pallas"]}, field)
    assert not any(words in line for line in at), at
    assert any(h in line for line in at for h in HOPPER + ("producer warpgroup",)), at


LEGALITY = [
    (MATMUL, {"schedule.in_specs.a.memory_space": "gmem"}, "schedule.in_specs.a.memory_space", "tcgen05.mma cannot"),
    (MATMUL, {"schedule.out_specs.out.memory_space": "regs"}, "schedule.out_specs.out.memory_space",
     "the accumulator lives in TMEM"),
    (MATMUL_PALLAS, {"schedule.in_specs.b.transforms.transpose": [1, 0]},
     "schedule.in_specs.b.transforms.transpose", "tcgen05.mma reads a K-major lhs"),
    (MATMUL, {"op.inputs.b.dtype": "f16"}, "op.inputs.b.dtype", "tcgen05.mma takes one input type"),
    (MATMUL, {"schedule.in_specs.b.transforms.swizzle": 128, "schedule.in_specs.b.block_shape": [64, 160],
              "schedule.out_specs.out.block_shape": [128, 160]},
     "schedule.in_specs.b.transforms.swizzle", "the tile's 160 columns"),
    (MATMUL_PALLAS, {"schedule.compiler_params.lowering_semantics": "lane"},
     "schedule.compiler_params.lowering_semantics", "warpgroup semantics (tcgen05.mma)"),
]


@pytest.mark.parametrize("path, overrides, field, words", LEGALITY,
                         ids=[f"{p.stem}-{f}" for p, _, f, _ in LEGALITY])
def test_matmul_legality_on_sm100a_names_tcgen05(path, overrides, field, words):
    at = _lines_at(path, overrides, field)
    assert any(words in line for line in at), at
    assert not any(h in line for line in at for h in HOPPER), at


FP8 = {"op.inputs.a.dtype": "f8e4m3", "op.inputs.b.dtype": "f8e4m3", "op.transpose_rhs": True,
       "op.inputs.b.shape": ["N", "K"], "schedule.in_specs.b.block_shape": [256, 128]}
LHS_KM = {"op.transpose_lhs": True, "op.inputs.a.shape": ["K", "M"], "schedule.in_specs.a.block_shape": [128, 128]}


@pytest.mark.parametrize("dtypes", [FP8, {}], ids=["fp8", "bf16"])
def test_a_transposed_lhs_on_sm100a_is_one_error_with_its_remedy(dtypes):
    """fp8's K-major rule and Blackwell's K-major-lhs rule both refuse transpose_lhs: the spec gets one error there,
    the sm_100a kernel's (it holds for every input type), with what to do."""
    at = _lines_at(MATMUL, {**dtypes, **LHS_KM}, "op.transpose_lhs")
    assert len(at) == 1, at
    assert "the sm_100a matmul kernel reads a K-major lhs" in at[0] and "a.T.contiguous()" in at[0], at


def test_fp8_on_sm100a_still_refuses_an_n_major_rhs():
    at = _lines_at(MATMUL, {**FP8, "op.transpose_rhs": False, "op.inputs.b.shape": ["K", "N"],
                            "schedule.in_specs.b.block_shape": [128, 256]}, "op.transpose_rhs")
    assert len(at) == 1 and "kind::f8f6f4" in at[0] and "K-major" in at[0], at


@pytest.mark.parametrize("path, kernels", [(ATTENTION, "the sm_100a pallas attention kernel does not read"),
                                           (MATMUL, "the sm_100a cuda matmul kernel does not read"),
                                           (MATMUL_PALLAS, "the sm_100a cuda and pallas matmul kernels do not read")],
                         ids=lambda v: getattr(v, "stem", None))
def test_unread_messages_name_the_kernels_the_sm100a_spec_builds(path, kernels):
    """On sm_100a the message names the kernels the spec builds (attention: the Pallas one only), not a CUDA
    attention kernel that sm_100a does not have."""
    at = _lines_at(path, {"schedule.num_warpgroups": 2}, "schedule.num_warpgroups")
    assert any(kernels in line for line in at), at
