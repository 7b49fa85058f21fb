"""Issue 16 section 5: a file with mistakes in several stages reports them in one run where the later stage can
still run. A schema error (no validated spec) used to hide the tune section's constraint errors until it was
fixed; the constraints parse on the raw file, so `validate` reports both at once."""
from __future__ import annotations

from schedgen import cli

TEXT = """name: multi
op:
  kind: matmul
  sizes: {M: 4096, N: 4096, K: 4096}
  inputs:
    a: {shape: [M, K], dtype: bf17}
    b: {shape: [K, N], dtype: bf16}
  outputs:
    out: {shape: [M, N], dtype: bf16}
  epilogue: out = acc
tune:
  params:
    tile_n: [128, 256]
    schedule.pipeline.max_concurrent_steps: [3, 4]
  constraints:
    - tile_n * tile_q <= 32768
    - tile_n <=
    - max_concurrent_steps * tile_n <= 1024
"""


def test_schema_and_tune_constraint_errors_in_one_run(tmp_path, capsys):
    path = tmp_path / "multi.yaml"
    path.write_text(TEXT)
    assert cli.main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert [line.split(": ")[1] for line in err] == ["op.inputs.a.dtype", "tune.constraints[0]",
                                                     "tune.constraints[1]"]
    assert err[0].startswith(f"{path}:6:31:") and "'bf17'" in err[0]
    assert err[1].startswith(f"{path}:16:") and "unknown name 'tile_q'" in err[1]   # the short name of a path knob
    assert "syntax error" in err[2]                                                # counts as known: no 3rd error


def test_a_valid_file_still_gets_every_later_stage(tmp_path, capsys):
    path = tmp_path / "ok.yaml"
    path.write_text(TEXT.replace("bf17", "bf16"))
    assert cli.main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "tile_q" in err and "syntax error" in err and "dtype" not in err
