"""A derived backward step's compiler warning (build.Built.warnings, autodiff/stepwarn.py): it names the step, says
what the compiler said, and points at what the user can change: the field of the user's file the step copies (the
forward's schedule a recomputing step reuses, a dynamic size), or else the `backward` field, saying that the
planner picks the step's schedule and that the warning costs speed only. The forward's own warning is unchanged."""
from __future__ import annotations

import pytest

import schedgen.build as build
from schedgen.autodiff.stepwarn import DerivedStep
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.errors import SourceMap

from conftest import SPECS_DIR

# attention at one consumer warpgroup of 160 registers and 48-row K/V blocks: ptxas spills (a real verdict)
SPILLING_ATTENTION = """\
name: spill_attn
description: attention whose consumers get too few registers, with its backward recomputing the forward
op:
  kind: attention
  sizes: {B: 1, S: 64, T: 64, H: 2, D: 128}
  inputs:
    q: {shape: [B, S, H, D], dtype: bf16}
    k: {shape: [B, T, H, D], dtype: bf16}
    v: {shape: [B, T, H, D], dtype: bf16}
  outputs:
    o: {shape: [B, S, H, D], dtype: bf16}
  causal: false
schedule:
  in_specs:
    q: {block_shape: [64, 128]}
    k: {block_shape: [48, 128]}
    v: {block_shape: [48, 128]}
  pipeline:
    kind: warp_specialized
    max_concurrent_steps: 1
    num_compute_wgs: 1
    compute_registers: 160
  backends: [cuda]
backward:
  save: recompute
"""


def _pos(text: str, needle: str) -> str:
    """'line:col' of the first `needle` in `text` (1-based)."""
    for i, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return f"{i}:{line.index(needle) + 1}"
    raise AssertionError(f"{needle!r} not in the spec")


def test_a_recomputing_step_points_at_the_forward_field_it_copies(tmp_path):
    spec = tmp_path / "spill_attn.yaml"
    spec.write_text(SPILLING_ATTENTION)
    b = build_spec(spec, cache=Cache(tmp_path / "c"))
    at = f"{spec}:{_pos(SPILLING_ATTENTION, '160')}: schedule.pipeline.compute_registers: warning: "
    assert b.warnings, "ptxas spilled here on 2026-12-06 (NVRTC 13.x); if it no longer does, pick a tighter case"
    # the forward's own warning: as before (no step named, the forward's advice)
    for w in b.warnings:
        assert w.startswith(at) and "raise compute_registers" in w and "backward step" not in w, w
    rec = b.backward.steps["recompute"].warnings
    assert rec and len(rec) == len(b.warnings), rec
    for w, fw in zip(rec, b.warnings):
        # the same field of the user's file (the step copies the forward's schedule), the step named, the verdict
        assert w.startswith(at + "backward step recompute ["), w
        verdict = fw[len(at):].split(";")[0]
        assert verdict in w and "raise compute_registers" in w and "the step copies this field from this file" in w


def test_a_step_at_a_dynamic_size_points_at_the_size(tmp_path):
    text = (SPECS_DIR / "attention_bf16_dynamic.yaml").read_text() + "backward: {}\n"
    spec = tmp_path / "dyn_attn.yaml"
    spec.write_text(text)
    b = build_spec(spec, cache=Cache(tmp_path / "c"))
    ws = b.backward.steps["attention_bwd"].warnings
    assert ws, "the dynamic attention backward spilled a few bytes here on 2026-12-06 (NVRTC 13.x); if it no " \
               "longer does, pick a tighter case"
    at = f"{spec}:{_pos(text, '{dynamic: true, max: 64}')}"
    for w in ws:
        assert w.startswith(f"{at}: op.sizes.B: warning: backward step attention_bwd ["), w
        assert "the kernel spills" in w and "fixed sizes does not spill" in w, w
        assert "block_q" not in w and "backward: warning" not in w, w


PTXAS = ("ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
         "insufficient register resources for the wgmma pipeline in the function '{}'")


def test_a_planner_scheduled_step_says_no_action_is_needed(tmp_path, monkeypatch):
    """The dx GEMM of a linear layer's backward is the planner's: no field of the file sets its schedule. Its
    kernel's compile log gets a ptxas C7515 line (no bundled spec makes ptxas complain about a step the planner
    scheduled); the forward's kernel gets the same line and keeps the forward's advice."""
    text = (SPECS_DIR / "linear_gelu_bf16_train.yaml").read_text()
    spec = tmp_path / "lin.yaml"
    spec.write_text(text)
    real, hit = build.compile_cuda, []

    def compile_cuda(source, name="kernel.cu", **kw):
        out = real(source, name, **kw)
        if name in ("linear_gelu_bf16_train.cu", "linear_gelu_bf16_train_dlhs.cu"):
            hit.append(name)
            out = type(out)(out.ptx, out.cubin, out.log + "\n" + PTXAS.format(name[:-3]))
        return out

    monkeypatch.setattr(build, "compile_cuda", compile_cuda)
    b = build_spec(spec, cache=Cache(tmp_path / "c"))
    assert sorted(hit) == ["linear_gelu_bf16_train.cu", "linear_gelu_bf16_train_dlhs.cu"]
    verdict = ("ptxas C7515: Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
               "insufficient register resources for the wgmma pipeline")
    # the forward: its compute_registers (not written: located at its pipeline section), the forward's advice
    assert b.warnings == [f"{spec}:{_pos(text, '{kind: warp_specialized')}: schedule.pipeline.compute_registers: warning: "
                          f"{verdict}; raise compute_registers (the budget setmaxnreg gives each consumer) or use "
                          f"smaller blocks"]
    steps = b.backward.steps
    assert steps["dacc"].warnings == [] and steps["drhs"].warnings == []
    [w] = steps["dlhs"].warnings
    assert w.startswith(f"{spec}:{_pos(text, 'wrt: [x')}: backward: warning: backward step dlhs ["), w
    assert verdict in w and "the planner picks this step's schedule" in w and "no action needed" in w, w
    assert "compute_registers" not in w and "smaller blocks" not in w, w


@pytest.mark.parametrize("user, step, field, reaches", [
    # the step copies the pipeline section: a compute_registers written there would reach it
    ({"schedule": {"pipeline": {"num_compute_wgs": 2}}}, {"schedule": {"pipeline": {"num_compute_wgs": 2}}},
     ("schedule", "pipeline", "compute_registers"), True),
    # the step's schedule is the planner's (only the backends copied)
    ({"schedule": {"pipeline": {"num_compute_wgs": 2}, "backends": ["cuda"]}}, {"schedule": {"backends": ["cuda"]}},
     ("schedule", "pipeline", "compute_registers"), False),
    # the same section with another value: the family chose it
    ({"schedule": {"pipeline": {"num_compute_wgs": 2}}}, {"schedule": {"pipeline": {"num_compute_wgs": 1}}},
     ("schedule", "pipeline", "compute_registers"), False),
    # the user wrote no schedule: nothing of the file sets it
    ({"op": {"sizes": {"M": 64}}}, {"op": {"sizes": {"M": 64}}}, ("schedule", "pipeline", "compute_registers"),
     False),
    # a size the step copies
    ({"op": {"sizes": {"B": {"dynamic": True}}}}, {"op": {"sizes": {"B": {"dynamic": True}}}}, ("op", "sizes", "B"),
     True),
    # a path outside the schedule and the sizes is no copy even when equal
    ({"op": {"inputs": {"x": 1}}}, {"op": {"inputs": {"x": 1}}}, ("op", "inputs", "x"), False),
])
def test_which_fields_reach_a_step(user, step, field, reaches):
    d = DerivedStep("s", "", step, user, SourceMap(file="f.yaml"))
    assert d.reaches(field) is reaches
    w = d.warning("V", field, "; ADVICE")
    assert ("ADVICE" in w) is reaches and ("no action needed" in w) is (not reaches)
    assert w.startswith(f"f.yaml:1:1: {'.'.join(field) if reaches else 'backward'}: warning: backward step s: V")
