"""bench/tables.py: docs/benchmarks.md's tables and README's "Measured" summary are generated from the records, and
CI fails when they drift apart."""
from __future__ import annotations

import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT))
from bench import tables  # noqa: E402


def test_the_committed_docs_match_the_records():
    assert tables.main(["--check"]) == 0


def test_a_hand_edit_inside_the_block_is_caught(tmp_path, monkeypatch):
    readme = tmp_path / "README.md"
    docs = tmp_path / "docs" / "benchmarks.md"
    docs.parent.mkdir()
    for src, dst in ((ROOT / "README.md", readme), (ROOT / "docs" / "benchmarks.md", docs)):
        dst.write_text(src.read_text())
    readme.write_text(readme.read_text().replace("| cublas |", "| cublas (edited) |", 1))
    monkeypatch.setattr(tables, "ROOT", tmp_path)
    assert tables.main(["--check"]) == 1
    assert tables.main([]) == 0 and tables.main(["--check"]) == 0        # regenerated
    assert "(edited)" not in readme.read_text()


def test_rows_name_their_basis_date_and_commit():
    row = {"spec": "s", "shape": {"M": 1}, "backend": "cuda", "time_ms": 0.5, "tflops": 700.0, "verified": True,
           "timing": "cupti", "date": "2026-12-07", "env": {"commit": "abc1234"},
           "peers": {"cublas": {"ratio": 1.02, "ratio_basis": "cupti", "verified": True},
                     "jax": {"skipped": "cannot take the layout"}}}
    line = tables.family_table("matmul.json", [row])[-2]
    assert "| cublas 1.02x, jax skipped | yes | cupti | 2026-12-07 | abc1234 |" in line
    old = {"spec": "a", "shape": {}, "backend": "cuda", "time_ms": 1.0, "peer": "copy", "ratio": 0.95,
           "verified": True}
    assert tables.basis(old) == "events" and tables.commit(old) == "-"
