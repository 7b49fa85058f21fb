"""The matmul and collective_matmul templates share their GEMM (shared/gemm.cuh.j2) and Pallas preamble
(shared/pallas.py.j2), and compute no plan numbers themselves: every derived number is a plan field."""
from __future__ import annotations

import jinja2.nodes as jn
import pytest

from schedgen.render import environment

FAMILY_TEMPLATES = ["matmul/cuda.cu.j2", "matmul/pallas.py.j2", "collective_matmul/cuda.cu.j2",
                    "collective_matmul/pallas.py.j2"]
SHARED = ["shared/gemm.cuh.j2", "shared/pallas.py.j2"]


def _source(name: str) -> str:
    env = environment()
    return env.loader.get_source(env, name)[0]


@pytest.mark.parametrize("name", ["matmul/cuda.cu.j2", "collective_matmul/cuda.cu.j2"])
def test_the_gemm_mainloop_is_written_once(name):
    src = _source(name)
    assert '{% import "shared/gemm.cuh.j2" as gemm %}' in src
    for piece in ("gemm.wgmma(", "gemm.staging_helpers(", "gemm.planar_snake(", "gemm.producer_k_loop(",
                  "gemm.consumer_k_loop(", "gemm.staged_epilogue("):
        assert piece in src, piece
    # what the partial spells is nowhere in the family's own template
    for spelled in ("wgmma.mma_async", "sg_mbar_expect_tx", "const int tile_size = width * major",
                    "sg_mbar_wait(S_full", "cvt.rn.bf16x2.f32", "st.shared.v2.f32"):
        assert spelled not in src, spelled


@pytest.mark.parametrize("name", ["matmul/pallas.py.j2", "collective_matmul/pallas.py.j2"])
def test_the_pallas_preamble_is_written_once(name):
    src = _source(name)
    assert '{% import "shared/pallas.py.j2" as pallas %}' in src
    for spelled in ("import jax\n", "plgpu.CompilerParams(", "def _transforms(", "def _tile_coords("):
        assert spelled not in src, spelled


ARITHMETIC = (jn.Add, jn.Sub, jn.Mul, jn.Div, jn.FloorDiv, jn.Mod, jn.Neg)


def _reads_the_plan(node) -> bool:
    return any(isinstance(n, jn.Getattr) and isinstance(n.node, jn.Name) and n.node.name in ("p", "mm")
               for n in [node, *node.find_all(jn.Getattr)])


@pytest.mark.parametrize("name", FAMILY_TEMPLATES + SHARED)
def test_no_arithmetic_on_plan_numbers_in_the_templates(name):
    """Derived numbers are the plan's (named fields), not computed in {{ }} / {% set %} / {% if %}. PTX operand
    numbering over template-local names (NR + 1, d + 4) and loop counters are the template's own."""
    tree = environment().parse(_source(name))
    found = [(node.lineno, type(node).__name__) for node in tree.find_all(ARITHMETIC) if _reads_the_plan(node)]
    assert not found, f"{name}: arithmetic on plan fields at lines {found}"
