"""Edge shapes (tests/data/edge): vectors, column broadcasts, sizes that are not multiples of the block,
size-1 dimensions. Each compiles to the instructions it needs, runs interpreted against numpy, and on a GPU
verifies in the CUDA backend."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import ROOT
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.toolchain.nvrtc import sass
from schedgen.verify import verify_built

EDGE = sorted((ROOT / "tests" / "data" / "edge").glob("*.yaml"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return Cache(tmp_path_factory.mktemp("cache"))


@pytest.mark.parametrize("path", EDGE, ids=lambda p: p.stem)
def test_edge_spec_compiles_to_tma_code(path, cache):
    built = build_spec(str(path), cache=cache)
    text = sass(built.files["kernel.cubin"])
    assert re.search(r"\bUTMALDG\.2D\b|\bUTMALDG\.3D\b", text) and re.search(r"\bUTMASTG\.\dD\b", text)
    assert not re.search(r"\b(LDL|STL)\b", text)


@pytest.mark.parametrize("path", EDGE, ids=lambda p: p.stem)
def test_edge_spec_runs_interpreted(path, cache):
    checks = verify_built(build_spec(str(path), cache=cache), ["pallas"], interpret=True, seed=11)
    assert checks and all(c.ok and c.note == "interpreted, no races" for c in checks), checks


def test_column_broadcast_plan(cache):
    p = build_spec(str(ROOT / "tests/data/edge/col_scale.yaml"), cache=cache).plan
    s = {o.name: o for o in p.inputs}["s"]
    assert s.minor_bcast and s.tma_dims == (-1, 0) and s.tma_shape == (1, 256) and s.tma.box == (1, 32)
    assert p.launch.backends == ("cuda", "pallas") and p.registers is not None    # the Pallas kernel reads it from GMEM


def test_out_of_bounds_grid_rounds_up(cache):
    p = build_spec(str(ROOT / "tests/data/edge/oob_add_f32.yaml"), cache=cache).plan
    assert p.grid == (4, 4) and p.outputs[0].oob_fill == "zero"


@pytest.mark.gpu
@pytest.mark.parametrize("path", EDGE, ids=lambda p: Path(p).stem)
def test_edge_spec_verifies_on_gpu(path, cache):
    built = build_spec(str(path), cache=cache)
    for check in verify_built(built, ["cuda"]):
        assert check.ok, check
