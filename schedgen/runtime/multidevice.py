"""Host side of the multi-device kernels (the collective_matmul family): peer buffers, kernel arguments, launches.

One CUDA kernel runs per GPU of the ring, all launches at once, each with the same grid and the same `epoch` (the
launch count: the kernels' semaphores only rise, a launch of epoch e waits for e x its arrivals, so nothing is reset
between launches). Every device allocates its gather buffer (chunks received from the ring) and its flags (the
received / done semaphores, zeroed once); device d's kernel gets tensor maps over its own lhs, gather buffer, rhs and
out, and raw pointers to its lhs and gather buffer, to the gather buffer and flags of the device it sends to, and to
the flags of the device that sends to it.

Two ways to hold the peers' memory:
- `RingRunner`: one process drives every GPU (its primary contexts, with peer access enabled between ring
  neighbours). What `schedgen verify` and the package's `backend="cuda"` use.
- `RankSession`: one process per GPU (torch.multiprocessing, as the NCCL baseline runs), peer buffers exchanged as
  CUDA IPC handles through the caller's all_gather (e.g. torch.distributed.all_gather_object). What
  bench/multi_gpu.py times.

NVLink multicast is never used: nothing here calls cuMulticastCreate, and `MULTI_GPU_ENV` (set by `apply_env`, and
in the environment of every multi-GPU process schedgen starts) keeps NCCL, torch symmetric memory and NVSHMEM off it.

Everything here reads the kernel's launch record (schedgen/plan/launch.py: a package's launch.json, `load_launch`),
never plan.json; each function also takes a plan object (its record is built) or parsed launch.json (validated).
Pure functions (`peers`, `arg_layout`, `validate_layout`, `grid_blocks`, `stack_shards`) need no GPU and are what the
CPU tests check.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..plan.launch import LaunchRecord, Ring, load, record_of
from .arrays import DTYPES

# NVLink multicast (NVLS) is not supported by this release: every multi-GPU process keeps the libraries off it.
MULTI_GPU_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
POISON_BYTE = 0xFF            # all-ones: NaN in every float format the kernels write
PTR_OWNER = {                 # which device's buffer each pointer argument of device d points into
    "lhs": "self", "gather": "self", "flags": "self",
    "peer_gather": "send_to", "peer_flags_send": "send_to", "peer_flags_recv": "recv_from",
}
BUFFER_OF = {"lhs": "lhs", "gather": "gather", "flags": "flags", "peer_gather": "gather",
             "peer_flags_send": "flags", "peer_flags_recv": "flags", "rhs": "rhs", "out": "out"}


def apply_env(environ: dict | None = None) -> dict:
    """Set MULTI_GPU_ENV in `environ` (default: os.environ, before any library reads it); returns it."""
    environ = os.environ if environ is None else environ
    environ.update(MULTI_GPU_ENV)
    return environ


def _record(plan: Any) -> LaunchRecord:
    """The launch record of a ring kernel (a record, parsed launch.json, or a plan object)."""
    rec = record_of(plan)
    if rec.ring is None:
        raise ValueError(f"{rec.name}: a one-GPU kernel ({rec.family}); the multi-device host runs ring kernels only")
    return rec


def _ring(rec: LaunchRecord) -> Ring:
    assert rec.ring is not None
    return rec.ring


def peers(plan: Any, device: int) -> dict[str, int]:
    """For ring position `device`: the ring position whose buffer each pointer argument points into."""
    ring = _ring(_record(plan))
    d = int(device)
    if not 0 <= d < ring.num_devices:
        raise ValueError(f"device {d} is not on the ring of {ring.num_devices} devices")
    owner = {"self": d, "send_to": ring.send_to[d], "recv_from": ring.recv_from[d]}
    return {what: owner[who] for what, who in PTR_OWNER.items()}


@dataclass(frozen=True)
class ArgSpec:
    """One kernel argument of one device, before the driver encodes it."""
    kind: str                 # "tmap" | "ptr" | "u32"
    what: str
    value: int                # the pointer (tmap / ptr) or the number (u32)
    device: int = -1          # whose memory a pointer points into
    dtype: str = ""
    shape: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    box: tuple[int, ...] = ()
    swizzle: int = 0


def arg_layout(plan: Any, device: int, pointers: Mapping[tuple[str, int], int], epoch: int) -> list[ArgSpec]:
    """Device `device`'s kernel arguments, in the kernel's order. `pointers[(buffer, ring position)]` is the device
    address (as seen from `device`: a peer's buffer through peer access or an opened IPC handle) of lhs, rhs, out,
    gather and flags of each ring position."""
    rec = _record(plan)
    if epoch < 1 or epoch >= 2 ** 32:
        raise ValueError(f"epoch must be in 1..2**32-1 (the launch count), got {epoch}")
    owner = peers(rec, device)
    out = []
    for a in rec.kernel_args:
        kind, what = a.kind, a.what
        if what not in BUFFER_OF and not (kind == "u32" and what in ("device", "epoch")):
            raise ValueError(f"{rec.name}: kernel argument {kind} {what!r} is not one the ring host fills")
        if kind == "u32":
            out.append(ArgSpec("u32", what, int(device) if what == "device" else int(epoch)))
            continue
        dev = int(device) if kind == "tmap" else owner[what]
        key = (BUFFER_OF[what], dev)
        if key not in pointers:
            raise KeyError(f"no pointer for {key[0]} of ring position {dev} (device {device}'s argument {what})")
        out.append(ArgSpec(kind, what, int(pointers[key]), dev, a.dtype, a.shape, a.strides, a.box, a.swizzle))
    return out


def validate_layout(layout: Sequence[ArgSpec]) -> None:
    """The driver's rules for every tensor map of a layout (alignment, strides, boxes, swizzle span); pure."""
    from .driver import validate_tiled
    for a in layout:
        if a.kind == "tmap":
            validate_tiled(a.value, a.dtype, a.shape, a.strides, a.box, swizzle=a.swizzle)
        elif a.kind == "ptr" and (a.value <= 0 or a.value % 16):
            raise ValueError(f"{a.what}: pointer {a.value:#x} is null or not 16-byte aligned")


def grid_blocks(plan: Any, sm_count: int) -> int:
    """The persistent grid: the plan's blocks, lowered to the SMs when automatic (every block must be resident: the
    blocks wait for their peers)."""
    rec = _record(plan)
    blocks = rec.num_blocks
    if rec.auto_blocks:
        blocks = min(blocks, int(sm_count) * rec.blocks_per_sm)
    if blocks > int(sm_count) * rec.blocks_per_sm:
        raise ValueError(f"{blocks} blocks cannot all be resident on {sm_count} SMs; the collective kernel waits "
                         f"for its peers, so every block must be")
    return max(1, blocks)


def buffer_bytes(plan: Any) -> dict[str, int]:
    """Bytes of each per-device buffer."""
    r = _ring(_record(plan))
    isz = DTYPES[r.in_dtype].itemsize
    return {"lhs": r.m * r.k * isz, "rhs": r.k * r.n * isz, "out": r.m_total * r.n * DTYPES[r.out_dtype].itemsize,
            "gather": max(r.gather_bytes, 16), "flags": r.flags_bytes}


def stack_shards(plan: Any, name: str, shards: Sequence[Any]) -> np.ndarray:
    """Per-device arrays (numpy, or anything np.asarray takes) -> one [num_devices, *shape] numpy array, checked."""
    rec = _record(plan)
    ops = {o.name: o for o in rec.operands}
    if name not in ops:
        raise ValueError(f"{rec.name}: no operand named {name!r}")
    o = ops[name]
    if len(shards) != rec.num_devices:
        raise ValueError(f"{rec.name}: {name} needs {rec.num_devices} per-device arrays (one per ring position), "
                         f"got {len(shards)}")
    out = []
    for d, s in enumerate(shards):
        a = np.asarray(s)
        if tuple(a.shape) != o.shape or a.dtype != DTYPES[o.dtype]:
            raise ValueError(f"{rec.name}: {name}[{d}] must be {o.dtype} {list(o.shape)}, got {a.dtype} "
                             f"{list(a.shape)}")
        out.append(a)
    return np.stack(out)


# ------------------------------------------------------------------------------------------------ on the GPUs

def _driver():
    from . import driver
    return driver


def _cu():
    from cuda.bindings import driver as cu
    return cu


def gpu_count() -> int:
    """CUDA devices visible to this process (0 without a driver)."""
    d = _driver()
    ok, _ = d.available()
    if not ok:
        return 0
    return int(d._call("cuDeviceGetCount"))


def can_run(plan: Any, devices: Sequence[int] | None = None) -> tuple[bool, str]:
    """Whether this process can run the plan's ring: enough GPUs, and peer access between every ring neighbour."""
    rec = _record(plan)
    d = _driver()
    ok, why = d.available()
    need = rec.num_devices
    if not ok:
        return False, f"needs {need} GPUs with peer access: {why}"
    count = gpu_count()
    devs = list(range(need)) if devices is None else list(devices)
    if count < need or len(devs) != need or max(devs) >= count:
        return False, f"needs {need} GPUs with peer access; this machine has {count}"
    for pos in range(need):
        a, b = devs[pos], devs[_ring(rec).send_to[pos]]
        if a != b and not int(d._call("cuDeviceCanAccessPeer", d._call("cuDeviceGet", a), d._call("cuDeviceGet", b))):
            return False, f"GPU {a} cannot access GPU {b}'s memory (no peer-to-peer path)"
    return True, ""


def _alloc(nbytes: int) -> int:
    return int(_driver()._call("cuMemAlloc", max(int(nbytes), 16)))


def _enable_peer(device: int, peer: int) -> None:
    """Let the current context (device's) access peer's memory; already enabled is fine."""
    d, cu = _driver(), _cu()
    if device == peer:
        return
    d.ensure_context(peer)
    peer_ctx = d._call("cuCtxGetCurrent")
    d.ensure_context(device)
    err = cu.cuCtxEnablePeerAccess(peer_ctx, 0)
    err = err[0] if isinstance(err, tuple) else err
    if err not in (cu.CUresult.CUDA_SUCCESS, cu.CUresult.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED):
        raise d.CudaError("cuCtxEnablePeerAccess", err)


def _encode(layout: Sequence[ArgSpec]) -> list:
    d = _driver()
    args = []
    for a in layout:
        if a.kind == "tmap":
            args.append(d.Arg.tensor_map(d.encode_tiled(a.value, a.dtype, a.shape, a.strides, a.box, swizzle=a.swizzle)))
        elif a.kind == "ptr":
            args.append(d.Arg.ptr(a.value))
        else:
            args.append(d.Arg.u32(a.value))
    return args


class RingRunner:
    """Every GPU of the ring from one process: allocate, upload, launch all, download. Not thread-safe."""

    def __init__(self, plan: Any, cubin: bytes, devices: Sequence[int] | None = None):
        self.launch = p = _record(plan)
        ring = _ring(p)
        self.devices = list(range(p.num_devices)) if devices is None else [int(x) for x in devices]
        ok, why = can_run(p, self.devices)
        if not ok:
            raise RuntimeError(f"{p.name}: {why}")
        d = _driver()
        self.module = d.Module(cubin)
        self.sizes = buffer_bytes(p)
        self.epoch = 0
        self.ptrs: dict[tuple[str, int], int] = {}
        names = [d._device_name(d._call("cuDeviceGet", x)) for x in self.devices]
        if len(set(names)) != 1:
            raise RuntimeError(f"{p.name}: the ring's GPUs must be alike (same grid on every one), got {names}")
        for pos, dev in enumerate(self.devices):
            d.ensure_context(dev)
            for buf, nbytes in self.sizes.items():
                self.ptrs[(buf, pos)] = _alloc(nbytes)
            d._call("cuMemsetD8", self.ptrs[("flags", pos)], 0, self.sizes["flags"])
        for pos, dev in enumerate(self.devices):
            for other in {ring.send_to[pos], ring.recv_from[pos]}:
                _enable_peer(dev, self.devices[other])
        d.ensure_context(self.devices[0])
        self.blocks = grid_blocks(p, d.device_info()["sm_count"])
        self.funcs = {}
        for dev in self.devices:
            d.ensure_context(dev)
            self.funcs[dev] = self.module.function(p.kernel_name, dynamic_smem=p.smem_bytes)

    def upload(self, lhs: np.ndarray, rhs: np.ndarray, poison: bool = True) -> None:
        """lhs [D, M, K], rhs [D, K, N] (stack_shards); out poisoned with NaN."""
        d = _driver()
        for pos, dev in enumerate(self.devices):
            d.ensure_context(dev)
            for name, arr in (("lhs", lhs[pos]), ("rhs", rhs[pos])):
                a = np.ascontiguousarray(arr)
                d._call("cuMemcpyHtoD", self.ptrs[(name, pos)], a.ctypes.data, a.nbytes)
            if poison:
                d._call("cuMemsetD8", self.ptrs[("out", pos)], POISON_BYTE, self.sizes["out"])
        for dev in self.devices:
            d.ensure_context(dev)
            d.synchronize()

    def launchers(self) -> list[Callable[[], None]]:
        """One zero-argument launcher per device for the next epoch (call them all, in any order, then sync)."""
        d = _driver()
        self.epoch += 1
        out = []
        for pos, dev in enumerate(self.devices):
            args = _encode(arg_layout(self.launch, pos, self.ptrs, self.epoch))
            func = self.funcs[dev]

            def go(dev=dev, func=func, args=args) -> None:
                d.ensure_context(dev)
                d.launch(func, grid=(self.blocks, 1, 1), block=(self.launch.threads, 1, 1),
                         smem=self.launch.smem_bytes, args=args)
            out.append(go)
        return out

    def run(self) -> None:
        for go in self.launchers():
            go()
        self.synchronize()

    def synchronize(self) -> None:
        d = _driver()
        for dev in self.devices:
            d.ensure_context(dev)
            d.synchronize()

    def download(self) -> np.ndarray:
        """out of every device: [D, M_total, N]."""
        d = _driver()
        r = _ring(self.launch)
        out = np.empty((r.num_devices, r.m_total, r.n), DTYPES[r.out_dtype])
        for pos, dev in enumerate(self.devices):
            d.ensure_context(dev)
            d._call("cuMemcpyDtoH", out[pos].ctypes.data, self.ptrs[("out", pos)], out[pos].nbytes)
        return out


IPC_HANDLE_BYTES = 64          # CU_IPC_HANDLE_SIZE


def ipc_handle_bytes(handle: Any) -> bytes:
    """The 64 opaque bytes of a CUipcMemHandle (what crosses the process boundary)."""
    import ctypes
    return ctypes.string_at(handle.getPtr(), IPC_HANDLE_BYTES)


def ipc_handle_from(raw: bytes) -> Any:
    """A CUipcMemHandle holding `raw` (64 bytes from ipc_handle_bytes in another process)."""
    import ctypes
    raw = bytes(raw)
    if len(raw) != IPC_HANDLE_BYTES:
        raise ValueError(f"a CUDA IPC handle is {IPC_HANDLE_BYTES} bytes, got {len(raw)}")
    h = _cu().CUipcMemHandle()
    ctypes.memmove(h.getPtr(), raw, IPC_HANDLE_BYTES)
    return h


class RankSession:
    """One GPU of the ring in its own process (rank = ring position). Peer buffers come as CUDA IPC handles through
    `all_gather(obj) -> [obj of every rank]` (e.g. torch.distributed.all_gather_object wrapped to return a list)."""

    def __init__(self, plan: Any, cubin: bytes, rank: int, device: int,
                 all_gather: Callable[[Any], list], external: Mapping[str, int] | None = None):
        d, cu = _driver(), _cu()
        self.launch = p = _record(plan)
        ring = _ring(p)
        self.rank, self.device = int(rank), int(device)
        d.ensure_context(self.device)
        self.sizes = buffer_bytes(p)
        self.epoch = 0
        self.own = {buf: int((external or {}).get(buf) or _alloc(n)) for buf, n in self.sizes.items()}
        d._call("cuMemsetD8", self.own["flags"], 0, self.sizes["flags"])
        handles = {buf: ipc_handle_bytes(d._call("cuIpcGetMemHandle", self.own[buf])) for buf in ("gather", "flags")}
        everyone = all_gather({"rank": self.rank, "handles": handles})
        self.ptrs = {(buf, self.rank): ptr for buf, ptr in self.own.items()}
        self._opened = []
        for who in {ring.send_to[self.rank], ring.recv_from[self.rank]} - {self.rank}:
            entry = next(e for e in everyone if e["rank"] == who)
            for buf, raw in entry["handles"].items():
                ptr = int(d._call("cuIpcOpenMemHandle", ipc_handle_from(raw),
                                  cu.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
                self._opened.append(ptr)
                self.ptrs[(buf, who)] = ptr
        self.module = d.Module(cubin)
        self.func = self.module.function(p.kernel_name, dynamic_smem=p.smem_bytes)
        self.blocks = grid_blocks(p, d.device_info()["sm_count"])

    def upload(self, lhs: np.ndarray, rhs: np.ndarray, poison: bool = True) -> None:
        """This rank's lhs [M, K] and rhs [K, N]; out poisoned with NaN (synchronous)."""
        d = _driver()
        d.ensure_context(self.device)
        for name, arr in (("lhs", lhs), ("rhs", rhs)):
            a = np.ascontiguousarray(arr)
            if a.nbytes != self.sizes[name]:
                raise ValueError(f"{name}: {a.nbytes} B, the kernel's buffer holds {self.sizes[name]} B")
            d._call("cuMemcpyHtoD", self.own[name], a.ctypes.data, a.nbytes)
        if poison:
            self.poison()

    def poison(self) -> None:
        d = _driver()
        d.ensure_context(self.device)
        d._call("cuMemsetD8", self.own["out"], POISON_BYTE, self.sizes["out"])
        d.synchronize()

    def download(self) -> np.ndarray:
        """This rank's out [M_total, N] (synchronizes the context first)."""
        d = _driver()
        d.ensure_context(self.device)
        d.synchronize()
        r = _ring(self.launch)
        out = np.empty((r.m_total, r.n), DTYPES[r.out_dtype])
        d._call("cuMemcpyDtoH", out.ctypes.data, self.own["out"], out.nbytes)
        return out

    def launcher(self, stream: int = 0) -> Callable[[], None]:
        """A zero-argument launcher of the next epochs: each call launches epoch + 1 (every rank must call it the
        same number of times)."""
        d = _driver()

        def go() -> None:
            self.epoch += 1
            args = _encode(arg_layout(self.launch, self.rank, self.ptrs, self.epoch))
            d.launch(self.func, grid=(self.blocks, 1, 1), block=(self.launch.threads, 1, 1),
                     smem=self.launch.smem_bytes, args=args, stream=stream)
        return go


# ------------------------------------------------------------------------------------------------ verification

def collective_inputs(plan: Any, seed: int | None = None) -> dict[str, np.ndarray]:
    """Fresh random per-device inputs, stacked: lhs [D, M, K], rhs [D, K, N] (normal, in the input dtype)."""
    rec = _record(plan)
    rng = np.random.default_rng(seed)
    out = {}
    for o in rec.inputs:
        shape = (rec.num_devices, *o.shape)
        out[o.name] = rng.standard_normal(shape, dtype=np.float32).astype(DTYPES[o.dtype])
    return out


def run_cuda(plan: Any, cubin: bytes, inputs: Mapping[str, np.ndarray], devices: Sequence[int] | None = None,
             launches: int = 1) -> np.ndarray:
    """Every device's out [D, M_total, N] after `launches` launches on fresh NaN-poisoned outputs (the last one's)."""
    p = _record(plan)
    lhs, rhs = p.by_role("lhs").name, p.by_role("rhs").name
    runner = RingRunner(p, cubin, devices)
    for _ in range(launches):
        runner.upload(inputs[lhs], inputs[rhs], poison=True)
        runner.run()
    return runner.download()


def run_pallas(module: Any, plan: Any, inputs: Mapping[str, np.ndarray], interpret: Any = None) -> np.ndarray:
    """The Pallas kernel over a mesh of the first num_devices jax devices; out [D, M_total, N] (poisoned first)."""
    p = _record(plan)
    lhs, rhs = p.by_role("lhs").name, p.by_role("rhs").name
    outs = module.run_shards(list(inputs[lhs]), list(inputs[rhs]), interpret=interpret, poisoned=True)
    return np.stack([np.asarray(o) for o in outs])


def load_launch(root: str | Path) -> LaunchRecord:
    """A ring package's launch record (root/launch.json, validated; LaunchRecordError names the file)."""
    rec = load(root)
    if rec.ring is None:
        raise ValueError(f"{Path(root) / 'launch.json'}: {rec.name} is a one-GPU kernel ({rec.family}), not a ring "
                         f"kernel")
    return rec


def flops(plan: Any) -> int:
    r = _ring(_record(plan))
    return 2 * r.num_devices * r.m * r.n * r.k


def tflops(plan: Any, ms: float) -> float:
    return flops(plan) / (ms * 1e-3) / 1e12 if ms and math.isfinite(ms) else 0.0
