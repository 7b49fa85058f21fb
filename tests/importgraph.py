"""The package's import graph, read from the source (no module is imported): which module imports which, at
import time or inside a function, the floor each module stands on, the arrows that run up, the import circles and
the functions that import inside themselves. tests/test_architecture.py pins the numbers as ratchets; run this
file to print them (`python tests/importgraph.py`).

Floors, bottom first (an import from a floor to a higher one is an arrow up): the foundation (errors, files, the
family registry, ...), the spec model, planning, autodiff, rendering, the toolchain and cache, building, the
runtime, checking against the reference, benchmarking, tuning, the printed views (explain, draw, report, the
starter) and the CLI. A family folder is a vertical slice: each of its modules stands on the floor of its role
(`model.py` on the spec model's, `plan.py` on planning's, `peers.py` on benchmarking's, ...); its manifest
(`__init__.py`) names its hooks as strings and stands on the spec model's floor.

An arrow is one module importing another by name (`import a.b`, `from a import b`: the module b when it is one,
else a). Importing a module runs its packages' `__init__` too: those implicit arrows count for circles (they are
real at run time) but not as arrows. The registry's lookup of a family folder by name (`importlib`) is no arrow:
it is the one door by which shared code reaches a family.
"""
from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "schedgen"

FLOORS = ("base", "spec", "plan", "autodiff", "render", "toolchain", "build", "runtime", "check", "bench", "tune",
          "views", "cli")

# module (or package prefix, longest first) -> floor
_SHARED = {
    "schedgen": "base", "schedgen.errors": "base", "schedgen.files": "base", "schedgen.boundedjson": "base",
    "schedgen.comment": "base", "schedgen.reserved": "base", "schedgen.staging": "base",
    "schedgen.supervise": "base", "schedgen.registry": "base", "schedgen.families": "base",
    "schedgen.frontend": "spec", "schedgen.plan": "plan", "schedgen.autodiff": "autodiff",
    "schedgen.render": "render", "schedgen.toolchain": "toolchain", "schedgen.cache": "toolchain",
    "schedgen.sanitize": "toolchain", "schedgen.build": "build", "schedgen.bucketed": "build",
    "schedgen.runtime": "runtime", "schedgen.reference": "check", "schedgen.verify": "check",
    "schedgen.verify_buckets": "check", "schedgen.bench": "bench", "schedgen.tune": "tune",
    "schedgen.explain": "views", "schedgen.draw": "views", "schedgen.report": "views", "schedgen.starter": "views",
    "schedgen.cli": "cli", "schedgen.__main__": "cli",
}
# a family module's floor by its name (other names: planning's)
_FAMILY_ROLES = {
    "__init__": "spec", "model": "spec", "backward": "autodiff",
    "reference": "check", "verify": "check", "peers": "bench", "fp8_peers": "bench", "tune": "tune",
    "explain": "views", "draw": "views", "report": "views",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def floor(module: str) -> int:
    parts = module.split(".")
    if len(parts) >= 3 and parts[1] == "families":
        return FLOORS.index(_FAMILY_ROLES.get(parts[3] if len(parts) > 3 else "__init__", "plan"))
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in _SHARED:
            return FLOORS.index(_SHARED[".".join(parts[:i])])
    raise KeyError(f"{module}: no floor in tests/importgraph.py (add it to _SHARED)")


@dataclass(frozen=True)
class Import:
    source: str          # the importing module
    target: str          # the imported one
    function: str        # the function it is written in ("" at module level)
    line: int


@dataclass
class Graph:
    modules: dict[str, Path]
    imports: list[Import] = field(default_factory=list)

    def arrows(self, *, local: bool | None = None) -> set[tuple[str, str]]:
        """(source, target) pairs; local=False: module-level imports only, True: function-level only."""
        return {(i.source, i.target) for i in self.imports
                if i.source != i.target and (local is None or bool(i.function) == local)}

    def arrows_up(self) -> list[tuple[str, str]]:
        return sorted((s, t) for s, t in self.arrows() if floor(t) > floor(s))

    def circles(self) -> list[list[str]]:
        """The import circles: strongly connected sets of modules (over every import, with the package
        `__init__`s each import runs), largest first."""
        edges = defaultdict(set)
        for s, t in self.arrows():
            edges[s].add(t)
            parts = t.split(".")
            for i in range(2, len(parts)):
                parent = ".".join(parts[:i])
                if not (s == parent or s.startswith(parent + ".")):
                    edges[s].add(parent)
        return sorted((sorted(c) for c in _strongly_connected(edges, list(self.modules)) if len(c) > 1),
                      key=lambda c: (-len(c), c))

    def local_import_functions(self) -> set[tuple[str, str]]:
        return {(i.source, i.function) for i in self.imports if i.function}

    def dodging(self) -> list[Import]:
        """Function-level imports that only dodge a circle: written at module level, the target would import
        the source back (through module-level imports)."""
        top = defaultdict(set)
        for s, t in self.arrows(local=False):
            top[s].add(t)
        out = []
        for i in self.imports:
            if i.function and i.source != i.target and _reaches(top, i.target, i.source):
                out.append(i)
        return out


def _reaches(edges, start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        if m == goal:
            return True
        if m not in seen:
            seen.add(m)
            todo.extend(edges.get(m, ()))
    return False


def _strongly_connected(edges, nodes):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(root):
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    out.append(comp)

    for n in nodes:
        if n not in index:
            visit(n)
    return out


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[:-(level - 1)]
    return ".".join(base + ([name] if name else []))


def read(root: Path = ROOT) -> Graph:
    package = root / "schedgen"
    modules = {}
    for p in sorted(package.rglob("*.py")):
        parts = list(p.relative_to(root).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    graph = Graph(modules)

    for module, path in modules.items():
        _read_module(graph, module, path)
    return graph


def _read_module(graph: Graph, module: str, path: Path) -> None:
    is_package = path.name == "__init__.py"

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, function or child.name)
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue                            # for the type checker only
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.split(".")[0] == "schedgen":
                        graph.imports.append(Import(module, alias.name, function, child.lineno))
            elif isinstance(child, ast.ImportFrom):
                target = _resolve(module, is_package, child.level, child.module)
                if target.split(".")[0] != "schedgen":
                    continue
                for alias in child.names:
                    sub = f"{target}.{alias.name}"
                    graph.imports.append(Import(module, sub if sub in graph.modules else target, function,
                                                child.lineno))
            else:
                visit(child, function)

    visit(ast.parse(path.read_text(), filename=str(path)), "")


def numbers(graph: Graph) -> dict[str, int]:
    return {"modules": len(graph.modules), "arrows": len(graph.arrows()), "arrows up": len(graph.arrows_up()),
            "circles": len(graph.circles()), "functions with local imports": len(graph.local_import_functions()),
            "local imports": sum(1 for i in graph.imports if i.function),
            "local imports dodging a circle": len(graph.dodging())}


if __name__ == "__main__":
    import sys
    g = read(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT)
    for k, v in numbers(g).items():
        print(f"{k}: {v}")
    print("arrows up:")
    for s, t in g.arrows_up():
        print(f"  {s} ({FLOORS[floor(s)]}) -> {t} ({FLOORS[floor(t)]})")
    print("circles:")
    for c in g.circles():
        print(f"  {len(c)}: {', '.join(c[:8])}{' ...' if len(c) > 8 else ''}")
    print("dodging:")
    for i in g.dodging():
        print(f"  {i.source}:{i.line} ({i.function}) -> {i.target}")
