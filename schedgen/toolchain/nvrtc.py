"""CUDA C++ -> PTX and an sm_90a or sm_100a cubin (the plan's `target`) with NVRTC (no driver, no GPU), and SASS
through nvdisasm.

NVRTC compiles straight to the cubin: assembling the PTX separately (nvJitLink, ptxas -c) drops
`setmaxnreg`, which warp-specialized kernels need.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import ToolchainError

ARCH = "sm_90a"           # the default target; compile_cuda's arch is the plan's target (sm_90a or sm_100a)


@dataclass(frozen=True)
class Compiled:
    ptx: str
    cubin: bytes
    log: str


def _check(result, what: str, log: str = "") -> None:
    from cuda.bindings import nvrtc
    err = result[0] if isinstance(result, tuple) else result
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise ToolchainError(f"NVRTC {what} failed: {err.name}\n{log}".rstrip())


def _get(prog, size_fn, get_fn) -> bytes:
    """What NVRTC writes into a buffer of the size it reports. The buffer is a bytearray: NVRTC writes into it, and
    a bytes object must never be written (`b" " * 1` is the interpreter's one shared b" ": an empty log's
    single NUL went into it, and every b" " of the process read b"\\x00" after the first build)."""
    res = size_fn(prog)
    _check(res, size_fn.__name__)
    buf = bytearray(res[1])
    _check(get_fn(prog, buf), get_fn.__name__)
    return bytes(buf)


def compile_cuda(source: str, name: str = "kernel.cu", *, arch: str = ARCH, max_registers: int | None = None,
                 extra: tuple[str, ...] = ()) -> Compiled:
    from cuda.bindings import nvrtc
    res = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _check(res, "nvrtcCreateProgram")
    prog = res[1]
    try:
        opts = [f"--gpu-architecture={arch}", "-std=c++17", "-default-device", "-lineinfo", *extra]
        if max_registers:
            opts.append(f"--maxrregcount={max_registers}")
        res = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        log = _get(prog, nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog).decode(errors="replace").rstrip("\x00 \n")
        _check(res, "compilation", log)
        ptx = _get(prog, nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX).decode().rstrip("\x00")
        cubin = _get(prog, nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN)
        return Compiled(ptx, cubin, log)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def nvrtc_version() -> str:
    from cuda.bindings import nvrtc
    res = nvrtc.nvrtcVersion()
    return f"{res[1]}.{res[2]}"


@lru_cache(maxsize=None)
def _tool(name: str) -> str | None:
    """nvdisasm / cuobjdump: from PATH or from pip's NVIDIA wheels."""
    found = shutil.which(name)
    if found:
        return found
    try:
        import nvidia
        roots = [Path(p) for p in nvidia.__path__]
    except ImportError:
        roots = []
    for root in roots:
        for cand in root.glob(f"*/bin/{name}"):
            if os.access(cand, os.X_OK):
                return str(cand)
    return None


def sass(cubin: bytes) -> str:
    """Disassemble a cubin (SASS text), or raise ToolchainError when no disassembler is installed."""
    tool = _tool("nvdisasm")
    if tool is None:
        raise ToolchainError("nvdisasm not found: pip install 'cuda-toolkit[nvdisasm]'")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "-c", f.name],
                             capture_output=True, text=True)
    if out.returncode != 0:
        raise ToolchainError(f"nvdisasm failed: {out.stderr.strip()}")
    return out.stdout


def resource_usage(cubin: bytes) -> dict:
    """Registers, static SMEM and stack frame of each kernel, read with cuobjdump --dump-resource-usage."""
    tool = _tool("cuobjdump")
    if tool is None:
        return {}
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True)
    usage: dict = {}
    current = None
    for line in out.stdout.splitlines():
        line = line.strip()
        if line.startswith("Function ") and line.endswith(":"):
            current = usage.setdefault(line[len("Function "):-1], {})
        elif current is not None and ":" in line:
            for part in line.split():
                key, _, val = part.partition(":")
                if val.isdigit():
                    current[key] = int(val)
    return usage
