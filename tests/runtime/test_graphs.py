"""CUDA graphs on the H200: every bundled kernel captured with torch.cuda.graph (after a warm-up on a side stream,
as torch asks) and replayed twice on new inputs, checked against the numpy reference; a numpy call inside the
capture is refused with a CaptureError and leaves the capture usable. Marked `gpu`; run in one fresh interpreter
(graph_replay.py), since torch cannot be imported into the pytest process on the GPU machine."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.gpu
# the H200 runs the sm_90a specs (an sm_100a package refuses a Hopper GPU: tests/runtime/test_preflight.py)
SPECS = sorted(str(p) for p in ROOT.glob("specs/*") if p.suffix in (".yaml", ".toml")
               and "\n  target: sm_100a" not in p.read_text())


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    tmp = tmp_path_factory.mktemp("graphs")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    script = Path(__file__).with_name("graph_replay.py")
    res = subprocess.run([sys.executable, str(script), "-", str(tmp / "pkgs"), *SPECS],
                         capture_output=True, text=True, env=env, timeout=1800)
    rows = {}
    for line in res.stdout.splitlines():
        if line.startswith("RESULT "):
            row = json.loads(line[len("RESULT "):])
            rows[row["spec"]] = row
    return rows, res.stderr[-3000:]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: Path(s).stem)
def test_kernel_captured_and_replayed_in_a_cuda_graph(replayed, spec):
    rows, stderr = replayed
    assert spec in rows, f"no result for {spec}: {stderr}"
    row = rows[spec]
    if "skip" in row:
        pytest.skip(row["skip"])
    assert row["ok"], row


def test_direct_tensor_map_encoder_gives_cuda_bindings_bytes():
    """The ctypes call of cuTensorMapEncodeTiled (driver._encode_direct) and cuda.bindings' give the same 128 bytes
    over every bundled spec's tensor maps' layouts; the call path uses it (driver._direct_checked after a map)."""
    from schedgen.frontend.validate import load_spec
    from schedgen.plan import launch as L
    from schedgen.plan import plan
    from schedgen.runtime import driver
    from schedgen.plan import dims
    direct = driver._direct_encoder()
    assert direct is not None, "libcuda.so.1 could not be loaded through ctypes"
    driver.ensure_context(0)
    buf = driver.Buffer(1 << 16)
    seen = 0
    for path in SPECS:
        spec, src = load_spec(path)
        rec = L.launch_record(plan(spec, src))
        for a in rec.kernel_args:
            if a.kind != "tmap":
                continue
            at = {r.name: r.max for r in rec.sizes}      # a dynamic-size kernel's maps at its largest sizes
            shape = [int(dims.evaluate(d, at)) for d in a.shape]
            strides = [int(dims.evaluate(d, at)) for d in a.strides]
            lay = driver.validate_tiled(buf.ptr, a.dtype, shape, strides, a.box, swizzle=a.swizzle)
            enums = driver.tiled_enums(a.dtype, a.swizzle, a.oob_nan, 256)
            assert driver._encode_direct(direct, buf.ptr, lay, enums) == driver._encode_bindings(buf.ptr, lay, enums)
            seen += 1
    assert seen
    driver.encode_tiled(buf.ptr, "bf16", [256, 512], [1024, 2], [64, 64], swizzle=128)
    assert driver._direct_checked and driver._direct == [direct]
