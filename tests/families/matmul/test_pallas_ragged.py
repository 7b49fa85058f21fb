"""The Pallas matmul takes ragged problems (issue 16, backend parity): M, N, K that are not multiples of the tile,
with out_of_bounds: zero, as on CUDA (TMA zero-fills the lhs / rhs blocks past the edges and skips the output's
stores there), where jax 0.11.2 can lower them. Before, every ragged spec was a located error for the Pallas
backend. What jax 0.11.2 cannot do stays a located error that names why, pinned here so a jax upgrade shows when it
can: a ragged size that is not a multiple of Mosaic GPU's GMEM tiling (8 rows x 128 B; found on the H200: "When no
rounding mode is specified, dimension 0 must have size smaller or a multiple of its tiling 8, but got 3073"), and
an epilogue operand indexed along a ragged dimension (plgpu.load has no masked form)."""
from __future__ import annotations

import pytest

from conftest import SPECS_DIR
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.errors import SpecErrors
from schedgen.verify import verify_built

ZERO = {"schedule.in_specs.a.out_of_bounds": "zero", "schedule.in_specs.b.out_of_bounds": "zero"}
LINEAR = {"schedule.in_specs.x.out_of_bounds": "zero", "schedule.in_specs.w.out_of_bounds": "zero"}

CASES = {   # spec, sizes, overrides: every ragged size a multiple of 8 rows / 64 bf16 columns where it must be
    "awkward GEMM (M and N ragged)": ("matmul_bf16_4096.yaml", {"M": 200, "N": 320, "K": 128}, ZERO),
    "linear + bias, M and K ragged": ("matmul_bias_gelu_bf16.yaml", {"M": 72, "N": 512, "K": 192}, LINEAR),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_ragged_pallas_matmul_verifies_in_interpret_mode(case, tmp_path):
    spec, sizes, over = CASES[case]
    built = build_spec(str(SPECS_DIR / spec), {"op.sizes": sizes, **over}, cache=Cache(tmp_path / "c"))
    assert built.plan.tiles.ragged and "pallas" in built.plan.launch.backends
    (check,) = verify_built(built, ["pallas"], interpret=True)
    assert check.ok and not check.skipped, check.row()


@pytest.mark.parametrize("sizes, what, q", [({"M": 3000, "N": 5000, "K": 1000}, "K", 64),
                                            ({"M": 3073, "N": 512, "K": 128}, "M", 8)],
                         ids=["3000x5000x1000", "M=3073"])
def test_a_size_off_the_gmem_tiling_names_the_jax_limit(sizes, what, q, tmp_path):
    with pytest.raises(SpecErrors) as exc:
        build_spec(str(SPECS_DIR / "matmul_bf16_4096.yaml"), {"op.sizes": sizes, **ZERO,
                                                               "schedule.backends": ["cuda", "pallas"]},
                   cache=Cache(tmp_path / "c"))
    text = exc.value.render()
    assert "schedule.backends" in text and f"the Pallas matmul takes that only for {what} a multiple of {q}" in text
    assert "cannot round a partial tile up" in text and "schedule.backends: [cuda]" in text
    cuda = build_spec(str(SPECS_DIR / "matmul_bf16_4096.yaml"), {"op.sizes": sizes, **ZERO,
                                                                  "schedule.backends": ["cuda"]},
                      cache=Cache(tmp_path / "c"))
    assert cuda.plan.tiles.ragged


def test_an_epilogue_operand_along_a_ragged_dimension_names_the_jax_limit(tmp_path):
    with pytest.raises(SpecErrors) as exc:
        build_spec(str(SPECS_DIR / "matmul_bias_gelu_bf16.yaml"), {"op.sizes": {"M": 256, "N": 320, "K": 128},
                                                                   "schedule.backends": ["cuda", "pallas"], **LINEAR},
                   cache=Cache(tmp_path / "c"))
    text = exc.value.render()
    assert "op.inputs.bias.shape" in text and "plgpu.load, which has no masked form in jax 0.11.2" in text
    assert "N is not a multiple of the tile" in text and "schedule.backends: [cuda]" in text
    cuda = build_spec(str(SPECS_DIR / "matmul_bias_gelu_bf16.yaml"), {"op.sizes": {"M": 256, "N": 320, "K": 128},
                                                                      "schedule.backends": ["cuda"], **LINEAR},
                      cache=Cache(tmp_path / "c"))
    assert cuda.plan.tiles.ragged                                   # the CUDA kernel masks its epilogue loads


GPU_CASES = {**CASES, "an awkward 3000 x 5056 x 1024 GEMM": ("matmul_bf16_4096.yaml",
                                                              {"M": 3000, "N": 5056, "K": 1024}, ZERO)}


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(GPU_CASES))
def test_ragged_matmul_verifies_on_the_gpu_on_both_backends(case, tmp_path):
    """On the hardware TMA's zero fill and clipped stores are what the interpreter models."""
    spec, sizes, over = GPU_CASES[case]
    built = build_spec(str(SPECS_DIR / spec), {"op.sizes": sizes, **over}, cache=Cache(tmp_path / "c"))
    checks = verify_built(built, ["cuda", "pallas"])
    assert len(checks) == 2 and all(c.ok and not c.skipped for c in checks), [c.row() for c in checks]
