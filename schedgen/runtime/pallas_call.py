"""The Pallas call path of a built package: jax arrays and tracers, numpy and torch tensors through the generated
Pallas Mosaic GPU module (pallas_kernel.py), and the backend choice of a call.

The generated module's contract (docs/architecture.md): `make(sizes=None, interpret=None, outputs_as_refs=False)`
builds the plgpu kernel for a call's dynamic sizes ({} when there are none; a module rendered before dynamic sizes
takes no `sizes`), `sizes_of(inputs)`. This module builds each kernel once per (sizes, interpret, mode) and keeps
it, jitted, so that an eager call with shapes seen before neither retraces nor recompiles, and a call inside
`jax.jit` (tracers in, tracers out) adds one cached kernel to the caller's trace. Modes:

- "call": inputs in, fresh outputs out, wrapped in a `jax.custom_vjp`: a package with a backward pass runs its steps'
  Pallas kernels there (runtime/autograd.py); one without says to add a `backward:` section (the forward is
  untouched);
- "into": inputs and the current contents of mutable outputs in (donated), the outputs as written out: elements a
  kernel does not write keep their values, as `out=` promises;
- "torch": the "call" kernel through `plgpu.as_torch_kernel` (torch CUDA tensors in and out, no jax arrays),
  ordered after the caller's current torch stream (as_torch_kernel itself launches on the default stream).

`out=` (one meaning on both backends): mutable arrays (numpy, torch, cupy, CUDA Array Interface / DLPack objects)
written in place; a jax array (or tracer) is an ArgumentError, since jax arrays are immutable and writing into an
XLA buffer behind XLA's back breaks every other holder of that buffer.
"""
from __future__ import annotations

import importlib.util
import inspect
import sys
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from . import arrays
from .arrays import ArgumentError

if TYPE_CHECKING:
    from .kernel import Kernel

JAX_KINDS = ("jax", "tracer")
_PALLAS_KINDS = ("numpy", "jax", "tracer", "torch")


def kind_of(obj: Any, name: str) -> str:
    """arrays.classify, with jax tracers (inside jax.jit / make_jaxpr / grad) told apart from concrete jax arrays."""
    kind = arrays.classify(obj, name)
    if kind == "jax" and _is_tracer(obj):
        return "tracer"
    return kind


def _is_tracer(obj: Any) -> bool:
    import jax
    return isinstance(obj, jax.core.Tracer)


def choose_backend(kernel: Kernel, args: Sequence[Any], out: Any, backend: str | None, stream: Any = None,
                   interpret: Any = None) -> str:
    """The backend a call runs on. None: "pallas" when an argument is a jax array or tracer or `interpret` is given
    (and pallas was built), else "cuda"; an explicit backend must have been built. Arguments the chosen backend
    cannot take (a tracer or interpret= on the CUDA backend, a jax array as out= anywhere, stream= on the Pallas
    backend) are ArgumentErrors here, before anything runs."""
    built = kernel.launch.backends
    if backend is not None and backend not in built:
        raise ValueError(f"{kernel.name}: backend '{backend}' was not built; built: {', '.join(built)}")
    kernel._check_count(args)
    kinds = [kind_of(a, o.name) for a, o in zip(args, kernel.inputs)]
    _reject_jax_out(kernel, out)
    if backend is None:
        wants_pallas = interpret is not None or any(k in JAX_KINDS for k in kinds)
        backend = "pallas" if wants_pallas and "pallas" in built else "cuda"
    if backend == "pallas" and stream is not None:
        raise ArgumentError("stream: is for backend=\"cuda\"; the pallas backend runs on jax's own stream (jax and "
                            "numpy arrays) or after torch's current stream (torch tensors)")
    if backend == "cuda" and interpret is not None:
        raise ArgumentError(f"interpret: runs the Pallas kernel in jax's Mosaic GPU interpreter; the CUDA backend has "
                            f"none (built: {', '.join(built)})")
    if backend == "cuda":
        traced = [o.name for k, o in zip(kinds, kernel.inputs) if k == "tracer"]
        if traced:
            hint = ('use backend="pallas" (the default for jax arrays)' if "pallas" in built else
                    "this package was built without the pallas backend: rebuild it with pallas, or call it outside "
                    "jax transformations")
            raise ArgumentError(
                f"{traced[0]}: is a jax tracer (a call inside jax.jit, vmap, grad or make_jaxpr); the CUDA backend "
                f"runs its cubin eagerly and cannot be traced by jax in this release (no jax.ffi binding yet): {hint}")
    return backend


def interpret_params(interpret: Any) -> Any:
    """`interpret=` as the generated module takes it: None (compile for the GPU) or a plgpu.InterpretGPUParams.
    True is jax's Mosaic GPU interpreter with its default parameters; False is None."""
    if interpret is None or interpret is False:
        return None
    from jax.experimental.pallas import mosaic_gpu as plgpu
    if interpret is True:
        return plgpu.InterpretGPUParams()
    if isinstance(interpret, plgpu.InterpretGPUParams):
        return interpret
    raise ArgumentError(f"interpret: give True (run the Pallas kernel in jax's Mosaic GPU interpreter, on the CPU "
                        f"too), a plgpu.InterpretGPUParams (the interpreter with those parameters), or None / False "
                        f"(compile for the GPU); got {type(interpret).__name__} {interpret!r}")


# jax 0.11.2's error for a Pallas kernel compiled for the GPU on its CPU backend (jax/_src/pallas/pallas_call.py);
# tests/runtime/test_interpret_true.py pins it, so a jax that words it otherwise shows
JAX_CPU_ONLY = "Only interpret mode is supported on CPU backend"


def cpu_only_error(kernel: Kernel, exc: BaseException) -> ArgumentError | None:
    """jax's error from deep inside its lowering when a kernel compiled for the GPU meets a CPU-only jax, as one
    sentence saying what to do (None for any other error)."""
    if not isinstance(exc, ValueError) or JAX_CPU_ONLY not in str(exc):
        return None
    return ArgumentError(f"{kernel.name}: the Pallas backend compiles for an NVIDIA GPU and jax here has only its CPU "
                         f"backend: pass interpret=True to run the kernel in jax's Mosaic GPU interpreter on the CPU, "
                         f"or run it on a machine with a GPU")


def _reject_jax_out(kernel: Kernel, out: Any) -> None:
    for a, o in zip(_as_tuple(out) or (), kernel.outputs):
        if not isinstance(a, np.ndarray) and arrays.classify(a, f"out[{o.name}]") == "jax":
            raise ArgumentError(f"out[{o.name}]: is a jax array; jax arrays are immutable: use the return value "
                                f"(out= takes numpy, torch or cupy arrays, written in place)")


def _as_tuple(out: Any) -> tuple | None:
    if out is None:
        return None
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


class PallasCall:
    """The Pallas backend of one Kernel: the generated module, loaded once, and its kernels per sizes."""

    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self._module = None
        self._fns: dict[tuple, Callable] = {}
        self._takes_sizes: bool | None = None

    # ------------------------------------------------------------------ the generated module
    def module(self):
        if self._module is None:
            k = self.kernel
            name = f"_schedgen_pallas_{k.name}_{id(k)}"
            spec = importlib.util.spec_from_file_location(name, k.root / "pallas_kernel.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            self._module = module
        return self._module

    def _make(self, sizes: dict[str, int], interpret: Any, outputs_as_refs: bool):
        mod = self.module()
        if self._takes_sizes is None:
            self._takes_sizes = "sizes" in inspect.signature(mod.make).parameters
        if self._takes_sizes:
            return mod.make(sizes=dict(sizes), interpret=interpret, outputs_as_refs=outputs_as_refs)
        if sizes:
            raise RuntimeError(f"{self.kernel.name}: its pallas_kernel.py predates dynamic sizes (make() takes no "
                               f"sizes) but launch.json declares {', '.join(sizes)}: rebuild the package")
        return mod.make(interpret=interpret, outputs_as_refs=outputs_as_refs)

    def function(self, sizes: dict[str, int], interpret: Any = None, mode: str = "call") -> Callable:
        """The jitted kernel for these sizes, built on first use and kept (one trace and one compile per shape)."""
        key = (tuple(sorted(sizes.items())), interpret, mode)
        fn = self._fns.get(key)
        if fn is None:
            fn = self._fns[key] = self._build(sizes, interpret, mode)
        return fn

    def _build(self, sizes: dict[str, int], interpret: Any, mode: str) -> Callable:
        import jax
        if mode == "into":
            kern = self._make(sizes, interpret, outputs_as_refs=True)

            def into(ins, outs):
                refs = [jax.new_ref(o) for o in outs]
                kern(*ins, *refs)
                return tuple(jax.freeze(r) for r in refs)
            return jax.jit(into, donate_argnums=1)
        kern = self._make(sizes, interpret, outputs_as_refs=False)
        if mode == "torch":
            if getattr(self.module(), "WRAPS_KERNEL", False):
                raise ArgumentError(f"{self.kernel.inputs[0].name}: {self.kernel.name}'s Pallas kernel sits in a jax "
                                    f"function that reduces its [1] outputs (op.reduction), which "
                                    f"plgpu.as_torch_kernel cannot take: call it with torch tensors on "
                                    f"backend=\"cuda\", or with jax arrays on the Pallas backend")
            from jax.experimental.pallas import mosaic_gpu as plgpu
            return plgpu.as_torch_kernel(kern)   # compiles per input shapes itself; we keep it alive per sizes
        if self.kernel.backward is not None:
            return jax.jit(_with_backward(kern, self.kernel.backward, interpret))
        return jax.jit(_no_backward(kern, self.kernel.name))

    # ------------------------------------------------------------------ calling
    def check(self, args: Sequence[Any], outs: Sequence[Any] | None) -> tuple[dict[str, int], list[str]]:
        """Shapes and dtypes of every argument (a jax array's or tracer's layout is XLA's business, so only numpy
        arguments get arrays.check's layout checks); returns the call's sizes and the inputs' kinds."""
        k = self.kernel
        kinds = [kind_of(a, o.name) for a, o in zip(args, k.inputs)]
        bad = [(o.name, kd) for kd, o in zip(kinds, k.inputs) if kd not in _PALLAS_KINDS]
        if bad:
            raise ArgumentError(f"{bad[0][0]}: the pallas backend takes jax, numpy or torch arrays, got a {bad[0][1]} "
                                f"array; use backend=\"cuda\" for it")
        if "torch" in kinds and any(kd != "torch" for kd in kinds):
            other = next(o.name for kd, o in zip(kinds, k.inputs) if kd != "torch")
            raise ArgumentError(f"{other}: the pallas backend takes torch tensors only with torch tensors (all "
                                f"inputs torch, or none)")
        metas = [arrays.describe(a, o.name) for a, o in zip(args, k.inputs)]
        sizes = k.bind([m[1] for m in metas])
        for a, m, o in zip(args, metas, k.inputs):
            if m[0] == "numpy":
                arrays.check(a, o.name, shape=k.shape_of(o, sizes), dtype=o.dtype)
            else:
                _check_meta(m, o.name, k.shape_of(o, sizes), o.dtype)
        if outs is not None:
            if "tracer" in kinds:
                raise ArgumentError(f"out: {k.name} is being traced by jax (jax.jit, vmap, grad or make_jaxpr), "
                                    f"where nothing is written in place: use the return value")
            if len(outs) != len(k.outputs):
                raise ArgumentError(f"out: {k.name} has {len(k.outputs)} outputs, got {len(outs)} arrays")
            for a, o in zip(outs, k.outputs):
                name = f"out[{o.name}]"
                kd = kind_of(a, name)
                if kd not in ("numpy", "torch") or (kd == "torch") != (kinds[0] == "torch"):
                    want = "torch tensors" if kinds[0] == "torch" else "numpy arrays"
                    raise ArgumentError(f"{name}: the pallas backend writes out= into {want} here (the inputs' "
                                        f"kind), got a {kd} array")
                if kd == "numpy":
                    arrays.check(a, name, shape=k.shape_of(o, sizes), dtype=o.dtype, writable=True)
                else:
                    _check_meta(arrays.describe(a, name), name, k.shape_of(o, sizes), o.dtype)
        return sizes, kinds

    def __call__(self, args: Sequence[Any], out: Any, interpret: Any = None) -> Any:
        outs = _as_tuple(out)
        sizes, kinds = self.check(args, outs)
        if kinds and kinds[0] == "torch":
            res = self._call_torch(args, outs, sizes, interpret)
        else:
            try:
                res = self._call_jax(args, outs, sizes, kinds, interpret)
            except ValueError as exc:
                better = cpu_only_error(self.kernel, exc)
                if better is None:
                    raise
                raise better from None
        return res[0] if len(res) == 1 else tuple(res)

    def run_into(self, inputs: Sequence[Any], outputs: Sequence[Any], interpret: Any = None) -> tuple:
        """The generated module's run_into (outputs' contents in, the written outputs out, as jax arrays), with its
        jitted kernel kept per sizes: what verify and benchmarks can call repeatedly without recompiling."""
        import jax.numpy as jnp
        k = self.kernel
        sizes = k.bind([tuple(a.shape) for a in inputs])
        return self.function(sizes, interpret, "into")(tuple(jnp.asarray(a) for a in inputs),
                                                       tuple(jnp.asarray(o) for o in outputs))

    def _call_jax(self, args, outs, sizes, kinds, interpret) -> tuple:
        import jax.numpy as jnp
        ins = tuple(a if kd in JAX_KINDS else jnp.asarray(a) for a, kd in zip(args, kinds))
        if outs is not None:   # numpy arrays (check): their contents go in, the written results come back
            res = self.function(sizes, interpret, "into")(ins, tuple(jnp.asarray(o) for o in outs))
            for host, r in zip(outs, res):
                np.copyto(host, np.asarray(r))
            return tuple(outs)
        res = self.function(sizes, interpret, "call")(*ins)
        res = res if isinstance(res, tuple) else (res,)
        if all(kd == "numpy" for kd in kinds):
            res = tuple(np.asarray(r) for r in res)
        return res

    def _call_torch(self, args, outs, sizes, interpret) -> tuple:
        if interpret is not None:
            raise ArgumentError(f"{self.kernel.inputs[0].name}: interpret mode runs on jax arrays; pass numpy or "
                                f"jax arrays (torch tensors go through plgpu.as_torch_kernel, compiled for the GPU)")
        for a, o in zip(args, self.kernel.inputs):
            if a.device.type != "cuda":
                raise ArgumentError(f"{o.name}: the pallas backend takes torch tensors on a CUDA device, got one on "
                                    f"{a.device}; move it first: {o.name}.cuda()")
        res = _on_current_torch_stream(self.function(sizes, None, "torch"), args)
        res = res if isinstance(res, tuple) else (res,)
        if outs is None:
            return tuple(res)
        for dst, r in zip(outs, res):
            dst.copy_(r)
        return tuple(outs)


def _on_current_torch_stream(fn: Callable, args: Sequence[Any]) -> Any:
    """Run an as_torch_kernel function on the inputs' device, ordered with the caller's current torch stream.

    jax 0.11.2's as_torch_kernel launches on torch.cuda.default_stream() of the current device, whatever stream the
    caller is on: the default stream waits for the current one first, and the current one for the launch after
    (outputs are allocated on the current stream, inputs are the caller's; both are used on it only after)."""
    import torch
    device = args[0].device
    with torch.cuda.device(device):
        current, default = torch.cuda.current_stream(device), torch.cuda.default_stream(device)
        if current == default:
            return fn(*args)
        default.wait_stream(current)
        res = fn(*args)
        current.wait_stream(default)
        return res


def _check_meta(meta: tuple[str, tuple[int, ...], str], name: str, shape: tuple[int, ...], dtype: str) -> None:
    kind, got_shape, got_dt = meta
    if dtype == "i64" and got_dt == "i32" and kind in ("jax", "tracer") and not _x64():
        dtype = "i32"        # jax without jax_enable_x64 has no int64 arrays: its int32 ones are the class indices
    arrays.check_meta("jax" if kind == "tracer" else kind, name, got_shape, got_dt, shape, dtype)


def _x64() -> bool:
    import jax
    return bool(jax.config.jax_enable_x64)


def _with_backward(kern: Callable, backward: Any, interpret: Any) -> Callable:
    """`kern` (every output of the forward, the saved ones included) as a `jax.custom_vjp` whose backward runs the
    package's backward steps (runtime/autograd.py): the residuals are the inputs and the forward's outputs."""
    import jax

    @jax.custom_vjp
    def fn(*ins):
        return kern(*ins)

    def fwd(*ins):
        outs = kern(*ins)
        return outs, (ins, outs if isinstance(outs, tuple) else (outs,))

    def bwd(res, cts):
        ins, outs = res
        return backward.jax_backward(ins, outs, cts if isinstance(cts, tuple) else (cts,), interpret)

    fn.defvjp(fwd, bwd)
    return fn


def _no_backward(kern: Callable, name: str) -> Callable:
    """`kern` with a backward pass that says it does not exist yet (jax.grad / jax.vjp raise at the backward)."""
    import jax

    @jax.custom_vjp
    def fn(*ins):
        return kern(*ins)

    def fwd(*ins):
        return kern(*ins), None

    def bwd(_res, _cotangents):
        raise NotImplementedError(
            f"{name}: this package was built without a backward pass, so jax.grad / jax.vjp cannot go through it: "
            f"add a `backward:` section to its spec (e.g. `backward: {{}}`, or `backward: {{wrt: [...]}}` for the "
            f"inputs that need gradients) and rebuild, or stop the gradient with jax.lax.stop_gradient on its "
            f"inputs")

    fn.defvjp(fwd, bwd)
    return fn
