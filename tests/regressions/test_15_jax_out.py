"""Issue 15: the CUDA backend took a jax array as out= and wrote the results through its device pointer, behind
XLA's back (jax arrays are immutable: every other holder of that buffer saw it change). Now a jax array as out= is
an ArgumentError on every backend, raised before anything is launched."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from conftest import SPECS_DIR
from schedgen.build import build_spec, package
from schedgen.cache import Cache
from schedgen.runtime import driver
from schedgen.runtime.arrays import ArgumentError
from schedgen.runtime.kernel import Kernel, load_package

jnp = pytest.importorskip("jax.numpy")
BF16 = ml_dtypes.bfloat16


@pytest.mark.parametrize("backend", ["cuda", None])
def test_jax_out_is_refused_before_any_launch(tmp_path, monkeypatch, backend):
    built = build_spec(SPECS_DIR / "add_bf16.yaml", {"M": 64, "N": 512}, cache=Cache(tmp_path / "c"))
    k = load_package(package(built, tmp_path / "out"))
    launched = []
    monkeypatch.setattr(driver, "available", lambda target="sm_90a": (True, ""))          # as if on the GPU machine
    monkeypatch.setattr(Kernel, "_launcher", lambda self, *a, **kw: launched.append(a) or (lambda: None))
    x = np.ones((64, 512), BF16)
    out = jnp.zeros((64, 512), BF16)
    with pytest.raises(ArgumentError, match=r"^out\[o\]: is a jax array; jax arrays are immutable: use the return "
                                            r"value"):
        k(x, x, out=out, backend=backend)
    assert launched == []
    assert np.all(np.asarray(out) == 0)
