"""Defect group 6 (issue 41): the writers other than `build -o` followed symbolic links and blocked on FIFOs.

`new -o`, `schema -o`, `explain --draw`, `tune --export`, `bench --json/--markdown/--report`, `verify
--sanitize-logs` and `python -m schedgen.report -o` wrote with a plain open(): a dangling symlink's target was
created, `--force` (or any overwrite) wrote into the file a link named, and a FIFO blocked the command forever (a
device such as /dev/stdout was written, or as root replaced). Every file the CLI writes now goes through
`schedgen.files.write_file`: a symbolic link, FIFO, device, socket or folder at the path is a one-line error (exit
2), nothing is written through it; a regular file is replaced atomically (a temporary file in the same folder,
renamed onto it, keeping the old file's permissions). A linked folder above the file is followed as usual. The
tuning database (`--db`, which sqlite writes in place) is refused the same way when a link or FIFO is there.
"""
from __future__ import annotations

import ast
import json
import os
import stat

import pytest

from _cli import ROOT, run_child
from _specs import ADD
from schedgen import cli, report
from schedgen.files import NotARegularFile, write_file
from schedgen.tune.results import export_schedule

ROW = {"family": "map", "spec": "add_bf16", "backend": "cuda", "shape": {"M": 64, "N": 512}, "dtype": "bf16",
       "time_ms": 0.01, "gbps": 100.0, "verified": True, "rel_error": 0.0}


def _record(tmp_path) -> str:
    path = tmp_path / "rec.json"
    path.write_text(json.dumps([ROW]))
    return str(path)


# each writer: (the argv of `schedgen` or of `python -m schedgen.report` as [-m, ...], the file name it writes)
WRITERS = {
    "new -o": (lambda t, p: ["new", "map", "-o", p, "--force"], "starter.yaml"),
    "schema -o": (lambda t, p: ["schema", "-o", p], "schema.json"),
    "explain --draw": (lambda t, p: ["explain", str(ADD), "--draw", p], "plan.png"),
    "tune --export": (lambda t, p: ["tune", str(ADD), "--export", p, "--db-only", "--db", str(t / "db.sqlite")],
                      "best.yaml"),
}


def _run(argv) -> int:
    try:
        return cli.main(argv)
    except SystemExit as stop:
        return stop.code


def _victim(tmp_path):
    victim = tmp_path / "outside" / "victim.txt"
    victim.parent.mkdir()
    victim.write_text("KEEP\n")
    return victim


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("link", ["dangling", "to a file"])
def test_a_symlink_at_the_output_is_not_written_through(tmp_path, capsys, monkeypatch, writer, link):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    argv, name = WRITERS[writer]
    victim = _victim(tmp_path)
    target = victim if link == "to a file" else tmp_path / "outside" / "created.txt"
    out = tmp_path / name
    out.symlink_to(target)
    assert _run(argv(tmp_path, str(out))) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "symbolic link" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert victim.read_text() == "KEEP\n" and not (tmp_path / "outside" / "created.txt").exists()
    assert out.is_symlink()


@pytest.mark.parametrize("writer", WRITERS)
def test_a_fifo_at_the_output_is_refused_not_waited_on(tmp_path, writer):
    argv, name = WRITERS[writer]
    fifo = tmp_path / name
    os.mkfifo(fifo)
    res = run_child(*argv(tmp_path, str(fifo)), timeout=60)      # the old code blocked in open() for ever
    assert res.returncode == 2, res.stderr[-2000:]
    assert "FIFO" in res.stderr and "Traceback" not in res.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_bench_outputs_are_refused_before_timing(tmp_path, capsys, monkeypatch):
    """bench --markdown onto a symlink, and a --json record that is a symlink: refused before anything is timed."""
    from schedgen import bench
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(bench, "bench_built", lambda *a, **k: pytest.fail("timed before checking the outputs"))
    victim = _victim(tmp_path)
    (tmp_path / "table.md").symlink_to(victim)
    (tmp_path / "rec.json").symlink_to(tmp_path / "outside" / "created.json")
    for argv in (["--json", _record(tmp_path / "outside"), "--markdown", str(tmp_path / "table.md")],
                 ["--json", str(tmp_path / "rec.json")]):
        assert _run(["bench", str(ADD), *argv]) == 2
        err = capsys.readouterr().err
        assert "symbolic link" in err and len(err.strip().splitlines()) == 1, err
    assert victim.read_text() == "KEEP\n" and not (tmp_path / "outside" / "created.json").exists()


def test_bench_writes_its_record_and_table_whole(tmp_path, capsys, monkeypatch):
    from schedgen import bench
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(bench, "environment", lambda: {"gpu": None})
    monkeypatch.setattr(bench, "bench_built", lambda built, backends, **kw: [dict(ROW, spec="add_bf16")])
    rec, md = tmp_path / "rec.json", tmp_path / "table.md"
    rec.write_text("[]")
    rec.chmod(0o640)
    assert _run(["bench", str(ADD), "--json", str(rec), "--markdown", str(md)]) == 0
    assert [r["spec"] for r in json.loads(rec.read_text())] == ["add_bf16"] and "add_bf16" in md.read_text()
    assert stat.S_IMODE(rec.stat().st_mode) == 0o640                   # the record's permissions kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "rec.json", "table.md"]   # no temporary left


def test_the_report_is_not_written_through_a_symlink(tmp_path, capsys):
    victim = _victim(tmp_path)
    out = tmp_path / "rep"
    out.mkdir()
    (out / "report.md").symlink_to(victim)
    with pytest.raises(SystemExit) as stop:
        report.main([_record(tmp_path), "-o", str(out)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"schedgen.report: -o {out}: cannot write the report: it is a symbolic link"), err
    assert victim.read_text() == "KEEP\n"


def test_export_schedule_refuses_a_symlink(tmp_path):
    victim = _victim(tmp_path)
    out = tmp_path / "best.yaml"
    out.symlink_to(victim)
    row = {"overrides": {}, "time_ms": 1.0, "knobs": {}, "verified": True, "rel_error": 0.0}
    with pytest.raises(NotARegularFile, match="symbolic link"):
        export_schedule(ADD, row, out)
    assert victim.read_text() == "KEEP\n"
    out.unlink()
    assert export_schedule(ADD, row, out) == out and out.read_text().startswith("# Tuned by")


def test_write_file_replaces_a_regular_file_and_follows_linked_folders(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "linked").symlink_to(real, target_is_directory=True)
    path = tmp_path / "linked" / "sub" / "f.txt"
    write_file(path, "one")
    (real / "sub" / "f.txt").chmod(0o600)
    write_file(path, b"two")
    assert (real / "sub" / "f.txt").read_text() == "two" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(real / "sub") == ["f.txt"]
    for bad, what in ((tmp_path, "a directory"), ("/dev/null", "a character device")):
        with pytest.raises(NotARegularFile, match=what):
            write_file(bad, "x")


def _writes_files(tree: ast.AST) -> list[int]:
    """Lines that write a file around schedgen.files: .write_text / .write_bytes / .savefig, open(..., 'w'...)."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in ("write_text", "write_bytes", "savefig"):
            out.append(node.lineno)
        elif isinstance(f, ast.Name) and f.id == "open" and any(
                isinstance(a, ast.Constant) and isinstance(a.value, str) and set(a.value) & set("wax+")
                for a in [*node.args[1:2], *(k.value for k in node.keywords if k.arg == "mode")]):
            out.append(node.lineno)
    return out


def test_every_writer_goes_through_schedgen_files():
    """Files the CLI writes go through schedgen.files; cache.py and build.py write into fresh folders of their own
    (O_EXCL, then one rename of the folder), which nothing else can have linked."""
    own = {"files.py", "cache.py", "build.py"}
    found = {}
    for path in sorted((ROOT / "schedgen").rglob("*.py")):
        if path.name in own and path.parent == ROOT / "schedgen":
            continue
        lines = _writes_files(ast.parse(path.read_text()))
        if lines:
            found[str(path.relative_to(ROOT))] = lines
    assert found == {}, f"files written around schedgen.files.write_file: {found}"


@pytest.mark.parametrize("kind", ["dangling", "to a file", "fifo"])
def test_the_tuning_database_is_not_opened_through_a_symlink_or_a_fifo(tmp_path, capsys, kind):
    """sqlite writes where a link points (a dangling link's target is created) and opens a FIFO."""
    victim = _victim(tmp_path)
    db = tmp_path / "tune.sqlite"
    if kind == "fifo":
        os.mkfifo(db)
    else:
        db.symlink_to(victim if kind == "to a file" else tmp_path / "outside" / "created.sqlite")
    assert _run(["tune", str(ADD), "--db", str(db), "--db-only", "--export", str(tmp_path / "w.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"schedgen: {db}: it is a ") and "--db takes the database file's own path" in err, err
    assert victim.read_text() == "KEEP\n" and not (tmp_path / "outside" / "created.sqlite").exists()
