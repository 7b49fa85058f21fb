"""Defect group 5 of issue 41: `validate` skipped the backward section.

Before: `backward: {wrt: [nope]}`, an input listed twice, `save:` of an output or an input, `save: [acc]` on a map:
`validate` said ok, then `build` failed. Now `validate` runs what `build` checks of a backward before it renders
anything (build.check_backward: the family's hook, the derived specs validated and planned), and reports it located
at the backward section's field, as build does.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cli import one_located_line, run_cli, write  # noqa: E402
from schedgen.build import build_spec  # noqa: E402
from schedgen.cli import EXIT_SPEC  # noqa: E402
from schedgen.errors import SpecErrors  # noqa: E402

MAP = """name: vb
op:
  kind: map
  sizes: {M: 256, N: 512}
  inputs:
    x: {shape: [M, N], dtype: bf16}
    y: {shape: [M, N], dtype: bf16}
  outputs:
    o: {shape: [M, N], dtype: bf16}
  body: |
    h = x * y
    o = gelu(h)
"""

MATMUL = """name: vbm
op:
  kind: matmul
  sizes: {M: 256, N: 256, K: 256}
  inputs:
    a: {shape: [M, K], dtype: bf16}
    b: {shape: [N, K], dtype: bf16}
  outputs:
    y: {shape: [M, N], dtype: bf16}
  lhs: a
  rhs: b
  transpose_rhs: true
  epilogue: y = gelu(acc)
"""

ATTENTION = """name: vba
op:
  kind: attention
  sizes: {B: 1, S: 512, H: 2, D: 64}
  inputs:
    q: {shape: [B, S, H, D], dtype: bf16}
    k: {shape: [B, S, H, D], dtype: bf16}
    v: {shape: [B, S, H, D], dtype: bf16}
  outputs:
    o: {shape: [B, S, H, D], dtype: bf16}
"""

CASES = [
    (MAP, "wrt: [nope]", "backward.wrt[0]", "'nope' is not an input"),
    (MAP, "wrt: [x, x]", "backward.wrt[1]", "listed twice"),
    (MAP, "save: [o]", "backward.save[0]", "an output"),
    (MAP, "save: [x]", "backward.save[0]", "an input"),
    (MAP, "save: [acc]", "backward.save[0]", "'acc' cannot be saved"),
    (MAP, "save: [h, h]", "backward.save[1]", "listed twice"),
    (MATMUL, "wrt: [acc]", "backward.wrt[0]", "'acc' is not an input"),
    (MATMUL, "save: [a]", "backward.save[0]", "an input"),
    (ATTENTION, "save: [q]", "backward.save[0]", "log-sum-exp"),
    (ATTENTION, "save: [lse, lse]", "backward.save[1]", "listed twice"),
]


def _col(section: str, i: int) -> int:
    """The 1-based column of the i-th list item of `backward: {SECTION}`."""
    pos = section.index("[") + 1
    for _ in range(i):
        pos = section.index(",", pos) + 2
    return len("backward: {") + pos + 1


@pytest.mark.parametrize("spec, section, field, words", CASES,
                         ids=[f"{s.split()[1]}-{c}" for s, c, _, _ in CASES])
def test_validate_reports_what_build_refuses(tmp_path, capsys, spec, section, field, words):
    path = write(tmp_path, spec + f"backward: {{{section}}}\n")
    code, lines = run_cli(capsys, "validate", str(path))
    assert code == EXIT_SPEC
    line = one_located_line(lines, path, line=spec.count("\n") + 1, col=_col(section, int(field[-2])))
    assert f": {field}: " in line and words in line, line
    with pytest.raises(SpecErrors) as exc:          # build refuses it with the same located line
        build_spec(path)
    assert exc.value.render().splitlines() == lines


def test_validate_accepts_a_legal_backward(tmp_path, capsys):
    path = write(tmp_path, MAP + "backward: {wrt: [x], save: [h]}\n")
    code, lines = run_cli(capsys, "validate", str(path))
    assert code == 0 and lines == []
