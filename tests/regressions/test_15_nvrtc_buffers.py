"""Every NVRTC build wrote into the interpreter's shared one-byte bytes object.

Before: `schedgen.toolchain.nvrtc._get` handed NVRTC `b" " * size` as the buffer to fill. For a program log of
size 1 (a clean compile: the log is one NUL) that expression is CPython's cached b" ", so NVRTC wrote a NUL into
the object every `b" "` and `bytes([32])` of the process is. Found on the H200: `import torch` (2.11) after a fresh
`schedgen build` in one process failed inside torch's own custom-op registration ("annotate(strtag) -> ()", the
space of its schema gone). Now the buffers are bytearrays.
"""
from __future__ import annotations

import subprocess
import sys

from schedgen.toolchain.nvrtc import compile_cuda

CLEAN = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }'


def test_a_clean_compile_leaves_the_shared_bytes_alone():
    built = compile_cuda(CLEAN)
    assert built.log == "" and built.cubin[:4] == b"\x7fELF"
    assert bytes([32])[0] == 32                 # the cached b" " still holds a space
    assert b"a b".split() == [b"a", b"b"] and " ".encode() == bytes([32])


def test_in_a_fresh_interpreter_with_logs_of_every_size():
    """A fresh process (nothing else touched the cache first), a clean compile and one with a warning log."""
    code = f"""
from schedgen.toolchain.nvrtc import compile_cuda
compile_cuda({CLEAN!r})
warned = compile_cuda('extern "C" __global__ void k(float* x) {{ int unused; x[0] = 1.0f; }}')
assert all(bytes([c])[0] == c for c in range(256)), [c for c in range(256) if bytes([c])[0] != c]
print("ok")
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-2000:]
