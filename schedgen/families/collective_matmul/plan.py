"""Planner of the `collective_matmul` family: `out = all_gather(lhs) @ rhs` on each device of a 1-D mesh, the
all-gather of lhs overlapped with the matmul (the pattern of JAX's collective_matmul_mgpu).

Every device runs the same kernel. Device d holds lhs_d [M, K] and its own rhs [K, N]; out [M_total, N] with
M_total = D x M holds all_gather(lhs) @ rhs. The gather is a ring: at step s (0 <= s < D) device d multiplies the
chunk c(d, s) = (d - send_offset x s) mod D (its own at s = 0) into out rows c x M .. (c + 1) x M, and (for
s < D - 1) forwards that chunk to its ring neighbour `send_to(d)` = the remote ref's device id, which multiplies it
at step s + 1. A `received` semaphore array on the receiver counts arrivals (per chunk or per tile row block); a
`done` semaphore tells the sender that its chunks were read (so the next launch may overwrite them).

The per-step matmul is the matmul family's kernel: this planner builds the spec of one step ([M, K] @ [K, N]) and
plans it with that family's planner (its manifest's `plan`, on the shared GEMM package schedgen/plan/gemm), so every
tile, wgmma, swizzle, SMEM and register rule (and its located message) is the matmul family's own; the rules of the
collective (mesh, ring, semaphores, what each backend can render) are here.

Backends:
- Pallas (jax.shard_map over the mesh): consumer warpgroup 0 sends each lhs stage it multiplies from SMEM to the
  peer's gather buffer with a TMA store (plgpu.remote_ref), holding the stage one wgmma group longer
  (delay_release 1); signals with pl.semaphore_signal / plgpu.semaphore_signal_parallel; waits with
  pl.semaphore_wait.
- CUDA (one launch per GPU, peer-to-peer memory): warps 1-3 of the TMA producer warpgroup copy the chunk to the
  peer's gather buffer with 16-byte loads and stores through a peer pointer, in units of `copy_rows` rows, and
  signal the peer's `received` counters with `red.*.sys` (semaphore_signal: a release per unit;
  semaphore_signal_parallel: one `fence.acq_rel.sys` per step, then relaxed adds); the producer thread waits
  (`ld.acquire.sys`, then `fence.proxy.async.global`) before its TMA loads read a gathered chunk. Counters only
  rise: a launch `epoch` e waits for e x (arrivals per launch), so nothing is reset between launches.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...frontend import expr as ex
from ...frontend import intmath
from ...frontend.model import ITEMSIZE, Operand, recast
from ...plan.common import static_sizes_only, Problems, row_major_strides
from ...plan.hardware import Hardware, target_field
from ...plan.launch import KernelLaunch, Ring as LaunchRing, inline_field
from ...plan.exprs import PlanExpr
from ...plan.gemm import (FP8_DTYPES, MatmulPlan, MatOperand, check_operand_roles, check_smem_operands, mat_operand,
                          tile_from_block_specs)
from ...registry import get as family

if TYPE_CHECKING:
    from ...frontend.specfile import SpecFile

# one ring step's product is a matmul: the matmul family's op model and planner (its manifest), its plan `mm` the GEMM
# package's MatmulPlan
STEP_KIND = "matmul"
COPY_WARPS = 3                 # warps 1-3 of the CUDA producer warpgroup copy chunks to the peer
# 16-byte vectors each copy lane keeps in flight: 2 fit the producer warpgroup's registers after setmaxnreg.dec
# (ptxas spills the copy loop with 4 at 40 registers, and for 4 devices also at 56)
COPY_UNROLL = 2
COPY_MIN_REGS = 40             # below, ptxas spills the copy loop (24 spilled in every schedule the fuzzer tried)
COPY_UNIT_MIN_BYTES = 4096     # a copy unit is the fewest whole rows of at least this many bytes
SPIN_TIMEOUT_NS = 20_000_000_000   # a cross-device wait that spins this long traps (a hang becomes an error)
SEMAPHORES = {"received": ("chunk", "row_block"), "done": ("launch",)}
DEFAULT_PER = {"received": "row_block", "done": "launch"}
REMOTE_REFS = ("gather",)
MULTIMEM_WHY = ("NVLink multicast is not supported by this release (it never calls cuMulticastCreate; multi-GPU "
                "processes run with NCCL_NVLS_ENABLE=0), so {what} cannot run: the multimem entries are rendered and their PTX assembled to SASS in CI only "
                "(templates/collective_matmul/multimem.cu.j2, tests/families/collective_matmul/test_collective_sass.py){extra}; use transport: remote_ref "
                "(peer-to-peer remote refs and semaphores)")


@dataclass(frozen=True)
class CollArg:
    """One parameter of the collective CUDA kernel, in order; schedgen.runtime.multidevice fills them per device.

    kind "tmap" (over `what` = lhs | gather | rhs | out), "ptr" (lhs | gather | peer_gather | flags | peer_flags_send |
    peer_flags_recv) or "u32" (device | epoch)."""
    kind: str
    what: str
    dtype: str = ""
    shape: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    box: tuple[int, ...] = ()
    swizzle: int = 0


@dataclass(frozen=True)
class CollectiveMatmulPlan:
    launch: KernelLaunch = inline_field()   # the launch header (plan/launch.py; plan.json: its fields here)
    sizes: dict
    # the problem, per device
    axis_name: str
    num_devices: int
    m: int                     # lhs rows per device
    m_total: int               # num_devices x m: rows of out
    n: int
    k: int
    in_dtype: str
    out_dtype: str
    inputs: tuple[MatOperand, ...]
    outputs: tuple[MatOperand, ...]
    mm: MatmulPlan             # one step's matmul ([m, k] @ [k, n]): tiles, wgmma, swizzles, SMEM, registers
    # the ring
    send_to: tuple[int, ...]   # send_to[d]: the device d's chunks go to (the remote ref's device id)
    recv_from: tuple[int, ...]
    send_offset: int           # send_to(d) = (d + send_offset) mod D
    chunk_step: int            # chunk(d, s) = (d + chunk_step x s) mod D (chunk_step = -send_offset)
    chunk_advance: int         # chunk_step mod D: chunk(d, s) = (d + s x this) mod D, with no negative term
    recv_offset: int           # recv_from(d) = (d + recv_offset) mod D
    device_id: PlanExpr        # the remote ref's device id: its validated tree over the axis name (0..num_devices-1)
    slots: int                 # gather buffer slots: num_devices - 1
    tiles_per_step: int
    num_tiles: int
    # semaphores
    received_signal: str       # semaphore_signal | semaphore_signal_parallel
    received_per: str          # chunk | row_block
    counters_per_step: int     # received semaphores per gather slot: 1 (chunk) or tiles_m (row_block)
    done_signal: str
    pallas_received_value: int  # a received semaphore's count once its data landed (Pallas: fresh per call)
    # the CUDA copy
    copy_rows: int
    unit_bytes: int
    units_per_step: int
    units_per_counter: int     # copy units behind one received counter: its arrivals per launch
    units_per_row_block: int   # copy units of one tile_m-row block
    unit_vecs: int             # 16-byte vectors of a copy unit
    chunk_bytes: int           # bytes of one chunk (units_per_step x unit_bytes)
    copy_warps: int
    copy_unroll: int
    gather_bytes: int
    flag_words: int            # u32 words of a device's flags: received [slots x counters_per_step], done
    done_index: int
    flags_bytes: int
    spin_timeout_ns: int
    spin_timeout_s: int
    # launch
    producer_regs: int
    consumer_regs: int
    approx_math: bool
    lowering_semantics: str
    profile_space: int
    profile_dir: str
    flops: int                 # per device
    bytes_moved: int           # per device: lhs, rhs, out and the gathered chunks read back
    link_bytes: int            # per device: bytes sent to the neighbour over the ring

    def chunk(self, device: int, step: int) -> int:
        """The lhs chunk (the device it came from) that `device` multiplies at ring step `step`."""
        return (device + self.chunk_step * step) % self.num_devices



@dataclass(frozen=True)
class Ring:
    """The remote ref's device id evaluated on every device, and how each semaphore counts and signals."""
    send_to: tuple[int, ...]
    device_id: PlanExpr
    per: dict
    signal: dict


@dataclass(frozen=True)
class CopyUnits:
    """The CUDA kernel's copy of each chunk to the peer, and the received counters it signals."""
    copy_rows: int
    unit_bytes: int
    units_per_step: int
    counters_per_step: int
    units_per_counter: int


def _fixed_only(nm: str) -> str:
    return (f"{nm} must be fixed in this release (M per device, like every size of a collective_matmul): the ring's "
            f"gather buffers, flags and per-step tensor maps are sized when the package is built; give {nm} a fixed "
            f"value (one package per size) or use the matmul family, which takes dynamic sizes")


def plan_collective_matmul(spec: SpecFile, hw: Hardware) -> tuple[CollectiveMatmulPlan | None, Problems]:
    problems = Problems()
    spec = static_sizes_only(spec, problems, "collective_matmul", _fixed_only)
    op, sch = spec.op, spec.schedule
    out_name = next(iter(op.outputs))
    check_mesh(op, problems)
    if not check_step_operands(op, out_name, problems):
        return None, problems
    step_op, mm = plan_step(spec, out_name, hw, problems)
    m, n = gathered_rows(op, out_name, problems)
    check_schedule_subset(sch, mm, hw, problems)
    check_whole_tiles(op, sch, step_op, out_name, m, n, problems)
    ring = collective_section(op, sch, problems)
    pallas_limits(op, sch, mm, problems)
    if problems or mm is None or m is None or n is None or ring is None:
        return None, problems
    return launch_record(spec, mm, m, n, ring, copy_units(mm, m, ring.per["received"]), hw), problems


# ----------------------------------------------------------------------------------- the mesh and one step


def check_mesh(op, problems: Problems) -> None:
    """At least 2 devices; the axis name is none of the op's names. (The spec name and input names,
    schedgen.reserved: checked by the step's matmul planner.)"""
    mesh = op.mesh
    if mesh.num_devices < 2:
        problems.add(("op", "mesh", "num_devices"), f"a collective matmul runs on at least 2 devices, got "
                                                    f"{mesh.num_devices}; for one device use kind: matmul")
    if mesh.axis_name in op.sizes or mesh.axis_name in op.inputs or mesh.axis_name in op.outputs:
        problems.add(("op", "mesh", "axis_name"), f"the mesh axis '{mesh.axis_name}' is also an operand or size name; "
                                                  f"choose another axis name")


def check_step_operands(op, out_name: str, problems: Problems) -> bool:
    """lhs [M, K] and rhs [K, N] per device, out [M_total, N]: False (the problems say why) if not."""
    before = len(problems)
    check_operand_roles(op, problems)
    if len(problems) != before:
        return False
    for nm in (op.lhs, op.rhs):
        if len(op.inputs[nm].shape) != 2:
            problems.add(("op", "inputs", nm, "shape"), f"per-device operands are 2-D ([M, K] and [K, N]); got "
                                                        f"{len(op.inputs[nm].shape)} dimensions")
    if len(op.outputs[out_name].shape) != 2:
        problems.add(("op", "outputs", out_name, "shape"), "the output is 2-D: [M_total, N] with M_total = "
                                                           "num_devices x M")
    for nm in (op.lhs, op.rhs):
        if op.inputs[nm].dtype in FP8_DTYPES:
            problems.add(("op", "inputs", nm, "dtype"),
                         f"{op.inputs[nm].dtype}: the collective matmul takes bf16 / f16 (its rhs is [K, N], which "
                         f"8-bit wgmma cannot read: it takes K-major operands only); fp8 GEMMs are kind: matmul")
    return len(problems) == before


def step_op_of(op, out_name: str):
    """One ring step's matmul op: [M, K] @ [K, N] into an [M, N] output."""
    lhs_op, rhs_op, out_op = op.inputs[op.lhs], op.inputs[op.rhs], op.outputs[out_name]
    return family(STEP_KIND).op_model(kind=STEP_KIND, sizes=dict(op.sizes), inputs=dict(op.inputs),
                    outputs={out_name: Operand(shape=[lhs_op.shape[0], rhs_op.shape[1]], dtype=out_op.dtype)},
                    lhs=op.lhs, rhs=op.rhs)


def plan_step(spec: SpecFile, out_name: str, hw: Hardware, problems: Problems) -> tuple[object, MatmulPlan | None]:
    """One step's matmul planned by the matmul family (tiles, wgmma, swizzles, SMEM, registers, Pallas limits)."""
    step_op = step_op_of(spec.op, out_name)
    # (a ping-pong consumer_schedule is the collective's own error, check_schedule_subset: the step is planned
    # cooperative, so the matmul family's ping-pong rules do not pile up beside it)
    pipe = spec.schedule.pipeline.model_copy(update={"consumer_schedule": "cooperative"})
    step_spec = spec.model_copy(update={"op": step_op, "schedule": recast(
        spec.schedule.model_copy(update={"pipeline": pipe}), family(STEP_KIND).schedule_model)})
    mm, mm_problems = family(STEP_KIND).plan(step_spec, hw)
    # the step's output shape is ours to derive (its problems are reported against the real output below), and the
    # matmul family's way out of ragged sizes (out_of_bounds: zero) is not one here (checked below)
    # (out_of_bounds on an input is reported by check_schedule_subset: it has no effect here)
    problems.extend(p for p in mm_problems if tuple(p.path[:4]) != ("op", "outputs", out_name, "shape")
                    and not (tuple(p.path[:2]) == ("schedule", "in_specs") and p.path[-1:] == ("out_of_bounds",)))
    return step_op, mm


def _size_of(dim, sizes) -> int | None:
    return dim if isinstance(dim, int) else sizes.get(dim)


def gathered_rows(op, out_name: str, problems: Problems) -> tuple[int | None, int | None]:
    """out is [num_devices x M, N]: M and N of one step (None where a size is unknown)."""
    sizes, d_count = dict(op.sizes), op.mesh.num_devices
    lhs_op, rhs_op, out_op = op.inputs[op.lhs], op.inputs[op.rhs], op.outputs[out_name]
    m, n = _size_of(lhs_op.shape[0], sizes), _size_of(rhs_op.shape[1], sizes)
    mt, nt = _size_of(out_op.shape[0], sizes), _size_of(out_op.shape[1], sizes)
    for i, (dim, val) in enumerate(zip(out_op.shape, (mt, nt))):
        if val is None:
            problems.add(("op", "outputs", out_name, "shape", i),
                         f"unknown size '{dim}'; declare it under op.sizes (sizes: {', '.join(sizes) or 'none'})")
    if m is not None and mt is not None and mt != d_count * m:
        problems.add(("op", "outputs", out_name, "shape", 0),
                     f"out has {mt} rows; the all-gather of {d_count} devices x {m} lhs rows gives {d_count * m}: "
                     f"the output is [num_devices x M, N]" + (f" (set op.sizes.{out_op.shape[0]}: {d_count * m})"
                                                               if isinstance(out_op.shape[0], str) else ""))
    if n is not None and nt is not None and nt != n:
        problems.add(("op", "outputs", out_name, "shape", 1), f"out has {nt} columns; rhs has N = {n}")
    return m, n


# ------------------------------------------------------------- what the collective takes of the matmul's schedule


def check_schedule_subset(sch, mm: MatmulPlan | None, hw: Hardware, problems: Problems) -> None:
    """No clusters or multicast, a persistent grid of resident blocks, a producer that can also copy, TMA stores."""
    cl = list(sch.cluster)
    if math.prod(cl) != 1:
        problems.add(("schedule", "cluster"), f"the collective matmul runs without clusters (each CTA loads its own "
                                              f"lhs and rhs blocks); use cluster: [1], got {cl}")
    for nm, bs in sch.in_specs.items():
        if bs.collective_axes:
            problems.add(("schedule", "in_specs", nm, "collective_axes"), "no cluster multicast in the collective "
                                                                          "matmul; remove collective_axes")
        if bs.out_of_bounds != "reject":
            problems.add(("schedule", "in_specs", nm, "out_of_bounds"),
                         f"out_of_bounds: {bs.out_of_bounds} has no effect here: the collective matmul moves whole "
                         f"row blocks and its sizes must divide by the tile (no ragged edges); leave it out (reject)")
    if sch.compiler_params.approx_math:
        problems.add(("schedule", "compiler_params", "approx_math"),
                     "approx_math has no effect here: the collective matmul's epilogue is out = acc, with no "
                     "transcendental for fast math to approximate; leave it out (false)")
    if sch.persistent.loop != "nd_loop":
        problems.add(("schedule", "persistent", "loop"),
                     "the collective matmul's blocks wait for data from the peer device: every block must be resident "
                     "at once, so the grid is persistent (nd_loop), never one block per tile")
    if sch.persistent.num_blocks != "auto" and sch.persistent.num_blocks > hw.sm_count:
        problems.add(("schedule", "persistent", "num_blocks"),
                     f"num_blocks {sch.persistent.num_blocks} exceeds the {hw.sm_count} SMs: blocks that are not "
                     f"resident could wait for peers that wait for them; use at most {hw.sm_count} (or auto)")
    if mm is not None and mm.warps.producer_regs < COPY_MIN_REGS:
        problems.add(("schedule", "pipeline", "memory_registers"),
                     f"the collective kernel's producer warpgroup also copies the chunks to the peer (warps 1-3, 16-byte "
                     f"vectors in flight): it needs at least {COPY_MIN_REGS} registers a thread after setmaxnreg, got "
                     f"{mm.warps.producer_regs}")
    if sch.epilogue.store != "tma":
        problems.add(("schedule", "epilogue", "store"), "the collective matmul stores its tiles by TMA; use store: tma")
    check_smem_operands(sch, "the collective matmul's epilogue reads its operands from global memory (its producer "
                             "warps 1-3 copy the chunks to the peer)", problems)
    if sch.pipeline.consumer_schedule != "cooperative":
        problems.add(("schedule", "pipeline", "consumer_schedule"),
                     "the collective matmul's kernels render cooperative consumers only (both split each tile: its "
                     "CUDA step loop has no ping-pong form, and its Pallas one is emit_pipeline_warp_specialized's, "
                     "which hands every step to all consumers); use consumer_schedule: cooperative (the default)")


def check_whole_tiles(op, sch, step_op, out_name: str, m: int | None, n: int | None,
                      problems: Problems) -> None:
    """No ragged edges: M, N and K divide by the tile (the matmul family's tile of the step's BlockSpecs)."""
    tile = tile_from_block_specs(step_op, sch, out_name, Problems())   # (its own disagreements: the step planner's)
    for dim, size, t in zip(("M", "N", "K"), (m, n, _size_of(op.inputs[op.lhs].shape[1], op.sizes)), tile):
        if size is not None and size % t:
            problems.add(("op", "sizes"), f"{dim} = {size} is not a multiple of tile_{dim.lower()} = {t}: the all-gather "
                                          f"moves whole row blocks and the kernels have no ragged edges, so the sizes "
                                          f"must divide by the tile")


# ----------------------------------------------------------- the collective section: transport, refs, semaphores


def collective_section(op, sch, problems: Problems) -> Ring | None:
    """schedule.collective: the transport, the 'gather' remote ref (a ring neighbour), the semaphores."""
    col = sch.collective
    col_path = ("schedule", "collective")
    check_transport(col.transport if col is not None else "remote_ref", problems)
    remote = dict(col.remote_refs) if col is not None else {}
    for key in remote:
        if key not in REMOTE_REFS:
            problems.add((*col_path, "remote_refs", key),
                         f"the collective matmul's remote ref is 'gather' (the peer's buffer this device's chunks go "
                         f"to); got '{key}'")
    send_to, device_id = _ring(remote.get("gather"), op.mesh.axis_name, op.mesh.num_devices, problems,
                               (*col_path, "remote_refs", "gather", "device_id"))
    per, signal = semaphores(dict(col.semaphores) if col is not None else {}, problems)
    if send_to is None:
        return None
    return Ring(send_to, device_id, per, signal)


def check_transport(transport: str, problems: Problems) -> None:
    path = ("schedule", "collective", "transport")
    if transport == "multimem_store":
        problems.add(path, MULTIMEM_WHY.format(what="multimem_store (and semaphore_signal_multicast with it)", extra=""))
    elif transport == "multimem_load_reduce":
        problems.add(path, MULTIMEM_WHY.format(
            what="multimem_load_reduce", extra="; it also reduces across devices (a reduce-scatter), where this family "
                                               "gathers"))


def semaphores(sems: dict, problems: Problems) -> tuple[dict, dict]:
    """'received' and 'done': what each counts per and how it is signalled (defaults where not given)."""
    per: dict[str, str] = dict(DEFAULT_PER)
    signal = {"received": "semaphore_signal", "done": "semaphore_signal"}
    path = ("schedule", "collective", "semaphores")
    for key, sem in sems.items():
        if key not in SEMAPHORES:
            problems.add((*path, key),
                         f"the collective matmul's semaphores are 'received' (chunk arrivals, on the receiver) and "
                         f"'done' (the receiver has read them, on the sender); got '{key}'")
            continue
        signal[key] = sem.signal
        if sem.per is not None:
            if sem.per not in SEMAPHORES[key]:
                problems.add((*path, key, "per"),
                             f"'{key}' counts per {' or per '.join(SEMAPHORES[key])}, got per: {sem.per}")
            else:
                per[key] = sem.per
    return per, signal


def pallas_limits(op, sch, mm: MatmulPlan | None, problems: Problems) -> None:
    """What the Pallas rendering of the collective cannot take; each names the way out."""
    if "pallas" not in sch.backends:
        return
    sems = dict(sch.collective.semaphores) if sch.collective is not None else {}
    for key, sem in sems.items():
        if key in SEMAPHORES and sem.signal == "semaphore_signal_parallel":
            problems.add(("schedule", "collective", "semaphores", key, "signal"),
                         "jax 0.11.2 lowers semaphore_signal_parallel as a relaxed add followed by fence.release.sys, "
                         f"which does not order what this block wrote (or read) before the '{key}' signal; the Pallas "
                         "rendering signals with semaphore_signal (red.release.sys): use it, or set schedule.backends: "
                         "[cuda] (the CUDA rendering fences first)")
    if mm is not None and mm.pipeline.delay_release != 1:
        lhs_spec = sch.in_specs.get(op.lhs)
        problems.add(("schedule", "in_specs", op.lhs, "delay_release") if lhs_spec is not None else
                     ("schedule", "in_specs"),
                     "the Pallas collective matmul sends each lhs stage to the peer from SMEM (a TMA store) while its "
                     "wgmma runs, so the stage is held one wgmma group longer: set delay_release: 1 on the lhs and rhs "
                     "BlockSpecs")


# -------------------------------------------------------------------------------- copy units and the record


def copy_units(mm: MatmulPlan, m: int, received_per: str) -> CopyUnits:
    """A copy unit is the fewest whole rows (dividing tile_m) of at least COPY_UNIT_MIN_BYTES."""
    row_bytes = mm.k * ITEMSIZE[mm.in_dtype]
    copy_rows = 1
    while copy_rows * row_bytes < COPY_UNIT_MIN_BYTES and mm.tiles.tile_m % (copy_rows * 2) == 0:
        copy_rows *= 2
    units_per_step = m // copy_rows
    row_block = received_per == "row_block"
    return CopyUnits(copy_rows, copy_rows * row_bytes, units_per_step, mm.tiles.tiles_m if row_block else 1,
                     mm.tiles.tile_m // copy_rows if row_block else units_per_step)


def kernel_args(mm: MatmulPlan, m: int, n: int, d_count: int) -> tuple[CollArg, ...]:
    """Tensor maps over lhs, the gather buffer, rhs and the gathered out (boxes and swizzles of the step's plan),
    then the pointers and the u32 scalars schedgen.runtime.multidevice fills per device."""
    k = mm.k

    def tmap(what: str, shape: tuple[int, int], like) -> CollArg:
        return CollArg("tmap", what, like.dtype, shape, row_major_strides(shape, ITEMSIZE[like.dtype]), like.box,
                       like.swizzle)

    a_arg, b_arg, o_arg =mm.launch.kernel_args[0],mm.launch.kernel_args[1],mm.launch.kernel_args[2]
    return (tmap("lhs", (m, k), a_arg), tmap("gather", ((d_count - 1) * m, k), a_arg), tmap("rhs", (k, n), b_arg),
            tmap("out", (d_count * m, n), o_arg),
            *(CollArg("ptr", what) for what in ("lhs", "gather", "peer_gather", "flags", "peer_flags_send",
                                                "peer_flags_recv")),
            CollArg("u32", "device"), CollArg("u32", "epoch"))


def launch_record(spec: SpecFile, mm: MatmulPlan, m: int, n: int, ring: Ring, units: CopyUnits,
                  hw: Hardware) -> CollectiveMatmulPlan:
    op, sch = spec.op, spec.schedule
    d_count, k = op.mesh.num_devices, mm.k
    isz, osz = ITEMSIZE[mm.in_dtype], ITEMSIZE[mm.out_dtype]
    out_name = next(iter(op.outputs))
    send_to = ring.send_to
    offset = -1 if all(send_to[d] == (d - 1) % d_count for d in range(d_count)) else 1
    slots = d_count - 1
    num_tiles = d_count * mm.tiles.tiles_m * mm.tiles.tiles_n
    pers = sch.persistent
    blocks = min(num_tiles, hw.sm_count if pers.num_blocks == "auto" else pers.num_blocks)
    cps = units.counters_per_step
    flag_words = slots * cps + 1
    lhs_mo, rhs_mo = mat_operand(op.lhs, "lhs", mm.in_dtype, (m, k)), mat_operand(op.rhs, "rhs", mm.in_dtype, (k, n))
    kname = "cmm_{}_{}_d{}_{}x{}x{}_s{}_wg{}".format(spec.name, mm.in_dtype, d_count, mm.tiles.tile_m, mm.tiles.tile_n,
                                                      mm.tiles.tile_k, mm.pipeline.stages, mm.warps.num_consumers)
    send_to, recv_from = tuple(send_to), tuple((d - offset) % d_count for d in range(d_count))
    flags_bytes, gather_bytes = -(-flag_words * 4 // 256) * 256, slots * m * k * isz
    return CollectiveMatmulPlan(
        launch=KernelLaunch(
            name=spec.name, family="collective_matmul", kernel_name=kname, backends=tuple(sch.backends),
            threads=mm.launch.threads, smem_bytes=mm.launch.smem_bytes, num_blocks=blocks, blocks_per_sm=1,
            kernel_args=kernel_args(mm, m, n, d_count), auto_blocks=pers.num_blocks == "auto",
            ring=LaunchRing(num_devices=d_count, send_to=send_to, recv_from=recv_from, m=m, n=n, k=k,
                            m_total=d_count * m, in_dtype=mm.in_dtype, out_dtype=mm.out_dtype,
                            gather_bytes=gather_bytes, flags_bytes=flags_bytes, axis_name=op.mesh.axis_name)),
        sizes=dict(op.sizes), axis_name=op.mesh.axis_name, num_devices=d_count, m=m, m_total=d_count * m,
        n=n, k=k, in_dtype=mm.in_dtype, out_dtype=mm.out_dtype, inputs=tuple(lhs_mo if nm == op.lhs else rhs_mo for nm in op.inputs),
        outputs=(mat_operand(out_name, "out", mm.out_dtype, (d_count * m, n)),), mm=mm,
        send_to=send_to, recv_from=recv_from, send_offset=offset,
        chunk_step=-offset, chunk_advance=-offset % d_count, recv_offset=-offset % d_count, device_id=ring.device_id, slots=slots,
        tiles_per_step=mm.tiles.tiles_m * mm.tiles.tiles_n, num_tiles=num_tiles,
        received_signal=ring.signal["received"], received_per=ring.per["received"], counters_per_step=cps,
        done_signal=ring.signal["done"],
        pallas_received_value=1 if ring.per["received"] == "row_block" else blocks,
        copy_rows=units.copy_rows, unit_bytes=units.unit_bytes, units_per_step=units.units_per_step,
        units_per_counter=units.units_per_counter, units_per_row_block=mm.tiles.tile_m // units.copy_rows,
        unit_vecs=units.unit_bytes // 16, chunk_bytes=units.unit_bytes * units.units_per_step, copy_warps=COPY_WARPS, copy_unroll=COPY_UNROLL,
        gather_bytes=gather_bytes, flag_words=flag_words, done_index=slots * cps,
        flags_bytes=flags_bytes, spin_timeout_ns=SPIN_TIMEOUT_NS,
        spin_timeout_s=SPIN_TIMEOUT_NS // 1_000_000_000,
        producer_regs=mm.warps.producer_regs, consumer_regs=mm.warps.consumer_regs,
        approx_math=False, lowering_semantics=mm.lowering_semantics, profile_space=mm.profile_space,
        profile_dir=mm.profile_dir, flops=2 * d_count * m * n * k,
        bytes_moved=(m * k + k * n) * isz + d_count * m * n * osz + slots * m * k * isz,
        link_bytes=slots * m * k * isz,
    )



def _ring(ref, axis: str, d_count: int, problems: Problems,
          path: tuple) -> tuple[tuple[int, ...] | None, PlanExpr | None]:
    """The remote ref's device id: parsed over the axis name, proved to fit 32 bits, evaluated on every device,
    checked to be a ring neighbour. Returns (send_to per device, the validated expression) or (None, None)."""
    if ref is None:
        text = f"({axis} - 1) % {d_count}"
    else:
        text = ref.device_id
    ranges = {axis: (0, d_count - 1)}
    try:
        expr = ex.parse_int_expr(text, names=[axis])
        if (err32 := intmath.check_int32(expr, ranges, over=f"the mesh ({axis} in 0..{d_count - 1})")) is not None:
            raise err32
        send_to = tuple(ex.eval_int(expr, {axis: d}) for d in range(d_count))
    except ex.ExprError as err:
        problems.add(path, err.message, (err.line, err.col))
        return None, None
    bad = [(d, v) for d, v in enumerate(send_to) if not 0 <= v < d_count]
    if bad:
        d, v = bad[0]
        problems.add(path, f"device_id gives {v} on device {d}; device ids along '{axis}' are 0..{d_count - 1} (wrap "
                           f"with % {d_count}, e.g. ({axis} - 1) % {d_count})")
        return None, None
    left = all(send_to[d] == (d - 1) % d_count for d in range(d_count))
    right = all(send_to[d] == (d + 1) % d_count for d in range(d_count))
    if d_count >= 2 and not (left or right):
        shown = ", ".join(f"{d} -> {v}" for d, v in enumerate(send_to))
        problems.add(path, f"the all-gather is a ring: each device sends its chunks to a neighbour, device_id "
                           f"({axis} - 1) % {d_count} or ({axis} + 1) % {d_count}; this one sends {shown}")
        return None, None
    return send_to, PlanExpr(expr, ranges)


# ------------------------------------------------------------------------------- the NVLink multicast entries

MULTIMEM_PTX_TYPES = {"bf16": ("bf16x2", ".acc::f32"), "f16": ("f16x2", ".acc::f32"), "f32": ("f32", "")}


@dataclass(frozen=True)
class MultimemPlan:
    """What templates/collective_matmul/multimem.cu.j2 needs to spell multimem.st / multimem.ld_reduce / multimem.red for one
    dtype. Rendered and assembled in CI only: NVLink multicast is not supported by this release."""
    dtype: str
    ptx_type: str              # the packed element type of the PTX instructions
    acc: str                   # ld_reduce's accumulation precision qualifier (16-bit types add in f32)
    vec: int                   # 32-bit words per thread access (4: 16 bytes)
    store_kernel: str
    load_reduce_kernel: str
    signal_kernel: str
    target: str = target_field()     # schedule.target: the architecture planned for (absent in plan.json: sm_90a)


def plan_multimem(dtype: str, vec: int = 4) -> MultimemPlan:
    if dtype not in MULTIMEM_PTX_TYPES:
        raise ValueError(f"multimem entries are planned for {', '.join(MULTIMEM_PTX_TYPES)}, not {dtype}")
    if vec not in (1, 4):
        raise ValueError(f"multimem accesses are 1 or 4 32-bit words per thread here, not {vec}")
    ptx, acc = MULTIMEM_PTX_TYPES[dtype]
    return MultimemPlan(dtype, ptx, acc, vec, f"sg_multimem_store_{dtype}", f"sg_multimem_load_reduce_{dtype}",
                        "sg_semaphore_signal_multicast")
