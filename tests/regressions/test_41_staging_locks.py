"""Defect group 4 (issue 41): concurrent builds in different PID namespaces removed each other's live staging.

Before: the reaper (cache.clean_stale) took a staging folder `.<name>.tmp-<host>-<pid>-*` for dead when
`kill(pid, 0)` found no such process. In a container, a sandbox or under `unshare -p` the writer's pid is another
namespace's: builds sharing an output folder (or a cache) removed each other's live staging, and 1-2 of 6 builds
failed in 4 of 6 rounds. A process of this namespace that happened to have the recorded number kept a dead
writer's folder alive.

Now each temporary (staging folder, cache entry being written, old one moved aside, the output's __init__.py) is
locked (flock) by its writer from before it gets its `.tmp-` / `.old-` name until it is done (staging.held_temp);
the reaper removes one only when it can take that lock. These tests hold the lock from another process, name
folders with pids that lie, and run builds in PID namespaces of their own.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _locks import holding, release
from _specs import ADD
from conftest import run_process_group
from schedgen.staging import clean_stale, held_temp, temp_name

ROOT = Path(__file__).resolve().parents[2]


def _named(folder: Path, what: str, pid: int, tail: str, kind: str = "tmp") -> Path:
    p = folder / (temp_name(what, kind).replace(f"-{os.getpid()}-", f"-{pid}-") + tail)
    p.mkdir()
    (p / "kernel.cu").write_text("being written")
    return p


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_a_foreign_writers_locked_folder_is_kept(tmp_path):
    """The recorded pid is no process here (another namespace's writer) or is this very process, and the lock is
    held: kept. Old ones too (a live build slower than an hour is still live)."""
    foreign = _named(tmp_path, "add_bf16", _dead_pid(), "foreign")
    mine = _named(tmp_path, "add_bf16", os.getpid(), "mine")
    old = _named(tmp_path, "0123abcd", _dead_pid(), "old", kind="old")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    holders = [holding(p) for p in (foreign, mine, old)]
    try:
        clean_stale(tmp_path)
        assert foreign.is_dir() and mine.is_dir() and old.is_dir()
        assert (foreign / "kernel.cu").read_text() == "being written"
    finally:
        for h in holders:
            release(h)
    clean_stale(tmp_path)                       # the writers are gone: their folders go
    assert not foreign.exists() and not mine.exists() and not old.exists()


def test_an_unlocked_folder_is_dead_whatever_pid_it_names(tmp_path):
    """The recorded pid is a live process of this namespace (a reused number: not the writer) but nobody holds the
    lock: removed. A file temporary (the output's __init__.py) likewise."""
    bystander_path = tmp_path / "bystander"
    bystander_path.mkdir()
    bystander = holding(bystander_path)         # some live process, and its pid
    try:
        reused = _named(tmp_path, "add_bf16", bystander.pid, "reused")
        init = tmp_path / (temp_name("__init__.py").replace(f"-{os.getpid()}-", f"-{bystander.pid}-") + "f")
        init.write_text("half")
        clean_stale(tmp_path)
        assert not reused.exists() and not init.exists() and bystander_path.is_dir()
    finally:
        release(bystander)


def test_held_temp_is_locked_while_it_lives(tmp_path):
    """Inside the block the folder has its `.tmp-` name and another process cannot take its lock; afterwards it is
    gone. A `.new-` one (a writer killed before locking) goes only once old."""
    with held_temp(tmp_path, "pkg") as staged:
        assert staged.name.startswith(temp_name("pkg")) and staged.is_dir()
        probe = subprocess.run([sys.executable, "-c", "import fcntl, os, sys\n"
                                "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
                                "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept OSError:\n"
                                "    print('held')\nelse:\n    print('free')\n", str(staged)],
                               capture_output=True, text=True)
        assert probe.stdout.strip() == "held"
        clean_stale(tmp_path)
        assert staged.is_dir()
    assert not staged.exists()
    fresh = _named(tmp_path, "pkg", _dead_pid(), "new", kind="new")
    clean_stale(tmp_path)
    assert fresh.is_dir()
    os.utime(fresh, (time.time() - 7200, time.time() - 7200))
    clean_stale(tmp_path)
    assert not fresh.exists()


# One process builds once (warming the cache); then each round forks PROCS children, each enters a PID namespace of
# its own (os.unshare), whose pid 1 burns pids so that child i's builder is pid i + 2 there: each builder's pid is
# no process in the others' namespaces. The builders wait at a pipe and run `schedgen build SPEC -o OUT` into the one
# output folder the moment it opens. Prints, per round, what each said and whether the package imports.
HELPER = r"""
import importlib.util, io, json, os, sys, traceback
from pathlib import Path
from schedgen import cli
spec, out, scratch, rounds, procs = sys.argv[1:6]
argv = ["build", spec, "-D", "M=64", "-D", "N=512", "-o"]
assert cli.main(argv + [scratch]) == 0


def unshared():
    for flags in (os.CLONE_NEWPID, os.CLONE_NEWUSER | os.CLONE_NEWPID):
        try:
            os.unshare(flags)
            return True
        except OSError:
            pass
    return False


def builder(rd):
    os.read(rd, 1)
    sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
    try:
        rc = cli.main(argv + [out])
    except BaseException:
        traceback.print_exc()
        rc = 99
    return [rc, os.getpid(), sys.stdout.getvalue(), sys.stderr.getvalue()]


def child(i, rd, said):
    if not unshared():
        said.write_text(json.dumps("no pid namespace"))
        return
    init = os.fork()
    if init == 0:                             # pid 1 of the new namespace
        for k in range(i + 1):                # pids 2 .. i + 2; the last one builds
            pid = os.fork()
            if pid == 0:
                if k == i:
                    said.write_text(json.dumps(builder(rd)))
                os._exit(0)
            os.waitpid(pid, 0)
        os._exit(0)
    os.waitpid(init, 0)


report = []
for r in range(int(rounds)):
    rd, wr = os.pipe()
    kids = []
    for i in range(int(procs)):
        pid = os.fork()
        if pid == 0:
            os.close(wr)
            try:
                child(i, rd, Path(f"{out}.r{r}.{i}.json"))
            finally:
                os._exit(0)
        kids.append(pid)
    os.close(rd)
    os.close(wr)                              # EOF: every builder's read returns at once
    for pid in kids:
        os.waitpid(pid, 0)
    said = [json.loads(Path(f"{out}.r{r}.{i}.json").read_text()) for i in range(int(procs))]
    dest = Path(out) / "add_bf16"
    try:
        m = importlib.util.spec_from_file_location(f"add_bf16_r{r}", dest / "__init__.py",
                                                   submodule_search_locations=[str(dest)])
        mod = importlib.util.module_from_spec(m)
        m.loader.exec_module(mod)
        imported = mod.plan["sizes"]
    except Exception as exc:
        imported = repr(exc)
    dots = sorted(p.name for p in Path(out).iterdir() if p.name.startswith("."))
    report.append({"said": said, "imported": imported, "dots": dots})
print(json.dumps(report))
"""


def test_builds_in_pid_namespaces_of_their_own_keep_their_staging(tmp_path):
    procs, rounds = 6, 4
    cache, out, scratch = tmp_path / "cache", tmp_path / "out", tmp_path / "scratch" / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT), SCHEDGEN_CACHE=str(cache))
    res = run_process_group([sys.executable, "-c", HELPER, str(ADD), str(out), str(scratch), str(rounds),
                             str(procs)], timeout=180, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads(res.stdout.splitlines()[-1])
    if "no pid namespace" in report[0]["said"]:
        pytest.skip("this machine lets no process make a PID namespace (no root, no user namespaces)")
    for r, rnd in enumerate(report):
        pids = sorted(pid for _, pid, _, _ in rnd["said"])
        assert pids == list(range(2, procs + 2)), pids          # each builder's pid is no one's elsewhere
        for rc, pid, stdout, stderr in rnd["said"]:
            assert rc == 0 and stderr == "", f"round {r}, builder pid {pid}: exit {rc}\n{stderr[-2000:]}"
            assert "built map_add_bf16_32x256_s4_wg2" in stdout
        assert rnd["imported"] == {"M": 64, "N": 512}, rnd["imported"]
        assert rnd["dots"] == [], f"round {r}: temporaries left behind: {rnd['dots']}"
