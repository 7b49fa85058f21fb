"""The first-launch preflight (driver.available): no driver, an old driver, no device, a GPU that is not sm_90 each
give one clear sentence (never a raw CudaError), checked on the CPU against a scripted driver."""
from __future__ import annotations

import pytest

from schedgen.runtime import driver as D


class _Script:
    """A fake driver: cuInit, cuDriverGetVersion, cuDeviceGetCount, cuDeviceGet, name and compute capability."""

    def __init__(self, *, init=None, version=13000, count=1, name="NVIDIA H200", cc=(9, 0)):
        self.init, self.version, self.count, self.name, self.cc = init, version, count, name, cc

    def call(self, name, *args):
        if name == "cuInit":
            if self.init is not None:
                raise self.init
            return None
        return {"cuDriverGetVersion": self.version, "cuDeviceGetCount": self.count, "cuDeviceGet": 0}[name]


@pytest.fixture
def script(monkeypatch):
    def use(**kw):
        s = _Script(**kw)
        monkeypatch.setattr(D, "_call", s.call)
        monkeypatch.setattr(D, "_device_name", lambda dev: s.name)
        monkeypatch.setattr(D, "_cc", lambda dev: s.cc)
        monkeypatch.setattr(D, "_available", None)
        return D.available()
    return use


def test_a_hopper_gpu_with_a_new_driver_is_available(script):
    assert script() == (True, "NVIDIA H200, sm_90")


@pytest.mark.parametrize("kw,sentence", [
    ({"init": OSError("libcuda.so.1: cannot open shared object file")},
     "no NVIDIA driver (libcuda.so.1) was found on this machine: install the NVIDIA driver (r580 or newer), or build "
     "and test on the CPU (the Pallas backend runs in interpret mode)"),
    ({"version": 12080},
     "the NVIDIA driver supports CUDA 12.8, but schedgen's kernels are built with CUDA 13.0; update the driver to "
     "r580 or newer"),
    ({"count": 0}, "no CUDA device is visible (check `nvidia-smi` and CUDA_VISIBLE_DEVICES)"),
    ({"name": "NVIDIA A100-SXM4-80GB", "cc": (8, 0)},
     "GPU 0 is an NVIDIA A100-SXM4-80GB (sm_80); schedgen's kernels are built for Hopper (sm_90a: H100, H200, GH200) "
     "and cannot run on it"),
    ({"name": "NVIDIA B200", "cc": (10, 0)},
     "GPU 0 is an NVIDIA B200 (sm_100); schedgen's kernels are built for Hopper (sm_90a: H100, H200, GH200) and "
     "cannot run on it"),
])
def test_what_stops_a_launch_is_one_sentence(script, kw, sentence):
    ok, why = script(**kw)
    assert ok is False and why == sentence and "\n" not in why


def test_a_driver_that_fails_to_start_names_its_error(script):
    from cuda.bindings import driver as cu
    ok, why = script(init=D.CudaError("cuInit", cu.CUresult.CUDA_ERROR_NO_DEVICE))
    assert not ok and why.startswith("the NVIDIA driver is installed but could not start (cuInit failed: "
                                     "CUDA_ERROR_NO_DEVICE")


@pytest.fixture
def device(monkeypatch):
    """available(target) against a scripted GPU of compute capability `cc`."""
    def use(cc, name, target):
        s = _Script(cc=cc, name=name)
        monkeypatch.setattr(D, "_call", s.call)
        monkeypatch.setattr(D, "_device_name", lambda dev: s.name)
        monkeypatch.setattr(D, "_cc", lambda dev: s.cc)
        monkeypatch.setattr(D, "_available", None)
        return D.available(target)
    return use


def test_an_sm100a_package_is_refused_on_a_hopper_gpu_in_one_sentence(device):
    ok, why = device((9, 0), "NVIDIA H200", "sm_100a")
    assert not ok and why == ("GPU 0 is an NVIDIA H200 (sm_90), but this package's kernel is built for Blackwell "
                              "(sm_100a: B200, GB200) and cannot run on it: rebuild the spec with schedule.target: "
                              "sm_90a")
    assert device((10, 0), "NVIDIA B200", "sm_100a") == (True, "NVIDIA B200, sm_100")


def test_a_hopper_package_is_refused_on_a_blackwell_gpu(device):
    ok, why = device((10, 0), "NVIDIA B200", "sm_90a")
    assert not ok and why == ("GPU 0 is an NVIDIA B200 (sm_100); schedgen's kernels are built for Hopper (sm_90a: "
                              "H100, H200, GH200) and cannot run on it")


def test_a_package_call_says_which_gpu_its_target_needs(device, tmp_path):
    """The Kernel's CUDA call path raises the sentence for the package's recorded target (a faked device)."""
    import json

    import ml_dtypes
    import numpy as np

    from conftest import SPECS_DIR
    from schedgen.build import build_spec, package
    from schedgen.cache import Cache
    from schedgen.runtime.kernel import load_package
    built = build_spec(SPECS_DIR / "add_bf16.yaml", {"schedule.backends": ["cuda"]}, cache=Cache(tmp_path / "c"))
    root = package(built, tmp_path / "pkg")
    rec = root / "launch.json" if (root / "launch.json").is_file() else next(root.rglob("launch.json"))
    data = json.loads(rec.read_text())
    data["target"] = "sm_100a"
    rec.write_text(json.dumps(data))
    kernel = load_package(rec.parent)
    device((9, 0), "NVIDIA H200", "sm_90a")
    args = [np.zeros(o.shape, ml_dtypes.bfloat16) for o in kernel.inputs]
    with pytest.raises(RuntimeError) as info:
        kernel._call_any(args, None, None)
    assert str(info.value) == ("add_bf16: the CUDA backend needs an NVIDIA Blackwell GPU: GPU 0 is an NVIDIA H200 "
                               "(sm_90), but this package's kernel is built for Blackwell (sm_100a: B200, GB200) and "
                               "cannot run on it: rebuild the spec with schedule.target: sm_90a")


def test_verify_skips_an_sm100a_package_on_a_hopper_gpu_with_the_sentence(device):
    from schedgen import verify as V
    device((9, 0), "NVIDIA H200", "sm_90a")
    assert V.unavailable("cuda") == ""
    assert V.unavailable("cuda", target="sm_100a").startswith("GPU 0 is an NVIDIA H200 (sm_90), but this package's "
                                                              "kernel is built for Blackwell (sm_100a")
    # the Pallas kernel of an sm_100a package is compiled by Mosaic GPU for sm_100a too (its interpreter runs anywhere)
    assert V.unavailable("pallas") == ""
    assert V.unavailable("pallas", target="sm_100a").startswith("GPU 0 is an NVIDIA H200 (sm_90), but this package's "
                                                                "kernel is built for Blackwell (sm_100a")
    assert V.unavailable("pallas", interpret=True, target="sm_100a") == ""
