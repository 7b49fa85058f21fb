"""What the map planner passes between its phases and returns: the operand record, the plan itself (MapPlan), and the
phases' small typed values."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple


from ...plan.launch import KernelLaunch, inline_field
from ...plan.common import (
    SmemBuffer,
    TmaBox,
)
from ...plan.dims import DimLike
from ...plan.exprs import PlanExpr

if TYPE_CHECKING:
    from .registers import RegisterPath


@dataclass(frozen=True)
class MapOperand:
    name: str                 # the user's (validated) name
    cname: str                # identifier in generated code
    role: str                 # "in" | "out"
    dtype: str
    ctype: str
    itemsize: int
    shape: tuple[DimLike, ...]    # dims.size(name) for a dynamic dimension
    block: tuple[int, ...]
    tma: TmaBox
    tma_dims: tuple[int, ...]      # array dims the tensor map keeps (extent-1 dims dropped)
    tma_shape: tuple[DimLike, ...]
    tma_strides: tuple[DimLike, ...]   # bytes, numpy order
    block_bytes: int
    smem: SmemBuffer
    index_map: str                 # as written (or defaulted); for people, never pasted into code
    block_index: tuple[PlanExpr, ...]  # the index map's validated components over the grid names and sizes (with
                                       # the ranges they were proved to fit 32 bits over; roles: MapPlan.index_roles)
    row_strides: tuple[int, ...]   # per iteration dim except the minor: element-row stride in this block (0 = broadcast)
    minor_bcast: bool              # the minor dim is broadcast: one value per row, splatted
    rows: int                      # rows of the SMEM block (product of the non-minor block dims)
    oob_fill: str                  # "zero" | "nan": what TMA loads beyond the array's end
    delay_release: int             # pipeline steps a stage stays alive after its step
    tiling: tuple[int, ...] | None
    transpose: tuple[int, ...] | None


@dataclass(frozen=True)
class RegisterView:
    """How the Pallas kernel reads one input into the block's named register layout (columns.py)."""
    name: str
    gmem: bool                     # straight from GMEM into registers (a column: Mosaic GPU's TMA cannot load it),
                                   # else from its TMA-filled SMEM stage
    squeezed: tuple[int, ...]      # the operand's broadcast dimensions, indexed at 0 when it is read
    kept: tuple[int, ...]          # the iteration dimensions its value holds (broadcast_in_dim's dimensions)
    reduced: tuple[int, ...]       # the iteration dimensions it lacks (the layout's reduce axes)
    shape: tuple[int, ...] = ()    # the value read (its block less the squeezed dimensions)


@dataclass(frozen=True)
class RegisterLayout:
    """The one Mosaic GPU TiledLayout every [.., rows, cols] value of a Pallas block takes when an input is broadcast
    (a column or a row): jax 0.11.2's layout inference finds none for a column, and finds one for a row only by a
    search that runs out (columns.py), so the kernel names one. A
    warpgroup's 4 warps split the rows, each warp's 32 lanes `lane_rows` rows by `lane_cols` vectors of `vec`
    elements; (tiles, warp_dims, lane_dims, vector_dim) is that layout in jax's canonical form. `strided`: instead
    a WG_STRIDED layout of `vec`-element vectors over the flattened block (rows only, on arrays whose SMEM blocks
    the tiled layout's inferred tiling would not fit; the tiling fields are then unused)."""
    rows: int                      # the base tile: 4 * lane_rows rows ...
    cols: int                      # ... by lane_cols * vec columns
    lane_rows: int
    lane_cols: int
    vec: int
    tiles: tuple[tuple[int, ...], ...]
    warp_dims: tuple[int, ...]
    lane_dims: tuple[int, ...]
    vector_dim: int
    views: tuple[RegisterView, ...]    # one per input, in input order
    strided: bool = False


@dataclass(frozen=True)
class MapPlan:
    launch: KernelLaunch = inline_field()   # the launch header (plan/launch.py; plan.json: its fields here)
    sizes: dict
    constants: dict
    grid: tuple[DimLike, ...]                  # blocks along each output dimension (extents)
    grid_names: tuple[str, ...]
    grid_vars: tuple[str, ...]                 # the identifiers generated code uses for them (g_<name>)
    num_tiles: DimLike
    block: tuple[int, ...]
    tile_order: str
    minor_dim: int
    tile_width: int
    num_warpgroups: int
    stages: int
    vec: int
    inputs: tuple[MapOperand, ...]
    outputs: tuple[MapOperand, ...]
    smem_buffers: tuple[SmemBuffer, ...]
    full_barrier: SmemBuffer
    full_arrivals: int
    delay_release: int                          # CUDA: a stage is refilled this many steps after its tile (max over inputs)
    tx_bytes: int
    body: tuple[tuple[str, PlanExpr], ...]     # (target, value) statements over the spec's names, in order
    body_roles: dict                           # every name the body reads or writes -> operand | constant |
                                               # temporary | output (the templates spell roles: filter `spelled`)
    index_roles: dict                          # every name an index map may read -> grid | size
    approx_math: bool
    lowering_semantics: str
    unsafe_no_auto_barriers: bool
    profile_space: int
    profile_dir: str
    persistent: bool
    bytes_moved: int                           # the minimum GMEM traffic: each input read once, each output written once
    registers: RegisterLayout | None = None              # Pallas: the named register layout when an input is broadcast
    # schedule.pipeline.data_path: "tma" (the SMEM ring) or "registers" (registers.py); absent in plan.json for tma
    data_path: str = field(default="tma", metadata={"omit_default": True})
    regs: RegisterPath | None = field(default=None, metadata={"omit_default": True})

    @property
    def operands(self) -> tuple[MapOperand, ...]:
        return self.inputs + self.outputs



def cname(role: str, name: str) -> str:
    return f"{role}_{name}"


class Space(NamedTuple):
    """The iteration space: the output cut into blocks, and what every operand's block follows."""
    iter_shape: tuple[int, ...]
    block: tuple[int, ...]
    grid: tuple[int, ...]
    grid_names: tuple[str, ...]
    sizes: dict            # name -> int, or dims.size(name) for a dynamic size
    stages: int
    ranges: dict           # the dynamic sizes: name -> SizeRange (spec order)


class Sync(NamedTuple):
    full: SmemBuffer       # one mbarrier per stage: the TMA loads landed
    arrivals: int
    smem_bytes: int        # with the 1 KiB alignment slack


class Body(NamedTuple):
    """The body's validated statements over the spec's names, and the role of every name in them."""
    statements: tuple[tuple[str, PlanExpr], ...]
    roles: dict
