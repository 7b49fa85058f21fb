"""The shortest spec is name + op: every family's planner picks the schedule fields a spec does not write (legal
and the bundled specs' choices for their shapes), says what it picked, and never replaces a written field."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import SPECS_DIR
from schedgen import families
from schedgen.build import build_spec
from schedgen.errors import SpecErrors
from schedgen.explain import explain
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan_with_picks, to_dict
from schedgen.plan.defaults import written
from schedgen.starter import starter_text
from schedgen.verify import verify_file

BARE = {
    "map": """
name: bare_map
op:
  kind: map
  sizes: {M: 4096, N: 4096}
  inputs:
    x: {shape: [M, N], dtype: bf16}
    y: {shape: [M, N], dtype: bf16}
  outputs:
    o: {shape: [M, N], dtype: bf16}
  body: o = x + y
""",
    "matmul": """
name: bare_matmul
op:
  kind: matmul
  sizes: {M: 4096, N: 4096, K: 4096}
  inputs:
    a: {shape: [M, K], dtype: bf16}
    b: {shape: [K, N], dtype: bf16}
  outputs:
    out: {shape: [M, N], dtype: bf16}
""",
    "attention": """
name: bare_attention
op:
  kind: attention
  sizes: {B: 1, S: 4096, H: 16, D: 128}
  inputs:
    q: {shape: [B, S, H, D], dtype: bf16}
    k: {shape: [B, S, H, D], dtype: bf16}
    v: {shape: [B, S, H, D], dtype: bf16}
  outputs:
    o: {shape: [B, S, H, D], dtype: bf16}
""",
    "collective_matmul": """
name: bare_collective_matmul
op:
  kind: collective_matmul
  sizes: {M: 1024, M_total: 2048, K: 4096, N: 4096}
  mesh: {axis_name: x, num_devices: 2}
  inputs:
    a: {shape: [M, K], dtype: bf16}
    b: {shape: [K, N], dtype: bf16}
  outputs:
    out: {shape: [M_total, N], dtype: bf16}
""",
    "grouped_matmul": """
name: bare_grouped_matmul
op:
  kind: grouped_matmul
  groups: 8
  sizes: {T: {dynamic: true, max: 32768}, N: 14336, K: 4096}
  inputs:
    x: {shape: [T, K], dtype: bf16}
    w: {shape: [8, N, K], dtype: bf16}
  outputs:
    out: {shape: [T, N], dtype: bf16}
  transpose_rhs: true
""",
    "rowwise": """
name: bare_rowwise
op:
  kind: rowwise
  sizes:
    M: {dynamic: true, max: 65536, multiple_of: 1}
    N: 8192
  inputs:
    x: {shape: [M, N], dtype: bf16}
  outputs:
    y: {shape: [M, N], dtype: bf16}
  body: |
    m = max(x)
    e = exp(x - m)
    y = e / sum(e)
""",
    "attention_backward": """
name: bare_attention_backward
op:
  kind: attention_backward
  sizes: {B: 2, S: 4096, H: 16, D: 128}
  inputs:
    q: {shape: [B, S, H, D], dtype: bf16}
    k: {shape: [B, S, H, D], dtype: bf16}
    v: {shape: [B, S, H, D], dtype: bf16}
    fwd_o: {shape: [B, S, H, D], dtype: bf16}
    grad_o: {shape: [B, S, H, D], dtype: bf16}
    lse: {shape: [B, H, S], dtype: f32}
  outputs:
    dq: {shape: [B, S, H, D], dtype: bf16}
    dk: {shape: [B, S, H, D], dtype: bf16}
    dv: {shape: [B, S, H, D], dtype: bf16}
""",
}
# the bundled spec whose schedule the planner's picks must reproduce for the same op (all but the kernel's name)
SAME_AS = {"map": "add_bf16.yaml", "matmul": "matmul_bf16_4096.yaml", "attention": "attention_bf16_4096.yaml",
           "collective_matmul": "collective_matmul_bf16_1024x4096.yaml",
           "grouped_matmul": "grouped_moe_mixtral_bf16_dynamic.yaml", "rowwise": "softmax_bf16.yaml",
           "attention_backward": "attention_backward_bf16_4096.yaml"}
# the bundled 4096^3 runs one CTA per tile; the planner pairs them in a 2-CTA cluster sharing the rhs (measured
# equal there on the H200, 2026-12-04, and 1.02-1.3x faster at ragged / short-K shapes)
SAME_AS_BUT = {"matmul": {"schedule.cluster": [2, 1], "schedule.in_specs.b.collective_axes": ["cluster"]}}
CUDA_ONLY = ("grouped_matmul",)   # no Pallas rendering (its located limit: tests/families/grouped_matmul)
PALLAS_ONLY = ("attention_backward",)   # no CUDA kernel yet (its located limit: tests/families/attention_backward)
INTERPRETABLE = ("map", "matmul", "attention", "rowwise", "attention_backward")   # collective: jax 0.11.2 interprets no remote refs (its own test)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))


def _write(tmp_path: Path, kind: str, text: str | None = None) -> Path:
    path = tmp_path / f"bare_{kind}.yaml"
    path.write_text(BARE[kind] if text is None else text)
    return path


def test_every_family_has_a_bare_spec_here():
    assert sorted(BARE) == sorted(families.kinds())


@pytest.mark.parametrize("kind", sorted(BARE))
def test_bare_spec_builds(kind, tmp_path):
    built = build_spec(_write(tmp_path, kind))        # validate, plan, render both backends, NVRTC -> cubin
    assert built.plan.launch.family == kind
    assert ("cuda" in built.plan.launch.backends or kind in PALLAS_ONLY) and \
        ("pallas" in built.plan.launch.backends or kind in CUDA_ONLY)


@pytest.mark.parametrize("kind", sorted(BARE))
def test_bare_spec_plans_like_the_bundled_one(kind, tmp_path):
    """The picks for the bundled specs' shapes are the bundled specs' schedules: the same plan but for names."""
    bare, src = load_spec(str(_write(tmp_path, kind)))
    mine = to_dict(plan_with_picks(bare, src)[0])
    spec, src2 = load_spec(str(SPECS_DIR / SAME_AS[kind]), SAME_AS_BUT.get(kind))
    theirs = to_dict(plan_with_picks(spec, src2)[0])
    for d in (mine, theirs):
        d.pop("name"), d.pop("kernel_name")
        d.get("mm", {}).pop("name", None), d.get("mm", {}).pop("kernel_name", None)
    diff = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
    assert not diff, {k: (mine.get(k), theirs.get(k)) for k in diff}


@pytest.mark.parametrize("kind", INTERPRETABLE)
def test_bare_spec_verifies_in_interpret_mode(kind, tmp_path):
    checks = verify_file(str(_write(tmp_path, kind)), ["pallas"], interpret=True, small=True, seed=0)
    assert checks and all(c.ok and c.rel_error <= c.tolerance for c in checks), checks


@pytest.mark.parametrize("kind", sorted(BARE))
def test_starter_builds(kind, tmp_path):
    dest = tmp_path / f"starter_{kind}.yaml"
    dest.write_text(starter_text(kind, dest))
    text = dest.read_text()
    assert text.startswith("# yaml-language-server: $schema=")
    schema = (dest.parent / text.splitlines()[0].split("$schema=")[1]).resolve()
    assert schema.name == "schedgen.schema.json" and schema.is_file()
    assert "\nschedule:" not in text and "\n# schedule:" in text   # the planner picks; the user may uncomment
    built = build_spec(dest)
    assert built.plan.launch.family == kind and built.spec.name == f"starter_{kind}"


@pytest.mark.parametrize("kind", INTERPRETABLE)
def test_starter_verifies_in_interpret_mode(kind, tmp_path):
    dest = tmp_path / f"starter_{kind}.yaml"
    dest.write_text(starter_text(kind, dest))
    checks = verify_file(str(dest), ["pallas"], interpret=True, small=True, seed=0)
    assert checks and all(c.ok and c.rel_error <= c.tolerance for c in checks), checks


def test_starter_of_an_unknown_kind_lists_the_families():
    with pytest.raises(ValueError, match=r"no family 'conv'; families: map, matmul"):
        starter_text("conv")


@pytest.mark.parametrize("kind", sorted(BARE))
def test_explain_lists_the_picks_as_picked(kind, tmp_path):
    spec, src = load_spec(str(_write(tmp_path, kind)))
    plan, picks = plan_with_picks(spec, src)
    assert picks and all(not written(spec, p.path) for p in picks)
    text = explain(plan, picks)
    assert "picked by the planner (not written in the spec" in text
    for p in picks:
        assert p.shown() in text and p.why in text
    # a bundled spec that writes its whole schedule has nothing picked to show
    full, src2 = load_spec(str(SPECS_DIR / SAME_AS[kind]))
    if kind in ("matmul", "collective_matmul", "grouped_matmul"):
        assert plan_with_picks(full, src2)[1] == ()


def test_matmul_picks_a_smaller_tile_for_a_small_problem(tmp_path):
    spec, src = load_spec(str(_write(tmp_path, "matmul")), {"M": 256, "N": 8192, "K": 8192})
    plan, _ = plan_with_picks(spec, src)
    # specs/matmul_bf16_256x8192x8192.yaml's tile: 128 x 128 with a 6-deep ring
    assert (plan.tiles.tile_m, plan.tiles.tile_n, plan.tiles.tile_k, plan.pipeline.stages, plan.warps.num_consumers) == (128, 128, 64, 6, 2)
    spec, src = load_spec(str(_write(tmp_path, "matmul")), {"M": 64, "N": 64, "K": 64})
    plan, _ = plan_with_picks(spec, src)
    assert (plan.tiles.tile_m, plan.tiles.tile_n, plan.warps.num_consumers) == (64, 64, 1)


def _picked(tmp_path, sizes: dict, transpose_rhs: bool = False):
    text = BARE["matmul"]
    if transpose_rhs:
        text = text.replace("b: {shape: [K, N]", "b: {shape: [N, K]").replace("  outputs:", "  transpose_rhs: true\n  outputs:", 1)
    spec, src = load_spec(str(_write(tmp_path, "matmul", text)), sizes)
    plan, picks = plan_with_picks(spec, src)
    return plan, {p.dotted: p for p in picks}


def test_matmul_tile_by_wave_quantization(tmp_path):
    """Whole waves of tiles: 144 tiles of 128 x 256 are 1.09 waves at 1536 x 3072; 192 of 128 x 192 are 1.45 (the
    H200 ran them 1.23x faster, 2026-12-04). 5000 x 4096 keeps 128 x 256 (7 waves of 128 x 192 cost more)."""
    plan, picks = _picked(tmp_path, {"M": 1536, "N": 3072, "K": 1536})
    assert (plan.tiles.tile_m, plan.tiles.tile_n, plan.cluster.cluster_size) == (128, 192, 1)   # N-major halves of 96: no cluster
    assert "1.45 waves" in picks["schedule.in_specs.a"].why
    plan, _ = _picked(tmp_path, {"M": 5000, "N": 4096, "K": 4096})
    assert (plan.tiles.tile_m, plan.tiles.tile_n, plan.cluster.cluster_size) == (128, 256, 2)


def test_matmul_clusters_along_m_sharing_the_rhs(tmp_path):
    plan, picks = _picked(tmp_path, {"M": 3000, "N": 5000, "K": 1000})
    assert (plan.tiles.tile_m, plan.tiles.tile_n, plan.cluster.cluster_m, plan.cluster.multicast) == (128, 256, 2, "rhs")
    assert picks["schedule.in_specs.b"].value.collective_axes == ["cluster"]
    assert "multicast" in picks["schedule.cluster"].why
    # torch.nn.Linear's [N, K] weight: K-major halves of any width, so 128 x 192 keeps its cluster
    plan, _ = _picked(tmp_path, {"M": 2777, "N": 11008, "K": 4096}, transpose_rhs=True)
    assert (plan.tiles.tile_n, plan.cluster.cluster_m) == (192, 2)
    # an odd number of tile rows (M = 2900: 23 rows of 128), or fewer tiles than SMs: no cluster
    for sizes in ({"M": 2900, "N": 5000, "K": 1000}, {"M": 512, "N": 1024, "K": 4096}):
        plan, picks = _picked(tmp_path, sizes)
        assert plan.cluster.cluster_size == 1 and "schedule.cluster" not in picks


def test_a_written_cluster_or_tile_is_kept(tmp_path):
    plan, picks = _picked(tmp_path, {"M": 3000, "N": 5000, "K": 1000, "schedule.cluster": [1, 1]})
    assert plan.cluster.cluster_size == 1 and "schedule.cluster" not in picks
    # a written 2-CTA cluster gets a tile it can split: at 1536 x 3072 the wave estimate alone picks 128 x 192,
    # whose N-major rhs halves (96 columns) are off the 64-column swizzle rows; written [2, 1], 128 x 256 instead
    plan, picks = _picked(tmp_path, {"M": 1536, "N": 3072, "K": 1536, "schedule.cluster": [2, 1]})
    assert (plan.tiles.tile_n, plan.cluster.cluster_m, plan.cluster.multicast) == (256, 2, "rhs") and "schedule.cluster" not in picks


def test_skinny_matmul_loads_256_bytes_of_k_a_stage(tmp_path):
    """Decode shapes (64-row tiles, one consumer): 128 bf16 K columns a stage, so the ring holds more weight bytes
    in flight (M = 16, N = K = 8192 went from 0.79x to 0.95-1.0x cuBLAS on the H200)."""
    plan, _ = _picked(tmp_path, {"M": 16, "N": 8192, "K": 8192}, transpose_rhs=True)
    assert (plan.tiles.tile_m, plan.tiles.tile_n, plan.tiles.tile_k, plan.warps.num_consumers, plan.pipeline.stages) == (64, 64, 128, 1, 6)


def test_ragged_matmul_pads_and_builds_for_cuda_saying_why(tmp_path):
    spec, src = load_spec(str(_write(tmp_path, "matmul")), {"M": 3000, "N": 5000, "K": 1000})
    plan, picks = plan_with_picks(spec, src)
    assert plan.tiles.ragged and plan.launch.backends == ("cuda",)    # K = 1000 is off Mosaic GPU's 64-column GMEM tiling
    why = {p.dotted: p.why for p in picks}
    assert "zero-padded" in why["schedule.in_specs.a"]
    assert why["schedule.backends"].startswith("the Pallas backend cannot render this spec") and \
        "cannot round a partial tile up" in why["schedule.backends"]


def test_a_ragged_matmul_on_the_tiling_builds_both_backends(tmp_path):
    spec, src = load_spec(str(_write(tmp_path, "matmul")), {"M": 3000, "N": 5056, "K": 1024})
    plan, picks = plan_with_picks(spec, src)
    assert plan.tiles.ragged and plan.launch.backends == ("cuda", "pallas")


def test_a_pallas_limit_of_the_sizes_picks_cuda_saying_why(tmp_path):
    """N = 5000 with a bias: off Mosaic GPU's 64-column GMEM tiling, and the Pallas epilogue would read the bias past
    its end (plgpu.load has no masked form), so with backends not written the planner builds CUDA only, saying why."""
    text = BARE["matmul"].replace("  outputs:", "    bias: {shape: [N], dtype: f32}\n  outputs:", 1)
    path = _write(tmp_path, "matmul", text)
    spec, src = load_spec(str(path), {"M": 256, "N": 5000, "K": 256, "op.epilogue": "out = acc + bias"})
    plan, picks = plan_with_picks(spec, src)
    assert plan.tiles.ragged and plan.launch.backends == ("cuda",)
    why = {p.dotted: p.why for p in picks}["schedule.backends"]
    assert why.startswith("the Pallas backend cannot render this spec") and "cannot round a partial tile up" in why


def test_ragged_map_pads_every_cut_operand(tmp_path):
    text = BARE["map"].replace("y: {shape: [M, N], dtype: bf16}", "y: {shape: [N], dtype: bf16}")
    spec, src = load_spec(str(_write(tmp_path, "map", text)), {"M": 1001, "N": 1000})   # 1001 = 7 x 11 x 13
    plan, picks = plan_with_picks(spec, src)
    shown = {p.dotted: p.value for p in picks}
    assert shown["schedule.out_specs.o"].out_of_bounds == "zero"
    assert shown["schedule.in_specs.x"].out_of_bounds == "zero"
    assert plan.block == (32, 256)
    checks = verify_file(str(tmp_path / "bare_map.yaml"), ["pallas"], {"M": 99, "N": 200}, interpret=True,
                         small=False, seed=0)
    assert checks and all(c.ok for c in checks), checks


def test_a_written_field_is_honoured(tmp_path):
    """Written values are planned as written: one consumer stays one (the picked tile fits its registers; a written
    tile that does not is the error), a written pipeline.kind is not replaced."""
    built = build_spec(_write(tmp_path, "matmul"), {"schedule.pipeline.num_compute_wgs": 1})
    assert (built.plan.warps.num_consumers, built.plan.tiles.tile_m, built.plan.tiles.tile_n) == (1, 128, 128)
    with pytest.raises(SpecErrors) as info:
        build_spec(_write(tmp_path, "matmul"), {"schedule.pipeline.num_compute_wgs": 1,
                                                "schedule.out_specs": {"out": {"block_shape": [128, 256]}}})
    assert [p.path for p in info.value.problems] == [("schedule", "pipeline", "compute_registers")]
    with pytest.raises(SpecErrors) as info:
        build_spec(_write(tmp_path, "matmul"), {"schedule.pipeline.kind": "emit_pipeline"})
    assert [p.path for p in info.value.problems] == [("schedule", "pipeline", "kind")]
    spec, src = load_spec(str(_write(tmp_path, "matmul")), {"schedule.pipeline.max_concurrent_steps": 3})
    plan, picks = plan_with_picks(spec, src)
    assert plan.pipeline.stages == 3 and "schedule.pipeline.max_concurrent_steps" not in {p.dotted for p in picks}


def test_a_written_field_pallas_cannot_render_stays_an_error(tmp_path):
    """backends is picked ([cuda]) only for what the user did not write: a written schedule field the Pallas
    backend cannot render keeps its located error."""
    with pytest.raises(SpecErrors) as info:
        build_spec(_write(tmp_path, "attention"), {"schedule.persistent.loop": "dynamic"})
    assert ("schedule", "persistent", "loop") in [p.path for p in info.value.problems]
    built = build_spec(_write(tmp_path, "attention"), {"schedule.persistent.loop": "dynamic",
                                                       "schedule.backends": ["cuda"]})
    assert built.plan.launch.backends == ("cuda",)
    # the static persistent grid is both backends' (the Pallas attention's nd_loop)
    assert build_spec(_write(tmp_path, "attention"), {"schedule.persistent.loop": "nd_loop"}).plan.launch.backends == \
        ("cuda", "pallas")


def test_ragged_attention_builds_both_backends_where_pallas_can(tmp_path):
    """A spec without backends at S = 1000 (a multiple of 8, of no block) builds both backends; at S = 1001 (off
    Mosaic GPU's 8-row tiling) the planner picks [cuda], the sizes being what keeps Pallas out."""
    assert build_spec(_write(tmp_path, "attention"), {"S": 1000}).plan.launch.backends == ("cuda", "pallas")
    assert build_spec(_write(tmp_path, "attention"), {"S": 1001}).plan.launch.backends == ("cuda",)


def test_picks_keep_what_was_written(tmp_path):
    """A picked field is not marked written in the planned spec (later stages still tell them apart)."""
    from schedgen.plan import complete
    spec, _ = load_spec(str(_write(tmp_path, "matmul")))
    done, picks = complete(spec)
    assert done.schedule.pipeline.kind == "warp_specialized"
    assert not written(done, ("schedule", "pipeline", "kind")) and not written(done, ("schedule",))


def test_validate_reports_plan_and_tune_problems_in_one_run(tmp_path, capsys):
    """A file wrong in the plan (a written tile that overflows one consumer) and in its tune constraints (an
    unknown name, what `schedgen tune` refuses) gets both in one validate run."""
    from schedgen.cli import main
    from schedgen.tune import load_space
    text = BARE["matmul"] + """schedule:
  pipeline: {num_compute_wgs: 1}
  out_specs:
    out: {block_shape: [128, 256]}
tune:
  params:
    stages: [3, 4]
  constraints:
    - stages <= tile_q
"""
    path = _write(tmp_path, "matmul", text)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "schedule.pipeline.compute_registers: each consumer thread holds 256 f32 accumulators" in err
    assert "tune.constraints[0]: unknown name 'tile_q'" in err
    with pytest.raises(SpecErrors) as info:        # the same tune problem, as tune reports it
        load_space(path)
    assert [p.message for p in info.value.problems] == [line.split("tune.constraints[0]: ")[1]
                                                        for line in err.splitlines() if "tune.constraints" in line]
