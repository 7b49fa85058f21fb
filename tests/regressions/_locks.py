"""A process holding the staging lock on a path, for the staging reaper's tests (not a test module)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# takes the flock held_temp takes (an exclusive flock on the folder itself), says so, and holds it until its stdin
# closes: no sleeps, whatever the machine's speed
_HOLD = ("import fcntl, os, sys\n"
         "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX)\n"
         "print('locked', flush=True)\n"
         "sys.stdin.read()\n")


def holding(path: Path) -> subprocess.Popen:
    """A child process that holds the lock of `path` until `release(proc)`."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def release(proc: subprocess.Popen) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=30)
