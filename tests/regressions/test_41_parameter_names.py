"""Defect group 3 (issue 41): names that become parameters of the generated function could still collide.

Before: the reserved-name check (schedgen/reserved.py) looked at `op.inputs` only, so a grouped matmul with
`group_offsets: interpret` (or `stream`, `backend`, `out`, `kernel`...) planned and built a package whose
`def <name>(x, w, interpret, *, ..., interpret=None)` failed to import (duplicate argument). Likewise a map or
rowwise temporary kept for the backward (`backward.save: [stream]`) becomes a parameter of the backward step's
function: it failed as "a schedgen bug in the map family" located at `backward`.

Now every name that becomes a parameter (the inputs and each operand a family passes after them, its
`call_inputs`) goes through the one check, located at the field that names it; a saved value's name is checked at
`backward.save[i]`.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import SPECS_DIR, spec_files  # noqa: E402
from schedgen import families  # noqa: E402
from schedgen.build import PACKAGE_TEMPLATE, build_spec  # noqa: E402
from schedgen.cache import Cache  # noqa: E402
from schedgen.errors import SpecErrors  # noqa: E402
from schedgen.frontend.validate import load_spec  # noqa: E402
from schedgen.plan import plan  # noqa: E402
from schedgen.render import environment  # noqa: E402
from schedgen.reserved import INPUT_NAME, parameter_fields  # noqa: E402

GROUPED = SPECS_DIR / "grouped_moe_mixtral_bf16_dynamic.yaml"


def _problems(path, overrides) -> list:
    spec, src = load_spec(str(path), overrides)
    try:
        plan(spec, src)
    except SpecErrors as exc:
        return list(exc.problems)
    return []


@pytest.mark.parametrize("word", ["interpret", "stream", "backend", "out", "kernel", "plan", "acc"])
def test_group_operand_name_is_checked_at_its_field(word):
    problems = _problems(GROUPED, {"op.group_offsets": word})
    assert problems and all(p.path == ("op", "group_offsets") for p in problems), problems
    assert any(f"'{word}' is reserved" in p.message and "op.group_offsets" in p.message for p in problems), problems


def test_legal_group_operand_name_renders_an_importable_package():
    """The neighbours of the reserved words (`streams`, `offs`) plan, and the package module they render compiles."""
    for word in ("streams", "offs", "interpret_"):
        spec, src = load_spec(str(GROUPED), {"op.group_offsets": word})
        p = plan(spec, src)
        template = families.of(p).template("package.py.j2") or PACKAGE_TEMPLATE
        text = environment().get_template(template).render(p=p)
        compile(text, f"<{word}>", "exec")
        assert f"def moe_up_mixtral(x, w, {word}, *," in text


@pytest.mark.parametrize("path", spec_files(), ids=lambda p: p.stem)
def test_every_call_parameter_has_a_field(path):
    """Every name a family passes to its generated function is located at a spec field that names it."""
    spec, _ = load_spec(str(path))
    fields = parameter_fields(spec)
    assert list(fields) == list(families.of(spec).call_inputs(spec.op))
    for name, field in fields.items():
        assert len(field) >= 2 and field[0] == "op", (name, field)
        at = getattr(spec.op, field[1])
        assert (name in at) if field[1] == "inputs" else at == name, (name, field)


MAP_SAVE = """\
name: mapbw
op:
  kind: map
  sizes: {M: 1024, N: 1024}
  inputs:
    x: {shape: [M, N], dtype: f32}
    y: {shape: [M, N], dtype: f32}
  outputs:
    o: {shape: [M, N], dtype: f32}
  body: "TMP = x * y; o = exp(TMP)"
backward:
  wrt: [x, y]
  save: [TMP]
"""


@pytest.mark.parametrize("word", ["stream", "kernel", "out"])
def test_saved_temporary_named_like_a_parameter_builds(tmp_path, word):
    """A temporary may carry a name the generated function uses for a parameter: the backward step reads it saved
    under another name (saved_<name>, autodiff.derive.renamed) rather than failing as a schedgen bug."""
    path = tmp_path / "mapbw.yaml"
    path.write_text(MAP_SAVE.replace("TMP", word))
    built = build_spec(path, cache=Cache(tmp_path / "cache"))
    assert built.backward is not None and word in INPUT_NAME
