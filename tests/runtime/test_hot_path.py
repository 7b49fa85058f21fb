"""The per-call work of the torch fast path (issue 17/15: host overhead per call), on the CPU with the fake driver
and the fake torch tensors of test_call_path.py: a repeated eager call enters only the fast path's few functions
(no argument classification, binding, launch-state resolution or backend choice), reads each tensor once with the
routing rule of the torch op (TorchOp.eager_direct) in the same pass, takes stream= without the general path, and
still routes everything else as before: to the op (grad, compiling, a dispatch mode, EAGER_DIRECT off) or to the
general path's located errors. No timing is asserted."""
from __future__ import annotations

import sys

import pytest

from fake_driver import FakeDriver
from test_call_path import DT, Tensor, Torch, TorchStream, _inputs, _kernel
from schedgen.runtime import kernel as K
from schedgen.runtime import pallas_call, torch_op
from schedgen.runtime.arrays import ArgumentError

ROUTED = object()


@pytest.fixture
def fakes(monkeypatch):
    return FakeDriver(monkeypatch), Torch(monkeypatch)


class FakeOp:
    """A TorchOp as Kernel.__call__ sees it: the exact tensor type, the context test, the old routing calls."""

    def __init__(self, plain=True):
        self._tensor, self.plain, self.calls = Tensor, plain, []

    def plain_context(self):
        return self.plain

    def eager_direct(self, args, out):
        self.calls.append("eager_direct")
        return self.plain and not any(a.requires_grad for a in args)

    def dispatch(self, args, out):
        self.calls.append("dispatch")
        return ROUTED


def _with_op(tmp_path, spec="add_bf16.yaml", plain=True):
    kernel, rec = _kernel(tmp_path, spec)
    kernel.torch_op = FakeOp(plain)
    return kernel, rec


def test_plain_eager_call_is_one_pass_and_stream_takes_the_fast_path(tmp_path, fakes, monkeypatch):
    fake, torch = fakes
    kernel, rec = _with_op(tmp_path)
    ins = _inputs(rec)
    monkeypatch.setattr(pallas_call, "choose_backend", lambda *a, **k: pytest.fail("the general path ran"))
    res = kernel(*ins)
    o = rec.outputs[0]
    assert isinstance(res, Tensor) and res.shape == o.shape and res.dtype is DT[o.dtype]
    given = Tensor(o.shape, o.dtype, ptr=0x7C0000000000)
    assert kernel(*ins, out=given) is given and kernel(*ins, out=[given]) is given
    assert kernel(*ins, stream=TorchStream(0x99)) is not None and kernel(*ins, out=given, stream=7) is given
    assert kernel.torch_op.calls == []                               # the routing rule was read in the one pass
    assert [g["stream"] for g in fake.launches] == [torch.stream] * 3 + [0x99, 7]
    assert torch.allocs == [o.shape, o.shape]                        # outputs only where none was given


@pytest.mark.parametrize("why", ["grad", "grad out", "context", "switch"])
def test_what_is_not_plain_eager_goes_through_the_op_untouched(tmp_path, fakes, monkeypatch, why):
    """A tensor needing grad (an input or out=), compiling or a dispatch mode, or EAGER_DIRECT off: the op gets the
    call (as TorchOp.eager_direct decides), and nothing was allocated or launched on the way."""
    fake, torch = fakes
    kernel, rec = _with_op(tmp_path, plain=why != "context")
    ins = _inputs(rec)
    out = None
    if why == "grad":
        ins[1] = Tensor(rec.inputs[1].shape, rec.inputs[1].dtype, ptr=ins[1].ptr, requires_grad=True)
    elif why == "grad out":
        out = Tensor(rec.outputs[0].shape, rec.outputs[0].dtype, ptr=0x7C0000000000, requires_grad=True)
        kernel.torch_op.eager_direct = lambda args, out: kernel.torch_op.calls.append("eager_direct") or False
    elif why == "switch":
        monkeypatch.setattr(torch_op, "EAGER_DIRECT", False)
        kernel.torch_op.eager_direct = lambda args, out: kernel.torch_op.calls.append("eager_direct") or False
    assert kernel(*ins, out=out) is ROUTED
    assert kernel.torch_op.calls == ["eager_direct", "dispatch"]
    assert fake.launches == [] and torch.allocs == [] and not kernel._states


def test_unusual_arguments_reach_the_general_paths_errors_with_nothing_allocated(tmp_path, fakes):
    fake, torch = fakes
    kernel, rec = _with_op(tmp_path)
    ins = _inputs(rec)
    x, o = rec.inputs[0], rec.outputs[0]
    cases = [
        ((Tensor(x.shape, "f32"), *ins[1:]), {}, f"{x.name}: expected {x.dtype}, got float32"),
        ((ins[0],), {}, f"{kernel.name}() takes {len(rec.inputs)} arrays"),
        ((*ins,), {"out": Tensor((1, 16), o.dtype)}, rf"out[{o.name}]: expected shape"),
        ((*ins,), {"stream": "s"}, "stream: expected an int handle"),
        ((*ins,), {"stream": -1}, "stream: a stream handle is >= 0, got -1"),
    ]
    for args, kw, message in cases:
        with pytest.raises(ArgumentError) as info:
            kernel(*args, **kw)
        assert str(info.value).startswith(message), (str(info.value), message)
    assert "dispatch" not in kernel.torch_op.calls and fake.launches == [] and torch.allocs == []


# the fast path of a repeated call: these functions of schedgen and no others (a new one there is a conscious choice)
HOT = {"Kernel.__call__", "Kernel._call_torch", "_torch_tensors", "Kernel._torch_state", "_torch_empty_outputs",
       "Kernel._go"}


def _entered(fn) -> list[str]:
    """The schedgen functions (qualified names) that fn() enters, in order, through sys.setprofile (not counting
    what the fake driver calls: the real launch is driver.LaunchConfig.launch alone)."""
    seen = []
    root = K.__file__.rsplit("/runtime/", 1)[0]

    def hook(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(root) and \
                not frame.f_back.f_code.co_filename.endswith("fake_driver.py"):
            seen.append(frame.f_code.co_qualname)
    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


@pytest.mark.parametrize("spec", ["add_bf16.yaml", "matmul_bf16_4096.yaml", "linear_gelu_bf16_dynamic.yaml"])
def test_a_repeated_call_enters_only_the_fast_path(tmp_path, fakes, spec):
    fake, _ = fakes
    kernel, rec = _with_op(tmp_path, spec)
    sizes = {r.name: r.max for r in rec.sizes}
    ins = [Tensor(kernel.shape_of(o, sizes), o.dtype, ptr=0x7F0000000000 + (i << 32))
           for i, o in enumerate(rec.inputs)]
    o = rec.outputs[0]
    given = Tensor(kernel.shape_of(o, sizes), o.dtype, ptr=0x7C0000000000)
    for call in (lambda: kernel(*ins), lambda: kernel(*ins, out=given), lambda: kernel(*ins, stream=5)):
        call()                                                        # the first call resolves, encodes, packs
        states, sets = dict(kernel._states), len(fake.sets)
        entered = _entered(call)
        assert set(entered) <= HOT, sorted(set(entered) - HOT)
        assert len(entered) == len(set(entered)), entered            # each of them once
        assert dict(kernel._states) == states and len(fake.sets) == sets   # nothing resolved or re-packed
    assert kernel.torch_op.calls == []


def test_the_last_states_memo_keeps_the_lru_order(tmp_path, fakes):
    """The torch path compares a call's shapes with the last call's instead of hashing them into the LRU; the LRU
    still ends with the state used last, and anything else that moves the LRU drops the memo."""
    fake, _ = fakes
    kernel, rec = _with_op(tmp_path, "linear_gelu_bf16_dynamic.yaml")
    (m,) = rec.sizes

    def ins(rows):
        return [Tensor(kernel.shape_of(o, {m.name: rows}), o.dtype, ptr=0x7F0000000000 + (i << 32))
                for i, o in enumerate(rec.inputs)]
    a, b = ins(m.max), ins(m.max - m.multiple_of)
    for args in (a, b, a, a):
        kernel(*args)
    assert [k[1][0] for k in kernel._states] == [tuple(b[0].shape), tuple(a[0].shape)]
    assert kernel._last_torch[2] is kernel._states[next(reversed(kernel._states))]
    kernel._resolved(0, {m.name: m.min})
    assert kernel._last_torch is None
    kernel(*a)
    assert list(kernel._states)[-1] == (0, tuple(tuple(t.shape) for t in a)) and len(fake.launches) == 5
