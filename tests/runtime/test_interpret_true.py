"""interpret=True runs a package's Pallas kernel in jax's Mosaic GPU interpreter (on the CPU); a call compiled for
the GPU on a CPU-only jax is one sentence saying to pass interpret=True (jax's own error is 11 frames deep)."""
from __future__ import annotations

import numpy as np
import pytest

from schedgen.build import build_spec, package
from schedgen.runtime.arrays import ArgumentError
from schedgen.runtime.kernel import load_package

jax = pytest.importorskip("jax")
ml_dtypes = pytest.importorskip("ml_dtypes")

SPEC = """name: interp_add
op:
  kind: map
  sizes: {M: 64, N: 512}
  inputs:
    x: {shape: [M, N], dtype: bf16}
    y: {shape: [M, N], dtype: bf16}
  outputs:
    o: {shape: [M, N], dtype: bf16}
  body: o = x + y
schedule:
  out_specs:
    o: {block_shape: [32, 256]}
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    root = tmp_path_factory.mktemp("interp")
    path = root / "interp_add.yaml"
    path.write_text(SPEC)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SCHEDGEN_CACHE", str(root / "cache"))
        return load_package(package(build_spec(path), root / "pkg"))


def _inputs():
    rng = np.random.default_rng(0)
    return [rng.standard_normal((64, 512)).astype(ml_dtypes.bfloat16) for _ in range(2)]


def test_interpret_true_runs_the_interpreter(kernel):
    x, y = _inputs()
    out = kernel(x, y, interpret=True)
    want = (x.astype(np.float32) + y.astype(np.float32)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(np.asarray(out).astype(np.float32), want.astype(np.float32))


@pytest.mark.parametrize("bad", ["yes", 1, object()])
def test_other_interpret_values_say_what_is_legal(kernel, bad):
    with pytest.raises(ArgumentError, match=r"^interpret: give True .* a plgpu.InterpretGPUParams .* None / False"):
        kernel(*_inputs(), interpret=bad)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="jax has a GPU here: the kernel compiles for it")
def test_cpu_only_jax_says_to_pass_interpret_true(kernel):
    """Also pins jax 0.11.2's wording (runtime/pallas_call.JAX_CPU_ONLY): a jax that words it otherwise lets its
    ValueError through, and this test fails."""
    for interpret in (None, False):
        with pytest.raises(ArgumentError) as info:
            kernel(*_inputs(), backend="pallas", interpret=interpret)
        message = str(info.value)
        assert message.startswith("interp_add: the Pallas backend compiles for an NVIDIA GPU")
        assert "pass interpret=True" in message and "\n" not in message
