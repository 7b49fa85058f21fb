"""Defect group 2 (issue 14): validated names that produce generated code that cannot work.

Before: an input named `out`, `stream` or `backend` made the package __init__.py a SyntaxError (duplicate
argument); a matmul input named `interpret` broke the Pallas module; a spec or input named `kernel`, a spec named
like a module global of the Pallas module (`GRID`, `NUM_BLOCKS`, `STAGES`, `K_ITERS`, `SCALE_LOG2`) or a package
helper (`plan`, `pallas`, `make_mesh`) planned, rendered and built, then failed when imported or called. Each
family had its own partial list; none covered the package module.

Now schedgen/reserved.py is the one list, derived from the rendered code (generated_names.py): these tests check
the list covers everything the templates define, that the outside cases are rejected with located errors, and that
every reserved word validation still accepts somewhere (a size, constant, grid name, temporary, output) builds,
imports and runs (Pallas interpret mode, CPU).
"""
from __future__ import annotations

import copy
import re
import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import SPECS_DIR, spec_files  # noqa: E402
from generated_names import collisions  # noqa: E402
from schedgen.errors import SourceMap, SpecErrors  # noqa: E402
from schedgen.plan import plan  # noqa: E402
from schedgen.frontend import expr  # noqa: E402
from schedgen.frontend.load import load_file  # noqa: E402
from schedgen.frontend.validate import validate_data  # noqa: E402


def test_reserved_list_covers_every_name_the_templates_define():
    from schedgen import reserved
    found = collisions(spec_files())
    missing = {role: {n: why for n, why in names.items()
                      if n not in {"name": reserved.SPEC_NAME, "inputs": reserved.INPUT_NAME}.get(role, {})}
               for role, names in found.items()}
    assert not any(missing.values()), f"add these to schedgen/reserved.py: {missing}"
    # the derivation is not vacuous: it sees the names the outside attack used
    # (GRID stays reserved, but no template defines it since the map module computes its grid in _kernel_body)
    assert {"NUM_TILES", "NUM_BLOCKS", "STAGES", "K_ITERS", "SCALE_LOG2", "kernel", "plan", "pallas",
            "make_mesh"} <= found["name"].keys()
    assert {"out", "stream", "backend", "interpret", "kernel", "acc"} <= found["inputs"].keys()


def _load(name: str):
    return load_file(SPECS_DIR / name)


def _errors(data, src) -> list[str]:
    try:
        plan(validate_data(data, src), src)
    except SpecErrors as e:
        return e.lines()
    return []


def _rename_input(data: dict, old: str, new: str) -> dict:
    d = copy.deepcopy(data)
    op, sch = d["op"], d.get("schedule", {})
    op["inputs"] = {new if k == old else k: v for k, v in op["inputs"].items()}
    for key, default in (("lhs", "a"), ("rhs", "b")):
        if op["kind"] in ("matmul", "collective_matmul") and op.get(key, default) == old:
            op[key] = new
    for key in ("body", "epilogue"):
        if op.get(key):
            op[key] = re.sub(rf"\b{old}\b", new, op[key])
    for group in ("in_specs", "out_specs"):
        if group in sch:
            sch[group] = {new if k == old else k: v for k, v in sch[group].items()}
    return d


OUTSIDE = [  # (spec file, field, value)
    ("add_bf16.yaml", "input", "out"), ("add_bf16.yaml", "input", "stream"), ("add_bf16.yaml", "input", "backend"),
    ("add_bf16.yaml", "input", "kernel"), ("matmul_bias_gelu_bf16.yaml", "input", "interpret"),
    ("matmul_bias_gelu_bf16.yaml", "input", "kernel"), ("attention_bf16_4096.yaml", "input", "stream"),
    ("collective_matmul_bf16_1024x4096.yaml", "input", "plan"),
    ("add_bf16.yaml", "name", "kernel"), ("add_bf16.yaml", "name", "GRID"), ("add_bf16.yaml", "name", "NUM_BLOCKS"),
    ("matmul_bf16_4096.yaml", "name", "STAGES"), ("matmul_bf16_4096.yaml", "name", "K_ITERS"),
    ("attention_bf16_4096.yaml", "name", "SCALE_LOG2"), ("scale_f32.toml", "name", "plan"),
    ("attention_bf16_4096.yaml", "name", "pallas"), ("collective_matmul_bf16_1024x4096.yaml", "name", "make_mesh"),
]


@pytest.mark.parametrize("spec, field, value", OUTSIDE)
def test_outside_cases_rejected_with_location(spec, field, value):
    data, src = _load(spec)
    if field == "name":
        data = dict(data, name=value)
        where = ": name: "
    else:
        data = _rename_input(data, next(iter(data["op"]["inputs"])), value)
        where = f": op.inputs.{value}: "
    lines = _errors(data, src)
    assert any(where in line and f"'{value}' is reserved" in line for line in lines), lines


# ------------------------------------------------------------------ every reserved word: rejected, or it works

def _words() -> list[str]:
    from schedgen import reserved
    return sorted(set(expr.RESERVED) | set(reserved.SPEC_NAME) | set(reserved.INPUT_NAME))
ROLES = ("name", "inputs", "outputs", "constants", "sizes", "grid_names", "temporaries")


DEFAULTS = {"name": "rwq", "inputs": ("xq", "yq"), "outputs": ("oq",), "constants": ("cq",), "sizes": ("Mq", "Nq"),
            "grid_names": ("iq", "jq"), "temporaries": ("tq",)}   # no reserved word among them


def _small_map(name="rwq", inputs=("xq", "yq"), outputs=("oq",), constants=("cq",), sizes=("Mq", "Nq"),
               grid=("iq", "jq"), temps=("tq",)) -> dict:
    """f32 map over [M, N] = [64, 256], blocks [8, 128]: t_k chain the constants, o_j = t_last * x + y + j."""
    m, n = sizes[0], sizes[1]
    body = [f"{temps[0]} = {inputs[0]} + {constants[0]}"]
    body += [f"{t} = {p} + {constants[k % len(constants)]}" for k, (p, t) in enumerate(zip(temps, temps[1:]), 1)]
    body += [f"{o} = {temps[-1]} * {inputs[0]} + {inputs[1]} + {j}.0" for j, o in enumerate(outputs)]
    blk = {"block_shape": [8, 128], "index_map": f"({grid[0]} + {m} - {m}, {grid[1]})"}
    return {
        "name": name,
        "op": {"kind": "map", "sizes": {s: (64 if s == m else 256 if s == n else 7) for s in sizes},
               "constants": {c: 1.0 / 64 for c in constants},
               "inputs": {x: {"shape": [m, n], "dtype": "f32"} for x in inputs},
               "outputs": {o: {"shape": [m, n], "dtype": "f32"} for o in outputs}, "body": "\n".join(body)},
        "schedule": {"grid_names": list(grid), "out_specs": {outputs[0]: {"block_shape": [8, 128]}},
                     "in_specs": {inputs[0]: blk}, "backends": ["cuda", "pallas"]},
    }


def _with(role: str, word: str) -> dict:
    defaults = DEFAULTS
    arg = {"name": "name", "inputs": "inputs", "outputs": "outputs", "constants": "constants", "sizes": "sizes",
           "grid_names": "grid", "temporaries": "temps"}
    value = defaults[role]
    value = word if role == "name" else (word,) + tuple(value[1:])
    return _small_map(**{arg[role]: value})


def _field(role: str, word: str) -> str:
    return {"name": "name", "grid_names": "schedule.grid_names", "temporaries": "op.body"}.get(role, f"op.{role}.{word}")


def _accepted() -> dict[str, list[str]]:
    """{role: words a small map accepts there}; asserts every rejection is located at the word's field."""
    out: dict[str, list[str]] = {r: [] for r in ROLES}
    src = SourceMap("<reserved-words>")
    for word in _words():
        for role in ROLES:
            try:
                plan(validate_data(_with(role, word), src), src)
            except SpecErrors as e:
                field = _field(role, word)
                assert any(p.path[:len(field.split("."))] == tuple(field.split(".")) or
                           ".".join(map(str, p.path)).startswith(field) for p in e.problems), (role, word, e.lines())
                continue
            out[role].append(word)
    return out


def test_every_reserved_word_is_rejected_at_its_field_or_builds_and_runs(tmp_path, monkeypatch):
    pytest.importorskip("jax")
    from schedgen import reserved
    from schedgen.build import build_spec, package
    from schedgen.runtime.kernel import Kernel
    from schedgen.verify import interpret_params

    accepted = _accepted()
    # the raw spellings are rejected, for the spec name and inputs (the prefixed roles keep accepting them)
    assert not set(accepted["name"]) & set(reserved.SPEC_NAME)
    assert not set(accepted["inputs"]) & set(reserved.INPUT_NAME)
    assert "GRID" in accepted["sizes"] and "stream" in accepted["outputs"] and "kernel" in accepted["temporaries"]

    # every word accepted in a role is used there in one of the builds (grid names and outputs: a sample each)
    import yaml
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    orig = Kernel._call_pallas
    monkeypatch.setattr(Kernel, "_call_pallas", lambda self, a, o, interpret=None: orig(self, a, o, interpret_params()))
    names, ins = accepted["name"], accepted["inputs"]
    n_builds = max(len(names), -(-len(ins) // 14), 2)
    consts = accepted["constants"]
    sizes = [w for w in accepted["sizes"] if w not in consts]
    temps = [w for w in accepted["temporaries"] if w not in consts and w not in sizes]
    outs = [w for w in accepted["outputs"] if w not in consts + sizes + temps]
    grids = [w for w in accepted["grid_names"] if w not in consts + sizes + temps + outs]
    covered: dict[str, set[str]] = {r: set() for r in ROLES}
    for b in range(n_builds):
        used: set[str] = set()

        def part(words, k=None, fill=(), b=b, used=used):   # this build's share of ``words``, none used twice
            got = tuple(w for w in words[b::n_builds] if w not in used)[:k]
            got += tuple(f for f in fill if f not in got)
            used.update(got)
            return got
        inputs = part(ins, 14, ("xq", "yq"))[::-1]   # xq, yq first: the body reads the first two
        name = names[b] if b < len(names) else f"reserved_words_{b}"
        used.add(name)
        data = _small_map(name=name, inputs=inputs,
                          constants=part(consts) or ("cq",), sizes=("Mq", "Nq") + part(sizes),
                          temps=part(temps, 40) or ("tq",), outputs=part(outs, 3) or ("oq",),
                          grid=(part(grids, 2) + ("iq", "jq"))[:2])
        data["schedule"]["backends"] = ["cuda", "pallas"] if b < 2 else ["pallas"]  # NVRTC for two of them
        covered["name"].add(data["name"])
        for role in ("inputs", "outputs", "constants", "sizes"):
            covered[role] |= set(data["op"][role])
        covered["grid_names"] |= set(data["schedule"]["grid_names"])
        covered["temporaries"] |= {ln.split(" = ")[0] for ln in data["op"]["body"].splitlines()}
        path = tmp_path / f"words_{b}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        built = build_spec(str(path))
        pkgs = tmp_path / f"pkgs{b}"       # one folder each: every package is imported as its own top-level name
        dest = package(built, pkgs)
        sys.path.insert(0, str(pkgs))
        try:
            mod = importlib.import_module(dest.name)
        finally:
            sys.path.remove(str(pkgs))
        rng = np.random.default_rng(b)
        args = [rng.standard_normal((64, 256)).astype(np.float32) for _ in inputs]
        got = getattr(mod, data["name"])(*args, backend="pallas")
        got = got if isinstance(got, tuple) else (got,)
        t = args[0] + len(data["op"]["body"].splitlines()[:-len(got)]) / 64
        for j, g in enumerate(got):
            np.testing.assert_allclose(np.asarray(g), t * args[0] + args[1] + j, rtol=1e-5, atol=1e-5)
    # every accepted spec name and input name was built as such; every other accepted word in at least one role
    assert set(accepted["name"]) <= covered["name"] and set(accepted["inputs"]) <= covered["inputs"]
    assert set().union(*accepted.values()) <= set().union(*covered.values())
    assert {"GRID", "NUM_BLOCKS", "stream", "kernel", "plan"} <= set().union(*covered.values())
