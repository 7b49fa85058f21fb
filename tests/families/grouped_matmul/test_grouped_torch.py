"""A grouped_matmul package in a torch program on the CPU: the custom op's fake implementation takes the int32 group
operand (meta tensors give a meta [T, N] output), a wrong dtype of it is an ArgumentError naming it, and
torch.compile(fullgraph=True) traces a call with no graph break, one graph for every T of the dynamic range."""
from __future__ import annotations

import importlib
import sys

import pytest

from conftest import ROOT
from schedgen.build import build_spec, package
from schedgen.cache import Cache
from schedgen.runtime.arrays import ArgumentError

MIXTRAL = ROOT / "specs" / "grouped_moe_mixtral_bf16_dynamic.yaml"
SMALL = {"op.sizes": {"T": {"dynamic": True, "max": 8192}, "N": 1024, "K": 512}}

torch = None


@pytest.fixture(scope="module", autouse=True)
def _torch():
    global torch
    torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grouped_torch")
    folder = package(build_spec(str(MIXTRAL), SMALL, cache=Cache(tmp / "c")), tmp / "pkg")
    sys.path.insert(0, str(folder.parent))
    sys.modules.pop(folder.name, None)
    try:
        return importlib.import_module(folder.name)
    finally:
        sys.path.remove(str(folder.parent))
        sys.modules.pop(folder.name, None)


def _meta(t, offs_dtype=None):
    return (torch.empty(t, 512, dtype=torch.bfloat16, device="meta"),
            torch.empty(8, 1024, 512, dtype=torch.bfloat16, device="meta"),
            torch.empty(9, dtype=offs_dtype or torch.int32, device="meta"))


def test_meta_tensors_give_a_meta_output(mod):
    fn = mod.moe_up_mixtral
    out = fn(*_meta(777))
    assert out.device.type == "meta" and out.shape == (777, 1024) and out.dtype == torch.bfloat16
    with pytest.raises(ArgumentError, match="offsets"):
        fn(*_meta(777, torch.float32))


def test_compile_traces_one_graph_for_every_t(mod):
    from torch._dynamo.testing import CompileCounter
    fn = mod.moe_up_mixtral
    cnt = CompileCounter()
    f = torch.compile(lambda x, w, o: fn(x, w, o) * 2, fullgraph=True, dynamic=True, backend=cnt)
    for t in (300, 1000, 4097):
        assert f(*_meta(t)).shape == (t, 1024)
    assert cnt.frame_count == 1
