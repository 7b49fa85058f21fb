"""The Ray backend on the CPU: a local Ray instance with two logical GPUs, the measuring step replaced by the fake
runner's synthetic times. Checks the distribution and the merge: every trial built and measured on a worker, all
rows in the database written by the driver's thread alone, a trial whose worker dies retried, the winner verified
through Ray. Skipped where Ray is not installed (the `tune-cluster` extra; scripts/setup.sh installs it for CI)."""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from schedgen import tune as T
from schedgen.tune.db import TuneDB
from test_tune import ADD, GPU, fake_ms

HAVE_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAVE_RAY, reason="Ray is not installed (pip install 'schedgen[tune-cluster]')")

# 9 points: the constraint drops (64, 4), the SMEM check (64, 3): 7 trials
SPACE = """tune:
  params:
    block_M: [16, 32, 64]
    stages: [2, 3, 4]
  constraints:
    - block_M * stages <= 192
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One local Ray instance for the module (its start is the slow part). Its workers import this module (the fake
    functions) and build into a scratch cache."""
    ray = pytest.importorskip("ray")
    here = Path(__file__).resolve().parent
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "SCHEDGEN_CACHE", "RAY_AUTH_MODE")}
    os.environ["PYTHONPATH"] = os.pathsep.join([str(here.parents[1]), str(here.parent), str(here),
                                                *filter(None, [saved["PYTHONPATH"]])])
    os.environ["SCHEDGEN_CACHE"] = str(tmp_path_factory.mktemp("ray-cache"))
    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def add_spec(tmp_path):
    path = tmp_path / "add_tune.yaml"
    path.write_text(ADD.read_text().replace("sizes: {M: 4096, N: 4096}", "sizes: {M: 1024, N: 4096}") + SPACE)
    return path


# These run in the supervised measuring process on a Ray worker (importable from this module).


def ray_measure(built, backend, options):
    p = built.plan
    marker = Path(options["marker"])
    if p.block[0] == 32 and p.stages == 2 and not marker.exists():
        marker.write_text(str(os.getppid()))
        os.kill(os.getppid(), signal.SIGKILL)              # the Ray worker dies (a lost node, the OOM killer)
        os._exit(0)
    return {"time_ms": fake_ms(p), "detail": json.dumps({"gpu": os.environ.get("CUDA_VISIBLE_DEVICES"),
                                                         "worker": os.getppid()})}


def ray_verify(built, backend, options):
    return {"ok": True, "rel_error": 1e-3}


@needs_ray
def test_ray_trials_merge_into_one_db_and_a_dead_worker_is_retried(cluster, add_spec, tmp_path, monkeypatch):
    from schedgen.tune.cluster import RayRunner
    db = tmp_path / "tune.sqlite"
    writers: set = set()
    put = TuneDB.put

    def spy(self, row):
        writers.add(threading.current_thread().name)
        return put(self, row)
    monkeypatch.setattr(TuneDB, "put", spy)
    marker = tmp_path / "killed"
    runner = RayRunner("auto", ray_measure, ray_verify, timeout=30, start_timeout=120,
                       options={"marker": str(marker)}, env=GPU)
    assert runner.parallel == 2 and not runner.own          # the Ray this process started is used as it is
    try:
        result = T.tune(add_spec, runner=runner, db=db, cache=tmp_path / "driver-cache")
    finally:
        runner.close()
    assert cluster.is_initialized()                          # not ours to shut down
    assert writers == {threading.main_thread().name}
    assert result.measured == 7 and result.compiled == 7 and len(result.rows) == 7 and not result.failed
    details = [json.loads(r["detail"]) for r in result.rows]
    assert {d["gpu"] for d in details} <= {"0", "1"}         # Ray pinned each trial to one of its GPUs
    retried = next(r for r in result.rows if r["knobs"] == {"block_M": 32, "stages": 2})
    assert marker.exists() and json.loads(retried["detail"])["worker"] != int(marker.read_text())
    assert retried["time_ms"] == pytest.approx(1.03)
    assert result.best["knobs"] == {"block_M": 32, "stages": 3} and result.best["verified"] is True
    with TuneDB(db) as d:
        rows = d.rows()
    assert len(rows) == 7 and {r["gpu"] for r in rows} == {"Fake H200"}
    assert {r["key"] for r in rows} == {c.key for c in result.pruning.kept}


@needs_ray
def test_ray_compile_errors_come_back_as_rows(cluster, add_spec, tmp_path):
    """A candidate the worker cannot build is a compile_error row, its message naming the spec, not the worker's
    scratch copy."""
    from schedgen.tune.cluster import _trial
    cand = T.prune(T.load_space(add_spec)).kept[0]
    got = _trial(add_spec.name, add_spec.read_bytes(), {**cand.overrides, "schedule.pipeline.max_concurrent_steps":
                                                         "many"}, "cuda",
                 {"env": GPU, "measure": ray_measure, "verify": ray_verify, "setup": None, "options": {},
                  "timeout": 5, "verify_timeout": 5, "start_timeout": 60})
    assert got["status"] == "compile_error" and got["compiled"] is False
    assert add_spec.name in got["detail"] and "schedgen-trial-" not in got["detail"]


def test_missing_ray_is_one_line_naming_the_extra(add_spec, monkeypatch, capsys):
    from schedgen import cli
    monkeypatch.setitem(sys.modules, "ray", None)             # `import ray` fails as if not installed
    assert cli.main(["tune", str(add_spec), "--ray", "auto"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "schedgen: --ray needs Ray, which is not installed here: pip install 'schedgen[tune-cluster]'"


def test_cli_refuses_ray_with_gpus(add_spec, capsys):
    from schedgen import cli
    with pytest.raises(SystemExit) as ex:
        cli.main(["tune", str(add_spec), "--ray", "auto", "--gpus", "2"])
    assert ex.value.code == 2
    assert "--ray and --gpus" in capsys.readouterr().err


def test_ray_is_an_extra_imported_only_for_ray():
    import subprocess
    import tomllib
    proj = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    assert proj["optional-dependencies"]["tune-cluster"] == ["ray==2.60.0"]
    assert not any(d.startswith("ray") for d in proj["dependencies"])
    out = subprocess.run([sys.executable, "-c", "import sys, schedgen.cli, schedgen.tune, schedgen.tune.cluster; "
                          "print('ray' in sys.modules)"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@needs_ray
def test_a_cluster_without_gpus_is_one_line(cluster, monkeypatch):
    """Regression: a RayRunner that gave up in its constructor failed in close() with an AttributeError."""
    from schedgen.tune.cluster import RayRunner
    monkeypatch.setattr(cluster, "cluster_resources", lambda: {"CPU": 2.0})
    with pytest.raises(RuntimeError) as err:
        RayRunner("auto", ray_measure, ray_verify, env=GPU)
    assert str(err.value) == "--ray auto: the Ray cluster has no GPU resources to measure on"
    assert cluster.is_initialized()                          # a Ray it did not start is left running


class FakeCluster:
    """A runner with `trial` (as RayRunner), no Ray: trials finish on threads; the candidates with block_M 64 report
    that they ran on another GPU model."""

    def __init__(self):
        from concurrent.futures import ThreadPoolExecutor
        self.env, self.parallel, self.inflight, self.most = dict(GPU), 2, 0, 0
        self.threads = ThreadPoolExecutor(4)
        self.lock = threading.Lock()

    def start(self):
        pass

    def trial(self, spec_path, cand, backend):
        from schedgen.build import build_spec
        with self.lock:
            self.inflight += 1
            self.most = max(self.most, self.inflight)

        def run():
            import time
            time.sleep(0.05)
            built = build_spec(spec_path, cand.overrides)
            with self.lock:
                self.inflight -= 1
            other = built.plan.block[0] == 64
            return {"status": "ok", "time_ms": fake_ms(built.plan), "detail": "", "compiled": True,
                    "gpu": "Other GPU" if other else GPU["gpu"], "driver": GPU["driver"]}
        return self.threads.submit(run)

    def verify(self, built, backend):
        return T.Result("ok", extra={"ok": True, "rel_error": 1e-3})

    def close(self):
        self.threads.shutdown()


def test_remote_trials_keep_capacity_and_key_rows_by_the_gpu_that_ran_them(add_spec, tmp_path, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    runner = FakeCluster()
    try:
        result = T.tune(add_spec, runner=runner, db=tmp_path / "tune.sqlite")
    finally:
        runner.close()
    assert runner.most <= 2                                  # at most one trial per GPU in flight
    assert result.measured == 7 and len(result.rows) == 6   # the one 64-row candidate ran on another model
    assert any("1 candidates were timed on another GPU model than Fake H200" in n for n in result.notes)
    with TuneDB(tmp_path / "tune.sqlite") as d:
        rows = d.rows()
    other = [r for r in rows if r["gpu"] == "Other GPU"]
    assert len(rows) == 7 and len(other) == 1 and other[0]["knobs"]["block_M"] == 64
    tools, tool_key = T.toolchain_info()
    assert other[0]["key"] == T.result_key(other[0]["config_key"], "cuda", "Other GPU", GPU["driver"], tool_key)
