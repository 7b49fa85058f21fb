"""Random damage to a cache entry and random concurrent builds into one output folder (not a test module: used by
tests/build/test_cache_fuzz.py, and runnable by hand for the figures in docs/reliability.md):

    PYTHONPATH=$PWD python tests/build/cache_fuzz.py --cases 200 --rounds 40
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))      # conftest's helpers, also when this file runs as a script
from conftest import run_process_group  # noqa: E402

ADD = ROOT / "specs" / "add_bf16.yaml"
SMALL = {"M": 64, "N": 512}
INDEX = "entry.json"
NASTY_NAMES = ["../x.py", "../../evil.py", "/etc/hostname", "a/b", "", ".", "..", INDEX, "kernel.cu\x00", ".hidden",
               "ünïcode.py", "x" * 300, "kernel.cu/", "\\..\\x", "__init__.py", "extra.txt", 7, None]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _random_json(rng: random.Random, depth: int = 0):
    kind = rng.choice(["int", "str", "null", "bool", "float", "list", "dict"] if depth < 4 else ["int", "str"])
    if kind == "int":
        return rng.choice([0, -1, 5, 2 ** 70])
    if kind == "str":
        return rng.choice(["", "kernel.cu", "0" * 64, "x" * 1000, "\u2028"])
    if kind == "null":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "float":
        return rng.choice([0.5, 1e308])
    if kind == "list":
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["key", "files", "a", "cache_key", "name"]): _random_json(rng, depth + 1)
            for _ in range(rng.randint(0, 3))}


def _index(entry: Path) -> dict | None:
    try:
        ix = json.loads((entry / INDEX).read_text())
        return ix if isinstance(ix, dict) and isinstance(ix.get("files"), dict) else None
    except (OSError, ValueError, RecursionError):
        return None


def _set_index(entry: Path, ix) -> None:
    p = entry / INDEX
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    elif p.exists() or p.is_symlink():
        p.unlink()
    p.write_text(json.dumps(ix))


def _a_file(rng: random.Random, entry: Path) -> Path | None:
    files = [p for p in entry.iterdir()] if entry.is_dir() else []
    return rng.choice(files) if files else None


def _flip(rng, entry, f):
    if f is not None and f.is_file() and (data := bytearray(f.read_bytes())):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        f.write_bytes(bytes(data))


def _truncate(rng, entry, f):
    if f is not None and f.is_file():
        data = f.read_bytes()
        f.write_bytes(data[: rng.randint(0, len(data))])


def _delete(rng, entry, f):
    if f is not None and f.is_file():
        f.unlink()


def _to_folder(rng, entry, f):
    if f is not None and f.is_file():
        f.unlink()
        f.mkdir()
        if rng.random() < 0.5:
            (f / "inner").write_text("x")


def _to_symlink(rng, entry, f):
    if f is None or not f.is_file():
        return
    data = f.read_bytes()
    f.unlink()
    target = rng.choice(["same bytes elsewhere", "dangling", "/dev/zero", "another file"])
    if target == "same bytes elsewhere":
        copy = entry.parent.parent / f"copy-{f.name}"
        copy.write_bytes(data)
        f.symlink_to(copy)
    else:
        f.symlink_to({"dangling": entry / "nothing", "/dev/zero": Path("/dev/zero")}.get(target, entry / INDEX))


def _random_index(rng, entry, f):
    _set_index(entry, _random_json(rng))


def _mutate_field(rng, entry, f):
    ix = _index(entry)
    if ix is None:
        return
    what = rng.choice(["key", "files value", "files type", "drop name"])
    if what == "key":
        ix["key"] = _random_json(rng)
    elif what == "files type":
        ix["files"] = rng.choice([list(ix["files"]), None, 3, "kernel.cu"])
    elif ix["files"]:
        name = rng.choice(sorted(ix["files"]))
        if what == "files value":
            ix["files"][name] = _random_json(rng)
        else:
            ix["files"].pop(name)
    _set_index(entry, ix)


def _nasty_name(rng, entry, f):
    ix = _index(entry)
    if ix is None:
        return
    outside = entry.parent.parent / "evil.py"
    outside.write_bytes(b"EVIL = 1\n")
    ix["files"][rng.choice(NASTY_NAMES)] = _sha(b"EVIL = 1\n") if rng.random() < 0.7 else "0" * 64
    (entry / INDEX).write_text(json.dumps(ix, default=str))


def _consistent_rewrite(rng, entry, f):
    # the JSON files, whose contents build_spec checks; a consistent rewrite of kernel.cu is undetectable by design
    # (whoever can write the cache can make it serve anything: docs/reliability.md)
    ix = _index(entry)
    name = rng.choice(["manifest.json", "plan.json", "launch.json"])
    if ix is not None and (entry / name).is_file():
        data = rng.choice([b"", b"{", b"[]", b"null", json.dumps(_random_json(rng)).encode(),
                           (entry / name).read_bytes()[:-1], b"\x00" * 100])
        (entry / name).write_bytes(data)
        ix["files"][name] = _sha(data)
        _set_index(entry, ix)


def _replace_entry(rng, entry, f):
    shutil.rmtree(entry)
    how = rng.choice(["file", "empty folder", "symlink to folder", "dangling symlink"])
    if how == "file":
        entry.write_bytes(b"not a folder")
    elif how == "empty folder":
        entry.mkdir()
    else:
        entry.symlink_to(entry.parent if how == "symlink to folder" else entry.parent / "nowhere")


def _garbage_index(rng, entry, f):
    (entry / INDEX).write_bytes(rng.choice([b"", b"\xff" * 10, b"[" * 50_000, b'{"key": ' * 20_000,
                                             os.urandom(200)]))


DAMAGE = {"flip byte": _flip, "truncate": _truncate, "delete file": _delete, "file -> folder": _to_folder,
          "file -> symlink": _to_symlink, "index random JSON": _random_index, "index field mutated": _mutate_field,
          "nasty name": _nasty_name, "consistent rewrite": _consistent_rewrite, "entry replaced": _replace_entry,
          "index garbage": _garbage_index}


def corrupt(rng: random.Random, entry: Path) -> str:
    """Apply one random kind of damage to the entry; returns its category."""
    cat = rng.choice(sorted(DAMAGE))
    if entry.is_symlink() or not entry.is_dir():
        return "entry replaced"                 # an earlier damage of this case replaced the whole entry
    DAMAGE[cat](rng, entry, _a_file(rng, entry))
    return cat


def corruption_cases(n: int, seed: int, work: Path) -> tuple[Counter, Counter, list[str]]:
    """n random corruptions of add_bf16's entry: each build must not raise, must give exactly the undamaged files,
    must leave a whole entry and must write nothing outside the output. (per category, failures per category,
    failure descriptions)."""
    from schedgen.build import build_spec, package
    from schedgen.cache import Cache
    ref_root = work / "ref"
    ref = build_spec(ADD, SMALL, cache=Cache(ref_root))
    key = json.loads(ref.files["manifest.json"])["cache_key"]
    rng = random.Random(seed)
    cats, bad, notes = Counter(), Counter(), []
    for i in range(n):
        case = work / f"case{i}"
        shutil.copytree(ref_root, case / "cache", symlinks=True)
        cache = Cache(case / "cache")
        entry = cache.path(key)
        cat = " + ".join(sorted({corrupt(rng, entry) for _ in range(rng.choice([1, 1, 1, 2, 3]))}))
        cats[cat.split(" + ")[0] if " + " not in cat else "several"] += 1
        try:
            built = build_spec(ADD, SMALL, cache=cache)
            problem = None
            if built.files != ref.files:
                problem = "served files that differ from an undamaged build"
            elif cache.get(key) is None:
                problem = "the entry was not replaced by a whole one"
            else:
                dest = package(built, case / "out")
                names = sorted(p.name for p in dest.iterdir())
                if names != sorted([*ref.files, "__init__.py"]):
                    problem = f"package holds {names}"
                elif (case / "evil.py").exists() and (case / "out" / "evil.py").exists():
                    problem = "wrote outside the package"
                elif sorted(p.name for p in (case / "out").iterdir()) != ["__init__.py", "add_bf16"]:
                    problem = "extra files in the output"
        except BaseException as exc:  # noqa: BLE001 - a fuzzer counts every escape
            problem = f"{type(exc).__name__}: {exc}"[:300]
        if problem:
            bad[cat] += 1
            notes.append(f"case {i} ({cat}): {problem}")
        shutil.rmtree(case, ignore_errors=True)
    return cats, bad, notes


CONCURRENT = r"""
import hashlib, io, json, os, random, signal, sys, time, traceback
from pathlib import Path
from schedgen import build, cli
spec, out, scratch, rounds, seed = sys.argv[1:6]
rng = random.Random(int(seed))
argv = ["build", spec, "-D", "M=64", "-D", "N=512", "-o"]
assert cli.main(argv + [scratch]) == 0
want = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (Path(scratch) / "add_bf16").iterdir()}
real_exchange = getattr(build, "_exchange", None)  # (absent before issue 14 group 1)
out, report = Path(out), []
for r in range(int(rounds)):
    procs = rng.randint(2, 8)
    exchange = rng.random() < 0.5
    build._exchange = real_exchange if exchange else (lambda a, b: None)
    before = rng.choice(["missing", "package", "file", "symlink to folder", "dangling symlink", "empty folder"])
    dest = out / "add_bf16"
    out.mkdir(exist_ok=True)
    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    if before != "package" and dest.is_dir():
        import shutil; shutil.rmtree(dest)
    if before == "file":
        dest.write_text("x")
    elif before == "symlink to folder":
        dest.symlink_to(Path(scratch), target_is_directory=True)
    elif before == "dangling symlink":
        dest.symlink_to(out / "nowhere")
    elif before == "empty folder":
        dest.mkdir()
    kill = rng.random() < 0.3
    rd, wr = os.pipe()
    kids = []
    for i in range(procs):
        pid = os.fork()
        if pid == 0:
            os.close(wr)
            os.read(rd, 1)
            sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
            try:
                rc = cli.main(argv + [str(out)])
            except BaseException:
                traceback.print_exc()
                rc = 99
            Path(f"{out}.r{r}.{i}.json").write_text(json.dumps([rc, sys.stderr.getvalue()]))
            os._exit(0)
        kids.append(pid)
    os.close(rd)
    os.close(wr)
    killed = set()
    if kill:
        time.sleep(rng.uniform(0, 0.05))
        victim = rng.randrange(procs)
        os.kill(kids[victim], signal.SIGKILL)
        killed.add(victim)
    for pid in kids:
        os.waitpid(pid, 0)
    said = []
    for i in range(procs):
        p = Path(f"{out}.r{r}.{i}.json")
        said.append(json.loads(p.read_text()) if p.exists() else None)
        if p.exists():
            p.unlink()
    files = ({p.name: hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "not a file"
              for p in dest.iterdir()} if dest.is_dir() else None)
    survivors = [s for i, s in enumerate(said) if i not in killed]
    problems = [f"exit {s[0]}: {s[1][-300:]}" for s in survivors if s is None or s[0] != 0 or s[1]]
    gone = files is None and not os.path.lexists(dest)
    if gone and killed and not exchange:
        pass    # documented: without RENAME_EXCHANGE a build killed between its two renames leaves no package
    elif dest.is_symlink() or files != want:
        problems.append(f"package is not whole: {sorted(files) if files else files}")
    if any(s is None for s in survivors):
        problems.append("a build that was not killed wrote no result")
    dots = sorted(p.name for p in out.iterdir() if p.name.startswith("."))
    if dots and not killed:
        problems.append(f"left {dots}")
    report.append({"procs": procs, "exchange": exchange, "before": before, "killed": len(killed), "gone": gone,
                   "stale_left": len(dots), "problems": problems})
print(json.dumps(report))
"""


def concurrency_rounds(rounds: int, seed: int, work: Path) -> list[dict]:
    """Random rounds of 2-8 forked `schedgen build -o OUT` at once: random exchange support, random thing at
    OUT/<name> before, sometimes one build SIGKILLed mid-way (its staging may stay until the next build)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), SCHEDGEN_CACHE=str(work / "cache"))
    res = run_process_group([sys.executable, "-c", CONCURRENT, str(ADD), str(work / "out"), str(work / "scratch"),
                             str(rounds), str(seed)], timeout=600, env=env, cwd=work)
    if res.returncode != 0:
        raise RuntimeError(res.stderr[-3000:])
    return json.loads(res.stdout.splitlines()[-1])


def main() -> None:
    import argparse
    import tempfile
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cats, bad, notes = corruption_cases(args.cases, args.seed, Path(tmp))
        print(f"corruptions: {args.cases} cases, {sum(bad.values())} failed", flush=True)
        for cat, n in sorted(cats.items()):
            print(f"  {cat}: {n}")
        for note in notes:
            print("  FAIL", note)
        report = concurrency_rounds(args.rounds, args.seed, Path(tmp))
        failed = [r for r in report if r["problems"]]
        print(f"concurrency: {len(report)} rounds, {sum(r['procs'] for r in report)} builds, "
              f"{sum(r['killed'] for r in report)} killed, {len(failed)} rounds failed, "
              f"{sum(r['gone'] and bool(r['killed']) for r in report)} left no package after a kill (no exchange)")
        print("  by state before:", dict(Counter(r["before"] for r in report)),
              "exchange:", sum(r["exchange"] for r in report), "rename-aside:", sum(not r["exchange"] for r in report))
        for r in failed:
            print("  FAIL", r)


if __name__ == "__main__":
    main()
