"""The machine record of a bench row: nvidia-smi's clocks, power and temperature, package versions; without a
GPU a note that says so."""
from __future__ import annotations

import importlib
import subprocess
import types

import pytest

# the module (schedgen.bench's attribute `environment` is its function)
E = importlib.import_module("schedgen.bench.environment")


def _smi(stdout: str, rc: int = 0):
    return lambda *a, **kw: types.SimpleNamespace(stdout=stdout, stderr="", returncode=rc)


def test_clocks_power_and_versions_are_recorded(monkeypatch):
    monkeypatch.setattr(subprocess, "run", _smi("NVIDIA H200, GPU-1a2b, 580.1, 1980 MHz, 1980 MHz, 3201 MHz, 412.3 W, "
                                                "700.00 W, 41, P0\n"))
    env = E.environment()
    assert env["gpu"] == "NVIDIA H200" and env["driver"] == "580.1" and env["gpu_uuid"] == "GPU-1a2b"
    assert env["clocks"] == {"sm": "1980 MHz", "sm_max": "1980 MHz", "mem": "3201 MHz"}
    assert env["power"] == {"draw": "412.3 W", "limit": "700.00 W"} and env["temperature"] == "41"
    assert env["pstate"] == "P0" and "numpy" not in env["versions"] and "jax" in env["versions"]
    assert env["toolchain"] and env["jax"] == env["toolchain"].get("jax")


def test_fields_the_gpu_does_not_report_are_left_out(monkeypatch):
    monkeypatch.setattr(subprocess, "run", _smi("NVIDIA H200, GPU-1a2b, 580.1, 1980 MHz, 1980 MHz, 3201 MHz, [N/A], "
                                                "[N/A], 41, P0\n"))
    env = E.environment()
    assert "power" not in env and env["clocks"]["sm"] == "1980 MHz"


def test_without_nvidia_smi_or_a_gpu_the_record_says_so(monkeypatch):
    def missing(*a, **kw):
        raise FileNotFoundError("nvidia-smi")
    monkeypatch.setattr(subprocess, "run", missing)
    from schedgen.runtime import driver
    monkeypatch.setattr(driver, "device_info", lambda: (_ for _ in ()).throw(RuntimeError("no CUDA device")))
    env = E.environment()
    assert env["gpu"] is None and env["note"] == "no GPU: RuntimeError"


# ---------------------------------------------------------------------------------------------- gpu_state


def test_gpu_state_reads_nvidia_smi_for_the_gpu_in_use(monkeypatch):
    """Without pynvml: nvidia-smi for the GPU CUDA_VISIBLE_DEVICES names first; numbers, not text."""
    import sys
    monkeypatch.setitem(sys.modules, "pynvml", None)             # import pynvml fails
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    asked = []

    def smi(cmd, **kw):
        asked.append(cmd)
        return types.SimpleNamespace(stdout="1755 MHz, 1980 MHz, 700.00 W, 512.30 W, 58\n", stderr="", returncode=0)
    monkeypatch.setattr(subprocess, "run", smi)
    got = E.gpu_state()
    assert got == {"sm_clock_mhz": 1755.0, "sm_clock_max_mhz": 1980.0, "power_limit_w": 700.0,
                   "power_draw_w": 512.3, "temperature_c": 58.0, "source": "nvidia-smi"}
    assert asked[0][:2] == ["nvidia-smi", "--id=3"]


def test_gpu_state_prefers_nvml(monkeypatch):
    import sys
    calls = []
    nvml = types.SimpleNamespace(
        NVML_CLOCK_SM=1, NVML_TEMPERATURE_GPU=0, nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"), nvmlDeviceGetHandleByIndex=lambda i: calls.append(i) or "h",
        nvmlDeviceGetClockInfo=lambda h, c: 1980, nvmlDeviceGetMaxClockInfo=lambda h, c: 1980,
        nvmlDeviceGetEnforcedPowerLimit=lambda h: 700000, nvmlDeviceGetPowerUsage=lambda h: 95500,
        nvmlDeviceGetTemperature=lambda h, t: 33)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("nvidia-smi asked although NVML answered"))
    got = E.gpu_state()
    assert got["sm_clock_mhz"] == 1980.0 and got["power_limit_w"] == 700.0 and got["power_draw_w"] == 95.5
    assert got["source"] == "nvml" and calls == ["init", 0, "shutdown"]


def test_gpu_state_fails_soft(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "pynvml", None)

    def missing(*a, **kw):
        raise FileNotFoundError("nvidia-smi")
    monkeypatch.setattr(subprocess, "run", missing)
    got = E.gpu_state()
    assert list(got) == ["error"] and "nvml: ModuleNotFoundError" in got["error"] and "smi: FileNotFoundError" in got["error"]
