"""build_spec reads the spec file once: the bytes the loader parses are the bytes the manifest's spec_sha256 names."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

from conftest import ROOT, SPECS_DIR
from schedgen import build
from schedgen.cache import Cache

ADD = SPECS_DIR / "add_bf16.yaml"


def test_manifest_hashes_the_bytes_that_were_parsed(tmp_path, monkeypatch):
    """The file changes right after it is parsed (an editor saving): the manifest still names what was built."""
    spec = tmp_path / "add.yaml"
    original = ADD.read_bytes()
    spec.write_bytes(original)
    real = build.load_spec
    seen = []

    def load_then_edit(path, overrides=None, *rest):
        out = real(path, overrides, *rest)
        seen.append(rest)
        spec.write_bytes(original + b"\n# saved again by an editor\n")
        return out
    monkeypatch.setattr(build, "load_spec", load_then_edit)
    built = build.build_spec(spec, {"M": 64, "N": 512}, cache=Cache(tmp_path / "c"))
    assert seen == [(original,)]                         # the loader was handed the bytes build_spec read
    manifest = json.loads(built.files["manifest.json"])
    assert manifest["spec_sha256"] == hashlib.sha256(original).hexdigest()


def test_a_fifo_spec_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    code = ("import sys; from schedgen.build import build_spec; from schedgen.errors import SpecErrors\n"
            "try:\n    build_spec(sys.argv[1])\nexcept SpecErrors as e:\n    print(e.render())\n")
    res = subprocess.run([sys.executable, "-c", code, str(fifo)], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                         capture_output=True, text=True, timeout=300)   # a hang guard: seconds when it works
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip().startswith(f"{fifo}:1:1: <file>: cannot read file: it is a FIFO (named pipe)")
