"""Packages built with the hand-written backward graphs of handgraph.py (the map family's hook patched while
building: the runtime reads backward.json only), shared by the autodiff tests of this folder."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))   # handgraph
import handgraph as hg  # noqa: E402

from schedgen.build import build_spec, package  # noqa: E402
from schedgen.cache import Cache  # noqa: E402

BODIES = {"plain": "y = x * w + b", "saving": "h = x * w + b\ny = h * h"}


def build_hand(tmp: Path, which: str, name: str, backward: str = "backward: {}", hook=None):
    """Build (and package into tmp/out) the spec `name` with the `which` graph as the map family's backward."""
    spec = tmp / f"{name}.yaml"
    spec.write_text(hg.spec_text(name, BODIES[which], backward))
    with pytest.MonkeyPatch.context() as mp:
        hg.installed(mp, hook or getattr(hg, which))
        built = build_spec(spec, cache=Cache(tmp / "cache"))
    return built, package(built, tmp / "out")


def import_package(folder: Path, name: str):
    sys.path.insert(0, str(folder))
    sys.modules.pop(name, None)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(name, None)


@pytest.fixture(scope="session")
def hand_packages(tmp_path_factory):
    """{which: (Built, package folder)} for the plain and the saving graph, and a wrt: [x] build of the plain one."""
    tmp = tmp_path_factory.mktemp("handgraph")
    return {"plain": build_hand(tmp, "plain", "fma_plain"),
            "saving": build_hand(tmp, "saving", "fma_saving"),
            "wrt_x": build_hand(tmp, "plain", "fma_wrt_x", "backward: {wrt: [x]}"),
            "tmp": tmp}


def host_inputs(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((hg.M, hg.N)).astype(np.float32),
            "w": rng.standard_normal((hg.M, hg.N)).astype(np.float32),
            "b": rng.standard_normal(hg.N).astype(np.float32)}


def upstream(seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((hg.M, hg.N)).astype(np.float32)


def closed_form(which: str, ins: dict, gy: np.ndarray) -> dict:
    """The gradients of sum(y * gy), worked by hand in float64 (independent of the graph)."""
    x, w, b = (np.asarray(ins[k], np.float64) for k in "xwb")
    gh = np.asarray(gy, np.float64) * (1.0 if which == "plain" else 2.0 * (x * w + b))
    return {"x": gh * w, "w": gh * x, "b": gh.sum(axis=0)}
