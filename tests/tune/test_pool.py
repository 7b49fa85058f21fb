"""Tuning on every GPU of a node, on the CPU: which GPUs are visible and which `--gpus` takes, PoolRunner's workers
(each pinned with CUDA_VISIBLE_DEVICES, measuring at once, a hang replacing only its own worker) with the driver
as the one writer of the database, and the time budget (`--time`) with its seeded random order."""
from __future__ import annotations

import json
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from schedgen import tune as T
from schedgen.tune.db import TuneDB
from schedgen.tune.pool import Gpu, PoolRunner, one_model, pick_gpus, visible_gpus
from test_tune import ADD, ADD_TUNE, GPU, FakeRunner, fake_ms

SMI = """GPU 0: NVIDIA H200 (UUID: GPU-aaaa1111-0000-0000-0000-000000000000)
GPU 1: NVIDIA H200 (UUID: GPU-bbbb2222-0000-0000-0000-000000000000)
GPU 2: NVIDIA H100 80GB HBM3 (UUID: GPU-cccc3333-0000-0000-0000-000000000000)
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("pool-cache")


@pytest.fixture(scope="module")
def pool():
    ex = T.compile_pool(2)
    yield ex
    ex.shutdown(wait=True, cancel_futures=True)


@pytest.fixture
def add_spec(tmp_path):
    path = tmp_path / "add_tune.yaml"
    path.write_text(ADD.read_text().replace("sizes: {M: 4096, N: 4096}", "sizes: {M: 1024, N: 4096}") + ADD_TUNE)
    return path


# ------------------------------------------------------------------------------------------------ which GPUs


def test_visible_gpus_follow_cuda_visible_devices():
    smi = lambda: SMI  # noqa: E731
    assert visible_gpus({}, smi) == [Gpu("0", "NVIDIA H200"), Gpu("1", "NVIDIA H200"),
                                     Gpu("2", "NVIDIA H100 80GB HBM3")]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,0"}, smi) == [Gpu("2", "NVIDIA H100 80GB HBM3"),
                                                                  Gpu("0", "NVIDIA H200")]
    # a UUID (or its prefix, as CUDA takes it); the list ends at the first entry that names no GPU, as in CUDA
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-bbbb2222,7,0"}, smi) == [Gpu("GPU-bbbb2222", "NVIDIA H200")]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, smi) == []
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}, smi) == []
    # no nvidia-smi: nothing to check the entries against, taken as written; nothing set: none
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,1"}, lambda: "") == [Gpu("0"), Gpu("1")]
    assert visible_gpus({}, lambda: "") == []


def test_pick_gpus_all_a_count_or_device_numbers():
    vis = visible_gpus({}, lambda: SMI)
    assert pick_gpus("all", vis) == vis
    assert pick_gpus("2", vis) == vis[:2]
    assert pick_gpus("0,2", vis) == [vis[0], vis[2]]
    assert pick_gpus("1,", vis) == [vis[1]]               # one device
    for bad, text in [("0", "--gpus 0: 3 GPUs visible; give all, a count 1..3, or device numbers 0..2"),
                      ("4", "--gpus 4: 3 GPUs visible"), ("0,5", "'5' is not a visible device"),
                      ("a,b", "'a', 'b' is not a visible device"), ("1,1", "a device is named twice")]:
        with pytest.raises(ValueError) as err:
            pick_gpus(bad, vis)
        assert text in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError, match="no GPU is visible here"):
        pick_gpus("all", [])


def test_one_model_per_run():
    vis = visible_gpus({}, lambda: SMI)
    kept, note = one_model(vis)
    assert kept == vis[:2]
    assert "measuring on the 2 NVIDIA H200(s) (0, 1); left out as another model: 2 (NVIDIA H100 80GB HBM3)" in note
    assert one_model(vis[:2]) == (vis[:2], "")
    kept, note = one_model([vis[2], vis[0]])        # the first one's model
    assert kept == [vis[2]] and "0 (NVIDIA H200)" in note


# ------------------------------------------------------------------------------------------------ the pool
# These run in the pool's spawned workers (importable from this module). Nothing here depends on the machine's speed:
# the two GPUs measure at once because each one's first job waits for the other's (a marker file each, no time
# limit that matters), and the hang is a job that never ends against a limit counted from the worker's "started"
# signal (schedgen/supervise.py), which healthy jobs (no sleeps, no imports left) meet by a wide margin.


def pool_measure(built, backend, options):
    p = built.plan
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES")
    if options.get("hang") and p.block[0] == 16 and p.stages == 3 and p.launch.num_blocks == 132:
        threading.Event().wait()                          # never finishes: its worker is killed and replaced
    t0 = time.time()
    meet = options.get("meet")
    if meet:                                              # each GPU's job waits until the other GPU has begun one
        Path(meet, str(gpu)).touch()
        while not all(Path(meet, g).exists() for g in ("0", "1")):
            time.sleep(0.01)
    return {"time_ms": fake_ms(p), "detail": json.dumps({"gpu": gpu, "pid": os.getpid(), "t0": t0,
                                                         "t1": time.time()})}


def pool_verify(built, backend, options):
    return {"ok": True, "rel_error": 1e-3, "detail": os.environ.get("CUDA_VISIBLE_DEVICES", "")}


def test_pool_measures_on_every_gpu_at_once_with_the_driver_the_one_writer(add_spec, cache, pool, tmp_path):
    db = tmp_path / "tune.sqlite"
    runner = PoolRunner([Gpu("0", "Fake H200"), Gpu("1", "Fake H200")], pool_measure, pool_verify, timeout=300,
                        start_timeout=300, env=GPU, options={"meet": str(tmp_path)})
    writers: set = set()
    put = TuneDB.put

    def spy(self, row):
        writers.add(threading.current_thread().name)
        return put(self, row)
    TuneDB.put = spy
    try:
        result = T.tune(add_spec, runner=runner, db=db, pool=pool, cache=cache)
        starts = [w.starts for w in runner.workers]
    finally:
        TuneDB.put = put
        runner.close()
    assert writers == {threading.main_thread().name}            # one writer: the driver's thread
    assert runner.parallel == 2 and result.measured == 11 and len(result.rows) == 11 and not result.failed
    ok = [json.loads(r["detail"]) for r in result.rows]
    assert {d["gpu"] for d in ok} == {"0", "1"} and starts == [1, 1]   # each worker pinned to its GPU, kept
    assert len({d["pid"] for d in ok}) == 2
    overlap = any(a["gpu"] != b["gpu"] and a["t0"] < b["t1"] and b["t0"] < a["t1"] for a in ok for b in ok)
    assert overlap                                              # the two GPUs measured at the same time
    assert result.best["verified"] is True and result.best["knobs"]["block_M"] == 32
    with TuneDB(db) as d:
        rows = d.rows()
    assert len(rows) == 11 and {r["gpu"] for r in rows} == {"Fake H200"}


def test_pool_hang_replaces_only_its_own_worker(add_spec, cache, pool, tmp_path):
    runner = PoolRunner([Gpu("0", "Fake H200"), Gpu("1", "Fake H200")], pool_measure, pool_verify, timeout=3.0,
                        start_timeout=300, env=GPU, options={"hang": True})
    try:
        result = T.tune(add_spec, runner=runner, db=tmp_path / "tune.sqlite", pool=pool, cache=cache)
        workers = sorted((w.starts, w.worker.proc is not None) for w in runner.workers)
    finally:
        runner.close()
    assert result.measured == 11 and len(result.rows) == 11
    hung = [r for r in result.rows if r["status"] == "hang"]
    assert len(hung) == 1 and hung[0]["knobs"]["block_M"] == 16 and hung[0]["knobs"]["stages"] == 3
    assert "did not finish within 3 s" in hung[0]["detail"]
    ok = [json.loads(r["detail"]) for r in result.rows if r["status"] == "ok"]
    pids = {g: {d["pid"] for d in ok if d["gpu"] == g} for g in ("0", "1")}
    # only the hung worker was killed (and replaced, if it had another job): the other kept its one process
    assert workers in ([(1, False), (1, True)], [(1, True), (2, True)])
    assert min(len(p) for p in pids.values() if p) == 1 and len(ok) == 10
    assert result.best["verified"] is True and result.best["knobs"]["block_M"] == 32


# ------------------------------------------------------------------------------------------------ the time budget


class Clock:
    """The tuner's clock (schedgen.tune.driver's `time`), moved only by the test: the time budget runs out exactly
    where the test says, whatever the machine's speed."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class ExpiresAt(FakeRunner):
    """A fake whose `n`-th measurement lasts past the run's deadline (it moves the clock a day on)."""

    def __init__(self, n: int, clock: Clock):
        super().__init__()
        self.n, self.clock = n, clock

    def measure(self, built, backend):
        if len(self.measured) + 1 == self.n:
            self.clock.now += 86400
        return super().measure(built, backend)


def test_time_budget_stops_new_measurements_and_verifies_what_was_measured(add_spec, cache, pool, tmp_path,
                                                                           monkeypatch):
    from schedgen.tune import driver
    T.tune(add_spec, dry_run=True, pool=pool, cache=cache)       # built: the candidates below are cache hits
    db = tmp_path / "tune.sqlite"
    one = ThreadPoolExecutor(1)                                  # compiles in order: measurements in order
    clock = Clock()
    monkeypatch.setattr(driver, "time", clock)
    runner = ExpiresAt(3, clock)
    try:
        result = T.tune(add_spec, runner=runner, db=db, pool=one, cache=cache, time_budget=6.0, seed=5)
    finally:
        one.shutdown()
        monkeypatch.undo()
    assert result.measured == 3 and result.left == 8 and len(runner.measured) == 3
    assert any("the time budget (--time 6 s) ran out: 8 of 11 candidates left unmeasured" in n for n in result.notes)
    assert result.best is not None and result.best["verified"] is True
    # measured in a seeded random order, not the space's
    kept = T.prune(T.load_space(add_spec)).kept
    shuffled = list(kept)
    random.Random(5).shuffle(shuffled)
    assert shuffled != kept
    assert runner.measured == [c.plan.launch.kernel_name for c in shuffled[:3]]
    from rich.console import Console
    console = Console(width=160, record=True, file=open(os.devnull, "w"))
    console.print(T.summary(result))
    assert "ran out: 8 of 11 candidates left unmeasured" in console.export_text()
    # a rerun without a budget measures the rest
    rest = T.tune(add_spec, runner=FakeRunner(), db=db, pool=pool, cache=cache)
    assert rest.reused == 3 and rest.measured == 8 and rest.left == 0 and not rest.notes


# ------------------------------------------------------------------------------------------------ the CLI


def test_cli_gpus_makes_one_pinned_worker_per_gpu(monkeypatch, capsys, add_spec):
    from schedgen import cli
    from schedgen.tune import pool as tpool
    monkeypatch.setattr(tpool, "nvidia_smi_list", lambda: SMI)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(tpool, "gpu_environment", lambda: {"gpu": "NVIDIA H200", "driver": "999.1"})

    def runner(*argv):
        return cli._tune_runner(cli.parser().parse_args(["tune", str(add_spec), *argv]), T.WorkerRunner)
    r = runner()                                  # all visible, one model: the two H200s
    assert isinstance(r, PoolRunner) and [w.worker.env for w in r.workers] == [{"CUDA_VISIBLE_DEVICES": "0"},
                                                                               {"CUDA_VISIBLE_DEVICES": "1"}]
    assert "left out as another model: 2 (NVIDIA H100 80GB HBM3)" in r.note and r.env["gpu"] == "NVIDIA H200"
    r = runner("--gpus", "2,")
    assert [g.id for g in r.gpus] == ["2"] and r.env["gpu"] == "NVIDIA H100 80GB HBM3" and r.parallel == 1
    with pytest.raises(SystemExit) as ex:
        runner("--gpus", "0,7")
    assert ex.value.code == 2 and "schedgen: --gpus 0,7: '7' is not a visible device" in capsys.readouterr().err
    monkeypatch.setattr(tpool, "nvidia_smi_list", lambda: "")
    assert isinstance(runner(), T.WorkerRunner)   # no GPU seen: the one worker, which says so when it starts
    with pytest.raises(SystemExit) as ex:
        cli.parser().parse_args(["tune", str(add_spec), "--time", "-3"])
    assert ex.value.code == 2


# ------------------------------------------------------------------------------------------------ on the GPU


@pytest.mark.gpu
def test_gpu_pool_times_on_every_visible_gpu(add_spec, cache, pool, tmp_path):
    """The real runner functions in one pinned worker per visible GPU (one on a one-GPU machine)."""
    gpus = visible_gpus()
    runner = PoolRunner(gpus, timeout=60)
    try:
        result = T.tune(add_spec, runner=runner, db=tmp_path / "tune.sqlite", pool=pool, cache=cache)
    finally:
        runner.close()
    assert not result.failed and len(result.rows) == 11 and result.measured == 11
    assert all(r["time_ms"] > 0 and r["gbps"] > 0 for r in result.rows)
    assert result.best["verified"] is True and runner.starts == len(runner.workers) == len(one_model(gpus)[0])
    assert {r["gpu"] for r in result.rows} == {gpus[0].name}
