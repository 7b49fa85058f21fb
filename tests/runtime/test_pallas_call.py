"""The Pallas call path (schedgen/runtime/pallas_call.py) on the CPU: the package function inside jax.jit (traced,
lowered for CUDA, and run in Mosaic GPU interpret mode), the backend a call chooses, jax.grad's error, one trace per
shape for eager and jitted callers, out= semantics on both backends, ArgumentErrors for tracers at trace time, and
the torch route through plgpu.as_torch_kernel (wired here with stand-ins; the real run is marked gpu)."""
from __future__ import annotations

import importlib
import inspect
import json
import shutil
import sys

import ml_dtypes
import numpy as np
import pytest

from conftest import SPECS_DIR
from schedgen.build import build_spec, package
from schedgen.cache import Cache
from schedgen.reference import reference, rel_error, tolerance
from schedgen.runtime import driver, pallas_call
from schedgen.runtime.arrays import DTYPES, ArgumentError
from schedgen.runtime.kernel import load_package

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: E402

BF16 = ml_dtypes.bfloat16
SIZES = {"M": 64, "N": 512}
INTERPRET = plgpu.InterpretGPUParams()


@pytest.fixture(scope="module")
def gelu(tmp_path_factory):
    """gelu_bias_bf16 at M=64, N=512 (two tiles per dimension), built for both backends and imported."""
    tmp = tmp_path_factory.mktemp("pc")
    built = build_spec(SPECS_DIR / "gelu_bias_bf16.yaml", SIZES, cache=Cache(tmp / "c"))
    root = package(built, tmp / "out")
    sys.path.insert(0, str(tmp / "out"))
    sys.modules.pop("gelu_bias_bf16", None)
    try:
        mod = importlib.import_module("gelu_bias_bf16")
        # jax's first interpreted kernel in a process imports modules that register a config option, which changes
        # jax's tracing context once (every jitted function retraces once after it): run one before counting
        mod.gelu_bias_bf16(*host_inputs().values(), interpret=INTERPRET)
        yield mod, built, root
    finally:
        sys.path.remove(str(tmp / "out"))
        sys.modules.pop("gelu_bias_bf16", None)


def host_inputs(seed=0, m=64):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((m, 512)).astype(BF16), "w": rng.standard_normal((m, 512)).astype(BF16),
            "b": rng.standard_normal(512).astype(BF16)}


def expected(built, ins):
    return reference(built.spec, SIZES, ins)["y"]


class Counted:
    """Wraps a Pallas module's make(): counts the kernels built and the traces of each (a traced kernel's Python
    body runs once per trace; a cached one never again)."""

    def __init__(self, make):
        self.inner, self.made, self.traces = make, [], 0
        self.__wrapped__ = make   # inspect.signature (the runtime asks whether make takes sizes) sees make's own

    def __call__(self, *args, **kwargs):
        self.made.append(kwargs.get("sizes"))
        kern = self.inner(*args, **kwargs)

        def counted(*a):
            self.traces += 1
            return kern(*a)
        return counted


@pytest.fixture
def fresh(gelu):
    """A new Kernel over the built package (an empty kernel cache) with its module's make() counted."""
    _, built, root = gelu
    k = load_package(root)
    mod = k.pallas_module()
    counted = Counted(mod.make)
    assert ("sizes" in inspect.signature(counted).parameters) == ("sizes" in inspect.signature(mod.make).parameters)
    mod.make = counted
    return k, counted, built


# ---------------------------------------------------------------------------------------------- backend choice

def test_default_backend_is_pallas_for_jax_and_cuda_for_the_rest(gelu):
    mod, _, _ = gelu
    k = mod.kernel
    ins = host_inputs()
    jx = [jnp.asarray(a) for a in ins.values()]
    assert pallas_call.choose_backend(k, list(ins.values()), None, None) == "cuda"
    assert pallas_call.choose_backend(k, jx, None, None) == "pallas"
    assert pallas_call.choose_backend(k, [jx[0], ins["w"], ins["b"]], None, None) == "pallas"
    assert pallas_call.choose_backend(k, jx, None, "cuda") == "cuda"     # concrete jax arrays: eager CUDA is fine
    seen = []
    jax.make_jaxpr(lambda *a: seen.append(pallas_call.choose_backend(k, a, None, None)) or a[0])(*jx)
    assert seen == ["pallas"]


def test_default_backend_without_pallas_is_cuda_and_tracers_say_why(gelu, tmp_path):
    _, _, root = gelu
    folder = tmp_path / "cuda_only"
    shutil.copytree(root, folder)
    rec = json.loads((folder / "launch.json").read_text())
    rec["backends"] = ["cuda"]
    (folder / "launch.json").write_text(json.dumps(rec))
    k = load_package(folder)
    jx = [jnp.asarray(a) for a in host_inputs().values()]
    assert pallas_call.choose_backend(k, jx, None, None) == "cuda"
    with pytest.raises(ArgumentError, match=r"^x: is a jax tracer .*built without the pallas backend"):
        jax.make_jaxpr(lambda *a: k(*a))(*jx)


def test_cuda_backend_with_tracers_is_an_argument_error(gelu):
    mod, _, _ = gelu
    jx = [jnp.asarray(a) for a in host_inputs().values()]
    with pytest.raises(ArgumentError) as info:
        jax.jit(lambda *a: mod.gelu_bias_bf16(*a, backend="cuda")).trace(*jx)
    msg = str(info.value)
    assert msg.startswith("x: is a jax tracer (a call inside jax.jit, vmap, grad or make_jaxpr); the CUDA backend")
    assert "jax.ffi" in msg and msg.endswith('use backend="pallas" (the default for jax arrays)')


def test_unbuilt_backend_is_still_a_value_error(gelu):
    mod, _, _ = gelu
    with pytest.raises(ValueError, match=r"^gelu_bias_bf16: backend 'triton' was not built; built: cuda, pallas$"):
        mod.gelu_bias_bf16(*host_inputs().values(), backend="triton")


@pytest.mark.skipif(driver.available()[0], reason="a GPU is present")
def test_numpy_by_default_still_goes_to_cuda(gelu):
    mod, _, _ = gelu
    with pytest.raises(RuntimeError, match="the CUDA backend needs an NVIDIA Hopper GPU"):
        mod.gelu_bias_bf16(*host_inputs().values())


# ---------------------------------------------------------------------------------------------- jax.jit

def test_jit_through_the_package_function_runs_in_interpret_mode(gelu):
    mod, built, _ = gelu
    ins = host_inputs()
    jx = [jnp.asarray(a) for a in ins.values()]
    eager = mod.gelu_bias_bf16(*jx, interpret=INTERPRET)
    assert isinstance(eager, jax.Array) and eager.shape == (64, 512) and eager.dtype == BF16
    ref = expected(built, ins)
    assert rel_error(np.asarray(eager), ref) <= tolerance("bf16", True)

    @jax.jit
    def caller(x, w, b):
        return mod.gelu_bias_bf16(x, w, b, interpret=INTERPRET).astype(jnp.float32) * 2.0

    out = caller(*jx)
    assert isinstance(out, jax.Array) and out.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(out), np.asarray(eager).astype(np.float32) * 2.0)


def test_jit_lowers_for_cuda_with_one_mosaic_kernel(gelu):
    mod, _, _ = gelu
    jx = [jnp.asarray(a) for a in host_inputs().values()]
    jaxpr = str(jax.make_jaxpr(lambda *a: mod.gelu_bias_bf16(*a))(*jx))
    assert "custom_vjp_call" in jaxpr and "kernel_name='map_gelu_bias_bf16_32x256_s3_wg2'" in jaxpr
    text = jax.jit(lambda *a: mod.gelu_bias_bf16(*a) + 1).trace(*jx).lower(lowering_platforms=("cuda",)).as_text()
    assert text.count("stablehlo.custom_call @mosaic_gpu_v2(") == 1


def test_numpy_inputs_on_pallas_give_numpy(gelu):
    mod, built, _ = gelu
    ins = host_inputs(seed=1)
    out = mod.gelu_bias_bf16(*ins.values(), backend="pallas", interpret=INTERPRET)
    assert isinstance(out, np.ndarray) and out.dtype == BF16
    assert rel_error(out, expected(built, ins)) <= tolerance("bf16", True)


# ---------------------------------------------------------------------------------------------- grad

def test_grad_through_the_kernel_is_a_clear_error(gelu):
    mod, _, _ = gelu
    x, w, b = (jnp.asarray(a) for a in host_inputs().values())

    def loss(x):
        return mod.gelu_bias_bf16(x, w, b, interpret=INTERPRET).astype(jnp.float32).sum()

    msg = (r"^gelu_bias_bf16: this package was built without a backward pass, so jax.grad / jax.vjp cannot go "
           r"through it: add a `backward:` section to its spec")
    with pytest.raises(NotImplementedError, match=msg):
        jax.grad(loss)(x)
    with pytest.raises(NotImplementedError, match=msg):
        jax.jit(jax.grad(loss)).trace(x)
    primal, back = jax.vjp(lambda x: mod.gelu_bias_bf16(x, w, b, interpret=INTERPRET), x)   # the forward runs
    assert primal.shape == (64, 512)
    with pytest.raises(NotImplementedError, match=msg):
        back(jnp.ones_like(primal))


# ---------------------------------------------------------------------------------------------- no retrace

def test_second_eager_call_does_not_retrace(fresh):
    k, counted, _ = fresh
    jx = [jnp.asarray(a) for a in host_inputs().values()]
    first = k(*jx, interpret=INTERPRET)
    assert len(counted.made) == 1 and counted.traces == 1
    jx2 = [jnp.asarray(a) for a in host_inputs(seed=5).values()]
    second = k(*jx2, interpret=INTERPRET)
    assert len(counted.made) == 1 and counted.traces == 1, "a second call with the same shapes retraced"
    assert not np.array_equal(np.asarray(first), np.asarray(second))   # it really ran on the new inputs
    k(*host_inputs(seed=6).values(), backend="pallas", interpret=INTERPRET)   # numpy: the same kernel
    assert counted.traces == 1
    k(*jx, interpret=plgpu.InterpretGPUParams(detect_races=True))    # other interpret params: another kernel
    assert len(counted.made) == 2


def test_jitted_caller_does_not_retrace_per_call(fresh):
    k, counted, _ = fresh
    outer = []

    @jax.jit
    def caller(x, w, b):
        outer.append(1)
        return k(x, w, b, interpret=INTERPRET)

    for seed in range(3):
        caller(*(jnp.asarray(a) for a in host_inputs(seed).values()))
    assert len(outer) == 1 and counted.traces == 1 and len(counted.made) == 1
    k(*(jnp.asarray(a) for a in host_inputs().values()), interpret=INTERPRET)   # eager after jit: same kernel
    assert counted.traces == 1


def test_run_into_mode_is_cached_too(fresh):
    k, counted, built = fresh
    for seed in range(2):
        ins = host_inputs(seed)
        out = np.full((64, 512), np.nan, BF16)
        assert k(*ins.values(), backend="pallas", out=out, interpret=INTERPRET) is out
        assert rel_error(out, expected(built, ins)) <= tolerance("bf16", True)
    assert len(counted.made) == 1
    assert counted.traces == 1
    ins = host_inputs(seed=4)
    poisoned = np.full((64, 512), np.nan, BF16)
    for _ in range(2):    # the module's run_into contract, through the same cached kernel
        (res,) = k._pallas.run_into(list(ins.values()), [poisoned], interpret=INTERPRET)
        assert rel_error(np.asarray(res), expected(built, ins)) <= tolerance("bf16", True)
    assert len(counted.made) == 1 and counted.traces == 1


# ---------------------------------------------------------------------------------------------- out=

@pytest.mark.parametrize("backend", [None, "cuda", "pallas"])
def test_jax_array_as_out_is_refused_on_every_backend(gelu, backend):
    mod, _, _ = gelu
    jx = [jnp.asarray(a) for a in host_inputs().values()]
    for ins in (jx, list(host_inputs().values())):
        with pytest.raises(ArgumentError) as info:
            mod.gelu_bias_bf16(*ins, out=jnp.zeros((64, 512), BF16), backend=backend)
        assert str(info.value) == ("out[y]: is a jax array; jax arrays are immutable: use the return value "
                                   "(out= takes numpy, torch or cupy arrays, written in place)")


def test_out_inside_jit_is_refused(gelu):
    mod, _, _ = gelu
    jx = [jnp.asarray(a) for a in host_inputs().values()]
    host_out = np.zeros((64, 512), BF16)
    with pytest.raises(ArgumentError, match=r"^out: gelu_bias_bf16 is being traced by jax .*use the return value"):
        jax.make_jaxpr(lambda *a: mod.gelu_bias_bf16(*a, out=host_out))(*jx)


def test_numpy_out_with_jax_inputs_is_written_in_place(gelu):
    mod, built, _ = gelu
    ins = host_inputs(seed=3)
    out = np.full((64, 512), np.nan, BF16)
    got = mod.gelu_bias_bf16(*(jnp.asarray(a) for a in ins.values()), out=out, interpret=INTERPRET)
    assert got is out
    assert rel_error(out, expected(built, ins)) <= tolerance("bf16", True)


# ---------------------------------------------------------------------------------------------- errors at trace time

TRACE_CASES = [
    ("x-shape", {"x": (64, 256)}, {}, "x: expected shape (64, 512), got (64, 256): dimension 1 is fixed at 512"),
    ("b-rank", {"b": (1, 512)}, {}, "b: expected shape (512,), got (1, 512)"),
    ("w-dtype", {}, {"w": jnp.float32}, "w: expected bf16, got float32; convert with w.astype(jnp.bfloat16)"),
]


@pytest.mark.parametrize("shapes,dtypes,message", [c[1:] for c in TRACE_CASES], ids=[c[0] for c in TRACE_CASES])
def test_tracers_with_bad_shapes_fail_at_trace_time(gelu, shapes, dtypes, message):
    mod, _, _ = gelu
    good = {"x": (64, 512), "w": (64, 512), "b": (512,)}
    specs = [jax.ShapeDtypeStruct(shapes.get(n, s), dtypes.get(n, jnp.bfloat16)) for n, s in good.items()]
    with pytest.raises(ArgumentError) as info:
        jax.jit(lambda *a: mod.gelu_bias_bf16(*a)).trace(*specs)
    assert str(info.value) == message


def test_stream_is_for_the_cuda_backend(gelu):
    mod, _, _ = gelu
    jx = [jnp.asarray(a) for a in host_inputs().values()]
    for backend in (None, "pallas"):
        with pytest.raises(ArgumentError, match=r'^stream: is for backend="cuda"; the pallas backend runs on jax'):
            mod.gelu_bias_bf16(*jx, stream=7, backend=backend)


def test_interpret_means_pallas(gelu):
    mod, built, _ = gelu
    ins = host_inputs(seed=2)
    out = mod.gelu_bias_bf16(*ins.values(), interpret=INTERPRET)        # numpy + interpret: the Pallas kernel
    assert isinstance(out, np.ndarray) and rel_error(out, expected(built, ins)) <= tolerance("bf16", True)
    with pytest.raises(ArgumentError, match=r"^interpret: runs the Pallas kernel in jax's Mosaic GPU interpreter; "
                                            r"the CUDA backend has none"):
        mod.gelu_bias_bf16(*ins.values(), interpret=INTERPRET, backend="cuda")


def test_other_array_kinds_are_refused_on_pallas(gelu):
    mod, _, _ = gelu

    class Cai:
        __cuda_array_interface__ = {"shape": (512,), "typestr": "<f4", "data": (0, False), "version": 3}

    x, w, _ = host_inputs().values()
    with pytest.raises(ArgumentError, match=r"^b: the pallas backend takes jax, numpy or torch arrays, got a "
                                            r"cuda_array_interface array"):
        mod.gelu_bias_bf16(x, w, Cai(), backend="pallas")


# ---------------------------------------------------------------------------------------------- dynamic sizes

DYNAMIC_MODULE = '''
import jax
import jax.numpy as jnp

def sizes_of(inputs):
    return {"M": int(inputs[0].shape[0])}

def make(sizes=None, interpret=None, outputs_as_refs=False):
    m = sizes["M"]
    def kern(x, w, b, *refs):
        assert x.shape == (m, 512)
        y = (x.astype(jnp.float32) * w.astype(jnp.float32) + b.astype(jnp.float32)).astype(x.dtype)
        if outputs_as_refs:
            refs[0][...] = y
            return ()
        return (y,)
    return kern
'''


@pytest.fixture
def dynamic(gelu, tmp_path):
    """The gelu package with M made dynamic (1..256, a multiple of 32) and a hand-written Pallas module that
    keeps the generated modules' contract (make(sizes, ...)) in plain jnp, so it runs anywhere."""
    _, _, root = gelu
    folder = tmp_path / "dyn"
    shutil.copytree(root, folder)
    rec = json.loads((folder / "launch.json").read_text())
    rec["sizes"] = [{"name": "M", "min": 1, "max": 256, "multiple_of": 32}]
    for o in rec["inputs"][:2] + rec["outputs"]:
        o["shape"][0] = "M"
    (folder / "launch.json").write_text(json.dumps(rec))
    (folder / "pallas_kernel.py").write_text(DYNAMIC_MODULE)
    k = load_package(folder)
    counted = Counted(k.pallas_module().make)
    k.pallas_module().make = counted
    return k, counted


def test_dynamic_sizes_build_one_kernel_per_size(dynamic):
    k, counted = dynamic
    for m in (64, 128, 64, 128):
        ins = host_inputs(m=m)
        out = k(*(jnp.asarray(a) for a in ins.values()))
        assert out.shape == (m, 512)
        want = (ins["x"].astype(np.float32) * ins["w"].astype(np.float32) + ins["b"].astype(np.float32))
        np.testing.assert_allclose(np.asarray(out, np.float32), want.astype(BF16).astype(np.float32))
    assert counted.made == [{"M": 64}, {"M": 128}] and counted.traces == 2

    caller = jax.jit(lambda *a: k(*a))
    for m in (64, 96, 96):
        caller(*(jnp.asarray(a) for a in host_inputs(m=m).values()))
    assert counted.made == [{"M": 64}, {"M": 128}, {"M": 96}] and counted.traces == 3
    out = np.zeros((96, 512), BF16)
    k(*host_inputs(m=96).values(), backend="pallas", out=out)
    assert counted.made[-1] == {"M": 96} and np.any(out != 0)


def test_dynamic_size_out_of_range_at_trace_time(dynamic):
    k, counted = dynamic
    specs = [jax.ShapeDtypeStruct(s, jnp.bfloat16) for s in ((100, 512), (100, 512), (512,))]
    with pytest.raises(ArgumentError, match=r"^x: dimension 0 \(M\) is 100; M "):
        jax.jit(lambda *a: k(*a)).trace(*specs)
    specs[1] = jax.ShapeDtypeStruct((64, 512), jnp.bfloat16)
    specs[0] = jax.ShapeDtypeStruct((32, 512), jnp.bfloat16)
    with pytest.raises(ArgumentError, match=r"^w: dimension 0 \(M\) is 64, but x dimension 0 gave M = 32"):
        jax.jit(lambda *a: k(*a)).trace(*specs)
    assert counted.made == []


def test_module_without_sizes_and_a_dynamic_record_says_rebuild(dynamic):
    k, _ = dynamic
    (k.root / "pallas_kernel.py").write_text(DYNAMIC_MODULE.replace("def make(sizes=None, ", "def make("))
    k = load_package(k.root)     # a module rendered before the sizes contract, under a record with a dynamic M
    with pytest.raises(RuntimeError, match=r"pallas_kernel.py predates dynamic sizes .* declares M: rebuild"):
        k(*(jnp.asarray(a) for a in host_inputs().values()))


# ---------------------------------------------------------------------------------------------- torch

class _TorchDtype:
    __module__ = "torch"

    def __str__(self):
        return "torch.bfloat16"


class _Device:
    def __init__(self, type_):
        self.type = type_

    def __str__(self):
        return self.type


class _Tensor:
    """Enough of a torch tensor for classify/describe (a stand-in: torch is not installed in CI)."""
    __module__ = "torch"

    def __init__(self, shape, device="cuda"):
        self.shape, self.dtype, self.device, self.copied = tuple(shape), _TorchDtype(), _Device(device), None

    def data_ptr(self):
        return 0

    def copy_(self, other):
        self.copied = other
        return self


class _Stream:
    def __init__(self, name, log):
        self.name, self.log = name, log

    def wait_stream(self, other):
        self.log.append(f"{self.name} waits {other.name}")


def _fake_torch(log, current):
    """torch.cuda's device / stream calls, logged (as_torch_kernel launches on the default stream)."""
    import contextlib
    import types
    default = _Stream("default", log)
    streams = {"default": default, "side": _Stream("side", log)}
    cuda = types.SimpleNamespace(
        device=lambda d: contextlib.nullcontext(log.append(f"on {d}")),
        current_stream=lambda d: streams[current[0]], default_stream=lambda d: default)
    return types.SimpleNamespace(cuda=cuda)


def test_torch_tensors_go_through_as_torch_kernel(gelu, monkeypatch):
    _, _, root = gelu
    k = load_package(root)
    wrapped, log, current = [], [], ["default"]

    def fake_as_torch_kernel(fn):
        wrapped.append(fn)

        def launch(*ts):
            log.append("launch")
            return (("result", ts),)
        return launch

    monkeypatch.setitem(sys.modules, "torch", _fake_torch(log, current))

    monkeypatch.setattr(plgpu, "as_torch_kernel", fake_as_torch_kernel)
    ts = [_Tensor((64, 512)), _Tensor((64, 512)), _Tensor((512,))]
    assert pallas_call.choose_backend(k, ts, None, "pallas") == "pallas"
    assert pallas_call.choose_backend(k, ts, None, None) == "cuda"      # torch by default: the cubin
    r1 = k(*ts, backend="pallas")
    r2 = k(*ts, backend="pallas")
    assert r1 == ("result", tuple(ts)) and r2 == r1
    assert len(wrapped) == 1 and callable(wrapped[0])                    # one wrap per sizes, kept
    out = _Tensor((64, 512))
    assert k(*ts, backend="pallas", out=out) is out and out.copied == ("result", tuple(ts))
    assert log == ["on cuda", "launch"] * 3
    log.clear()
    current[0] = "side"                   # the caller on another stream: the launch is ordered with it both ways
    k(*ts, backend="pallas")
    assert log == ["on cuda", "default waits side", "launch", "side waits default"]


def test_torch_mistakes_on_pallas(gelu):
    mod, _, _ = gelu
    ts = [_Tensor((64, 512)), _Tensor((64, 512)), _Tensor((512,))]
    with pytest.raises(ArgumentError, match=r"^b: the pallas backend takes torch tensors only with torch tensors"):
        mod.gelu_bias_bf16(ts[0], ts[1], np.zeros(512, BF16), backend="pallas")
    with pytest.raises(ArgumentError, match=r"^x: the pallas backend takes torch tensors on a CUDA device, got one "
                                            r"on cpu; move it first: x.cuda\(\)"):
        mod.gelu_bias_bf16(_Tensor((64, 512), "cpu"), *ts[1:], backend="pallas")
    with pytest.raises(ArgumentError, match=r"^out\[y\]: the pallas backend writes out= into torch tensors here"):
        mod.gelu_bias_bf16(*ts, backend="pallas", out=np.zeros((64, 512), BF16))
    with pytest.raises(ArgumentError, match=r"^x: interpret mode runs on jax arrays"):
        mod.gelu_bias_bf16(*ts, backend="pallas", interpret=INTERPRET)


@pytest.mark.parametrize("spec", ["gelu_bias_bf16.yaml", "matmul_bias_gelu_bf16.yaml", "attention_bf16_4096.yaml"])
def test_as_torch_kernel_accepts_the_generated_kernels(spec, tmp_path, monkeypatch):
    """What plgpu.as_torch_kernel does before it needs a GPU (jax 0.11.2: trace, lower, inline, then accept only a
    single Mosaic GPU call and scalar constants), run on the kernel the torch route hands it, lowered for CUDA."""
    import types

    import jax.experimental.mosaic.gpu as mgpu
    from jax._src.lib.mlir import passmanager
    from jax._src.pallas.mosaic_gpu import torch as mgpu_torch

    from schedgen.verify import small_overrides
    full = build_spec(SPECS_DIR / spec, cache=Cache(tmp_path / "c"))
    built = build_spec(SPECS_DIR / spec, small_overrides(full), cache=Cache(tmp_path / "c"))
    k = load_package(package(built, tmp_path / "out"))
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(float32="f32", float16="f16", bfloat16="bf16"))
    kern = k._pallas._make({}, None, False)     # what function(sizes, None, "torch") wraps
    structs = [jax.ShapeDtypeStruct(tuple(o.shape), DTYPES[o.dtype]) for o in k.inputs]
    module = jax.jit(kern).trace(*structs).lower(lowering_platforms=("cuda",)).compiler_ir()
    with module.context:
        mgpu.dialect.register_inliner_extensions(module.context)
        passmanager.PassManager.parse("builtin.module(inline{default-pipeline=})").run(module.operation)
        call, *_ = mgpu_torch._find_mgpu_call_in_module(module)
    assert call.call_target_name.value == "mosaic_gpu_v2"
    assert len(list(call.operands)) == len(k.inputs) and len(list(call.results)) == len(k.outputs)


@pytest.mark.gpu
def test_torch_on_pallas_matches_cuda_on_the_gpu(gelu):
    torch = pytest.importorskip("torch")
    mod, built, _ = gelu
    ins = host_inputs(seed=7)
    ts = [torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).cuda() for a in ins.values()]
    out = mod.gelu_bias_bf16(*ts, backend="pallas")
    assert isinstance(out, torch.Tensor) and out.device.type == "cuda" and out.dtype == torch.bfloat16
    host = out.cpu().view(torch.int16).numpy().view(BF16)
    assert rel_error(host, expected(built, ins)) <= tolerance("bf16", True)
    into = torch.full_like(out, float("nan"))
    assert mod.gelu_bias_bf16(*ts, backend="pallas", out=into) is into
    assert torch.equal(into, out)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):          # ordered with the caller's stream, not only the default one
        ts2 = [t.clone() for t in ts]
        on_side = mod.gelu_bias_bf16(*ts2, backend="pallas")
        again = on_side.clone()
    torch.cuda.synchronize()
    assert torch.equal(again, out)
