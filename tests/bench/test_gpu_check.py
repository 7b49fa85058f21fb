"""bench/gpu.py, the project's one GPU check, on the CPU: what a row says for each way a spec's verify or a test can
end (a hang and a fault are rows, never the end of the call), what `changed` selects, and the table."""
from __future__ import annotations

import json
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT))
from bench import gpu  # noqa: E402


def test_a_hung_child_is_killed_with_its_whole_session_and_reported(tmp_path):
    # the child forks a grandchild that would hold the pipe for an hour (past the test's own limit: a call that
    # returns killed them)
    status, rc, secs = gpu.run_bounded([sys.executable, "-c", "import os, time; os.fork(); time.sleep(3600)"],
                                       tmp_path / "log", timeout=1.5)
    assert status == "HANG" and rc is None and secs >= 1.5


def test_a_fault_and_a_failure_are_told_apart(tmp_path):
    crash = gpu.run_bounded([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"],
                            tmp_path / "a", timeout=60)
    fail = gpu.run_bounded([sys.executable, "-c", "raise SystemExit(1)"], tmp_path / "b", timeout=60)
    assert crash[0] == "CRASH" and crash[1] < 0
    assert fail[:2] == ("FAIL", 1)


def _checks(tmp_path, rows):
    js = tmp_path / "v.json"
    js.write_text(json.dumps(rows))
    return js


def _check(result, backend="cuda", err=1e-3, note="", magnitude=1.0):
    return {"backend": backend, "output": "o", "shape": {"M": 4096}, "rel_error": err, "tolerance": 1e-2,
            "result": result, "note": note, "magnitude": magnitude}


def test_verify_rows(tmp_path):
    spec, log = ROOT / "specs" / "add_bf16.yaml", tmp_path / "log"
    log.write_text("last words\n")
    ok = gpu.verify_row(spec, "ok", 0, 3.0, _checks(tmp_path, [_check("ok"), _check("ok", "pallas", 5e-3)]), log)
    assert ok.status == "ok" and "worst 5.0e-03" in ok.detail and "cuda+pallas" in ok.detail
    bad = gpu.verify_row(spec, "FAIL", 1, 3.0, _checks(tmp_path, [_check("ok"), _check("FAIL", err=0.5,
                                                                                        magnitude=1e3)]), log)
    assert bad.status == "FAIL" and "1/2 checks failed" in bad.detail and "|x|~1000" in bad.detail
    skip = gpu.verify_row(spec, "FAIL", 4, 1.0, _checks(tmp_path, [_check("SKIP", note="not run: no GPU")]), log)
    assert skip.status == "SKIP" and "no GPU" in skip.detail
    hang = gpu.verify_row(spec, "HANG", None, 400.0, tmp_path / "none.json", log)
    assert hang.status == "HANG" and "last words" in hang.detail
    assert gpu.verify_row(spec, "FAIL", 2, 1.0, tmp_path / "none.json", log).status == "ERROR"


def test_junit_rows_one_per_file(tmp_path):
    xml = tmp_path / "t.xml"
    xml.write_text("""<testsuites><testsuite>
      <testcase classname="tests.runtime.test_gpu" name="test_a" time="2.0"/>
      <testcase classname="tests.runtime.test_gpu" name="test_b" time="1.0"><failure message="assert 1 == 2">x</failure></testcase>
      <testcase classname="tests.families.map.test_map_peers" name="test_c" time="0.5"><skipped message="no"/></testcase>
    </testsuite></testsuites>""")
    files = ["tests/runtime/test_gpu.py", "tests/families/map/test_map_peers.py"]
    rows, counts = gpu.junit_rows(xml, files)
    assert counts == {"passed": 1, "failed": 1, "skipped": 1}
    by = {r.item: r for r in rows}
    assert by["tests/runtime/test_gpu.py"].status == "FAIL" and "test_b: assert 1 == 2" in by["tests/runtime/test_gpu.py"].detail
    assert by["tests/families/map/test_map_peers.py"].status == "SKIP"


@pytest.mark.parametrize("changed", ["schedgen/families/rowwise/plan.py", "templates/rowwise/cuda.cu.j2"])
def test_changed_selects_a_family_its_specs_and_tests(changed):
    specs, tests, why = gpu.selection([changed, "docs/benchmarks.md"])
    assert "rowwise" in why
    names = {p.name for p in specs}
    assert {"softmax_bf16.yaml", "layernorm_bf16.yaml", "crossentropy_bf16.yaml"} <= names
    assert "add_bf16.yaml" not in names and "matmul_bf16_4096.yaml" not in names
    assert "tests/families/rowwise/test_rowwise_gpu.py" in tests
    assert all(t in gpu.gpu_test_files() for t in tests)


@pytest.mark.parametrize("changed", ["schedgen/runtime/kernel.py", "templates/common/common.cuh.j2"])
def test_changed_in_the_shared_pipeline_selects_everything(changed):
    specs, tests, why = gpu.selection([changed])
    assert len(specs) == len(gpu.bundled_specs()) and tests == gpu.gpu_test_files()
    assert "shared pipeline" in why


def test_record_runs_are_the_suites_unlabelled_runs():
    runs = gpu.record_runs()
    assert runs and all(not r.get("label") for r in runs)
    assert {"spec": "specs/matmul_bf16_dynamic.yaml", "define": [], "at": ["M=4096"]} in runs
    only = gpu.record_runs({"specs/add_bf16.yaml"})
    assert only == [{"spec": "specs/add_bf16.yaml", "define": ["M=32768", "N=16384"], "at": []}]


def test_the_table_lists_what_did_not_pass_and_counts(tmp_path):
    rows = [gpu.Row("verify", "a.yaml", "ok", 1, "fine"), gpu.Row("verify", "b.yaml", "HANG", 400, "stuck"),
            gpu.Row("tests", "(all, 4 workers)", "ok", 200, "70 passed")]
    text = gpu.table(rows, {"gpu": "NVIDIA H200", "gpu_uuid": "GPU-x", "driver": "580", "commit": "abc"}, 500)
    assert "| verify | b.yaml | HANG |" in text and "a.yaml" not in text
    assert "ok 1" in text and "HANG 1" in text and "70 passed" in text


@pytest.mark.parametrize("argv", [["--part", "nope"]])
def test_bad_part_is_a_usage_error(argv):
    with pytest.raises(SystemExit) as e:
        gpu.main(argv)
    assert e.value.code == 2


def test_record_sets_are_disjoint_and_cover_the_bundled_specs():
    record, user, bundled = (gpu.record_runs(which=w) for w in ("record", "user", "bundled"))
    assert 10 <= len(record) <= 20             # the published rows fit one call
    assert all(r["spec"].startswith("bench/user_shapes/") for r in user) and len(user) >= 9
    specs = {r["spec"] for r in record + bundled}
    kinds = {gpu.spec_kind(ROOT / s) for s in specs}
    assert {"map", "matmul", "attention", "rowwise", "grouped_matmul"} <= kinds
    assert len(gpu.record_runs(which="all")) <= len(record) + len(user) + len(bundled)


def test_record_rows_come_from_one_supervised_worker(monkeypatch, tmp_path):
    """A run that raises is an ERROR row and the next run still runs; rows are written as they come."""
    calls = []

    class FakeSupervisor:
        def __init__(self, **kw):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def call(self, fn, spec, define, at, iters, timeout):
            calls.append(spec)
            from schedgen.supervise import Outcome
            if "bad" in spec:
                return Outcome("timeout", detail="no answer within 150 s")
            return Outcome("ok", [{"spec": "x", "backend": "cuda", "shape": {"M": 1}, "time_ms": 1.0,
                                   "verified": True, "peers": {"cublas": {"ratio": 1.01}}}])
    import schedgen.supervise
    monkeypatch.setattr(schedgen.supervise, "Supervisor", FakeSupervisor)
    rows = gpu.part_record([{"spec": "specs/bad.yaml", "define": [], "at": []},
                            {"spec": "specs/good.yaml", "define": [], "at": ["M=7"]}], tmp_path, gpu.Budget(600))
    assert [r.status for r in rows] == ["HANG", "ok"] and calls == ["specs/bad.yaml", "specs/good.yaml"]
    assert "cublas 1.01x" in rows[1].detail
    assert json.loads((tmp_path / "record.json").read_text())[0]["spec"] == "x"
