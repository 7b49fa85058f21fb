"""bench/tune_rate.py on the CPU: its space is exactly 100 distinct kernels, and --dry runs the cold and warm
tunings (real compiles and database, synthetic times) and writes the record. The figure itself needs the H200."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

from conftest import ROOT
from schedgen import tune as T


def _script():
    spec = importlib.util.spec_from_file_location("tune_rate", ROOT / "bench" / "tune_rate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_space_is_exactly_100_kernels(tmp_path):
    space = T.load_space(_script().write_spec(tmp_path))
    pruning = T.prune(space)
    assert space.size == 100 and len(pruning.kept) == 100 and pruning.pruned == 0
    assert {(c.plan.tiles.tile_m, c.plan.tiles.tile_n) for c in pruning.kept} == {(128, 128)}


def test_dry_run_tunes_cold_then_warm_and_writes_the_record(tmp_path):
    out = tmp_path / "rate.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "tune_rate.py"), "--dry", "--budget", "3", "--out",
                          str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    rec = json.loads(out.read_text())
    assert rec["dry"] is True and rec["budget"] == 3 and rec["gpus"] == 1
    assert rec["cold"]["measured"] == 3 and rec["cold"]["compiled"] == 3 and rec["cold"]["reused"] == 0
    assert rec["warm"]["measured"] == 0 and rec["warm"]["compiled"] == 0 and rec["warm"]["reused"] == 3
    assert rec["candidates_per_min"] == rec["cold"]["measured"] / rec["cold"]["wall_s"] * 60 > 0
    assert rec["cold"]["best"] is not None
    lines = run.stdout.splitlines()
    assert lines[0].startswith("tune rate: matmul_bf16_4096_tune100.yaml on dry run") and "(--dry)" in lines[0]
    assert lines[2].split()[:4] == ["cold", "3", "3", "0"] and lines[3].split()[:4] == ["warm", "3", "0", "3"]
