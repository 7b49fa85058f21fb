"""verify --sanitize: the compute-sanitizer command, reading its summary, and its CLI without a GPU."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import SPECS_DIR
from schedgen.sanitize import command, find_sanitizer, parse_errors


@pytest.mark.parametrize("text, errors", [
    ("========= COMPUTE-SANITIZER\n... verify output ...\n========= ERROR SUMMARY: 0 errors\n", 0),
    ("========= Invalid __global__ write of size 16 bytes\n========= ERROR SUMMARY: 3 errors\n", 3),
    ("========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)\n", 2),
    ("Traceback (most recent call last):\n  ...\nRuntimeError: boom\n", None),
])
def test_parse_errors(text, errors):
    assert parse_errors(text) == errors


def test_api_errors_are_counted_apart_from_kernel_errors():
    from schedgen.sanitize import kernel_errors
    log = ("========= Program hit CUDA_ERROR_INVALID_VALUE (error 1) due to \"invalid argument\" on CUDA API call to "
           "cuPointerGetAttribute.\n=========     Saved host backtrace up to driver entry point at error\n"
           "========= Program hit CUDA_ERROR_INVALID_VALUE (error 1) due to \"invalid argument\" on CUDA API call to "
           "cuPointerGetAttribute.\n"
           "========= Program hit CUDA_ERROR_NOT_FOUND (error 500) due to \"named symbol not found\" on CUDA API call "
           "to cuGetProcAddress.\n========= ERROR SUMMARY: 3 errors\n")
    assert kernel_errors(log) == (0, {"CUDA_ERROR_INVALID_VALUE from cuPointerGetAttribute": 2,
                                      "CUDA_ERROR_NOT_FOUND from cuGetProcAddress": 1})
    # a kernel's own error still counts
    bad = log.replace("ERROR SUMMARY: 3", "========= Invalid __global__ write of size 4 bytes\n========= ERROR SUMMARY: 4")
    assert kernel_errors(bad)[0] == 1
    assert kernel_errors("no summary")[0] is None


def test_command_runs_verify_in_the_sanitized_process():
    cmd = command("/cs", "racecheck", "specs/add_bf16.yaml", "cuda", ["M=256"], small=True)
    assert cmd[:5] == ["/cs", "--tool", "racecheck", "--print-limit", "100000"]
    assert "--racecheck-report" in cmd
    i = cmd.index(sys.executable)
    # the watchdog's worker process is switched off: the kernels must run in the sanitized process itself
    assert cmd[i:] == [sys.executable, "-m", "schedgen", "verify", "--backend", "cuda", "--timeout", "0", "--small",
                       "-D", "M=256", "specs/add_bf16.yaml"]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "schedgen", *args], capture_output=True, text=True)


def test_unknown_tool_is_a_usage_error():
    res = _cli("verify", "--sanitize", "memchek", str(SPECS_DIR / "add_bf16.yaml"))
    assert res.returncode == 2
    assert res.stderr.strip() == "schedgen: --sanitize: unknown tool 'memchek'; tools: memcheck, racecheck, " \
                                 "synccheck, initcheck"


@pytest.mark.skipif(find_sanitizer() is not None, reason="compute-sanitizer is installed here")
def test_missing_sanitizer_is_a_clear_error():
    res = _cli("verify", "--sanitize", "memcheck", str(SPECS_DIR / "add_bf16.yaml"))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "compute-sanitizer not found" in res.stderr
