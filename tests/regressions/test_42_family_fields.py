"""Issue 42 step 2, "fields belong to their family": the core `Schedule` holds the fields every family reads, each
family's schedule model (in its folder) adds its own, and the spec is a union on op.kind. A field written under a
family that does not have it is an unknown key at its location, naming the families that have it (it used to be
accepted by the one shared model and rejected later, or not at all, by one of three mechanisms: the manifests'
own_schedule_fields, the planner's _block_scale_fields, the Unread tables)."""
from __future__ import annotations

import re

import pytest

from _cli import run_cli
from conftest import SPECS_DIR
from schedgen import families
from schedgen.errors import SpecErrors
from schedgen.frontend.model import Schedule
from schedgen.frontend.validate import load_spec

MAP = SPECS_DIR / "add_bf16.yaml"
ROWWISE = SPECS_DIR / "rmsnorm_bf16.yaml"
MATMUL = SPECS_DIR / "matmul_bf16_4096.yaml"

# The core schedule as the issue sets it: grid, cluster, warpgroups, in/out specs, barriers, pipeline kind and depth,
# persistent loop and order, compiler params, backends, target
CORE = {"grid", "cluster", "num_warpgroups", "in_specs", "out_specs", "barriers", "pipeline", "persistent",
        "compiler_params", "backends", "target"}
CORE_PIPELINE = {"kind", "max_concurrent_steps"}
CORE_PERSISTENT = {"loop", "num_blocks", "tile_order"}

# fields one family's kernels read, and that family (a dotted path under schedule)
ONE_FAMILY = {"pipeline.data_path": "map", "grid_names": "map", "pipeline.partial_sums": "matmul",
              "pipeline.scale_prefetch": "matmul", "persistent.decomposition": "matmul",
              "pipeline.delta": "attention_backward", "collective": "collective_matmul"}


def _with_schedule(src_path, tmp_path, lines: str) -> tuple:
    """The bundled spec with `lines` (indented two spaces, under schedule:) replacing its schedule; (path, text)."""
    text = src_path.read_text()
    text = text[:text.index("\nschedule:")] + "\nschedule:\n" + lines
    path = tmp_path / src_path.name
    path.write_text(text)
    return path, text


def _at(text: str, key: str) -> str:
    """`line:col` of the key `key:` in `text`."""
    for i, line in enumerate(text.splitlines(), start=1):
        m = re.search(rf"\b{key}:", line)
        if m:
            return f"{i}:{m.start() + 1}"
    raise AssertionError(key)


@pytest.mark.parametrize("spec, kind", [(MAP, "map"), (ROWWISE, "rowwise")], ids=["map", "rowwise"])
@pytest.mark.parametrize("written, key, field, owners", [
    ("  persistent:\n    decomposition: stream_k\n", "decomposition", "schedule.persistent.decomposition", "matmul"),
    # the default value too: the field is not the family's, whatever it says
    ("  persistent: {decomposition: data_parallel}\n", "decomposition", "schedule.persistent.decomposition", "matmul"),
    ("  pipeline:\n    partial_sums: 2\n", "partial_sums", "schedule.pipeline.partial_sums", "matmul"),
    ("  epilogue:\n    store: direct\n", "epilogue", "schedule.epilogue", "matmul / collective_matmul / grouped_matmul"),
], ids=["stream_k", "default-value", "partial_sums", "epilogue"])
def test_a_matmul_field_under_another_family_is_an_unknown_key_naming_its_family(
        capsys, tmp_path, spec, kind, written, key, field, owners):
    path, text = _with_schedule(spec, tmp_path, written)
    code, err = run_cli(capsys, "validate", str(path))      # (run_cli: no traceback)
    assert code != 0
    assert len(err) == 1, err
    assert err[0].startswith(f"{path}:{_at(text, key)}: {field}: unknown key '{key}': "), err
    assert f"{field} is a {owners} field; the {kind} family's " in err[0], err


def test_the_message_lists_what_the_family_has(tmp_path):
    path, _ = _with_schedule(ROWWISE, tmp_path, "  pipeline:\n    partial_sums: 2\n")
    with pytest.raises(SpecErrors) as info:
        load_spec(str(path))
    (problem,) = info.value.problems
    assert problem.message.endswith("the rowwise family's schedule.pipeline has: kind, max_concurrent_steps")


@pytest.mark.parametrize("spec, written, typo, hint", [
    (MATMUL, "  pipeline:\n    partial_sum: 2\n", "partial_sum", "partial_sums"),
    (MAP, "  pipeline:\n    data_pth: registers\n", "data_pth", "data_path"),
    (MAP, "  grid_name: [i, j]\n", "grid_name", "grid_names"),
], ids=["matmul", "map", "map-top"])
def test_a_typo_of_a_family_field_gets_did_you_mean(capsys, tmp_path, spec, written, typo, hint):
    path, text = _with_schedule(spec, tmp_path, written)
    code, err = run_cli(capsys, "validate", str(path))
    assert code != 0 and len(err) == 1, err
    assert f"{path}:{_at(text, typo)}: " in err[0] and f"unknown key '{typo}' (did you mean '{hint}'?)" in err[0], err


def _fields(model, prefix: str = "") -> set[str]:
    """Dotted field paths of a schedule model (into its pipeline and persistent models)."""
    out = set()
    for name, field in model.model_fields.items():
        out.add(prefix + name)
        if name in ("pipeline", "persistent"):
            out |= _fields(field.annotation, f"{name}.")
    return out


def test_the_core_schedule_holds_no_field_of_one_family():
    core = _fields(Schedule)
    assert core == CORE | {f"pipeline.{f}" for f in CORE_PIPELINE} | {f"persistent.{f}" for f in CORE_PERSISTENT}
    models = {f.kind: f.schedule_model or Schedule for f in families.all_families()}
    for model in models.values():
        assert issubclass(model, Schedule) and _fields(model) >= core
    have = {kind: _fields(model) for kind, model in models.items()}
    for field, owner in ONE_FAMILY.items():
        assert field not in core, field
        assert [k for k, fields in have.items() if field in fields] == [owner], field
    # a field beyond the core is declared in a family's folder, or in frontend/model.py's field groups when several
    # families have it (the producer / consumer warpgroups, planar_snake's shape, the wgmma GEMM kernel's schedule)
    for kind, model in models.items():
        for field in have[kind] - core:
            owner, name = (model, field) if "." not in field else \
                (model.model_fields[field.split(".")[0]].annotation, field.split(".")[1])
            declared = next(c for c in owner.__mro__ if name in c.__dict__.get("__annotations__", {}))
            sharing = [k for k, fields in have.items() if field in fields]
            assert declared.__module__.startswith("schedgen.families.") or len(sharing) > 1, (kind, field, declared)
        assert model is Schedule or model.__module__ == f"schedgen.families.{kind}.model"


def test_the_rejection_mechanisms_are_gone():
    """own_schedule_fields (the manifests) and _block_scale_fields (the planner) are replaced by the models."""
    import schedgen.plan as plan_module
    assert not hasattr(plan_module, "_block_scale_fields") and not hasattr(plan_module, "_own_fields_of_others")
    assert "own_schedule_fields" not in families.Family.__dataclass_fields__
