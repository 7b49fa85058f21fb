"""What a benchmark row records of the machine it ran on: GPU, driver, clocks, power, temperature, versions; and
`gpu_state()`, the SM clock, power limit and draw and temperature at one moment (each row has them from just
before and just after its timing: `gpu_before`, `gpu_after`)."""
from __future__ import annotations

import os
import subprocess
from importlib import metadata
from typing import Any

# nvidia-smi --query-gpu fields -> where they go in the record
_SMI = {"name": "gpu", "uuid": "gpu_uuid", "driver_version": "driver", "clocks.sm": "clocks.sm", "clocks.max.sm": "clocks.sm_max",
        "clocks.mem": "clocks.mem", "power.draw": "power.draw", "power.limit": "power.limit",
        "temperature.gpu": "temperature", "pstate": "pstate"}
_VERSIONS = ("torch", "jax", "jaxlib", "cuda-python", "cuda-bindings", "cupti-python", "nvidia-cuda-cupti",
             "nvidia-cuda-runtime", "cupy-cuda12x", "cupy-cuda13x")


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
    env["commit"] = source_commit()
    return env


def source_commit() -> str | None:
    """The git commit of the schedgen source that runs ('+changes' when its tracked files differ from it), or None
    outside a git checkout (an installed wheel); $SCHEDGEN_COMMIT where it is set (a copy of a checkout without its
    .git folder, as the GPU machine gets)."""
    from pathlib import Path
    if os.environ.get("SCHEDGEN_COMMIT"):
        return os.environ["SCHEDGEN_COMMIT"][:64]
    here = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


# ---------------------------------------------------------------------------------------------- the GPU's state now

# nvidia-smi --query-gpu fields -> gpu_state keys (numbers: MHz, W, degrees C)
_STATE = {"clocks.sm": "sm_clock_mhz", "clocks.max.sm": "sm_clock_max_mhz", "power.limit": "power_limit_w",
          "power.draw": "power_draw_w", "temperature.gpu": "temperature_c"}


def _gpu_index() -> int:
    """The GPU the process uses, as NVML / nvidia-smi number it: CUDA_VISIBLE_DEVICES' first entry when it is a
    number, else 0 (CUDA's device 0; NVML and CUDA agree on a machine of one GPU model in PCI order)."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def _number(text: str) -> float | None:
    head = text.strip().split(" ")[0]
    try:
        return float(head)
    except ValueError:
        return None


def _state_nvml(index: int) -> dict:
    import pynvml
    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        return {"sm_clock_mhz": float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
                "sm_clock_max_mhz": float(pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)),
                "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
                "power_draw_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                "temperature_c": float(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)),
                "source": "nvml"}
    finally:
        pynvml.nvmlShutdown()


def _state_smi(index: int) -> dict:
    q = subprocess.run(["nvidia-smi", f"--id={index}", f"--query-gpu={','.join(_STATE)}", "--format=csv,noheader"],
                       capture_output=True, text=True, timeout=20)
    lines = q.stdout.strip().splitlines()
    values = [x.strip() for x in lines[0].split(",")] if lines else []
    if q.returncode != 0 or len(values) != len(_STATE):
        raise RuntimeError(f"nvidia-smi: {(q.stderr.strip() or q.stdout.strip() or 'no output').splitlines()[0]}")
    out: dict = {key: _number(v) for key, v in zip(_STATE.values(), values) if _number(v) is not None}
    return {**out, "source": "nvidia-smi"}


def gpu_state() -> dict:
    """The SM clock (and its max), the power limit and draw and the temperature of the GPU in use now, through NVML
    (pynvml) where it is installed, else nvidia-smi; where neither answers, {"error": why} (never raises)."""
    index = _gpu_index()
    errors = []
    for probe in (_state_nvml, _state_smi):
        try:
            return probe(index)
        except Exception as exc:
            errors.append(f"{probe.__name__.removeprefix('_state_')}: {type(exc).__name__}: "
                          f"{(str(exc).strip().splitlines() or [''])[0]}")
    return {"error": "; ".join(errors)}


class ClockSampler:
    """The GPU's SM clock and power draw sampled every `period` seconds while a row is timed (a thread reading
    `gpu_state`), so that a row shows what the clocks did during its timing, not only before and after:
    `summary()` is {sm_clock_mhz: {min, median, max}, power_draw_w: {...}, samples}, or {"error": why}."""

    def __init__(self, period: float = 0.25, read=gpu_state):
        import threading
        self.period, self.read = period, read
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="schedgen-clock-sampler", daemon=True)

    def _run(self) -> None:
        while True:
            self.samples.append(self.read())
            if self._stop.wait(self.period):
                return

    def __enter__(self) -> "ClockSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def summary(self) -> dict:
        import statistics
        good = [s for s in self.samples if "error" not in s]
        if not good:
            return {"error": self.samples[0]["error"] if self.samples else "no sample"}
        out: dict = {"samples": len(good)}
        for key in ("sm_clock_mhz", "power_draw_w"):
            vals = [s[key] for s in good if s.get(key) is not None]
            if vals:
                out[key] = {"min": min(vals), "median": statistics.median(vals), "max": max(vals)}
        return out
