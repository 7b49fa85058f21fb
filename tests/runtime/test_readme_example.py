"""The README's first example on the CPU: the dynamic-size linear_gelu package under torch.compile(fullgraph=True,
dynamic=True) with the default backend (inductor), traced on meta tensors at four token counts: no graph break, the
outputs of the record's shapes, one graph for every M but 1 (torch specializes 1), and the out-of-range error the
README quotes. (examples/linear_gelu_torch.py runs the same on the GPU against torch's own linear + gelu.)"""
from __future__ import annotations

import importlib
import sys

import pytest

from conftest import SPECS_DIR
from schedgen.build import build_spec, package
from schedgen.cache import Cache

torch = pytest.importorskip("torch")


def test_readme_first_example_compiles_once_for_every_token_count(tmp_path):
    built = build_spec(SPECS_DIR / "linear_gelu_bf16_dynamic.yaml", cache=Cache(tmp_path / "c"))
    dest = package(built, tmp_path / "build")
    sys.path.insert(0, str(dest.parent))
    try:
        k = importlib.import_module("linear_gelu")
    finally:
        sys.path.remove(str(dest.parent))
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    w = torch.empty(4096, 4096, dtype=torch.bfloat16, device="meta")
    b = torch.empty(4096, dtype=torch.float32, device="meta")

    @torch.compile(fullgraph=True, dynamic=True)
    def mlp(x):
        return k.linear_gelu(x, w, b) * 0.5

    for tokens in (1, 77, 4096, 65536):
        y = mlp(torch.empty(tokens, 4096, dtype=torch.bfloat16, device="meta"))
        assert (tuple(y.shape), y.dtype) == ((tokens, 4096), torch.bfloat16)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2
    with pytest.raises(Exception) as info:
        mlp(torch.empty(70000, 4096, dtype=torch.bfloat16, device="meta"))
    chain, e = [], info.value
    while e is not None:
        chain.append(str(e))
        e = e.__cause__ or e.__context__
    assert any("x: dimension 0 (M) is 70000; M must be in 1..65536 (expected shape (M, 4096))" in m for m in chain)
