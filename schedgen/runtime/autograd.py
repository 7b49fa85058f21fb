"""The backward pass of a package (issue 19) at run time: backward.json and the step kernels of backward/<step>/,
wired into torch autograd (the forward's custom op gets `register_autograd`) and `jax.grad` (the forward's Pallas
function is a `jax.custom_vjp`).

A package with a backward runs a forward kernel whose outputs may hold more than the spec wrote: the values the
family keeps for the backward (`saved`, e.g. a map body's temporary). The kernel itself (`Kernel.__call__`, the
torch op, the Pallas function) returns every output; the package function (`Kernel.call_user`) returns the user's
only, in eager, torch.compile and CUDA-graph use alike. Under autograd the forward saves the inputs and outputs the
graph reads, and the backward runs each step through the step kernel's own torch op (so torch.compile traces the
backward too) or its Pallas function (jax), sums a broadcast operand's gradient back to the operand's shape, casts
each gradient to its input's dtype, and returns a gradient for every input of the graph's `grads` (zeros where no
step writes one) and none for the others. A pass-through gradient (`graph.passthrough`) is the upstream gradient
object itself: torch's grad_output tensor, jax's cotangent (no copy, no kernel).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .. import boundedjson
from ..autodiff import graph as bwgraph
from ..autodiff.graph import BackwardGraph, evaluate, passed_through, sum_dims
from ..errors import clip
from .arrays import DTYPES, ArgumentError
from .torch_op import torch_dtype     # (imports no torch)

FILE_NAME = "backward.json"
FOLDER = "backward"


def check(operands: Sequence[Sequence[Any]], graph: BackwardGraph) -> list[str]:
    """What is wrong with a loaded graph against the kernel's inputs and outputs ([inputs, outputs]): a step name
    that is not an identifier (`../../x` would be a folder outside the package), a reference to nothing."""
    if not all(isinstance(s.name, str) for s in graph.steps):
        return ["a step name is not a string"]
    ins, outs = ({o.name for o in group} for group in operands)
    wrong = bwgraph.check(graph, ins, outs)
    return wrong + [f"grads names {g!r}, no input of the kernel" for g in graph.grads if g not in ins][:1]


class Backward:
    """backward.json of a package and its step kernels (loaded with the package: they read only launch.json)."""

    def __init__(self, kernel: Any, root: Path, torch_op: bool, load_package: Callable[..., Any]):
        try:
            rec = boundedjson.loads((root / FILE_NAME).read_bytes())
            self.graph = BackwardGraph.from_json(rec["graph"])
            user = list(rec["user_outputs"])
            # step names become folders (backward/<step>/): identifiers only, every reference resolving
            wrong = check([kernel.inputs, kernel.outputs], self.graph)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RuntimeError(f"{kernel.name}: {root / FILE_NAME} is unreadable ({type(exc).__name__}: "
                               f"{clip(str(exc), 200)}): rebuild the package") from None
        if wrong:
            raise RuntimeError(f"{kernel.name}: {root / FILE_NAME} is not a backward of this kernel "
                               f"({clip('; '.join(wrong), 300)}): rebuild the package")
        names = [o.name for o in kernel.outputs]
        unknown = [n for n in user + list(self.graph.saved) if n not in names]
        if unknown:
            raise RuntimeError(f"{kernel.name}: backward.json names outputs {unknown} that launch.json does not "
                               f"have: rebuild the package")
        self.name = kernel.name
        self.user = tuple(names.index(n) for n in user)                     # the outputs the call returns
        self.saved = tuple(i for i in range(len(names)) if i not in self.user)
        self.input_names = tuple(o.name for o in kernel.inputs)
        self.output_names = tuple(names)
        self.steps = {}
        for s in self.graph.steps:
            folder = root / FOLDER / s.name
            if not (folder / "launch.json").is_file():
                raise RuntimeError(f"{kernel.name}: the backward step {s.name} has no kernel ({folder} is missing): "
                                   f"rebuild the package")
            self.steps[s.name] = load_package(folder, torch_op=torch_op)
        self.torch_registered = False

    def __repr__(self) -> str:
        return f"<schedgen backward of {self.name}: steps {list(self.steps)}, grads {list(self.graph.grads)}>"

    # ------------------------------------------------------------------ the user's view of the forward
    def user_result(self, res: Any) -> Any:
        """The kernel's outputs (a value or a tuple) cut down to the ones the spec wrote."""
        if not self.saved:
            return res
        res = res if isinstance(res, tuple) else (res,)
        picked = tuple(res[i] for i in self.user)
        return picked[0] if len(picked) == 1 else picked

    def full_out(self, kernel: Any, args: Sequence[Any], out: Any) -> tuple:
        """`out=` for the user's outputs, completed with fresh arrays of the same kind for the saved outputs (the
        forward kernel writes those too)."""
        from . import arrays
        outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        if len(outs) != len(self.user):
            raise ArgumentError(f"out: {self.name} has {len(self.user)} outputs, got {len(outs)} arrays")
        kernel._check_count(args)
        sizes = kernel.bind([arrays.describe(a, o.name)[1] for a, o in zip(args, kernel.inputs)])
        full: list[Any] = [None] * len(self.output_names)
        for i, o in zip(self.user, outs):
            full[i] = o
        like = outs[0]
        kind = arrays.classify(like, f"out[{self.output_names[self.user[0]]}]")
        for i in self.saved:
            o = kernel.outputs[i]
            shape = kernel.shape_of(o, sizes)
            if kind == "numpy":
                full[i] = np.empty(shape, DTYPES[o.dtype])
            elif kind == "torch":
                import torch
                full[i] = torch.empty(shape, dtype=torch_dtype(o.dtype), device=like.device)
            else:
                full[i] = arrays.empty_like_kind(kind, like, shape, o.dtype)[0]
        return tuple(full)

    # ------------------------------------------------------------------ torch
    def register_torch(self, op: Any) -> None:
        """This backward as `op`'s autograd formula (`register_torch` below; runtime/torch_op.py calls it when it
        registers the forward's op, without importing this module)."""
        register_torch(op, self)

    def torch_backward(self, inputs: dict, shapes: dict, outputs: dict, grads: Sequence[Any], needs: Sequence[bool],
                       like: dict) -> tuple:
        """The gradients of the forward's inputs (None where the graph gives none or autograd needs none).
        `inputs`: the inputs the graph reads; `shapes`/`like`: every input's shape and (dtype, device);
        `outputs`: the outputs the graph reads; `grads`: the upstream gradient of every kernel output."""
        import torch
        given = {name: g for i, (name, g) in enumerate(zip(self.output_names, grads))
                 if i in self.user and g is not None}
        for name in self._missing_upstream(given):      # an output autograd gave no gradient: zeros
            dtype, device = like["__out_" + name]
            given[name] = torch.zeros(outputs[name].shape, dtype=dtype, device=device)
        # An upstream gradient reaches each step as autograd handed it where the step's kernel can read it so (a
        # contiguous one; a strided view through tensor maps), and a pass-through gradient is autograd's tensor
        # itself (no copy, no kernel). A gradient some step cannot read as it is (y.sum()'s stride-0 expand) is
        # made dense once, on first need, and every later step reading it gets that copy (not one copy a step).
        dense: dict[str, Any] = {}

        def run(step, values):
            k = self.steps[step.name]
            op = k.torch_op
            # as the step's kernel takes them: the forward's saved inputs as they are where the kernel reads them
            # through tensor maps (a fused QKV projection's q, k, v views), contiguous copies elsewhere
            refs = [step.inputs.get(o.name, "") for o in k.inputs]
            given_args = [dense.get(r, values[o.name]) for r, o in zip(refs, k.inputs)]
            args = op.as_taken(given_args) if op is not None else [a.contiguous() for a in given_args]
            for r, before, after in zip(refs, given_args, args):
                if r.startswith("grad:") and after is not before:
                    dense[r] = after
            if op is None and (k.root / "pallas_kernel.py").is_file() and not _tracing(torch, args):
                # a step with no CUDA kernel (a family whose backward is Pallas only): its Pallas function on the
                # torch tensors (plgpu.as_torch_kernel, ordered with torch's stream), eager only
                res = k(*args, backend="pallas")
            elif op is None:
                raise RuntimeError(f"{self.name}: the backward step {step.name} has no torch op (its package was "
                                   f"built without the CUDA backend, or torch could not register it)"
                                   + ("; its Pallas kernel runs in eager torch only, not under torch.compile"
                                      if (k.root / "pallas_kernel.py").is_file() else ""))
            else:
                res = op.op(*args)
            res = res if isinstance(res, tuple) else (res,)
            return {o.name: r for o, r in zip(k.outputs, res)}

        def reduce(v, to):
            return sum_back(v, to, lambda x, dims, keep: torch.sum(x.to(torch.float32), dim=dims, keepdim=keep))

        shaped = {n: _Shaped(shapes[n]) for n in self.input_names}
        shaped.update(inputs)
        device = next(iter(like.values()))[1]
        got = evaluate(self.graph, shaped, outputs, given, run, add=lambda a, b: a + b, reduce=reduce,
                       arange=lambda n: torch.arange(n, dtype=torch.float32, device=device))
        result = []
        for i, n in enumerate(self.input_names):
            if n not in self.graph.grads or not needs[i]:
                result.append(None)
                continue
            dtype, device = like[n]
            g = got.get(n)
            result.append(torch.zeros(shapes[n], dtype=dtype, device=device) if g is None else g.to(dtype))
        return tuple(result)

    def _missing_upstream(self, upstream: dict) -> list[str]:
        """Output names a step reads as grad:<name>, or a gradient passes through from, that autograd gave no
        gradient for (an output not used)."""
        want = {ref[5:] for s in self.graph.steps for ref in s.inputs.values() if ref.startswith("grad:")}
        want |= set(passed_through(self.graph).values())
        return sorted(want - set(upstream))

    def reads(self) -> tuple[set[str], set[str]]:
        """The forward inputs and outputs the graph's steps read (what the forward keeps for the backward)."""
        ins, outs = set(), set()
        for s in self.graph.steps:
            for ref in s.inputs.values():
                kind, _, name = ref.partition(":")
                if kind == "in":
                    ins.add(name)
                elif kind == "out":
                    outs.add(name)
        return ins, outs

    # ------------------------------------------------------------------ jax
    def jax_backward(self, ins: Sequence[Any], outs: Sequence[Any], cts: Sequence[Any], interpret: Any) -> tuple:
        """The cotangents of every forward input, through each step's Pallas function."""
        import jax
        import jax.numpy as jnp
        inputs = dict(zip(self.input_names, ins))
        outputs = dict(zip(self.output_names, outs))
        upstream = {self.output_names[i]: cts[i] for i in self.user}

        def run(step, values):
            k = self.steps[step.name]
            args = [values[o.name] for o in k.inputs]
            sizes = k.bind([tuple(a.shape) for a in args])
            res = k._pallas.function(sizes, interpret, "call")(*args)
            res = res if isinstance(res, tuple) else (res,)
            return {o.name: r for o, r in zip(k.outputs, res)}

        def reduce(v, to):
            return sum_back(v, to, lambda x, dims, keep: jnp.sum(x.astype(jnp.float32), axis=dims, keepdims=keep))

        got = evaluate(self.graph, inputs, outputs, upstream, run, add=lambda a, b: a + b, reduce=reduce,
                       arange=lambda n: jnp.arange(n, dtype=jnp.float32))
        result = []
        for n, x in inputs.items():
            if not jnp.issubdtype(x.dtype, jnp.inexact):
                result.append(np.zeros(x.shape, dtype=jax.dtypes.float0))
            elif n in got:
                result.append(got[n].astype(x.dtype))
            else:
                result.append(jnp.zeros(x.shape, x.dtype))
        return tuple(result)


def sum_back(v: Any, to: tuple, total: Any) -> Any:
    """A gradient of an operand the forward broadcast, summed back to the operand's shape `to` in f32 (itself when
    the shapes agree); `total(x, dims, keepdims)` is the array library's sum (torch's, jnp's)."""
    if tuple(v.shape) == tuple(to):
        return v
    lead, keep = sum_dims(tuple(v.shape), tuple(to))
    if keep:
        v = total(v, keep, True)
    return total(v, lead, False) if lead else v


def _tracing(torch, args) -> bool:
    """Whether torch is tracing these tensors (fake or meta: torch.compile, a dispatch mode), not running them."""
    from torch._subclasses.fake_tensor import FakeTensor
    return any(isinstance(a, FakeTensor) or a.device.type == "meta" for a in args) \
        or torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None


class _Shaped:
    """An input the backward does not read: only its shape (what a gradient is summed back to)."""
    __slots__ = ("shape",)

    def __init__(self, shape):
        self.shape = tuple(shape)


def load(kernel: Any, root: Path, torch_op: bool, load_package: Callable[..., Any]) -> Backward | None:
    """The package's backward (None when it has no backward.json); its steps are packages, each loaded by
    `load_package` (runtime/kernel.py's, which loads this module: it is passed in rather than imported)."""
    if not (Path(root) / FILE_NAME).is_file():
        return None
    return Backward(kernel, Path(root), torch_op, load_package)


# ---------------------------------------------------------------------------------------------- torch wiring

def register_torch(op: Any, backward: Backward) -> None:
    """`torch.library.register_autograd` on the forward's functional op: setup_context keeps the inputs and outputs
    the graph reads (and every input's shape, dtype and device), backward runs the graph's steps through their ops.
    Once per op (a re-loaded package of the same content reuses the op and its formula)."""
    if getattr(op, "backward_registered", False):
        return
    n_in = len(op.record.inputs)
    in_names = [o.name for o in op.record.inputs]
    out_names = [o.name for o in op.record.outputs]
    read_in, read_out = backward.reads()

    def setup_context(ctx, inputs, output):
        outs = output if isinstance(output, tuple) else (output,)
        keep_in = [i for i, n in enumerate(in_names) if n in read_in]
        keep_out = [i for i, n in enumerate(out_names) if n in read_out]
        ctx.save_for_backward(*(inputs[i] for i in keep_in), *(outs[i] for i in keep_out))
        ctx.keep = (keep_in, keep_out)
        ctx.shapes = {n: tuple(t.shape) for n, t in zip(in_names, inputs)}
        ctx.like = {n: (t.dtype, t.device) for n, t in zip(in_names, inputs)}
        ctx.like.update({"__out_" + n: (t.dtype, t.device) for n, t in zip(out_names, outs)})
        ctx.out_shapes = {n: tuple(t.shape) for n, t in zip(out_names, outs)}

    def bwd(ctx, *grads):
        bw = op.kernel.backward   # the package loaded last (same content)
        saved = ctx.saved_tensors
        keep_in, keep_out = ctx.keep
        inputs = {in_names[i]: t for i, t in zip(keep_in, saved[:len(keep_in)])}
        outputs = {out_names[i]: t for i, t in zip(keep_out, saved[len(keep_in):])}
        for n, shape in ctx.out_shapes.items():
            outputs.setdefault(n, _Shaped(shape))
        return bw.torch_backward(inputs, ctx.shapes, outputs, grads, ctx.needs_input_grad[:n_in], ctx.like)

    op._functional.register_autograd(bwd, setup_context=setup_context)
    op.backward_registered = True


def wants_grad(args: Sequence[Any], out: Any = None) -> bool:
    """A torch tensor among the arguments requires grad while grad mode is on (autograd would record the call)."""
    torch = sys.modules.get("torch")
    enabled = getattr(torch, "is_grad_enabled", None)   # (None: no torch, or a stand-in without autograd)
    if enabled is None or not enabled():
        return False
    outs = () if out is None else tuple(out) if isinstance(out, (tuple, list)) else (out,)
    return any(isinstance(a, torch.Tensor) and a.requires_grad for a in (*args, *outs))


def no_backward_error(kernel: Any, args: Sequence[Any], out: Any) -> ArgumentError:
    """A call autograd would record on a package without a backward."""
    import torch
    names = [o.name for a, o in zip(args, kernel.inputs) if isinstance(a, torch.Tensor) and a.requires_grad]
    what = f"{names[0]}: requires grad" if names else "out: requires grad"
    return ArgumentError(
        f"{what}, but {kernel.name} was built without a backward pass: add a `backward:` section to its spec (e.g. "
        f"`backward: {{}}`, or `backward: {{wrt: [...]}}` for the inputs that need gradients) and rebuild, or call it "
        f"under torch.no_grad() / torch.inference_mode() when no gradient is wanted")


def grad_path_error(kernel: Any, stream: Any, backend: Any, interpret: Any, out: Any) -> ArgumentError:
    """A call autograd would record that took a path the backward is not wired into."""
    if out is not None:
        why = "out=: autograd records the functional call only; use the return value"
    elif stream is not None:
        why = ("stream=: a launch on an explicit stream is not recorded by autograd; leave stream unset and pick "
               "the stream with torch.cuda.stream(...)")
    elif backend == "pallas" or interpret is not None:
        why = ("backend=\"pallas\": torch tensors on the Pallas backend are not recorded by autograd; use the CUDA "
               "backend (the default for torch tensors)")
    elif not getattr(kernel, "torch_op_asked", True):
        why = ("this kernel was loaded without its torch op (load_package(folder) registers none): import the "
               "package, or call load_package(folder, torch_op=True), to get the op autograd goes through")
    else:
        why = "this package's CUDA backend has no torch op here (torch could not register it, see the warning)"
    return ArgumentError(f"{kernel.name}: a call that needs gradients: {why}")
