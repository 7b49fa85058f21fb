"""A spec with no tune section is tuned around the planner's picks (issue 17): the family's default space
(`Family.tune_space`) over the spec with the picks written in as fields. The space at several shapes, every point
planning or pruned by a knob's own field (never by a stale pick), cluster_m moving the rhs collective_axes, a
written tune section winning, the families without a default space, and a dry run, a tuning run with the fake
runner, `--export` and `build --tuned` of a bare spec, all on the CPU."""
from __future__ import annotations

import json

import pytest

from conftest import ROOT, SPECS_DIR
from schedgen import tune as T
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan, to_json
from test_tune import FakeRunner

SHAPES = ROOT / "bench" / "user_shapes"
GEMM = SHAPES / "gemm_3000x5000x1000.yaml"
DECODE = SHAPES / "decode_16x8192x8192.yaml"
ACC = ("tile_m * tile_n <= 32768",)
SK = {"decomposition": ("data_parallel", "stream_k")}     # the Hopper kernel's data-parallel waves or stream-K tail
ACC_SK = ACC + ("decomposition == 'data_parallel' or cluster_m == 1",)   # stream-K runs on 1-CTA launches


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("tune-default-cache")


@pytest.fixture(scope="module")
def pool():
    ex = T.compile_pool(2)
    yield ex
    ex.shutdown(wait=True, cancel_futures=True)


def knobs(space) -> dict:
    return {k.name: k.values for k in space.knobs}


# ------------------------------------------------------------------------------------------------ the space


@pytest.mark.parametrize("spec, overrides, want, size, constraints", [
    # ragged (out_of_bounds: zero picked): every tile; 24 tile rows: every band width differs
    ("gemm_3000x5000x1000", {}, {"tile_m": (128, 256), "tile_n": (128, 192, 256), "stages": (3, 4, 5, 6),
                                 "cluster_m": (1, 2), "tile_width": (4, 8, 16), **SK}, 288, ACC_SK),
    # the tile divides 4096 (out_of_bounds: reject picked): no 192-wide tile, which would not
    ("linear_4096x4096x1024_noepi", {}, {"tile_m": (128, 256), "tile_n": (128, 256), "stages": (3, 4, 5, 6),
                                         "cluster_m": (1, 2), "tile_width": (4, 8, 16), **SK}, 192, ACC_SK),
    # 1536 rows: 12 of 128; bands of 16 and wider are one order
    ("gemm_1536x3072x1536", {}, {"tile_m": (128, 256), "tile_n": (128, 192, 256), "stages": (3, 4, 5, 6),
                                 "cluster_m": (1, 2), "tile_width": (4, 8, 16), **SK}, 288, ACC_SK),
    # M = 256: two tile rows, one band: no tile_width
    ("decode_256x8192x8192", {}, {"tile_m": (128, 256), "tile_n": (128, 256), "stages": (3, 4, 5, 6),
                                  "cluster_m": (1, 2), **SK}, 64, ACC_SK),
    # skinny: 64-row tiles as picked, the K a stage loads; the picked 64-wide tile_n is among the values
    ("decode_16x8192x8192", {}, {"tile_n": (64, 128, 192, 256), "tile_k": (64, 128, 256), "stages": (3, 4, 5, 6)},
     48, ()),
    # the planner gave M = 128 64-row tiles (larger ones leave SMs idle): skinny too; 8192 / 192 does not divide
    ("decode_128x8192x8192", {}, {"tile_n": (128, 256), "tile_k": (64, 128, 256), "stages": (3, 4, 5, 6)}, 24, ()),
    # -D sizes choose the space: the same file at M = 48 is skinny
    ("gemm_3000x5000x1000", {"M": 48}, {"tile_n": (64, 128, 192, 256), "tile_k": (64, 128, 256),
                                        "stages": (3, 4, 5, 6)}, 48, ()),
])
def test_default_matmul_space_at_the_shapes_users_bring(spec, overrides, want, size, constraints):
    space = T.load_space(SHAPES / f"{spec}.yaml", overrides)
    assert knobs(space) == want
    assert space.size == size and tuple(space.spec.tune.constraints) == constraints
    assert space.default is not None and space.default.params == want
    assert space.picked and all(k.startswith("schedule.") for k in space.picked)


def test_block_scaled_space_sweeps_the_promotion():
    """A block-scaled fp8 spec also sweeps partial_sums and scale_prefetch; the planner's own point (two sets,
    prefetch) is one of the kept candidates, and two sets on a tile whose three accumulator tiles do not fit the
    registers are pruned at partial_sums."""
    path = SPECS_DIR / "matmul_fp8_blockscaled_4096x7168x16384.yaml"
    space = T.load_space(path)
    got = knobs(space)
    assert got["partial_sums"] == (1, 2) and got["scale_prefetch"] == (False, True)
    pruning = T.prune(space)
    bare, src = load_spec(str(path))
    want = to_json(plan(bare, src))
    assert len([c for c in pruning.kept if to_json(c.plan) == want]) == 1
    assert {c.plan.partial_sums for c in pruning.kept} == {1, 2}
    assert {c.plan.scale_prefetch for c in pruning.kept} == {False, True}
    assert any(g.field == "schedule.pipeline.partial_sums" for g in pruning.groups)


def test_dynamic_m_gets_no_cluster_it_cannot_pair():
    """linear_gelu_bf16_dynamic's M is a multiple of 1 only: a 2-CTA cluster along it would not pair at every M."""
    space = T.load_space(SPECS_DIR / "linear_gelu_bf16_dynamic.yaml")
    assert "cluster_m" not in knobs(space) and knobs(space)["tile_m"] == (128, 256)


def test_default_map_space():
    space = T.load_space(SPECS_DIR / "add_bf16.yaml")
    assert knobs(space) == {"block_M": (16, 32, 64), "stages": (2, 3, 4), "warpgroups": (1, 2)}
    pruning = T.prune(space)
    assert len(pruning.kept) == 14
    assert [g.field for g in pruning.groups] == ["schedule.pipeline.max_concurrent_steps"]   # SMEM only


@pytest.mark.parametrize("path", sorted(SHAPES.glob("*.yaml")) + [SPECS_DIR / "add_bf16.yaml",
                                                                   SPECS_DIR / "gelu_bias_bf16_dynamic.yaml",
                                                                   SPECS_DIR / "matmul_bf16_dynamic.yaml"],
                         ids=lambda p: p.stem)
def test_every_point_plans_or_is_pruned_by_a_knob(path):
    """No point fails on a stale pick: the plan stage prunes only on fields the knobs set (SMEM for the ring depth,
    the cluster's rules), each kept candidate rebuilds from the file and its overrides alone, and the planner's
    own point plans exactly as the bare spec does."""
    space = T.load_space(path)
    pruning = T.prune(space)
    assert pruning.kept
    knob_fields = {".".join(t.path) for k in space.knobs for t in k.targets}
    for g in pruning.groups:
        assert g.stage != "plan" or g.field in knob_fields, g.line()
    for c in pruning.kept[:6]:
        spec, src = load_spec(str(path), c.overrides)
        assert plan(spec, src).launch.kernel_name == c.plan.launch.kernel_name
    bare, src = load_spec(str(path))
    want = to_json(plan(bare, src))
    picked = [c for c in pruning.kept if to_json(c.plan) == want]
    assert len(picked) == 1, "the planner's own schedule is one point of the space"


# ------------------------------------------------------------------------------------------------ cluster_m


def test_cluster_m_moves_the_picked_rhs_collective_axes():
    """The planner picks cluster [2, 1] with the rhs multicast (collective_axes: [cluster]) at 3000 x 5000 x 1000;
    cluster_m = 1 clears it (a 1-CTA launch multicasts nothing), cluster_m = 2 keeps it."""
    space = T.load_space(GEMM)
    assert space.picked["schedule.cluster"] == [2, 1]
    assert space.picked["schedule.in_specs.b.collective_axes"] == ["cluster"]
    base = {"tile_m": 128, "tile_n": 256, "stages": 4, "tile_width": 8, "decomposition": "data_parallel"}
    by = {c.values["cluster_m"]: c for c in T.expand(space) if {k: c.values[k] for k in base} == base}
    assert by[1].overrides["schedule.cluster"] == [1, 1]
    assert by[1].overrides["schedule.in_specs.b.collective_axes"] == []
    assert by[2].overrides["schedule.in_specs.b.collective_axes"] == ["cluster"]
    for cm, c in by.items():
        spec, src = load_spec(str(GEMM), c.overrides)
        assert plan(spec, src).cluster.cluster_m == cm


def test_a_following_field_is_hashable_and_never_shared():
    cluster_m = next(k for k in T.load_space(GEMM).knobs if k.name == "cluster_m")
    follows = [t for t in cluster_m.targets if t.follows]
    assert [str(t) for t in follows] == ["schedule.in_specs.b.collective_axes"] and len(set(cluster_m.targets)) == 2
    first = follows[0].value_for(2)[1]
    first.append("x")
    assert follows[0].value_for(2) == (True, ["cluster"]) and follows[0].value_for(3) == (False, None)
    assert follows[0].value_for(True) == (False, None)          # true is not 1


def test_the_manifest_checks_its_tune_space_hook():
    from dataclasses import replace
    from schedgen import families
    with pytest.raises(TypeError, match="tune_space must be callable"):
        replace(families.get("map"), tune_space=3)


WRITTEN_CLUSTER = """schedule:
  cluster: [2, 1]
  in_specs:
    a: {block_shape: [128, 64], delay_release: 1}
    b: {block_shape: [64, 256], delay_release: 1, collective_axes: [cluster]}
  out_specs:
    out: {block_shape: [128, 256]}
tune:
  params:
    cluster_m: [1, 2]
"""


def test_cluster_m_of_a_written_multicast_schedule(tmp_path):
    """Regression: a written rhs collective_axes made every cluster_m = 1 point a plan error ("only the operand the
    cluster's CTAs share is multicast ...; this launch has no cluster")."""
    path = tmp_path / "mm.yaml"
    path.write_text((SPECS_DIR / "matmul_bf16_4096.yaml").read_text().split("schedule:")[0] + WRITTEN_CLUSTER)
    pruning = T.prune(T.load_space(path))
    assert not pruning.groups and sorted(c.plan.cluster.cluster_m for c in pruning.kept) == [1, 2]


def test_a_knob_on_collective_axes_itself_wins_over_cluster_m(tmp_path):
    path = tmp_path / "mm.yaml"
    path.write_text((SPECS_DIR / "matmul_bf16_4096.yaml").read_text().split("schedule:")[0] + WRITTEN_CLUSTER
                    + "    'schedule.in_specs.b.collective_axes[0]': [cluster]\n")
    space = T.load_space(path)
    cluster_m = next(k for k in space.knobs if k.name == "cluster_m")
    assert [str(t) for t in cluster_m.targets] == ["schedule.cluster[0]"]
    cands = list(T.expand(space))
    assert len(cands) == 2 and all(c.overrides["schedule.in_specs.b.collective_axes"] == ["cluster"] for c in cands)


# ------------------------------------------------------------------------------------------------ written sections


def test_a_written_tune_section_wins(tmp_path):
    path = tmp_path / "gemm.yaml"
    path.write_text(GEMM.read_text() + "tune:\n  params:\n    stages: [3, 4]\n")
    space = T.load_space(path)
    assert knobs(space) == {"stages": (3, 4)} and space.default is None
    # the picks are written in for it too (the fields the spec leaves out), so the knobs set picked fields:
    # each point is the picks plus its knob values
    assert space.picked and "schedule.in_specs.b.block_shape" in space.picked
    assert all(set(c.overrides) == set(space.picked) | {"schedule.pipeline.max_concurrent_steps"}
               for c in T.expand(space))
    # an alias over the BlockSpecs the planner picks sets the picked ones (it had nothing to set before)
    path.write_text(GEMM.read_text() + "tune:\n  params:\n    tile_n: [128, 256]\n")
    space = T.load_space(path)
    assert {c.values["tile_n"] for c in T.expand(space)} == {128, 256}
    assert {tuple(c.overrides["schedule.in_specs.b.block_shape"]) for c in T.expand(space)} == {(64, 128), (64, 256)}


def test_validate_reports_tune_sections_as_before(tmp_path, capsys):
    """validate checks a written tune section as tune does, and says nothing of the default space of a bare spec."""
    from schedgen import cli
    mm_tune = SPECS_DIR / "matmul_bf16_4096_tune.yaml"
    bad = tmp_path / "bad.yaml"
    bad.write_text(mm_tune.read_text().split("tune:")[0] + "tune:\n  params: {tile_q: [1, 2]}\n")
    assert cli.main(["validate", str(mm_tune), str(GEMM)]) == 0
    out = capsys.readouterr().out
    assert f"{mm_tune}: ok (matmul 'matmul_bf16_4096_tune')" in out and f"{GEMM}: ok (matmul" in out
    assert cli.main(["validate", str(bad)]) != 0
    err = capsys.readouterr().err
    assert "tune.params.tile_q: 'tile_q' is neither a field path" in err and "nor a knob of the matmul family" in err


@pytest.mark.parametrize("spec, kind", [("attention_bf16_4096.yaml", "attention"),
                                        ("collective_matmul_bf16_1024x4096.yaml", "collective_matmul")])
def test_no_default_space_says_why(spec, kind):
    with pytest.raises(T.NothingToTune) as err:
        T.load_space(SPECS_DIR / spec)
    text = err.value.render()
    assert f"nothing to tune: the {kind} family has no tune aliases, so there is no default space to search " \
           f"around the planner's picks; add a tune section" in text
    assert "schedule.pipeline.max_concurrent_steps: [2, 3]" in text       # a field path: it has no aliases


def test_an_empty_tune_section_is_nothing_to_tune(tmp_path):
    path = tmp_path / "gemm.yaml"
    path.write_text(GEMM.read_text() + "tune: {}\n")
    with pytest.raises(T.NothingToTune) as err:
        T.load_space(path)
    assert "tune: nothing to tune: the tune section has no params; add a tune section, e.g. tune: {params: " \
           "{stages: [3, 4]}}" in err.value.render()


# ------------------------------------------------------------------------------------------------ runs


def test_cli_dry_run_of_a_bare_spec_prints_the_space(cache, monkeypatch, capsys):
    from schedgen import cli
    monkeypatch.setenv("SCHEDGEN_CACHE", str(cache))
    assert cli.main(["tune", str(GEMM), "--dry-run", "--workers", "2", "--budget", "4", "--seed", "1"]) == 0
    captured = capsys.readouterr()
    text = " ".join((captured.out + captured.err).split())      # rich wraps long lines at the console's width
    assert "no tune section: the matmul family's default space around the planner's picks" in text
    assert ("tune: {params: {tile_m: [128, 256], tile_n: [128, 192, 256], stages: [3, 4, 5, 6], cluster_m: [1, 2], "
            "tile_width: [4, 8, 16], decomposition: [data_parallel, stream_k]}, constraints: [\"tile_m * tile_n <= "
            "32768\", \"decomposition == 'data_parallel' or cluster_m == 1\"]}") in text
    assert "a random sample of 4 of 288 points" in text
    assert "2 of 2 candidates compiled (dry run" in captured.out


class MatmulRunner(FakeRunner):
    """The tune tests' fake runner with a synthetic matmul time: 128 K columns a stage and 5 stages are best."""

    def measure(self, built, backend):
        self.measured.append(built.plan.launch.kernel_name)
        p = built.plan
        return T.Result("ok", 1.0 + abs(p.tiles.tile_k - 128) / 256 + abs(p.pipeline.stages - 5) / 10 + p.tiles.tile_n / 1000)

    def verify(self, built, backend):
        self.verified.append(built.plan.launch.kernel_name)
        return T.Result("ok", extra={"ok": True, "rel_error": 1e-3})


def test_tune_export_and_build_tuned_of_a_bare_spec(cache, pool, tmp_path, monkeypatch, capsys):
    """A run over a sample of the decode space: the winner's row holds the picks and the knobs; --export writes
    a spec with that schedule (and no tune section) that plans as the winner did; build --tuned builds it."""
    from schedgen import cli
    db = tmp_path / "tune.sqlite"
    result = T.tune(DECODE, runner=MatmulRunner(), db=db, pool=pool, cache=cache, budget=3, seed=2)
    assert len(result.pruning.kept) == 2 and result.measured == 2
    best = result.best
    assert best["knobs"] == {"tile_n": 64, "tile_k": 128, "stages": 4} and best["verified"] is True
    assert best["overrides"]["schedule.in_specs.a.out_of_bounds"] == "zero"          # a pick, kept
    assert best["overrides"]["schedule.in_specs.b.block_shape"] == [64, 128]         # transposed rhs: [N, K]
    out = T.export_schedule(DECODE, best, tmp_path / "decode_tuned.yaml")
    spec, src = load_spec(str(out))
    assert spec.tune is None and spec.schedule.in_specs["b"].block_shape == [64, 128]
    p = plan(spec, src)
    assert (p.tiles.tile_m, p.tiles.tile_n, p.tiles.tile_k, p.pipeline.stages) == (64, 64, 128, 4) and p.launch.kernel_name == best["kernel"]
    monkeypatch.setenv("SCHEDGEN_CACHE", str(cache))
    monkeypatch.setattr(T, "current_gpu", lambda: None)
    assert cli.main(["build", str(DECODE), "--tuned", "--db", str(db), "-o", str(tmp_path / "build")]) == 0
    assert "tuned: best" in capsys.readouterr().out
    built = json.loads((tmp_path / "build" / "decode_16x8192x8192" / "plan.json").read_text())
    assert (built["tile_n"], built["tile_k"], built["stages"]) == (64, 128, 4)
