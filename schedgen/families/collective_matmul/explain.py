"""The collective_matmul family's `schedgen explain` text."""
from __future__ import annotations

from ...explain import PEAK_TFLOPS
from ...frontend import spelling
from ...registry import get as family
from .plan import STEP_KIND

NVLINK_GBPS = 450.0  # H200 NVLink 4, one direction (datasheet: 900 GB/s both ways); not measured here


def explain_collective_matmul(p) -> str:
    """The mesh and the ring, the semaphores, how each backend moves the chunks, then the step's matmul plan."""
    lhs = next(o for o in p.inputs if o.role == "lhs")
    rhs = next(o for o in p.inputs if o.role == "rhs")
    out = p.outputs[0]
    d = p.num_devices
    mma_ms = p.flops / (PEAK_TFLOPS * 1e12) * 1e3
    step_ms = mma_ms / d
    link_ms = p.link_bytes / (NVLINK_GBPS * 1e9) * 1e3 / max(1, p.slots)
    order = "; ".join(f"device {dev}: " + ", ".join(str(p.chunk(dev, s)) for s in range(d)) for dev in range(d))
    ring = ", ".join(f"{dev} -> {p.send_to[dev]}" for dev in range(d))
    target = "its row block" if p.received_per == "row_block" else "the whole chunk"
    device_id = spelling.render_py_int(p.device_id.expr, {p.axis_name: p.axis_name}, ranges=p.device_id.ranges)
    lines = [
        f"kernel {p.launch.kernel_name}  (family collective_matmul, backends: {', '.join(p.launch.backends)})",
        f"  problem    {out.name}[{p.m_total}, {p.n}] = all_gather({lhs.name}[{p.m}, {p.k}] over mesh axis {p.axis_name}, "
        f"{d} devices) @ {rhs.name}[{p.k}, {p.n}] on every device; {p.in_dtype} in, {p.out_dtype} out, f32 accumulation",
        f"             {p.flops / 1e9:.1f} GFLOP per device: {mma_ms:.4f} ms at the {PEAK_TFLOPS:.0f} TFLOP/s peak "
        f"({step_ms:.4f} ms a step); each device sends {p.link_bytes / 2**20:.1f} MiB to its neighbour: "
        f"{link_ms:.4f} ms a chunk at NVLink's {NVLINK_GBPS:.0f} GB/s a direction (datasheet), "
        f"{'hidden under' if link_ms < step_ms else 'longer than'} a step's matmul",
        f"  ring       device x sends its chunks to {device_id} (remote_refs.gather): {ring}",
        f"             step s multiplies chunk (x {'+' if p.chunk_step > 0 else '-'} s) mod {d} into out rows chunk x {p.m}: "
        f"{order}",
        f"  semaphores received[{p.slots} slot{'s' if p.slots > 1 else ''} x {p.counters_per_step}] per {p.received_per}, "
        f"{p.received_signal}; a step waits until {target} landed",
        f"             done[1] per launch, {p.done_signal}: the receiver has read its chunks (the next launch may "
        f"overwrite its gather buffer)",
        f"  CUDA       warps 1-3 of the producer warpgroup copy each chunk to the peer: {p.units_per_step} units of "
        f"{p.copy_rows} row{'s' if p.copy_rows > 1 else ''} ({p.unit_bytes} B), 16-byte vectors x {p.copy_unroll} in flight "
        f"a lane; " + ("a release (red.release.sys) per unit" if p.received_signal == "semaphore_signal" else
                       "one fence.acq_rel.sys per step, then red.relaxed.sys per unit"),
        f"             the producer polls ld.acquire.sys (then fence.proxy.async.global) before its TMA reads a gathered "
        f"chunk; launch e waits for e x {p.units_per_counter} arrivals per received semaphore; waits trap after "
        f"{p.spin_timeout_ns / 1e9:.0f} s",
        f"             per device: gather buffer {p.gather_bytes / 2**20:.1f} MiB ({p.slots} slot{'s' if p.slots > 1 else ''}), "
        f"flags {p.flags_bytes} B",
        f"  Pallas     consumer warpgroup 0 TMA-stores each lhs stage of a tile row's first tile to "
        f"plgpu.remote_ref(gather, {device_id}) while its wgmma runs (delay_release 1); "
        f"plgpu.semaphore_signal / semaphore_wait on pl.get_global semaphores; run under jax.shard_map",
        f"  grid       {p.launch.num_blocks} persistent blocks x {p.launch.threads} threads walk {d} steps x {p.tiles_per_step} tiles = "
        f"{p.num_tiles} ({p.num_tiles / max(1, p.launch.num_blocks):.2f} waves)" + (", lowered at launch to the SMs" if p.launch.auto_blocks else ""),
    ]
    for a in p.launch.kernel_args:
        if a.kind == "tmap":
            lines.append(f"  TMA        {a.what:7} box {list(a.box)} swizzle {a.swizzle or 'none'} over {list(a.shape)}")
    lines.append("  the matmul of one step (the matmul family's plan; its own grid, tensor maps and cluster lines left out):")
    skip = ("tile loop", "cluster", "TMA ")
    lines += ["  " + ln for ln in family(STEP_KIND).explain(p.mm).splitlines()[1:] if not ln.strip().startswith(skip)]
    return "\n".join(lines)
