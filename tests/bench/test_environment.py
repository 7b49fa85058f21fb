"""The machine record of a bench row: nvidia-smi's clocks, power and temperature, package versions; without a
GPU a note that says so."""
from __future__ import annotations

import importlib
import subprocess
import types

# the module (schedgen.bench's attribute `environment` is its function)
E = importlib.import_module("schedgen.bench.environment")


def _smi(stdout: str, rc: int = 0):
    return lambda *a, **kw: types.SimpleNamespace(stdout=stdout, stderr="", returncode=rc)


def test_clocks_power_and_versions_are_recorded(monkeypatch):
    monkeypatch.setattr(subprocess, "run", _smi("NVIDIA H200, 580.1, 1980 MHz, 1980 MHz, 3201 MHz, 412.3 W, "
                                                "700.00 W, 41, P0\n"))
    env = E.environment()
    assert env["gpu"] == "NVIDIA H200" and env["driver"] == "580.1"
    assert env["clocks"] == {"sm": "1980 MHz", "sm_max": "1980 MHz", "mem": "3201 MHz"}
    assert env["power"] == {"draw": "412.3 W", "limit": "700.00 W"} and env["temperature"] == "41"
    assert env["pstate"] == "P0" and "numpy" not in env["versions"] and "jax" in env["versions"]
    assert env["toolchain"] and env["jax"] == env["toolchain"].get("jax")


def test_fields_the_gpu_does_not_report_are_left_out(monkeypatch):
    monkeypatch.setattr(subprocess, "run", _smi("NVIDIA H200, 580.1, 1980 MHz, 1980 MHz, 3201 MHz, [N/A], [N/A], "
                                                "41, P0\n"))
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
