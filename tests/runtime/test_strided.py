"""Strided operands (issue 43) on the CPU, through the fake driver (fake_driver.py) and the fake torch tensor of
test_call_path.py: an operand the kernel reaches through tensor maps only may be a strided view (a fused QKV
projection's q, k, v), taken as is: no copy, its tensor maps encoded over its own strides; what TMA cannot address
(an inner stride other than 1, a stride that is no multiple of 16 bytes, a map dimension over dimensions the strides
do not join, a broadcast, an output overlapping itself) is a located ArgumentError; an operand a raw pointer reaches
stays C-contiguous. runtime/layout.py holds the rules."""
from __future__ import annotations

import pytest

from conftest import SPECS_DIR
from fake_driver import FakeDriver
from schedgen.frontend.validate import load_spec
from schedgen.plan import launch as L
from schedgen.plan import plan
from schedgen.runtime import arrays, layout
from schedgen.runtime import kernel as K
from schedgen.runtime.arrays import ArgumentError
from test_call_path import Tensor, Torch

BASE = 0x7F0000000000


@pytest.fixture
def fakes(monkeypatch):
    return FakeDriver(monkeypatch), Torch(monkeypatch)


def _kernel(tmp_path, name):
    spec, src = load_spec(str(SPECS_DIR / name))
    rec = L.launch_record(plan(spec, src))
    (tmp_path / "launch.json").write_text(rec.to_json())
    (tmp_path / "kernel.cubin").write_bytes(b"CUBIN")
    return K.load_package(tmp_path), rec


def _strides(shape):
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


def _qkv(B, S, H, D, ptr=BASE):
    """q, k, v as the views qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2] of one [B, S, 3, H, D] bf16 tensor."""
    st = _strides((B, S, 3, H, D))
    view = (st[0], st[1], st[3], st[4])
    return [Tensor((B, S, H, D), "bf16", ptr=ptr + j * H * D * 2, strides=view) for j in range(3)]


def _maps_of(fake, ptr):
    return [e for e in fake.encoded if e[0] == ptr]


# ---------------------------------------------------------------------------------------------- which operands

def test_tmap_only_operands_per_family():
    def flags(name):
        spec, src = load_spec(str(SPECS_DIR / name))
        rec = L.launch_record(plan(spec, src))
        return {o.name: ok for o, ok in zip(rec.operands, layout.tmap_only(rec))}
    assert flags("attention_bf16_dynamic.yaml") == dict(q=True, k=True, v=True, o=True)
    # the log-sum-exp is written through its pointer; a matmul's bias read through one; grouped outputs both ways
    assert flags("attention_gqa_causal_bf16_dynamic.yaml") == dict(q=True, k=True, v=True, o=True, lse=False)
    assert flags("matmul_bias_gelu_bf16.yaml") == dict(x=True, w=True, bias=False, y=True)
    assert flags("grouped_moe_mixtral_bf16_dynamic.yaml") == dict(x=True, w=True, offsets=False, out=False)
    assert set(flags("softmax_bf16.yaml").values()) == {False}          # rowwise: raw pointers


# ---------------------------------------------------------------------------------------------- accepted as is

def test_fused_qkv_views_are_taken_without_a_copy(tmp_path, fakes):
    """q, k, v of one [B, S, 3, H, D] tensor: launched over the views' own pointers, each tensor map with the real
    strides (batch S*3*H*D, sequence 3*H*D elements), no buffer allocated, the output contiguous."""
    fake, torch = fakes
    kernel, rec = _kernel(tmp_path, "attention_bf16_dynamic.yaml")
    B, S, H, D = 2, 256, 16, 128
    q, k, v = _qkv(B, S, H, D)
    out = kernel(q, k, v)
    assert len(fake.launches) == 1 and fake.buffers == []             # no copy of any input
    assert out.shape == (B, S, H, D) and out.is_contiguous() and torch.allocs == [(B, S, H, D)]
    for t in (q, k, v):
        (m,) = _maps_of(fake, t.ptr)
        assert m[2] == (B, S, H * D) and m[3] == (S * 3 * H * D * 2, 3 * H * D * 2, 2)
    (o,) = _maps_of(fake, out.ptr)
    assert o[3] == (S * H * D * 2, H * D * 2, 2)                        # the planner's strides, contiguous output
    # again: the launch state of this layout is cached (nothing encoded or packed again)
    before = len(fake.encoded)
    kernel(q, k, v)
    assert len(fake.encoded) == before and len(fake.params) == 1 and fake.sets == []


def test_a_repeated_strided_call_stays_on_the_fast_path(tmp_path, fakes):
    """The second call with the same strided views: the fast path's functions, the strided pass and the LRU only
    (no classification, binding, resolution or encoding), nothing re-packed; a contiguous call enters nothing new."""
    from test_hot_path import HOT, FakeOp, _entered
    fake, _ = fakes
    kernel, rec = _kernel(tmp_path, "attention_bf16_dynamic.yaml")
    kernel.torch_op = FakeOp()                                        # a package's kernel: its op's routing rule
    q, k, v = _qkv(2, 256, 16, 128)
    kernel(q, k, v)
    states, encoded, sets = dict(kernel._states), len(fake.encoded), len(fake.sets)
    entered = _entered(lambda: kernel(q, k, v))
    assert set(entered) <= HOT | {"Kernel._torch_strided", "Kernel._torch_strided_state"}, entered
    assert entered.count("_torch_tensors") == 2 and entered.count("Kernel._torch_strided_state") == 1
    assert dict(kernel._states) == states and len(fake.encoded) == encoded and len(fake.sets) == sets
    dense = [Tensor(t.shape, "bf16", ptr=t.ptr) for t in (q, k, v)]
    kernel(*dense)
    assert set(_entered(lambda: kernel(*dense))) <= HOT and kernel.torch_op.calls == []


def test_strided_and_contiguous_calls_of_one_shape_keep_their_own_maps(tmp_path, fakes):
    """A layout is part of the launch state's key: a contiguous call after a strided one (same shapes, same
    pointers) encodes the planner's strides, and the strided call after it its own again."""
    fake, _ = fakes
    kernel, rec = _kernel(tmp_path, "attention_bf16_dynamic.yaml")
    B, S, H, D = 2, 128, 16, 128
    strided = _qkv(B, S, H, D)
    dense = [Tensor((B, S, H, D), "bf16", ptr=t.ptr) for t in strided]
    for ins in (dense, strided, dense, strided):
        kernel(*ins)
    q_args = [g["args"][0] for g in fake.launches]
    assert q_args[0] == q_args[2] and q_args[1] == q_args[3] and q_args[0] != q_args[1]
    assert sorted({e[3] for e in _maps_of(fake, strided[0].ptr)}) == sorted(
        {(S * H * D * 2, H * D * 2, 2), (S * 3 * H * D * 2, 3 * H * D * 2, 2)})


def test_gqa_heads_split_from_one_projection(tmp_path, fakes):
    """qkv.view(B, S, H + 2 * Hkv, D) split along heads: q = [:, :, :H], k and v the next Hkv heads each."""
    fake, _ = fakes
    kernel, rec = _kernel(tmp_path, "attention_gqa_causal_bf16_dynamic.yaml")
    B, S, H, Hkv, D = 2, 100, 32, 8, 128
    row = (H + 2 * Hkv) * D
    st = (S * row, row, D, 1)
    q = Tensor((B, S, H, D), "bf16", ptr=BASE, strides=st)
    k = Tensor((B, S, Hkv, D), "bf16", ptr=BASE + H * D * 2, strides=st)
    v = Tensor((B, S, Hkv, D), "bf16", ptr=BASE + (H + Hkv) * D * 2, strides=st)
    o, lse = kernel(q, k, v)
    assert len(fake.launches) == 1 and len(fake.buffers) == 1            # the tile counters' pool: no copy
    for t, heads in ((q, H), (k, Hkv), (v, Hkv)):
        (m,) = _maps_of(fake, t.ptr)
        assert m[2] == (B, S, heads * D) and m[3] == (S * row * 2, row * 2, 2)
    assert lse.shape == (B, H, S) and lse.is_contiguous()


def test_a_column_block_of_a_wider_matrix(tmp_path, fakes):
    """A matmul's lhs as x[:, :K] of a wider [M, K + 64] matrix (a row stride of (K + 64) * 2 bytes), and its
    output written through a strided out= (y[:, :N] of a wider buffer): both through their tensor maps."""
    fake, _ = fakes
    kernel, rec = _kernel(tmp_path, "matmul_bf16_dynamic.yaml")
    a, b = rec.inputs
    M, K = 256, a.shape[1]
    N = rec.outputs[0].shape[1]
    x = Tensor((M, K), "bf16", ptr=BASE, strides=(K + 64, 1))
    w = Tensor(b.shape, "bf16", ptr=BASE + (1 << 32))
    y = Tensor((M, N), "bf16", ptr=BASE + (2 << 32), strides=(N + 128, 1))
    assert kernel(x, w, out=y) is y
    assert _maps_of(fake, x.ptr)[0][3] == ((K + 64) * 2, 2)
    assert _maps_of(fake, y.ptr)[0][3] == ((N + 128) * 2, 2)


def test_the_general_path_takes_strided_device_arrays(tmp_path, fakes):
    """A __cuda_array_interface__ object (cupy, numba) with byte strides: the general path's checks accept it and
    its map gets the real strides; check_args says the same with no GPU."""
    fake, _ = fakes
    kernel, rec = _kernel(tmp_path, "scale_f32.toml")
    (x,) = rec.inputs
    B, R, C = x.shape

    class Cai:
        def __init__(self, ptr, strides=None):
            self.__cuda_array_interface__ = {"shape": (B, R, C), "typestr": "<f4", "data": (ptr, False),
                                             "strides": strides, "version": 3}

        def __dlpack_device__(self):
            return (2, 0)

    wide = Cai(BASE, strides=((R * (C + 32)) * 4, (C + 32) * 4, 4))       # rows of C + 32 floats
    out = Cai(BASE + (1 << 36))
    assert kernel.check_args([wide], [out]) == {}
    assert kernel(wide, out=out, stream=5) is out
    (m,) = _maps_of(fake, BASE)
    assert m[3] == (R * (C + 32) * 4, (C + 32) * 4, 4)
    assert _maps_of(fake, BASE + (1 << 36))[0][3] == (R * C * 4, C * 4, 4)
    odd = Cai(BASE, strides=(R * C * 4, C * 4 + 2, 4))
    with pytest.raises(ArgumentError, match=r"^x: byte strides .* are not multiples of its 4-byte elements"):
        kernel(odd, out=out, stream=5)


# ---------------------------------------------------------------------------------------------- refused, located

def test_a_transposed_inner_dimension_is_refused_with_what_tma_needs(tmp_path, fakes):
    fake, _ = fakes
    kernel, rec = _kernel(tmp_path, "attention_bf16_dynamic.yaml")
    B, S, H, D = 2, 128, 16, 128
    q, k, v = _qkv(B, S, H, D)
    bad = Tensor((B, S, H, D), "bf16", ptr=BASE, strides=(S * H * D, H * D, 1, H))     # D and H swapped in memory
    with pytest.raises(ArgumentError) as info:
        kernel(bad, k, v)
    assert str(info.value) == (
        f"q: its innermost dimension has stride {H}, not 1 (a transposed view? strides {(S * H * D, H * D, 1, H)}); "
        f"TMA needs the innermost dimension contiguous (stride 1), every other stride a positive multiple of 16 "
        f"bytes and the base address 16-byte aligned; make it contiguous first: q.contiguous()")
    assert fake.launches == [] and fake.encoded == []
    with pytest.raises(ArgumentError, match=r"^q: its innermost dimension has stride"):   # no GPU needed
        kernel.check_args([bad, k, v], None)


def test_map_dimensions_over_unjoined_dimensions_are_refused(tmp_path, fakes):
    """attention reads q as [B, S, H*D]: heads and head_dim must address memory as one; a [B, H, S, D] array
    permuted to [B, S, H, D] (heads apart by S*D) cannot be read that way."""
    fake, _ = fakes
    kernel, rec = _kernel(tmp_path, "attention_bf16_dynamic.yaml")
    B, S, H, D = 2, 128, 16, 128
    _, k, v = _qkv(B, S, H, D)
    bhsd = Tensor((B, S, H, D), "bf16", ptr=BASE, strides=(H * S * D, D, S * D, 1))
    with pytest.raises(ArgumentError) as info:
        kernel(bhsd, k, v)
    assert str(info.value).startswith(
        f"q: the kernel's tensor map reads it as extents {(B, S, H * D)} (dense strides {(S * H * D, H * D, 1)}), "
        f"whose dimension 2 spans its dimensions 2..3 (shape {(H, D)}), which strides {(H * S * D, D, S * D, 1)} "
        f"do not join")
    assert fake.launches == []


@pytest.mark.parametrize("strides, text", [
    ((4096 + 4, 1), "would step 8200 bytes in its dimension 0"),                        # 2 B x 4100: not 16 B
    ((0, 1), "dimension 0 has stride 0 (a broadcast (expanded) view"),
    ((-4096, 1), "dimension 0 has stride -4096 (a reversed view"),
])
def test_strides_tma_cannot_take(tmp_path, fakes, strides, text):
    fake, _ = fakes
    kernel, rec = _kernel(tmp_path, "add_bf16.yaml")
    x, y = rec.inputs
    with pytest.raises(ArgumentError) as info:
        kernel(Tensor(x.shape, "bf16", ptr=BASE, strides=strides), Tensor(y.shape, "bf16", ptr=BASE + (1 << 34)))
    assert str(info.value).startswith(f"{x.name}: ") and text in str(info.value), str(info.value)
    assert "TMA needs" in str(info.value) or "x.contiguous()" in str(info.value)
    assert fake.launches == []


def test_a_misaligned_view_is_refused(tmp_path, fakes):
    fake, _ = fakes
    kernel, rec = _kernel(tmp_path, "attention_bf16_dynamic.yaml")
    q, k, v = _qkv(2, 128, 16, 128, ptr=BASE + 8)
    with pytest.raises(ArgumentError, match=r"^q: data pointer 0x7f0000000008 is not 16-byte aligned"):
        kernel(q, k, v)


def test_raw_pointer_operands_stay_contiguous(tmp_path, fakes):
    """A matmul's bias (read through its pointer) and attention's log-sum-exp (written through one) must be
    C-contiguous: the kernel computes their addresses from the dense shape."""
    fake, _ = fakes
    kernel, rec = _kernel(tmp_path, "matmul_bias_gelu_bf16.yaml")
    x, w, bias = rec.inputs
    ins = [Tensor(o.shape, o.dtype, ptr=BASE + (i << 32)) for i, o in enumerate(rec.inputs)]
    item = arrays.DTYPES[bias.dtype].itemsize
    with pytest.raises(ArgumentError, match=rf"^bias: is not C-contiguous \(byte strides \({2 * item},\), expected "
                                            rf"\({item},\)\); make it contiguous first: bias.contiguous\(\)$"):
        kernel(ins[0], ins[1], Tensor(bias.shape, bias.dtype, ptr=BASE + (2 << 32), strides=(2,)))
    (tmp_path / "g").mkdir()
    kernel_g, rec_g = _kernel(tmp_path / "g", "attention_gqa_causal_bf16_dynamic.yaml")
    B, S = 1, 64
    ins = [Tensor((B, S) + tuple(o.shape[2:]), o.dtype, ptr=BASE + (i << 32)) for i, o in enumerate(rec_g.inputs)]
    o_out = Tensor((B, S, 32, 128), "bf16", ptr=BASE + (4 << 32))
    lse = Tensor((B, 32, S), "f32", ptr=BASE + (5 << 32), strides=(32 * 2 * S, 2 * S, 1))
    with pytest.raises(ArgumentError, match=r"^out\[lse\]: is not C-contiguous"):
        kernel_g(*ins, out=(o_out, lse))
    assert fake.launches == []


def test_an_overlapping_output_is_refused(tmp_path, fakes):
    fake, _ = fakes
    kernel, rec = _kernel(tmp_path, "add_bf16.yaml")
    x, y = rec.inputs
    rows, cols = x.shape
    ins = [Tensor(o.shape, o.dtype, ptr=BASE + (i << 34)) for i, o in enumerate(rec.inputs)]
    with pytest.raises(ArgumentError, match=r"^out\[o\]: strides \(8, 1\) make elements of shape .* share "
                                            r"addresses; an output the kernel writes must not overlap itself"):
        kernel(*ins, out=Tensor((rows, cols), "bf16", ptr=BASE + (3 << 34), strides=(8, 1)))
    assert fake.launches == []


# ---------------------------------------------------------------------------------------------- the rule itself

def test_tmap_strides_rule():
    bf16 = 2
    B, S, H, D = 2, 8, 4, 64
    dense = (S * H * D * bf16, H * D * bf16, bf16)
    # qkv[:, :, j] of [B, S, 3, H, D]: batch and sequence join (one run), heads and head_dim join
    assert layout.tmap_strides("q", (B, S, H, D), (S * 3 * H * D, 3 * H * D, D, 1), bf16, (B, S, H * D), dense) == (
        S * 3 * H * D * bf16, 3 * H * D * bf16, bf16)
    # contiguous: the planner's strides back
    assert layout.tmap_strides("q", (B, S, H, D), (S * H * D, H * D, D, 1), bf16, (B, S, H * D), dense) == dense
    # a map dimension of one element keeps its planned stride whatever the array's
    assert layout.tmap_strides("b", (4096,), (1,), bf16, (1, 4096), (8192, 2)) == (8192, 2)
    # a [B*H, S, D] map (bhsd) over [B, H, S, D] with padded sequences: batch and heads must join
    st = (H * (S + 8) * D, (S + 8) * D, D, 1)
    assert layout.tmap_strides("q", (B, H, S, D), st, bf16, (B * H, S, D), (S * D * bf16, D * bf16, bf16)) == (
        (S + 8) * D * bf16, D * bf16, bf16)
    padded = (H * (S + 8) * D + 64, (S + 8) * D, D, 1)                   # batches apart by more than H rows
    with pytest.raises(ArgumentError, match=r"whose dimension 0 spans its dimensions 0\.\.1"):
        layout.tmap_strides("q", (B, H, S, D), padded, bf16, (B * H, S, D), (S * D * bf16, D * bf16, bf16))
    # outputs: overlap refused, a gap between rows fine
    with pytest.raises(ArgumentError, match="must not overlap"):
        layout.check_strides("out[o]", (4, 8), (4, 1), output=True)
    layout.check_strides("out[o]", (4, 8), (16, 1), output=True)
    layout.check_strides("x", (4, 8), (4, 1), output=False)               # an input may overlap (reads only)
    layout.check_strides("x", (1, 8), (0, 1), output=False)               # a one-element dimension's stride: unused


# ---------------------------------------------------------------------------------------------- torch.compile

def _attention_op(tmp_path, name="attention_bf16_dynamic.yaml"):
    """The package of an attention spec with its torch op (a stand-in cubin: the op layer reads launch.json)."""
    spec, src = load_spec(str(SPECS_DIR / name))
    rec = L.launch_record(plan(spec, src))
    (tmp_path / "launch.json").write_text(rec.to_json())
    (tmp_path / "kernel.cubin").write_bytes(b"CUBIN")
    kernel = K.load_package(tmp_path, torch_op=True)
    assert kernel.torch_op is not None
    return kernel


def _graphs():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    return graphs, backend


def test_compile_traces_strided_qkv_views_without_a_copy(tmp_path):
    """torch.compile(fullgraph=True) over q, k, v sliced from one meta [B, S, 3, H, D] tensor: one graph whose
    kernel op takes the views (no contiguous copy, no clone), dynamic sizes included; a transposed inner dimension
    is the eager call's ArgumentError at trace time."""
    torch = pytest.importorskip("torch")
    kernel = _attention_op(tmp_path)
    B, S, H, D = 2, 256, 16, 128
    torch._dynamo.reset()
    graphs, backend = _graphs()
    f = torch.compile(lambda qkv: kernel(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]), fullgraph=True,
                      backend=backend, dynamic=True)
    for b, s in ((B, S), (3, 384), (4, 128)):   # (B = 1 would specialize: dynamo's 0/1 rule)
        qkv = torch.empty(b, s, 3, H, D, dtype=torch.bfloat16, device="meta")
        out = f(qkv)
        assert out.shape == (b, s, H, D) and out.device.type == "meta" and out.is_contiguous()
    assert len(graphs) == 1, "recompiled"
    code = graphs[0].code
    assert f"schedgen.{kernel.torch_op.name}" in code and "contiguous" not in code and "clone" not in code, code
    # the same with fake tensors and aot_eager (the op's fake implementation runs on the strided views)
    from torch._dynamo.testing import CompileCounterWithBackend
    from torch._subclasses.fake_tensor import FakeTensorMode
    torch._dynamo.reset()
    cnt = CompileCounterWithBackend("aot_eager")
    g = torch.compile(lambda qkv: kernel(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]), fullgraph=True, backend=cnt)
    with FakeTensorMode() as mode:
        out = g(mode.from_tensor(torch.empty(B, S, 3, H, D, dtype=torch.bfloat16)))
    assert type(out).__name__ == "FakeTensor" and out.shape == (B, S, H, D) and cnt.frame_count == 1
    torch._dynamo.reset()
    h = torch.compile(lambda q, k, v: kernel(q.transpose(2, 3), k, v), fullgraph=True, backend=backend)
    q = torch.empty(B, S, D, H, dtype=torch.bfloat16, device="meta")
    k = torch.empty(B, S, H, D, dtype=torch.bfloat16, device="meta")
    with pytest.raises(Exception, match=r"q: its innermost dimension has stride 16, not 1") as info:
        h(q, k, k)
    chain, exc = [], info.value
    while exc is not None:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    assert any(isinstance(e, ArgumentError) for e in chain)
    torch._dynamo.reset()


def test_meta_calls_take_strided_views_and_refuse_a_strided_pointer_operand(tmp_path):
    torch = pytest.importorskip("torch")
    kernel = _attention_op(tmp_path, "attention_gqa_causal_bf16_dynamic.yaml")
    B, S, H, Hkv, D = 2, 100, 32, 8, 128
    qkv = torch.empty(B, S, H + 2 * Hkv, D, dtype=torch.bfloat16, device="meta")
    q, k, v = qkv[:, :, :H], qkv[:, :, H:H + Hkv], qkv[:, :, H + Hkv:]
    o, lse = kernel(q, k, v)
    assert o.shape == (B, S, H, D) and lse.shape == (B, H, S)
    given = (torch.empty(B, S, 2 * H, D, dtype=torch.bfloat16, device="meta")[:, :, :H],   # o: strided, legal
             torch.empty(B, H, 2 * S, dtype=torch.float32, device="meta")[:, :, :S])        # lse: a raw pointer
    with pytest.raises(ArgumentError, match=r"^out\[lse\]: is not contiguous \(strides \(6400, 200, 1\)\); make it "
                                            r"contiguous first: lse.contiguous\(\)$"):
        kernel(q, k, v, out=given)
    assert kernel(q, k, v, out=(given[0], torch.empty(B, H, S, device="meta"))) is not None


def test_a_backward_step_takes_the_saved_views_it_can_read(tmp_path):
    """TorchOp.as_taken (what runtime/autograd.py hands a backward step): the wgmma attention backward reads q, k,
    v, o and dO through tensor maps, so strided views pass as they are; its log-sum-exp (a raw pointer), a
    transposed view and a misaligned offset become contiguous copies."""
    torch = pytest.importorskip("torch")
    overrides = {"schedule.backends": ["cuda"], "schedule.pipeline.kind": "warp_specialized"}
    spec, src = load_spec(str(SPECS_DIR / "attention_backward_bf16_4096.yaml"), overrides)
    rec = L.launch_record(plan(spec, src))
    (tmp_path / "launch.json").write_text(rec.to_json())
    (tmp_path / "kernel.cubin").write_bytes(b"CUBIN")
    op = K.load_package(tmp_path, torch_op=True).torch_op
    assert [o.name for o in rec.inputs] == ["q", "k", "v", "fwd_o", "grad_o", "lse"]
    B, S, H, D = rec.inputs[0].shape
    qkv = torch.empty(B, S, 3, H, D, dtype=torch.bfloat16, device="meta")
    dense = torch.empty(B, S, H, D, dtype=torch.bfloat16, device="meta")
    lse = torch.empty(B, H, 2 * S, dtype=torch.float32, device="meta")[:, :, :S]
    args = [qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dense, dense, lse]
    got = op.as_taken(args)
    assert all(g is a for g, a in zip(got[:5], args[:5]))                # no copy
    assert got[5] is not args[5] and got[5].is_contiguous()              # a raw pointer reads lse
    transposed = torch.empty(B, S, D, H, dtype=torch.bfloat16, device="meta").transpose(2, 3)
    flat = torch.empty(B * S * 3 * H * D + 4, dtype=torch.bfloat16, device="meta")
    odd = flat.as_strided((B, S, H, D), (S * 3 * H * D, 3 * H * D, D, 1), 4)   # 8 bytes past an aligned base
    got = op.as_taken([transposed, odd, *args[2:]])
    assert got[0].is_contiguous() and got[1].is_contiguous() and got[2] is args[2]
    assert op.as_taken(args[3:4] * 5 + [lse.contiguous()])[0] is args[3]   # all contiguous: the same tensors


# ---------------------------------------------------------------------------------------------- on the GPU

STRIDED_ON_GPU = """
import sys
sys.path.insert(0, sys.argv[1])
import torch
import importlib
from schedgen.runtime.arrays import ArgumentError
mod = importlib.import_module(sys.argv[2])
f = getattr(mod, sys.argv[2])
B, S, H, Hkv, D = 2, 512, 32, 8, 128
torch.manual_seed(0)
qkv = torch.randn(B, S, H + 2 * Hkv, D, device="cuda", dtype=torch.bfloat16)
q, k, v = qkv[:, :, :H], qkv[:, :, H:H + Hkv], qkv[:, :, H + Hkv:]
assert not q.is_contiguous()
o_ref, lse_ref = f(q.contiguous(), k.contiguous(), v.contiguous())
torch.cuda.synchronize()
# views in, no copy: the peak over the call is the outputs alone (a copy of q would add 8 MiB)
before = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
o, lse = f(q, k, v)
torch.cuda.synchronize()
outs = o.numel() * 2 + lse.numel() * 4
peak = torch.cuda.max_memory_allocated() - before
assert peak <= outs + (1 << 20), (peak, outs)
assert torch.equal(o, o_ref) and torch.equal(lse, lse_ref), "strided views gave other results than copies"
# a strided out=: o written into a head range of a wider buffer, the rest untouched
wide = torch.full((B, S, 2 * H, D), float("nan"), device="cuda", dtype=torch.bfloat16)
lse_out = torch.empty_like(lse)
f(q, k, v, out=(wide[:, :, H:], lse_out))
torch.cuda.synchronize()
assert torch.equal(wide[:, :, H:], o_ref) and bool(wide[:, :, :H].isnan().all())
# a transposed inner dimension: refused, nothing launched
try:
    f(q.transpose(2, 3).contiguous().transpose(2, 3), k, v)
except ArgumentError as e:
    assert "innermost dimension has stride" in str(e), e
else:
    raise AssertionError("a transposed q was accepted")
# torch.compile over the views (aot_eager: the op's real implementation runs the kernel on the views)
g = torch.compile(lambda x: f(x[:, :, :H], x[:, :, H:H + Hkv], x[:, :, H + Hkv:]), fullgraph=True,
                  backend="aot_eager")
oc, lc = g(qkv)
torch.cuda.synchronize()
assert torch.equal(oc, o_ref) and torch.equal(lc, lse_ref)
print("strided on gpu ok")
"""


@pytest.mark.gpu
def test_strided_qkv_views_match_contiguous_copies_on_gpu(tmp_path):
    """On the H200 (a fresh interpreter: torch cannot be imported into the pytest process there): GQA attention on
    q, k, v sliced from one [B, S, H + 2 Hkv, D] projection gives the results of contiguous copies bit for bit,
    with no copy (peak memory: the outputs alone), into a strided out= too, and under torch.compile."""
    import importlib.util
    import os
    import subprocess
    import sys
    from conftest import ROOT
    from schedgen.build import build_spec, package
    from schedgen.cache import Cache
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    built = build_spec(str(SPECS_DIR / "attention_gqa_causal_bf16_dynamic.yaml"), cache=Cache(tmp_path / "c"))
    package(built, tmp_path / "pkgs")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-c", STRIDED_ON_GPU, str(tmp_path / "pkgs"), built.plan.launch.name],
                         capture_output=True, text=True, env=env, timeout=900)
    assert res.returncode == 0 and "strided on gpu ok" in res.stdout, res.stderr[-3000:]
