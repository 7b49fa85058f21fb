"""The layout's rules, checked on the source (docs/architecture.md):

(a) the shared stages never name a family: no module of `schedgen/` outside `schedgen/families/` holds a string
    literal equal to a registered kind, or compares a `family` with `==` / `!=` (a family's code lives in its folder
    and the shared code reaches it through the `Family` manifest). Modules still being cleaned are listed in
    `KNOWN_UNCLEAN`; the set may only shrink: a listed module that is clean (or gone) fails too, so that it is
    taken off the list;
(b) a ratchet on McCabe complexity: the functions of `schedgen/` over complexity 15 (ruff's C901, counted whatever
    `# noqa` comments say) may not outnumber `MAX_COMPLEX`. Lower it when a function is split; never raise it;
(c) ratchets on the import graph (tests/importgraph.py: floors, arrows, circles, read from the source): the arrows
    that run up a floor, the import circles, the imports hidden inside functions to dodge a circle and the functions
    that import inside themselves may not outnumber what was recorded, and importing the spec model
    (`schedgen.frontend.specfile`) loads at most `MAX_SPEC_MODEL_MODULES` schedgen modules, none of the runtime, the
    drawing, autodiff, the planner or a family's hooks. Lower a number when it goes down; never raise one;
(e) a ratchet on the computation in the templates (tests/templatecheck.py: arithmetic, comparisons other than
    against an enum's strings, filters and tests that compute): their total may not outgrow
    `MAX_TEMPLATE_COMPUTATION`; a derived number is a plan field (or a record's property), which the template prints;
(f) a ratchet on cyclomatic complexity by radon (a second metric beside ruff's McCabe: radon counts boolean
    operators and comprehensions too): the functions of `schedgen/` graded D or worse (complexity over 20) may not
    outnumber `MAX_RADON_D`. Lower it when one is split; never raise it;
(d) the top level is the design card's: `pyproject.toml`, `schedgen/`, `schemas/`, `templates/`, `specs/`,
    `tests/` (beside docs, examples, bench, scripts). A family is its folder `schedgen/families/<kind>/` plus its
    template folder `templates/<kind>/`, which its manifest registers; `templates/common/` holds the shared partials,
    and no template lives under `schedgen/`.
"""
from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import importgraph
import templatecheck
from conftest import ROOT
from schedgen import families

PACKAGE = ROOT / "schedgen"

# Modules outside schedgen/families/ that still name a family, being moved behind the manifest by their owners.
# Take a module off this list when it is clean (the test says when); never add one.
KNOWN_UNCLEAN: set[str] = set()

# Functions of schedgen/ over complexity 15 when this was recorded (2026-12-03): may only go down.
MAX_COMPLEX = 2
COMPLEXITY = 15


# The import graph when recorded (issue 42: registry at the bottom, hooks lazy; before it: 51 arrows up by these
# floors, 7 circles, 136 functions with local imports, the spec model loading 123 schedgen modules): may only go down.
MAX_ARROWS_UP = 1            # verify_buckets -> tune.buckets (a tuned build's variants checked at their buckets)
MAX_CIRCLES = 0
MAX_DODGING = 0              # imports inside a function that would close a circle at module level
MAX_LOCAL_IMPORT_FUNCTIONS = 110
MAX_SPEC_MODEL_MODULES = 22  # the registry, the frontend's model and each family's manifest and op model


def _is_family(node: ast.AST) -> bool:
    """`x.family`, `family`, `kind` or `row["family"]`: a family held in a value, not named."""
    return (isinstance(node, ast.Attribute) and node.attr == "family") or (
        isinstance(node, ast.Name) and node.id in ("family", "kind")) or (
        isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "family")


_COMPARE = re.compile(r"\bfamily\s*[!=]=|[!=]=\s*[\w.]*\bfamily\b")


def family_names(source: str, kinds: set[str], filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, what) of each place `source` names a family: a literal kind, or a `family ==` / `!=` comparison."""
    found = []
    # a cheap sieve first (walking every tree is most of this test's time): a literal kind is written quoted
    if not _COMPARE.search(source) and not any(f"{q}{k}{q}" in source for k in kinds for q in "'\""):
        return found
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in kinds:
            found.append((node.lineno, f"the literal {node.value!r}"))
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
            sides = [node.left, *node.comparators]
            if any(_is_family(s) for s in sides) and not all(_is_family(s) for s in sides):
                found.append((node.lineno, f"the comparison `{ast.unparse(node)}`"))
    return sorted(found)


def _shared_modules() -> list[Path]:
    """Every module outside schedgen/families/ but the registry (its `_FAMILIES` line is the one that names them)."""
    return sorted(p for p in PACKAGE.rglob("*.py")
                  if (PACKAGE / "families") not in p.parents and p != PACKAGE / "registry.py")


def test_the_rule_sees_what_it_should():
    kinds = {"matmul", "map"}
    assert family_names('if p.launch.family == "matmul":\n    pass\n', kinds) == [
        (1, "the comparison `p.launch.family == 'matmul'`"), (1, "the literal 'matmul'")]
    assert family_names("x = {'map': 1}\n", kinds) == [(1, "the literal 'map'")]
    assert family_names("if family != KIND:\n    pass\n", kinds) == [(1, "the comparison `family != KIND`")]
    # not a family: a kind inside a longer text, an f-string's text, a family compared with a family, identity
    assert family_names('"""matmul docs"""\nx = f"a matmul {y}"\nok = a.family == b.family\n'
                        "none = p.launch.family is None\nm = mapping\nrows = [r for r in rows if r['family'] == family]\n", kinds) == []
    assert family_names("ok = row['family'] == 'map'\n", kinds) == [
        (1, "the comparison `row['family'] == 'map'`"), (1, "the literal 'map'")]


def test_shared_modules_do_not_name_a_family():
    kinds = set(families.kinds())
    unclean = {}
    for path in _shared_modules():
        found = family_names(path.read_text(), kinds, str(path))
        if found:
            unclean[path.relative_to(ROOT).as_posix()] = found
    new = {m: unclean[m] for m in sorted(set(unclean) - KNOWN_UNCLEAN)}
    assert not new, "shared modules that name a family (use the Family manifest, schedgen/registry.py):\n" + \
        "\n".join(f"  {m}:{line}: {what}" for m, found in new.items() for line, what in found)
    cleaned = sorted(KNOWN_UNCLEAN - set(unclean))
    assert not cleaned, f"clean now (or gone): take {', '.join(cleaned)} off KNOWN_UNCLEAN in {Path(__file__).name}"


# Computations in the templates (tests/templatecheck.py) when recorded: may only go down.
MAX_TEMPLATE_COMPUTATION = 251


def test_template_computation_ratchet():
    counts = templatecheck.count()
    total = sum(len(found) for found in counts.values())
    listing = "\n".join(f"  {len(found):4d}  {name}" for name, found in
                        sorted(counts.items(), key=lambda kv: -len(kv[1])) if found)
    assert total <= MAX_TEMPLATE_COMPUTATION, (
        f"the templates compute {total} times, at most {MAX_TEMPLATE_COMPUTATION} (make the new number a plan field "
        f"or a record's property and print it; `python tests/templatecheck.py -v` lists each place):\n{listing}")


def test_the_template_check_sees_what_it_should():
    import jinja2
    env = jinja2.Environment()
    found = templatecheck.computations(env.parse(
        '{{ p.a * 2 }}{% if p.n > 1 %}{% endif %}{% if p.kind == "x" %}{% endif %}{{ p.xs | length }}{{ -1 }}'
        '{{ p.v | cxxdim }}{% if p.s is none %}{% endif %}{{ "a" ~ p.b }}{% if p.k in ("a", "b") %}{% endif %}'
        '{% if p.w is divisibleby(4) %}{% endif %}'), "t")
    assert [c.what for c in found] == ["Mul", "Compare gt", "filter length", "test divisibleby"]


# Functions of schedgen/ that radon grades D or worse (cyclomatic complexity > 20) when recorded (2026-12-07, 48
# before matmul/explain._explain and rowwise/backward.rowwise_backward were split): may only go down.
MAX_RADON_D = 46
RADON_D = 20


def radon_d_or_worse() -> list[tuple[int, str]] | None:
    """(complexity, 'path:line name') of each function of schedgen/ over RADON_D, worst first; None without radon."""
    try:
        from radon.complexity import cc_visit
        from radon.visitors import Function
    except ImportError:
        return None
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for block in cc_visit(path.read_text()):
            if isinstance(block, Function) and block.complexity > RADON_D:
                name = f"{block.classname}.{block.name}" if block.classname else block.name
                found.append((block.complexity, f"{path.relative_to(ROOT).as_posix()}:{block.lineno} {name}"))
    return sorted(found, key=lambda f: (-f[0], f[1]))


def test_radon_complexity_ratchet():
    found = radon_d_or_worse()
    if found is None:
        pytest.skip("radon is not installed (it is in the `test` extra)")
    listing = "\n".join(f"  {c:3d}  {where}" for c, where in found)
    assert len(found) <= MAX_RADON_D, (f"{len(found)} functions radon grades D or worse (complexity > {RADON_D}), "
                                       f"at most {MAX_RADON_D} (split the new one):\n{listing}")


TOP_LEVEL = {"pyproject.toml", "schedgen", "schemas", "templates", "specs", "tests"}


def test_the_top_level_is_the_design_cards():
    assert TOP_LEVEL <= {p.name for p in ROOT.iterdir()}


def test_a_family_is_its_folder_and_its_template_folder():
    kinds = families.kinds()
    assert sorted(d.name for d in (ROOT / "schedgen" / "families").iterdir()
                  if d.is_dir() and d.name != "__pycache__") == sorted(kinds)
    assert sorted(d.name for d in (ROOT / "templates").iterdir() if d.is_dir()) == sorted(
        [*kinds, families.COMMON_TEMPLATES])
    for fam in families.all_families():
        assert fam.templates == ROOT / "templates" / fam.kind, fam.kind
    assert families.template_root() == ROOT / "templates"
    stray = sorted(p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*")
                   if p.suffix == ".j2" or (p.is_dir() and p.name == "templates"))
    assert not stray, f"templates belong in templates/<kind>/ or templates/common/, not under schedgen/: {stray}"


def _ruff() -> list[str] | None:
    exe = shutil.which("ruff") or shutil.which("ruff", path=str(Path(sys.executable).parent))
    if exe:
        return [exe]
    try:
        import ruff  # noqa: F401
    except ImportError:
        return None
    return [sys.executable, "-m", "ruff"]


def test_complexity_ratchet():
    ruff = _ruff()
    if ruff is None:
        pytest.skip("ruff is not installed (it is in the `test` extra)")
    run = subprocess.run(
        [*ruff, "check", "--select", "C901", "--ignore-noqa", "--no-cache", "--output-format", "json",
         "--config", f"lint.mccabe.max-complexity = {COMPLEXITY}", "--exit-zero", str(PACKAGE)],
        capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert run.returncode == 0, run.stderr
    over = [d for d in json.loads(run.stdout) if d["code"] == "C901"]
    listing = "\n".join(f"  {Path(d['filename']).relative_to(ROOT)}:{d['location']['row']}: {d['message']}"
                        for d in over)
    assert len(over) <= MAX_COMPLEX, (f"{len(over)} functions over complexity {COMPLEXITY}, at most {MAX_COMPLEX} "
                                      f"(split the new one):\n{listing}")


def test_every_test_folder_is_collected(request):
    """pytest skips folders matching `norecursedirs`, whose default holds "build": tests/build/ (376 tests) went
    uncollected until pyproject.toml set the list without it. Every folder of tests/ holding test files must be
    one pytest recurses into."""
    import fnmatch
    patterns = request.config.getini("norecursedirs")
    skipped = sorted(str(d.relative_to(ROOT / "tests")) for d in (ROOT / "tests").rglob("*") if d.is_dir() and any(d.glob("test_*.py"))
                     and any(fnmatch.fnmatch(part, pat) for part in d.relative_to(ROOT / "tests").parts for pat in patterns))
    assert skipped == [], f"test folders pytest does not collect (norecursedirs {patterns}): {skipped}"


@pytest.fixture(scope="module")
def graph():
    return importgraph.read(ROOT)


def test_every_module_stands_on_a_floor(graph):
    for module in graph.modules:
        importgraph.floor(module)           # KeyError names a module tests/importgraph.py does not place


def test_the_import_graph_ratchets(graph):
    up = graph.arrows_up()
    assert len(up) <= MAX_ARROWS_UP, f"{len(up)} arrows up, at most {MAX_ARROWS_UP}:\n" + "\n".join(
        f"  {s} ({importgraph.FLOORS[importgraph.floor(s)]}) -> {t} ({importgraph.FLOORS[importgraph.floor(t)]})"
        for s, t in up)
    circles = graph.circles()
    assert len(circles) <= MAX_CIRCLES, "import circles:\n" + "\n".join(f"  {', '.join(c)}" for c in circles)
    dodging = graph.dodging()
    assert len(dodging) <= MAX_DODGING, "imports inside functions that dodge a circle:\n" + "\n".join(
        f"  {i.source}:{i.line} ({i.function}) -> {i.target}" for i in dodging)
    local = graph.local_import_functions()
    assert len(local) <= MAX_LOCAL_IMPORT_FUNCTIONS, (
        f"{len(local)} functions import inside themselves, at most {MAX_LOCAL_IMPORT_FUNCTIONS} (import at the top "
        f"of the module; a module that must load lazily (torch, jax, a CLI command) may, in place of another)")


def test_the_graph_sees_what_it_should(tmp_path):
    pkg = tmp_path / "schedgen"
    (pkg / "plan").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("def f():\n    from .plan import common\n")
    (pkg / "plan" / "__init__.py").write_text("")
    (pkg / "plan" / "common.py").write_text("from typing import TYPE_CHECKING\nfrom .. import errors\n"
                                            "if TYPE_CHECKING:\n    from ..cli import x\n")
    (pkg / "cli.py").write_text("")
    g = importgraph.read(tmp_path)
    assert g.arrows() == {("schedgen.errors", "schedgen.plan.common"), ("schedgen.plan.common", "schedgen.errors")}
    assert g.arrows_up() == [("schedgen.errors", "schedgen.plan.common")]
    assert g.circles() == [["schedgen.errors", "schedgen.plan.common"]]
    assert [(i.source, i.function) for i in g.dodging()] == [("schedgen.errors", "f")]


def test_the_spec_model_loads_no_hook():
    code = ("import sys\nimport schedgen.frontend.specfile\n"
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] == 'schedgen')))\n")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=ROOT).stdout.split()
    heavy = [m for m in loaded if m.startswith(("schedgen.runtime", "schedgen.draw", "schedgen.autodiff",
                                                "schedgen.plan", "schedgen.render", "schedgen.build"))
             or (m.startswith("schedgen.families.") and m.count(".") > 2 and not m.endswith(".model"))]
    assert not heavy, f"importing the spec model loads {heavy}"
    assert len(loaded) <= MAX_SPEC_MODEL_MODULES, f"{len(loaded)} modules, at most {MAX_SPEC_MODEL_MODULES}: {loaded}"
