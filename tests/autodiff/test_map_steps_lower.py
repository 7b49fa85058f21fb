"""Every map kernel the autodiff derives lowers through Mosaic GPU for CUDA on the CPU, with layout inference held
to a few tries: the hand-written plain and saving graphs (the saving forward `h = x * w + b; y = h * h` is what
failed "Layout inference failed to find a solution" on the H200, 2026-12-06, under jax.jit(jax.grad)), and, for
every bundled and edge map spec, the step the map family derives and the forward that saves each temporary.

`jax.grad` runs these kernels; the interpreter checks no layouts, so without this a kernel that Mosaic GPU cannot lay
out passes every CPU test (tests/families/map/test_map_lowers.py holds the broadcast shapes one by one)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from backward_util import ROOT, spec_with
from conftest import lower_map_for_cuda, spec_files
from handgraph import M, N, plain, saving
from schedgen import families

pytest.importorskip("jax")

FUEL = 1000        # layout-inference tries (jax's default is 100000)


def _hand_kernels():
    """The hand graphs' kernels (handgraph.py) of the f32 forward `y = x * w + b`, b [N]."""
    out = []
    for name, graph_of in (("fma_plain", plain), ("fma_saving", saving)):
        spec = SimpleNamespace(name=name, op=SimpleNamespace(sizes={"M": M, "N": N}),
                               backward=SimpleNamespace(wrt=None))
        graph, _ = graph_of(spec, None)
        out += ([graph.forward] if graph.forward else []) + [s.spec for s in graph.steps]
    return out


HAND = _hand_kernels()


@pytest.mark.parametrize("data", HAND, ids=[d["name"] for d in HAND])
def test_hand_graph_kernels_lower(data, tmp_path):
    assert "mosaic_gpu" in lower_map_for_cuda(data, tmp_path, fuel=FUEL)


def _sources():
    """(label, spec data) of the map specs to differentiate, each on Pallas at its own sizes."""
    import tomllib

    import yaml
    out = []
    for path in spec_files("map") + sorted((ROOT / "tests" / "data" / "edge").glob("*.yaml")):
        text = path.read_text()
        data = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
        data.pop("backward", None)
        data.setdefault("schedule", {})["backends"] = ["cuda", "pallas"]
        out.append((path.stem, data))
    return out


@pytest.mark.parametrize("label, data", _sources(), ids=[s[0] for s in _sources()])
def test_derived_map_kernels_lower(label, data, tmp_path):
    """The derived step with nothing saved, and the forward that saves every temporary with its step."""
    spec, src = spec_with(tmp_path, data, {})
    temporaries = [line.split("=")[0].strip() for line in spec.op.body.strip().splitlines()
                   if line.split("=")[0].strip() not in spec.op.outputs]
    kernels = []
    for backward in ({}, {"save": temporaries}) if temporaries else ({},):
        spec, src = spec_with(tmp_path, data, backward)
        graph, problems = families.of(spec).backward(spec, src)
        assert not problems, problems
        kernels += ([graph.forward] if graph.forward else []) + [s.spec for s in graph.steps]
    if not kernels:     # every gradient is an upstream gradient unchanged (`o = x + y`, issue 43): no kernel at all
        assert graph.passthrough and set(graph.passthrough) == set(graph.grads), label
        return
    for k in kernels:
        assert "mosaic_gpu" in lower_map_for_cuda(k, tmp_path, fuel=FUEL), k["name"]
