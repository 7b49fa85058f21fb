"""What a benchmark row records of the machine it ran on: GPU, driver, clocks, power, temperature, versions."""
from __future__ import annotations

import subprocess
from importlib import metadata
from typing import Any

# nvidia-smi --query-gpu fields -> where they go in the record
_SMI = {"name": "gpu", "driver_version": "driver", "clocks.sm": "clocks.sm", "clocks.max.sm": "clocks.sm_max",
        "clocks.mem": "clocks.mem", "power.draw": "power.draw", "power.limit": "power.limit",
        "temperature.gpu": "temperature", "pstate": "pstate"}
_VERSIONS = ("torch", "jax", "jaxlib", "cuda-python", "cupy-cuda12x", "cupy-cuda13x")


def _smi() -> dict[str, Any]:
    q = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(_SMI)}", "--format=csv,noheader"],
                       capture_output=True, text=True, timeout=20)
    values = [x.strip() for x in q.stdout.strip().splitlines()[0].split(",")]
    if q.returncode != 0 or len(values) != len(_SMI):
        raise RuntimeError(f"nvidia-smi: {q.stderr.strip() or q.stdout.strip()}")
    out: dict[str, Any] = {}
    for key, value in zip(_SMI.values(), values):
        if "[N/A]" in value or "Not Supported" in value:
            continue
        group, _, leaf = key.partition(".")
        if leaf:
            out.setdefault(group, {})[leaf] = value
        else:
            out[group] = value
    return out


def versions() -> dict[str, str]:
    """Installed versions of the packages that time or are timed (read from metadata: nothing is imported)."""
    out = {}
    for name in _VERSIONS:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def environment() -> dict[str, Any]:
    """The record's `env`: toolchain, GPU, driver, clocks and power (nvidia-smi; the driver API where it is
    missing), package versions; on a machine without a GPU, gpu None and a note saying so."""
    from ..build import toolchain
    env: dict[str, Any] = {"toolchain": toolchain()}
    try:
        env.update(_smi())
    except Exception:
        try:
            from ..runtime import driver as drv
            info = drv.device_info()
            env.update(gpu=info.get("name"), driver=str(info.get("driver")))
        except Exception as exc:  # no GPU: the record says so
            env.update(gpu=None, driver=None, note=f"no GPU: {type(exc).__name__}")
    env["jax"] = env["toolchain"].get("jax")
    env["versions"] = versions()
    return env
