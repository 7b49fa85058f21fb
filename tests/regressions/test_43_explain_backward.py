"""Issue 43 (steps 2-3): `schedgen explain` names the attention backward's form that the build renders (it said
FlashAttention-2's where the built kernel is the warp-specialized wgmma one), prints each backward step's own plan
with why the planner chose its form (the dynamic-size backward's slower form and, once built, its spill), and
`explain --at NAME=VALUE` explains a dynamic-size package at one call's sizes (an illegal --at is a located error
listing what is legal, exit 2, no traceback)."""
from __future__ import annotations

import pytest

from conftest import ROOT, SPECS_DIR
from schedgen import cli
from schedgen.build import build_spec
from schedgen.cache import Cache

ATTN_TRAIN = ROOT / "examples" / "train" / "attn.yaml"
DYNAMIC_ATTN = (SPECS_DIR / "attention_bf16_dynamic.yaml").read_text() + "backward: {}\n"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))


def _explain(capsys, *args) -> tuple[int, str, str]:
    status = cli.main(["explain", *map(str, args)])
    out = capsys.readouterr()
    return status, out.out, out.err


def _built_forms(plan, files: dict) -> dict[str, str]:
    """The form of a built attention_backward kernel, read off what the build rendered: the CUDA source's MMA
    instruction, the Pallas module's one-kernel body."""
    forms = {}
    if "kernel.cu" in files:
        cu = files["kernel.cu"].decode()
        forms["cuda"] = "wgmma" if "wgmma.mma_async" in cu else "mma.sync" if "mma.sync" in cu else "?"
    if "pallas_kernel.py" in files:
        forms["pallas"] = "one kernel" if "_fused_body" in files["pallas_kernel.py"].decode() else "two kernels"
    return forms


def _stated(line: str) -> dict[str, str]:
    """explain's form line as the same two words a backend."""
    stated = {}
    for part in line.strip().removeprefix("form").split(";"):
        part = part.strip()
        if part.startswith("CUDA:"):
            stated["cuda"] = "wgmma" if "wgmma kernel" in part else "mma.sync" if "mma.sync kernel" in part else "?"
        elif part.startswith("Pallas:"):
            stated["pallas"] = "one kernel" if "one kernel" in part else "two kernels" if "two kernels" in part else "?"
    return stated


@pytest.mark.parametrize("name", ["attention_backward_bf16_4096.yaml", "attention_backward_causal_bf16_4096.yaml"])
def test_explain_states_the_form_of_a_bundled_attention_backward_as_built(tmp_path, capsys, name):
    built = build_spec(SPECS_DIR / name, cache=Cache(tmp_path / "c"))
    status, out, _ = _explain(capsys, SPECS_DIR / name)
    assert status == 0
    form = next(ln for ln in out.splitlines() if ln.strip().startswith("form "))
    assert _stated(form) == _built_forms(built.plan, built.files) == {"cuda": "wgmma", "pallas": "one kernel"}


@pytest.mark.parametrize("case", ["fixed", "dynamic"])
def test_explain_states_the_form_of_the_built_backward_step(tmp_path, capsys, case):
    """The attention forward's backward step: explain's step plan says the form the build rendered (the fixed-size
    spec: the wgmma kernel and the one-kernel Pallas form, where explain used to say FlashAttention-2's; at dynamic
    sizes the slower two-kernel / mma.sync form, with the planner's reason and, once built, ptxas's spill)."""
    path = ATTN_TRAIN
    if case == "dynamic":
        path = tmp_path / "dyn_attn.yaml"
        path.write_text(DYNAMIC_ATTN)
    status, before, _ = _explain(capsys, path)
    assert status == 0
    built = build_spec(path)                                  # the session's cache: explain reads its verdicts
    step = built.backward.steps["attention_bwd"]
    status, out, _ = _explain(capsys, path)
    assert status == 0
    bw = out[out.index("backward pass"):]
    assert "FlashAttention-2's backward: delta" not in bw           # the hook's fixed claim is gone
    form = next(ln for ln in bw.splitlines() if ln.strip().startswith("form "))
    want = {"fixed": {"cuda": "wgmma", "pallas": "one kernel"},
            "dynamic": {"cuda": "mma.sync", "pallas": "two kernels"}}[case]
    assert _stated(form) == _built_forms(step.plan, step.files) == want, form
    if case == "dynamic":
        # why the slower form: the planner's pick and its reason, from the same decision the build made
        pick = next(ln for ln in bw.splitlines() if "schedule.pipeline.kind = emit_pipeline" in ln)
        assert "warp_specialized does not take this spec" in pick and "fixed sizes only" in pick, pick
        # the spill the build warns of, now in explain (before the build: not known yet, and explain says so)
        assert "compiler: not built yet" in before[before.index("backward pass"):]
        assert step.warnings, "the dynamic attention backward spilled here on 2026-12-06 (NVRTC 13.x)"
        spill = [ln for ln in bw.splitlines() if "compiler (its cached build): warning:" in ln]
        assert spill and "spills" in spill[0] and "fixed sizes does not spill" in spill[0], bw


def test_explain_at_a_call_of_a_dynamic_package(tmp_path, capsys):
    path = tmp_path / "dyn_attn.yaml"
    path.write_text(DYNAMIC_ATTN)
    status, top, _ = _explain(capsys, path)
    assert status == 0 and "at the largest sizes" in top
    status, out, err = _explain(capsys, path, "--at", "B=3", "--at", "S=640")
    assert status == 0, err
    assert out.startswith("at B=3, S=640: one call of the package built for B: dynamic, 1..64; S: dynamic")
    # the forward's counts at the call: 5 query blocks x 16 heads x 3, 4 B H S^2 D FLOPs
    assert "240 CTAs = 5 query blocks x 16 heads x 3 batch" in out
    assert f"FLOPs      {4 * 3 * 16 * 640 * 640 * 128 / 1e9:.1f} G" in out
    # the same package: the forward's kernel name as at the max
    assert top.splitlines()[0] in out
    # the backward step's own plan at the same sizes: its form, tiles, registers, why, FLOPs at the call
    bw = out[out.index("backward pass"):]
    assert "plan (attn_bwd_" in bw and "at B=3, S=640):" in bw
    assert "step 2, dK/dV kernel: 10 x 16 x 3 blocks of 64 keys" in bw
    assert f"{10 * 3 * 16 * 640 * 640 * 128 / 1e9:.3f} GFLOP (" in bw
    assert "registers a thread" in bw and "schedule.pipeline.kind = emit_pipeline" in bw
    # unnamed sizes stay at their max
    status, out, _ = _explain(capsys, path, "--at", "S=256")
    assert status == 0 and out.startswith("at B=64, S=256:")


@pytest.mark.parametrize("arg, says", [
    ("Q=3", ["op.sizes: --at Q=3: 'Q' is no size of this spec", "B: dynamic, 1..64; S: dynamic, 128..32768"]),
    ("S=129", ["op.sizes.S: --at S=129: S must be a multiple of 128 (in 128..32768)"]),
    ("S=65536", ["op.sizes.S: --at S=65536: S must be in 128..32768"]),
    ("B=two", ["op.sizes.B: --at B=two: not an integer; B: dynamic, 1..64"]),
    ("H=8", ["op.sizes.H: --at H=8: H is a fixed size (H = 16)", "B: dynamic, 1..64"]),
    ("S", ["--at S: expected NAME=VALUE"]),
])
def test_an_illegal_at_is_a_located_error(capsys, arg, says):
    path = SPECS_DIR / "attention_bf16_dynamic.yaml"
    status, out, err = _explain(capsys, path, "--at", arg)
    assert status == 2 and not out and "Traceback" not in err
    assert err.startswith(f"{path}:") and err.count("\n") == 1, err
    for s in says:
        assert s in err, err


def test_at_on_a_fixed_size_spec_says_there_is_nothing_to_name(capsys):
    status, _, err = _explain(capsys, SPECS_DIR / "matmul_bf16_4096.yaml", "--at", "M=1024")
    assert status == 2 and "M is a fixed size (M = 4096)" in err and "every size of this spec is fixed" in err


def test_at_draws_the_call_it_explains(tmp_path, capsys):
    """--draw with --at draws the package at that call (8 x 16 tiles at M = 1024), not at the max."""
    pytest.importorskip("matplotlib")
    status, out, _ = _explain(capsys, SPECS_DIR / "matmul_bf16_dynamic.yaml", "--at", "M=1024",
                              "--draw", tmp_path / "s.png")
    assert status == 0 and (tmp_path / "s.png").stat().st_size > 0
    assert "8 x 16 output tiles" in out and "M=1024, N=4096, K=4096" in out
