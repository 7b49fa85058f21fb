"""The project's one GPU check: everything main claims about the GPU, in one call of the device tool.

    python -m bench.gpu [--part verify|tests|record|changed ...] [--out DIR] [--budget S] [--jobs N]
                        [--base REF] [--only SUBSTRING ...]

Parts (default: verify and tests; each fits one 10-minute call of one H200):
- `verify`: every bundled spec on every backend it builds (`schedgen verify --edges --magnitude 1e3`): fixed-size
  specs at their sizes, dynamic ones at the smallest legal sizes, a ragged assignment and the largest whose operands
  fit in 4 GiB; fresh N(0,1) inputs everywhere and one input set scaled to |x| ~ 1e3; outputs poisoned; float64
  references. Specs run in parallel worker processes (--jobs), each under a time limit.
- `tests`: the tests marked `gpu`, sharded over --jobs pytest-xdist workers (whole files per worker).
- `record`: the published performance rows (bench/suite.toml's `record` set; `--set user|bundled|all` for the
  others: ours and every peer verified, then timed interleaved, CUPTI kernel time), one run at a time in one
  supervised worker and nothing else on the GPU; compared with the committed record in bench/results/, rows that
  moved by more than 5% flagged; the rows in OUT/record.json.
- `candidates`: each kernel candidate against the default it would replace (`python -m bench.candidates`: both
  verified, then timed interleaved), alone on the GPU; its verdict (wins, even, loses) is the row's detail.
- `changed`: what `git diff BASE` touches (a family's folder or templates, a spec, a GPU test, the shared pipeline):
  its specs verified, its GPU tests run, its record rows timed. The part to run after a change.

Every spec, test file and record row is a row of the result; a hang, a fault or a timeout is such a row
(HANG, CRASH), never the end of the call. DIR (default $OUT, else gpu-out/) gets summary.json (the rows and the
environment: GPU, UUID, driver, versions, clocks), table.md (the table printed last) and logs.tgz (every log).
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import tomllib
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("verify", "tests", "record", "changed", "candidates")
MAGNITUDE = 1e3
SPEC_SUFFIXES = (".yaml", ".yml", ".toml")
# what a change outside any family folder touches: every family (the shared pipeline)
SHARED = ("schedgen/runtime/", "schedgen/toolchain/", "schedgen/render/", "schedgen/build.py", "schedgen/verify.py",
          "schedgen/reference.py", "schedgen/plan/", "schedgen/frontend/", "schedgen/autodiff/", "templates/common/",
          "pyproject.toml")


@dataclass
class Row:
    """One line of the result: a spec, a test file, a record row or a part's summary."""
    part: str
    item: str
    status: str          # ok | FAIL | HANG | CRASH | SKIP | ERROR
    seconds: float
    detail: str = ""


class Budget:
    """Seconds left of the call: nothing new starts when too little is left for it."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


# ---------------------------------------------------------------------------------------------- processes

def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")   # several processes and torch share the GPU
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def run_bounded(cmd: list[str], log: Path, timeout: float) -> tuple[str, int | None, float]:
    """Run `cmd` in a session of its own, its output to `log`; past `timeout` the whole session is killed.
    (status: ok, FAIL (non-zero exit), CRASH (a signal), HANG (the time limit); exit code; seconds)."""
    t0 = time.monotonic()
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as f:
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True, env=child_env())
        try:
            rc = p.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return "HANG", None, time.monotonic() - t0
    return ("ok" if rc == 0 else "CRASH" if rc < 0 else "FAIL"), rc, time.monotonic() - t0


def tail(path: Path, lines: int = 3, width: int = 200) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(x.strip()[:width] for x in text[-lines:])


# ---------------------------------------------------------------------------------------------- verify

def bundled_specs() -> list[Path]:
    return sorted(p for p in (ROOT / "specs").iterdir() if p.suffix in SPEC_SUFFIXES)


def verify_row(spec: Path, status: str, rc: int | None, secs: float, js: Path, log: Path) -> Row:
    """A spec's row from its verify run: ok, FAIL (the failed checks), SKIP (nothing ran here), HANG, CRASH."""
    checks = []
    try:
        checks = json.loads(js.read_text())
    except (OSError, ValueError):
        pass
    failed = [c for c in checks if c.get("result") == "FAIL"]
    ran = [c for c in checks if c.get("result") == "ok"]
    if status in ("HANG", "CRASH"):
        return Row("verify", spec.name, status, secs, f"rc {rc}; {tail(log)}")
    if failed:
        what = "; ".join(f"{c['backend']} {c['output']} {_sizes(c)}: {_err(c)}" for c in failed[:4])
        return Row("verify", spec.name, "FAIL", secs, f"{len(failed)}/{len(checks)} checks failed: {what}")
    if rc == 4 or (checks and not ran):
        return Row("verify", spec.name, "SKIP", secs, checks[0].get("note", "") if checks else tail(log))
    if status != "ok":
        return Row("verify", spec.name, "ERROR", secs, f"rc {rc}; {tail(log)}")
    worst = max(ran, key=lambda c: c["rel_error"] / max(c["tolerance"], 1e-30))
    backends = sorted({c["backend"] for c in ran})
    return Row("verify", spec.name, "ok", secs, f"{len(ran)} checks ({'+'.join(backends)}), worst "
               f"{worst['rel_error']:.1e} of {worst['tolerance']:.0e} ({worst['backend']} {_sizes(worst)})")


def _sizes(c: dict) -> str:
    mag = f" |x|~{c['magnitude']:g}" if c.get("magnitude", 1) != 1 else ""
    return ",".join(f"{k}={v}" for k, v in (c.get("shape") or {}).items()) + mag


def _err(c: dict) -> str:
    if not isinstance(c.get("rel_error"), (int, float)) or c["rel_error"] == float("inf"):
        return (c.get("note") or "no result")[:160]
    return f"err {c['rel_error']:.2e} > tol {c['tolerance']:.0e}" + (f" ({c['note'][:80]})" if c.get("note") else "")


def part_verify(specs: list[Path], out: Path, budget: Budget, jobs: int, per_spec: float = 420.0) -> list[Row]:
    logs = out / "logs" / "verify"
    logs.mkdir(parents=True, exist_ok=True)

    def one(spec: Path) -> Row:
        left = budget.left() - 15
        if left < 45:
            return Row("verify", spec.name, "SKIP", 0.0, "the call's budget was spent before it started")
        limit = min(per_spec, left)
        js, log = logs / f"{spec.stem}.json", logs / f"{spec.stem}.log"
        cmd = [sys.executable, "-m", "schedgen", "verify", "--edges", "--magnitude", f"{MAGNITUDE:g}",
               "--timeout", f"{max(30, limit - 30):.0f}", "--json", str(js), str(spec)]
        status, rc, secs = run_bounded(cmd, log, limit)
        row = verify_row(spec, status, rc, secs, js, log)
        print(f"  verify {row.status:5} {secs:5.0f}s {spec.name}: {row.detail[:150]}", flush=True)
        return row

    with cf.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, specs))


# ---------------------------------------------------------------------------------------------- tests

def gpu_test_files() -> list[str]:
    """The test files with a test marked gpu."""
    out = []
    for p in sorted((ROOT / "tests").rglob("test_*.py")):
        text = p.read_text(errors="replace")
        if "mark.gpu" in text or "pytest.mark.gpu" in text:
            out.append(str(p.relative_to(ROOT)))
    return out


def junit_rows(xml: Path, files: list[str]) -> tuple[list[Row], dict[str, int]]:
    """One row per test file (ok, or FAIL with the failed tests) and the counts, from pytest's JUnit XML."""
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    per_file: dict[str, dict] = {}
    try:
        root = ET.parse(xml).getroot()
    except (OSError, ET.ParseError):
        return [], counts
    for case in root.iter("testcase"):
        path = (case.get("classname") or "").replace(".", "/")
        f = next((x for x in files if path.startswith(x[:-3])), path)
        entry = per_file.setdefault(f, {"seconds": 0.0, "failed": [], "passed": 0, "skipped": 0})
        entry["seconds"] += float(case.get("time") or 0)
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is not None:
            counts["failed"] += 1
            msg = (bad.get("message") or bad.text or "").strip().splitlines()
            entry["failed"].append(f"{case.get('name')}: {msg[0][:160] if msg else ''}")
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
            entry["skipped"] += 1
        else:
            counts["passed"] += 1
            entry["passed"] += 1
    rows = []
    for f, e in sorted(per_file.items()):
        if e["failed"]:
            rows.append(Row("tests", f, "FAIL", e["seconds"], f"{len(e['failed'])} failed: " + "; ".join(e["failed"][:3])))
        elif e["passed"]:
            rows.append(Row("tests", f, "ok", e["seconds"], f"{e['passed']} passed, {e['skipped']} skipped"))
        else:
            rows.append(Row("tests", f, "SKIP", e["seconds"], f"{e['skipped']} skipped"))
    return rows, counts


def part_tests(files: list[str], out: Path, budget: Budget, jobs: int, per_test: float = 300.0) -> list[Row]:
    if not files:
        return [Row("tests", "(none)", "SKIP", 0.0, "no GPU test to run")]
    left = budget.left() - 20
    if left < 60:
        return [Row("tests", "(all)", "SKIP", 0.0, "the call's budget was spent before the tests started")]
    xml, log = out / "logs" / "tests.xml", out / "logs" / "tests.log"
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "--tb=short",
           "-o", f"timeout={per_test:.0f}", f"--junitxml={xml}", "-rfE"]
    if jobs > 1:
        cmd += ["-n", str(jobs), "--dist", "loadfile"]
    status, rc, secs = run_bounded(cmd + files, log, left)
    rows, counts = junit_rows(xml, files)
    summary = f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped in {secs:.0f}s"
    if rc == 5:                     # pytest: no test was collected
        return [Row("tests", "(all)", "SKIP", secs, "no test selected: " + tail(log, 1))]
    if status == "HANG":
        summary = f"stopped at the call's budget ({secs:.0f}s); " + tail(log, 2)
    elif status == "CRASH" or (status == "FAIL" and not counts["failed"]):
        summary = f"rc {rc}: {tail(log, 3)}"
    head = Row("tests", f"(all, {jobs} workers)", "ok" if status == "ok" else ("HANG" if status == "HANG" else "FAIL"),
               secs, summary)
    print(f"  tests {head.status}: {summary}", flush=True)
    return [head, *rows]


# ---------------------------------------------------------------------------------------------- record

def record_runs(specs: set[str] | None = None, which: str = "record") -> list[dict]:
    """bench/suite.toml's runs of one set ({spec, define, at}): `record` (the default) the published rows, `user`
    the shapes users bring, `bundled` every other bundled spec, `all` every unlabelled run; `glob` entries expanded;
    only those of `specs` (paths relative to the repository) when given. Labelled runs are variants (bench.sweep)."""
    runs = []
    for run in tomllib.loads((ROOT / "bench" / "suite.toml").read_text())["run"]:
        if run.get("label") or (which != "all" and run.get("set", "record") != which):
            continue
        paths = sorted(ROOT.glob(run["glob"])) if "glob" in run else [ROOT / run["spec"]]
        for p in paths:
            rel = str(p.relative_to(ROOT))
            entry = {"spec": rel, "define": list(run.get("define", [])), "at": list(run.get("at", []))}
            if (specs is None or rel in specs) and entry not in runs:
                runs.append(entry)
    return runs


_ENV: dict = {}


def bench_one(spec: str, define: list[str], at: list[str], iters: int) -> list[dict]:
    """One run's rows (`schedgen.bench.bench_built`: ours and the family's peers verified, then timed interleaved),
    in the record worker."""
    from schedgen.bench import bench_built, environment
    from schedgen.build import build_spec
    from schedgen.frontend.overrides import parse_overrides
    if not _ENV:
        _ENV.update(environment())
    built = build_spec(str(ROOT / spec), parse_overrides(define))
    sizes = {k: int(v) for k, v in (a.split("=", 1) for a in at)} or None
    rows = bench_built(built, ["cuda", "pallas"], iters=iters, env=_ENV, at=sizes)
    for r in rows:
        r.update(variant="default", spec_file=spec, commit=_ENV.get("commit"), define=list(define))
    return rows


def part_record(runs: list[dict], out: Path, budget: Budget, per_run: float = 150.0, iters: int = 90) -> list[Row]:
    """Every run in one supervised worker process (imports and compiles once; a run that hangs or faults is killed
    with its worker, which the next run replaces), one run at a time with nothing else on the GPU; its rows go to
    OUT/record.json and are compared with the committed record (moved > 5%: flagged)."""
    from schedgen.bench.rows import compare, recorded_rows
    from schedgen.supervise import Supervisor
    recorded = recorded_rows(ROOT / "bench" / "results")
    rows_out: list[dict] = []
    result = []
    with Supervisor(start_timeout=120.0) as sup:
        for run in runs:
            name = Path(run["spec"]).stem + "".join(f" {a}" for a in run["at"] + run["define"])
            left = budget.left() - 15
            if left < 45:
                result.append(Row("record", name, "SKIP", 0.0, "the call's budget was spent before it started"))
                continue
            t0 = time.monotonic()
            got = sup.call(bench_one, run["spec"], run["define"], run["at"], iters, timeout=min(per_run, left))
            secs = time.monotonic() - t0
            if not got.ok:
                st = {"timeout": "HANG", "crash": "CRASH"}.get(got.status, "ERROR")
                result.append(Row("record", name, st, secs, got.detail[:300]))
                print(f"  record {st:5} {secs:5.0f}s {name}: {got.detail[:160]}", flush=True)
                continue
            new = got.value
            if new and all(r.get("skipped") for r in new):
                result.append(Row("record", name, "SKIP", secs, str(new[0]["skipped"])[:200]))
                continue
            rows_out += new
            moved = [c for c in compare(recorded, new) if c["moved"]]
            detail = "; ".join(_bench_line(r) for r in new) or "no row"
            if moved:
                detail += "; MOVED > 5%: " + ", ".join(f"{c['backend']} {c['ratio']:.2f}x" if c["ratio"] else
                                                       f"{c['backend']} not timed" for c in moved)
            st = "ok" if new and all(r.get("verified") for r in new) else "FAIL"
            result.append(Row("record", name, st, secs, detail))
            print(f"  record {st:5} {secs:5.0f}s {name}: {detail[:160]}", flush=True)
            (out / "record.json").write_text(json.dumps(rows_out, indent=1, default=str) + "\n")
    return result


def _bench_line(r: dict) -> str:
    peers = " ".join(f"{n} {p['ratio']:.2f}x" for n, p in (r.get("peers") or {}).items() if p.get("ratio"))
    rate = f"{r['tflops']:.0f} TFLOP/s" if r.get("tflops") else f"{r.get('gbps') or 0:.0f} GB/s"
    return f"{r['backend']} {r.get('time_ms') or 0:.4f} ms {rate} {peers}".strip()


def part_candidates(out: Path, budget: Budget, only: list[str] | None) -> list[Row]:
    left = budget.left() - 15
    if left < 60:
        return [Row("candidates", "(all)", "SKIP", 0.0, "the call's budget was spent before they started")]
    js = out / "candidates.json"
    cmd = [sys.executable, "-m", "bench.candidates", "--out", str(js)] + (["--only", *only] if only else [])
    status, rc, secs = run_bounded(cmd, out / "logs" / "candidates.log", left)
    try:
        got = json.loads(js.read_text())
    except (OSError, ValueError):
        got = []
    rows = []
    for r in got:
        st = "ok" if r.get("verdict") in ("wins", "even", "loses") else "FAIL"
        ratio = f"{r['ratio']:.3f}" if r.get("ratio") else "-"
        rows.append(Row("candidates", r["candidate"], st, r.get("seconds", 0.0),
                        f"{r.get('verdict')}: default/candidate {ratio} ({r.get('default_ms')} / {r.get('candidate_ms')}"
                        f" ms), verified {r.get('default_verified')}/{r.get('candidate_verified')} {r.get('error', '')}"))
    if status != "ok":
        rows.append(Row("candidates", "(run)", status, secs, f"rc {rc}: {tail(out / 'logs' / 'candidates.log')}"))
    return rows


# ---------------------------------------------------------------------------------------------- changed

def changed_files(base: str) -> list[str]:
    """Files that differ from `base` (committed or not), and untracked files git does not ignore."""
    diff = subprocess.run(["git", "diff", "--name-only", base], cwd=ROOT, capture_output=True, text=True)
    if diff.returncode != 0:
        raise SystemExit(f"bench.gpu: git diff {base}: {diff.stderr.strip()}")
    new = subprocess.run(["git", "ls-files", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True,
                         text=True)
    return sorted(set(diff.stdout.split()) | set(new.stdout.split()))


def spec_kind(path: Path) -> str | None:
    try:
        from schedgen.frontend.validate import load_spec
        return load_spec(str(path))[0].op.kind
    except Exception:
        return None


def selection(files: list[str]) -> tuple[list[Path], list[str], str]:
    """What a change touches: (specs to verify and time, GPU test files, why)."""
    kinds, specs, tests, why = set(), set(), set(), []
    everything = [f for f in files if f.startswith(SHARED)]
    for f in files:
        parts = f.split("/")
        if f.startswith("schedgen/families/") and len(parts) > 3:
            kinds.add(parts[2])
        elif f.startswith("templates/") and len(parts) > 2:        # a family's templates: templates/<kind>/
            kinds.add(parts[1])
        elif f.startswith("specs/") and f.endswith(SPEC_SUFFIXES) and (ROOT / f).exists():
            specs.add(ROOT / f)
        elif f.startswith("tests/") and f.endswith(".py"):
            tests.add(f)
    all_specs = bundled_specs()
    gpu_tests = gpu_test_files()
    if everything:
        why.append(f"the shared pipeline ({', '.join(everything[:3])}{' ...' if len(everything) > 3 else ''})")
        return all_specs, gpu_tests, "; ".join(why)
    if kinds:
        why.append(f"families {', '.join(sorted(kinds))}")
        specs |= {p for p in all_specs if spec_kind(p) in kinds}
        tests |= {t for t in gpu_tests if any(f"/{k}/" in t or f"_{k}" in t for k in kinds)}
    return sorted(specs), sorted(t for t in tests if t in gpu_tests), "; ".join(why) or "specs and tests named"


# ---------------------------------------------------------------------------------------------- the call

def table(rows: list[Row], env: dict, seconds: float) -> str:
    lines = [f"bench.gpu on {env.get('gpu')} {env.get('gpu_uuid', '')} driver {env.get('driver')}, "
             f"commit {env.get('commit')}, {seconds:.0f}s", "",
             "| part | item | status | s | detail |", "|---|---|---|---|---|"]
    order = {"HANG": 0, "CRASH": 1, "FAIL": 2, "ERROR": 3, "SKIP": 4, "ok": 5}
    for part in PARTS:
        mine = [r for r in rows if r.part == part]
        if not mine:
            continue
        counts = {s: sum(r.status == s for r in mine) for s in order}
        shown = [r for r in mine if r.status != "ok" or r.item.startswith("(")]
        for r in sorted(shown, key=lambda r: (order.get(r.status, 9), r.item)):
            lines.append(f"| {part} | {r.item} | {r.status} | {r.seconds:.0f} | {r.detail[:220]} |")
        lines.append(f"| {part} | {len(mine)} rows | " + " ".join(f"{s} {n}" for s, n in counts.items() if n)
                     + f" | {sum(r.seconds for r in mine):.0f} | |")
    return "\n".join(lines) + "\n"


def environment_record() -> dict:
    from schedgen.bench.environment import environment
    env = environment()
    env["commit"] = env.get("commit") or "?"
    env["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", action="append", choices=PARTS, help="repeatable (default: verify and tests)")
    ap.add_argument("--out", default=os.environ.get("OUT") or "gpu-out")
    ap.add_argument("--budget", type=float, default=540.0, help="seconds the call may take (default 540)")
    ap.add_argument("--jobs", type=int, default=max(1, min(6, (os.cpu_count() or 2) // 2)),
                    help="verify processes and pytest-xdist workers side by side (default: CPUs / 2, at most 6)")
    ap.add_argument("--base", default="HEAD~1", help="what `changed` diffs against (default HEAD~1)")
    ap.add_argument("--only", nargs="*", default=None, help="only specs / test files whose path contains one of these")
    ap.add_argument("--set", default="record", choices=("record", "user", "bundled", "all"),
                    help="the record's runs (bench/suite.toml): the published rows (default), the shapes users bring, "
                         "the other bundled specs, or all")
    args = ap.parse_args(argv)
    parts = args.part or ["verify", "tests"]
    budget = Budget(args.budget)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.update({k: v for k, v in child_env().items() if k != "PYTHONPATH"})
    t0 = time.monotonic()
    env = environment_record()
    print(f"bench.gpu: {env.get('gpu')} {env.get('gpu_uuid', '')}, commit {env['commit']}, parts {parts}", flush=True)

    def keep(items):
        return [x for x in items if args.only is None or any(o in str(x) for o in args.only)]

    specs, tests = keep(bundled_specs()), keep(gpu_test_files())
    runs = None
    if "changed" in parts:
        specs, tests, why = selection(changed_files(args.base))
        specs, tests = keep(specs), keep(tests)
        runs = record_runs({str(p.relative_to(ROOT)) for p in specs}, which="all")
        print(f"changed since {args.base}: {why}: {len(specs)} specs, {len(tests)} test files, {len(runs)} record "
              f"rows", flush=True)
    rows: list[Row] = []
    verify_specs = specs if {"verify", "changed"} & set(parts) else []
    test_files = tests if {"tests", "changed"} & set(parts) else []
    # verify and the tests share the GPU (correctness only); the record runs after them, alone
    with cf.ThreadPoolExecutor(max_workers=2) as pool:
        jobs_v = max(1, args.jobs if not test_files else (args.jobs + 1) // 2)
        jobs_t = max(1, args.jobs if not verify_specs else args.jobs // 2 or 1)
        fv = pool.submit(part_verify, verify_specs, out, budget, jobs_v) if verify_specs else None
        ft = pool.submit(part_tests, test_files, out, budget, jobs_t) if test_files else None
        rows += fv.result() if fv else []
        rows += ft.result() if ft else []
    if "candidates" in parts:
        rows += part_candidates(out, budget, args.only)
    if "record" in parts or ("changed" in parts and runs):
        chosen = runs if runs is not None else record_runs(which=args.set)
        rows += part_record([r for r in chosen if args.only is None or any(o in r["spec"] for o in args.only)],
                            out, budget)
    seconds = time.monotonic() - t0
    text = table(rows, env, seconds)
    (out / "table.md").write_text(text)
    (out / "summary.json").write_text(json.dumps({"env": env, "parts": parts, "seconds": seconds,
                                                  "rows": [asdict(r) for r in rows]}, indent=1, default=str) + "\n")
    logs = out / "logs"
    if logs.exists():
        with tarfile.open(out / "logs.tgz", "w:gz") as tar:
            tar.add(logs, arcname="logs")
        shutil.rmtree(logs)
    print("\n" + text, flush=True)
    return 0 if all(r.status in ("ok", "SKIP") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
