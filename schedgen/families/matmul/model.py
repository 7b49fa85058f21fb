"""The matmul family's op: a (batched) matrix product with an elementwise epilogue."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ...frontend.model import Float32, GemmPipeline, GemmSchedule, Ident, Model, Operand, Sizes, SnakePersistent


class BlockScales(Model):
    """fp8 block scaling (DeepGEMM's 128 x 128 recipe): lhs scales per (row, 128-K block), rhs scales per (128-N
    block, 128-K block); each K block's wgmma sum is scaled by them and added to the f32 accumulator (promoted per
    K block, so fp8 wgmma's shorter running sum covers 128 K terms only)."""
    lhs: Ident = Field(description=(
        "the input holding lhs's scales, f32 [M, KB] with KB = cdiv(K, 128): one per row and 128-K block"),
        examples=["scale_a"])
    rhs: Ident = Field(description=(
        "the input holding rhs's scales, f32 [NB, KB] with NB = cdiv(N, 128), KB = cdiv(K, 128): one per 128 x 128 "
        "block of rhs [N, K]"), examples=["scale_b"])


class MatmulOp(Model):
    """`out = epilogue(lhs @ rhs)`: a (batched) matrix product with f32 accumulation and an elementwise epilogue.

    `lhs` and `rhs` name the two matrix inputs; every other input is an epilogue operand (a scalar `[1]`, a
    bias row `[N]`, a column `[M, 1]`, or a full `[M, N]` / `[B, M, N]` matrix such as C). The epilogue body reads
    the accumulator as `acc` and assigns the output, e.g. `out = gelu(acc + bias)` or
    `out = alpha * acc + beta * c`. A second output (a value a backward pass keeps, e.g. `h` of
    `h = acc + bias; out = gelu(h)`) has the first one's shape and dtype and is written from the same tile.
    `transpose_lhs` stores lhs as [K, M]; `transpose_rhs` stores rhs as [N, K].
    fp8 inputs (f8e4m3 / f8e5m2, both the same) take lhs [M, K] and rhs [N, K] (`transpose_rhs: true`), their
    scales as epilogue operands: `out = acc * sa * sb` (per-tensor, [1] each) or `out = acc * sa * sb + bias`
    (per-row [M, 1] and per-column [N]).
    """
    kind: Literal["matmul"] = Field(description="a (batched) matrix product with an elementwise epilogue")
    sizes: Sizes = Field(default_factory=dict)
    constants: dict[Ident, Float32] = Field(default_factory=dict, description=(
        "named float32 constants the epilogue may use"), examples=[{"alpha": 1.0, "beta": 0.5}])
    inputs: dict[Ident, Operand] = Field(min_length=2, max_length=8, description=(
        "lhs and rhs ([M, K] and [K, N] as stored, [B, ...] when batched) and the epilogue's operands (a scalar [1], "
        "a bias row [N], a column [M, 1], a full [M, N] / [B, M, N] matrix)"))
    outputs: dict[Ident, Operand] = Field(min_length=1, max_length=2, description=(
        "the output, [M, N] ([B, M, N] when batched); optionally a second one of the same shape and dtype, a value "
        "the epilogue computes on the way (the pre-activation `acc` or a temporary) kept for a backward pass"),
        examples=[{"y": {"shape": ["M", "N"], "dtype": "bf16"}}])
    lhs: Ident = Field(default="a", description="the name of the left matrix input (default a)")
    rhs: Ident = Field(default="b", description="the name of the right matrix input (default b)")
    transpose_lhs: bool = Field(default=False, description="lhs is stored [K, M] (column-major A); default [M, K]")
    transpose_rhs: bool = Field(default=False, description=(
        "rhs is stored [N, K] (torch.nn.Linear's weight layout); default [K, N]"))
    epilogue: str | None = Field(default=None, min_length=1, max_length=4000, description=(
        "statements like a map body reading the f32 accumulator as `acc`, the epilogue operands and constants, "
        "and assigning the output(s). Default (absent): `<output> = acc`, cast to the output dtype"),
        examples=["out = acc", "out = gelu(acc + bias)", "out = alpha * acc + beta * c"])
    block_scales: BlockScales | None = Field(default=None, description=(
        "fp8 inputs only: 128 x 128 block scales (DeepGEMM style), applied per 128-K block inside the k-loop; the "
        "epilogue then reads the scaled sum as `acc`. Default (absent): no block scales (per-tensor or per-row "
        "scales are epilogue operands)"), examples=[{"lhs": "scale_a", "rhs": "scale_b"}])


# --------------------------------------------------------------------------- schedule: the fields only the matmul kernels read (beyond frontend/model.py's GemmSchedule, which the grouped and collective matmuls take too)


class MatmulPipeline(GemmPipeline):
    """The matmul family's pipeline: the wgmma kernel's, plus the k-loop of a block-scaled fp8 product."""
    partial_sums: Annotated[int, Field(ge=1, le=2)] | None = Field(default=None, description=(
        "matmul with op.block_scales (CUDA): the partial-sum register sets each consumer rotates through. 1: a 128-K "
        "block's wgmmas run into one partial sum that is waited for (wgmma.wait_group 0) and promoted into the f32 "
        "accumulator before the next block's wgmmas are issued; 2: two sets in turn, block k + 1's wgmmas issued "
        "before block k is waited for (wait_group 1) and promoted, so the tensor cores run under the promotion "
        "(three accumulator tiles of registers a thread, delay_release 0). Default (absent): the planner's (2 "
        "where the registers allow). Other ops take none"), examples=[1, 2])
    scale_prefetch: bool | None = Field(default=None, description=(
        "matmul with op.block_scales (CUDA): each consumer reads a K block's scales (global loads) a step ahead, "
        "a block ahead with partial_sums 1 and a pair ahead with 2, so their latency runs under a whole step's "
        "wgmmas; false: while the block's own wgmmas run. Default (absent): true with block scales (measured on "
        "the H200 at 4096x7168x16384: 1134 against 1102 TFLOP/s). Other ops take none"))


class MatmulPersistent(SnakePersistent):
    """The matmul family's tile loop: planar_snake bands, and stream-K."""
    decomposition: Literal["data_parallel", "stream_k"] = Field(default="data_parallel", description=(
        "how the persistent grid shares the work (matmul, CUDA backend, sm_90a): data_parallel (the default): each "
        "block runs whole tiles; stream_k: the tiles of the last partial wave plus one full wave are cut into "
        "k-steps split evenly over the blocks (the rest run whole, data-parallel); a tile's non-final blocks hand "
        "f32 partial tiles over a zeroed workspace and the block holding its first k-step sums them before the "
        "epilogue. Needs loop: nd_loop, num_blocks auto or at most the SM count, a 1-CTA cluster, "
        "consumer_schedule: cooperative, static sizes and the cuda backend only. Other families take "
        "data_parallel only"))


class MatmulSchedule(GemmSchedule):
    """The matmul family's schedule: the wgmma kernel's, with the block-scaled k-loop and stream-K."""
    pipeline: MatmulPipeline = Field(default=MatmulPipeline(), description="how blocks stream through SMEM and which warpgroups do what")
    persistent: MatmulPersistent = Field(default=MatmulPersistent(), description="the loop over output tiles, its order and how the blocks share the work")
    dispatch: Literal["single", "auto"] = Field(default="single", description=(
        "a dynamic M (N and K fixed, sm_90a): single (the default): one schedule, planned for M's max, serves every "
        "M; auto (opt-in until a GPU record times it): the planner splits M's range into buckets (64 rows, then "
        "powers of two up to four full waves of the large tile, then the rest) and derives each bucket's tile, "
        "2-CTA multicast and split-K (cluster [1, 1, S], only where backends leaves out pallas) from the tile "
        "counts against the SMs (no tuning run); `schedgen build` compiles one variant per distinct schedule and "
        "the package picks by the call's M, `schedgen explain` prints the table (range, schedule, why), `schedgen "
        "verify` checks every variant at its buckets' edges. A schedule field the spec writes (a BlockSpec, "
        "cluster) is kept in every variant; `build --tuned` with tune.buckets packages the tuning database's "
        "winners, a bucket without one taking the derived schedule at its bound. docs/tuning.md"), examples=["auto"])
