"""Planner of the `collective_matmul` family: `out = all_gather(lhs) @ rhs` on each device of a 1-D mesh, the
all-gather of lhs overlapped with the matmul (the pattern of JAX's collective_matmul_mgpu).

Every device runs the same kernel. Device d holds lhs_d [M, K] and its own rhs [K, N]; out [M_total, N] with
M_total = D x M holds all_gather(lhs) @ rhs. The gather is a ring: at step s (0 <= s < D) device d multiplies the
chunk c(d, s) = (d - send_offset x s) mod D (its own at s = 0) into out rows c x M .. (c + 1) x M, and (for
s < D - 1) forwards that chunk to its ring neighbour `send_to(d)` = the remote ref's device id, which multiplies it
at step s + 1. A `received` semaphore array on the receiver counts arrivals (per chunk or per tile row block); a
`done` semaphore tells the sender that its chunks were read (so the next launch may overwrite them).

The per-step matmul is the matmul family's kernel: this planner builds the spec of one step ([M, K] @ [K, N]) and
plans it with `plan_matmul`, so every tile, wgmma, swizzle, SMEM and register rule (and its located message) is the
matmul family's own; the rules of the collective (mesh, ring, semaphores, what each backend can render) are here.

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
from ...frontend.model import ITEMSIZE, Operand
from ...plan.common import CTYPE, Problems
from ...plan.hardware import Hardware
from ..matmul.model import MatmulOp
from ..matmul.plan import (
    MatmulPlan,
    MatOperand,
    check_operand_roles,
    plan_matmul,
    tile_from_block_specs,
)

if TYPE_CHECKING:
    from ...frontend.specfile import SpecFile

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
MULTIMEM_WHY = ("NVLink multicast is switched off on the lent machines (NCCL_NVLS_ENABLE=0; no cuMulticastCreate), "
                "so {what} cannot run here: the multimem entries are rendered and their PTX assembled to SASS in CI only "
                "(schedgen/families/collective_matmul/templates/multimem.cu.j2, tests/test_collective_sass.py){extra}; use transport: remote_ref "
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
    family: str
    name: str
    kernel_name: str
    sizes: dict
    backends: tuple[str, ...]
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
    device_id_py: str          # the remote ref's device id as Python over `dev` (validated, rendered from its tree)
    device_id_text: str        # ... over the axis name (explain), re-rendered from the tree like device_id_py
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
    copy_warps: int
    copy_unroll: int
    gather_bytes: int
    flag_words: int            # u32 words of a device's flags: received [slots x counters_per_step], done
    done_index: int
    flags_bytes: int
    spin_timeout_ns: int
    kernel_args: tuple[CollArg, ...]
    # launch
    num_blocks: int
    auto_blocks: bool
    blocks_per_sm: int
    threads: int
    producer_regs: int
    consumer_regs: int
    smem_bytes: int
    approx_math: bool
    lowering_semantics: str
    profile_space: int
    flops: int                 # per device
    bytes_moved: int           # per device: lhs, rhs, out and the gathered chunks read back
    link_bytes: int            # per device: bytes sent to the neighbour over the ring

    @property
    def tma_ranks(self) -> list[int]:
        return [2]

    def chunk(self, device: int, step: int) -> int:
        """The lhs chunk (the device it came from) that `device` multiplies at ring step `step`."""
        return (device + self.chunk_step * step) % self.num_devices


def plan_collective_matmul(spec: SpecFile, hw: Hardware) -> tuple[CollectiveMatmulPlan | None, Problems]:
    op, sch = spec.op, spec.schedule
    problems = Problems()
    mesh = op.mesh
    d_count = mesh.num_devices
    col = sch.collective
    col_path = ("schedule", "collective")

    # --- the mesh and the names the generated module uses
    if d_count < 2:
        problems.add(("op", "mesh", "num_devices"), f"a collective matmul runs on at least 2 devices, got {d_count}; "
                                                    f"for one device use kind: matmul")
    # (the spec name and input names, schedgen.reserved: checked by the step's plan_matmul below)
    if mesh.axis_name in op.sizes or mesh.axis_name in op.inputs or mesh.axis_name in op.outputs:
        problems.add(("op", "mesh", "axis_name"), f"the mesh axis '{mesh.axis_name}' is also an operand or size name; "
                                                  f"choose another axis name")

    # --- shapes: lhs [M, K], rhs [K, N] per device, out [M_total, N]
    out_name = next(iter(op.outputs))
    before = len(problems)
    check_operand_roles(op, problems)
    if len(problems) != before:
        return None, problems
    lhs_op, rhs_op, out_op = op.inputs[op.lhs], op.inputs[op.rhs], op.outputs[out_name]
    for nm, o in ((op.lhs, lhs_op), (op.rhs, rhs_op)):
        if len(o.shape) != 2:
            problems.add(("op", "inputs", nm, "shape"), f"per-device operands are 2-D ([M, K] and [K, N]); got "
                                                        f"{len(o.shape)} dimensions")
    if len(out_op.shape) != 2:
        problems.add(("op", "outputs", out_name, "shape"), "the output is 2-D: [M_total, N] with M_total = "
                                                           "num_devices x M")
    if len(problems) != before:
        return None, problems

    # --- one step's matmul, planned by the matmul family (tiles, wgmma, swizzles, SMEM, registers, Pallas limits)
    step_op = MatmulOp(kind="matmul", sizes=dict(op.sizes), inputs=dict(op.inputs),
                       outputs={out_name: Operand(shape=[lhs_op.shape[0], rhs_op.shape[1]], dtype=out_op.dtype)},
                       lhs=op.lhs, rhs=op.rhs)
    step_spec = spec.model_copy(update={"op": step_op, "schedule": sch.model_copy(update={"collective": None})})
    mm, mm_problems = plan_matmul(step_spec, hw)
    # the step's output shape is ours to derive (its problems are reported against the real output below), and the
    # matmul family's way out of ragged sizes (out_of_bounds: zero) is not one here (checked below)
    problems.extend(p for p in mm_problems if tuple(p.path[:3]) != ("op", "outputs", out_name)
                    and p.path[-1:] != ("out_of_bounds",))
    sizes = dict(op.sizes)

    def size_of(dim) -> int | None:
        return dim if isinstance(dim, int) else sizes.get(dim)

    m, n = size_of(lhs_op.shape[0]), size_of(rhs_op.shape[1])
    mt, nt = size_of(out_op.shape[0]), size_of(out_op.shape[1])
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

    # --- what the collective kernels take of the matmul family's schedule space
    cl = list(sch.cluster)
    if math.prod(cl) != 1:
        problems.add(("schedule", "cluster"), f"the collective matmul runs without clusters (each CTA loads its own "
                                              f"lhs and rhs blocks); use cluster: [1], got {cl}")
    for nm, bs in sch.in_specs.items():
        if bs.collective_axes:
            problems.add(("schedule", "in_specs", nm, "collective_axes"), "no cluster multicast in the collective "
                                                                          "matmul; remove collective_axes")
    if sch.persistent.loop != "nd_loop":
        problems.add(("schedule", "persistent", "loop"),
                     "the collective matmul's blocks wait for data from the peer device: every block must be resident "
                     "at once, so the grid is persistent (nd_loop), never one block per tile")
    if sch.persistent.num_blocks != "auto" and sch.persistent.num_blocks > hw.sm_count:
        problems.add(("schedule", "persistent", "num_blocks"),
                     f"num_blocks {sch.persistent.num_blocks} exceeds the {hw.sm_count} SMs: blocks that are not "
                     f"resident could wait for peers that wait for them; use at most {hw.sm_count} (or auto)")
    if mm is not None and mm.producer_regs < COPY_MIN_REGS:
        problems.add(("schedule", "pipeline", "memory_registers"),
                     f"the collective kernel's producer warpgroup also copies the chunks to the peer (warps 1-3, 16-byte "
                     f"vectors in flight): it needs at least {COPY_MIN_REGS} registers a thread after setmaxnreg, got "
                     f"{mm.producer_regs}")
    if sch.epilogue.store != "tma":
        problems.add(("schedule", "epilogue", "store"), "the collective matmul stores its tiles by TMA; use store: tma")
    tile = tile_from_block_specs(step_op, sch, out_name, Problems())        # (its own disagreements are reported by plan_matmul)
    for dim, size, t in zip(("M", "N", "K"), (m, n, size_of(lhs_op.shape[1])), tile):
        if size is not None and size % t:
            problems.add(("op", "sizes"), f"{dim} = {size} is not a multiple of tile_{dim.lower()} = {t}: the all-gather "
                                          f"moves whole row blocks and the kernels have no ragged edges, so the sizes "
                                          f"must divide by the tile")

    # --- the collective section: transport, remote refs, semaphores
    transport = col.transport if col is not None else "remote_ref"
    if transport == "multimem_store":
        problems.add((*col_path, "transport"), MULTIMEM_WHY.format(
            what="multimem_store (and semaphore_signal_multicast with it)", extra=""))
    elif transport == "multimem_load_reduce":
        problems.add((*col_path, "transport"), MULTIMEM_WHY.format(
            what="multimem_load_reduce", extra="; it also reduces across devices (a reduce-scatter), where this family "
                                               "gathers"))
    remote = dict(col.remote_refs) if col is not None else {}
    for key in remote:
        if key not in REMOTE_REFS:
            problems.add((*col_path, "remote_refs", key),
                         f"the collective matmul's remote ref is 'gather' (the peer's buffer this device's chunks go "
                         f"to); got '{key}'")
    send_to, device_id_py, device_id_text = _ring(remote.get("gather"), mesh.axis_name, d_count, problems,
                                                  (*col_path, "remote_refs", "gather", "device_id"))
    sems = dict(col.semaphores) if col is not None else {}
    per: dict[str, str] = dict(DEFAULT_PER)
    signal = {"received": "semaphore_signal", "done": "semaphore_signal"}
    for key, sem in sems.items():
        if key not in SEMAPHORES:
            problems.add((*col_path, "semaphores", key),
                         f"the collective matmul's semaphores are 'received' (chunk arrivals, on the receiver) and "
                         f"'done' (the receiver has read them, on the sender); got '{key}'")
            continue
        signal[key] = sem.signal
        if sem.per is not None:
            if sem.per not in SEMAPHORES[key]:
                problems.add((*col_path, "semaphores", key, "per"),
                             f"'{key}' counts per {' or per '.join(SEMAPHORES[key])}, got per: {sem.per}")
            else:
                per[key] = sem.per
    if "pallas" in sch.backends:
        for key, sem in sems.items():
            if key in SEMAPHORES and sem.signal == "semaphore_signal_parallel":
                problems.add((*col_path, "semaphores", key, "signal"),
                             "jax 0.11.2 lowers semaphore_signal_parallel as a relaxed add followed by fence.release.sys, "
                             f"which does not order what this block wrote (or read) before the '{key}' signal; the Pallas "
                             "rendering signals with semaphore_signal (red.release.sys): use it, or set schedule.backends: "
                             "[cuda] (the CUDA rendering fences first)")
    if "pallas" in sch.backends and mm is not None and mm.delay_release != 1:
        lhs_spec = sch.in_specs.get(op.lhs)
        problems.add(("schedule", "in_specs", op.lhs, "delay_release") if lhs_spec is not None else
                     ("schedule", "in_specs"),
                     "the Pallas collective matmul sends each lhs stage to the peer from SMEM (a TMA store) while its "
                     "wgmma runs, so the stage is held one wgmma group longer: set delay_release: 1 on the lhs and rhs "
                     "BlockSpecs")
    if problems or mm is None or m is None or n is None or send_to is None:
        return None, problems

    # --- the ring and the copy units
    isz, osz = ITEMSIZE[mm.in_dtype], ITEMSIZE[mm.out_dtype]
    k = mm.k
    offset = -1 if all(send_to[d] == (d - 1) % d_count for d in range(d_count)) else 1
    recv_from = tuple((d - offset) % d_count for d in range(d_count))
    slots = d_count - 1
    tiles_per_step = mm.tiles_m * mm.tiles_n
    num_tiles = d_count * tiles_per_step
    copy_rows = 1
    while copy_rows * k * isz < COPY_UNIT_MIN_BYTES and mm.tile_m % (copy_rows * 2) == 0:
        copy_rows *= 2
    unit_bytes = copy_rows * k * isz
    units_per_step = m // copy_rows
    cps = mm.tiles_m if per["received"] == "row_block" else 1
    units_per_counter = mm.tile_m // copy_rows if per["received"] == "row_block" else units_per_step
    pers = sch.persistent
    blocks = min(num_tiles, hw.sm_count if pers.num_blocks == "auto" else pers.num_blocks)
    flag_words = slots * cps + 1
    gather_rows = slots * m

    def tmap(what: str, shape: tuple[int, int], like) -> CollArg:
        it = ITEMSIZE[like.dtype]
        return CollArg("tmap", what, like.dtype, shape, (shape[1] * it, it), like.box, like.swizzle)

    a_arg, b_arg, o_arg = mm.kernel_args[0], mm.kernel_args[1], mm.kernel_args[2]
    args = (tmap("lhs", (m, k), a_arg), tmap("gather", (gather_rows, k), a_arg), tmap("rhs", (k, n), b_arg),
            tmap("out", (d_count * m, n), o_arg),
            CollArg("ptr", "lhs"), CollArg("ptr", "gather"), CollArg("ptr", "peer_gather"), CollArg("ptr", "flags"),
            CollArg("ptr", "peer_flags_send"), CollArg("ptr", "peer_flags_recv"),
            CollArg("u32", "device"), CollArg("u32", "epoch"))
    lhs_mo = MatOperand(op.lhs, f"in_{op.lhs}", "lhs", mm.in_dtype, CTYPE[mm.in_dtype], isz, (m, k))
    rhs_mo = MatOperand(op.rhs, f"in_{op.rhs}", "rhs", mm.in_dtype, CTYPE[mm.in_dtype], isz, (k, n))
    inputs = tuple(lhs_mo if nm == op.lhs else rhs_mo for nm in op.inputs)
    outputs = (MatOperand(out_name, f"out_{out_name}", "out", mm.out_dtype, CTYPE[mm.out_dtype], osz,
                          (d_count * m, n)),)
    kname = "cmm_{}_{}_d{}_{}x{}x{}_s{}_wg{}".format(spec.name, mm.in_dtype, d_count, mm.tile_m, mm.tile_n, mm.tile_k,
                                                      mm.stages, mm.num_consumers)
    plan = CollectiveMatmulPlan(
        family="collective_matmul", name=spec.name, kernel_name=kname, sizes=sizes, backends=tuple(sch.backends),
        axis_name=mesh.axis_name, num_devices=d_count, m=m, m_total=d_count * m, n=n, k=k, in_dtype=mm.in_dtype,
        out_dtype=mm.out_dtype, inputs=inputs, outputs=outputs, mm=mm,
        send_to=send_to, recv_from=recv_from, send_offset=offset, chunk_step=-offset,
        device_id_py=device_id_py, device_id_text=device_id_text, slots=slots,
        tiles_per_step=tiles_per_step, num_tiles=num_tiles,
        received_signal=signal["received"], received_per=per["received"], counters_per_step=cps,
        done_signal=signal["done"],
        pallas_received_value=1 if per["received"] == "row_block" else blocks,
        copy_rows=copy_rows, unit_bytes=unit_bytes, units_per_step=units_per_step, units_per_counter=units_per_counter,
        copy_warps=COPY_WARPS, copy_unroll=COPY_UNROLL, gather_bytes=gather_rows * k * isz,
        flag_words=flag_words, done_index=slots * cps, flags_bytes=-(-flag_words * 4 // 256) * 256,
        spin_timeout_ns=SPIN_TIMEOUT_NS, kernel_args=args,
        num_blocks=blocks, auto_blocks=pers.num_blocks == "auto", blocks_per_sm=1, threads=mm.threads,
        producer_regs=mm.producer_regs, consumer_regs=mm.consumer_regs, smem_bytes=mm.smem_bytes,
        approx_math=False, lowering_semantics=mm.lowering_semantics, profile_space=mm.profile_space,
        flops=2 * d_count * m * n * k,
        bytes_moved=(m * k + k * n) * isz + d_count * m * n * osz + slots * m * k * isz,
        link_bytes=slots * m * k * isz,
    )
    return plan, problems


def _ring(ref, axis: str, d_count: int, problems: Problems, path: tuple) -> tuple[tuple[int, ...] | None, str, str]:
    """The remote ref's device id: parsed over the axis name, evaluated on every device, checked to be a ring
    neighbour. Returns (send_to per device, its Python rendering over `dev`, its text) or (None, ...) on problems."""
    if ref is None:
        text = f"({axis} - 1) % {d_count}"
    else:
        text = ref.device_id
    ranges = {axis: (0, d_count - 1)}
    try:
        expr = ex.parse_int_expr(text, names=[axis])
        if (err32 := ex.check_int32(expr, ranges, over=f"the mesh ({axis} in 0..{d_count - 1})")) is not None:
            raise err32
        send_to = tuple(ex.eval_int(expr, {axis: d}) for d in range(d_count))
    except ex.ExprError as err:
        problems.add(path, err.message, (err.line, err.col))
        return None, "", text
    bad = [(d, v) for d, v in enumerate(send_to) if not 0 <= v < d_count]
    if bad:
        d, v = bad[0]
        problems.add(path, f"device_id gives {v} on device {d}; device ids along '{axis}' are 0..{d_count - 1} (wrap "
                           f"with % {d_count}, e.g. ({axis} - 1) % {d_count})")
        return None, "", text
    left = all(send_to[d] == (d - 1) % d_count for d in range(d_count))
    right = all(send_to[d] == (d + 1) % d_count for d in range(d_count))
    if d_count >= 2 and not (left or right):
        shown = ", ".join(f"{d} -> {v}" for d, v in enumerate(send_to))
        problems.add(path, f"the all-gather is a ring: each device sends its chunks to a neighbour, device_id "
                           f"({axis} - 1) % {d_count} or ({axis} + 1) % {d_count}; this one sends {shown}")
        return None, "", text
    return (send_to, ex.render_py_int(expr, {axis: "dev"}, ranges=ranges),
            ex.render_py_int(expr, {axis: axis}, ranges=ranges))


# ------------------------------------------------------------------------------- the NVLink multicast entries

MULTIMEM_PTX_TYPES = {"bf16": ("bf16x2", ".acc::f32"), "f16": ("f16x2", ".acc::f32"), "f32": ("f32", "")}


@dataclass(frozen=True)
class MultimemPlan:
    """What schedgen/families/collective_matmul/templates/multimem.cu.j2 needs to spell multimem.st / multimem.ld_reduce / multimem.red for one
    dtype. Rendered and assembled in CI only: NVLink multicast is switched off on the lent machines."""
    dtype: str
    ptx_type: str              # the packed element type of the PTX instructions
    acc: str                   # ld_reduce's accumulation precision qualifier (16-bit types add in f32)
    vec: int                   # 32-bit words per thread access (4: 16 bytes)
    store_kernel: str
    load_reduce_kernel: str
    signal_kernel: str


def plan_multimem(dtype: str, vec: int = 4) -> MultimemPlan:
    if dtype not in MULTIMEM_PTX_TYPES:
        raise ValueError(f"multimem entries are planned for {', '.join(MULTIMEM_PTX_TYPES)}, not {dtype}")
    if vec not in (1, 4):
        raise ValueError(f"multimem accesses are 1 or 4 32-bit words per thread here, not {vec}")
    ptx, acc = MULTIMEM_PTX_TYPES[dtype]
    return MultimemPlan(dtype, ptx, acc, vec, f"sg_multimem_store_{dtype}", f"sg_multimem_load_reduce_{dtype}",
                        "sg_semaphore_signal_multicast")
