"""A built kernel as a torch custom op: torch.compile traces it, fake and meta tensors flow through it.

`attach(kernel)` (what every generated package's `load_package(root, torch_op=True)` does) registers the kernel's
ops when torch is in use: at once when torch is already imported, else right after the program imports torch (a
post-import hook on `import torch`), so importing a package never imports torch (a numpy or jax program does not pay
for it) and the op exists before any torch.compile trace could need it. A failure to register is a warning, and the
package then takes the direct CUDA path for torch tensors. `register(kernel)` defines two ops in the `schedgen` namespace with `torch.library.custom_op`:

- `torch.ops.schedgen.<op>(x, ...) -> Tensor | (Tensor, ...)`: the functional call; a multi-output kernel returns a
  tuple.
- `torch.ops.schedgen.<op>_out(x, ..., out_o, ...) -> ()`: the `out=` call, mutating its output tensors
  (`mutates_args`), so it keeps its meaning inside torch.compile (functionalization sees the writes).

Both have a fake implementation derived from the launch record alone (schedgen/plan/launch.py): it checks what
`Kernel.bind` and the argument checks would (rank, fixed dimensions, dtype, layout, one device, each dynamic size's
range and divisibility, a size bound twice agreeing; layout: C-contiguous, or a strided view where the kernel reads
the operand through tensor maps only, by the rules of runtime/layout.py at the traced values) and makes the outputs with `torch.empty` on the inputs' device:
a dynamic dimension of an output is the (symbolic) dimension of the input that binds that size. A concrete value
that breaks a rule raises the same `ArgumentError` as an eager call; a symbolic one becomes `torch._check`s, so one
trace serves every legal size (no recompilation per size) and an illegal size fails when the graph runs. Nothing on
that path touches device memory: meta and fake tensors never reach the GPU. The real implementation is the
package's CUDA path (`Kernel._call_cuda`) on the real tensors, on the caller's current stream.

The package function routes torch tensors through these ops (`Kernel.__call__`'s hook, `dispatch` below) when
backend="cuda" and `stream` is None: under torch.compile, for meta and fake tensors, inside any torch dispatch mode
and for tensors that require grad. A plain eager call on real CUDA tensors takes the CUDA path directly
(`EAGER_DIRECT`: the op's dispatch would add tens of microseconds of host time and change nothing else; set it
False to send those through the op too). A call with an explicit `stream=` is a plain launch on that stream (eager
only: under torch.compile leave `stream` unset and use `torch.cuda.stream(...)` to pick the stream).

Autograd (issue 19): a package with a backward pass (backward.json) gets `torch.library.register_autograd` on its
functional op when it is registered (runtime/autograd.py: the backward runs the steps through their own ops); a
call that autograd would record on a package without one is an ArgumentError saying to add a `backward:` section.

Op names: `<kernel name>_<digest>`, where digest is the first 10 hex digits of the SHA-256 of the package's
launch.json and kernel.cubin (and backward.json, where there is one: its autograd formula is part of the op). Two packages of one kernel name but different content (two builds of a spec with
other sizes or schedules) load side by side in one process as two ops; loading the same content twice (a copy of
a package, a re-import) reuses the op already registered, which then runs the kernel loaded last. `op_name` gives the
name; `kernel.torch_op.op` / `.out_op` are the OpOverloads.

No op for a package without the CUDA backend (its real implementation would have nothing to run), and none for the
multi-device (collective) family: its one call is a launch on every GPU of the ring at once, over per-device
shards and peer buffers (schedgen/runtime/multidevice.py), which one op on one device's tensors cannot express;
torch programs drive it per rank through `RankSession` and torch.distributed instead.
"""
from __future__ import annotations

import hashlib
import importlib.abc
import importlib.util
import sys
import threading
import warnings
import weakref
from typing import Any, Sequence

from ..plan.launch import FILE_NAME as LAUNCH_FILE
from ..plan.launch import LaunchRecord, Operand
from . import layout as _layout
from .arrays import ArgumentError, dtype_name

NAMESPACE = "schedgen"
DIGEST_CHARS = 10
_TORCH_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "f8e4m3": "float8_e4m3fn",
                 "f8e5m2": "float8_e5m2", "i32": "int32", "i64": "int64"}
_REGISTERED: dict[str, "TorchOp"] = {}   # op name -> its registration (one per process and content)
# Plain eager calls on real CUDA tensors (no compile, no dispatch mode, no autograd) skip the op: its dispatch costs
# tens of microseconds of host time per call and changes nothing there (same checks, same launch, same stream).
EAGER_DIRECT = True


def op_name(kernel: Any) -> str:
    """The op name of a loaded kernel: its name and a digest of the files its call runs."""
    h = hashlib.sha256()
    for file in getattr(kernel, "op_files", (LAUNCH_FILE, "kernel.cubin")):   # a bucketed package: every variant's
        path = kernel.root / file
        h.update(file.encode() + b"\0")
        h.update(path.read_bytes() if path.exists() else b"")
    backward = kernel.root / "backward.json"   # its autograd formula is part of the op (packages with a backward)
    if backward.exists():
        h.update(b"backward.json\0" + backward.read_bytes())
    return f"{kernel.name}_{h.hexdigest()[:DIGEST_CHARS]}"


_PENDING: list[weakref.ref] = []            # kernels loaded before torch was imported
_LOCK = threading.Lock()                    # guards _PENDING and the import hook
_REGISTER_LOCK = threading.Lock()           # guards _REGISTERED: two threads loading one package register it once


def attach(kernel: Any) -> None:
    """Give `kernel.torch_op` its ops now (torch imported) or when torch is imported (see the module docstring)."""
    if "torch" in sys.modules:
        _attach_now(kernel)
        return
    with _LOCK:
        _PENDING.append(weakref.ref(kernel))
        if not any(isinstance(f, _TorchImportHook) for f in sys.meta_path):
            sys.meta_path.insert(0, _TorchImportHook())


def _attach_now(kernel: Any) -> None:
    try:
        kernel.torch_op = register(kernel)
        if kernel.torch_op is not None and getattr(kernel, "backward", None) is not None:
            kernel.backward.register_torch(kernel.torch_op)     # runtime/autograd.py
    except Exception as exc:   # a torch that cannot register ops must not break the package
        warnings.warn(f"{kernel.name}: no torch custom op ({type(exc).__name__}: {exc}); torch tensors take the "
                      f"direct CUDA path and torch.compile cannot trace it", RuntimeWarning, stacklevel=3)


def _attach_pending() -> None:
    with _LOCK:
        kernels = [k for k in (ref() for ref in _PENDING) if k is not None]
        _PENDING.clear()
    for k in kernels:
        _attach_now(k)


class _TorchImportHook(importlib.abc.MetaPathFinder):
    """Finds nothing itself: on `import torch` it lets the other finders find torch, and wraps the loader so that
    the pending kernels are registered once torch's module has run. Removes itself at the first import of torch."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        with _LOCK:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module):
            run(module)
            _attach_pending()

        loader.exec_module = exec_module
        return spec


def register(kernel: Any) -> "TorchOp | None":
    """The kernel's custom ops (registered once per content), or None without torch, without the CUDA backend, or
    for a multi-device kernel (see the module docstring)."""
    record: LaunchRecord = kernel.launch
    if record.ring is not None or "cuda" not in record.backends:
        return None
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    name = op_name(kernel)
    with _REGISTER_LOCK:
        op = _REGISTERED.get(name)
        if op is None:
            op = _REGISTERED[name] = TorchOp(kernel, name)
        else:
            op.kernel = kernel   # same content: run the copy loaded last (an earlier one's folder may be gone)
    return op


def _arg_names(record: LaunchRecord) -> tuple[list[str], list[str]]:
    """Schema argument names: the operands' names (outputs as out_<name>), or positional ones where a name cannot
    be a schema argument."""
    ins = [o.name if o.name.isidentifier() and o.name not in ("self", "out") else f"in{i}"
           for i, o in enumerate(record.inputs)]
    outs = [f"out_{o.name}" if o.name.isidentifier() else f"out{i}" for i, o in enumerate(record.outputs)]
    if len(set(ins + outs)) != len(ins) + len(outs):
        ins = [f"in{i}" for i in range(len(ins))]
        outs = [f"out{i}" for i in range(len(outs))]
    return ins, outs


def _alias(i: int) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return letters[i % 26] + (str(i // 26) if i >= 26 else "")


class TorchOp:
    """The two custom ops of one kernel (`op`, `out_op`: OpOverloads) and the package call's routing to them."""

    def __init__(self, kernel: Any, name: str):
        import torch
        self.kernel = kernel
        self.name = name
        self.record: LaunchRecord = kernel.launch
        # the operands that may be strided views (a bucketed package: those every variant reads through tensor maps)
        self.tmap_only = getattr(kernel, "tmap_only", None) or _layout.tmap_only(self.record)
        ins, outs = _arg_names(self.record)
        n_in, n_out = len(ins), len(outs)
        ret = "Tensor" if n_out == 1 else "(" + ", ".join(["Tensor"] * n_out) + ")"
        schema = "(" + ", ".join(f"Tensor {n}" for n in ins) + ") -> " + ret
        out_schema = ("(" + ", ".join([f"Tensor {n}" for n in ins] + [f"Tensor({_alias(i)}!) {n}"
                                                                       for i, n in enumerate(outs)]) + ") -> ()")

        def impl(*tensors):
            return self.kernel._call_cuda(tensors, None, None)

        def impl_out(*tensors):
            self.kernel._call_cuda(tensors[:n_in], tuple(tensors[n_in:]), None)

        def fake(*tensors):
            sizes, device = self.check(tensors)
            res = tuple(torch.empty(self._shape(o, sizes), dtype=torch_dtype(o.dtype), device=device)
                        for o in self.record.outputs)
            return res[0] if n_out == 1 else res

        def fake_out(*tensors):
            sizes, _ = self.check(tensors[:n_in])
            self.check_outs(tensors[n_in:], sizes)

        qual = f"{NAMESPACE}::{name}"
        self._functional = torch.library.custom_op(qual, impl, mutates_args=(), schema=schema)
        self._functional.register_fake(fake)
        self._mutating = torch.library.custom_op(f"{qual}_out", impl_out, mutates_args=tuple(outs),
                                                 schema=out_schema)
        self._mutating.register_fake(fake_out)
        self.op = getattr(torch.ops.schedgen, name).default
        self.out_op = getattr(torch.ops.schedgen, f"{name}_out").default
        self._tensor = torch.Tensor
        self._compiling = torch.compiler.is_compiling
        self._dispatch_depth = getattr(torch._C, "_len_torch_dispatch_stack", None)
        self._n_in, self._n_out = n_in, n_out

    def __repr__(self) -> str:
        return f"<schedgen torch op torch.ops.{NAMESPACE}.{self.name} (and {self.name}_out)>"

    # ------------------------------------------------------------------ routing (Kernel.__call__'s hook)
    def eager_direct(self, args: Sequence[Any], out: Any) -> bool:
        """True for plain eager work on real CUDA tensors (exact torch.Tensor, no grad to record, not compiling, no
        torch dispatch mode): the call may skip the op (EAGER_DIRECT). The cheapest test first: it runs per call."""
        if not EAGER_DIRECT or len(args) != self._n_in:
            return False
        tensor = self._tensor
        for a in args:
            if type(a) is not tensor or a.requires_grad or not a.is_cuda:
                return False
        if out is not None:
            for o in (out if isinstance(out, (tuple, list)) else (out,)):
                if type(o) is not tensor or o.requires_grad or not o.is_cuda:
                    return False
        return self.plain_context()

    def plain_context(self) -> bool:
        """Not compiling and no torch dispatch mode on the stack (FakeTensorMode, opcheck's, a FLOP counter)."""
        if self._compiling():
            return False
        return self._dispatch_depth is not None and self._dispatch_depth() == 0

    def dispatch(self, args: Sequence[Any], out: Any) -> Any:
        """The call through the ops when every argument is a torch tensor and the counts fit; NotImplemented
        otherwise (the caller takes its ordinary path, which reports a wrong count or a mix of kinds)."""
        tensor = self._tensor
        if len(args) != self._n_in or not all(isinstance(a, tensor) for a in args):
            return NotImplemented
        if EAGER_DIRECT and not self._compiling() and _plain_eager(args, out, tensor):
            return NotImplemented   # the same checks and launch without the dispatcher's cost (module docstring)
        if out is None:
            return self.op(*args)
        outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        if len(outs) != self._n_out or not all(isinstance(o, tensor) for o in outs):
            return NotImplemented
        self.out_op(*args, *outs)
        return outs[0] if self._n_out == 1 else outs

    # ------------------------------------------------------------------ the fake implementation's checks
    def check(self, tensors: Sequence[Any]) -> tuple[dict[str, Any], Any]:
        """The call's sizes (ints or SymInts) and device, from the inputs; ArgumentError for a concrete mistake,
        torch._check for what a symbolic size must satisfy."""
        import torch
        ranges = {r.name: r for r in self.record.sizes}
        sizes: dict[str, Any] = {}
        where: dict[str, str] = {}
        device = None
        for t, o in zip(tensors, self.record.inputs):
            _check_dtype(t, o.name, o.dtype)
            shape = tuple(t.shape)
            if len(shape) != len(o.shape):
                raise ArgumentError(f"{o.name}: expected shape {_shown(o.shape)}, got {_shown(shape)}")
            for i, (want, got) in enumerate(zip(o.shape, shape)):
                if isinstance(want, int):
                    if got != want:   # a symbolic dimension is specialized here: the dimension is fixed
                        raise ArgumentError(f"{o.name}: expected shape {_shown(o.shape)}, got {_shown(shape)}: "
                                            f"dimension {i} is fixed at {want}")
                elif want in sizes:
                    msg = (f"{o.name}: dimension {i} ({want}) is {_value(got)}, but {where[want]} gave {want} = "
                           f"{_value(sizes[want])}")
                    _require(got == sizes[want], msg, isinstance(got, int) and isinstance(sizes[want], int))
                else:
                    _check_range(ranges[want], got, f"{o.name}: dimension {i} ({want}) is",
                                 f"(expected shape {_shown(o.shape)})")
                    sizes[want], where[want] = got, f"{o.name} dimension {i}"
            if device is None:
                device = t.device
            elif t.device != device:
                raise ArgumentError(f"{o.name}: is on {t.device}, but the other arguments are on {device}")
        for i, (t, o) in enumerate(zip(tensors, self.record.inputs)):
            self.check_layout(t, i, o.name, sizes)
        return sizes, device if device is not None else torch.device("cpu")

    def check_layout(self, t: Any, index: int, name: str, sizes: dict[str, Any]) -> None:
        """The layout rule of operand `index` (inputs, then outputs): C-contiguous, or, for an operand the kernel
        reaches through tensor maps only, strides TMA can address (runtime/layout.py: the eager call's rules and
        words, checked here at the traced values of symbolic sizes and strides; the call checks its own again)."""
        if t.is_contiguous():
            return
        if not self.tmap_only[index]:
            _check_dense(t, name)
        strides = tuple(_value(x) for x in t.stride())
        known = {k: _value(v) for k, v in sizes.items()}
        if all(isinstance(x, int) for x in (*strides, *known.values())):
            _layout.operand_tmaps(self.record, index, strides, known)

    def as_taken(self, tensors: Sequence[Any]) -> list:
        """The inputs as the kernel takes them without a copy where it can: each tensor as it is when C-contiguous,
        or strided on an operand read through tensor maps only when TMA can address it at its (traced) values (see
        check_layout) and its offset keeps 16-byte alignment; a contiguous copy otherwise. For inputs the runtime
        hands on (a backward step reading the forward's saved, possibly strided, inputs: runtime/autograd.py)."""
        out = list(tensors)
        strided = [i for i, t in enumerate(out) if not t.is_contiguous()]
        if not strided:
            return out
        shapes = [tuple(_value(d) for d in t.shape) for t in out]
        try:
            sizes = self.kernel.bind(shapes) if all(isinstance(d, int) for s in shapes for d in s) else None
        except ArgumentError:
            sizes = None     # the call itself says what is wrong
        for i in strided:
            if sizes is None or not self._strided_ok(out[i], i, sizes):
                out[i] = out[i].contiguous()
        return out

    def _strided_ok(self, t: Any, index: int, sizes: dict[str, int]) -> bool:
        o = self.record.inputs[index]
        strides = tuple(_value(x) for x in t.stride())
        offset = _value(t.storage_offset())
        if not self.tmap_only[index] or not all(isinstance(x, int) for x in (*strides, offset)) or \
                offset * o.itemsize % 16:
            return False
        try:
            _layout.operand_tmaps(self.record, index, strides, sizes)
        except ArgumentError:
            return False
        return True

    def check_outs(self, outs: Sequence[Any], sizes: dict[str, Any]) -> None:
        n_in = len(self.record.inputs)
        for i, (t, o) in enumerate(zip(outs, self.record.outputs)):
            name = f"out[{o.name}]"
            _check_dtype(t, name, o.dtype)
            want = self._shape(o, sizes)
            got = tuple(t.shape)
            if len(got) != len(want):
                raise ArgumentError(f"{name}: expected shape {_shown(want)}, got {_shown(got)}")
            for w, g in zip(want, got):
                both = isinstance(w, int) and isinstance(g, int)
                _require(w == g, f"{name}: expected shape {_shown(want)}, got {_shown(got)}", both)
            self.check_layout(t, n_in + i, name, sizes)

    @staticmethod
    def _shape(o: Operand, sizes: dict[str, Any]) -> tuple:
        return tuple(d if isinstance(d, int) else sizes[d] for d in o.shape)


def _on_cuda(t: Any) -> bool:
    return t.device.type == "cuda"


def _plain_eager(args: Sequence[Any], out: Any, tensor: type) -> bool:
    """Plain eager work on real CUDA tensors: no tensor subclass (fake, functional, ...), no torch dispatch mode
    (FakeTensorMode, opcheck's, a FLOP counter), no autograd to record. Only then may the call skip the op."""
    import torch
    outs = () if out is None else tuple(out) if isinstance(out, (tuple, list)) else (out,)
    every = tuple(args) + outs
    if any(type(t) is not tensor or not _on_cuda(t) or t.requires_grad for t in every):
        return False
    stack = getattr(torch._C, "_len_torch_dispatch_stack", None)
    return stack is not None and stack() == 0


def torch_dtype(name: str) -> Any:
    import torch
    return getattr(torch, _TORCH_DTYPES[name])


def _check_dtype(t: Any, name: str, dtype: str) -> None:
    got = dtype_name(t.dtype)
    if got != dtype:
        shown = str(t.dtype).removeprefix("torch.")
        raise ArgumentError(f"{name}: expected {dtype}, got {shown}; convert with {name}.to(torch."
                            f"{_TORCH_DTYPES[dtype]})")


def _check_dense(t: Any, name: str) -> None:
    if not t.is_contiguous():
        raise ArgumentError(f"{name}: is not contiguous (strides {tuple(t.stride())}); make it contiguous first: "
                            f"{name.removeprefix('out[').removesuffix(']')}.contiguous()")


def _require(cond: Any, message: str, concrete: bool) -> None:
    """An ArgumentError now when the values are known; a torch._check (a guard or a runtime assert of the traced
    graph) when one is symbolic."""
    if concrete:
        if not cond:
            raise ArgumentError(message)
        return
    import torch
    torch._check(cond, lambda: message)


def _check_range(r: Any, got: Any, head: str, tail: str) -> None:
    """`head` is followed by the value (the traced one for a symbolic size) and what is legal."""
    value = _value(got)
    why = r.check(value) if isinstance(value, int) else None
    if why:
        raise ArgumentError(f"{head} {value}; {r.name} {why} {tail}")
    if isinstance(got, int):
        return
    import torch
    # the traced value is legal: every other value of the symbol must be too, checked when the graph runs
    legal = f"must be in {r.min}..{r.max}"
    torch._check(got >= r.min, lambda: f"{head} {got}; {r.name} {legal} {tail}")
    torch._check(got <= r.max, lambda: f"{head} {got}; {r.name} {legal} {tail}")
    if r.multiple_of > 1:
        step = f"must be a multiple of {r.multiple_of} (in {r.min}..{r.max})"
        torch._check(got % r.multiple_of == 0, lambda: f"{head} {got}; {r.name} {step} {tail}")


def _value(d: Any) -> Any:
    """An int as is; a SymInt as the value it has in the traced call (no guard), or itself when it has none."""
    if isinstance(d, int):
        return d
    hint = getattr(getattr(d, "node", None), "hint", None)
    return int(hint) if isinstance(hint, int) else d


def _shown(shape: Sequence[Any]) -> str:
    return "(" + ", ".join(str(_value(d)) for d in shape) + ("," if len(shape) == 1 else "") + ")"
