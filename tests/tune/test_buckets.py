"""Many shapes, one package, on the CPU: tune.buckets and --buckets checked against the sizes, the tune loop over the
buckets with a fake runner (one database winner per bucket, at the bucket's bound), and `schedgen build --tuned` of a
bucketed spec (variants deduplicated, the dispatch table, the fallbacks to the spec's own schedule). The located
errors of tune.buckets in files: tests/errors/tune_buckets*.yaml. The runtime's pick: tests/runtime/test_bucket_dispatch.py."""
from __future__ import annotations

import json
import sqlite3

import pytest

from conftest import SPECS_DIR
from schedgen import cli
from schedgen import tune as T
from schedgen.cache import Cache
from schedgen.errors import SpecErrors
from schedgen.frontend.validate import load_spec
from schedgen.tune import buckets as B

GPU = {"gpu": "Fake H200", "driver": "999.1"}

# o = x + y with M dynamic (32..1024, multiples of 32) and three buckets of M; `edge` is the out_of_bounds of every
# BlockSpec (zero: a 64-row block is legal over the whole range; reject: only where it divides M)
ADD_DYN = """name: add_dyn
op:
  kind: map
  sizes:
    M: {{dynamic: true, max: 1024, multiple_of: 32}}
    N: 256
  inputs:
    x: {{shape: [M, N], dtype: bf16}}
    y: {{shape: [M, N], dtype: bf16}}
  outputs:
    o: {{shape: [M, N], dtype: bf16}}
  body: o = x + y
schedule:
  in_specs:
    x: {{block_shape: [32, 256], out_of_bounds: {edge}}}
    y: {{block_shape: [32, 256], out_of_bounds: {edge}}}
  out_specs:
    o: {{block_shape: [32, 256], out_of_bounds: {edge}}}
  pipeline: {{kind: emit_pipeline, max_concurrent_steps: 2}}
tune:
  params:
    block_M: [32, 64]
    stages: [2, 3]
  buckets:
    M: [64, 256, 1024]
"""


def add_dyn(tmp_path, edge: str = "zero", buckets: str | None = None):
    text = ADD_DYN.format(edge=edge)
    if buckets is not None:
        text = text.replace("  buckets:\n    M: [64, 256, 1024]\n", buckets)
    path = tmp_path / f"add_dyn_{edge}.yaml"
    path.write_text(text)
    return path


class SizeRunner:
    """Synthetic times by the shape: 32-row blocks win at M <= 64, 64-row blocks above; 3 stages a little slower."""

    def __init__(self):
        self.env = dict(GPU)
        self.measured: list = []
        self.verified: list = []

    def start(self) -> None:
        pass

    def measure(self, built, backend):
        p = built.plan
        wrong_block = (p.block[0] == 64) == (p.sizes["M"] <= 64)
        self.measured.append((p.sizes["M"], p.block[0], p.stages))
        return T.Result("ok", 1.0 + (0.1 if wrong_block else 0.0) + (0.01 if p.stages == 3 else 0.0))

    def verify(self, built, backend):
        self.verified.append(built.plan.sizes["M"])
        return T.Result("ok", extra={"ok": True, "rel_error": 1e-3})

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def pool():
    ex = T.compile_pool(2)
    yield ex
    ex.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, pool):
    """The zero-edged spec tuned over its three buckets into a fresh database."""
    tmp = tmp_path_factory.mktemp("buckets")
    spec = add_dyn(tmp)
    bk, note = B.load(spec)
    runner = SizeRunner()
    res = B.tune_buckets(spec, {}, bk, runner=runner, db=tmp / "tune.sqlite", cache=Cache(tmp / "cache"), pool=pool)
    return tmp, spec, bk, res, runner


# ------------------------------------------------------------------------------------------------ the buckets


def test_the_spec_buckets_and_their_ranges(tmp_path):
    bk, note = B.load(add_dyn(tmp_path))
    assert note == "" and bk.sizes == ("M",) and bk.bounds == ((64, 256, 1024),)
    assert bk.cells() == [{"M": 64}, {"M": 256}, {"M": 1024}]
    assert [bk.label(c) for c in bk.cells()] == ["M 32..64", "M 96..256", "M 288..1024"]


def test_two_sizes_make_every_combination_row_major(tmp_path):
    path = tmp_path / "bias.yaml"
    path.write_text((SPECS_DIR / "bias_add_bf16_dynamic.yaml").read_text()
                    + "tune:\n  buckets:\n    M: [128, 65536]\n    N: [1024, 4096, 16384]\n")
    bk, _ = B.load(path)
    assert bk.cells() == [{"M": m, "N": n} for m in (128, 65536) for n in (1024, 4096, 16384)]
    assert bk.label({"M": 65536, "N": 1024}) == "M 129..65536, N 256..1024"


def test_a_define_that_fixes_a_bucketed_size_is_one_shape(tmp_path):
    bk, note = B.load(add_dyn(tmp_path), {"M": 256})
    assert bk is None and note == "-D M=256 fixes a bucketed size: one shape, the buckets are not used"


def test_command_line_buckets_replace_the_spec_s_and_are_checked(tmp_path):
    spec = add_dyn(tmp_path)
    bk, _ = B.load(spec, cli=B.parse_cli(["M=512,1024"]))
    assert bk.bounds == ((512, 1024),)
    with pytest.raises(B.BucketsError, match=r"^--buckets M \(bound 1\): 500 is not a multiple of 32 .*; use 480 "
                                             r"or 512$"):
        B.load(spec, cli=B.parse_cli(["M=500,1024"]))
    with pytest.raises(B.BucketsError, match=r"^--buckets M \(bound 1\): the last bound is 512, but M goes up to "
                                             r"its max 1024"):
        B.load(spec, cli=B.parse_cli(["M=512"]))
    for bad in ("M", "M=", "M=64,,128", "M=-64", "3M=64", "M=6.4"):
        with pytest.raises(B.BucketsError, match=r"expected SIZE=B1,B2,\.\.\. with increasing positive integer "
                                                 r"bounds, e\.g\. --buckets M=64,256,1024"):
            B.parse_cli([bad])
    with pytest.raises(B.BucketsError, match="M is given twice"):
        B.parse_cli(["M=64", "M=1024"])


def test_too_many_combinations_is_a_located_error(tmp_path):
    path = tmp_path / "bias.yaml"
    ms = ", ".join(str(256 * i) for i in range(1, 9)) + ", 65536"
    ns = ", ".join(str(256 * i) for i in range(1, 8)) + ", 16384"
    path.write_text((SPECS_DIR / "bias_add_bf16_dynamic.yaml").read_text()
                    + f"tune:\n  buckets:\n    M: [{ms}]\n    N: [{ns}]\n")
    with pytest.raises(SpecErrors) as err:
        B.load(path)
    text = err.value.render()
    assert f"{path}:" in text and "tune.buckets: 72 bucket combinations (M 9 x N 8), over the 64 a package takes" in text


def test_cli_reports_bucket_errors_located_and_usage_errors_in_one_line(tmp_path, capsys):
    spec = add_dyn(tmp_path, buckets="  buckets:\n    M: [64, 512]\n")
    assert cli.main(["tune", str(spec), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"{spec}:" in err and "tune.buckets.M[1]: the last bound is 512" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as exit_:
        cli.main(["tune", str(add_dyn(tmp_path)), "--buckets", "M=64;1024", "--dry-run"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().startswith("schedgen: --buckets M=64;1024: expected SIZE=B1,B2,...")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["build", str(add_dyn(tmp_path)), "--buckets", "M=64,1024", "-o", str(tmp_path / "o")])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip() == ("schedgen: --buckets goes with --tuned (it packages the tuning "
                                               "database's winner of each bucket)")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["tune", str(add_dyn(tmp_path)), "--export", str(tmp_path / "x.yaml")])
    assert exit_.value.code == 2
    assert "--export writes one schedule; a bucketed spec's winners go into one package" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ tuning


def test_tuning_over_buckets_writes_one_winner_per_bucket_at_its_bound(tuned):
    tmp, spec, bk, res, runner = tuned
    assert [r.cell for r in res.runs] == bk.cells()
    assert [r.result.space.sizes["M"] for r in res.runs] == [64, 256, 1024]
    bests = [r.result.best for r in res.runs]
    assert [b["shape"]["M"] for b in bests] == [64, 256, 1024]
    assert [b["knobs"] for b in bests] == [{"block_M": 32, "stages": 2}, {"block_M": 64, "stages": 2},
                                           {"block_M": 64, "stages": 2}]
    assert all(b["verified"] for b in bests)
    assert sorted(runner.verified) == [64, 256, 1024]          # one winner checked per bucket
    with sqlite3.connect(tmp / "tune.sqlite") as db:
        runs = db.execute("select shape, status from runs order by id").fetchall()
        winners = db.execute("select json_extract(shape, '$.M') from results where verified = 1 "
                             "order by 1").fetchall()
    assert [(json.loads(s)["M"], st) for s, st in runs] == [(64, "done"), (256, "done"), (1024, "done")]
    assert [w[0] for w in winners] == [64, 256, 1024]


def test_the_summary_table_lists_each_bucket(tuned):
    from rich.console import Console
    tmp, spec, bk, res, _ = tuned
    console = Console(width=120, record=True)
    console.print(B.summary(res))
    text = console.export_text()
    assert "3 buckets" in text
    lines = [ln.split() for ln in text.splitlines() if ln.startswith("M ")]
    assert [(ln[1], ln[2], ln[3], ln[-2], ln[-1]) for ln in lines] == [
        ("32..64", "M=64", "1.0000", "block_M=32", "stages=2"), ("96..256", "M=256", "1.0000", "block_M=64", "stages=2"),
        ("288..1024", "M=1024", "1.0000", "block_M=64", "stages=2")]


def test_a_rerun_measures_nothing_new(tuned, pool):
    tmp, spec, bk, _, _ = tuned
    runner = SizeRunner()
    res = B.tune_buckets(spec, {}, bk, runner=runner, db=tmp / "tune.sqlite", cache=Cache(tmp / "cache"), pool=pool)
    assert runner.measured == [] and all(r.result.best is not None for r in res.runs)


# ------------------------------------------------------------------------------------------------ build --tuned


def _build(tmp, spec, capsys, *extra):
    out = tmp / "out"
    code = cli.main(["build", str(spec), "--tuned", "--db", str(tmp / "tune.sqlite"), "-o", str(out), *extra])
    cap = capsys.readouterr()
    return code, cap.out, cap.err, out


def test_build_tuned_packages_a_variant_per_distinct_winner(tuned, capsys, monkeypatch):
    monkeypatch.setattr(T, "current_gpu", lambda: "Fake H200")
    tmp, spec, bk, res, _ = tuned
    code, out, err, folder = _build(tmp, spec, capsys)
    assert code == 0, err
    pkg = folder / "add_dyn"
    record = json.loads((pkg / "dispatch.json").read_text())
    assert record["sizes"] == ["M"] and record["bounds"] == [[64, 256, 1024]]
    assert record["variants"] == ["v0", "v1"] and record["table"] == [0, 1, 1]     # M 96..1024 share one schedule
    assert [b["schedule"] for b in record["buckets"]] == ["tuned"] * 3
    assert [b["range"]["M"] for b in record["buckets"]] == [[32, 64], [96, 256], [288, 1024]]
    plans = [json.loads((pkg / "variants" / v / "plan.json").read_text()) for v in ("v0", "v1")]
    launches = [json.loads((pkg / "variants" / v / "launch.json").read_text()) for v in ("v0", "v1")]
    assert [p["block"][0] for p in plans] == [32, 64]
    assert all(rec["sizes"] == [{"name": "M", "min": 32, "max": 1024, "multiple_of": 32}] for rec in launches)
    assert all((pkg / "variants" / v / f).is_file() for v in ("v0", "v1")
               for f in ("kernel.cubin", "pallas_kernel.py", "__init__.py"))
    assert f"built add_dyn (bucketed) -> {pkg}" in out and "3 buckets, 2 variants:" in out
    assert "M 32..64: tuned at M=64: best 1.0000 ms" in out and "block_M=32 stages=2 on Fake H200 -> v0" in out
    assert "M 288..1024: tuned at M=1024" in out and out.rstrip().endswith("-> v1")
    init = (pkg / "__init__.py").read_text()
    assert "def add_dyn(x, y, *, out=None" in init and "M: 64, 256, 1024" in init


def test_a_bucket_without_a_result_takes_the_spec_s_schedule(tuned, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(T, "current_gpu", lambda: "Fake H200")
    tmp, spec, bk, res, _ = tuned
    wider = tmp_path / "add_dyn_zero.yaml"       # the same spec (same database keys), one more bucket
    wider.write_text(spec.read_text().replace("M: [64, 256, 1024]", "M: [64, 128, 256, 1024]"))
    (tmp_path / "tune.sqlite").write_bytes((tmp / "tune.sqlite").read_bytes())
    code, out, err, folder = _build(tmp_path, wider, capsys)
    assert code == 0, err
    record = json.loads((folder / "add_dyn" / "dispatch.json").read_text())
    assert [b["schedule"] for b in record["buckets"]] == ["tuned", "spec", "tuned", "tuned"]
    # the spec's own schedule (32-row blocks, 2 stages) is the M <= 64 winner's plan: one variant for both
    assert record["variants"] == ["v0", "v1"] and record["table"] == [0, 0, 1, 1]
    assert (f"M 96..128: no verified result at M=128 in the tuning database: the spec's own schedule (run: schedgen "
            f"tune {wider}) -> v0") in out


def test_a_winner_that_does_not_plan_over_the_range_falls_back(tmp_path, pool, capsys, monkeypatch):
    """With out_of_bounds: reject, a 64-row block tuned at M = 256 (which it divides) cannot serve M = 96: that
    bucket takes the spec's own schedule, and the build says why."""
    monkeypatch.setattr(T, "current_gpu", lambda: "Fake H200")
    spec = add_dyn(tmp_path, edge="reject")
    bk, _ = B.load(spec)
    B.tune_buckets(spec, {}, bk, runner=SizeRunner(), db=tmp_path / "tune.sqlite", cache=Cache(tmp_path / "c"),
                   pool=pool)
    code, out, err, folder = _build(tmp_path, spec, capsys)
    assert code == 0, err
    record = json.loads((folder / "add_dyn" / "dispatch.json").read_text())
    assert [b["schedule"] for b in record["buckets"]] == ["tuned", "spec", "spec"]
    assert record["variants"] == ["v0"] and record["table"] == [0, 0, 0]
    assert "M 96..256: the winner at M=256 does not plan over the whole dynamic range (schedule." in out
    assert out.count("the spec's own schedule -> v0") == 2


def test_build_without_tuned_or_with_a_fixed_size_is_one_kernel(tuned, capsys, monkeypatch):
    monkeypatch.setattr(T, "current_gpu", lambda: "Fake H200")
    tmp, spec, bk, res, _ = tuned
    out = tmp / "plain"
    assert cli.main(["build", str(spec), "-o", str(out)]) == 0
    assert (out / "add_dyn" / "launch.json").is_file() and not (out / "add_dyn" / "dispatch.json").exists()
    assert cli.main(["build", str(spec), "--tuned", "--db", str(tmp / "tune.sqlite"), "-o", str(out), "-D",
                     "M=256"]) == 0
    cap = capsys.readouterr()
    assert "-D M=256 fixes a bucketed size: one shape, the buckets are not used" in cap.err
    assert "tuned: best 1.0000 ms" in cap.out and not (out / "add_dyn" / "dispatch.json").exists()
    assert json.loads((out / "add_dyn" / "plan.json").read_text())["block"][0] == 64


def test_validate_reports_bucket_errors_with_plan_errors(tmp_path, capsys):
    spec = add_dyn(tmp_path, buckets="  buckets:\n    M: [64, 2048]\n")
    assert cli.main(["validate", str(spec)]) == 2
    assert "tune.buckets.M[1]: 2048 is outside M's range (M is dynamic in 32..1024, a multiple of 32)" in \
        capsys.readouterr().err
    assert cli.main(["validate", str(spec), "-D", "M=64"]) == 0      # one shape: the buckets are not used


def test_buckets_only_tune_section_tunes_the_default_space(tmp_path):
    path = tmp_path / "lg.yaml"
    path.write_text((SPECS_DIR / "linear_gelu_bf16_dynamic.yaml").read_text()
                    + "tune:\n  buckets:\n    M: [64, 65536]\n")
    spec, _ = load_spec(str(path))
    assert spec.tune.buckets == {"M": [64, 65536]} and spec.tune.params == {}
    space = T.load_space(path, {"M": 64})
    assert space.default is not None and space.knobs     # around the planner's picks, as with no tune section


def test_the_command_line_tunes_each_bucket_and_prints_the_table(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(T, "WorkerRunner", lambda **kw: SizeRunner())
    monkeypatch.setattr(T, "current_gpu", lambda: "Fake H200")
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    spec = add_dyn(tmp_path)
    db = tmp_path / "tune.sqlite"
    assert cli.main(["tune", str(spec), "--db", str(db), "--buckets", "M=256,1024", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "bucket 1 of 2: M 32..256, tuned at M=256" in out and "bucket 2 of 2: M 288..1024, tuned at M=1024" in out
    assert "2 buckets" in out and f"next: schedgen build {spec} --tuned" in out
    table = [ln.split() for ln in out.splitlines() if ln.startswith("M ") and "M=" in ln]
    assert [(t[1], t[2], t[-2]) for t in table] == [("32..256", "M=256", "block_M=64"), ("288..1024", "M=1024",
                                                                                            "block_M=64")]
    code, out, err, folder = _build(tmp_path, spec, capsys, "--buckets", "M=256,1024")
    assert code == 0, err
    record = json.loads((folder / "add_dyn" / "dispatch.json").read_text())
    assert record["bounds"] == [[256, 1024]] and record["variants"] == ["v0"] and record["table"] == [0, 0]


def test_a_spec_with_a_backward_section_builds_one_backward_for_the_package(tmp_path, capsys, monkeypatch):
    """build --tuned of a spec with `backward:` (refused before issue 21's second part): the package's root carries
    the one backward (tests/runtime/test_bucket_backward.py runs it)."""
    monkeypatch.setattr(T, "current_gpu", lambda: "Fake H200")
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    spec = tmp_path / "train.yaml"
    spec.write_text(ADD_DYN.format(edge="zero").replace("  body: o = x + y\n", "  body: o = x * y\nbackward: {}\n"))
    code, out, err, folder = _build(tmp_path, spec, capsys)
    assert code == 0, err
    pkg = folder / "add_dyn"
    assert json.loads((pkg / "backward.json").read_text())["user_outputs"] == ["o"]
    assert sorted(p.name for p in (pkg / "backward").iterdir() if p.is_dir()) and \
        all((p / "launch.json").is_file() for p in (pkg / "backward").iterdir() if p.is_dir())
    assert "backward (one for every variant): gradients of x, y;" in out


def test_a_dry_run_over_buckets_compiles_each_bucket_s_candidates(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    spec = add_dyn(tmp_path)
    assert cli.main(["tune", str(spec), "--dry-run", "--buckets", "M=64,1024", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "bucket 1 of 2: M 32..64, tuned at M=64" in out and "2 buckets (dry run: nothing measured)" in out
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("M ") and "M=" in ln and " of " in ln]
    assert [(r[1], r[2]) for r in rows] == [("32..64", "M=64"), ("96..1024", "M=1024")]
    assert all(r[3] == r[5] for r in rows)          # "N of N" compiled


def test_cli_time_budget_reaches_each_bucket_run(tmp_path, monkeypatch):
    """Regression: `tune --time S` on a bucketed spec was dropped silently (each bucket ran without a budget)."""
    from schedgen.tune import buckets as tune_buckets_module
    seen = {}

    class NoRunner:
        def close(self):
            pass

    def fake(spec, overrides, buckets, **kw):
        seen.update(kw)
        raise RuntimeError("stop here")
    monkeypatch.setattr(tune_buckets_module, "tune_buckets", fake)
    monkeypatch.setattr(cli, "_tune_runner", lambda args, worker_runner: NoRunner())
    assert cli.main(["tune", str(add_dyn(tmp_path)), "--time", "7"]) == 1
    assert seen["time_budget"] == 7.0


# ------------------------------------------------------------------------------------------------ verify / explain /
# bench --tuned: the variants of the bucketed build


def _cli(capsys, *argv):
    """cli.main's status (a usage error's SystemExit code too), stdout and stderr."""
    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_verify_tuned_checks_every_variant_at_both_edges_of_its_buckets(tuned, capsys, monkeypatch):
    """Pallas in interpret mode against float64: v0 at M = 32 and 64, v1 at 96, 256, 288 and 1024 (each picked by
    the package's own dispatch there)."""
    monkeypatch.setattr(T, "current_gpu", lambda: "Fake H200")
    tmp, spec, bk, res, _ = tuned
    code, out, err = _cli(capsys, "verify", spec, "--tuned", "--db", tmp / "tune.sqlite", "--interpret",
                          "--timeout", "0", "--seed", "3")
    assert code == 0, out + err
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("add_dyn/")]
    assert [(r[0], r[4], r[7]) for r in rows] == [
        (f"add_dyn/v{v}", f"N=256,M={m}", "ok") for v, m in ((0, 32), (0, 64), (1, 96), (1, 256), (1, 288), (1, 1024))]
    assert all(r[1] == "pallas" and float(r[5]) <= float(r[6]) for r in rows)
    assert "bucket M 96..256, lower edge" in out and "bucket M 288..1024, bound" in out


def test_verify_tuned_honours_sizes_inside_each_bucket(tuned, capsys, monkeypatch):
    """--sizes 2 with --tuned: each bucket also at a size between its edges (rounded down to M's multiple_of 32,
    dropped where it lands on an edge: bucket 32..64 has none), each through the package's dispatch."""
    monkeypatch.setattr(T, "current_gpu", lambda: "Fake H200")
    tmp, spec, bk, res, _ = tuned
    code, out, err = _cli(capsys, "verify", spec, "--tuned", "--db", tmp / "tune.sqlite", "--interpret",
                          "--timeout", "0", "--seed", "4", "--sizes", "2")
    assert code == 0, out + err
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("add_dyn/")]
    assert [(r[0], r[4], r[7]) for r in rows] == [
        (f"add_dyn/v{v}", f"N=256,M={m}", "ok")
        for v, m in ((0, 32), (0, 64), (1, 96), (1, 160), (1, 256), (1, 288), (1, 640), (1, 1024))]
    assert "bucket M 96..256, inside (M=160)" in out and "bucket M 288..1024, inside (M=640)" in out
    assert all(float(r[5]) <= float(r[6]) for r in rows)


def test_verify_tuned_fails_a_variant_that_computes_wrong(tuned, capsys, monkeypatch):
    """A wrong kernel in one variant is a FAIL row of that variant (the check is real): v1's Pallas run returns
    x - y."""
    from schedgen import verify as V
    monkeypatch.setattr(T, "current_gpu", lambda: "Fake H200")
    tmp, spec, bk, res, _ = tuned
    real = V.run_pallas

    def wrong_for_v1(kernel, plan, inputs, interpret):
        outs, note = real(kernel, plan, inputs, interpret)
        if plan.block[0] == 64:
            outs = [(inputs["x"].astype("float32") - inputs["y"].astype("float32")).astype(outs[0].dtype)]
        return outs, note
    monkeypatch.setattr(V, "run_pallas", wrong_for_v1)
    code, out, err = _cli(capsys, "verify", spec, "--tuned", "--db", tmp / "tune.sqlite", "--interpret",
                          "--timeout", "0")
    assert code == 1
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("add_dyn/")]
    assert {r[0]: r[7] for r in rows if r[0] == "add_dyn/v0"} == {"add_dyn/v0": "ok"}
    assert [r[7] for r in rows if r[0] == "add_dyn/v1"] == ["FAIL"] * 4


def test_explain_tuned_prints_the_bucket_table_and_each_variant(tuned, capsys, monkeypatch):
    monkeypatch.setattr(T, "current_gpu", lambda: "Fake H200")
    tmp, spec, bk, res, _ = tuned
    db = tmp / "tune.sqlite"
    code, out, err = _cli(capsys, "explain", spec, "--tuned", "--db", db)
    assert code == 0, err
    assert out.startswith(f"{spec}: add_dyn (bucketed)\n  3 buckets, 2 variants:\n")
    assert "=== v0 (serves M 32..64) ===\nkernel map_add_dyn_32x256_s2" in out
    assert "=== v1 (serves M 96..256; M 288..1024) ===\nkernel map_add_dyn_64x256_s2" in out
    code, one, err = _cli(capsys, "explain", spec, "--tuned", "--db", db, "--variant", "1")
    assert code == 0 and "=== v1 " in one and "=== v0 " not in one and "3 buckets, 2 variants:" in one
    code, js, err = _cli(capsys, "explain", spec, "--tuned", "--db", db, "--json")
    data = json.loads(js)
    assert data["dispatch"]["table"] == [0, 1, 1] and [p["block"][0] for p in data["variants"].values()] == [32, 64]
    assert _cli(capsys, "explain", spec, "--tuned", "--db", db, "--variant", "2")[:3:2] == (
        2, "schedgen: --variant 2: add_dyn has 2 variants (0..1)\n")
    assert _cli(capsys, "explain", spec, "--tuned", "--db", db, "--draw", tmp / "x.png")[2] == (
        "schedgen: --draw draws one schedule: with --tuned, name the variant (--variant N)\n")
    # without --tuned: the spec's own schedule, unchanged
    code, plain, err = _cli(capsys, "explain", spec)
    assert code == 0 and plain.startswith("kernel map_add_dyn_32x256_s2") and "bucketed" not in plain


def test_bench_tuned_times_the_variant_the_dispatch_picks(tuned, capsys, monkeypatch):
    """No GPU here: the rows are SKIPs, but each names the variant the dispatch picks at its --at (M=1024, the max,
    without --at)."""
    monkeypatch.setattr(T, "current_gpu", lambda: "Fake H200")
    tmp, spec, bk, res, _ = tuned
    seen = []
    from schedgen import bench as bench_mod
    real = bench_mod.bench_built

    def spy(built, backends, **kw):
        seen.append((built.plan.block[0], kw["at"]))
        return real(built, backends, **kw)
    monkeypatch.setattr(bench_mod, "bench_built", spy)
    code, out, err = _cli(capsys, "bench", spec, "--tuned", "--db", tmp / "tune.sqlite", "--backend", "cuda",
                          "--at", "M=96", "--at", "M=32")
    assert code == 4 and err.startswith("schedgen: nothing was timed: 2 of 2 rows skipped"), err
    assert f"{spec}: at M=96 the dispatch picks v1 (bucket M 96..256)" in out
    assert f"{spec}: at M=32 the dispatch picks v0 (bucket M 32..64)" in out
    assert seen == [(64, {"M": 96}), (32, {"M": 32})]
    assert "SKIP add_dyn/v1 cuda:" in out and "SKIP add_dyn/v0 cuda:" in out
    seen.clear()
    _cli(capsys, "bench", spec, "--tuned", "--db", tmp / "tune.sqlite", "--backend", "cuda")
    assert seen == [(64, {})]


def test_tuned_tools_say_in_one_line_what_is_missing(tuned, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(T, "current_gpu", lambda: "Fake H200")
    tmp, spec, bk, res, _ = tuned
    empty = tmp_path / "empty.sqlite"
    for cmd in (["explain"], ["verify", "--interpret"], ["bench"]):
        code, out, err = _cli(capsys, *cmd, spec, "--tuned", "--db", empty)
        assert code == 2 and err == (f"schedgen: {spec}: the tuning database has no verified result for any bucket "
                                     f"(tuned at M=64; M=256; M=1024); run: schedgen tune {spec}\n"), (cmd, err)
    plain = tmp_path / "plain.yaml"
    plain.write_text(spec.read_text().replace("  buckets:\n    M: [64, 256, 1024]\n", ""))
    code, out, err = _cli(capsys, "explain", plain, "--tuned", "--db", tmp / "tune.sqlite")
    assert code == 2 and err.startswith(f"schedgen: {plain}: --tuned looks at the variants of a bucketed build, and "
                                        f"there are no buckets here")
    code, out, err = _cli(capsys, "verify", spec, "--db", tmp / "tune.sqlite")
    assert code == 2 and err == "schedgen: --db goes with --tuned (the variants of a bucketed build)\n"
    code, out, err = _cli(capsys, "explain", spec, "--variant", "0")
    assert code == 2 and "--variant goes with --tuned" in err
    code, out, err = _cli(capsys, "explain", spec, "--tuned", "--db", tmp / "tune.sqlite", "--buckets", "M=100,1024")
    assert code == 2 and err.startswith("schedgen: --buckets M (bound 1): 100 is not a multiple of 32")
