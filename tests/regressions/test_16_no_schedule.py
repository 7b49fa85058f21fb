"""Issue 16 section 5: a matmul spec with no schedule failed at 1:1 with two errors about defaults the user never
wrote (the default pipeline.kind is illegal for matmul; the default tile overflows one consumer's registers)."""
from __future__ import annotations

from schedgen.build import build_spec

SPEC = """name: mm_no_schedule
op:
  kind: matmul
  sizes: {M: 4096, N: 4096, K: 4096}
  inputs:
    a: {shape: [M, K], dtype: bf16}
    b: {shape: [K, N], dtype: bf16}
  outputs:
    out: {shape: [M, N], dtype: bf16}
"""


def test_matmul_without_schedule_builds(tmp_path, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "mm.yaml"
    path.write_text(SPEC)
    built = build_spec(path)           # raised SpecErrors (pipeline.kind, compute_registers at 1:1) before
    p = built.plan
    assert (p.tiles.tile_m, p.tiles.tile_n, p.tiles.tile_k, p.warps.num_consumers, p.pipeline.stages) == (128, 256, 64, 2, 4)
