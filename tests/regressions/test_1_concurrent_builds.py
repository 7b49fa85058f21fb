"""Defect group 1 (issue 14): concurrent `schedgen build SPEC -o OUT` into one output folder lost the package.

Every build staged into the same `OUT/.<name>.tmp`, removed it if it was there and renamed it onto `OUT/<name>`
after an rmtree: processes died with FileNotFoundError / FileExistsError / OSError(ENOTEMPTY) tracebacks, and in
some rounds `OUT/<name>/` was left empty or half-written while the others had printed "built". Now each build
stages into a folder of its own and swaps it in with one rename (renameat2 RENAME_EXCHANGE where a package is
already there; without it: the old one renamed aside first); the staging of a killed build is removed later.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _specs import ADD
from conftest import run_process_group
from schedgen import build
from schedgen.build import build_spec, package
from schedgen.cache import Cache

ROOT = Path(__file__).resolve().parents[2]
PROCS, ROUNDS = 8, 5

# One process imports schedgen and builds once (warming the cache), then each round forks 8 children that wait at
# a pipe and run `schedgen build SPEC -o OUT` (cli.main) the moment it opens: the 8 reach the output folder within
# a millisecond or so of each other, and no child pays for an import. After each round it records what the 8 said
# and what OUT holds, and imports the package.
HELPER = r"""
import hashlib, importlib.util, io, json, os, sys, traceback
from pathlib import Path
from schedgen import build, cli
spec, out, scratch, rounds, procs, no_exchange = sys.argv[1:7]
if no_exchange == "1":
    build._exchange = lambda a, b: None        # a file system without RENAME_EXCHANGE: the rename-aside path
argv = ["build", spec, "-D", "M=64", "-D", "N=512", "-o"]
assert cli.main(argv + [scratch]) == 0
report = []
for r in range(int(rounds)):
    rd, wr = os.pipe()
    kids = []
    for i in range(int(procs)):
        pid = os.fork()
        if pid == 0:
            os.close(wr)
            os.read(rd, 1)
            sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
            try:
                rc = cli.main(argv + [out])
            except BaseException:
                traceback.print_exc()
                rc = 99
            Path(f"{out}.r{r}.{i}.json").write_text(json.dumps([rc, sys.stdout.getvalue(), sys.stderr.getvalue()]))
            os._exit(0)
        kids.append(pid)
    os.close(rd)
    os.close(wr)                                # EOF: every child's read returns at once
    for pid in kids:
        os.waitpid(pid, 0)
    said = [json.loads(Path(f"{out}.r{r}.{i}.json").read_text()) for i in range(int(procs))]
    dest = Path(out) / "add_bf16"
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in dest.iterdir()} if dest.is_dir() else None
    try:
        m = importlib.util.spec_from_file_location(f"add_bf16_r{r}", dest / "__init__.py",
                                                   submodule_search_locations=[str(dest)])
        mod = importlib.util.module_from_spec(m)
        m.loader.exec_module(mod)
        imported = [callable(mod.add_bf16), mod.plan["kernel_name"], mod.plan["sizes"]]
    except Exception as exc:
        imported = repr(exc)
    dots = sorted(p.name for p in Path(out).iterdir() if p.name.startswith("."))
    report.append({"said": said, "files": files, "symlink": dest.is_symlink(), "imported": imported, "dots": dots})
print(json.dumps(report))
"""


@pytest.mark.parametrize("exchange", ["renameat2-exchange", "rename-aside"])
def test_eight_concurrent_builds_leave_one_whole_package(tmp_path, exchange):
    cache, out, scratch = tmp_path / "cache", tmp_path / "out", tmp_path / "scratch" / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT), SCHEDGEN_CACHE=str(cache))
    res = run_process_group([sys.executable, "-c", HELPER, str(ADD), str(out), str(scratch), str(ROUNDS), str(PROCS),
                             "1" if exchange == "rename-aside" else "0"], timeout=120, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    # what a single build leaves (the manifest names the same spec path): every round must leave exactly this
    want = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (scratch / "add_bf16").iterdir()}
    report = json.loads(res.stdout.splitlines()[-1])
    assert len(report) == ROUNDS
    for r, rnd in enumerate(report):
        for rc, stdout, stderr in rnd["said"]:
            assert rc == 0 and stderr == "", f"round {r}: exit {rc}\n{stderr[-2000:]}"
            assert "built map_add_bf16_32x256_s4_wg2" in stdout and "(cached)" in stdout
        assert rnd["files"] == want, f"round {r}: the package is not one build's whole package"
        assert rnd["symlink"] is False
        assert rnd["imported"] == [True, "map_add_bf16_32x256_s4_wg2", {"M": 64, "N": 512}], rnd["imported"]
        assert rnd["dots"] == [], f"round {r}: staging folders left behind: {rnd['dots']}"


def test_swap_never_follows_or_leaves_the_old_one(tmp_path):
    """The exchange puts the new folder in place of a file, a folder or a symlink; the old one ends in `staged`."""
    from schedgen.cache import temp_name
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    for old in ("folder", "file", "symlink"):
        out = tmp_path / f"out_{old}"
        out.mkdir()
        dest = out / "pkg"
        if old == "folder":
            dest.mkdir()
            (dest / "stale.py").write_text("")
        elif old == "file":
            dest.write_text("not a package")
        else:
            dest.symlink_to(outside, target_is_directory=True)
        staged = out / (temp_name("pkg") + "x")
        staged.mkdir()
        (staged / "__init__.py").write_text("NEW = 1\n")
        build._swap_in(staged, dest)
        assert dest.is_dir() and not dest.is_symlink() and (dest / "__init__.py").read_text() == "NEW = 1\n"
        assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"]


def test_stale_staging_of_killed_builds_is_removed(tmp_path):
    """A build killed between staging and swapping leaves `.add_bf16.tmp-<host>-<pid>-*`: the next build removes
    those whose lock nobody holds (issue 41: the lock, not the pid, says a writer lives), and keeps a live build's
    one, fresh or old."""
    from _locks import holding, release
    from schedgen.cache import temp_name
    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)

    def staging(pid: int, tail: str) -> Path:
        p = out / (temp_name("add_bf16").replace(f"-{os.getpid()}-", f"-{pid}-") + tail)
        p.mkdir()
        (p / "kernel.cu").write_text("half written")
        return p
    killed = staging(dead_pid, "dead")
    running = staging(dead_pid, "live")
    old = staging(dead_pid, "old")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    old_running = staging(dead_pid, "oldlive")
    os.utime(old_running, (time.time() - 7200, time.time() - 7200))
    legacy_unrelated = out / ".notes"                    # not a staging name: never touched
    legacy_unrelated.mkdir()
    holders = [holding(running), holding(old_running)]
    try:
        package(build_spec(ADD, {"M": 64, "N": 512}, cache=Cache(tmp_path / "cache")), out)
        assert not killed.exists() and not old.exists()
        assert running.exists() and old_running.exists() and legacy_unrelated.exists()
        assert (out / "add_bf16" / "__init__.py").is_file()
    finally:
        for h in holders:
            release(h)
