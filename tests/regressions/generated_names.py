"""Which user names would collide with what the templates define: derived from rendered code, not written down.

Each bundled spec is re-spelled with every user name marked (``x`` -> ``Zqx``: a spec name, operand, size,
constant, grid name, temporary, mesh axis), planned, and rendered through every template (CUDA, Pallas, the
package ``__init__``). In the rendered code an identifier holding the marker is spelled from a user name; every
other identifier is the template's own. Then:

- a user name spelled as-is in Python (the spec name: a module-level ``def``; input names: the entry function's
  parameters) collides with every symbol of the scope it is defined in (``symtable``: parameters, locals,
  module-level names, imports) and every name read in the scopes nested in it (globals and builtins);
- a user name spelled with a prefix / suffix (``v_x``, ``S_M``, ``in_x_slot``, ``map_<name>_32x256_s4_wg2``)
  collides with any template identifier of that file of the same shape (``v_acc`` -> an input ``acc``).

``collisions()`` returns {role: {name: (file, why)}} for names a user could otherwise write.
"""
from __future__ import annotations

import ast
import copy
import io
import re
import symtable
import tokenize
from collections.abc import Iterator
from pathlib import Path

from schedgen import families
from schedgen.build import PACKAGE_TEMPLATE
from schedgen.plan import plan
from schedgen.render import environment, render
from schedgen.frontend.expr import IDENT_RE, check_identifier
from schedgen.frontend.load import load_file
from schedgen.frontend.validate import validate_data

MARK = "Zq"
ROLES = ("name", "inputs", "outputs", "constants", "sizes", "grid_names", "temporaries", "axis_name")


def _expr_names(text: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Name)}


def _respell(text: str, names: dict[str, str]) -> str:
    return re.sub(r"\b[A-Za-z][A-Za-z0-9_]*\b", lambda m: names.get(m.group(0), m.group(0)), text)


def marked(data: dict) -> tuple[dict, dict[str, str]]:
    """``data`` with every user name marked, and {marked name: role}."""
    d = copy.deepcopy(data)
    op, sch = d["op"], d.setdefault("schedule", {})
    roles: dict[str, str] = {d["name"]: "name"}
    for group in ("inputs", "outputs", "constants", "sizes"):
        for n in op.get(group, {}):
            roles[n] = group
    for g in sch.get("grid_names", []) or []:
        roles[g] = "grid_names"
    if "mesh" in op:
        roles[op["mesh"]["axis_name"]] = "axis_name"
    if op["kind"] == "grouped_matmul":     # the int32 group operand: a parameter of the generated function too
        roles[op.get("group_offsets", "offsets")] = "inputs"
    for key in ("body", "epilogue"):
        if op.get(key):
            for stmt in ast.parse(op[key]).body:
                for t in stmt.targets:  # type: ignore[attr-defined]
                    roles.setdefault(t.id, "temporaries")
    new = {n: MARK + n for n in roles}
    d["name"] = new[d["name"]]
    for group in ("inputs", "outputs", "constants", "sizes"):
        if group in op:
            op[group] = {new[n]: v for n, v in op[group].items()}
    for group in ("inputs", "outputs"):
        for v in op.get(group, {}).values():
            v["shape"] = [new.get(s, s) if isinstance(s, str) else s for s in v["shape"]]
    for key, default in (("lhs", "a"), ("rhs", "b")):
        if op["kind"] in ("matmul", "collective_matmul"):
            op[key] = new[op.get(key, default)]
    for key, default in (("lhs", "x"), ("rhs", "w"), ("group_offsets", "offsets")):
        if op["kind"] == "grouped_matmul":
            op[key] = new[op.get(key, default)]
    if "mesh" in op:
        op["mesh"]["axis_name"] = new[op["mesh"]["axis_name"]]
    if op.get("block_scales"):                       # the matmul family's fp8 block scales name two inputs
        op["block_scales"] = {k: new[v] for k, v in op["block_scales"].items()}
    for key in ("body", "epilogue"):
        if op.get(key):
            op[key] = _respell(op[key], new)
    for group in ("in_specs", "out_specs"):
        if group in sch:
            sch[group] = {new.get(n, n): v for n, v in sch[group].items()}
            for v in sch[group].values():
                if v.get("index_map"):
                    v["index_map"] = _respell(v["index_map"], new)
    if sch.get("grid_names"):
        sch["grid_names"] = [new[g] for g in sch["grid_names"]]
    if sch.get("grid"):
        sch["grid"] = [_respell(g, new) if isinstance(g, str) else g for g in sch["grid"]]
    for ref in (sch.get("collective") or {}).get("remote_refs", {}).values():
        ref["device_id"] = _respell(ref["device_id"], new)
    d.pop("tune", None)
    return d, {new[n]: r for n, r in roles.items()}


def rendered(path: Path) -> Iterator[tuple[str, str, str]]:
    """(file label, language, text) of every rendering of the marked spec ``path``."""
    data, src = load_file(path)
    mdata, _ = marked(data)
    p = plan(validate_data(mdata, src), src)
    for backend in p.launch.backends:
        yield f"{path.stem}:{backend}", "cuda" if backend == "cuda" else "python", render(p, backend)
    template = families.of(p).template("package.py.j2") or PACKAGE_TEMPLATE
    yield f"{path.stem}:package", "python", environment().get_template(template).render(p=p)


def _python_names(text: str) -> list[str]:
    return [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.NAME]


def _cuda_names(text: str) -> list[str]:
    code = re.sub(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])'", " ", text, flags=re.S)
    return re.findall(r"\b[A-Za-z_][A-Za-z0-9_]*\b", code)


def _scopes(table: symtable.SymbolTable) -> Iterator[symtable.SymbolTable]:
    yield table
    for child in table.get_children():
        yield from _scopes(child)


def _kind(sym: symtable.Symbol, scope: symtable.SymbolTable) -> str:
    if sym.is_parameter():
        return f"a parameter of the generated function {scope.get_name()}()"
    if sym.is_imported():
        return "a module the generated code imports"
    if sym.is_namespace():
        return "a function the generated module defines" if scope.get_type() == "module" else \
            f"a function defined in the generated function {scope.get_name()}()"
    if sym.is_assigned():
        return "a module-level name of the generated module" if scope.get_type() == "module" else \
            f"a local variable of the generated function {scope.get_name()}()"
    return "a global or builtin name the generated code reads"


def _python_raw_conflicts(text: str) -> dict[str, dict[str, str]]:
    """{marked name: {name it must not equal: why}} for markers spelled as-is in Python code: the symbols of the
    scope the marker is bound in, and the names read from outside (free or global) in the scopes nested in it."""
    out: dict[str, dict[str, str]] = {}
    for scope in _scopes(symtable.symtable(text, "<generated>", "exec")):
        marks = {s.get_name() for s in scope.get_symbols() if s.get_name().startswith(MARK)}
        if not marks:
            continue
        names = {s.get_name(): _kind(s, scope) for s in scope.get_symbols()}
        for child in scope.get_children():
            for sub in _scopes(child):
                for sym in sub.get_symbols():
                    # a module-level name shadows what nested scopes read as globals (or builtins); a function's
                    # parameter or local also what they read as closure (free) variables
                    outer = sym.is_global() or (sym.is_free() and scope.get_type() != "module")
                    if sym.is_referenced() and outer:
                        names.setdefault(sym.get_name(), "a global or builtin name the generated code reads")
        for m in marks:
            out.setdefault(m, {}).update({n: why for n, why in names.items() if MARK not in n})
    return out


def collisions(paths: list[Path]) -> dict[str, dict[str, tuple[str, str]]]:
    found: dict[str, dict[str, tuple[str, str]]] = {r: {} for r in ROLES}

    def add(role: str, name: str, label: str, why: str) -> None:
        if IDENT_RE.match(name) and check_identifier(name) is None and name not in found[role]:
            found[role][name] = (label, why)

    for path in paths:
        data, _ = load_file(path)
        _, roles = marked(data)
        for label, lang, text in rendered(path):
            idents = _python_names(text) if lang == "python" else _cuda_names(text)
            template_idents = {t for t in idents if MARK not in t}
            if lang == "python":
                for m, names in _python_raw_conflicts(text).items():
                    for n, why in names.items():
                        add(roles[m], n, label, why)
            for ident in {t for t in idents if MARK in t}:
                for m, role in roles.items():
                    at = ident.find(m)
                    if at < 0 or not (at == 0 or not ident[at - 1].isalnum()) or (lang == "python" and ident == m):
                        continue
                    pre, post = ident[:at], ident[at + len(m):]
                    if post and post[0].isalnum():
                        continue  # a longer marked name holds this one
                    for t in template_idents:
                        if t.startswith(pre) and t.endswith(post) and len(t) > len(pre) + len(post):
                            add(role, t[len(pre):len(t) - len(post)], label,
                                f"spelled {pre}<name>{post} there, like the template's own '{t}'")
    return found


if __name__ == "__main__":
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from conftest import spec_files
    for role, names in collisions(spec_files()).items():
        print(role, len(names))
        for n, (label, why) in sorted(names.items()):
            print(f"   {n:24s} {label:45s} {why}")
