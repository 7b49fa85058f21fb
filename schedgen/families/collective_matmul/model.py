"""The collective_matmul family's op: all_gather(lhs) @ rhs over a 1-D device mesh."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ...frontend.model import GemmSchedule, Ident, Model, Operand, Sizes


class Mesh(Model):
    """The devices a multi-GPU kernel runs on: a 1-D device mesh, as `jax.make_mesh((num_devices,), (axis_name,))`
    makes it. The kernel runs once per device (under `jax.shard_map` for Pallas, one launch per GPU for CUDA); each
    launch knows its index along the axis (`lax.axis_index(axis_name)`), and device ids in the schedule's
    expressions are indices along this axis."""
    axis_name: Ident = Field(description=(
        "the mesh axis name; the schedule's device-id expressions use it as this device's index"), examples=["x"])
    num_devices: Annotated[int, Field(ge=1, le=8)] = Field(description="devices on the axis (GPUs of one host)")


class CollectiveMatmulOp(Model):
    """`out = all_gather(lhs) @ rhs` on every device of a 1-D mesh: the all-gather of lhs over the mesh axis overlapped
    with the matmul (the pattern of JAX's collective_matmul_mgpu). Shapes are per device, as each device's kernel sees
    them: `lhs` [M, K] is this device's rows of the gathered matrix, `rhs` [K, N] this device's own right-hand side
    (e.g. its column shard of a weight), `out` [M_total, N] with M_total = num_devices x M, device d's rows at
    d x M. bf16/f16 in, f32 accumulation, bf16/f16/f32 out."""
    kind: Literal["collective_matmul"] = Field(description="all_gather(lhs) @ rhs over a 1-D device mesh")
    sizes: Sizes = Field(default_factory=dict)
    inputs: dict[Ident, Operand] = Field(min_length=2, max_length=2, description=(
        "lhs [M, K] (this device's rows of the gathered matrix) and rhs [K, N], per device"))
    outputs: dict[Ident, Operand] = Field(min_length=1, max_length=1, description=(
        "out [num_devices x M, N]: device d's rows at d x M"))
    lhs: Ident = Field(default="a", description="the name of the gathered input (default a)")
    rhs: Ident = Field(default="b", description="the name of the device's own right-hand side (default b)")
    mesh: Mesh = Field(description="the 1-D device mesh the kernel runs on")


# --------------------------------------------------------------------------- schedule: the fields only the collective matmul kernels read


class RemoteRef(Model):
    """`plgpu.remote_ref(ref, device_id)`: a peer device's copy of one of the kernel's buffers. `device_id` is an
    integer expression in the mesh axis name (this device's index along it) and integer literals, e.g.
    "(x - 1) % 2"; it is evaluated for every device and must name a device of the mesh."""
    device_id: Annotated[str, Field(min_length=1, max_length=200)] = Field(description=(
        "the peer device, as an integer expression in op.mesh.axis_name (this device's index) and integer "
        "literals; evaluated for every device, it must give a device of the mesh"),
        examples=["(x - 1) % 2", "(x + 1) % 4"])


class Semaphore(Model):
    """A cross-device semaphore (`plgpu.SemaphoreType.REGULAR`, in GMEM): signalled on a peer (`pl.semaphore_signal`
    with `device_id`, or `plgpu.semaphore_signal_parallel` of `SemaphoreSignal`s) and waited on where it lives
    (`pl.semaphore_wait(sem, value, decrement=False)`: counts only rise). `signal`: semaphore_signal (each signal a
    release of its own) or semaphore_signal_parallel (signals issued together behind one system-scope fence).
    `per`: what one semaphore of the array counts: `chunk` (one device's whole lhs), `row_block` (one tile row of
    it: the receiver starts on the rows that landed), `launch` (one kernel launch, for `done`). The Pallas rendering
    takes semaphore_signal only (jax 0.11.2 puts semaphore_signal_parallel's fence after its adds)."""
    signal: Literal["semaphore_signal", "semaphore_signal_parallel"] = Field(default="semaphore_signal", description=(
        "semaphore_signal (the default): each signal a release of its own; semaphore_signal_parallel: the signals "
        "of a step issued together behind one system-scope fence (CUDA backend only)"))
    per: Literal["chunk", "row_block", "launch"] | None = Field(default=None, description=(
        "what one semaphore of the array counts: chunk (one device's whole lhs), row_block (one tile row of it: "
        "the receiver starts on the rows that landed), launch (one kernel launch, for done). Default (absent): "
        "the kernel's own choice for that semaphore"))


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
    remote_refs: dict[Ident, RemoteRef] = Field(default_factory=dict, description=(
        "the kernel's remote refs by name (gather: where this device's lhs chunks go) and the peer each one "
        "points at"), examples=[{"gather": {"device_id": "(x - 1) % 2"}}])
    semaphores: dict[Ident, Semaphore] = Field(default_factory=dict, description=(
        "the kernel's semaphores by name (received: arrivals on the receiver; done: the receiver has read them) "
        "and how each is signalled"), examples=[{"received": {"per": "row_block"}, "done": {}}])


class CollectiveMatmulSchedule(GemmSchedule):
    """The collective matmul's schedule: its step kernel's (the matmul family's wgmma kernel) plus how the devices exchange data."""
    collective: Collective | None = Field(default=None, description=(
        "multi-device data movement (collective_matmul only). Default (absent): peer-to-peer remote refs with the "
        "kernel's own device ids and semaphores"))
