"""The matmul and collective_matmul templates share their GEMM (common/gemm.cuh.j2) and Pallas preamble
(common/pallas.py.j2), and compute no plan numbers themselves: every derived number is a plan field. A device
helper or a Pallas entry point more than one kernel needs is written once (common/helpers.cuh.j2,
common/pallas.py.j2)."""
from __future__ import annotations

import re
from collections import defaultdict

import jinja2.nodes as jn
import pytest

from schedgen.registry import template_root
from schedgen.render import environment

FAMILY_TEMPLATES = ["matmul/cuda.cu.j2", "matmul/pallas.py.j2", "collective_matmul/cuda.cu.j2",
                    "collective_matmul/pallas.py.j2"]
SHARED = ["common/gemm.cuh.j2", "common/pallas.py.j2"]


def _source(name: str) -> str:
    env = environment()
    return env.loader.get_source(env, name)[0]


@pytest.mark.parametrize("name", ["matmul/cuda.cu.j2", "collective_matmul/cuda.cu.j2"])
def test_the_gemm_mainloop_is_written_once(name):
    src = _source(name)
    assert '{% import "common/gemm.cuh.j2" as gemm %}' in src
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
    assert '{% import "common/pallas.py.j2" as pallas %}' in src
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


# each kernel's own tile walk (its signature and grid differ; the planar-snake body is gemm.planar_snake)
OWN_PER_KERNEL = {"sg_tile_coords"}
_DEVICE_FN = re.compile(r"^(?:static )?__device__ (?:__forceinline__ )?[\w ]+?\*? (sg_\w+)\(", re.M)


def test_each_device_helper_is_written_in_one_template():
    """sg_pack2 was written in 4 templates, sg_ex2 in 3 (issue 42 step 5): a helper more than one kernel defines
    is a macro of common/helpers.cuh.j2 (or a function of a shared include)."""
    where = defaultdict(set)
    for path in sorted(template_root().rglob("*.j2")):
        for name in _DEVICE_FN.findall(path.read_text()):
            where[name].add(path.relative_to(template_root()).as_posix())
    assert where["sg_pack2"] == {"common/helpers.cuh.j2"}
    twice = {n: sorted(f) for n, f in where.items() if len(f) > 1 and n not in OWN_PER_KERNEL}
    assert not twice, f"device helpers defined in more than one template: {twice}"


def test_run_into_is_written_once():
    """Every Pallas module's run_into is common/pallas.py.j2's macro (it was written out in 8 templates); the one
    left is the not-planned stub of the sm_100a matmul module (make raises there)."""
    defs = {path.relative_to(template_root()).as_posix(): path.read_text().count("def run_into(")
            for path in sorted(template_root().rglob("*.py.j2"))}
    assert {k: v for k, v in defs.items() if v} == {"common/pallas.py.j2": 1, "matmul/pallas_sm_100a.py.j2": 1}
