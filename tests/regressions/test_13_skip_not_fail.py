"""Defect group 13 (issue 14), verify's half: what was not run looked like a failure, or like nothing.

Without a GPU, `schedgen verify` printed FAIL for every backend (a CudaError, or jax's "Only interpret mode is
supported on CPU backend"), and a CUDA-only spec under `--interpret` gave an empty table and exit status 0. Now every
spec/backend not run is a SKIP row that says why (no usable CUDA GPU, for Pallas none without --interpret, a backend
the spec does not have), as the multi-GPU family already did, and the exit status says what happened: 0 nothing
failed and at least one check passed, 1 a check failed, 4 every check was skipped (nothing was verified).
The SKIP row is one function (`schedgen.verify.skipped`, reason from `schedgen.verify.unavailable`) for bench too.
"""
from __future__ import annotations

import re

import pytest

from _specs import ADD, SPECS_DIR
from schedgen import cli
from schedgen import verify as V
from schedgen.build import build_spec
from schedgen.runtime import driver

CUDA_ONLY = SPECS_DIR / "attention_bf16_d64_4096.yaml"          # schedule.backends: [cuda]
no_gpu = pytest.mark.skipif(driver.available()[0], reason="a GPU is present: these are the no-GPU outcomes")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def _shared_cache(monkeypatch, cache):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(cache))


def _rows(out: str) -> dict[tuple[str, str], str]:
    """(spec, backend) -> the result column and note of the verify table."""
    got = {}
    for line in out.splitlines()[1:]:
        m = re.match(r"(\S+)\s+(cuda|pallas)\s+.*?\s(ok|SKIP|FAIL)(  .*)?$", line)
        assert m, line
        got[(m[1], m[2])] = m[3] + (m[4] or "")
    return got


@no_gpu
def test_without_a_gpu_every_backend_is_skip_with_its_reason(capsys):
    assert cli.main(["verify", "--timeout", "0", str(ADD)]) == 4
    cap = capsys.readouterr()
    rows = _rows(cap.out)
    assert rows[("add_bf16", "cuda")].startswith("SKIP  not run: no NVIDIA driver (libcuda.so.1) was found")
    assert rows[("add_bf16", "pallas")].startswith("SKIP  not run: no NVIDIA driver (libcuda.so.1) was found")
    assert rows[("add_bf16", "pallas")].endswith("; --interpret runs the Pallas kernel on the CPU")
    assert "FAIL" not in cap.out
    assert "nothing was verified: 2 of 2 checks skipped" in cap.err and "exit status 4" in cap.err


def test_a_backend_the_spec_lacks_is_a_skip_row_not_an_empty_table(capsys):
    assert cli.main(["verify", "--timeout", "0", "--interpret", str(CUDA_ONLY)]) == 4
    rows = _rows(capsys.readouterr().out)
    assert rows == {("attention_bf16_d64_4096", "pallas"):
                    "SKIP  not run: the spec has no pallas backend (schedule.backends: cuda)"}


def test_skips_beside_a_pass_exit_0(capsys):
    assert cli.main(["verify", "--timeout", "0", "--interpret", str(ADD), str(CUDA_ONLY)]) == 0
    cap = capsys.readouterr()
    rows = _rows(cap.out)
    assert rows[("add_bf16", "pallas")].startswith("ok") and rows[("attention_bf16_d64_4096", "pallas")].startswith(
        "SKIP")
    assert "nothing was verified" not in cap.err


def test_a_failure_is_still_fail_exit_1(capsys, monkeypatch):
    def broken(kernel, plan, inputs, interpret):
        raise RuntimeError("the kernel wrote nothing")
    monkeypatch.setattr(V, "run_pallas", broken)
    assert cli.main(["verify", "--timeout", "0", "--interpret", str(ADD), str(CUDA_ONLY)]) == 1
    rows = _rows(capsys.readouterr().out)
    assert rows[("add_bf16", "pallas")] == "FAIL  RuntimeError: the kernel wrote nothing"
    assert rows[("attention_bf16_d64_4096", "pallas")].startswith("SKIP")


@pytest.mark.parametrize("found, reason", [
    ((False, "CUDA unavailable: no CUDA device found"), "CUDA unavailable: no CUDA device found"),
    ((True, "NVIDIA A100-SXM4-80GB, sm_80"), "built for Hopper (sm_90a); this GPU is NVIDIA A100-SXM4-80GB, sm_80"),
    ((True, "NVIDIA H100 80GB HBM3, sm_90"), ""),
    ((True, "NVIDIA H200, sm_90"), ""),
])
def test_why_cuda_cannot_run(monkeypatch, found, reason):
    monkeypatch.setattr(driver, "available", lambda target="sm_90a": found)
    got = V.unavailable("cuda")
    assert (reason in got) if reason else got == ""


def test_why_pallas_cannot_run(monkeypatch):
    assert V.unavailable("pallas", interpret=True) == ""
    monkeypatch.setattr(driver, "available", lambda target="sm_90a": (False, "CUDA unavailable: no CUDA device found"))
    assert V.unavailable("pallas") == ("CUDA unavailable: no CUDA device found; --interpret runs the Pallas kernel on "
                                       "the CPU")
    assert V.unavailable("pallas", interpret=True) == ""
    monkeypatch.setattr(driver, "available", lambda target="sm_90a": (True, "NVIDIA H200, sm_90"))
    assert V.unavailable("pallas") == ""
    assert V.unavailable("tpu").startswith("unknown backend")


def test_the_skip_row_is_reusable():
    built = build_spec(str(ADD))
    (row,) = V.skipped(built.plan, "cuda", "no GPU here")
    assert row.skipped and not row.ok and row.result == "SKIP" and row.note == "not run: no GPU here"
    assert row.row()["skipped"] is True and row.shape == dict(built.plan.sizes) and row.output == "o"


def test_verify_here_runs_what_it_can(monkeypatch):
    """A machine with jax's GPU but no CUDA driver (say): Pallas runs, CUDA is a SKIP row, in backend order."""
    built = build_spec(str(ADD), {"M": 64, "N": 512})
    monkeypatch.setattr(V, "unavailable", lambda b, interpret=False, target="sm_90a": "no driver" if b == "cuda" else "")
    checks = V.verify_here(built, ["cuda", "pallas"], interpret=True, seed=1)
    assert [(c.backend, c.result) for c in checks] == [("cuda", "SKIP"), ("pallas", "ok")]
