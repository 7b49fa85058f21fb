"""The Pallas matmul takes ragged problems (issue 16, backend parity): M, N, K that are not multiples of the tile,
with out_of_bounds: zero, as on CUDA (TMA zero-fills the lhs / rhs blocks past the edges and skips the output's
stores there). Before, every ragged spec was a located error for the Pallas backend ("needs M, N, K multiples of
the tile"). What jax 0.11.2 cannot do stays a located error that names why: an epilogue operand indexed along a
ragged dimension (plgpu.load has no masked form), pinned here so a jax upgrade shows when it can."""
from __future__ import annotations

import pytest

from conftest import SPECS_DIR
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.errors import SpecErrors
from schedgen.verify import verify_built

ZERO = {"schedule.in_specs.a.out_of_bounds": "zero", "schedule.in_specs.b.out_of_bounds": "zero"}
LINEAR = {"schedule.in_specs.x.out_of_bounds": "zero", "schedule.in_specs.w.out_of_bounds": "zero"}

CASES = {   # spec, sizes, overrides
    "awkward GEMM (M, N, K ragged)": ("matmul_bf16_4096.yaml", {"M": 200, "N": 300, "K": 72}, ZERO),
    "linear + bias, M and K ragged": ("matmul_bias_gelu_bf16.yaml", {"M": 77, "N": 512, "K": 100}, LINEAR),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_ragged_pallas_matmul_verifies_in_interpret_mode(case, tmp_path):
    spec, sizes, over = CASES[case]
    built = build_spec(str(SPECS_DIR / spec), {"op.sizes": sizes, **over}, cache=Cache(tmp_path / "c"))
    assert built.plan.ragged and "pallas" in built.plan.backends
    (check,) = verify_built(built, ["pallas"], interpret=True)
    assert check.ok and not check.skipped, check.row()


def test_an_epilogue_operand_along_a_ragged_dimension_names_the_jax_limit(tmp_path):
    with pytest.raises(SpecErrors) as exc:
        build_spec(str(SPECS_DIR / "matmul_bias_gelu_bf16.yaml"), {"op.sizes": {"M": 256, "N": 500, "K": 128},
                                                                   "schedule.backends": ["cuda", "pallas"], **LINEAR},
                   cache=Cache(tmp_path / "c"))
    text = exc.value.render()
    assert "op.inputs.bias.shape" in text and "plgpu.load, which has no masked form in jax 0.11.2" in text
    assert "N is not a multiple of the tile" in text and "schedule.backends: [cuda]" in text
    cuda = build_spec(str(SPECS_DIR / "matmul_bias_gelu_bf16.yaml"), {"op.sizes": {"M": 256, "N": 500, "K": 128},
                                                                      "schedule.backends": ["cuda"], **LINEAR},
                      cache=Cache(tmp_path / "c"))
    assert cuda.plan.ragged                                   # the CUDA kernel masks its epilogue loads
