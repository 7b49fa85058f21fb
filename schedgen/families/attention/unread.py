"""Schedule fields the attention kernels do not read: each one set to a value other than its default is a located
error (the spec would otherwise say something the kernel does not do).

Two kinds: fields neither backend's template nor the planner reads (the planner derives them: the grid, the
output's blocks, the epilogue, the layouts of the Q/K/V tiles, ...), and Mosaic GPU compiler parameters that only
the Pallas rendering reads, reported when schedule.backends has no pallas. What the Pallas rendering reads but
cannot express is _pallas_limits' (plan.py)."""
from __future__ import annotations

from ...plan.common import Problems
from ...plan.unread import DATA_PARALLEL_ONLY, PALLAS_COMPILER_PARAMS, Unread, UnreadTable, check_unread as _check
from .blackwell import ROWS

# the sm_100a kernel's roles and tile layout, for the entries whose Hopper text names wgmma or consumer warpgroups
_BW_ROLES = "a TMA warp, the warp that issues every tcgen05.mma and one softmax warpgroup (S, P and O in TMEM)"
_BW_SWIZZLE = "the tiles are 64-column TMA boxes with the 128-byte swizzle, the layout tcgen05.mma's descriptors read"

SCHEDULE = DATA_PARALLEL_ONLY + (
    Unread(("grid",), lambda s: s.grid is not None,
           "the planner launches one block a (query block, head, batch) tile, or one an SM with persistent.loop",
           "leave grid out"),
    Unread(("grid_names",), lambda s: s.grid_names is not None,
           "tiles are indexed in the tile order (persistent.tile_order), not by named grid dimensions",
           "leave grid_names out"),
    Unread(("num_warpgroups",), lambda s: s.num_warpgroups != 1,
           "a block is one TMA producer warpgroup and pipeline.num_compute_wgs consumer warpgroups",
           "1 (the default); set pipeline.num_compute_wgs for more consumers",
           (f"an sm_100a block is {_BW_ROLES}", "1 (the default)")),
    Unread(("out_specs",), lambda s: bool(s.out_specs),
           "the output's blocks are q's (block_q query rows of one head), stored by TMA", "leave out_specs out"),
    Unread(("epilogue", "tile"), lambda s: s.epilogue.tile is not None,
           "each consumer normalises its 64 O rows in registers, stages them in SMEM and stores them by TMA",
           "leave epilogue out",
           (f"the softmax warpgroup normalises O's {ROWS} rows from TMEM (a thread a row), stages them in SMEM and "
            "stores them by TMA", "leave epilogue out")),
    Unread(("epilogue", "buffers"), lambda s: s.epilogue.buffers != 2,
           "O is staged once per consumer (in the Q tile, or in its own buffer on a persistent grid)",
           "leave epilogue out",
           ("O is staged once a tile, in the Q tile, by the softmax warpgroup", "leave epilogue out")),
    Unread(("epilogue", "store"), lambda s: s.epilogue.store != "tma",
           "O always leaves through SMEM and a TMA store (which clips a ragged last query block)",
           "tma (the default)"),
    Unread(("epilogue", "operands"), lambda s: s.epilogue.operands != "global",
           "attention's epilogue reads no operands (O is normalised by the softmax's own row sums)",
           "global (the default)"),
    Unread(("pipeline", "wg_axis"), lambda s: s.pipeline.wg_axis is not None,
           "each consumer warpgroup owns 64 query rows", "leave wg_axis out",
           (f"one softmax warpgroup owns the tile's {ROWS} query rows (thread = row); no warpgroup splits it",
            "leave wg_axis out")),
    Unread(("pipeline", "consumer_schedule"), lambda s: s.pipeline.consumer_schedule != "cooperative",
           "the consumer warpgroups share each (query block, head) tile, 64 query rows each",
           "cooperative (the default)",
           ("nothing takes turns on the tensor cores: one warp issues every tcgen05.mma and S is "
            "double-buffered in TMEM, so the next block's S = Q K^T runs under this block's softmax",
            "cooperative (the default)")),
    Unread(("persistent", "num_blocks"), lambda s: s.persistent.num_blocks != "auto",
           "a persistent attention grid is one CTA an SM, counted at launch", "auto (the default)"),
    Unread(("persistent", "minor_dim"), lambda s: s.persistent.minor_dim != 0,
           "it shapes planar_snake, which attention's tile orders (row_major, lpt) do not use", "leave it out"),
    Unread(("persistent", "tile_width"), lambda s: s.persistent.tile_width != 1,
           "it shapes planar_snake, which attention's tile orders (row_major, lpt) do not use", "leave it out"),
)

BLOCK_SPEC = (
    Unread(("memory_space",), lambda b: b.memory_space != "smem",
           "Q, K and V tiles go to SMEM by TMA (wgmma reads them there)", "smem (the default)",
           ("Q, K and V tiles go to SMEM by TMA (tcgen05.mma reads them there)", "smem (the default)")),
    Unread(("transforms", "tiling"), lambda b: b.transforms.tiling is not None,
           "the tiles are 64-column TMA boxes with the 128-byte swizzle, the layout wgmma reads",
           "leave tiling out", (_BW_SWIZZLE, "leave tiling out")),
    Unread(("transforms", "swizzle"), lambda b: b.transforms.swizzle not in ("auto", 128),
           "the tiles are 64-column TMA boxes with the 128-byte swizzle, the layout wgmma reads",
           "128 or auto (the default)", (_BW_SWIZZLE, "128 or auto (the default)")),
    Unread(("transforms", "transpose"), lambda b: b.transforms.transpose is not None,
           "K is read K-major for S = Q K^T and V N-major for O += P V, by the wgmma descriptors",
           "leave transpose out",
           ("K is read K-major for S = Q K^T and V N-major for O += P V, by the tcgen05.mma SMEM descriptors",
            "leave transpose out")),
    Unread(("delay_release",), lambda b: b.delay_release != 0,
           "a K/V stage is refilled once every consumer has released it (the empty mbarrier ring)",
           "0 (the default)",
           ("a K/V stage is refilled once the tcgen05.mma that read it completes (its tcgen05.commit arrives on the "
            "empty mbarrier)", "0 (the default)")),
    Unread(("collective_axes",), lambda b: bool(b.collective_axes),
           "attention CTAs share no operand (cluster: [1]), so nothing is multicast", "leave collective_axes out"),
    Unread(("out_of_bounds",), lambda b: b.out_of_bounds != "reject",
           "both kernels take ragged last blocks themselves: TMA zero-fills the loads past the end and clips the "
           "stores there, and the last key block's scores past Skv are masked", "reject (the default)"),
)

BARRIER = (
    Unread(("num_barriers",), lambda b: b.num_barriers != 1,
           "the ping-pong schedule barrier is one barrier of num_arrivals arrivals", "1 (the default)"),
)

# Mosaic GPU compiler parameters: the Pallas kernel reads them (or rejects them, _pallas_limits); CUDA C++ has none
PALLAS_ONLY = PALLAS_COMPILER_PARAMS + (
    Unread(("compiler_params", "profile_space"), lambda s: s.compiler_params.profile_space != 0,
           "profile_space is Mosaic GPU's in-kernel profiler buffer", "0 (the default)"),
    Unread(("compiler_params", "profile_dir"), lambda s: s.compiler_params.profile_dir != "",
           "profile_dir is where Mosaic GPU's in-kernel profiler writes its trace", "leave it out"),
)

TABLE = UnreadTable("attention", schedule=SCHEDULE, in_spec=BLOCK_SPEC, barriers={"schedule": BARRIER},
                    pallas_only=PALLAS_ONLY)


def check_unread(sch, inputs: tuple[str, ...], problems: Problems) -> None:
    """Report every field in the tables above that the spec sets to a value the kernels would ignore."""
    _check(sch, TABLE, inputs, (), problems)
