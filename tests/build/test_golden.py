"""Goldens of every intermediate product: each bundled spec's plan JSON, its launch record (launch.json), its
`explain` text, and its rendered sources through both templates, compared byte for byte.

Regenerate after an intended change with `pytest tests/test_golden.py --update-golden`, then review the diff of
tests/golden/ (a refactor must leave it empty, or explain every changed line in its commit).
"""
from __future__ import annotations

import ast
import re

import pytest

from conftest import GOLDEN_DIR, spec_files
from schedgen.explain import explain
from schedgen.plan import plan, to_json
from schedgen.plan.launch import launch_record
from schedgen.render import has_template, render
from schedgen.frontend.validate import load_spec

SUFFIX = {"cuda": ".cu", "pallas": ".py"}
PRODUCTS = {".plan.json": lambda p: to_json(p) + "\n", ".explain.txt": lambda p: explain(p) + "\n",
            ".launch.json": lambda p: launch_record(p).to_json() + "\n"}   # what the runtime reads of a package


def _plan(path):
    spec, src = load_spec(str(path))
    return plan(spec, src)


@pytest.mark.parametrize("backend", ["cuda", "pallas"])
@pytest.mark.parametrize("path", spec_files(), ids=lambda p: p.stem)
def test_rendered_source_matches_golden(path, backend, update_golden):
    p = _plan(path)
    golden = GOLDEN_DIR / f"{path.stem}{SUFFIX[backend]}"
    if not has_template(p, backend):   # a family of one backend (or one backend for the plan's target)
        assert not golden.exists(), f"stale {golden.name}: the {p.launch.family} family has no {backend} template"
        return
    text = render(p, backend)
    if update_golden:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
        return
    assert golden.exists(), f"missing {golden}; run pytest --update-golden"
    assert text == golden.read_text(), f"{golden.name} differs from the rendered source (pytest --update-golden)"


@pytest.mark.parametrize("product", sorted(PRODUCTS))
@pytest.mark.parametrize("path", spec_files(), ids=lambda p: p.stem)
def test_plan_and_explain_match_golden(path, product, update_golden):
    text = PRODUCTS[product](_plan(path))
    golden = GOLDEN_DIR / f"{path.stem}{product}"
    if update_golden:
        golden.write_text(text)
        return
    assert golden.exists(), f"missing {golden}; run pytest --update-golden"
    assert text == golden.read_text(), f"{golden.name} differs from the current plan (pytest --update-golden)"


@pytest.mark.parametrize("path", spec_files(), ids=lambda p: p.stem)
def test_rendering_is_deterministic_and_well_formed(path):
    p = _plan(path)
    if not has_template(p, "pallas"):     # a CUDA-only target (matmul on sm_100a until its Pallas rendering lands)
        assert "pallas" not in p.launch.backends
        cu = render(p, "cuda")
        assert cu == render(_plan(path), "cuda") and cu.count("{") == cu.count("}")
        assert f"__launch_bounds__({p.launch.threads}, 1) {p.launch.kernel_name}(" in cu
        return
    py = render(p, "pallas")
    assert py == render(_plan(path), "pallas")
    ast.parse(py)  # valid Python
    # one kernel, or several named <kernel_name>_<part> (attention_backward's dkv and dq)
    assert f'kernel_name="{p.launch.kernel_name}"' in py or f'kernel_name="{p.launch.kernel_name}_' in py
    assert f"def {p.launch.name}(" in py
    if not has_template(p, "cuda"):   # Pallas only: a family (attention_backward) or a target (attention on sm_100a)
        assert "cuda" not in p.launch.backends
        assert not re.search(r"\{\{\s|\{%\s|\s%\}|\s\}\}", py)
        return
    assert render(p, "cuda") == render(_plan(path), "cuda")
    cu = render(p, "cuda")
    # the second bound: the blocks an SM keeps resident (1, or a rowwise kernel's register-limited count)
    assert re.search(rf"__global__ void __launch_bounds__\({p.launch.threads}, {p.launch.blocks_per_sm}\) "
                     rf"{p.launch.kernel_name}\(", cu) or f"__launch_bounds__({p.launch.threads}, 1) {p.launch.kernel_name}(" in cu
    assert cu.count("{") == cu.count("}")
    for text in (cu, py):  # no Jinja syntax left over (PTX's own "{%3, %4}" operand lists are fine)
        assert not re.search(r"\{\{\s|\{%\s|\s%\}|\s\}\}", text)


def test_every_golden_file_belongs_to_a_spec():
    stems = {p.stem for p in spec_files()}
    for g in GOLDEN_DIR.iterdir():
        stem, _, suffix = g.name.partition(".")
        assert stem in stems and "." + suffix in (*SUFFIX.values(), *PRODUCTS), f"stale golden file {g.name}"
