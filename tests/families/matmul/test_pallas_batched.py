"""The Pallas matmul takes batched problems (issue 16, backend parity): tiles run batch-major, each batched operand
(lhs, rhs, a [B, M, N] epilogue operand) indexed at the tile's batch, a shared rhs read by every batch.

Before, a batched spec with the Pallas backend was a located error ("the Pallas matmul is not batched"), so the
two backends could not check each other on the batched GEMMs users bring."""
from __future__ import annotations

import textwrap

import jax
import pytest

from schedgen.build import build_spec, package
from schedgen.cache import Cache
from schedgen.runtime.arrays import DTYPES
from schedgen.runtime.kernel import load_package
from schedgen.verify import verify_built

SPEC = """\
    name: mm_batched_pallas
    op:
      kind: matmul
      sizes: {{B: 3, M: 256, N: 512, K: 128}}
      constants: {{alpha: 0.5, beta: 2.0}}
      inputs:
        a: {{shape: {a}, dtype: bf16}}
        b: {{shape: {b}, dtype: bf16}}
        bias: {{shape: [N], dtype: f32}}
        col: {{shape: [M, 1], dtype: bf16}}
        c: {{shape: [B, M, N], dtype: f32}}
      outputs:
        out: {{shape: [B, M, N], dtype: f32}}
      transpose_lhs: {tl}
      transpose_rhs: {tr}
      epilogue: |
        t = acc + bias
        out = alpha * t + beta * c + col
    schedule:
      backends: [cuda, pallas]
      in_specs:
        a: {{block_shape: {ablock}}}
        b: {{block_shape: {bblock}}}
      pipeline: {{kind: warp_specialized, num_compute_wgs: 2, max_concurrent_steps: 2}}
    """

CASES = {   # lhs shape, rhs shape, transposes
    "both batched": ("[B, M, K]", "[B, K, N]", "false", "false"),
    "shared rhs": ("[B, M, K]", "[K, N]", "false", "false"),
    "batched, both transposed": ("[B, K, M]", "[B, N, K]", "true", "true"),
}


def _built(tmp_path, case):
    a, b, tl, tr = CASES[case]
    path = tmp_path / "mm.yaml"
    ablock = "[64, 128]" if tl == "true" else "[128, 64]"       # blocks in the operands' stored order
    bblock = "[256, 64]" if tr == "true" else "[64, 256]"
    path.write_text(textwrap.dedent(SPEC.format(a=a, b=b, tl=tl, tr=tr, ablock=ablock, bblock=bblock)))
    return build_spec(str(path), cache=Cache(tmp_path / "cache"))


@pytest.mark.parametrize("case", sorted(CASES))
def test_batched_pallas_matmul_verifies_in_interpret_mode(case, tmp_path):
    built = _built(tmp_path, case)
    assert built.plan.batched and "pallas" in built.plan.launch.backends
    (check,) = verify_built(built, ["pallas"], interpret=True)
    assert check.ok and not check.skipped, check.row()


def test_batched_pallas_matmul_lowers_for_cuda(tmp_path):
    built = _built(tmp_path, "both batched")
    kernel = load_package(package(built, tmp_path / "out"))
    args = [jax.ShapeDtypeStruct(tuple(o.shape), DTYPES[o.dtype]) for o in kernel.inputs]
    text = jax.jit(kernel._pallas.module().make()).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert "mosaic_gpu" in text


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(CASES))
def test_batched_matmul_verifies_on_the_gpu_on_both_backends(case, tmp_path):
    built = _built(tmp_path, case)
    checks = verify_built(built, ["cuda", "pallas"])
    assert len(checks) == 2 and all(c.ok and not c.skipped for c in checks), [c.row() for c in checks]
