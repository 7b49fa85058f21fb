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

    # --- derived numbers the templates print (computed here: the templates do no arithmetic)
    @property
    def block_dims(self) -> tuple[int, ...]:
        return tuple(range(len(self.block)))

    @property
    def block_list(self) -> list[int]:
        """The block as a Python list's text prints it (a Pallas BlockSpec's shape)."""
        return list(self.block)

    @property
    def single_index(self) -> bool:
        """The index map has one component (its Python tuple needs a trailing comma)."""
        return len(self.block_index) == 1

    @property
    def tma_rank(self) -> int:
        return len(self.tma_dims)

    @property
    def tma_axes(self) -> tuple[tuple[int | None, int | None], ...]:
        """The tensor map's coordinates, innermost first (its order): each array dim's (index, block extent), or
        (None, None) for a dim the map keeps whole (its coordinate is 0)."""
        return tuple((d, self.block[d]) if d >= 0 else (None, None) for d in reversed(self.tma_dims))

    @property
    def boxes(self) -> tuple[BoxAt, ...]:
        """The TMA boxes of a block, side by side along the minor dimension."""
        return tuple(BoxAt(n * self.tma.box_bytes, n * self.tma.box[-1]) for n in range(self.tma.n_boxes))

    @property
    def swizzle_mask(self) -> int:
        """The 16-byte chunk bits the swizzle XORs: swizzle / 16 - 1."""
        return self.tma.swizzle // 16 - 1

    @property
    def per_chunk(self) -> int:
        """Elements of a 16-byte chunk."""
        return 16 // self.itemsize


class BoxAt(NamedTuple):
    """One TMA box of a block: its bytes from the block's start in SMEM, its first element along the minor dim."""
    at: int
    minor: int


class RegTerm(NamedTuple):
    """One term of a register-path offset: `index` (a block index's validated tree, or the block coordinate x<x>,
    or the column c when `minor`) times `block` (the block extent; 0: none) times `stride` (None: 1)."""
    minor: bool
    x: int
    index: PlanExpr | None
    block: int
    stride: DimLike | None


class RaggedDim(NamedTuple):
    """A dimension whose extent may not be a multiple of the block: a chunk's coordinate along it is tested."""
    var: str                       # the grid variable
    block: int
    minor: bool                    # the minor dimension (the chunk's column c), else the block coordinate x<dim>
    dim: int
    extent: DimLike


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

    # --- derived numbers the templates print (computed here: the templates do no arithmetic)
    @property
    def profiled(self) -> bool:
        """Mosaic GPU's in-kernel profiler is on (the Pallas module then makes its directory)."""
        return self.profile_space > 0

    @property
    def output_names(self) -> str:
        return ", ".join(o.name for o in self.outputs)

    @property
    def grid_target(self) -> str:
        """The grid variables as the target of a Python tuple assignment (`g_a,` for one)."""
        return ", ".join(self.grid_vars) + ("," if len(self.grid_vars) == 1 else "")

    @property
    def words(self) -> dict[str, int]:
        """Operand name -> the 16-byte words of one vector (vec elements) of it."""
        return {o.name: self.vec * o.itemsize // 16 for o in self.operands}

    @property
    def row_dims(self) -> tuple[int, ...]:
        """The block's dims but the minor, innermost first: a row index splits into their coordinates x<dim>."""
        return tuple(range(len(self.block) - 2, -1, -1))

    @property
    def outer_dims(self) -> tuple[int, ...]:
        """The block's dims but the minor, in order."""
        return tuple(range(len(self.block) - 1))

    @property
    def major_extent(self) -> DimLike:
        """The grid's extent across the planar-snake bands (the other of the two dims)."""
        return self.grid[1 - self.minor_dim]

    @property
    def minor_extent(self) -> DimLike:
        return self.grid[self.minor_dim]

    @property
    def major_var(self) -> str:
        return self.grid_vars[1 - self.minor_dim]

    @property
    def minor_var(self) -> str:
        return self.grid_vars[self.minor_dim]

    @property
    def grid_walk(self) -> tuple[tuple[str, DimLike], ...]:
        """(grid variable, its extent), the last dimension first: row-major order's digits of a tile index."""
        return tuple(zip(reversed(self.grid_vars), reversed(self.grid)))

    @property
    def input_views(self) -> dict[str, RegisterView | None]:
        """Each input's register view (None without a named register layout)."""
        if self.registers is None:
            return {o.name: None for o in self.inputs}
        return {o.name: next(v for v in self.registers.views if v.name == o.name) for o in self.inputs}

    @property
    def direct_inputs(self) -> tuple[MapOperand, ...]:
        """The inputs read straight from GMEM into registers (columns), not through the TMA pipeline."""
        views = self.input_views
        return tuple(o for o in self.inputs if views[o.name] is not None and views[o.name].gmem)

    @property
    def staged_inputs(self) -> tuple[MapOperand, ...]:
        """The inputs the pipeline stages in SMEM (its in_specs, in order)."""
        direct = self.direct_inputs
        return tuple(o for o in self.inputs if o not in direct)

    def view_dims(self, o: MapOperand) -> tuple[tuple[int, bool, int], ...]:
        """Each block dim of input `o` with whether its register view squeezes it (reads index 0) and its extent."""
        view = self.input_views[o.name]
        return tuple((d, d in view.squeezed, o.block[d]) for d in range(len(o.block)))

    # the register path (data_path: registers, plan.regs)
    def _reg_stride(self, o: MapOperand, d: int) -> DimLike | None:
        stride = self.regs.strides[self.operands.index(o)][d]
        return stride if stride != 1 else None

    def reg_base(self, o: MapOperand) -> tuple[RegTerm, ...]:
        """The element offset of operand o's tile: each dim it does not broadcast, its block index x block x its
        stride."""
        return tuple(RegTerm(False, d, o.block_index[d], o.block[d], self._reg_stride(o, d))
                     for d in range(len(o.block)) if o.shape[d] != 1)

    def reg_local(self, o: MapOperand) -> tuple[RegTerm, ...]:
        """The element offset of a chunk inside operand o's tile: the column c (its minor dim) or the block
        coordinate x<d> of each dim it does not broadcast (its dims align with the iteration space's last ones),
        times its stride."""
        rank, n = len(self.block), len(o.shape)
        return tuple(RegTerm(d == n - 1, rank - n + d, None, 0, self._reg_stride(o, d))
                     for d in range(n) if o.shape[d] != 1)

    @property
    def reg_ragged(self) -> tuple[RaggedDim, ...]:
        """The iteration dims that may end in a partial block: the chunk's coordinate is tested against the
        first output's extent."""
        rank, out = len(self.block), self.outputs[0]
        return tuple(RaggedDim(self.grid_vars[d], self.block[d], d == rank - 1, d, out.shape[d])
                     for d in range(rank) if self.regs.ragged[d])



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
