"""GPU tests: every bundled spec on the H200 against numpy, and the runtime's array kinds.

Marked `gpu`; skipped where no NVIDIA GPU is available (conftest.py). python -m bench.gpu --part tests runs them.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, import_package

from schedgen.build import build_spec, package
from schedgen.cache import Cache
from schedgen.reference import random_inputs, reference, rel_error, tolerance
from schedgen.verify import verify_built

pytestmark = pytest.mark.gpu
# the H200 runs the sm_90a specs (an sm_100a package refuses a Hopper GPU: tests/runtime/test_preflight.py)
SPECS = sorted(str(p) for p in ROOT.glob("specs/*") if p.suffix in (".yaml", ".toml")
               and "\n  target: sm_100a" not in p.read_text())


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return Cache(tmp_path_factory.mktemp("cache"))


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: Path(s).stem)
@pytest.mark.parametrize("backend", ["cuda", "pallas"])
def test_spec_verifies_on_gpu(spec, backend, cache):
    built = build_spec(spec, cache=cache)
    if backend not in built.plan.launch.backends:
        pytest.skip(f"{Path(spec).stem} is built for {', '.join(built.plan.launch.backends)} only")
    checks = verify_built(built, [backend])
    assert checks, f"{backend} not built for {spec}"
    if all(c.skipped for c in checks):              # a multi-device spec on a machine without its GPUs
        pytest.skip(checks[0].note)
    for c in checks:
        assert c.ok, c


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: Path(s).stem)
def test_spec_verifies_twice_with_new_inputs(spec, cache):
    """A moving error between runs is a race: two fresh random draws must both pass."""
    built = build_spec(spec, cache=cache)
    first = verify_built(built, ["cuda"])[0]
    if first.skipped:
        pytest.skip(first.note)
    errs = [first.rel_error, verify_built(built, ["cuda"])[0].rel_error]
    assert all(e <= tolerance(built.plan.outputs[0].dtype, built.plan.approx_math) for e in errs), errs


@pytest.fixture(scope="module")
def add_module(tmp_path_factory, cache):
    out = tmp_path_factory.mktemp("pkgs")
    built = build_spec(str(ROOT / "specs/add_bf16.yaml"), {"M": 256, "N": 1024},
                       cache=cache)
    dest = package(built, out)
    (dest / "plan.json").unlink()      # the call reads only launch.json (the launch record): prove it on the GPU
    yield import_package(out, "add_bf16"), built




def _expected(built, x, y):
    return reference(built.spec, built.plan.sizes, {"x": x, "y": y})["o"]


def test_numpy_in_numpy_out(add_module):
    mod, built = add_module
    inputs = random_inputs(built.spec, built.plan.sizes)
    out = mod.add_bf16(inputs["x"], inputs["y"])
    assert isinstance(out, np.ndarray) and out.dtype == inputs["x"].dtype
    assert rel_error(out, _expected(built, inputs["x"], inputs["y"])) < 1e-2


TORCH_ROUND_TRIP = """
import sys
sys.path.insert(0, sys.argv[1])
import torch
import add_bf16
x = torch.randn(256, 1024, device="cuda", dtype=torch.bfloat16)
y = torch.randn(256, 1024, device="cuda", dtype=torch.bfloat16)
out = add_bf16.add_bf16(x, y)
assert isinstance(out, torch.Tensor) and out.device.type == "cuda", type(out)
torch.cuda.synchronize()
assert torch.allclose(out.float(), (x.float() + y.float()).bfloat16().float(), atol=1e-2)
try:
    add_bf16.add_bf16(x.float(), y)
except TypeError as exc:
    assert "x: expected bf16" in str(exc), exc
else:
    raise AssertionError("a float32 x was accepted")
print("torch round trip ok")
"""


def test_torch_in_torch_out(add_module):
    """torch tensors in, a torch tensor out, on torch's stream. In a fresh interpreter: on the GPU machine,
    importing torch inside this pytest process fails in torch's own custom-op registration."""
    import os
    import subprocess
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    mod, built = add_module
    pkgs = str(Path(mod.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT),
                                                       os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-c", TORCH_ROUND_TRIP, pkgs], capture_output=True, text=True, env=env)
    assert res.returncode == 0 and "torch round trip ok" in res.stdout, res.stderr[-2000:]


def test_cupy_in_cupy_out(cache, tmp_path):
    cupy = pytest.importorskip("cupy")
    built = build_spec(str(ROOT / "specs/scale_f32.toml"), {"B": 2, "M": 64, "N": 256},
                       cache=cache)
    package(built, tmp_path)
    mod = import_package(tmp_path, "scale_f32")
    x = cupy.random.standard_normal((2, 64, 256), dtype=cupy.float32)
    out = mod.scale_f32(x)
    assert isinstance(out, cupy.ndarray)
    assert float(cupy.abs(out - x * 2.5).max()) < 1e-6
    given = cupy.full_like(x, cupy.nan)
    assert mod.scale_f32(x, out=given) is given and not bool(cupy.isnan(given).any())


@pytest.mark.slow
def test_largest_map_shape_verifies(cache, tmp_path):
    """A problem past 32-bit element counts: 4 x 32768 x 65536 f32 (8.6 G elements, 2 x 34 GiB on the card), input
    drawn on the device, output poisoned with NaN, every element checked finite and 4096 sampled rows exact."""
    cupy = pytest.importorskip("cupy")
    free, _ = cupy.cuda.runtime.memGetInfo()
    B, M, N = 4, 32768, 65536
    if free < 2 * B * M * N * 4 + (4 << 30):
        pytest.skip(f"needs {2 * B * M * N * 4 / 2**30:.0f} GiB of free GPU memory, {free / 2**30:.0f} GiB free")
    built = build_spec(str(ROOT / "specs/scale_f32.toml"), {"B": B, "M": M, "N": N},
                       cache=cache)
    package(built, tmp_path)
    mod = import_package(tmp_path, "scale_f32")
    x = cupy.random.standard_normal((B, M, N), dtype=cupy.float32)
    out = cupy.full_like(x, cupy.nan)
    assert mod.scale_f32(x, out=out) is out
    assert bool(cupy.isfinite(out).all())
    rows = np.random.default_rng().choice(B * M, size=4096, replace=False)
    xs, os_ = x.reshape(B * M, N)[rows].get(), out.reshape(B * M, N)[rows].get()
    np.testing.assert_array_equal(os_, xs * np.float32(2.5))    # one f32 multiply: exact
    # the last row of the last matrix too (the far end of the 64-bit offsets)
    np.testing.assert_array_equal(out[-1, -1].get(), x[-1, -1].get() * np.float32(2.5))


def test_dynamic_grid_counter_is_reset_for_every_launch(cache, tmp_path):
    """A dynamic persistent grid claims tiles from a counter that the last CTA of each launch zeroes: five launches
    of one module (f16, cupy arrays), on the null stream and a second one (each stream has its own counter), each into
    an output poisoned with NaN, all right."""
    cupy = pytest.importorskip("cupy")
    from schedgen.families.attention.reference import attention_reference
    spec = ROOT / "specs/attention_causal_bf16_4096_dynamic.yaml"
    f16 = {f"op.{g}.{n}.dtype": "f16" for g, n in (("inputs", "q"), ("inputs", "k"), ("inputs", "v"), ("outputs", "o"))}
    built = build_spec(str(spec), {"S": 1024, "H": 40, **f16}, cache=cache)
    assert built.plan.dynamic and built.plan.num_tiles == 8 * 40
    package(built, tmp_path)
    mod = import_package(tmp_path, built.plan.launch.name)
    fn = getattr(mod, built.plan.launch.name)
    q, k, v = (cupy.random.standard_normal((1, 1024, 40, 128), dtype=cupy.float32).astype(cupy.float16)
               for _ in range(3))
    ref = attention_reference(built.spec, built.plan.sizes, {"q": q.get(), "k": k.get(), "v": v.get()},
                              sample=False)["o"]
    other = cupy.cuda.Stream(non_blocking=True)
    for stream in (None, None, other, None, other):
        out = cupy.full_like(q, cupy.nan)
        with stream or cupy.cuda.Stream.null:
            assert fn(q, k, v, out=out) is out
        cupy.cuda.runtime.deviceSynchronize()
        assert rel_error(out.get(), ref) <= tolerance("f16", True)


def test_jax_in_jax_out(add_module):
    jax = pytest.importorskip("jax")
    mod, built = add_module
    inputs = random_inputs(built.spec, built.plan.sizes)
    x, y = jax.device_put(inputs["x"]), jax.device_put(inputs["y"])
    want = _expected(built, inputs["x"], inputs["y"])
    out = mod.add_bf16(x, y, backend="cuda")
    assert isinstance(out, jax.Array)
    assert rel_error(np.asarray(out), want) < 1e-2
    out_p = mod.add_bf16(x, y)                      # jax arrays: the Pallas backend by default
    assert isinstance(out_p, jax.Array)
    assert rel_error(np.asarray(out_p), want) < 1e-2
    jitted = jax.jit(lambda a, b: mod.add_bf16(a, b) * 2)   # tracers in, tracers out, on the GPU
    for _ in range(2):
        assert rel_error(np.asarray(jitted(x, y)).astype(np.float64) / 2, want) < 1e-2
    assert jitted._cache_size() == 1


def test_deadlocked_kernel_is_stopped_by_the_watchdog():
    """A barrier that expects 2 arrivals but gets 1 never completes: verify must stop it and say so."""
    import os
    import subprocess
    root = ROOT
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-m", "schedgen", "verify", "--backend", "cuda", "--timeout", "30",
                          str(root / "tests/data/deadlock_bf16.yaml")], capture_output=True, text=True, env=env,
                         timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    (row,) = [line for line in res.stdout.splitlines() if line.startswith("deadlock_bf16")]
    assert "timeout: did not finish within 30 s" in row


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: Path(s).stem)
def test_bundled_spec_is_sanitizer_clean(spec):
    """memcheck, racecheck and synccheck report nothing on the CUDA kernels (small sizes)."""
    from schedgen.sanitize import find_sanitizer, sanitize
    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer is not installed")
    for run in sanitize(spec, Path(spec).stem, ["memcheck", "racecheck", "synccheck"]):
        assert run.ok and run.errors == 0, run
