"""Run a bucketed package: pick the variant whose bucket holds the call's sizes, then call it.

A bucketed package (schedgen/bucketed.py) holds dispatch.json (schedgen/plan/dispatch.py: the buckets' bounds and a
table bucket -> variant, data only) and `variants/<id>/`, one whole package per variant. `load_bucketed(root)`
returns a `BucketedKernel`, callable like a `Kernel`. The pick reads the dynamic size from the input that binds it
(`args[i].shape[d]`) and bisects the bounds: pure Python, O(log n) a size, no allocation.

Where the choice is made:
- eager calls (numpy, cupy, jax arrays, torch tensors; CUDA graph capture): per call, before the variant runs (a
  captured call records the variant chosen at capture);
- torch.compile and everything else that goes through the torch custom op (meta / fake tensors, dispatch modes):
  the package registers ONE op (`torch.ops.schedgen.<name>_<digest of dispatch.json and every variant's
  launch.json and cubin>`) whose fake implementation is the variants' shared launch interface and whose real
  implementation picks the variant from the real tensors at run time, so one trace serves every bucket;
- jax.jit (Pallas backend): at trace time, from the tracers' static shapes.

A package with a backward pass (backward.json and backward/<step>/ at its root, as a one-kernel package has them)
has one backward for every variant (runtime/autograd.py): torch autograd is registered on the package's one op,
and each variant's Pallas function is a jax.custom_vjp running it; `call_user` drops the saved outputs.
"""
from __future__ import annotations

from bisect import bisect_left
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..plan import dispatch as dispatch_record
from ..plan.dispatch import VARIANTS_DIR
from ..plan.launch import FILE_NAME as LAUNCH_FILE
from . import arrays
from . import autograd as _autograd
from . import torch_op as _torch_op
from .kernel import _SLOW, Kernel, load_package


class BucketedKernel:
    """The variants of one bucketed package and the pick between them."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.dispatch = dispatch_record.load(self.root)
        self.variants: tuple[Kernel, ...] = tuple(Kernel(self.root / VARIANTS_DIR / v)
                                                  for v in self.dispatch.variants)
        first = self.variants[0]
        for k in self.variants[1:]:
            _same_interface(first, k)
        self.launch = first.launch            # the call's interface (every variant's is the same): the op's fake
        # an operand may be a strided view where every variant reaches it through tensor maps only (runtime/layout.py)
        self.tmap_only: tuple[bool, ...] = tuple(all(f) for f in zip(*(v.tmap_only for v in self.variants)))
        self.name: str = first.name
        self.torch_op = None                  # the package's one op (attach), set once torch is in use
        self.backward = None                  # the package's backward pass (load_bucketed), if it has one
        by_name = {r.name: r for r in self.launch.sizes}
        where = []
        for s in self.dispatch.sizes:
            if s not in by_name:
                raise dispatch_record.DispatchRecordError(f"{self.root / dispatch_record.FILE_NAME}: sizes: {s} is "
                                                          f"not a dynamic size of the kernel")
            where.append(next((i, d) for i, o in enumerate(self.launch.inputs) for d, x in enumerate(o.shape)
                              if x == s))
        self._where = tuple(where)
        self._bounds = self.dispatch.bounds
        self._by_cell = tuple(self.variants[i] for i in self.dispatch.table)
        self._n_in = len(self.launch.inputs)
        self._one = self._where[0] + (self._bounds[0],) if len(where) == 1 else None

    @property
    def inputs(self):
        return self.launch.inputs

    @property
    def outputs(self):
        return self.launch.outputs

    @property
    def op_files(self) -> tuple[str, ...]:
        """The files the package's torch op name digests (torch_op.op_name)."""
        out = [dispatch_record.FILE_NAME]
        for v in self.dispatch.variants:
            out += [f"{VARIANTS_DIR}/{v}/{LAUNCH_FILE}", f"{VARIANTS_DIR}/{v}/kernel.cubin"]
        return tuple(out)

    def __repr__(self) -> str:
        sig = ", ".join(f"{o.name}: {o.dtype}{list(o.shape)}" for o in self.inputs)
        cut = "; ".join(f"{s} <= {list(b)}" for s, b in zip(self.dispatch.sizes, self._bounds))
        return f"<schedgen bucketed kernel {self.name}({sig}) {len(self.variants)} variants, buckets {cut}>"

    # ------------------------------------------------------------------ the pick
    def variant_for(self, sizes: Mapping[str, int]) -> Kernel:
        """The variant serving these sizes ({size: value}; the sizes the buckets split)."""
        return self._by_cell[self.dispatch.cell([sizes[s] for s in self.dispatch.sizes])]

    def pick(self, args: Sequence[Any]) -> Kernel:
        """The variant for a call's inputs: the bucketed sizes read from the shapes of the inputs that bind them.
        Arguments it cannot read (a wrong count, a wrong rank) go to the first variant, whose checks say what is
        wrong."""
        one = self._one
        if one is not None:                   # one bucketed size: the common case, inline
            i, d, bounds = one
            try:
                v = _shape(args[i], self.inputs[i].name)[d]
            except (IndexError, TypeError):
                return self._by_cell[0]
            j = bisect_left(bounds, v)
            return self._by_cell[j if j < len(bounds) else len(bounds) - 1]
        cell = 0
        for (i, d), bounds in zip(self._where, self._bounds):
            try:
                v = _shape(args[i], self.inputs[i].name)[d]
            except (IndexError, TypeError):
                return self._by_cell[0]
            j = bisect_left(bounds, v)
            cell = cell * len(bounds) + (j if j < len(bounds) else len(bounds) - 1)
        return self._by_cell[cell]

    # ------------------------------------------------------------------ calling
    def __call__(self, *args: Any, out: Any = None, stream: Any = None, backend: str | None = None,
                 interpret: Any = None) -> Any:
        """As `Kernel.__call__`, on the variant of the call's bucket (see the module docstring for when the choice
        is made)."""
        op = self.torch_op
        if op is not None and interpret is None and (backend is None or backend == "cuda"):
            if _torch_op.EAGER_DIRECT and op.plain_context():
                res = self.pick(args)._call_torch(args, out, stream, op)   # eager CUDA tensors: straight there
                if res is not _SLOW:
                    return res
            if stream is None and not op.eager_direct(args, out):
                grad = _autograd.wants_grad(args, out)
                if grad and self.backward is None:
                    raise _autograd.no_backward_error(self, args, out)
                if out is None or not grad:
                    # traced, fake, meta, dispatch modes, autograd: the op picks the variant at run time
                    routed = op.dispatch(args, out)
                    if routed is not NotImplemented:
                        return routed
        if _autograd.wants_grad(args, out):   # a torch tensor needing grad that the op did not take
            if self.backward is None:
                raise _autograd.no_backward_error(self, args, out)
            raise _autograd.grad_path_error(self, stream, backend, interpret, out)
        return self.pick(args)(*args, out=out, stream=stream, backend=backend, interpret=interpret)

    # the package function's call (the user's outputs only, out= completed with the saved ones): Kernel's own
    call_user = Kernel.call_user

    def bind(self, shapes: Sequence[Sequence[int]]) -> dict:
        return self.variants[0].bind(shapes)      # every variant takes the same sizes (_same_interface)

    def shape_of(self, operand: Any, sizes: Mapping[str, int]) -> tuple:
        return self.variants[0].shape_of(operand, sizes)

    def _call_cuda(self, args: Sequence[Any], out: Any, stream: Any) -> Any:
        """The torch op's real implementation (and the CUDA call of real arrays): the variant of these inputs."""
        return self.pick(args)._call_cuda(args, out, stream)

    def _check_count(self, args: Sequence[Any]) -> None:
        self.variants[0]._check_count(args)


def _shape(a: Any, name: str) -> Sequence[int]:
    shape = getattr(a, "shape", None)
    if shape is None:
        shape = arrays.describe(a, name)[1]
    return shape


def _same_interface(a: Kernel, b: Kernel) -> None:
    la, lb = a.launch, b.launch
    if (la.name, la.inputs, la.outputs, la.sizes, la.backends) != (lb.name, lb.inputs, lb.outputs, lb.sizes,
                                                                   lb.backends):
        raise dispatch_record.DispatchRecordError(
            f"{b.root}: this variant's call (name, operands, sizes, backends in launch.json) differs from "
            f"{a.root.name}'s; the variants of one package take the same arguments (rebuild the package)")


def load_bucketed(root: str | Path, torch_op: bool = False) -> BucketedKernel:
    """The kernel of a bucketed package folder; with torch_op, its one torch custom op is registered once the
    program uses torch (runtime/torch_op.py)."""
    kernel = BucketedKernel(root)
    # one backward for every variant: the package op's autograd (attach) and each variant's jax.custom_vjp read it
    kernel.backward = _autograd.load(kernel, kernel.root, torch_op, load_package)
    for v in kernel.variants:
        v.backward = kernel.backward
    if torch_op:
        _torch_op.attach(kernel)
    return kernel
