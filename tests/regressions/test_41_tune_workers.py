"""Defect group 10 (issue 41): `tune --workers` had no upper bound.

`schedgen tune --workers 100000` on a 2-CPU machine started a compile process per candidate at once (21 for a space
of 21): NVRTC is CPU-bound, so past the CPUs they only queue, each holding its memory. The count is now bounded by
twice the CPUs this process may use: more is a usage error (exit 2, one line saying what is legal) before anything
starts, and `compile_pool` (the Python API's pools: tune(workers=...), the bucketed loop) raises ValueError.
"""
from __future__ import annotations

import pytest

from _specs import add_with_tune
from schedgen import cli
from schedgen import tune as T
from schedgen.tune import compile as C

SMALL = "tune:\n  params:\n    block_M: [16, 32]\n"


@pytest.fixture(autouse=True)
def _two_cpus(monkeypatch, tmp_path):
    """A machine of 2 CPUs, whatever this one has; nothing may be started."""
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(C, "cpus", lambda: 2)

    def refuse(*args, **kwargs):
        raise AssertionError("a compile process was started")
    monkeypatch.setattr(C, "ProcessPoolExecutor", refuse)


def _run(argv):
    try:
        return cli.main([str(a) for a in argv])
    except SystemExit as stop:
        return stop.code


@pytest.mark.parametrize("workers", ["5", "100000", str(2 ** 63)])
@pytest.mark.parametrize("extra", [["--dry-run"], [], ["--export", "w.yaml", "--db-only"], ["--ray", "auto"]])
def test_too_many_workers_is_a_usage_error(tmp_path, capsys, monkeypatch, workers, extra):
    monkeypatch.chdir(tmp_path)
    spec = add_with_tune(tmp_path, SMALL)
    assert _run(["tune", spec, "--workers", workers, *extra]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    if int(workers) >= 2 ** 63:         # past any count the command line takes: argparse's usage error for the option
        assert err.rstrip().splitlines()[-1].endswith(f"argument --workers: '{workers}': give a whole number >= 1")
        return
    assert err.count("\n") == 1 and err == (f"schedgen: --workers {workers}: {workers} compile processes: give a whole "
                                            f"number from 1 to 4 (twice the 2 CPUs this process may use)\n")


@pytest.mark.parametrize("workers", [0, 5, 100000, True, 2.0])
def test_compile_pool_refuses_a_count_out_of_range(workers):
    with pytest.raises(ValueError, match="give a whole number from 1 to 4"):
        T.compile_pool(workers)


def test_the_tune_api_refuses_it_before_anything_starts(tmp_path):
    spec = add_with_tune(tmp_path, SMALL)
    with pytest.raises(ValueError, match="100000 compile processes"):
        T.tune(spec, dry_run=True, workers=100000)


def test_the_legal_counts_are_taken(monkeypatch):
    started = []
    monkeypatch.setattr(C, "ProcessPoolExecutor", lambda max_workers, **kw: started.append(max_workers))
    for n in (1, 4, None):
        C.compile_pool(n)
    C.compile_pool(None, measuring=False)
    assert started == [1, 4, 1, 2]
