"""Defect group 9 (issue 41): readers without bounds, and `tune --ray` on an address where nothing answers.

`bench --json FILE`, `python -m schedgen.report FILE` and `schema --check -o FILE` read with a plain read(): a FIFO
blocked them forever, /dev/zero read until MemoryError; a record nested 100000 deep or holding a 5000-digit
integer, 1e999 or 1e308 ms was a traceback (RecursionError, ValueError, OverflowError in a plot). Every file a
user names is now read by `schedgen.files` (the spec reader of issue 14 made general): a regular file only (checked
before and after the open, opened non-blocking), a size cap, JSON nested at most MAX_JSON_DEPTH levels and numbers
no field takes refused, then each row's measurements checked against their range: one located line, exit 2.

`tune --ray HOST:PORT` where no Ray cluster answers never returned (ray.init retries for ever); the address is now
probed first (`schedgen.tune.probe`: a TCP connection and gRPC's HTTP/2 greeting, bounded in time).
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading

import pytest

from _cli import ROOT, run_child
from _specs import ADD
from schedgen import cli, report
from schedgen.files import MAX_JSON_DEPTH, UnreadableFile, read_json
from schedgen.tune.probe import unreachable

ROW = {"family": "map", "spec": "add_bf16", "backend": "cuda", "shape": {"M": 64, "N": 512}, "time_ms": 0.01,
       "gbps": 100.0, "verified": True}


def _special(tmp_path, kind: str):
    path = tmp_path / "rec.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    return path


@pytest.mark.parametrize("kind, says", [("fifo", "FIFO"), ("dev_zero", "")])
@pytest.mark.parametrize("reader", ["bench --json", "report", "schema --check"])
def test_a_fifo_or_dev_zero_is_refused_not_read(tmp_path, reader, kind, says):
    path = str(_special(tmp_path, kind))
    if reader == "report":
        res = subprocess.run([sys.executable, "-m", "schedgen.report", path, "-o", str(tmp_path / "rep")],
                             capture_output=True, text=True, cwd=ROOT, timeout=60,
                             env=dict(os.environ, PYTHONPATH=str(ROOT)))
    else:                                       # the old code blocked (FIFO) or read until MemoryError
        argv = ["bench", str(ADD), "--json", path] if reader == "bench --json" else ["schema", "--check", "-o", path]
        res = run_child(*argv, timeout=60)
    assert res.returncode == 2, res.stderr[-2000:]
    err = res.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and path in err and says in err, err


def _rows(**change) -> list[dict]:
    return [dict(ROW, **change)]


BAD = {   # the record's text, what the one line says
    "deep": ("[" * 100_000 + "]" * 100_000, f"nested 100000 levels deep; at most {MAX_JSON_DEPTH}"),
    "long integer": (json.dumps(_rows(flops=1)).replace('"flops": 1', '"flops": ' + "9" * 5000),
                     "is too large"),
    "1e999": (json.dumps(_rows()).replace("0.01", "1e999"), "the number 1e999 is too large"),
    "1e308 ms": (json.dumps(_rows(time_ms=1e308)), "time_ms is 1e+308; a number from"),
    "a string of ms": (json.dumps(_rows(time_ms="fast")), "time_ms is a JSON string"),
    "negative GB/s": (json.dumps(_rows(gbps=-5.0)), "gbps is -5.0"),
    "peer time": (json.dumps(_rows(peers={"copy": {"time_ms": 1e300}})), "peers.copy.time_ms is 1e+300"),
    "a list as shape size": (json.dumps(_rows(shape={"M": [1]})), "shape.M is a JSON list"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_record_no_field_can_hold_is_one_line(tmp_path, capsys, monkeypatch, case):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    text, says = BAD[case]
    path = tmp_path / "rec.json"
    path.write_text(text)
    with pytest.raises(SystemExit) as stop:
        report.main([str(path), "-o", str(tmp_path / "rep")])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"schedgen.report: {path}") and says in err and len(err.splitlines()) == 1, err
    with pytest.raises(SystemExit) as stop:
        cli.main(["bench", str(ADD), "--json", str(path)])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"schedgen: {path}") and says in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "rep").exists()


def test_read_json_locates_a_long_integer(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('[\n {"a": 1,\n  "b": ' + "1" * 20 + "}]")
    with pytest.raises(UnreadableFile) as err:
        read_json(path, 1 << 20)
    assert err.value.where == (3, 8) and err.value.located(path).startswith(f"{path}:3:8: invalid JSON")
    path.write_text("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)
    assert read_json(path, 1 << 20) == eval("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)


def test_the_size_cap(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("[" + " " * 100 + "]")
    with pytest.raises(UnreadableFile, match="file is over 50 bytes"):
        read_json(path, 50)


# ---------------------------------------------------------------------------------------------- tune --ray

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Server:
    """A local TCP server that answers each connection with `reply` (None: says nothing and keeps it open)."""

    def __init__(self, reply: bytes | None):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.reply, self.conns = reply, []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            if self.reply is not None:
                conn.sendall(self.reply)

    def close(self):
        for c in self.conns:
            c.close()
        self.sock.close()


def test_probe_a_port_where_nothing_listens():
    assert unreachable(f"127.0.0.1:{_free_port()}", timeout=5) == "connection refused"


@pytest.mark.parametrize("reply, says", [
    (None, "nothing answered within 0.3 s"),
    (b"HTTP/1.1 400 Bad Request\r\n\r\n", "does not speak gRPC"),
    (b"SSH-2.0-OpenSSH_9.6\r\n", "does not speak gRPC"),
])
def test_probe_a_server_that_is_not_ray(reply, says):
    server = _Server(reply)
    try:
        got = unreachable(f"127.0.0.1:{server.port}", timeout=0.3)
    finally:
        server.close()
    assert got is not None and says in got, got


def test_probe_passes_an_http2_server_and_what_ray_resolves(monkeypatch):
    server = _Server(bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))            # an empty SETTINGS frame, as gRPC greets
    try:
        assert unreachable(f"ray://127.0.0.1:{server.port}", timeout=5) is None
    finally:
        server.close()
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert unreachable("auto") is None and unreachable("local") is None
    assert "HOST:PORT" in unreachable("127.0.0.1:99999")


def test_cli_tune_ray_on_an_unreachable_address_is_one_line(tmp_path):
    port = _free_port()
    res = run_child("tune", str(ADD), "--ray", f"127.0.0.1:{port}", timeout=120)    # the old code never returned
    assert res.returncode == 1, res.stderr[-2000:]
    assert res.stderr.strip() == (f"schedgen: --ray 127.0.0.1:{port}: no Ray cluster to use (connection refused); "
                                  f"start one (ray start --head) or give --ray local for a Ray instance on this "
                                  f"machine")
