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

from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from .expr import IDENT_RE, RESERVED, check_float32, check_identifier

DType = Literal["bf16", "f16", "f32", "f8e4m3", "f8e5m2"]
ITEMSIZE = {"bf16": 2, "f16": 2, "f32": 4, "f8e4m3": 1, "f8e5m2": 1}


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


# Python's `$` also matches before a final newline (jsonschema uses `re.search`): `(?!\n)` rules that out there and
# is a no-op in ECMA-262, the dialect JSON Schema prescribes.
_NAME = IDENT_RE.pattern.removeprefix(r"\A").removesuffix(r"\Z")
_PART = _NAME + r"(\[[0-9]+\])*"
_F32_LIMIT = 2.0 ** 128 - 2.0 ** 103    # halfway between FLT_MAX and 2^128: this and above round to inf
_F32_TINY = 2.0 ** -150                 # half the smallest subnormal: this and below (but not 0) round to 0
_RESERVED_TEXT = ("reserved: C++ and Python keywords, the body functions, names the generated code uses (jnp, "
                  "threadIdx, min, max, ...), and names starting with 'sg_' or '__'")
SCHEMA_DEFINITIONS: dict[str, dict] = {
    "Identifier": {
        "type": "string", "pattern": "^" + _NAME + r"(?!\n)$",
        "not": {"anyOf": [{"enum": sorted(RESERVED)}, {"pattern": "^sg_"}]},
        "description": "a name: 1-63 ASCII letters, digits or '_', starting with a letter; not " + _RESERVED_TEXT,
        "patternErrorMessage": "names are 1-63 ASCII letters, digits or '_', starting with a letter"},
    "Float32": {
        "type": "number", "exclusiveMinimum": -_F32_LIMIT, "exclusiveMaximum": _F32_LIMIT,
        "not": {"type": "number", "anyOf": [{"exclusiveMinimum": 0, "maximum": _F32_TINY},
                                            {"minimum": -_F32_TINY, "exclusiveMaximum": 0}]},
        "description": "a finite number that rounds to a finite float32 (|x| at most 3.4028235e38) and, unless 0, "
                       "not to 0 (|x| above 2^-150)"},
    "TuneKey": {
        "type": "string", "maxLength": 121, "pattern": "^" + _PART + r"(\." + _PART + r")*(?!\n)$",
        "not": {"anyOf": [{"pattern": r"(^|\.)sg_"},
                          {"pattern": r"(^|\.)(" + "|".join(sorted(RESERVED)) + r")($|[.\[])"}]},
        "description": "a tune alias of the family (e.g. tile_n) or a dotted field path with optional [index], "
                       "e.g. schedule.pipeline.max_concurrent_steps or schedule.in_specs.x.block_shape[0]; each "
                       "part a name (not " + _RESERVED_TEXT + "); at most 121 characters",
        "patternErrorMessage": "write dotted names with optional [index], e.g. "
                               "schedule.pipeline.max_concurrent_steps"},
}

Ident = Annotated[str, AfterValidator(_ident), SchemaDef("Identifier")]
Float32 = Annotated[float, Field(allow_inf_nan=False), AfterValidator(_f32), SchemaDef("Float32")]
Dim = Union[Annotated[int, Field(ge=1, le=1 << 31)], Ident]  # a literal extent or a size name
IntExpr = Union[Annotated[int, Field(ge=1)], Annotated[str, Field(min_length=1, max_length=200)]]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# --------------------------------------------------------------------------- op: what


class Operand(Model):
    """An array argument: its shape over size names or literals, and its element type."""
    shape: list[Dim] = Field(min_length=1, max_length=5)
    dtype: DType


class DynamicSize(Model):
    """A size known only at the call: one package serves every value in min..max that is a multiple of
    `multiple_of`; the CUDA kernel takes it as a launch argument (one cubin for the whole range), the Pallas
    kernel is specialized by jax per shape and cached."""
    dynamic: Literal[True] = Field(description="declare the size dynamic (the only legal value: true)")
    max: Annotated[int, Field(ge=1, le=1 << 31, description="the largest value a call may pass (legality, 32-bit "
                                                             "index math and grid limits are checked at it)")]
    min: Annotated[int, Field(ge=1, le=1 << 31, description="the smallest value a call may pass (default: "
                                                             "multiple_of)")] | None = None
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
    tiling: list[Annotated[int, Field(ge=1)]] | None = Field(default=None, min_length=1, max_length=5)
    swizzle: Literal["auto", 0, 32, 64, 128] = "auto"
    transpose: list[Annotated[int, Field(ge=0)]] | None = Field(default=None, min_length=2, max_length=5)


class BlockSpec(Model):
    """Which block of a GMEM array one pipeline step sees, and how it is laid out in SMEM."""
    block_shape: list[Annotated[int, Field(ge=1)]] = Field(min_length=1, max_length=5)
    index_map: str | None = Field(default=None, max_length=400)
    memory_space: Literal["smem", "gmem", "regs", "tmem"] = "smem"
    transforms: Transforms = Transforms()
    delay_release: Annotated[int, Field(ge=0, le=8)] = 0
    collective_axes: list[Ident] = Field(default_factory=list, max_length=2)
    out_of_bounds: Literal["reject", "zero", "nan"] = "reject"


class Barrier(Model):
    """An array of mbarriers. The planner names its own (e.g. `full`, `empty`); an entry here overrides them."""
    num_arrivals: Annotated[int, Field(ge=1, le=1024)] = 1
    num_barriers: Annotated[int, Field(ge=1, le=32)] = 1


class Pipeline(Model):
    """How GMEM blocks stream through SMEM: emit_pipeline (all warps) or warp-specialized producer/consumers."""
    kind: Literal["none", "emit_pipeline", "warp_specialized"] = "emit_pipeline"
    max_concurrent_steps: Annotated[int, Field(ge=1, le=16)] = 2
    memory_registers: Annotated[int, Field(ge=24, le=256)] | None = None
    compute_registers: Annotated[int, Field(ge=24, le=256)] | None = None
    num_compute_wgs: Annotated[int, Field(ge=1, le=3)] = 1
    wg_axis: Ident | None = None


class Persistent(Model):
    """The loop over output tiles: one block per tile, or a persistent grid (nd_loop) in a tile order.

    `tile_order: lpt` (attention) starts the longest tiles first (causal: the query blocks with the most keys),
    heads innermost within groups of heads whose K/V fit in the L2 together."""
    loop: Literal["none", "nd_loop", "dynamic"] = "nd_loop"
    num_blocks: Union[Literal["auto"], Annotated[int, Field(ge=1, le=1 << 20)]] = "auto"
    tile_order: Literal["row_major", "planar_snake", "lpt"] = "row_major"
    minor_dim: Annotated[int, Field(ge=0, le=1)] = 0
    tile_width: Annotated[int, Field(ge=1, le=64)] = 1


class Epilogue(Model):
    """How a matmul tile leaves the chip: `tile` [rows, cols] chunks staged through `buffers` SMEM buffers per
    consumer warpgroup, each stored by TMA (copy_smem_to_gmem) while the next chunk is computed; or (store: direct)
    written from registers by every thread, so the warpgroup goes on to the next tile while the stores drain."""
    tile: list[Annotated[int, Field(ge=8, le=256)]] | None = Field(default=None, min_length=2, max_length=2)
    buffers: Annotated[int, Field(ge=1, le=4)] = 2
    store: Literal["tma", "direct"] = "tma"   # direct: each thread stores its accumulator fragment (no SMEM, no barriers)


class RemoteRef(Model):
    """`plgpu.remote_ref(ref, device_id)`: a peer device's copy of one of the kernel's buffers. `device_id` is an
    integer expression in the mesh axis name (this device's index along it) and integer literals, e.g.
    "(x - 1) % 2"; it is evaluated for every device and must name a device of the mesh."""
    device_id: Annotated[str, Field(min_length=1, max_length=200)]


class Semaphore(Model):
    """A cross-device semaphore (`plgpu.SemaphoreType.REGULAR`, in GMEM): signalled on a peer (`pl.semaphore_signal`
    with `device_id`, or `plgpu.semaphore_signal_parallel` of `SemaphoreSignal`s) and waited on where it lives
    (`pl.semaphore_wait(sem, value, decrement=False)`: counts only rise). `signal`: semaphore_signal (each signal a
    release of its own) or semaphore_signal_parallel (signals issued together behind one system-scope fence).
    `per`: what one semaphore of the array counts: `chunk` (one device's whole lhs), `row_block` (one tile row of
    it: the receiver starts on the rows that landed), `launch` (one kernel launch, for `done`). The Pallas rendering
    takes semaphore_signal only (jax 0.11.2 puts semaphore_signal_parallel's fence after its adds)."""
    signal: Literal["semaphore_signal", "semaphore_signal_parallel"] = "semaphore_signal"
    per: Literal["chunk", "row_block", "launch"] | None = None


class Collective(Model):
    """How a multi-device kernel moves data between the devices of `op.mesh`.

    `transport: remote_ref` (the default) is peer-to-peer: each device forwards lhs chunks to its ring neighbour
    through remote refs (Pallas: `plgpu.remote_ref`; CUDA: peer pointers) and semaphores. The NVLink multicast
    entries (`multimem_store`, `multimem_load_reduce`, and `semaphore_signal_multicast` that rides on them) are NOT
    SUPPORTED by this release (it never sets up NVLink multicast: no cuMulticastCreate): asking for them is a located
    error; their PTX (multimem.st / multimem.ld_reduce / multimem.red) is rendered and assembled to SASS in CI only.
    `remote_refs` and `semaphores` name the kernel's own (remote_refs: `gather`, where this device's chunks go;
    semaphores: `received`, `done`); an entry here sets their device id / signalling."""
    transport: Literal["remote_ref", "multimem_store", "multimem_load_reduce"] = Field(
        default="remote_ref",
        description="remote_ref: peer-to-peer remote refs and semaphores. multimem_store / multimem_load_reduce: "
                    "NVLink multicast, which is not supported by this release (their PTX is rendered and "
                    "assembled in CI only)")
    remote_refs: dict[Ident, RemoteRef] = Field(default_factory=dict)
    semaphores: dict[Ident, Semaphore] = Field(default_factory=dict)


class CompilerParams(Model):
    approx_math: bool = False
    lowering_semantics: Literal["lane", "warpgroup"] = "warpgroup"
    unsafe_no_auto_barriers: bool = False
    profile_space: Annotated[int, Field(ge=0, le=1 << 20)] = 0


class Schedule(Model):
    grid: list[IntExpr] | None = Field(default=None, min_length=1, max_length=5)
    grid_names: list[Ident] | None = Field(default=None, min_length=1, max_length=5)
    cluster: list[Annotated[int, Field(ge=1, le=16)]] = Field(default_factory=lambda: [1], min_length=1, max_length=3)
    num_warpgroups: Annotated[int, Field(ge=1, le=4)] = 1
    in_specs: dict[Ident, BlockSpec] = Field(default_factory=dict)
    out_specs: dict[Ident, BlockSpec] = Field(default_factory=dict)
    barriers: dict[Ident, Barrier] = Field(default_factory=dict)
    pipeline: Pipeline = Pipeline()
    persistent: Persistent = Persistent()
    epilogue: Epilogue = Epilogue()
    compiler_params: CompilerParams = CompilerParams()
    collective: Collective | None = None
    backends: list[Literal["cuda", "pallas"]] = Field(default_factory=lambda: ["cuda", "pallas"], min_length=1)


class Tune(Model):
    """Values to sweep: dotted field paths into the file -> candidate values; constraints over them."""
    params: dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.\[\]]{0,120}$"), AfterValidator(_tune_key),
                           SchemaDef("TuneKey")],
                 list[Union[int, float, str, bool]]] = Field(default_factory=dict)
    constraints: list[Annotated[str, Field(max_length=400)]] = Field(default_factory=list)


