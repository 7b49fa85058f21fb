"""The family registry: every bundled spec's kind is a registered family, manifests are checked when registered,
and the shared stages (the op union, validation messages, the CLI) read the registry."""
from __future__ import annotations

from dataclasses import replace

import pytest

from conftest import spec_files
from schedgen import families
from schedgen.frontend.specfile import SpecFile
from schedgen.frontend.validate import load_spec


def test_every_bundled_spec_kind_is_registered():
    kinds = {load_spec(str(p))[0].op.kind for p in spec_files()}
    assert kinds <= set(families.kinds())
    assert families.kinds() == ["map", "matmul", "attention", "collective_matmul", "grouped_matmul", "rowwise",
                                "attention_backward"]


def test_the_op_union_is_the_registry():
    op = SpecFile.model_fields["op"]
    members = [m.model_fields["kind"].annotation.__args__[0] for m in op.annotation.__args__]
    assert members == families.kinds() and op.discriminator == "kind"


def test_a_family_registers_once():
    with pytest.raises(ValueError, match="registered twice"):
        families.register(families.get("map"))


@pytest.mark.parametrize("change, message", [
    ({"kind": "Map"}, "lower-case identifier"),
    ({"kind": "matmul"}, "must declare kind: Literal\\['matmul'\\]"),
    ({"plan": None}, "plan must be callable"),
    ({"templates": families.get("map").templates.parent}, "no backend template"),
    ({"kind": "common"}, "the shared partials' template folder"),
])
def test_a_bad_manifest_is_refused_at_registration(change, message):
    with pytest.raises(TypeError, match=message):
        replace(families.get("map"), **change)


def test_each_family_finds_its_templates():
    for fam in families.all_families():
        assert fam.template("pallas.py.j2") == f"{fam.kind}/pallas.py.j2"
        if fam.kind != "attention_backward":     # Pallas only so far
            assert fam.template("cuda.cu.j2") == f"{fam.kind}/cuda.cu.j2"
        assert fam.template("no-such.j2") is None
    assert families.get("collective_matmul").template("package.py.j2") == "collective_matmul/package.py.j2"
    assert families.get("matmul").template("package.py.j2") is None


def test_kind_order_does_not_depend_on_import_order():
    """CI found it: a test importing an attention module first made the registry (and so the op union, the
    schema and the unknown-kind message) list attention first."""
    import subprocess
    import sys
    code = ("import schedgen.families.attention, schedgen.families.collective_matmul\n"
            "from schedgen import families\n"
            "from schedgen.frontend.specfile import SpecFile\n"
            "op = SpecFile.model_fields['op']\n"
            "print(families.kinds(), [m.__name__ for m in op.annotation.__args__])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ("['map', 'matmul', 'attention', 'collective_matmul', 'grouped_matmul', 'rowwise', "
                           "'attention_backward'] ['MapOp', 'MatmulOp', 'AttentionOp', 'CollectiveMatmulOp', "
                           "'GroupedMatmulOp', 'RowwiseOp', 'AttentionBackwardOp']")


def test_every_hook_resolves():
    """A manifest names its hooks as strings ('.plan:plan_map'), imported when first used: each one names a module
    and an attribute that exist (a callable, or a hooks record for draw and report)."""
    from schedgen.registry import _HOOK_FIELDS, Hook
    for fam in families.all_families():
        for name in _HOOK_FIELDS:
            hook = getattr(fam, name)
            if isinstance(hook, Hook):
                target = hook.target
                assert callable(target) or name in ("draw", "report"), (fam.kind, name, target)
        if fam.peers:
            import importlib
            importlib.import_module(fam.peers)


def test_targets_are_the_hardware_tables():
    """The registry stands below the planner, so a manifest's targets are checked against plan/hardware.py here."""
    from schedgen.plan.hardware import TARGETS
    for fam in families.all_families():
        assert fam.targets and set(fam.targets) <= set(TARGETS), (fam.kind, fam.targets)


def test_a_hook_is_imported_when_first_used():
    import subprocess
    import sys
    code = ("import sys\nfrom schedgen import registry\n"
            "fam = registry.get('map')\n"
            "assert 'schedgen.families.map.plan' not in sys.modules\n"
            "fam.plan\n"
            "assert 'schedgen.families.map.plan' not in sys.modules\n"
            "print(fam.explain.target.__name__, 'schedgen.families.map.explain' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["explain_map", "True"]


@pytest.mark.parametrize("ref, message", [
    ("plan_map", "must be 'module:attribute'"),
    (".plan:", "must be 'module:attribute'"),
])
def test_a_bad_hook_name_is_refused_at_registration(ref, message):
    with pytest.raises(TypeError, match=message):
        replace(families.get("map"), plan=ref)


def test_a_hook_naming_nothing_says_which():
    from schedgen.registry import Hook
    with pytest.raises(ImportError, match="has no 'no_such_planner'"):
        Hook(".plan:no_such_planner", "schedgen.families.map")(None, None)
