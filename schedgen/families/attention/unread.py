"""Schedule fields the attention kernels do not read: each one set to a value other than its default is a located
error (the spec would otherwise say something the kernel does not do).

Two kinds: fields neither backend's template nor the planner reads (the planner derives them: the grid, the
output's blocks, the layouts of the Q/K/V tiles, ...; the epilogue and the matmul's warpgroup roles are
not fields of the attention schedule at all: unknown keys), and Mosaic GPU compiler parameters that only
the Pallas rendering reads, reported when schedule.backends has no pallas. What the Pallas rendering reads but
cannot express is _pallas_limits' (plan.py)."""
from __future__ import annotations

from ...plan.common import Problems
from ...plan.unread import PALLAS_COMPILER_PARAMS, Unread, UnreadTable, check_unread as _check

# the sm_100a kernel's roles and tile layout, for the entries whose Hopper text names wgmma or consumer warpgroups
_BW_ROLES = "a TMA warp, the warp that issues every tcgen05.mma and one softmax warpgroup (S, P and O in TMEM)"
_BW_SWIZZLE = "the tiles are 64-column TMA boxes with the 128-byte swizzle, the layout tcgen05.mma's descriptors read"

SCHEDULE = (
    Unread(("grid",), lambda s: s.grid is not None,
           "the planner launches one block a (query block, head, batch) tile, or one an SM with persistent.loop",
           "leave grid out"),
    Unread(("num_warpgroups",), lambda s: s.num_warpgroups != 1,
           "a block is one TMA producer warpgroup and pipeline.num_compute_wgs consumer warpgroups",
           "1 (the default); set pipeline.num_compute_wgs for more consumers",
           (f"an sm_100a block is {_BW_ROLES}", "1 (the default)")),
    Unread(("out_specs",), lambda s: bool(s.out_specs),
           "the output's blocks are q's (block_q query rows of one head), stored by TMA", "leave out_specs out"),
    Unread(("persistent", "num_blocks"), lambda s: s.persistent.num_blocks != "auto",
           "a persistent attention grid is one CTA an SM, counted at launch", "auto (the default)"),
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
