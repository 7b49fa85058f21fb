"""`schedgen verify` checks a spec's backward too (issue 43): every gradient of a spec with a `backward:` section
against the float64 reference backward (the graph run with the families' references), a row each, on the Pallas
interpreter here (the GPU test below runs the CUDA kernels). A wrong gradient is a FAIL row naming it."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import ROOT, SPECS_DIR
from schedgen import cli, verify

LINEAR = SPECS_DIR / "linear_gelu_bf16_train.yaml"      # dx, dw and dbias (a broadcast operand summed back)
ATTN = ROOT / "examples" / "train" / "attn.yaml"         # dq, dk, dv of one attention_backward step
FORWARD_KEYS = {"spec", "backend", "output", "shape", "dtype", "rel_error", "tolerance", "ok", "note", "skipped",
                "magnitude", "result"}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))


def _verify(tmp_path, spec, *more) -> tuple[int, list[dict]]:
    out = tmp_path / "rows.json"
    status = cli.main(["verify", str(spec), "--interpret", "--timeout", "0", "--json", str(out), *more])
    return status, json.loads(out.read_text())


def test_each_gradient_is_a_row_of_its_own_in_the_interpreter(tmp_path, capsys):
    status, rows = _verify(tmp_path, LINEAR)
    table = capsys.readouterr().out
    assert status == 0, table
    grads = {r["output"]: r for r in rows if r["output"].startswith("grad:")}
    assert sorted(grads) == ["grad:bias", "grad:w", "grad:x"], table
    for name, r in grads.items():
        assert r["result"] == "ok" and r["backend"] == "pallas" and 0 < r["rel_error"] <= r["tolerance"], r
        assert "backward" in r["note"] and "interpreted" in r["note"], r
        assert f" {name} " in table
    # dtype and tolerance per gradient: the inputs' own (bias is f32)
    assert grads["grad:bias"]["dtype"] == "f32" and grads["grad:bias"]["tolerance"] < grads["grad:x"]["tolerance"]
    # the forward's rows as before, and every row keeps verify --json's keys
    assert {r["output"] for r in rows if not r["output"].startswith("grad:")} == {"y", "pre"}
    assert all(set(r) == FORWARD_KEYS for r in rows)


def test_a_wrong_gradient_fails_verify_and_is_named(tmp_path, monkeypatch, capsys):
    """The dk of the attention backward's step doubled (a deliberately wrong backward): verify exits 1 with a
    FAIL row for grad:k; dq and dv still verify."""
    real = verify.run_step

    def doubled(kernel, plan, values, backend, interpret):
        got, note = real(kernel, plan, values, backend, interpret)
        dk = [o.name for o in plan.outputs][1]           # attention_backward's outputs: dq, dk, dv
        return {**got, dk: (np.asarray(got[dk], np.float32) * 2).astype(got[dk].dtype)}, note

    monkeypatch.setattr(verify, "run_step", doubled)
    status, rows = _verify(tmp_path, ATTN)
    table = capsys.readouterr().out
    assert status == 1, table
    result = {r["output"]: r["result"] for r in rows}
    assert result == {"o": "ok", "lse": "ok", "grad:q": "ok", "grad:k": "FAIL", "grad:v": "ok"}, table
    failed = [ln for ln in table.splitlines() if ln.rstrip().endswith("FAIL") or " FAIL " in ln]
    assert len(failed) == 1 and " grad:k " in failed[0], table


def test_a_large_magnitude_set_scales_down_where_the_backward_is_ill_conditioned():
    """|q|, |k| ~ 1e3 make attention's logits ~1e6: P = exp(s - lse) recomputed in f32 cannot meet the bf16
    tolerance there, so the backward's set is drawn at 1e3 / 8^n; a linear layer's backward keeps 1e3."""
    from schedgen.build import build_spec
    for path, keeps in ((ATTN, False), (LINEAR, True)):
        built = build_spec(path)
        built = build_spec(path, verify.small_overrides(built))
        sizes = {n: v for n, v in built.plan.sizes.items()}
        inputs, outputs, upstream, refs, magnitude = verify.backward_case(built, sizes, 5, 1e3)
        assert (magnitude == 1e3) == keeps, (path.name, magnitude)
        assert 1 <= magnitude and set(refs) == set(built.backward.graph.grads)
        assert all(np.all(np.isfinite(v)) for v in refs.values())


def test_a_spec_without_backward_gets_no_gradient_rows(tmp_path):
    status, rows = _verify(tmp_path, SPECS_DIR / "add_bf16.yaml")
    assert status == 0 and rows and not [r for r in rows if r["output"].startswith("grad:")]


@pytest.mark.gpu
@pytest.mark.parametrize("spec, grads", [(LINEAR, {"grad:x", "grad:w", "grad:bias"}),
                                         (ATTN, {"grad:q", "grad:k", "grad:v"})])
def test_the_backward_verifies_on_the_gpu(tmp_path, capsys, spec, grads):
    """Both backends compiled (the CUDA step kernels, the Pallas ones through Mosaic GPU) at a few tiles, and the
    large-magnitude set."""
    out = tmp_path / "rows.json"
    status = cli.main(["verify", str(spec), "--backend", "all", "--small", "--magnitude", "1e3", "--timeout", "0",
                       "--json", str(out)])
    rows = json.loads(out.read_text())
    assert status == 0, capsys.readouterr().out
    for backend in ("cuda", "pallas"):
        mine = [r for r in rows if r["backend"] == backend and r["output"].startswith("grad:")]
        assert {r["output"] for r in mine} == grads and all(r["result"] == "ok" for r in mine), mine
        assert {r["magnitude"] > 1 for r in mine} == {False, True}, mine
