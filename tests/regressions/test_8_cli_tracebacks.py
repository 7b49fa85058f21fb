"""Defect group 8 (issue 14), the CLI half: inputs that gave a traceback, a hang or a silent wrong behaviour.

- `build -o OUT` where OUT is a file, lies under a file, is a symlink to a file or a dangling symlink, or is
  read-only or full (ENOSPC; both simulated, the suite may run as root): a FileExistsError / PermissionError /
  OSError traceback. Likewise `tune --export` and `schema -o`. Now one line, `schedgen: -o OUT: cannot write the
  package: why`, exit 2.
- `--timeout nan | inf | 1e300` (verify, tune): OverflowError tracebacks, or NaN timing out at once; a negative
  verify timeout silently ran in-process without the watchdog. Now a finite number of seconds above 0 and at most
  supervise.MAX_TIMEOUT (86400), or, for verify only, 0 meaning "no watchdog, run in this process" (said in --help);
  anything else is argparse's usage error, exit 2. The supervisor itself refuses such limits (ValueError).
- `python -m schedgen.report bench/results/attention.json` (the committed attention record, a {..., "rows": [...]}
  object of bench/attn_gpu.py's rows): AttributeError. Every committed record renders now.
- `schedgen explain SPEC | head` (any command whose stdout closes early): BrokenPipeError traceback. Now quiet,
  exit 141 (as a process killed by SIGPIPE, like coreutils).
"""
from __future__ import annotations

import errno
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _specs import ADD, add_with_tune
from schedgen import cli
from schedgen import supervise
from schedgen import tune as T

ROOT = Path(__file__).resolve().parents[2]
RECORDS = sorted((ROOT / "bench" / "results").glob("*.json"))


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))


def _run(argv):
    """cli.main's exit status, whether returned or raised (a usage error raises SystemExit, as argparse does)."""
    try:
        return cli.main(argv)
    except SystemExit as stop:
        return stop.code


def _one_line(capsys, *needles):
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("schedgen"), err
    for n in needles:
        assert n in lines[0], (n, err)
    return lines[0]


# ------------------------------------------------------------------------------------------- outputs the OS refuses


def _bad_output(kind: str, tmp_path: Path, monkeypatch) -> tuple[Path, str]:
    """(the -o path, what the message must say)"""
    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    if kind == "a_file":
        return afile, "a file (not a folder) is in the way"
    if kind == "under_a_file":
        return afile / "build", "a file (not a folder) is in the way"
    if kind == "symlink_to_a_file":
        link = tmp_path / "link"
        link.symlink_to(afile)
        return link, f"is a symbolic link to {afile}"
    if kind == "dangling_symlink":
        link = tmp_path / "dangling"
        link.symlink_to(tmp_path / "missing" / "target")
        return link, "(missing)"
    code, why = {"read_only": (errno.EROFS, "the file system is read-only"),
                 "permission": (errno.EACCES, "permission denied"),
                 "full": (errno.ENOSPC, "no space left on the device")}[kind]
    out = tmp_path / "build"
    import schedgen.build as B

    def refuse(built, out_dir):      # the package writer meets a read-only or full file system
        raise OSError(code, os.strerror(code), str(Path(out_dir) / built.name / "kernel.cubin"))
    monkeypatch.setattr(B, "package", refuse)
    return out, why


OUTPUT_KINDS = ["a_file", "under_a_file", "symlink_to_a_file", "dangling_symlink", "read_only", "permission", "full"]


@pytest.mark.parametrize("kind", OUTPUT_KINDS)
def test_build_output_the_os_refuses_is_one_line(tmp_path, capsys, monkeypatch, kind):
    out, why = _bad_output(kind, tmp_path, monkeypatch)
    assert _run(["build", str(ADD), "-o", str(out)]) == 2
    _one_line(capsys, f"schedgen: -o {out}: cannot write the package: ", why)


@pytest.mark.parametrize("kind", ["a_file", "under_a_file", "symlink_to_a_file"])
def test_schema_output_the_os_refuses_is_one_line(tmp_path, capsys, monkeypatch, kind):
    out, why = _bad_output(kind, tmp_path, monkeypatch)
    target = out / "schema.json" if kind != "a_file" else out / "x" / "schema.json"
    assert _run(["schema", "-o", str(target)]) == 2
    _one_line(capsys, f"schedgen: -o {target}: cannot write the schema: ")


def _fake_best(monkeypatch):
    row = {"overrides": {}, "knobs": {"block_M": 32}, "time_ms": 1.0, "gbps": 100.0, "gpu": "Fake H200",
           "driver": "1", "backend": "cuda", "verified": True, "rel_error": 1e-3}
    monkeypatch.setattr(T, "best_known", lambda *a, **k: row)


@pytest.mark.parametrize("kind", ["under_a_file", "symlink_to_a_file", "not_yaml"])
def test_tune_export_the_os_refuses_is_one_line(tmp_path, capsys, monkeypatch, kind):
    path = add_with_tune(tmp_path, "tune:\n  params:\n    block_M: [16, 32]\n")
    _fake_best(monkeypatch)
    if kind == "not_yaml":
        target, why = tmp_path / "best.txt", "name it .yaml"
    else:
        out, why = _bad_output(kind, tmp_path, monkeypatch)
        target = out / "best.yaml"
    assert _run(["tune", str(path), "--export", str(target), "--db-only"]) == 2
    _one_line(capsys, f"schedgen: --export {target}", why)


class _CountingRunner:
    measured = 0

    def __init__(self, *args, **kwargs):
        self.env = {"gpu": "Fake H200", "driver": "1"}

    def start(self):
        pass

    def measure(self, built, backend):
        _CountingRunner.measured += 1
        return T.Result("ok", 1.0)

    def verify(self, built, backend):
        return T.Result("ok", extra={"ok": True, "rel_error": 1e-3})

    def close(self):
        pass


@pytest.mark.parametrize("target", ["afile/best.yaml", "best.txt"])
def test_a_bad_export_path_fails_before_the_search(tmp_path, capsys, monkeypatch, target):
    """Found at the end of the whole search before (a traceback after every candidate was measured)."""
    path = add_with_tune(tmp_path, "tune:\n  params:\n    block_M: [16, 32]\n")
    (tmp_path / "afile").write_text("x")
    monkeypatch.setattr(T, "WorkerRunner", _CountingRunner)
    _CountingRunner.measured = 0
    out = tmp_path / target
    assert _run(["tune", str(path), "--export", str(out), "--db", str(tmp_path / "t.sqlite")]) == 2
    _one_line(capsys, f"schedgen: --export {out}")
    assert _CountingRunner.measured == 0


def test_a_bad_sanitizer_log_folder_fails_first(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    logs = tmp_path / "afile" / "logs"
    assert _run(["verify", str(ADD), "--sanitize", "memcheck", "--sanitize-logs", str(logs)]) == 2
    _one_line(capsys, f"schedgen: --sanitize-logs {logs}: cannot write the sanitizer logs: ")


@pytest.mark.parametrize("argv", [["tune", "SPEC", "--dry-run", "--workers=0"], ["tune", "SPEC", "--workers=-2"],
                                  ["tune", "SPEC", "--iters=0"], ["tune", "SPEC", "--warmup=-1"],
                                  ["tune", "SPEC", "--top=0"], ["tune", "SPEC", "--iters=many"],
                                  ["bench", "SPEC", "--iters=0"]])
def test_counts_must_be_whole_and_positive(tmp_path, capsys, argv):
    path = add_with_tune(tmp_path, "tune:\n  params:\n    block_M: [16, 32]\n")
    assert _run([str(path) if a == "SPEC" else a for a in argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "give a whole number >=" in err


# ------------------------------------------------------------------------------------------------------ timeouts

BAD_TIMEOUTS = ["nan", "inf", "-inf", "1e300", "-1", "-0.5", "86401", "soon"]


@pytest.mark.parametrize("value", BAD_TIMEOUTS)
def test_verify_timeout_must_be_finite_positive(capsys, value):
    assert _run(["verify", str(ADD), f"--timeout={value}"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "argument --timeout" in err and "0 (no watchdog: run in this process)" in err


@pytest.mark.parametrize("value", BAD_TIMEOUTS + ["0"])
def test_tune_timeout_must_be_finite_positive(tmp_path, capsys, value):
    path = add_with_tune(tmp_path, "tune:\n  params:\n    block_M: [16, 32]\n")
    assert _run(["tune", str(path), "--dry-run", "--workers", "1", f"--timeout={value}"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "argument --timeout" in err and "at most 86400" in err


def test_help_says_what_timeout_zero_means(capsys):
    with pytest.raises(SystemExit):
        cli.main(["verify", "--help"])
    assert "0: no watchdog, run in this process" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("value", [math.nan, math.inf, 1e300, -1.0, 0.0])
def test_supervisor_refuses_unusable_timeouts(value):
    with pytest.raises(ValueError, match="timeout"):
        supervise.call_with_timeout(abs, -1, timeout=value)
    with pytest.raises(ValueError, match="timeout"):
        supervise.Supervisor(start_timeout=value)


def test_supervisor_takes_the_maximum():
    assert supervise.call_with_timeout(abs, -3, timeout=supervise.MAX_TIMEOUT).value == 3


# ------------------------------------------------------------------------------------------ the committed records


@pytest.mark.parametrize("record", RECORDS, ids=[r.name for r in RECORDS])
def test_report_renders_every_committed_record(tmp_path, record):
    from schedgen import report
    assert report.main([str(record), "-o", str(tmp_path / "rep")]) == 0
    assert (tmp_path / "rep" / "report.md").read_text().startswith("# Benchmark report")
    assert (tmp_path / "rep" / "roofline.png").stat().st_size > 10_000


def test_report_renders_all_committed_records_together(tmp_path):
    from schedgen import report
    assert report.main([*map(str, RECORDS), "-o", str(tmp_path / "rep")]) == 0
    names = {p.name for p in (tmp_path / "rep").iterdir()}
    assert {"matmul_throughput.png", "map_throughput.png", "attention_throughput.png", "roofline.png"} <= names


@pytest.mark.parametrize("bad", ["missing", "not_json", "not_rows", "a_directory"])
def test_report_on_a_file_that_is_not_a_record_is_one_line(tmp_path, capsys, bad):
    from schedgen import report
    f = tmp_path / "rec.json"
    if bad == "not_json":
        f.write_text("{not json")
    elif bad == "not_rows":
        f.write_text('[1, "two"]')
    elif bad == "a_directory":
        f.mkdir()
    with pytest.raises(SystemExit) as stop:
        report.main([str(f), "-o", str(tmp_path / "rep")])
    assert stop.value.code == 2
    _one_line(capsys, str(f))


# ------------------------------------------------------------------------------------------------- closed stdout


@pytest.mark.parametrize("argv", [["-m", "schedgen", "explain", str(ADD)],
                                  ["-m", "schedgen", "explain", "--json", str(ADD)],
                                  ["-m", "schedgen", "validate", str(ADD)],
                                  ["-m", "schedgen.report", str(RECORDS[0]), "-o", "REPORT"]],
                         ids=["explain", "explain-json", "validate", "report"])
def test_closed_stdout_stops_quietly(tmp_path, argv):
    """The reader is gone before anything is written (as `| head` once it has its lines): no traceback."""
    argv = [str(tmp_path / "rep") if a == "REPORT" else a for a in argv]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SCHEDGEN_CACHE": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            cwd=tmp_path)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141, err
    assert err == ""
