"""Golden rendered sources: each bundled spec through both templates, compared byte for byte.

Regenerate after an intended template change with `pytest tests/test_golden.py --update-golden`, then review
the diff of tests/golden/.
"""
from __future__ import annotations

import ast
import re

import pytest

from conftest import GOLDEN_DIR, spec_files
from schedgen.plan import plan
from schedgen.render import render
from schedgen.spec.validate import load_spec

SUFFIX = {"cuda": ".cu", "pallas": ".py"}


def _plan(path):
    spec, src = load_spec(str(path))
    return plan(spec, src)


@pytest.mark.parametrize("backend", ["cuda", "pallas"])
@pytest.mark.parametrize("path", spec_files(), ids=lambda p: p.stem)
def test_rendered_source_matches_golden(path, backend, update_golden):
    text = render(_plan(path), backend)
    golden = GOLDEN_DIR / f"{path.stem}{SUFFIX[backend]}"
    if update_golden:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
        return
    assert golden.exists(), f"missing {golden}; run pytest --update-golden"
    assert text == golden.read_text(), f"{golden.name} differs from the rendered source (pytest --update-golden)"


@pytest.mark.parametrize("path", spec_files(), ids=lambda p: p.stem)
def test_rendering_is_deterministic_and_well_formed(path):
    p = _plan(path)
    assert render(p, "cuda") == render(_plan(path), "cuda")
    py = render(p, "pallas")
    ast.parse(py)  # valid Python
    cu = render(p, "cuda")
    assert f"__global__ void __launch_bounds__({p.threads}, 1) {p.kernel_name}(" in cu
    assert cu.count("{") == cu.count("}")
    for text in (cu, py):  # no Jinja syntax left over (PTX's own "{%3, %4}" operand lists are fine)
        assert not re.search(r"\{\{\s|\{%\s|\s%\}|\s\}\}", text)
    assert f'kernel_name="{p.kernel_name}"' in py
    assert f"def {p.name}(" in py


def test_every_golden_file_belongs_to_a_spec():
    stems = {p.stem for p in spec_files()}
    for g in GOLDEN_DIR.iterdir():
        assert g.stem in stems and g.suffix in SUFFIX.values(), f"stale golden file {g.name}"
