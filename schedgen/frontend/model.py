"""The schedule-file model: what the kernel computes (`op`) and how (`schedule`), plus `tune`.

Strict pydantic v2 models: unknown keys are rejected, nothing is coerced (a string is not a number),
models are frozen. Field names follow the Pallas Mosaic GPU API (`block_shape`, `index_map`,
`transforms`, `delay_release`, `collective_axes`, `max_concurrent_steps`, ...), so users recognise
them. Cross-field rules that need the whole file (names used by expressions, shapes against blocks,
hardware limits) live in the plan stage, which reports them with the same locations.
"""
from __future__ import annotations

import re
from typing import Annotated, Literal, Union

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, model_validator

from .expr import IDENT_RE, RESERVED, check_float32, check_identifier


class SchemaAlsoAccepts:
    """A JSON-Schema-only annotation: the enum also lists values a BeforeValidator maps onto its members (aliases),
    so that the schema accepts what the models accept; validation is unchanged."""

    def __init__(self, *values: str) -> None:
        self.values = values

    def __get_pydantic_json_schema__(self, core_schema, handler) -> dict:
        out = handler(core_schema)
        return {**out, "enum": [*out["enum"], *self.values]}


# Names users type for the dtypes (numpy / jax / torch spellings): read as the dtype they name.
DTYPE_ALIASES = {"bfloat16": "bf16", "float16": "f16", "half": "f16", "fp16": "f16", "float32": "f32",
                 "float": "f32", "fp32": "f32", "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2"}
DType = Annotated[Literal["bf16", "f16", "f32", "f8e4m3", "f8e5m2"],
                  BeforeValidator(lambda v: DTYPE_ALIASES.get(v, v) if isinstance(v, str) else v),
                  SchemaAlsoAccepts(*DTYPE_ALIASES)]
# Integer element types of index operands: the rowwise family's class indices (cross-entropy's targets, declared
# i32 / i64 in a spec: IndexDType); grouped_matmul derives its i32 group offsets itself.
INDEX_DTYPE_ALIASES = {"int32": "i32", "int64": "i64", "long": "i64"}
IndexDType = Annotated[Literal["i32", "i64"],
                       BeforeValidator(lambda v: INDEX_DTYPE_ALIASES.get(v, v) if isinstance(v, str) else v),
                       SchemaAlsoAccepts(*INDEX_DTYPE_ALIASES)]
ITEMSIZE = {"bf16": 2, "f16": 2, "f32": 4, "f8e4m3": 1, "f8e5m2": 1, "i32": 4, "i64": 8}


def _ident(value: str) -> str:
    why = check_identifier(value)
    if why:
        raise ValueError(why)
    return value


def _f32(value: float) -> float:
    why = check_float32(value)
    if why:
        raise ValueError(why)
    return value


def _tune_key(value: str) -> str:
    """A dotted field path: each part a legal name, optionally indexed (schedule.in_specs.x.block_shape[0])."""
    for part in value.split("."):
        why = check_identifier(part.split("[", 1)[0])
        if why or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*(\[[0-9]+\])*", part):
            raise ValueError(f"{value!r} is not a field path: write dotted names with optional [index], e.g. "
                             f"schedule.pipeline.max_concurrent_steps" + (f" ({why})" if why else ""))
    return value


class SchemaDef:
    """A JSON-Schema-only annotation: the exported schema refers to `SCHEMA_DEFINITIONS[name]` here (the same rule
    as the validator beside it, as `pattern` / bounds); validation is unchanged."""

    def __init__(self, name: str) -> None:
        assert name in SCHEMA_DEFINITIONS, name
        self.name = name

    def __get_pydantic_json_schema__(self, core_schema, handler) -> dict:
        return {**handler(core_schema), "x-schedgen-def": self.name}


# The name rule as one pattern, so that editors show one message (the YAML language server's patternErrorMessage; a
# `not` schema has a fixed "matches a schema that is not allowed"): reserved words and the sg_ prefix as negative
# lookaheads. Python's `$` also matches before a final newline (jsonschema uses `re.search`): the trailing `(?!\n)`
# rules that out there and is a no-op in ECMA-262, the dialect JSON Schema prescribes.
_NAME = IDENT_RE.pattern.removeprefix(r"\A").removesuffix(r"\Z")
_NOT_RESERVED = r"(?!sg_)(?!(?:" + "|".join(sorted(RESERVED, key=lambda w: (-len(w), w))) + r")(?:$|[.\[]))"
_PART = _NOT_RESERVED + _NAME + r"(\[[0-9]+\])*"
_F32_LIMIT = 2.0 ** 128 - 2.0 ** 103    # halfway between FLT_MAX and 2^128: this and above round to inf
_F32_TINY = 2.0 ** -150                 # half the smallest subnormal: this and below (but not 0) round to 0
_LEGAL = ("1-63 ASCII letters, digits or '_', starting with a letter; not a reserved word (a C++ or Python keyword, "
          "a body function, a name the generated code uses: jnp, threadIdx, min, max, ...) nor starting with 'sg_'")
SCHEMA_DEFINITIONS: dict[str, dict] = {
    "Identifier": {
        "type": "string", "pattern": "^" + _NOT_RESERVED + _NAME + r"(?!\n)$",
        "description": "a name: " + _LEGAL, "patternErrorMessage": "names are " + _LEGAL},
    "Float32": {
        "type": "number", "exclusiveMinimum": -_F32_LIMIT, "exclusiveMaximum": _F32_LIMIT,
        "if": {"type": "number", "minimum": -_F32_TINY, "maximum": _F32_TINY},
        "then": {"const": 0, "errorMessage": "underflows to 0 in float32: write 0, or a value above 2^-150 "
                                             "(about 7.0e-46) in magnitude"},
        "description": "a finite number that rounds to a finite float32 (|x| at most 3.4028235e38) and, unless 0, "
                       "not to 0 (|x| above 2^-150)"},
    "TuneKey": {
        "type": "string", "maxLength": 121, "pattern": "^" + _PART + r"(\." + _PART + r")*(?!\n)$",
        "description": "a tune alias of the family (e.g. tile_n) or a dotted field path with optional [index], "
                       "e.g. schedule.pipeline.max_concurrent_steps or schedule.in_specs.x.block_shape[0]; each "
                       "part a name (" + _LEGAL + "); at most 121 characters",
        "patternErrorMessage": "write dotted names with optional [index], e.g. "
                               "schedule.pipeline.max_concurrent_steps; each part " + _LEGAL},
}

Ident = Annotated[str, AfterValidator(_ident), SchemaDef("Identifier")]
Float32 = Annotated[float, Field(allow_inf_nan=False), AfterValidator(_f32), SchemaDef("Float32")]
Dim = Union[Annotated[int, Field(ge=1, le=1 << 31)], Ident]  # a literal extent or a size name
IntExpr = Union[Annotated[int, Field(ge=1)], Annotated[str, Field(min_length=1, max_length=200)]]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)



def recast(value, model: type[BaseModel]):
    """`value` (a model instance) as an instance of `model`, field by field and nested models alike: the fields both
    have keep their values (and whether they were written: `model_fields_set`), the rest take `model`'s defaults.
    For a family that plans part of its kernel with another family's planner (a step's spec carries that family's
    schedule model)."""
    if not isinstance(value, BaseModel):
        return value
    fields = {}
    for name, field in model.model_fields.items():
        if name in type(value).model_fields:
            sub = getattr(value, name)
            inner = field.annotation if isinstance(field.annotation, type) else None
            if isinstance(sub, BaseModel) and inner is not None and issubclass(inner, BaseModel) \
                    and type(sub) is not inner:
                sub = recast(sub, inner)
            fields[name] = sub
        else:
            fields[name] = field.get_default(call_default_factory=True)
    return model.model_construct(_fields_set=set(value.model_fields_set) & set(model.model_fields), **fields)

# --------------------------------------------------------------------------- op: what


class Operand(Model):
    """An array argument: its shape over size names or literals, and its element type."""
    shape: list[Dim] = Field(min_length=1, max_length=5, description=(
        "the array's extents, outermost first (row-major, C order): each a literal (1..2^31) or a name of op.sizes; "
        "1-5 dimensions (what each family accepts per operand is checked by its planner)"),
        examples=[["M", "N"], ["B", "S", "H", "D"], ["N"]])
    dtype: DType = Field(description=(
        "element type (f8e4m3 / f8e5m2: jnp.float8_e4m3fn / float8_e5m2; the numpy / torch spellings bfloat16, "
        "float16, half, fp16, float32, float, fp32, float8_e4m3fn, float8_e5m2 are read as these). What each family takes is checked by its "
        "planner: matmul bf16 / f16 / f8e4m3 / f8e5m2 in (fp8: lhs [M, K] and rhs [N, K]), collective_matmul bf16 / f16 in, "
        "bf16 / f16 / f32 out; attention bf16 / f16, one dtype "
        "for q, k, v and o, the lse output f32"))


class DynamicSize(Model):
    """A size known only at the call: one package serves every value in min..max that is a multiple of
    `multiple_of`; the CUDA kernel takes it as a launch argument (one cubin for the whole range), the Pallas
    kernel is specialized by jax per shape and cached."""
    dynamic: Literal[True] = Field(description="declare the size dynamic (the only legal value: true)")
    max: Annotated[int, Field(ge=1, le=1 << 31, description="the largest value a call may pass (legality, 32-bit "
                                                             "index math and grid limits are checked at it)")]
    min: Annotated[int, Field(ge=1, le=1 << 31)] | None = Field(default=None, description=(
        "the smallest value a call may pass (default: multiple_of)"))
    multiple_of: Annotated[int, Field(ge=1, le=1 << 16, description="every value is a multiple of this "
                                                                     "(a multiple of the tile avoids ragged edges)")] = 1

    @property
    def lowest(self) -> int:
        """min, or multiple_of when min is not written."""
        return self.multiple_of if self.min is None else self.min

    @model_validator(mode="after")
    def _range(self) -> "DynamicSize":
        if self.lowest > self.max:
            raise ValueError(f"min = {self.lowest} is above max = {self.max}")
        if self.max % self.multiple_of:
            raise ValueError(f"max = {self.max} is not a multiple of multiple_of = {self.multiple_of}")
        if self.lowest % self.multiple_of:
            raise ValueError(f"min = {self.lowest} is not a multiple of multiple_of = {self.multiple_of} "
                             f"(use min: {-(-self.lowest // self.multiple_of) * self.multiple_of})")
        return self


# A size: a literal extent (the kernel is specialized for it) or a dynamic range
SizeValue = Annotated[Union[Annotated[int, Field(ge=1, le=1 << 31), Tag("fixed-size")],
                            Annotated[DynamicSize, Tag("dynamic-size")]],
                      Discriminator(lambda v: "dynamic-size" if isinstance(v, (dict, DynamicSize)) else "fixed-size")]
Sizes = Annotated[dict[Ident, SizeValue], Field(
    description="named extents the shapes use: an int (fixed: the kernel is specialized for it) or "
                "{dynamic: true, max: N, multiple_of: K} (any value in range at each call, one cubin)")]


# --------------------------------------------------------------------------- schedule: how


class Transforms(Model):
    """SMEM layout of a block: TilingTransform, SwizzleTransform, TransposeTransform."""
    tiling: list[Annotated[int, Field(ge=1)]] | None = Field(default=None, min_length=1, max_length=5, description=(
        "plgpu.TilingTransform: the SMEM tile the block is cut into, innermost dimensions last. Default (absent): "
        "the planner's (8 rows of swizzle / itemsize elements, the layout TMA writes with the swizzle). map: a "
        "tiling whose last entry is that width and that divides the block; matmul: exactly that tiling (write it "
        "or leave it out); attention: must be left out"), examples=[[8, 64]])
    swizzle: Literal["auto", 0, 32, 64, 128] = Field(default="auto", description=(
        "plgpu.SwizzleTransform in bytes (0: none). auto (the default): the widest swizzle the block's minor extent "
        "in bytes allows; an explicit value is checked against that extent. attention: auto or 128 only"))
    transpose: list[Annotated[int, Field(ge=0)]] | None = Field(default=None, min_length=2, max_length=5, description=(
        "plgpu.TransposeTransform permutation. No family takes it today: map reads blocks row-major, matmul says the "
        "stored layout with op.transpose_lhs / op.transpose_rhs (wgmma reads either major order), attention's "
        "operand layouts are fixed; a value is a located error"), examples=[[1, 0]])


class BlockSpec(Model):
    """Which block of a GMEM array one pipeline step sees, and how it is laid out in SMEM."""
    block_shape: list[Annotated[int, Field(ge=1)]] = Field(min_length=1, max_length=5, description=(
        "the block one pipeline step moves, in elements, one entry per dimension of the operand. matmul: lhs [tile_m, tile_k], rhs [tile_k, "
        "tile_n] as stored (swapped when transposed), out [tile_m, tile_n]; attention: q [block_q, head_dim], k / v "
        "[block_kv, head_dim]; the inner extent in bytes must be a multiple of 16 (TMA)"),
        examples=[[32, 256], [128, 64], [1, 32, 128]])
    index_map: str | None = Field(default=None, max_length=400, description=(
        "map only: the block index of this operand at a grid point, as a tuple of integer expressions over the grid "
        "names and size names (integer literals, + - * // %; no function calls, no true division). Default "
        "(absent): the operand follows the output block, its broadcast dimensions at block 0. Checked at every "
        "grid point (by its affine structure, or point by point). map: it must pick the block the body's numpy "
        "broadcasting reads (it spells the broadcast and never moves data: a map to another block, such as a "
        "partner half `(t, h, 1 - p)`, is a located error; pass the partner as an input of its own, as "
        "specs/rope_bf16_dynamic.yaml does). matmul and attention derive their index maps; an index_map there is a "
        "located error"),
        examples=["(i, j)", "(j,)", "(b, i, j)", "(0, j)", "(i // 2, j)"])
    memory_space: Literal["smem", "gmem", "regs", "tmem"] = Field(default="smem", description=(
        "where the block lives: smem (the default; TMA into shared memory) is the only value the Hopper kernels "
        "take; gmem and regs are refused by every family, tmem is Blackwell-only (sm_100a)"))
    transforms: Transforms = Field(default=Transforms(), description="the block's SMEM layout (swizzle, tiling, "
                                                                    "transpose)")
    delay_release: Annotated[int, Field(ge=0, le=8)] = Field(default=0, description=(
        "emit_pipeline's delay_release: how many later steps a stage stays held after its step (0: released "
        "when the step ends); must be below pipeline.max_concurrent_steps. matmul / collective_matmul: the wgmma "
        "groups kept in flight before a stage is freed (the CUDA kernel takes 0 or 1); map: the stage is released that many steps late; attention: must be 0"))
    collective_axes: list[Ident] = Field(default_factory=list, max_length=2, description=(
        "cluster axes over which this block is loaded once and multicast to every CTA. matmul: only the operand "
        "the cluster's CTAs share (rhs with cluster [2, 1], lhs with [1, 2]); the multicast follows "
        "schedule.cluster. grouped_matmul: x (the lhs) with cluster [1, 2]. map and attention share no operand: a "
        "value is a located error"),
        examples=[["x"]])
    out_of_bounds: Literal["reject", "zero", "nan"] = Field(default="reject", description=(
        "a block that runs past the array's edge: reject (the default): the extent must be a multiple of the "
        "block, else a located error; zero: TMA zero-fills loads past the edge and clips the stores (map; matmul "
        "on both backends, though on Pallas not with an epilogue operand indexed along the ragged dimension); nan: fills with NaN (map). matmul refuses nan (NaN in the K padding would poison whole rows); "
        "attention takes reject only"))


class Barrier(Model):
    """An array of mbarriers. The planner names its own (e.g. `full`, `empty`); an entry here overrides them."""
    num_arrivals: Annotated[int, Field(ge=1, le=1024)] = Field(default=1, description=(
        "arrivals that complete one phase of each barrier (plgpu.Barrier num_arrivals). map: 'full'; matmul: "
        "'full' / 'empty' (the TMA ring); attention: 'schedule', the consumer ping-pong barrier, one arrival per "
        "consumer warpgroup"))
    num_barriers: Annotated[int, Field(ge=1, le=32)] = Field(default=1, description=(
        "how many barriers the array holds. The ring's 'full' / 'empty' have one per pipeline stage (must equal "
        "pipeline.max_concurrent_steps); attention's 'schedule' is one barrier"))


class Pipeline(Model):
    """How GMEM blocks stream through SMEM: emit_pipeline (all warps) or warp-specialized producer/consumers."""
    kind: Literal["none", "emit_pipeline", "warp_specialized"] = Field(default="emit_pipeline", description=(
        "none: one stage, no overlap; emit_pipeline (the default): plgpu.emit_pipeline, every warp loads and "
        "computes (map; rowwise's CUDA kernel copies the next row block or row segment into a two-slot SMEM ring by "
        "cp.async while it reduces this one, where none loads straight into the registers); warp_specialized: a TMA producer warpgroup and 1-3 consumer warpgroups "
        "(emit_pipeline_warp_specialized; matmul, collective_matmul and attention take only it and pick it when kind is "
        "not written; map refuses it). attention_backward (Pallas): emit_pipeline (picked when not written) is two "
        "kernels (dK/dV, then dQ recomputing S and dP); warp_specialized is ONE kernel in FlashAttention-3's form "
        "(num_compute_wgs consumers of 64 keys and a producer warpgroup; dQ partials summed by TMA reduce-add)"))
    max_concurrent_steps: Annotated[int, Field(ge=1, le=16)] = Field(default=2, description=(
        "the depth of the SMEM ring: stages in flight at once (each holds one block of every streamed operand); "
        "deeper hides more latency and costs SMEM (the planner checks the 227 KiB and says how many would fit). "
        "Not written: map and matmul pick a depth that fits beside the tile"))


class Persistent(Model):
    """The loop over output tiles: one block per tile, or a persistent grid (nd_loop) in a tile order.

    `tile_order: lpt` (attention) starts the longest tiles first (causal: the query blocks with the most keys),
    heads innermost within groups of heads whose K/V fit in the L2 together."""
    loop: Literal["none", "nd_loop", "dynamic"] = Field(default="nd_loop", description=(
        "none: one block a tile; nd_loop (the default): a persistent grid of num_blocks blocks walking the tiles "
        "in tile_order (plgpu.nd_loop; attention is persistent only when loop is written); dynamic: each CTA "
        "claims its next tile from a counter (attention, CUDA backend only; map and matmul refuse it on sm_90a: "
        "their tiles are all alike); on sm_100a (matmul, CUDA) a CTA a tile is launched and each running CTA "
        "claims the tile of one not launched yet by cluster launch control (dynamic_scheduling_loop: "
        "clusterlaunchcontrol.try_cancel / query_cancel)"))
    num_blocks: Union[Literal["auto"], Annotated[int, Field(ge=1, le=1 << 20)]] = Field(default="auto", description=(
        "blocks of a persistent grid: auto (the default): as many as the SMs hold at once (map: SMs x blocks an SM "
        "holds; matmul: SMs / cluster size), capped at the number of tiles; an int caps it (matmul: a multiple of the cluster size). attention "
        "takes auto only"))
    tile_order: Literal["row_major", "planar_snake", "lpt"] = Field(default="row_major", description=(
        "the order a persistent grid visits tiles: row_major (the default); planar_snake: bands of tile_width "
        "tiles along minor_dim, alternating direction, for L2 reuse (matmul, 2-D map grids); lpt: longest first "
        "(attention; causal tiles with the most keys first). Not written: matmul picks planar_snake with "
        "tile_width 8"))


# --------------------------------------------------------------------------- field groups several families take
# Not part of the core `Schedule`: a family's schedule model (in its folder, `Family.schedule_model`) adds the groups
# its kernels read, and a field no family model of an op's kind has is an unknown key at its location.


class WarpSpecializedPipeline(Pipeline):
    """A pipeline with a TMA producer warpgroup and consumer warpgroups (their count and register budgets)."""
    memory_registers: Annotated[int, Field(ge=24, le=256)] | None = Field(default=None, description=(
        "setmaxnreg budget (registers per thread, a multiple of 8) of the producer warpgroup of a warp-specialized "
        "kernel. Default (absent): the planner's (matmul: 40 with two consumers, 56 with one). matmul, "
        "collective_matmul, attention; map has no producer warpgroup"))
    compute_registers: Annotated[int, Field(ge=24, le=256)] | None = Field(default=None, description=(
        "setmaxnreg budget (registers per thread, a multiple of 8) of each consumer warpgroup; the block's total "
        "must fit the 64 K registers of an SM. Default (absent): the planner's (matmul: 232 with two consumers, "
        "240 with one). matmul, collective_matmul, attention"))
    num_compute_wgs: Annotated[int, Field(ge=1, le=3)] = Field(default=1, description=(
        "consumer warpgroups of a warp-specialized kernel, each owning a slice of the output tile: matmul / "
        "collective_matmul 1-2 (split along wg_axis); attention 1-3 on CUDA, 1-2 on Pallas (64 query rows each: "
        "block_q = 64 x this). Not written: matmul picks 2 when tile_m splits into two 64-row multiples, else 1; "
        "attention picks its consumer count (both backends render it); attention_backward with kind warp_specialized "
        "1-2 (64 keys each: 64 x this keys a block; picked 2 when Skv is a multiple of 128)"))


class SnakePersistent(Persistent):
    """A persistent loop over a 2-D tile grid that can walk it in planar_snake bands."""
    minor_dim: Annotated[int, Field(ge=0, le=1)] = Field(default=0, description=(
        "planar_snake: the grid dimension (0 or 1) that runs fastest within a band (map, matmul; attention must "
        "leave it 0)"))
    tile_width: Annotated[int, Field(ge=1, le=64)] = Field(default=1, description=(
        "planar_snake: the band width in tiles (1: plain snake) (map, matmul; attention must leave it 1)"))


class GemmPipeline(WarpSpecializedPipeline):
    """The wgmma matmul kernel's pipeline: producer / consumer warpgroups, the axis they split, how they share tiles."""
    wg_axis: Ident | None = Field(default=None, description=(
        "matmul / collective_matmul: the tile axis the consumer warpgroups split, m or n. Default (absent): m when "
        "tile_m splits into a multiple of 64 rows per consumer, else n. attention (each consumer owns 64 query rows) takes none"),
        examples=["m", "n"])
    consumer_schedule: Literal["cooperative", "pingpong"] = Field(
        default="cooperative", description=(
            "matmul (CUDA backend only): how two consumer warpgroups share the output tiles. cooperative (the "
            "default): both work on one tile, split along wg_axis, and both wait through its epilogue; pingpong: each "
            "owns a whole tile (tile_m x tile_n, tile_m / 64 wgmma M-blocks; its accumulators are tile_m x tile_n / "
            "128 f32 a thread) and they take alternate tiles of the block's persistent sequence, so one's epilogue runs "
            "under the other's wgmma; an ordering barrier makes their k-loops take turns on the tensor cores "
            "(CUTLASS's ping-pong; without it a consumer a ring round ahead of the other would read a stage of the "
            "wrong round). pingpong needs num_compute_wgs: 2 and no wg_axis; the "
            "Pallas rendering and collective_matmul take cooperative only; map and attention take none"),
        examples=["cooperative", "pingpong"])


class CompilerParams(Model):
    """plgpu.CompilerParams of the Pallas rendering, and the CUDA kernel's equivalents where there is one."""
    approx_math: bool = Field(default=False, description=(
        "fast approximate math: plgpu.CompilerParams approx_math on Pallas (map, matmul, attention); attention's "
        "CUDA kernel also takes the approximate exp2 (ex2.approx) for its softmax, and attention picks true when "
        "it is not written; rowwise: ex2 / lg2 / rsqrt.approx and a reciprocal a row on CUDA, picked true when "
        "every output is bf16 or f16, or the f32 outputs are per-row values of bf16 / f16 rows (cross-entropy's "
        "loss); collective_matmul does not read it"))
    lowering_semantics: Literal["lane", "warpgroup"] = Field(default="warpgroup", description=(
        "Mosaic GPU lowering semantics of the Pallas rendering (no effect on CUDA): warpgroup (the default: array "
        "ops per warpgroup) or lane (per thread). map: both (a broadcast operand takes a named register layout in either); matmul: warpgroup "
        "(wgmma); attention: its Pallas kernel is written for lane (as jax's attention_mgpu), so leave it out or "
        "write lane"))
    unsafe_no_auto_barriers: bool = Field(default=False, description=(
        "Pallas: do not insert the barriers Mosaic GPU adds between SMEM writes and reads (plgpu.CompilerParams "
        "unsafe_no_auto_barriers). map only; matmul and attention refuse it (their register reads of SMEM need "
        "those barriers); no effect on the CUDA kernel"))
    profile_space: Annotated[int, Field(ge=0, le=1 << 20)] = Field(default=0, description=(
        "Pallas backend: Mosaic GPU's in-kernel profiler, in ranges per warpgroup (16 B of SMEM each, counted in "
        "the SMEM check; plgpu.CompilerParams profile_space); 0, the default: no profiling. Needs profile_dir. "
        "map, matmul, collective_matmul; the CUDA backend has no in-kernel profiler (a located error when "
        "backends lists cuda), and attention's Pallas kernel takes no profiler buffer"), examples=[256, 2048])
    profile_dir: str = Field(
        default="", max_length=4096, pattern=r"^[^\x00-\x1f\x7f]*$",
        description="Pallas backend, with profile_space: the directory Mosaic GPU's in-kernel profiler writes its "
                    "trace to (`<kernel>-<ns>-trace.json`, one per compiled shape: open it in Perfetto or "
                    "chrome://tracing). Relative paths are relative to the working directory of the program that "
                    "calls the kernel; the directory is created when the kernel is built. Both profile_space and "
                    "profile_dir, or neither.")


class Schedule(Model):
    """How the kernel runs: the core schedule every family has (grid, cluster, warpgroups, blocks, barriers, the
    pipeline's kind and depth, the tile loop and its order, compiler parameters, the backends and the target). A
    family's schedule model (`Family.schedule_model`, in its folder) subclasses it with the fields only its kernels
    read (the matmul's epilogue, the map's data path, ...); written under another family, such a field is an unknown
    key. Every field may be left out: the family's planner picks what it has a pick for (blocks,
    pipeline kind and depth, consumers, tile order, ...: `schedgen explain` lists the picks and why), the rest
    takes the default shown here. A written value is planned as written, and one a family cannot honour is a
    located error."""
    grid: list[IntExpr] | None = Field(default=None, min_length=1, max_length=5, description=(
        "map: the grid of blocks, one entry per output dimension: an int or an integer expression over size "
        "names; it must equal the output's block counts at every size in range. Default (absent): the planner's "
        "(cdiv of each output extent by its block). attention takes none (one block a tile)"),
        examples=[["M // 32", "N // 256"], [8, 128, 16]])
    cluster: list[Annotated[int, Field(ge=1, le=16)]] = Field(default_factory=lambda: [1], min_length=1, max_length=3,
                                                              description=(
        "CTAs per cluster along the tile grid (M, N) and the reduction (K): matmul [2, 1] shares the rhs tile "
        "between two CTAs along M by TMA multicast, [1, 2] the lhs; [1, 1, S] (S = 2-4, split-K) gives each output "
        "tile S CTAs that each run 1/S of its K steps and sum their f32 partial tiles through distributed shared "
        "memory into the cluster's rank 0, which runs the epilogue (for problems with fewer tiles than SMs: decode, "
        "long K; CUDA backend). rowwise [C, 1, 1] (C = 2, 4, 8 or 16, 16 non-portable) splits each row across C "
        "CTAs that combine every reduction's partials through distributed shared memory (CUDA backend; picked when "
        "a row kept for a later pass is too long for one CTA). grouped_matmul [1, 2] (ragged: m, CUDA backend): "
        "the two CTAs take adjacent tile columns of the same tile row of one group, x multicast to both (pairs "
        "along M could straddle two groups: not rendered). Default [1] (no cluster). map and attention share "
        "no operand: [1] only"),
        examples=[[1], [2, 1], [1, 2], [1, 1, 2]])
    num_warpgroups: Annotated[int, Field(ge=1, le=4)] = Field(default=1, description=(
        "map: warpgroups (128 threads each) per block, all running emit_pipeline (not written: 2 when a block has "
        "enough elements for 256 threads); map and rowwise: the CUDA kernel's (the Pallas kernel reads no thread "
        "count: written with no cuda backend it is an error). Warp-specialized kernels size "
        "themselves from pipeline.num_compute_wgs (attention requires 1 here)"))
    in_specs: dict[Ident, BlockSpec] = Field(default_factory=dict, description=(
        "BlockSpecs of the inputs, by operand name (plgpu.BlockSpec). The planner picks absent ones for the "
        "shapes (map: 32-row blocks of the output, zero-padded at ragged edges; matmul: the largest tile that "
        "fills the SMs, delay_release 1); `schedgen explain` lists each pick and why. "
        "matmul: lhs and rhs only (epilogue operands follow the output tile); attention: q, k, v"))
    out_specs: dict[Ident, BlockSpec] = Field(default_factory=dict, description=(
        "BlockSpecs of the outputs, by operand name. matmul: the output's block is the tile [tile_m, tile_n]; "
        "attention takes none (o follows q)"))
    barriers: dict[Ident, Barrier] = Field(default_factory=dict, description=(
        "overrides of the planner's own mbarrier arrays, by name: map 'full'; matmul 'full', 'empty'; attention "
        "'schedule' (the consumers' ping-pong; picked with one arrival per consumer when barriers is not written); "
        "another name is a located error"),
        examples=[{"schedule": {"num_arrivals": 2}}])
    pipeline: Pipeline = Field(default=Pipeline(), description="how blocks stream through SMEM and which "
                                                               "warpgroups do what")
    persistent: Persistent = Field(default=Persistent(), description="the loop over output tiles and its order")
    compiler_params: CompilerParams = Field(default=CompilerParams(), description="Mosaic GPU compiler parameters "
                                                                                  "(and their CUDA equivalents)")
    backends: list[Literal["cuda", "pallas"]] = Field(default_factory=lambda: ["cuda", "pallas"], min_length=1,
                                                      description=(
        "the backends to plan, render and build (default both); a feature one backend lacks is a located error "
        "only when that backend is listed. Not written, and only the Pallas rendering fails for reasons the spec "
        "did not write (the sizes, picked fields): the planner picks [cuda]"), examples=[["cuda"], ["cuda", "pallas"]])
    target: Literal["sm_90a", "sm_100a"] = Field(default="sm_90a", description=(
        "the GPU architecture the kernel is planned, rendered and compiled for: sm_90a (the default: Hopper, H100 / "
        "H200 / GH200; wgmma with the accumulator in registers) or sm_100a (Blackwell, B200 / GB200; tcgen05 MMA "
        "with the accumulator in tensor memory, TMEM). The planner checks the target's limits (SMEM, TMEM columns, "
        "cluster, MMA shapes); a feature of the other target is a located error. sm_100a: the matmul family (both "
        "backends) and the attention forward (the Pallas backend only: tcgen05 with S, P and O in TMEM); "
        "its kernels are compiled and their SASS checked on the CPU, but have NOT run on Blackwell hardware. A "
        "package runs only on a GPU of its target"), examples=["sm_90a", "sm_100a"])


# --------------------------------------------------------------------------- the wgmma GEMM kernel's schedule
# (plan/gemm): the schedule model of the families built on it subclasses GemmSchedule (several families: here)


class Epilogue(Model):
    """How a matmul tile leaves the chip: `tile` [rows, cols] chunks staged through `buffers` SMEM buffers per
    consumer warpgroup, each stored by TMA (copy_smem_to_gmem) while the next chunk is computed; or (store: direct)
    written from registers by every thread, so the warpgroup goes on to the next tile while the stores drain. On
    sm_100a each epilogue warp stages its own 32 rows in `buffers` SMEM tiles and stores them by TMA. `operands`: where
    the epilogue reads its row and column operands (global memory, or SMEM slices a producer warp copies in early)."""
    tile: list[Annotated[int, Field(ge=8, le=256)]] | None = Field(default=None, min_length=2, max_length=2, description=(
        "matmul / collective_matmul: the [rows, cols] chunk of the output staged in SMEM per TMA store: 64 rows "
        "(one wgmma M block) and a multiple of 16 columns dividing each consumer's columns, at most 128 bytes wide. "
        "Default (absent): [64, min(consumer columns, 128 B / itemsize)]. On sm_100a: [32, cols], one epilogue warp's "
        "rows, cols a multiple of 32 (a tcgen05.ld) dividing tile_n and at most 128 bytes wide (default: 128 bytes "
        "where they divide tile_n, else 32). attention takes none"),
        examples=[[64, 64], [64, 128]])
    buffers: Annotated[int, Field(ge=1, le=4)] = Field(default=2, description=(
        "SMEM staging buffers per consumer warpgroup (matmul / collective_matmul; 2: the next chunk is written "
        "while the previous store drains; on sm_100a per epilogue warp, counted in the SMEM budget beside the "
        "ring); attention takes the default only"))
    store: Literal["tma", "direct"] = Field(default="tma", description=(
        "tma (the default): chunks staged in SMEM and stored by TMA; direct: each thread stores its accumulator "
        "fragment from registers (no SMEM, no barriers; N must be even). matmul; the Pallas matmul and the sm_100a "
        "matmul keep TMA stores; attention takes tma only"))
    operands: Literal["global", "smem"] = Field(default="global", description=(
        "where the epilogue reads its vector operands (a row [N] such as a bias, a column [M, 1]): global (the "
        "default): each thread loads its values from global memory in the epilogue; smem: a producer warp copies "
        "each tile's slice of them into SMEM with cp.async while the k-loop runs, and the epilogue reads them "
        "there. matmul on sm_90a, CUDA backend only (the Pallas and sm_100a matmuls read global memory); needs a "
        "row or column operand"))


class GemmSchedule(Schedule):
    """The schedule of the wgmma GEMM kernel (plan/gemm) and the families built on it: the core fields, producer / consumer warpgroups, planar_snake bands and the epilogue."""
    pipeline: GemmPipeline = Field(default=GemmPipeline(), description="how blocks stream through SMEM and which warpgroups do what")
    persistent: SnakePersistent = Field(default=SnakePersistent(), description="the loop over output tiles and its order")
    epilogue: Epilogue = Field(default=Epilogue(), description="how a matmul output tile is stored")


class Backward(Model):
    """The backward pass the package carries (issue 19): which inputs get gradients and which forward values are
    kept for it. Its kernels are derived from the op (symbolic derivatives of the body / epilogue, the attention
    backward), built like any spec and wired into torch autograd and jax.grad."""
    wrt: list[Ident] | None = Field(default=None, max_length=16, description=(
        "the inputs that get gradients (default: every floating-point input); an input left out gets none, and "
        "its backward kernels are not built"), examples=[["x", "w"], ["q", "k", "v"]])
    save: list[Ident] | Literal["recompute"] | None = Field(default=None, description=(
        "forward values kept for the backward: names of the body's temporaries (map / rowwise), `acc` (the matmul "
        "epilogue's pre-activation) or the family's own (attention's `lse`), each then written by the forward "
        "kernel as an extra output; `recompute`: keep nothing and recompute in the backward; default: the "
        "family's choice (explain says which and why)"), examples=[["h"], ["acc"], "recompute"])


MAX_BUCKETS = 32      # bounds per size in tune.buckets (each bucket is one tuning run)


class Tune(Model):
    """Values to sweep: dotted field paths into the file -> candidate values; constraints over them."""
    params: dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.\[\]]{0,120}$"), AfterValidator(_tune_key),
                           SchemaDef("TuneKey")],
                 list[Union[int, float, str, bool]]] = Field(default_factory=dict, description=(
        "the search space of `schedgen tune`: a field path (or a family's alias, e.g. tile_m, tile_n, stages, "
        "cluster_m) -> the candidate values; the points are every combination, each planned (and the illegal "
        "ones pruned) before anything is compiled"),
        examples=[{"schedule.pipeline.max_concurrent_steps": [2, 3, 4]},
                  {"tile_m": [128, 256], "tile_n": [128, 256], "stages": [3, 4, 5]},
                  {"schedule.in_specs.a.block_shape[1]": [32, 64]}])
    constraints: list[Annotated[str, Field(max_length=400)]] = Field(default_factory=list, description=(
        "boolean expressions over the param names; a point where any is false is skipped"),
        examples=[["tile_m * tile_n <= 32768"]])
    buckets: dict[Ident, Annotated[list[Annotated[int, Field(ge=1, le=1 << 31)]],
                                   Field(min_length=1, max_length=MAX_BUCKETS)]] = Field(
        default_factory=dict, description=(
            "many shapes, one package: dynamic op.sizes -> the upper bounds of their buckets, increasing, the last "
            "the size's max; bucket i takes the sizes in (b[i-1], b[i]]. `schedgen tune` tunes each bucket at its "
            "bound (the shape written to the tuning database; several sizes: every combination), and "
            "`schedgen build --tuned` packages each bucket's best schedule as a variant that a call is dispatched "
            "to by its sizes. Each bound is a multiple of the size's multiple_of in its min..max"),
        examples=[{"M": [64, 256, 1024, 4096, 16384]}, {"M": [512, 4096, 32768]}])


