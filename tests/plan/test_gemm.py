"""The GEMM package (schedgen/plan/gemm, issue 42 step 4): its public interface, the planner of each MMA generation,
the plan composed of records, and the families that plan GEMMs importing nothing else of it."""
from __future__ import annotations

import ast
import dataclasses
import json
import re

import pytest

from conftest import ROOT
from schedgen.errors import SpecErrors
from schedgen.frontend.validate import load_spec
from schedgen.plan import gemm, plan, to_dict
from schedgen.plan.hardware import TARGETS, for_target
from schedgen.plan.launch import KernelLaunch

SMALL = """
name: small_gemm
op:
  kind: matmul
  sizes: {M: 256, N: 512, K: 256}
  inputs:
    a: {shape: [M, K], dtype: bf16}
    b: {shape: [K, N], dtype: bf16}
  outputs:
    out: {shape: [M, N], dtype: bf16}
schedule:
  target: TARGET
  backends: [cuda]
"""
GEMM_FAMILIES = ("matmul", "grouped_matmul", "collective_matmul")
RECORDS = ("tiles", "cluster", "pipeline", "layout", "warps", "staging", "mma")


def _small(tmp_path, target: str, overrides=None):
    path = tmp_path / f"small_{target}.yaml"
    path.write_text(SMALL.replace("TARGET", target))
    return load_spec(str(path), overrides)


def _plan(tmp_path, target: str, overrides=None):
    return plan(*_small(tmp_path, target, overrides))


def _errors(tmp_path, target: str, overrides) -> list:
    with pytest.raises(SpecErrors) as info:
        _plan(tmp_path, target, overrides)
    return info.value.problems


def test_every_target_has_the_planner_of_its_mma_generation():
    assert {hw.mma for hw in TARGETS.values()} <= set(gemm.GENERATIONS)
    assert gemm.generation("sm_90a") is gemm.SM90 and gemm.SM90.mma == for_target("sm_90a").mma == "wgmma"
    assert gemm.generation("sm_100a") is gemm.SM100 and gemm.SM100.mma == for_target("sm_100a").mma == "tcgen05"


def test_the_sm90_planner_builds_the_wgmma_record(tmp_path):
    p = _plan(tmp_path, "sm_90a")
    assert isinstance(p, gemm.MatmulPlan) and isinstance(p.mma, gemm.Wgmma)
    tm, tn, tk = p.tiles.tile_m, p.tiles.tile_n, p.tiles.tile_k
    w = p.warps
    assert p.launch.threads == 128 * (1 + w.num_consumers) and p.launch.target == "sm_90a"
    # one consumer's wgmma m64nN: its 64-row M blocks, N / 2 accumulators a thread, 16-element K steps a stage
    assert (p.mma.m_blocks, p.mma.wgmma_regs, p.mma.k_wgmmas) == (w.wg_tile_m // 64, w.wg_tile_n // 2, tk // 16)
    assert w.wg_tile_m * w.wg_tile_n * w.num_consumers == tm * tn and w.acc_regs == w.wg_tile_m * w.wg_tile_n // 128
    # the epilogue stores 64-row chunks of a consumer's tile, staged through SMEM
    assert p.staging.epi_rows == 64 and p.staging.epi_store == "tma" and p.not_interpretable == ""


def test_the_sm100_planner_builds_the_tcgen05_record(tmp_path):
    p = _plan(tmp_path, "sm_100a")
    assert isinstance(p.mma, gemm.Tcgen05Mma) and isinstance(p.mma.blackwell, gemm.BlackwellPlan)
    bw = p.mma.blackwell
    assert p.launch.threads == 192 and p.launch.target == "sm_100a" and "_sm100_cg1" in p.launch.kernel_name
    assert (bw.mma_m, bw.mma_n, bw.k_mmas) == (128, p.tiles.tile_n, p.tiles.tile_k * 2 // 32)
    assert bw.tmem_cols <= for_target("sm_100a").tmem_columns and p.launch.smem_bytes == bw.smem_bytes
    # its own records where its kernel differs: a warp's 32-row staging tiles, the ring of lhs-then-rhs stages
    assert (p.staging.epi_rows, p.staging.epi_cols) == (32, bw.epi_cols)
    assert p.pipeline.stage_tx_bytes == bw.stage_bytes and p.pipeline.smem_buffers[0].name == "ring"
    assert p.mma.tcgen05 is None and p.not_interpretable == ""          # no Pallas kernel planned (backends: cuda)


def test_the_generations_differ_only_in_their_records(tmp_path):
    hopper, blackwell = _plan(tmp_path, "sm_90a"), _plan(tmp_path, "sm_100a")
    assert (hopper.m, hopper.n, hopper.k, hopper.in_dtype) == (blackwell.m, blackwell.n, blackwell.k, blackwell.in_dtype)
    assert type(hopper.mma) is not type(blackwell.mma)
    assert isinstance(blackwell.mma.wgmma, gemm.Wgmma)      # the wgmma numbers plan.json has always shown


@pytest.mark.parametrize("overrides, path, needle", [
    ({"schedule.cluster": [1, 1, 2]}, ("schedule", "cluster"), "split-K clusters ([1, 1, S]) are a Hopper kernel's"),
    ({"op.transpose_lhs": True, "op.inputs.a.shape": ["K", "M"]}, ("op", "transpose_lhs"),
     "the sm_100a matmul kernel reads a K-major lhs [M, K] only"),
    ({"schedule.pipeline.consumer_schedule": "pingpong", "schedule.pipeline.num_compute_wgs": 2},
     ("schedule", "pipeline", "consumer_schedule"), "double-buffered in TMEM"),
])
def test_the_sm100_planner_refuses_what_its_kernel_cannot_do(tmp_path, overrides, path, needle):
    problems = _errors(tmp_path, "sm_100a", overrides)
    assert any(p.path == path and needle in p.message for p in problems), [(p.path, p.message) for p in problems]


def test_only_the_generation_that_has_the_rule_reports_it(tmp_path):
    """The wgmma kernel's rules (the consumers' accumulators in registers) do not apply on sm_100a: a tile whose
    accumulators would not fit one consumer's registers is a located error on sm_90a only."""
    big = {"schedule.in_specs.a.block_shape": [128, 64], "schedule.in_specs.b.block_shape": [64, 256],
           "schedule.out_specs.out.block_shape": [128, 256], "schedule.pipeline.num_compute_wgs": 1}
    hopper = _errors(tmp_path, "sm_90a", big)
    assert [(p.path, p.message.split(" plus ")[0]) for p in hopper] == [
        (("schedule", "pipeline", "compute_registers"), "each consumer thread holds 256 f32 accumulators (128 x 256 / 128)")]
    blackwell = _plan(tmp_path, "sm_100a", {k: v for k, v in big.items() if "num_compute_wgs" not in k})
    assert isinstance(blackwell.mma, gemm.Tcgen05Mma)
    assert gemm.SM90.wgmma_problems(problems := []) is problems and gemm.SM100.wgmma_problems(problems) is not problems


def test_the_sm100_planner_plans_a_dynamic_loop_as_nd_loop_and_claims_tiles(tmp_path):
    spec, _ = _small(tmp_path, "sm_100a", {"schedule.persistent.loop": "dynamic"})
    assert gemm.SM100.schedule_spec(spec).schedule.persistent.loop == "nd_loop"
    assert gemm.SM90.schedule_spec(spec) is spec
    p = _plan(tmp_path, "sm_100a", {"schedule.persistent.loop": "dynamic"})
    assert p.mma.blackwell.dynamic and p.launch.kernel_name.endswith("_clc") and not p.launch.auto_blocks


def test_the_plan_is_composed_of_records_and_plan_json_reads_as_before(tmp_path):
    fields = {f.name: f for f in dataclasses.fields(gemm.MatmulPlan)}
    assert len(fields) < 80
    assert all(fields[r].metadata.get("inline") for r in ("launch", *RECORDS))
    for target in ("sm_90a", "sm_100a"):
        p = _plan(tmp_path, target)
        data = json.loads(json.dumps(to_dict(p)))
        assert not set(RECORDS) & set(data)                  # each record's fields at the plan's top level
        shown = [f.name for r in RECORDS for f in dataclasses.fields(getattr(p, r)) if not f.metadata]
        assert len(shown) == len(set(shown)) and set(shown) <= set(data)   # no two records share a field's name
        assert not set(shown) & {f.name for f in dataclasses.fields(KernelLaunch)} and not set(shown) & set(fields)


def test_at_max_evaluates_the_records_extents():
    from conftest import SPECS_DIR
    p = plan(*load_spec(str(SPECS_DIR / "matmul_bf16_dynamic.yaml")))
    q = gemm.at_max(p)
    assert not isinstance(p.tiles.num_tiles, int)
    assert all(isinstance(getattr(q.tiles, f), int) for f in ("tiles_m", "tiles_n", "num_tiles", "k_iters"))
    assert isinstance(q.launch.num_blocks, int) and isinstance(q.m, int) and isinstance(q.flops, int)


def test_no_plan_is_asked_whether_it_has_a_generations_field():
    """No getattr / hasattr on a plan for a generation's field in schedgen/ or bench/: plan.mma is the generation's
    record, told apart by its type."""
    names = "|".join(f.name for r in (gemm.Wgmma, gemm.Tcgen05Mma, gemm.WarpRoles, gemm.EpilogueStaging)
                     for f in dataclasses.fields(r)) + "|pingpong|mma"
    pattern = re.compile(rf"(getattr|hasattr)\(([a-z_]+(\[[0-9]\])?\.)*(plan|p|mm|q)\b[^,]*, [\"']({names})[\"']")
    found = [f"{path.relative_to(ROOT)}:{i}" for root in ("schedgen", "bench") for path in (ROOT / root).rglob("*.py")
             for i, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []


def _imports(path):
    """(module imported, names) of each `from ... import ...` in a module, resolved to an absolute module."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    package = parts[:-1]                       # a module's package (an __init__'s: its own)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            yield ".".join(base + (node.module.split(".") if node.module else [])), [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, []


def test_the_gemm_families_import_the_gemm_package_by_its_public_names_only():
    """matmul, grouped_matmul and collective_matmul import `schedgen.plan.gemm` itself (its `__all__`), none of its
    modules, and nothing of each other (one family reaches another through its manifest: registry.get(kind))."""
    public = set(gemm.__all__)
    bad = []
    for family in GEMM_FAMILIES:
        for path in sorted((ROOT / "schedgen" / "families" / family).glob("*.py")):
            for module, names in _imports(path):
                where = f"{path.relative_to(ROOT)}: {module}"
                if module.startswith("schedgen.plan.gemm."):
                    bad.append(f"{where} (a module of the GEMM package)")
                elif module == "schedgen.plan.gemm" and not set(names) <= public:
                    bad.append(f"{where} {sorted(set(names) - public)} (not in its __all__)")
                elif module.startswith("schedgen.families.") and module.split(".")[2] != family:
                    bad.append(f"{where} (another family's module)")
    assert bad == []


def test_the_gemm_package_exports_what_it_says():
    assert len(gemm.__all__) == len(set(gemm.__all__)) and all(hasattr(gemm, n) for n in gemm.__all__)
