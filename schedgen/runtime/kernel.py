"""Run a built kernel package: load its cubin lazily, build tensor maps, launch; or run its Pallas module.

A package folder holds launch.json, plan.json, manifest.json, kernel.cubin and pallas_kernel.py (see
build.package). This module reads only launch.json (the launch record, schedgen/plan/launch.py: validated on load),
the cubin and the Pallas module: plan.json is for people and tools, and a planner may reshape it freely.
`load_package(folder)` returns a callable `Kernel`; the package's __init__ wraps it in a function with the
kernel's own name and arguments.
"""
from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..plan import dims
from ..plan import launch as launch_record
from ..plan.launch import LaunchRecord, Operand
from . import arrays, layout as _layout, pallas_call
from . import torch_op as _torch_op   # imports no torch: its EAGER_DIRECT switch is read per call
from . import autograd as _autograd   # imports no torch either
from .arrays import ArgumentError

STATE_CACHE = 64     # launch states (one per input shapes and device) kept
TMAP_CACHE = 256     # tensor maps (one per pointer and extents) kept
ARGS_BY_PTR = 256    # packed operand arguments kept per launch state (by kernel-arg index and pointer)
_SLOW = object()     # the torch fast path hands the call to the general one
_STREAM_LIMIT = 1 << 64   # driver.STREAM_LIMIT (a CUstream is a pointer); the driver module is imported lazily
# where a launch's workspaces come from (Kernel._go): the driver's pool (raw cupy / numba / DLPack / numpy callers,
# pointer launchers), or torch's caching allocator for a torch call on torch's current stream, or on another stream
POOL, TORCH_CURRENT, TORCH_OTHER = 0, 1, 2
_RAW = object()      # workspaces from torch.cuda.caching_allocator_alloc (a launch on a stream not torch's current)


@dataclass(eq=False)
class _Resolved:
    """The launch data of one set of sizes on one device, evaluated once; the packed parameters and the launch
    config are built at its first launch and only the changed pointers re-packed afterwards."""
    sizes: dict
    out_shapes: tuple
    blocks: int                       # num_blocks evaluated (before the persistent-grid clamp)
    tmaps: dict                       # kernel-arg index -> (dtype, shape, strides, box, swizzle, oob_nan)
    by_operand: list                  # operand -> the kernel-arg indices (ptr, tmap) over it
    counters: list                    # kernel-arg indices of the tile counter
    i32: dict                         # kernel-arg index -> value
    device: int
    workspaces: dict = field(default_factory=dict)   # kernel-arg index -> (bytes, bytes zeroed from its start)
    params: Any = None                # driver.Params
    config: Any = None                # driver.LaunchConfig
    ptrs: Any = None                  # the operand pointers packed now
    counter: int = 0                  # the counter pointer packed now
    spaces: Any = None                # the workspace pointers packed now (kernel-arg index -> pointer)
    where: Any = None                 # torch.device("cuda", device), made at the first torch call
    # (kernel-arg index, pointer) -> its packed Arg (a tensor map encoded once): torch's caching allocator hands
    # an output a few blocks in turn, so a new call's pointer is usually one seen before
    args_by_ptr: dict = field(default_factory=dict)


class Kernel:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.launch: LaunchRecord = launch_record.load(self.root)   # the only description of the kernel read
        self.name: str = self.launch.name
        self._module = None
        self._pallas = pallas_call.PallasCall(self)   # the Pallas call path, its kernels cached per sizes
        self._cache: dict = {}
        self._states: OrderedDict = OrderedDict()   # (device, input shapes or sizes) -> _Resolved
        self._last_torch: tuple | None = None        # (device, input shapes, state) of the last torch call
        self._tmaps: OrderedDict = OrderedDict()    # (ptr, dtype, shape, strides, box, swizzle, oob) -> 128 bytes
        self._lock = threading.Lock()
        self.torch_op = None   # schedgen/runtime/torch_op.py: the custom ops torch tensors go through (packages)
        self.torch_op_asked = False   # load_package(torch_op=True) asked for them (a package's __init__ does)
        self.backward = None   # schedgen/runtime/autograd.py: the package's backward pass (backward.json), if any
        self._torch_dtypes: tuple | None = None   # (inputs, outputs) as torch dtype objects: the fast path
        # per operand: reached through tensor maps only, so a strided view of it is legal (runtime/layout.py)
        self.tmap_only: tuple[bool, ...] = _layout.tmap_only(self.launch)
        self._strided = any(self.tmap_only)

    # ------------------------------------------------------------------ introspection
    @property
    def inputs(self) -> tuple[Operand, ...]:
        return self.launch.inputs

    @property
    def outputs(self) -> tuple[Operand, ...]:
        return self.launch.outputs

    def __repr__(self) -> str:
        sig = ", ".join(f"{o.name}: {o.dtype}{list(o.shape)}" for o in self.inputs)
        return f"<schedgen kernel {self.name}({sig}) backends={list(self.launch.backends)}>"

    # ------------------------------------------------------------------ calling
    def __call__(self, *args: Any, out: Any = None, stream: Any = None, backend: str | None = None,
                 interpret: Any = None) -> Any:
        """Run the kernel. backend None: "pallas" for jax arrays, tracers and interpret=, else "cuda"
        (pallas_call.choose_backend). `stream` (CUDA backend): an int handle, a torch.cuda.Stream, a cupy Stream or
        any object with `__cuda_stream__`; default: the current stream of the inputs' framework (torch's, cupy's;
        the legacy stream for numpy and jax). torch and cupy device arrays may be used inside CUDA-graph capture;
        numpy and jax arrays may not (a CaptureError says so). Device arrays are C-contiguous, or strided views
        TMA can address where the kernel reaches the operand through tensor maps only (`tmap_only`,
        runtime/layout.py). A kernel's workspace comes from torch's caching allocator for torch tensors, from the
        driver's pool for other arrays (`_go`). `interpret` (Pallas): True or a plgpu.InterpretGPUParams runs jax's
        Mosaic GPU interpreter (on the CPU too)."""
        if interpret is not None:
            interpret = pallas_call.interpret_params(interpret)
        op = self.torch_op
        if op is not None and interpret is None and (backend is None or backend == "cuda"):
            # plain eager work on CUDA tensors: straight to the launch (the per-call cost is the product here), the
            # routing rule (TorchOp.eager_direct) read in the same pass as the fast path's checks
            res = self._call_torch(args, out, stream, op)
            if res is not _SLOW:
                return res
            if stream is None and not op.eager_direct(args, out):
                # torch tensors (meta or fake, traced by torch.compile, under a dispatch mode, needing grad) go
                # through the custom op, whose real implementation comes back to _call_cuda (and whose autograd
                # formula runs the package's backward: runtime/autograd.py); anything else returns NotImplemented
                if out is None or not _autograd.wants_grad(args, out):
                    if self.backward is None and _autograd.wants_grad(args, out):
                        raise _autograd.no_backward_error(self, args, out)
                    routed = op.dispatch(args, out)
                    if routed is not NotImplemented:
                        return routed
        if _autograd.wants_grad(args, out):   # a torch tensor needing grad that the op did not take
            if self.backward is None:
                raise _autograd.no_backward_error(self, args, out)
            raise _autograd.grad_path_error(self, stream, backend, interpret, out)
        backend = pallas_call.choose_backend(self, args, out, backend, stream, interpret)
        if backend == "pallas":
            return self._call_pallas(args, out, interpret)
        return self._call_cuda(args, out, stream)

    def call_user(self, *args: Any, out: Any = None, stream: Any = None, backend: str | None = None,
                  interpret: Any = None) -> Any:
        """The package function's call: as `__call__`, returning (and taking as out=) only the outputs the spec
        wrote; the outputs the forward writes for the backward alone (runtime/autograd.py) are dropped."""
        bw = self.backward
        if bw is None or not bw.saved:
            return self(*args, out=out, stream=stream, backend=backend, interpret=interpret)
        if out is not None:
            out = bw.full_out(self, args, out)
            res = self(*args, out=out, stream=stream, backend=backend, interpret=interpret)
        else:
            res = self(*args, stream=stream, backend=backend, interpret=interpret)
        return bw.user_result(res)

    def _check_count(self, args: Sequence[Any]) -> None:
        if len(args) != len(self.inputs):
            names = ", ".join(o.name for o in self.inputs)
            raise ArgumentError(f"{self.name}() takes {len(self.inputs)} arrays ({names}), got {len(args)}")

    # ------------------------------------------------------------------ sizes
    def bind(self, shapes: Sequence[Sequence[int]]) -> dict[str, int]:
        """The dynamic sizes of a call, from its inputs' shapes (numpy order, one per input); ArgumentError naming
        the argument, the dimension, the value and what is legal when a shape does not fit the kernel."""
        ranges = {r.name: r for r in self.launch.sizes}
        sizes: dict[str, int] = {}
        where: dict[str, str] = {}
        for shape, o in zip(shapes, self.inputs):
            shape = tuple(int(d) for d in shape)
            if len(shape) != len(o.shape):
                raise ArgumentError(f"{o.name}: expected shape {_shown(o.shape)}, got {shape}")
            for i, (want, got) in enumerate(zip(o.shape, shape)):
                if isinstance(want, int):
                    if got != want:
                        raise ArgumentError(f"{o.name}: expected shape {_shown(o.shape)}, got {shape}: dimension "
                                            f"{i} is fixed at {want}")
                    continue
                if want in sizes:
                    if sizes[want] != got:
                        raise ArgumentError(f"{o.name}: dimension {i} ({want}) is {got}, but {where[want]} gave "
                                            f"{want} = {sizes[want]}")
                    continue
                why = ranges[want].check(got)
                if why:
                    raise ArgumentError(f"{o.name}: dimension {i} ({want}) is {got}; {want} {why} (expected shape "
                                        f"{_shown(o.shape)})")
                sizes[want], where[want] = got, f"{o.name} dimension {i}"
        return sizes

    def shape_of(self, o: Operand, sizes: dict[str, int]) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else sizes[d] for d in o.shape)

    def output_shapes(self, sizes: dict[str, int]) -> tuple[tuple[int, ...], ...]:
        return tuple(self.shape_of(o, sizes) for o in self.outputs)

    def check_args(self, args: Sequence[Any], outs: Sequence[Any] | None) -> dict[str, int]:
        """Shape/dtype/layout checks of every argument, needing no GPU; returns the call's dynamic sizes."""
        return self._check(args, outs)[0]

    def _check(self, args: Sequence[Any], outs: Sequence[Any] | None) -> tuple[dict[str, int], tuple | None]:
        """check_args, and the call's layout (`_layout_of`): None when every device array is C-contiguous. A device
        array the kernel reaches through tensor maps only may be strided (runtime/layout.py); numpy arrays and
        every other operand are C-contiguous."""
        self._check_count(args)
        sizes = self.bind([arrays.describe(a, o.name)[1] for a, o in zip(args, self.inputs)])
        strided = self.tmap_only
        for i, (a, o) in enumerate(zip(args, self.inputs)):
            arrays.check(a, o.name, shape=self.shape_of(o, sizes), dtype=o.dtype,
                         contiguous=not strided[i] or isinstance(a, np.ndarray))
        if outs is not None:
            if len(outs) != len(self.outputs):
                raise ArgumentError(f"out: {self.name} has {len(self.outputs)} outputs, got {len(outs)} arrays")
            n = len(self.inputs)
            for i, (a, o) in enumerate(zip(outs, self.outputs)):
                arrays.check(a, f"out[{o.name}]", shape=self.shape_of(o, sizes), dtype=o.dtype, writable=True,
                             contiguous=not strided[n + i] or isinstance(a, np.ndarray))
        lay = self._layout_of([None if isinstance(a, np.ndarray) else a for a in (*args, *(outs or ()))]) \
            if self._strided else None
        if lay is not None:
            for i, s in enumerate(lay):
                if s is not None:
                    _layout.operand_tmaps(self.launch, i, s, sizes)   # raises the located ArgumentError
        return sizes, lay

    def _layout_of(self, arrs: Sequence[Any]) -> tuple | None:
        """The element strides of each array (inputs, then outputs; None: numpy or a missing output) that is not
        C-contiguous, None for each that is; None when all are (the launch state's key, `_resolved`)."""
        lay: list = [None] * len(arrs)
        for i, a in enumerate(arrs):
            if a is None:
                continue
            v = arrays.device_view(a, self.launch.operands[i].name)
            item = arrays.DTYPES[v.dtype].itemsize
            if not arrays.is_c_contiguous(v.shape, v.strides, item):
                if any(s % item for s in v.strides):
                    raise ArgumentError(f"{self.launch.operands[i].name}: byte strides {v.strides} are not "
                                        f"multiples of its {item}-byte elements; {_layout.TMA_RULE}")
                lay[i] = tuple(s // item for s in v.strides)
        return None if all(s is None for s in lay) else tuple(lay)

    def prepare(self, args: Sequence[Any], outs: Sequence[Any], stream: Any = 0) -> Callable[[], None]:
        """A zero-argument launcher over fixed device arrays (tensor maps encoded once): for benchmarks."""
        from . import driver
        ins_v = [arrays.device_view(a, o.name) for a, o in zip(args, self.inputs)]
        outs_v = [arrays.device_view(a, o.name) for a, o in zip(outs, self.outputs)]
        sizes = self.bind([v.shape for v in ins_v])
        device = max(arrays.same_device({f"{i}": v for i, v in enumerate(ins_v + outs_v)}), 0)
        alloc = TORCH_OTHER if any(v.kind == "torch" for v in ins_v + outs_v) else POOL
        return self._launcher([v.ptr for v in ins_v], [v.ptr for v in outs_v], driver.stream_handle(stream),
                              device, sizes, self._layout_of(ins_v + outs_v), alloc)

    # ------------------------------------------------------------------ the launch state, cached
    def _resolved(self, device: int, sizes: dict[str, int], key: Any = None, layout: tuple | None = None
                  ) -> _Resolved:
        """The launch data of one set of sizes on one device (LRU keyed by the input shapes, and the layout of
        strided operands): evaluated tensor-map extents and strides, i32 values, the block count; the packed
        parameters and launch config once it has launched. `layout` (`_layout_of`): per operand, None (C-contiguous)
        or its element strides, whose tensor maps are encoded over them (ArgumentError when TMA cannot)."""
        if key is None:
            key = (device, tuple(sorted(sizes.items())))
            if layout is not None:
                key += (layout,)
        self._last_torch = None   # the torch path's memo is the LRU's last entry only while nothing else moves
        st = self._states.get(key)
        if st is not None:
            self._states.move_to_end(key)
            return st
        r = self.launch
        tmaps: dict[int, tuple] = {}
        by_operand: list[list[int]] = [[] for _ in r.operands]
        i32: dict[int, int] = {}
        counters: list[int] = []
        workspaces: dict[int, int] = {}
        strided: dict[int, tuple] = {}   # kernel-arg index -> the byte strides of a tensor map over a strided operand
        for o, s in enumerate(layout or ()):
            if s is not None:
                if not self.tmap_only[o]:   # (the checks let none through: a raw pointer reads it dense)
                    raise ArgumentError(f"{r.operands[o].name}: the kernel reads it through a raw pointer: it must "
                                        f"be C-contiguous")
                strided.update(_layout.operand_tmaps(r, o, s, sizes))
        for i, a in enumerate(r.kernel_args):
            if a.kind == "i32":
                i32[i] = int(dims.evaluate(a.value, sizes))
            elif a.kind == "workspace":
                nbytes = int(dims.evaluate(a.value, sizes))
                workspaces[i] = (nbytes, nbytes if a.zero == -1 else min(a.zero, nbytes))
            elif a.kind == "ptr":
                by_operand[a.operand].append(i)
            elif a.kind == "counter":
                counters.append(i)
            elif a.kind == "tmap":
                tmaps[i] = (a.dtype, tuple(int(dims.evaluate(d, sizes)) for d in a.shape),
                            strided.get(i) or tuple(int(dims.evaluate(d, sizes)) for d in a.strides), tuple(a.box),
                            a.swizzle, a.oob_nan)
                by_operand[a.operand].append(i)
            else:
                raise ValueError(f"{self.name}: a {a.kind} kernel argument is filled by the multi-device host only")
        st = _Resolved(dict(sizes), self.output_shapes(sizes), int(dims.evaluate(r.num_blocks, sizes)), tmaps,
                       by_operand, counters, i32, device, workspaces)
        self._states[key] = st
        if len(self._states) > STATE_CACHE:
            self._states.popitem(last=False)
        return st

    def _tmap(self, ptr: int, spec: tuple) -> bytes:
        """A tensor map over `ptr` (LRU keyed by pointer, extents, strides and box)."""
        from . import driver
        key = (ptr,) + spec
        got = self._tmaps.get(key)
        if got is not None:
            self._tmaps.move_to_end(key)
            return got
        dtype, shape, strides, box, swizzle, oob_nan = spec
        got = self._tmaps[key] = driver.encode_tiled(ptr, dtype, shape, strides, box, swizzle=swizzle,
                                                     oob_nan=oob_nan)
        if len(self._tmaps) > TMAP_CACHE:
            self._tmaps.popitem(last=False)
        return got

    def _operand_arg(self, st: _Resolved, i: int, ptr: int):
        from . import driver
        spec = st.tmaps.get(i)
        return driver.Arg.ptr(ptr) if spec is None else driver.Arg.tensor_map(self._tmap(ptr, spec))

    def _args_of(self, st: _Resolved, ptrs: Sequence[int], counter: int, spaces: dict | None = None) -> list:
        from . import driver
        if len(ptrs) != len(self.launch.operands):
            raise ValueError(f"{self.name}: {len(self.launch.operands)} operand pointers needed, got {len(ptrs)}")
        args: list = [None] * len(self.launch.kernel_args)
        for i, v in st.i32.items():
            args[i] = driver.Arg.i32(v)
        for i in st.counters:
            args[i] = driver.Arg.ptr(counter)
        for i in st.workspaces:
            args[i] = driver.Arg.ptr((spaces or {}).get(i, 0))
        for operand, idxs in enumerate(st.by_operand):
            for i in idxs:
                args[i] = st.args_by_ptr[(i, ptrs[operand])] = self._operand_arg(st, i, ptrs[operand])
        return args

    def _realize(self, st: _Resolved, ptrs: Sequence[int], stream: int, counter: int, spaces: dict) -> None:
        """First launch of a launch state: the CUfunction, the resident-block count, the launch config and the
        packed parameters, built once."""
        from . import driver
        r, device = self.launch, st.device
        if self._module is None:
            self._module = driver.Module((self.root / "kernel.cubin").read_bytes())
        func = self._module.function(r.kernel_name, dynamic_smem=r.smem_bytes)  # cached per context
        cluster = r.cluster
        blocks = st.blocks
        if r.auto_blocks:
            key = ("blocks", device)
            if key not in self._cache:
                if cluster[0] > 1:
                    fit = driver.max_active_clusters(func, block=(r.threads, 1, 1), smem=r.smem_bytes,
                                                     cluster=cluster)
                else:
                    fit = driver.device_info()["sm_count"] * r.blocks_per_sm
                self._cache[key] = max(1, fit)
            blocks = max(1, min(blocks // cluster[0], self._cache[key])) * cluster[0]
        params = driver.Params(self._args_of(st, ptrs, counter, spaces))
        st.config = driver.LaunchConfig(func, grid=(blocks, 1, 1), block=(r.threads, 1, 1), smem=r.smem_bytes,
                                        cluster=cluster if cluster[0] > 1 else None)
        st.params, st.ptrs, st.counter, st.spaces = params, list(ptrs), counter, dict(spaces)

    def _first_launch(self, st: _Resolved, ptrs: Sequence[int], stream: int, counter: int, spaces: dict) -> None:
        from . import driver
        try:
            self._realize(st, ptrs, stream, counter, spaces)
        except driver.CudaError as e:
            if driver.is_capturing(stream):
                raise driver.CaptureError(
                    f"{self.name}: the first launch at these sizes loads the kernel ({e}), which failed while stream "
                    f"{stream:#x} captures a CUDA graph; call the kernel once at these sizes before capturing "
                    f"(a warm-up call, as torch.cuda.graph asks)") from e
            raise

    def _counter_ptr(self, device: int, stream: int) -> int:
        """A dynamic persistent grid's tile counter from the device's pool (driver.CounterPool: allocated once,
        outside capture; one per stream for eager launches, one per captured launch)."""
        driver = _driver()
        pool = driver.counter_pool(device, stream=stream, who=self.name)
        if driver.is_capturing(stream):
            return pool.for_graph(stream, self.name)
        return pool.for_stream(stream)

    def _workspaces(self, st: _Resolved, stream: int) -> dict:
        """The launch's zeroed scratch buffers (kernel-arg index -> pointer) for a caller without torch (raw cupy,
        numba, DLPack or numpy arrays, and the pointer launchers): allocated from the device's driver pool and
        zeroed on `stream`, stream-ordered (driver.workspace_alloc: capturable as allocation and memset nodes)."""
        driver = _driver()
        pool = driver.workspace_pool(st.device, stream=stream, who=self.name)
        spaces: dict = {}
        try:
            for i, (nbytes, zero) in st.workspaces.items():
                spaces[i] = driver.workspace_alloc(pool, nbytes, stream, zero)
        except BaseException:
            self._free_workspaces(spaces, stream)
            raise
        return spaces

    def _torch_workspaces(self, st: _Resolved, stream: int, alloc: int) -> tuple[Any, dict]:
        """The launch's scratch buffers from torch's caching allocator, for a torch call: (what keeps or frees them,
        kernel-arg index -> pointer). So torch's memory accounting (torch.cuda.memory_allocated /
        max_memory_allocated) counts them, under torch.cuda.graph capture they come from the graph's private pool
        like any tensor of the captured code (no warm-up call, no pool of ours), and inside the torch custom op they
        are the op's own allocations (no graph input). Each buffer's first `zero` bytes are zeroed by a memset on
        the launch's stream (driver.memset0: a memset node when captured).

        Freed right after the launch is enqueued, which is safe because torch's allocator is stream-ordered: a block
        belongs to the stream it was allocated on, and a later allocation that reuses it on that stream runs after
        our memset and kernel in stream order. So each block is allocated on the launch's stream: with
        torch.empty(nbytes, dtype=torch.uint8) on torch's current stream when the launch runs there (the usual
        case: stream= unset; the tensors, returned in a list, just go), else (stream= another stream) with
        torch.cuda.caching_allocator_alloc on that stream, given back by caching_allocator_delete after the launch
        (`_RAW`). A launch on a stream some other API captures (torch's current stream being another) takes the
        driver's pool instead (None: its allocation nodes belong to the graph; torch knows nothing of that
        capture)."""
        if alloc == TORCH_OTHER and stream != _torch_stream(st.device):
            drv = _DRIVER[0] if _DRIVER else _driver()
            if drv.is_capturing(stream):
                try:
                    return None, self._workspaces(st, stream)
                except drv.CaptureError as e:
                    raise drv.CaptureError(
                        f"{self.name}: stream {stream:#x} is captured by something other than torch (torch's current "
                        f"stream is another one), so the workspace cannot come from torch's allocator, and the "
                        f"driver's workspace pool of cuda:{st.device} does not exist yet ({e}); capture with "
                        f"torch.cuda.graph, or make that stream torch's current one (torch.cuda.stream), or call the "
                        f"kernel once on raw CUDA arrays (cupy, DLPack) before capturing") from e
            memset0 = drv.memset0
            spaces: dict = {}
            try:
                for i, (nbytes, zero) in st.workspaces.items():
                    spaces[i] = p = _torch_raw_alloc(nbytes, st.device, stream)
                    memset0(p, zero, stream)
            except BaseException:
                _torch_raw_free(spaces)
                raise
            return _RAW, spaces
        where = st.where
        if where is None:
            where = st.where = _torch_device(st.device)
        empty = _EMPTY[0] if _EMPTY else _torch_empty()
        u8 = _TORCH_DT.get("u8")
        if u8 is None:
            _torch_dtypes_of((), ())
            u8 = _TORCH_DT["u8"]
        memset0 = (_DRIVER[0] if _DRIVER else _driver()).memset0
        keep: list = []
        spaces = {}
        for i, (nbytes, zero) in st.workspaces.items():
            t = empty(size=(nbytes,), dtype=u8, device=where)
            keep.append(t)
            spaces[i] = p = t.data_ptr()
            memset0(p, zero, stream)
        return keep, spaces

    @staticmethod
    def _free_workspaces(spaces: dict, stream: int) -> None:
        for ptr in spaces.values():
            _driver().workspace_free(ptr, stream)

    def _go(self, st: _Resolved, ptrs: list[int], stream: int, alloc: int = POOL) -> None:
        """Launch: re-pack only the operands whose pointer changed (and the counter and workspaces when they did);
        a kernel with workspaces gets them zeroed before the launch and freed after it, on the launch's stream:
        from torch's caching allocator for a torch call (`alloc` TORCH_CURRENT / TORCH_OTHER: _torch_workspaces),
        from the driver's pool otherwise (POOL: _workspaces)."""
        keep = spaces = None
        if st.workspaces:
            keep, spaces = (None, self._workspaces(st, stream)) if alloc == POOL else \
                self._torch_workspaces(st, stream, alloc)
        try:
            with self._lock:
                counter = self._counter_ptr(st.device, stream) if st.counters else 0
                if st.params is None:
                    self._first_launch(st, ptrs, stream, counter, spaces or {})
                else:
                    params, cur = st.params, st.ptrs
                    if ptrs != cur:
                        seen = st.args_by_ptr
                        for operand, (p, c) in enumerate(zip(ptrs, cur)):
                            if p != c:
                                for i in st.by_operand[operand]:
                                    arg = seen.get((i, p))
                                    if arg is None:
                                        if len(seen) >= ARGS_BY_PTR:
                                            seen.clear()
                                        arg = seen[(i, p)] = self._operand_arg(st, i, p)
                                    params.set(i, arg)
                        st.ptrs = list(ptrs)
                    if counter != st.counter:
                        for i in st.counters:
                            params.set(i, _driver().Arg.ptr(counter))
                        st.counter = counter
                    if spaces is not None and spaces != st.spaces:
                        for i, ptr in spaces.items():
                            if st.spaces.get(i) != ptr:
                                params.set(i, _driver().Arg.ptr(ptr))
                        st.spaces = dict(spaces)
                st.config.launch(st.params, stream)
        finally:   # stream-ordered: after the launch's work (or none, when it failed); see _torch_workspaces
            if spaces:
                _release(keep, spaces, stream)

    def _launcher(self, in_ptrs: Sequence[int], out_ptrs: Sequence[int], stream: Any,
                  device: int = 0, sizes: dict[str, int] | None = None,
                  layout: tuple | None = None, alloc: int = POOL) -> Callable[[], None]:
        from . import driver
        driver.ensure_context(device)
        st = self._resolved(device, sizes or {}, layout=layout)
        ptrs = list(in_ptrs) + list(out_ptrs)
        if len(ptrs) != len(self.launch.operands):
            raise ValueError(f"{self.name}: {len(self.launch.operands)} operand pointers needed, got {len(ptrs)}")
        stream = driver.stream_handle(stream)

        def go() -> None:
            self._go(st, ptrs, stream, alloc)
        return go

    def _arguments(self, ptrs: Sequence[int], device: int = 0, stream: int = 0,
                   sizes: dict[str, int] | None = None) -> list:
        """The kernel's parameters, in the record's order, over the operands' device pointers (inputs then
        outputs): tensor maps encoded here (driver.encode_tiled checks every rule before the driver sees it); a
        workspace argument is a null pointer here (a launch allocates it)."""
        st = self._resolved(device, sizes or {})
        return self._args_of(st, ptrs, self._counter_ptr(device, stream) if st.counters else 0)

    # ------------------------------------------------------------------ the CUDA call
    def _call_cuda(self, args: Sequence[Any], out: Any, stream: Any) -> Any:
        driver = _driver()
        outs = _as_tuple(out)
        if stream is not None:
            try:
                stream = driver.stream_handle(stream)
            except TypeError as e:
                raise ArgumentError(str(e)) from None
        if args and arrays.kind_of(args[0]) == "torch":
            res = self._call_torch(args, outs, stream)
            if res is not _SLOW:
                return res
        return self._call_any(args, outs, stream)

    def _call_torch(self, args: Sequence[Any], out: Any, stream: Any, op: Any = None) -> Any:
        """The fast path of torch CUDA tensors: shape, dtype (tensor.dtype, compared with the kernel's torch dtype
        objects), contiguity, alignment and device read from the tensors themselves in one pass (_torch_tensors),
        the launch state from the shape LRU. `out`: None, a tensor or a sequence of them; `stream`: None (torch's
        current stream) or what `stream=` takes. `op` (a call from __call__): the TorchOp whose routing rule is
        checked in the same pass: plain eager work only (TorchOp.eager_direct: exact torch.Tensors needing no grad,
        not compiling, no dispatch mode). Anything unusual goes the general way (_SLOW, before any allocation or
        launch), which says what is wrong."""
        if op is not None and not (_torch_op.EAGER_DIRECT and op.plain_context()):
            return _SLOW    # first: torch.compile traces nothing of this path (it reads and sets caches)
        dts = self._torch_dtypes
        if dts is None:
            dts = self._torch_dtypes = _torch_dtypes_of(self.inputs, self.outputs)
        n_in = len(dts[0])
        if len(args) != n_in:
            return _SLOW
        tensor = op._tensor if op is not None else None
        if out is None:
            got = _torch_tensors(args, dts[0], tensor)
        else:
            out = tuple(out) if isinstance(out, (tuple, list)) else (out,)   # _as_tuple, inline
            got = _torch_tensors((*args, *out), dts[2], tensor) if len(out) == len(dts[1]) else None
        lay = None
        if got is None:   # a strided operand (or something the general path refuses)
            if not self._strided or (out is not None and len(out) != len(dts[1])):
                return _SLOW
            got = self._torch_strided(args, dts[0], tensor) if out is None else \
                self._torch_strided((*args, *out), dts[2], tensor)
            if got is None:
                return _SLOW
            ptrs, shapes, dev, lay = got
        else:
            ptrs, shapes, dev = got
        if stream is not None and (type(stream) is not int or not 0 <= stream < _STREAM_LIMIT):
            try:
                stream = _driver().stream_handle(stream)
            except TypeError:   # the general path says what is wrong, in its order
                return _SLOW
        if lay is None:
            st = self._torch_state(dev, shapes if out is None else shapes[:n_in])
        else:
            st = self._torch_strided_state(dev, shapes[:n_in], lay)
            if st is None:
                return _SLOW
        if out is None:
            result = _torch_empty_outputs(st, dts[1], ptrs)
        elif tuple(shapes[n_in:]) != st.out_shapes:
            return _SLOW
        else:
            result = out[0] if len(out) == 1 else out
        if stream is None:
            raw = _current_raw_stream
            stream = raw(dev) if raw is not None else _torch_stream(dev)
            alloc = TORCH_CURRENT
        else:
            alloc = TORCH_OTHER
        (_DRIVER[0] if _DRIVER else _driver()).ensure_context(dev)
        self._go(st, ptrs, stream, alloc)
        return result

    def _no_gpu(self, why: str) -> str:
        """What stops this package's CUDA kernel launching (one sentence after the kernel's name)."""
        from .driver import TARGET_CC
        return f"{self.name}: the CUDA backend needs an NVIDIA {TARGET_CC[self.launch.target][1]} GPU: {why}"

    def _torch_state(self, dev: int, shapes: list) -> _Resolved:
        """The launch state of these input shapes (torch.Size objects) on device `dev`: the last call's when they
        are its shapes (compared, not hashed), else from the LRU, else resolved."""
        last = self._last_torch
        if last is not None and last[0] == dev and last[1] == shapes:
            return last[2]
        key = (dev, tuple(shapes))
        st = self._states.get(key)
        if st is None:
            ok, why = _driver().available(self.launch.target)
            if not ok:
                raise RuntimeError(self._no_gpu(why))
            st = self._resolved(dev, self.bind(shapes), key)
        else:
            try:
                self._states.move_to_end(key)
            except KeyError:    # another thread evicted it just now: it stays usable for this call
                pass
        self._last_torch = (dev, shapes, st)
        return st

    def _torch_strided(self, tensors: Sequence[Any], dts: Sequence[Any], tensor: Any) -> tuple | None:
        """_torch_tensors for a call with strided tensors, which the fast path hands here: (pointers, shapes, device,
        layout), a non-contiguous tensor legal only on an operand reached through tensor maps alone (its element
        strides in `layout`, None for a contiguous one); None for anything else (the general path says why)."""
        ok = self.tmap_only
        got = _torch_tensors(tensors, dts, tensor, dense=False)
        if got is None:
            return None
        lay: list = []
        for i, t in enumerate(tensors):
            if t.is_contiguous():
                lay.append(None)
            elif ok[i]:
                lay.append(tuple(t.stride()))
            else:
                return None
        return (*got, tuple(lay))

    def _torch_strided_state(self, dev: int, shapes: list, lay: tuple) -> _Resolved | None:
        """The launch state of these input shapes and this layout (LRU; never the contiguous calls' memo); None when
        TMA cannot address a strided tensor (the general path raises the located error)."""
        key = (dev, tuple(shapes), lay)
        st = self._states.get(key)
        if st is not None:
            try:
                self._states.move_to_end(key)
            except KeyError:    # another thread evicted it just now: it stays usable for this call
                pass
            return st
        ok, why = _driver().available(self.launch.target)
        if not ok:
            raise RuntimeError(self._no_gpu(why))
        try:
            return self._resolved(dev, self.bind(shapes), key, lay)
        except ArgumentError:
            return None

    def _call_any(self, args: Sequence[Any], outs: tuple | None, stream: int | None) -> Any:
        """Every kind of array (numpy copied in and out, device arrays in place); the argument errors."""
        from . import driver
        sizes, lay = self._check(args, outs)
        ok, why = driver.available(self.launch.target)
        if not ok:
            raise RuntimeError(self._no_gpu(why))
        kinds = [arrays.classify(a, o.name) for a, o in zip(args, self.inputs)]
        views = {o.name: arrays.device_view(a, o.name) for a, k, o in zip(args, kinds, self.inputs)
                 if k != "numpy"}
        out_kinds = [arrays.classify(a) for a in outs or ()]
        for a, k, o in zip(outs or (), out_kinds, self.outputs):
            if k != "numpy":
                views[f"out[{o.name}]"] = arrays.device_view(a, o.name)
        device = max(arrays.same_device(views), 0)   # every device array on one GPU, or a clear error
        driver.ensure_context(device)
        like = next((a for a, k in zip(args, kinds) if k != "numpy"), None)
        like_kind = arrays.classify(like) if like is not None else "numpy"
        # workspaces: torch's allocator under torch (on its current stream unless stream= is given), else the pool
        alloc = POOL if like_kind != "torch" else TORCH_CURRENT if stream is None else TORCH_OTHER
        if stream is None:
            stream = _framework_stream(like, like_kind)
        self._refuse_in_capture(kinds, out_kinds, outs is None and like is None, like_kind, stream)
        if like_kind == "jax":
            like.block_until_ready()
        keep: list[Any] = []
        in_ptrs = [self._host_copy(a, keep, device=device) if k == "numpy" else views[o.name].ptr
                   for a, k, o in zip(args, kinds, self.inputs)]
        st = self._resolved(device, sizes, layout=lay)
        host_outs: list[tuple[np.ndarray, Any]] = []
        if outs is None:
            outs_obj, out_ptrs = [], []
            for o, shape in zip(self.outputs, st.out_shapes):
                if like is None:
                    host_arr = np.empty(shape, arrays.DTYPES[o.dtype])
                    out_ptrs.append(self._host_copy(host_arr, keep, host_outs, upload=False, device=device))
                    outs_obj.append(host_arr)
                else:
                    obj, view = arrays.empty_like_kind(like_kind, like, shape, o.dtype)
                    outs_obj.append(obj)
                    out_ptrs.append(view.ptr)
        else:
            outs_obj = list(outs)
            out_ptrs = [self._host_copy(a, keep, host_outs, upload=False, device=device) if k == "numpy"
                        else views[f"out[{o.name}]"].ptr for a, k, o in zip(outs, out_kinds, self.outputs)]
        self._go(st, in_ptrs + out_ptrs, stream, alloc)
        if host_outs or like_kind == "jax":
            driver.synchronize(stream)
        for host_arr, buf in host_outs:
            buf.download(host_arr)
        return outs_obj[0] if len(outs_obj) == 1 else tuple(outs_obj)

    @staticmethod
    def _host_copy(a: np.ndarray, keep: list, host_outs: list | None = None, upload: bool = True,
                   device: int = 0) -> int:
        """A device buffer for a numpy array: uploaded (an input) or downloaded after the launch (an output)."""
        from . import driver
        buf = driver.Buffer(max(1, a.nbytes), device)
        keep.append(buf)
        if upload:
            buf.upload(np.ascontiguousarray(a))
        if host_outs is not None:
            host_outs.append((a, buf))
        return buf.ptr

    def _refuse_in_capture(self, kinds: Sequence[str], out_kinds: Sequence[str], host_result: bool, like_kind: str,
                           stream: int) -> None:
        """numpy arrays (copies, allocations) and jax arrays (waits) cannot be captured: a CaptureError says so
        before any driver call that would break the capture."""
        from . import driver
        host = [o.name for k, o in zip(kinds, self.inputs) if k == "numpy"]
        host += [f"out[{o.name}]" for k, o in zip(out_kinds, self.outputs) if k == "numpy"]
        if host_result:
            host += [f"{o.name} (the output)" for o in self.outputs]
        if not (host or like_kind == "jax"):
            return
        if not driver.is_capturing(stream):
            stream = _framework_capture()
            if stream is None:
                return
        what = f"{host[0]} is a numpy array: copying it" if host else "jax arrays: ordering jax's work with the launch"
        raise driver.CaptureError(
            f"{self.name}: {what} is illegal while stream {stream:#x} captures a CUDA graph (numpy and jax "
            f"arrays are not capturable); pass torch or cupy device arrays to a captured call")

    def pallas_module(self):
        return self._pallas.module()

    def _call_pallas(self, args: Sequence[Any], out: Any, interpret: Any = None) -> Any:
        return self._pallas(args, out, interpret)


def _shown(shape: Sequence[int | str]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _as_tuple(out: Any) -> tuple | None:
    if out is None:
        return None
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _framework_stream(like: Any, kind: str) -> int:
    """The stream the caller's framework is using, so our launch is ordered with its work (jax: the legacy stream,
    with jax's work waited for by the caller of this function)."""
    if kind == "torch":
        return _torch_stream(like.get_device())
    if kind == "cupy":
        import cupy
        return int(cupy.cuda.get_current_stream().ptr)
    return 0


def _framework_capture() -> int | None:
    """The stream torch or cupy is capturing on this thread (their current stream), None when neither is: a numpy
    call launches on the legacy stream, which the driver does not report as capturing while a non-blocking stream
    (torch's, cupy's) captures, yet the copies it needs would break that capture."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing():
        return int(torch.cuda.current_stream().cuda_stream)
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            s = cupy.cuda.get_current_stream()
            if s.is_capturing():
                return int(s.ptr)
        except Exception:   # an old cupy without capture support: nothing is capturing through it
            pass
    return None


_current_raw_stream = None


def _torch_stream(device: int) -> int:
    """torch's current stream on `device` (its raw handle: no Stream object built per call)."""
    global _current_raw_stream
    if _current_raw_stream is None:
        import torch
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        _current_raw_stream = raw if raw is not None else (
            lambda d: int(torch.cuda.current_stream(d).cuda_stream))
    return int(_current_raw_stream(device))


def _torch_tensors(tensors: Sequence[Any], dts: Sequence[Any], tensor: Any, dense: bool = True) -> tuple | None:
    """(pointers, shapes, device) of tensors that need no further check: torch tensors (exactly `tensor` and
    needing no grad when it is given: the op's routing rule), on one CUDA device, of dtype `dts` (torch's dtype
    objects, by identity), C-contiguous (unless not `dense`: Kernel._torch_strided checks the layout) and 16-byte
    aligned; None for anything else. One pass, each attribute read once (the reads are most of the fast path's
    cost)."""
    ptrs: list[int] = []
    shapes: list = []
    keep_ptr, keep_shape = ptrs.append, shapes.append
    dev = -2
    for a, dt in zip(tensors, dts):
        if tensor is not None:
            if type(a) is not tensor or a.requires_grad:
                return None
        elif arrays.kind_of(a) != "torch":
            return None
        if not a.is_cuda or a.dtype is not dt or (dense and not a.is_contiguous()):
            return None
        p = a.data_ptr()
        if p % 16:
            return None
        d = a.get_device()
        if dev != d:
            if dev != -2:
                return None
            dev = d
        keep_ptr(p)
        keep_shape(a.shape)
    return ptrs, shapes, dev


def _release(keep: Any, spaces: dict, stream: int) -> None:
    """Give a launch's workspaces back: to the driver's pool (keep None), to torch's allocator (_RAW), or nothing to
    do (keep: torch's tensors, which go with the launching frame)."""
    if keep is None:
        Kernel._free_workspaces(spaces, stream)
    elif keep is _RAW:
        _torch_raw_free(spaces)


def _torch_raw_alloc(nbytes: int, device: int, stream: int) -> int:
    """`nbytes` from torch's caching allocator on `device`, owned by the raw stream `stream` (torch is imported
    already: the call's tensors are torch's)."""
    return int(sys.modules["torch"].cuda.caching_allocator_alloc(nbytes, device, stream))


def _torch_raw_free(spaces: dict) -> None:
    """Give _torch_raw_alloc's blocks back (stream-ordered on the stream each was allocated on)."""
    delete = sys.modules["torch"].cuda.caching_allocator_delete
    for p in spaces.values():
        delete(p)


def _torch_empty_outputs(st: _Resolved, dts: Sequence[Any], ptrs: list[int]) -> Any:
    """New outputs from torch's allocator on the state's device (a tensor, or a tuple of them); their pointers
    appended to `ptrs`."""
    where = st.where
    if where is None:
        where = st.where = _torch_device(st.device)
    empty = _EMPTY[0] if _EMPTY else _torch_empty()
    # size= rather than a positional tuple: torch's argument parser takes ~0.5 us less (CPU, torch 2.14)
    if len(dts) == 1:
        result = empty(size=st.out_shapes[0], dtype=dts[0], device=where)
        ptrs.append(result.data_ptr())
        return result
    results = tuple(empty(size=shape, dtype=dt, device=where) for shape, dt in zip(st.out_shapes, dts))
    ptrs.extend(t.data_ptr() for t in results)
    return results


_TORCH_DT: dict[str, Any] = {}     # our dtype name (and "u8": a workspace's bytes) -> torch's dtype object
_TORCH_DEVICES: dict[int, Any] = {}


def _torch_device(ordinal: int) -> Any:
    """torch.device("cuda", ordinal), made once: torch.empty(device=<int>) costs about 8 us more per call than a
    device object (measured on the H200 host, 2026-12-04: map 64k, 24.7 against 16.4 us with out=)."""
    d = _TORCH_DEVICES.get(ordinal)
    if d is None:
        import torch
        d = _TORCH_DEVICES[ordinal] = torch.device("cuda", ordinal)
    return d


def _torch_dtypes_of(inputs: Sequence[Operand], outputs: Sequence[Operand]) -> tuple:
    """torch's dtype objects for the operands' dtypes: (inputs, outputs, both). The fast path compares tensor.dtype
    with them by identity: never the array-interface typestr, which older torch reports as '<f2' for bf16."""
    if not _TORCH_DT:
        import torch
        _TORCH_DT.update({name: getattr(torch, attr) for name, attr in arrays._TORCH.items() if hasattr(torch, attr)})
        _TORCH_DT["u8"] = torch.uint8   # a workspace's bytes (Kernel._torch_workspaces)
    ins, outs = (tuple(_TORCH_DT.get(o.dtype) for o in operands) for operands in (inputs, outputs))
    return ins, outs, ins + outs


_EMPTY = []


def _torch_empty():
    if not _EMPTY:
        import torch
        _EMPTY.append(torch.empty)
    return _EMPTY[0]


_DRIVER: list = []


def _driver():
    """schedgen.runtime.driver, imported on first use (it needs cuda.bindings), then one list lookup."""
    if not _DRIVER:
        from . import driver
        _DRIVER.append(driver)
    return _DRIVER[0]


def load_package(root: str | Path, torch_op: bool = False) -> Kernel:
    """The kernel of a package folder; with torch_op (what a package's __init__ asks for), registered as a torch
    custom op once the program uses torch (schedgen/runtime/torch_op.py; importing the package never imports it)."""
    kernel = Kernel(Path(root))
    kernel.backward = _autograd.load(kernel, kernel.root, torch_op, load_package)   # before attach: the op's autograd reads it
    if torch_op:
        from . import torch_op as ops
        kernel.torch_op_asked = True
        ops.attach(kernel)
    return kernel
