"""Stream-K for the Hopper matmul's persistent grid (schedule.persistent.decomposition: stream_k).

The hybrid of the Stream-K paper (data-parallel waves + stream-K for the tail): with T tiles of K k-steps on a grid
of G resident blocks, the last partial wave's tiles plus one full wave (r + G tiles, r = T mod G; all T when T < G;
none when r = 0) are the stream-K tiles. Their k-steps, numbered g = tile x K + k, are cut into G even ranges
[c S / G, (c + 1) S / G) (S = stream-K tiles x K); block c runs its range in order, a tile's part at a time, then the
data-parallel tiles sk + c, sk + c + G, ... whole. Each block's range holds at least one tile's k-steps (the extra
full wave), so a tile is shared by few blocks.

A tile's part that starts at k-step 0 is its finisher's; only a block's first part can start elsewhere, so each
block hands over at most one f32 partial tile: it stores it in its own workspace slot (fragment order) and raises
its flag (release, gpu scope). The finisher, whose part of the tile it runs last, waits (acquire, bounded spin) for
the blocks c + 1 .. owner((tile + 1) K - 1), which ran their parts of the tile first, adds their slots and runs the
epilogue once. A block waits only for blocks of higher index that started the tile before anything else: with the
whole grid resident (auto num_blocks, or at most the SM count) nothing waits in a cycle.

This module is the Python model the template's formulas are tested against (`units`, `owner`, `contributors`),
the planner's checks (`check_stream_k`), the workspace size and the default rule (`stream_k_pays`)."""
from __future__ import annotations

import math

from ...plan.common import KernelArg, Problems
from ...plan.hardware import for_target
from ...plan.launch import WORKSPACE_ALIGN

FIELD = ("schedule", "persistent", "decomposition")
FLAG_BYTES = 4                 # a block's partial-ready flag (u32) a consumer warpgroup, after the slots
WAVE_EFFICIENCY = 0.9          # the default rule: stream-K where the data-parallel waves are less full than this
MIN_K_ITERS = 4                # ... and a tile has enough k-steps to share


def sk_tiles(num_tiles: int, grid: int) -> int:
    """Tiles run stream-K: the last partial wave plus one full wave (all tiles when they are fewer than the grid;
    none when the tiles fill whole waves)."""
    r = num_tiles % grid
    return 0 if r == 0 else min(num_tiles, r + grid)


def owner(g: int, grid: int, sk_iters: int) -> int:
    """The block whose range [c S / G, (c + 1) S / G) holds stream-K k-step g (the kernel's sg_sk_owner)."""
    return ((g + 1) * grid - 1) // sk_iters


def units(num_tiles: int, k_iters: int, grid: int, block: int) -> list[tuple[int, int, int]]:
    """Block `block`'s work in order, as (tile, first k-step, end k-step): its stream-K range cut at tile edges,
    then its data-parallel tiles (the kernel's unit loop, spelled the same way)."""
    sk = sk_tiles(num_tiles, grid)
    s = sk * k_iters
    g, hi = block * s // grid, (block + 1) * s // grid
    out = []
    while g < hi:
        t = g // k_iters
        lo = g - t * k_iters
        end = min(k_iters, lo + hi - g)
        out.append((t, lo, end))
        g += end - lo
    out += [(t, 0, k_iters) for t in range(sk + block, num_tiles, grid)]
    return out


def contributors(tile: int, k_iters: int, grid: int, sk_iters: int) -> tuple[int, list[int]]:
    """A stream-K tile's finisher (the block holding its k-step 0) and the blocks whose partials it adds."""
    first = owner(tile * k_iters, grid, sk_iters)
    last = owner((tile + 1) * k_iters - 1, grid, sk_iters)
    return first, list(range(first + 1, last + 1))


def flag_bytes(max_grid: int, consumers: int) -> int:
    """The flags at the workspace's start, a u32 a block and consumer warpgroup, rounded up to WORKSPACE_ALIGN (the
    slots after them stay 16-byte aligned): the only bytes the runtime zeroes before a launch."""
    return -(-max_grid * consumers * FLAG_BYTES // WORKSPACE_ALIGN) * WORKSPACE_ALIGN


def workspace_bytes(max_grid: int, tile_m: int, tile_n: int, consumers: int) -> int:
    """The flags, then a slot of tile_m x tile_n f32 a block (written before it is read: never zeroed)."""
    return flag_bytes(max_grid, consumers) + max_grid * tile_m * tile_n * 4


def workspace_arg(max_grid: int, tile_m: int, tile_n: int, consumers: int) -> KernelArg:
    return KernelArg("workspace", -1, value=workspace_bytes(max_grid, tile_m, tile_n, consumers),
                     zero=flag_bytes(max_grid, consumers))


def stream_k_pays(num_tiles: int, k_iters: int, sm_count: int) -> bool:
    """The rule the planner would default to (not yet: the H200 must confirm it): stream-K where the data-parallel
    waves leave SMs idle (tiles / (waves x SMs) below WAVE_EFFICIENCY), more than one wave's worth of tiles exist
    (fewer: a smaller tile fills the SMs without a fix-up) and a tile has k-steps enough to share."""
    if num_tiles <= sm_count or k_iters < MIN_K_ITERS:
        return False
    waves = math.ceil(num_tiles / sm_count)
    return num_tiles / (waves * sm_count) < WAVE_EFFICIENCY


def check_stream_k(op, sch, dims, cluster, hw, problems: Problems) -> bool:
    """Where stream_k is written: each schedule field it cannot go with, located at the field. True when the plan
    runs stream-K."""
    pers = sch.persistent
    if pers.decomposition != "stream_k":
        return False
    bad = len(problems)
    why = "stream_k needs "
    if for_target(sch.target).mma != "wgmma":
        problems.add(FIELD, why + "the Hopper (sm_90a) CUDA kernel; the sm_100a kernel claims tiles by cluster launch "
                                  "control: use data_parallel (or loop: dynamic) there")
    if "pallas" in sch.backends:
        problems.add(("schedule", "backends"), "the Pallas matmul has no stream-K (persistent.decomposition: "
                                               "stream_k): use backends: [cuda], or decomposition: data_parallel")
    if pers.loop != "nd_loop":
        problems.add(("schedule", "persistent", "loop"), why + "a persistent grid (loop: nd_loop): its blocks walk "
                                                               "shares of the tiles' k-steps")
    if pers.num_blocks != "auto" and pers.num_blocks > hw.sm_count:
        problems.add(("schedule", "persistent", "num_blocks"),
                     f"{why}every block resident at once (a finisher waits for the blocks that share its tile): use "
                     f"at most {hw.sm_count} (the SMs; one block an SM) or auto")
    if cluster.csize > 1:
        problems.add(("schedule", "cluster"), why + f"a 1-CTA launch (cluster: [1]); got {list(sch.cluster)} "
                                                    "(multicast pairs and split-K clusters share tiles their own way)")
    if sch.pipeline.consumer_schedule != "cooperative":
        problems.add(("schedule", "pipeline", "consumer_schedule"),
                     why + "cooperative consumers (both warpgroups on one tile); pingpong runs alternate whole tiles")
    if any(not isinstance(v, int) for v in op.sizes.values()):
        problems.add(("op", "sizes"), why + "static sizes (the workspace and the k-step split are planned for "
                                            "them); give every size a number, or use decomposition: data_parallel")
    if any(e.bcast.startswith("kblock") for e in dims.extra_ops):
        problems.add(FIELD, why + "a plain accumulator; op.block_scales promotes partial sums per K block: use "
                                  "data_parallel")
    return len(problems) == bad


def explain_lines(p) -> list[str]:
    """explain's lines of a stream-K plan, at the planned grid (the runtime may lower it: the kernel splits at
    gridDim.x)."""
    grid, t, k = p.launch.num_blocks, p.tiles.num_tiles, p.tiles.k_iters
    sk = sk_tiles(t, grid)
    s = sk * k
    shares = sorted({len(contributors(x, k, grid, s)[1]) + 1 for x in range(sk)}) if sk else []
    how = (f"{sk} of the {t} tiles ({t % grid} of the last partial wave + a full wave) are split by k-steps: "
           f"{s} k-steps over {grid} blocks, {s / grid:.2f} each, {'-'.join(map(str, (shares[0], shares[-1])))} "
           f"blocks a tile; then {t - sk} tiles data-parallel ({(t - sk) // grid} whole waves)" if sk else
           f"the {t} tiles fill whole waves of {grid} blocks: every tile runs data-parallel")
    return [f"  stream-K   {how}",
            f"             a tile's non-final blocks store f32 partials (a {p.tiles.tile_m * p.tiles.tile_n * 4} B slot a "
            f"block) and raise a flag (fence.acq_rel + red, gpu scope); the block holding its k-step 0 waits "
            f"(ld.acquire, bounded spin, trap) and adds them before the epilogue; workspace "
            f"{workspace_bytes(grid, p.tiles.tile_m, p.tiles.tile_n, p.warps.num_consumers)} B, its "
            f"{flag_bytes(grid, p.warps.num_consumers)} B of flags zeroed at each launch"]
