"""rel_error over slabs on threads (schedgen/reference.py): the same norm as the one-shot float64 formula, NaN in any
slab is inf (a poisoned element left unwritten), sampled references, and a size mismatch is an error."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from schedgen import reference as R


@pytest.fixture
def small_slabs(monkeypatch):
    monkeypatch.setattr(R, "SLAB", 1000)     # 7 slabs of the arrays below, on the thread pool


def _pair(n=6543, seed=3):
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal((n // 3, 3))
    return ref.astype(ml_dtypes.bfloat16), ref


def test_slabs_give_the_one_shot_norm(small_slabs):
    out, ref = _pair()
    o = out.astype(np.float64)
    want = np.linalg.norm((o - ref).ravel()) / np.linalg.norm(ref.ravel())
    assert R.rel_error(out, ref) == pytest.approx(want, rel=1e-12)
    assert R.rel_error(ref, ref) == 0.0


@pytest.mark.parametrize("where", [0, 999, 1000, 6542])
def test_nan_in_any_slab_is_inf(small_slabs, where):
    out, ref = _pair()
    out.reshape(-1)[where] = np.nan
    assert R.rel_error(out, ref) == math.inf


def test_sampled_and_mismatched(small_slabs):
    out, ref = _pair()
    rows = np.array([0, 5, 2180], np.int64)
    s = R.Sampled(rows, ref[rows], ref.shape)
    assert R.rel_error(out, s) == pytest.approx(R.rel_error(out[rows], ref[rows]))
    with pytest.raises(ValueError, match="is not the reference's"):
        R.rel_error(out[:-1], ref)
