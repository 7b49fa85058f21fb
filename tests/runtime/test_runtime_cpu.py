"""Runtime argument checking of a built package, without a GPU: every mistake is an ArgumentError naming the
argument; correct arguments reach the GPU check and fail with a plain RuntimeError that says a GPU is needed."""
from __future__ import annotations

import importlib
import sys

import ml_dtypes
import numpy as np
import pytest

from conftest import SPECS_DIR
from schedgen.build import build_spec, package
from schedgen.cache import Cache
from schedgen.runtime import driver
from schedgen.runtime.arrays import ArgumentError

BF16 = ml_dtypes.bfloat16


@pytest.fixture(scope="module")
def gelu(tmp_path_factory):
    """gelu_bias_bf16 at M=64, N=512: three inputs, one of them a broadcast row."""
    tmp = tmp_path_factory.mktemp("rt")
    b = build_spec(SPECS_DIR / "gelu_bias_bf16.yaml", {"M": 64, "N": 512}, cache=Cache(tmp / "c"))
    package(b, tmp / "out")
    sys.path.insert(0, str(tmp / "out"))
    sys.modules.pop("gelu_bias_bf16", None)
    try:
        yield importlib.import_module("gelu_bias_bf16")
    finally:
        sys.path.remove(str(tmp / "out"))
        sys.modules.pop("gelu_bias_bf16", None)


def args(x=(64, 512), w=(64, 512), b=(512,), dtype=BF16):
    return np.zeros(x, dtype), np.zeros(w, BF16), np.zeros(b, BF16)


CASES = [
    ("x-shape", lambda: args(x=(64, 256)), {}, "x: expected shape (64, 512), got (64, 256): dimension 1 is fixed at 512"),
    ("b-rank", lambda: args(b=(1, 512)), {}, "b: expected shape (512,), got (1, 512)"),
    ("x-dtype", lambda: args(dtype=np.float32), {},
     "x: expected bf16, got float32; convert with x.astype(ml_dtypes.bfloat16)"),
    ("x-f16", lambda: args(dtype=np.float16), {},
     "x: expected bf16, got float16; convert with x.astype(ml_dtypes.bfloat16)"),
    ("reversed-view", lambda: (np.zeros((64, 512), BF16)[:, ::-1],) + args()[1:], {},
     "x: has negative strides (1024, -2) (a reversed view); make it contiguous first: np.ascontiguousarray(x)"),
    ("out-dtype", lambda: args(), {"out": np.zeros((64, 512), np.float32)},
     "out[y]: expected bf16, got float32; convert with out[y].astype(ml_dtypes.bfloat16)"),
    ("out-shape", lambda: args(), {"out": np.zeros((64, 511), BF16)}, "out[y]: expected shape (64, 512), got (64, 511)"),
    ("out-count", lambda: args(), {"out": (np.zeros((64, 512), BF16),) * 2},
     "out: gelu_bias_bf16 has 1 outputs, got 2 arrays"),
]


@pytest.mark.parametrize("make,kwargs,message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
@pytest.mark.parametrize("backend", ["cuda", "pallas"])
def test_bad_arguments_raise_argument_error(gelu, make, kwargs, message, backend):
    with pytest.raises(ArgumentError) as info:
        gelu.gelu_bias_bf16(*make(), backend=backend, **kwargs)
    assert str(info.value) == message


def test_transposed_view_is_not_contiguous(gelu):
    x = np.zeros((512, 64), BF16).T
    with pytest.raises(ArgumentError, match=r"^x: is not C-contiguous \(byte strides \(2, 128\), expected \(1024, 2\)\)"):
        gelu.gelu_bias_bf16(x, *args()[1:])


def test_unsupported_argument_type(gelu):
    with pytest.raises(ArgumentError, match=r"^b: unsupported argument of type list; expected numpy arrays"):
        gelu.gelu_bias_bf16(*args()[:2], [0.0] * 512)


def test_wrong_number_of_arrays(gelu):
    k = gelu.kernel
    with pytest.raises(ArgumentError) as info:
        k(*args()[:2])
    assert str(info.value) == "gelu_bias_bf16() takes 3 arrays (x, w, b), got 2"
    with pytest.raises(ArgumentError) as info:
        k(*args(), np.zeros(3))
    assert str(info.value) == "gelu_bias_bf16() takes 3 arrays (x, w, b), got 4"
    # the package's own function has the kernel's signature: Python itself rejects a wrong count
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'b'"):
        gelu.gelu_bias_bf16(*args()[:2])


def test_unbuilt_backend(gelu):
    with pytest.raises(ValueError, match=r"^gelu_bias_bf16: backend 'triton' was not built; built: cuda, pallas$"):
        gelu.gelu_bias_bf16(*args(), backend="triton")


def test_check_args_needs_no_gpu(gelu):
    gelu.kernel.check_args(args(), None)                       # correct: no exception
    gelu.kernel.check_args(args(), [np.zeros((64, 512), BF16)])


@pytest.mark.skipif(driver.available()[0], reason="a GPU is present")
def test_correct_arguments_without_gpu_raise_runtime_error(gelu):
    with pytest.raises(RuntimeError) as info:
        gelu.gelu_bias_bf16(*args())
    err = info.value
    assert type(err) is RuntimeError                            # not CudaError or a cuda-bindings type
    assert str(err).startswith("gelu_bias_bf16: the CUDA backend needs an NVIDIA Hopper GPU: ")
    assert str(err).endswith(driver.available()[1])
    # the same with caller-provided outputs
    with pytest.raises(RuntimeError, match="needs an NVIDIA Hopper GPU"):
        gelu.gelu_bias_bf16(*args(), out=np.zeros((64, 512), BF16))


def test_a_cluster_of_16_is_allowed_before_its_occupancy_is_asked(monkeypatch):
    """cuOccupancyMaxActiveClusters refuses a non-portable cluster size (16) unless the function allows it, as the
    launch does (regression: the runtime set the attribute for the launch only, after asking the occupancy of the
    rowwise family's 16-CTA clusters)."""
    from schedgen.runtime import driver
    calls = []
    monkeypatch.setattr(driver, "_call", lambda name, *args: calls.append((name, args[1:2])) or 3)
    assert driver.max_active_clusters("f", block=(256, 1, 1), smem=0, cluster=(16, 1, 1)) == 3
    nonportable = driver.cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
    assert [c[0] for c in calls] == ["cuFuncSetAttribute", "cuOccupancyMaxActiveClusters"]
    assert calls[0][1] == (nonportable,)
    calls.clear()
    driver.max_active_clusters("f", block=(256, 1, 1), smem=0, cluster=(8, 1, 1))
    assert [c[0] for c in calls] == ["cuOccupancyMaxActiveClusters"]
