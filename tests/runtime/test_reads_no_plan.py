"""Static: the runtime's source reads no plan.json and no plan field; launch.json is its only contract (issue 13).

Reads the source of the schedgen.runtime package that is imported (so it checks whichever tree is on the path) with
docstrings and comments stripped, and the package modules both templates render (their `plan` attribute for people
is launch.PackagePlan, read on first use, which the call never reaches)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import schedgen.runtime

RUNTIME = Path(schedgen.runtime.__file__).resolve().parent
SOURCES = sorted(RUNTIME.glob("*.py"))


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            body[0] = ast.Pass()
    return tree


def plan_reads(source: str) -> list[str]:
    """Every way `source` (Python) reads a plan: 'plan.json' in code, `x.plan`, `plan[...]`, plan.to_dict/to_json."""
    tree = _without_docstrings(ast.parse(source))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "plan.json" in node.value:
            found.append(f"line {node.lineno}: the string {node.value!r}")
        elif isinstance(node, ast.Attribute) and node.attr == "plan":
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in ("plan", "p"):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and any(a.name in ("to_dict", "to_json") for a in node.names):
            found.append(f"line {node.lineno}: imports {', '.join(a.name for a in node.names)} of the plan")
    return found


def test_the_checker_finds_what_the_old_runtime_did():
    old = ('import json\nclass K:\n    """reads plan.json"""\n    def __init__(self, root):\n'
           '        self.plan = json.loads((root / "plan.json").read_text())\n        p = self.plan\n'
           '        x = p["kernel_name"]\n')
    found = plan_reads(old)
    assert sorted(found) == ["line 5: self.plan", "line 5: the string 'plan.json'", "line 6: self.plan",
                             "line 7: p['kernel_name']"]
    assert plan_reads('"""A package holds plan.json."""\n# plan.json\nfrom ..plan.launch import load\n') == []


def test_runtime_source_reads_no_plan():
    assert SOURCES and {"kernel.py", "multidevice.py", "arrays.py"} <= {s.name for s in SOURCES}
    bad = {s.name: plan_reads(s.read_text()) for s in SOURCES}
    assert not any(bad.values()), {k: v for k, v in bad.items() if v}


@pytest.mark.parametrize("spec", ["add_bf16.yaml", "collective_matmul_bf16_1024x4096.yaml"])
def test_package_module_call_path_reads_no_plan(spec):
    from conftest import SPECS_DIR
    from schedgen import families
    from schedgen.build import PACKAGE_TEMPLATE
    from schedgen.frontend.validate import load_spec
    from schedgen.plan import plan
    from schedgen.render import environment
    s, src = load_spec(str(SPECS_DIR / spec))
    p = plan(s, src)
    text = environment().get_template(families.of(p).template("package.py.j2") or PACKAGE_TEMPLATE).render(p=p)
    tree = ast.parse(text)
    assert plan_reads(text) == []
    # `plan` for people: plan.json read on first use only, by launch.PackagePlan (outside the call path)
    people = [n for n in tree.body if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "plan"]
    assert len(people) == 1 and ast.unparse(people[0].value).startswith("_PackagePlan(")
    assert "load_launch" in text or "_load_package" in text
