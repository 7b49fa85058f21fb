"""Run `schedgen verify` of one spec under NVIDIA compute-sanitizer (memcheck, racecheck, synccheck, initcheck).

Each tool runs the verification in its own process (`compute-sanitizer --tool T python -m schedgen verify ...`),
at small sizes by default (racecheck is slow), and its ERROR SUMMARY is read back.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .files import write_file

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
PRINT_LIMIT = 100000
_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+) error")
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY:\s*(\d+) hazard")
# a failing CUDA API call (compute-sanitizer counts these in its ERROR SUMMARY too): the host side, not a kernel
_API_ERROR = re.compile(r"^=+ Program hit (\S+).*? on CUDA API call to (\S+?)\.?$", re.M)


@dataclass(frozen=True)
class SanitizerRun:
    spec: str
    tool: str
    backend: str
    errors: int | None     # kernel errors; None: no summary was printed (the run failed before the sanitizer could report)
    ok: bool
    detail: str = ""
    api_errors: int = 0    # failing CUDA API calls the tool also reported (listed in detail): not kernel errors
    log: str = ""          # where the tool's whole output was written, if anywhere


def find_sanitizer() -> str | None:
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        cand = Path(root) / "bin" / "compute-sanitizer"
        if root and cand.exists():
            return str(cand)
    return None


def parse_errors(output: str) -> int | None:
    """The number of errors (racecheck: hazards) a compute-sanitizer run reported, or None if it printed none."""
    counts = [int(m.group(1)) for m in _SUMMARY.finditer(output)]
    counts += [int(m.group(1)) for m in _RACE_SUMMARY.finditer(output)]
    return max(counts) if counts else None


def api_errors(output: str) -> dict[str, int]:
    """Failing CUDA API calls in a compute-sanitizer log: 'CUDA_ERROR_X from cuFunc' -> count. The ERROR SUMMARY
    counts them with the kernels' own errors; a library probing an optional feature (a call that is allowed to
    fail) shows up here, so they are reported apart."""
    found: dict[str, int] = {}
    for m in _API_ERROR.finditer(output):
        key = f"{m.group(1)} from {m.group(2)}"
        found[key] = found.get(key, 0) + 1
    return found


def kernel_errors(output: str) -> tuple[int | None, dict[str, int]]:
    """(errors in kernels, failing API calls) of one log: the summary's count less the API calls it includes."""
    total = parse_errors(output)
    api = api_errors(output)
    if total is None:
        return None, api
    return max(0, total - sum(api.values())), api


def command(sanitizer: str, tool: str, spec: str, backend: str, defines: Sequence[str], small: bool) -> list[str]:
    # every report printed (a capped print leaves API-call errors and kernel errors impossible to tell apart)
    cmd = [sanitizer, "--tool", tool, "--print-limit", str(PRINT_LIMIT)]
    if tool == "racecheck":
        cmd += ["--racecheck-report", "all"]
    cmd += [sys.executable, "-m", "schedgen", "verify", "--backend", backend, "--timeout", "0"]
    if small:
        cmd.append("--small")
    for d in defines:
        cmd += ["-D", d]
    return cmd + [spec]


def sanitize(spec: str, name: str, tools: Sequence[str], backend: str = "cuda", defines: Sequence[str] = (),
             small: bool = True, timeout: float = 1800, log_dir: str | None = None) -> list[SanitizerRun]:
    sanitizer = find_sanitizer()
    if sanitizer is None:
        raise FileNotFoundError("compute-sanitizer not found (it ships with the CUDA toolkit; on the GPU machine it is "
                                "/usr/local/cuda/bin/compute-sanitizer)")
    runs = []
    for tool in tools:
        try:
            res = subprocess.run(command(sanitizer, tool, spec, backend, defines, small), capture_output=True,
                                 text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            runs.append(SanitizerRun(name, tool, backend, None, False, f"stopped after {timeout:g} s"))
            continue
        out = res.stdout + res.stderr
        log = ""
        if log_dir:
            log = str(write_file(Path(log_dir) / f"{name}.{backend}.{tool}.log", out))
        errors, api = kernel_errors(out)
        verified = res.returncode == 0
        detail = "" if verified else f"verify exited {res.returncode}: " + out.strip().splitlines()[-1][:200] \
            if out.strip() else f"verify exited {res.returncode}"
        if api:
            detail = (detail + "; " if detail else "") + "CUDA API calls that failed (not kernel errors): " + \
                ", ".join(f"{k} x{v}" for k, v in sorted(api.items()))
        runs.append(SanitizerRun(name, tool, backend, errors, verified and errors == 0, detail,
                                 api_errors=sum(api.values()), log=log))
    return runs
