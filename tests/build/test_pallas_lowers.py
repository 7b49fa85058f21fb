"""Every Pallas kernel schedgen accepts lowers through Mosaic GPU for CUDA on the CPU (jax's lowering runs Mosaic
GPU's checks: tilings, layouts, SMEM), at the bundled shapes and at the holdout-style shapes a user writes; and what
the planner refuses because jax 0.11.2 cannot lower it still fails to lower (a pin: when a jax upgrade lifts the
limit, this test says so and the planner's check can go).

The interpreter does not run those checks: a ragged Pallas matmul verified in interpret mode while Mosaic GPU
refused it on the H200 (2026-12-04), which this test would have caught on the CPU."""
from __future__ import annotations

import jax
import pytest

from conftest import SPECS_DIR, spec_files
from schedgen import families
from schedgen.build import build_spec, package
from schedgen.cache import Cache
from schedgen.runtime.arrays import DTYPES
from schedgen.runtime.kernel import load_package

ZERO = {"schedule.in_specs.a.out_of_bounds": "zero", "schedule.in_specs.b.out_of_bounds": "zero",
        "schedule.backends": ["cuda", "pallas"]}
HOLDOUTS = {   # spec, overrides
    "GEMM 3000x5056x1024 (ragged M and N)": ("matmul_bf16_4096.yaml", {"op.sizes": {"M": 3000, "N": 5056, "K": 1024},
                                                                        **ZERO}),
    "batched GEMM": ("matmul_bf16_4096.yaml", {"op.sizes": {"M": 512, "N": 512, "K": 256, "B": 4},
                                               "op.inputs.a.shape": ["B", "M", "K"], "op.inputs.b.shape": ["B", "K", "N"],
                                               "op.outputs.out.shape": ["B", "M", "N"]}),
    # attention: ragged sequences (multiples of 8, of no block) and the persistent grid
    "attention Sq = Skv = 1000, causal, lse (ragged)": (
        "attention_bf16_4096.yaml", {"S": 1000, "op.causal": True, "schedule.backends": ["cuda", "pallas"],
                                     "op.outputs.lse": {"shape": ["B", "H", "S"], "dtype": "f32"}}),
    "attention GQA Sq = Skv = 4000, causal (ragged)": ("attention_gqa_causal_bf16_8192.yaml", {"S": 4000}),
    "attention dynamic S, a multiple of 8 (ragged at the max, 4000)": (
        "attention_bf16_dynamic.yaml", {"op.sizes.S": {"dynamic": True, "min": 8, "max": 4000, "multiple_of": 8}}),
    "attention persistent 16k": ("attention_bf16_16384_persistent.yaml", {"schedule.backends": ["cuda", "pallas"]}),
    "attention persistent causal lpt, ragged 4000": (
        "attention_bf16_16384_persistent.yaml", {"S": 4000, "op.causal": True, "schedule.backends": ["cuda", "pallas"],
                                                 "schedule.persistent.tile_order": "lpt"}),
}


def _lower(built, tmp_path):
    kernel = load_package(package(built, tmp_path / "out"))
    sizes = {r.name: r.max for r in kernel.launch.sizes}
    args = [jax.ShapeDtypeStruct(kernel.shape_of(o, sizes), DTYPES[o.dtype]) for o in kernel.inputs]
    return jax.jit(kernel._pallas.module().make(sizes)).trace(*args).lower(lowering_platforms=("cuda",)).as_text()


def _pallas_specs():
    """The bundled one-GPU specs whose plan builds the Pallas backend (a multi-device one lowers under shard_map:
    tests/families/collective_matmul)."""
    from schedgen.frontend.validate import load_spec
    from schedgen.plan import plan
    out = []
    for path in spec_files():
        p = plan(*load_spec(str(path)))
        if "pallas" in p.backends and not families.of(p).multi_device:
            out.append(path)
    return out


@pytest.mark.parametrize("path", _pallas_specs(), ids=lambda p: p.stem)
def test_bundled_pallas_kernels_lower_for_cuda(path, tmp_path):
    built = build_spec(str(path), cache=Cache(tmp_path / "c"))
    assert "mosaic_gpu" in _lower(built, tmp_path)


@pytest.mark.parametrize("case", sorted(HOLDOUTS))
def test_holdout_shapes_lower_for_cuda(case, tmp_path):
    spec, over = HOLDOUTS[case]
    built = build_spec(str(SPECS_DIR / spec), over, cache=Cache(tmp_path / "c"))
    assert "pallas" in built.plan.backends
    assert "mosaic_gpu" in _lower(built, tmp_path)


def test_the_refused_ragged_sizes_still_fail_to_lower(tmp_path, monkeypatch):
    """M = 3073 is off Mosaic GPU's 8-row GMEM tiling: the planner refuses it for Pallas; with that check turned
    off, jax 0.11.2 refuses it while lowering (TileTransform cannot round a partial tile up)."""
    from schedgen.families.matmul import schedule
    monkeypatch.setattr(schedule, "_tiling_quanta", lambda op, dims: {"M": 1, "N": 1, "K": 1})
    built = build_spec(str(SPECS_DIR / "matmul_bf16_4096.yaml"), {"op.sizes": {"M": 3073, "N": 512, "K": 128}, **ZERO},
                       cache=Cache(tmp_path / "c"))
    with pytest.raises(ValueError, match="When no rounding mode is specified, dimension 0 must have size smaller or "
                                         "a multiple of its tiling 8, but got 3073"):
        _lower(built, tmp_path)


def test_the_refused_ragged_attention_lengths_still_fail_to_lower(tmp_path, monkeypatch):
    """Sq = Skv = 1001 is off Mosaic GPU's 8-row GMEM tiling: the planner refuses it for Pallas (PALLAS_SEQ_QUANTUM);
    with that check turned off, jax 0.11.2 refuses it while lowering."""
    from schedgen.families.attention import plan as attention_plan
    monkeypatch.setattr(attention_plan, "PALLAS_SEQ_QUANTUM", 1)
    built = build_spec(str(SPECS_DIR / "attention_bf16_4096.yaml"), {"S": 1001, "schedule.backends": ["pallas"]},
                       cache=Cache(tmp_path / "c"))
    with pytest.raises(ValueError, match="When no rounding mode is specified, dimension 2 must have size smaller or "
                                         "a multiple of its tiling 8, but got 1001"):
        _lower(built, tmp_path)


def test_the_refused_log_sum_exp_rows_still_fail_to_lower(tmp_path, monkeypatch):
    """Sq = 5 is under the 8-row tiling (taken), but the [B, H, Sq] f32 log-sum-exp rows are 20 bytes: the planner
    refuses it for Pallas (PALLAS_LSE_QUANTUM); with that check off, jax 0.11.2 refuses the TMA store's strides."""
    from schedgen.families.attention import plan as attention_plan
    monkeypatch.setattr(attention_plan, "PALLAS_LSE_QUANTUM", 1)
    sizes = {"B": 1, "SQ": 5, "SKV": 1000, "H": 16, "D": 128}
    built = build_spec(str(SPECS_DIR / "attention_bf16_4096.yaml"),
                       {"op.sizes": sizes, "schedule.backends": ["pallas"],
                        "op.inputs.q.shape": ["B", "SQ", "H", "D"], "op.outputs.o.shape": ["B", "SQ", "H", "D"],
                        "op.inputs.k.shape": ["B", "SKV", "H", "D"], "op.inputs.v.shape": ["B", "SKV", "H", "D"],
                        "op.outputs.lse": {"shape": ["B", "H", "SQ"], "dtype": "f32"}}, cache=Cache(tmp_path / "c"))
    with pytest.raises(ValueError, match="async_copy requires all GMEM strides except the last one to be a multiple "
                                         "of 16 bytes"):
        _lower(built, tmp_path)
