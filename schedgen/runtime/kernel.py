"""Run a built kernel package: load its cubin lazily, build tensor maps, launch; or run its Pallas module.

A package folder holds launch.json, plan.json, manifest.json, kernel.cubin and pallas_kernel.py (see
build.package). This module reads only launch.json (the launch record, schedgen/plan/launch.py: validated on load),
the cubin and the Pallas module: plan.json is for people and tools, and a planner may reshape it freely.
`load_package(folder)` returns a callable `Kernel`; the package's __init__ wraps it in a function with the
kernel's own name and arguments.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..plan import dims
from ..plan import launch as launch_record
from ..plan.launch import COUNTER_BYTES, LaunchRecord, Operand
from . import arrays, pallas_call
from .arrays import ArgumentError


class Kernel:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.launch: LaunchRecord = launch_record.load(self.root)   # the only description of the kernel read
        self.name: str = self.launch.name
        self._module = None
        self._pallas = pallas_call.PallasCall(self)   # the Pallas call path, its kernels cached per sizes
        self._cache: dict = {}
        self.torch_op = None   # schedgen/runtime/torch_op.py: the custom ops torch tensors go through (packages)

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
    def __call__(self, *args: Any, out: Any = None, stream: int | None = None, backend: str | None = None,
                 interpret: Any = None) -> Any:
        """backend None: "pallas" for jax arrays, tracers and interpret=, else "cuda" (pallas_call.choose_backend)."""
        if self.torch_op is not None and backend in (None, "cuda") and stream is None and interpret is None:
            # torch tensors (real, meta or fake, traced by torch.compile) go through the custom op, whose real
            # implementation comes back to _call_cuda; anything else returns NotImplemented
            routed = self.torch_op.dispatch(args, out)
            if routed is not NotImplemented:
                return routed
        backend = pallas_call.choose_backend(self, args, out, backend, stream, interpret)
        if backend == "pallas":
            return self._call_pallas(args, out, interpret)
        return self._call_cuda(args, out, stream)

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
        self._check_count(args)
        sizes = self.bind([arrays.describe(a, o.name)[1] for a, o in zip(args, self.inputs)])
        for a, o in zip(args, self.inputs):
            arrays.check(a, o.name, shape=self.shape_of(o, sizes), dtype=o.dtype)
        if outs is not None:
            if len(outs) != len(self.outputs):
                raise ArgumentError(f"out: {self.name} has {len(self.outputs)} outputs, got {len(outs)} arrays")
            for a, o in zip(outs, self.outputs):
                arrays.check(a, f"out[{o.name}]", shape=self.shape_of(o, sizes), dtype=o.dtype)
        return sizes

    def prepare(self, args: Sequence[Any], outs: Sequence[Any], stream: int = 0) -> Callable[[], None]:
        """A zero-argument launcher over fixed device arrays (tensor maps encoded once): for benchmarks."""
        ins_v = [arrays.device_view(a, o.name) for a, o in zip(args, self.inputs)]
        outs_v = [arrays.device_view(a, o.name) for a, o in zip(outs, self.outputs)]
        sizes = self.bind([v.shape for v in ins_v])
        return self._launcher([v.ptr for v in ins_v], [v.ptr for v in outs_v], stream, sizes=sizes)

    def _launcher(self, in_ptrs: Sequence[int], out_ptrs: Sequence[int], stream: int,
                  device: int = 0, sizes: dict[str, int] | None = None) -> Callable[[], None]:
        from . import driver
        r = self.launch
        driver.ensure_context(device)
        if self._module is None:
            self._module = driver.Module((self.root / "kernel.cubin").read_bytes())
        func = self._module.function(r.kernel_name, dynamic_smem=r.smem_bytes)  # cached per context
        sizes = sizes or {}
        args = self._arguments(list(in_ptrs) + list(out_ptrs), device, stream, sizes)
        cluster = r.cluster
        blocks = dims.evaluate(r.num_blocks, sizes)
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
        grid, block, smem = (blocks, 1, 1), (r.threads, 1, 1), r.smem_bytes
        launch_cluster = cluster if cluster[0] > 1 else None

        def go() -> None:
            driver.launch(func, grid=grid, block=block, smem=smem, args=args, stream=stream, cluster=launch_cluster)
        return go

    def _arguments(self, ptrs: Sequence[int], device: int = 0, stream: int = 0,
                   sizes: dict[str, int] | None = None) -> list:
        """The kernel's parameters, in the record's order, over the operands' device pointers (inputs then
        outputs): tensor maps encoded here (driver.encode_tiled checks every rule before the driver sees it)."""
        from . import driver
        if len(ptrs) != len(self.launch.operands):
            raise ValueError(f"{self.name}: {len(self.launch.operands)} operand pointers needed, got {len(ptrs)}")
        sizes = sizes or {}
        args = []
        for a in self.launch.kernel_args:
            if a.kind == "i32":
                args.append(driver.Arg.i32(dims.evaluate(a.value, sizes)))
            elif a.kind == "ptr":
                args.append(driver.Arg.ptr(ptrs[a.operand]))
            elif a.kind == "counter":
                args.append(driver.Arg.ptr(self._counter(device, stream)))
            elif a.kind == "tmap":
                args.append(driver.Arg.tensor_map(driver.encode_tiled(
                    ptrs[a.operand], a.dtype, [dims.evaluate(d, sizes) for d in a.shape],
                    [dims.evaluate(d, sizes) for d in a.strides], a.box, swizzle=a.swizzle, oob_nan=a.oob_nan)))
            else:
                raise ValueError(f"{self.name}: a {a.kind} kernel argument is filled by the multi-device host only")
        return args

    def _counter(self, device: int, stream: int) -> int:
        """The tile counter of a dynamic persistent grid: zeroed once, zeroed again by each launch's last CTA, and
        one per stream, since launches on one stream run in order and launches on two would share the claims."""
        from . import driver
        key = ("counter", device, stream)
        if key not in self._cache:
            buf = driver.Buffer(COUNTER_BYTES)
            buf.upload(np.zeros(COUNTER_BYTES // 4, np.uint32))
            self._cache[key] = buf
        return self._cache[key].ptr

    def _call_cuda(self, args: Sequence[Any], out: Any, stream: int | None) -> Any:
        from . import driver
        outs = _as_tuple(out)
        sizes = self.check_args(args, outs)
        ok, why = driver.available()
        if not ok:
            raise RuntimeError(f"{self.name}: the CUDA backend needs an NVIDIA Hopper GPU: {why}")
        kinds = [arrays.classify(a, o.name) for a, o in zip(args, self.inputs)]
        views = {o.name: arrays.device_view(a, o.name) for a, k, o in zip(args, kinds, self.inputs)
                 if k != "numpy"}
        for a, o in zip(outs or (), self.outputs):
            if arrays.classify(a) != "numpy":
                views[f"out[{o.name}]"] = arrays.device_view(a, o.name)
        device = arrays.same_device(views)   # every device array on one GPU, or a clear error
        driver.ensure_context(max(device, 0))
        like = next((a for a, k in zip(args, kinds) if k != "numpy"), None)
        like_kind = arrays.classify(like) if like is not None else "numpy"
        keep: list[Any] = []
        in_ptrs = []
        for a, k, o in zip(args, kinds, self.inputs):
            if k == "numpy":
                buf = driver.Buffer(max(1, a.nbytes))
                buf.upload(np.ascontiguousarray(a))
                keep.append(buf)
                in_ptrs.append(buf.ptr)
            else:
                in_ptrs.append(views[o.name].ptr)
        if outs is None:
            outs_obj, out_ptrs, host_outs = [], [], []
            for o, shape in zip(self.outputs, self.output_shapes(sizes)):
                if like is None:
                    buf = driver.Buffer(max(1, math.prod(shape) * o.itemsize))
                    keep.append(buf)
                    host = np.empty(shape, arrays.DTYPES[o.dtype])
                    host_outs.append((host, buf))
                    outs_obj.append(host)
                    out_ptrs.append(buf.ptr)
                else:
                    obj, view = arrays.empty_like_kind(like_kind, like, shape, o.dtype)
                    outs_obj.append(obj)
                    out_ptrs.append(view.ptr)
        else:
            outs_obj, out_ptrs, host_outs = list(outs), [], []
            for a, o in zip(outs, self.outputs):
                if arrays.classify(a) == "numpy":
                    buf = driver.Buffer(max(1, a.nbytes))
                    keep.append(buf)
                    host_outs.append((a, buf))
                    out_ptrs.append(buf.ptr)
                else:
                    out_ptrs.append(arrays.device_view(a, o.name).ptr)
        if stream is None:
            stream = _framework_stream(like, like_kind)
        self._launcher(in_ptrs, out_ptrs, stream, max(device, 0), sizes)()
        if host_outs or like_kind == "jax":
            driver.synchronize(stream)
        for host, buf in host_outs:
            buf.download(host)
        return outs_obj[0] if len(outs_obj) == 1 else tuple(outs_obj)

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
    """The stream the caller's framework is using, so our launch is ordered with its work."""
    if kind == "torch":
        import torch
        return int(torch.cuda.current_stream(like.device).cuda_stream)
    if kind == "cupy":
        import cupy
        return int(cupy.cuda.get_current_stream().ptr)
    if kind == "jax":
        like.block_until_ready()
    return 0


def load_package(root: str | Path, torch_op: bool = False) -> Kernel:
    """The kernel of a package folder; with torch_op (what a package's __init__ asks for), registered as a torch
    custom op once the program uses torch (schedgen/runtime/torch_op.py; importing the package never imports it)."""
    kernel = Kernel(Path(root))
    if torch_op:
        from . import torch_op as ops
        ops.attach(kernel)
    return kernel
