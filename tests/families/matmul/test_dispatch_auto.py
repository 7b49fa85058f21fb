"""`schedule.dispatch: auto` (issue 44, opt-in; families/matmul/dispatch_auto.py): the planner's buckets of a dynamic M
and each bucket's schedule, on the CPU. For the bundled dynamic linear + GELU and plain matmul specs with their tile
fields left out (the planner's to pick) at the issue's N, K: the table is total and monotone over M's range; every M
of the issue's sample (and each bucket's edges) lands, through the built package's own lookup (runtime/buckets.py),
in the variant of its bucket, which planned and compiled through NVRTC; written fields pin every variant; without the
field (or with dispatch: single, or a -D that fixes M) the build is today's one kernel. Random N, K (held-out shapes
stand for themselves) give total, monotone tables too. The numbers on the GPU are not here: see docs/tuning.md."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from conftest import SPECS_DIR
from schedgen import cli
from schedgen.bucketed import build_derived, package_bucketed
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.errors import SpecErrors
from schedgen.families.matmul import dispatch_auto as A
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan
from schedgen.runtime.buckets import load_bucketed

LINEAR = SPECS_DIR / "linear_gelu_bf16_dynamic.yaml"
MATMUL = SPECS_DIR / "matmul_bf16_dynamic.yaml"
SHAPES = ((4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (128256, 4096))
SAMPLE_M = (1, 8, 16, 64, 77, 128, 256, 512, 1000, 2048, 4096, 16384, 65536)
# what each spec keeps of its schedule (the rest is the planner's, per bucket)
KEEP = {LINEAR: ("compiler_params", "backends"), MATMUL: ()}
CASES = [(src, n, k) for src in (LINEAR, MATMUL) for n, k in SHAPES]
IDS = [f"{src.stem}-{n}x{k}" for src, n, k in CASES]


def auto_copy(src: Path, n: int, k: int, folder: Path, schedule: dict | None = None) -> Path:
    """`src` with N, K set, its schedule cut to KEEP (or `schedule`) and dispatch: auto."""
    data = yaml.safe_load(src.read_text())
    kept = {key: data["schedule"][key] for key in KEEP[src] if key in data["schedule"]}
    data["schedule"] = {**(kept if schedule is None else schedule), "dispatch": "auto"}
    data["op"]["sizes"]["N"], data["op"]["sizes"]["K"] = n, k
    out = folder / f"{src.stem}_{n}x{k}.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def table_of(path: Path, overrides: dict | None = None) -> list[A.Bucket]:
    spec, src = load_spec(str(path), overrides or {})
    return A.derive(spec, src)


def check_total(table: list[A.Bucket], lo: int, hi: int, q: int) -> None:
    assert table[0].lo == lo and table[-1].hi == hi
    for a, b in zip(table, table[1:]):
        assert b.lo == a.hi + q                      # contiguous, increasing
        assert a.choice != b.choice                  # neighbours with one schedule are one bucket
    for b in table:
        assert b.lo <= b.hi and b.lo % q == 0 and b.hi % q == 0 and b.why


def samples(table: list[A.Bucket], lo: int, hi: int, q: int) -> list[int]:
    edges = {x for b in table for x in (b.lo, b.hi)}
    return sorted({m for m in (*SAMPLE_M, *edges) if lo <= m <= hi and m % q == 0})


@pytest.mark.parametrize("src, n, k", CASES, ids=IDS)
def test_the_table_is_total_and_monotone(src, n, k, tmp_path):
    path = auto_copy(src, n, k, tmp_path)
    size = load_spec(str(path))[0].op.sizes["M"]
    table = table_of(path)
    check_total(table, size.lowest, size.max, size.multiple_of)
    # the last bucket is the planner's own schedule (no overrides); the first never runs a larger tile than it
    assert table[-1].choice.large and table[-1].overrides == {}
    assert table[0].choice.tm <= table[-1].choice.tm


@pytest.mark.parametrize("src, n, k", CASES, ids=IDS)
def test_every_m_lands_in_a_variant_that_plans_and_compiles(src, n, k, tmp_path):
    path = auto_copy(src, n, k, tmp_path)
    size = load_spec(str(path))[0].op.sizes["M"]
    table = table_of(path)
    bb = build_derived(path, {}, cache=Cache(tmp_path / "cache"))   # compiles each variant through NVRTC
    assert bb.record.bounds == (tuple(b.hi for b in table),) and len(bb.record.table) == len(table)
    assert all(entry["schedule"] == "derived" for entry in bb.record.buckets)
    for built in bb.variants:
        assert built.files.get("kernel.cubin")          # NVRTC built it
    kernel = load_bucketed(package_bucketed(bb, tmp_path / "out"))
    want_names = {}
    for i, b in enumerate(table):
        spec, srcmap = load_spec(str(path), b.overrides)
        want_names[i] = plan(spec, srcmap).launch.kernel_name
        assert bb.variants[bb.record.table[i]].plan.launch.kernel_name == want_names[i]
    for m in samples(table, size.lowest, size.max, size.multiple_of):
        (i,) = [i for i, b in enumerate(table) if b.lo <= m <= b.hi]
        got = kernel.variant_for({"M": m})
        assert got.root.name == bb.record.variants[bb.record.table[i]], m
        assert got.launch.kernel_name == want_names[i], m


def test_linear_gelu_4096_decode_and_mid_buckets(tmp_path):
    """The table explain prints for the linear + GELU layer at N = K = 4096 (the planner's estimates)."""
    table = table_of(auto_copy(LINEAR, 4096, 4096, tmp_path))
    first, last = table[0], table[-1]
    assert (first.lo, first.hi) == (1, 64) and (first.choice.tm, first.choice.tn) == (64, 128)
    # 32 tiles of 64 x 128 leave 100 SMs idle: split-K over 4 CTAs puts 128 to work (backends: [cuda] allows it)
    assert first.choice.split == 4 and first.overrides["schedule.cluster"] == [1, 1, 4]
    assert (last.choice.tm, last.choice.tn, last.hi) == (128, 256, 65536)
    assert any(b.choice.tm == 128 and b.choice.tn == 128 for b in table[1:-1])


def test_split_k_only_where_the_backends_allow_it(tmp_path):
    """The Pallas matmul has no split-K: a spec whose backends include pallas gets no split."""
    path = auto_copy(LINEAR, 4096, 4096, tmp_path, schedule={"backends": ["cuda", "pallas"]})
    data = yaml.safe_load(path.read_text())
    data["op"]["sizes"]["M"]["multiple_of"] = 8         # Mosaic GPU takes a ragged M in 8-row steps
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    table = table_of(path)
    assert all(b.choice.split == 1 for b in table) and len(table) > 1


def test_a_written_tile_pins_every_variant(tmp_path):
    tile = {"in_specs": {"x": {"block_shape": [128, 64], "out_of_bounds": "zero"},
                         "w": {"block_shape": [128, 64], "out_of_bounds": "zero"}},
            "out_specs": {"y": {"block_shape": [128, 128]}}, "backends": ["cuda"]}
    table = table_of(auto_copy(LINEAR, 4096, 4096, tmp_path, schedule=tile))
    assert all((b.choice.tm, b.choice.tn) == (128, 128) for b in table)
    assert not any(k.startswith(("schedule.in_specs", "schedule.out_specs")) for b in table for k in b.overrides)
    assert any(b.choice.split > 1 for b in table)       # the cluster is not written: the split still varies


def test_a_written_cluster_pins_every_variant(tmp_path):
    table = table_of(auto_copy(LINEAR, 4096, 4096, tmp_path, schedule={"cluster": [1], "backends": ["cuda"]}))
    assert len(table) > 1 and all(b.choice.split == 1 and not b.choice.shared for b in table)
    assert not any("schedule.cluster" in b.overrides for b in table)


@pytest.mark.parametrize("src", (LINEAR, MATMUL), ids=("linear", "matmul"))
def test_the_bundled_schedule_written_whole_is_one_bucket(src):
    """The bundled specs write their tile (and matmul its cluster and ring): every variant would be that schedule."""
    table = table_of(src, {"schedule.dispatch": "auto"})
    (only,) = table
    assert only.overrides == {} and only.choice.large


@pytest.mark.parametrize("src", (LINEAR, MATMUL), ids=("linear", "matmul"))
def test_no_field_is_todays_build(src, tmp_path):
    cache = Cache(tmp_path / "cache")
    today = build_spec(src, {}, cache=cache)
    assert build_derived(src, {}, cache=cache) is None
    assert build_spec(src, {"schedule.dispatch": "single"}, cache=cache).files["plan.json"] == today.files["plan.json"]
    assert cli.main(["build", str(src), "-o", str(tmp_path / "out")]) == 0
    assert not list((tmp_path / "out").rglob("dispatch.json"))   # one kernel, no dispatch record


def test_a_fixed_m_is_one_shape(tmp_path):
    path = auto_copy(LINEAR, 4096, 4096, tmp_path)
    assert build_derived(path, {"M": 128}, cache=Cache(tmp_path / "cache")) is None     # -D M: today's one kernel
    data = yaml.safe_load(path.read_text())
    data["op"]["sizes"]["M"] = 128
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(SpecErrors) as exc:
        table_of(path)
    assert "schedule.dispatch" in exc.value.render() and "M is fixed" in exc.value.render()


def test_validate_refuses_what_build_refuses(tmp_path, capsys):
    """validate of dispatch: auto over a fixed M is the build's located error, not "ok" (it said ok, then build
    failed)."""
    path = auto_copy(LINEAR, 4096, 4096, tmp_path)
    assert cli.main(["validate", str(path)]) == 0
    data = yaml.safe_load(path.read_text())
    data["op"]["sizes"]["M"] = 128
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert cli.main(["validate", str(path)]) != 0
    err = capsys.readouterr().err
    assert "schedule.dispatch" in err and "M is fixed" in err


def test_explain_prints_the_table(tmp_path, capsys):
    path = auto_copy(LINEAR, 4096, 4096, tmp_path)
    assert cli.main(["explain", str(path)]) == 0
    out = capsys.readouterr().out
    assert "dispatch (schedule.dispatch: auto" in out and "M 1..64: 64 x 128 x 128, split-K over 4" in out
    assert out.count("why: ") == len(table_of(path)) and "=== M 1..64:" in out


def test_build_packages_one_variant_per_schedule(tmp_path, capsys):
    path = auto_copy(LINEAR, 14336, 4096, tmp_path)
    assert cli.main(["build", str(path), "-o", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "(dispatch: auto, derived buckets)" in out and "M 1..64:" in out
    assert (tmp_path / "out" / "linear_gelu" / "dispatch.json").is_file()


@pytest.mark.parametrize("seed", range(4))
def test_other_shapes_give_total_monotone_tables(seed, tmp_path):
    """No shape table: random N, K (multiples of 8) and M ranges plan into total, monotone tables."""
    rng = random.Random(seed)
    for j in range(3):
        n, k = rng.randrange(256, 65536, 8), rng.randrange(256, 16384, 8)
        q = rng.choice((1, 8, 64))
        hi = q * rng.randrange(64, 8192)
        folder = tmp_path / f"{j}"
        folder.mkdir()
        path = auto_copy(LINEAR, n, k, folder)
        data = yaml.safe_load(path.read_text())
        data["op"]["sizes"]["M"] = {"dynamic": True, "max": hi, "multiple_of": q}
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        check_total(table_of(path), q, hi, q)


def test_a_tuned_bucket_overrides_the_heuristics(tmp_path):
    """build --tuned with tune.buckets: a bucket's verified winner wins; a bucket without one takes the derived
    schedule at the M it is tuned at (not the spec's own)."""
    from schedgen.bucketed import build_bucketed
    from schedgen.tune import buckets as TB
    path = auto_copy(LINEAR, 4096, 4096, tmp_path)
    data = yaml.safe_load(path.read_text())
    data["tune"] = {"buckets": {"M": [64, 1024, 65536]}}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    winner = {"schedule.in_specs.x": {"block_shape": [128, 64], "out_of_bounds": "zero"},
              "schedule.in_specs.w": {"block_shape": [128, 64], "out_of_bounds": "zero"},
              "schedule.out_specs.y": {"block_shape": [128, 128]}, "schedule.cluster": [1]}
    row = {"overrides": {"M": 1024, **winner}, "knobs": {"tile_n": 128}, "time_ms": 0.05, "gpu": "Fake H200",
           "tflops": 700.0}
    bk, _ = TB.load(path)
    bb = build_bucketed(path, {}, bk, [({"M": 64}, None), ({"M": 1024}, row), ({"M": 65536}, None)],
                        cache=Cache(tmp_path / "cache"), fallback=TB._derived(path, {}))
    assert [e["schedule"] for e in bb.record.buckets] == ["derived", "tuned", "derived"]
    names = [bb.variants[i].plan.launch.kernel_name for i in bb.record.table]
    assert "64x128x128" in names[0] and "c1x1x4" in names[0]          # the derived decode schedule
    assert "128x128x64" in names[1] and "c1x1x" not in names[1]       # the tuned winner
    assert names[2] == build_spec(path, {}, cache=Cache(tmp_path / "cache")).plan.launch.kernel_name


def test_verify_checks_every_variant_at_its_bucket_edges(tmp_path):
    """`schedgen verify` of a derived package: each variant at both edges of each bucket, through the package's
    dispatch (on the CPU the CUDA rows SKIP: the GPU runs them against float64)."""
    from schedgen.verify_buckets import verify_derived_file
    path = auto_copy(LINEAR, 14336, 4096, tmp_path)
    table = table_of(path)
    rows = verify_derived_file(str(path), ["cuda"])
    got = sorted((r.spec, r.note.split(";")[0]) for r in rows)
    want = sorted((f"linear_gelu/v{i}", f"bucket M {b.lo}..{b.hi}, {edge}") for i, b in enumerate(table)
                  for edge in ("lower edge", "bound"))          # one variant a bucket: none of the schedules repeat
    assert got == want
    assert all(r.result in ("PASS", "SKIP") and r.shape["N"] == 14336 for r in rows)
