"""Defect 14 (found by the long fuzz campaign, `SCHEDGEN_FUZZ=long`, 2026-12-06): a map op whose second output has a
higher rank than its first (outputs [1] and [1, 1, 1]; here [128] and [1, 1, 128]) crashed `schedgen build` with an IndexError in the map
family's defaults (the block of an operand was cut from the first output's block by rank). The defaults now leave
such an op to the planner, which reports it with located errors (the outputs' shapes too, when no out_specs is given); the build exits non-zero, no traceback."""
from __future__ import annotations

from _cli import run_cli

SPEC = """\
name: ranks
op:
  kind: map
  body: "y = x + 1.0\\nz = x"
  inputs:
    x: {shape: [128], dtype: bf16}
  outputs:
    y: {shape: [128], dtype: bf16}
    z: {shape: [1, 1, 128], dtype: bf16}
"""


def test_a_second_output_of_higher_rank_is_a_located_error(tmp_path, capsys):
    path = tmp_path / "ranks.yaml"
    path.write_text(SPEC)
    code, lines = run_cli(capsys, "build", str(path), "-o", str(tmp_path / "out"))
    assert code == 2, lines
    assert not any("Traceback" in line or "IndexError" in line for line in lines), lines
    assert lines and all(line.startswith(f"{path}:") for line in lines if line.strip()), lines
    # the real problem is said, not only the BlockSpec the defaults could not pick for such an op
    assert any("op.outputs.z.shape: all outputs must have one shape (128,), got (1, 1, 128)" in line
               for line in lines), lines
