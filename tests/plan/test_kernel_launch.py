"""One launch header (issue 42 step 3): every family's plan holds its kernel's launch header as `plan.launch`, a
KernelLaunch, and declares none of its fields itself; launch.json is written from that record, and plan.json shows the
header's fields at the plan's top level, the same keys in every family's."""
from __future__ import annotations

import dataclasses
import json
import re

import pytest

from conftest import ROOT, spec_files
from schedgen import families
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan, to_dict
from schedgen.plan.launch import KernelLaunch, launch_record

HEADER = tuple(f.name for f in dataclasses.fields(KernelLaunch))


def _plan(path):
    spec, src = load_spec(str(path))
    return spec, plan(spec, src)


def _plans(p):
    """The plan and the plans it holds (grouped and collective matmul keep one step's matmul plan as `mm`)."""
    yield p
    if dataclasses.is_dataclass(getattr(p, "mm", None)):
        yield p.mm


@pytest.mark.parametrize("path", spec_files(), ids=lambda p: p.stem)
def test_every_plan_holds_its_launch_header_once(path):
    spec, p = _plan(path)
    assert p.launch.family == spec.op.kind and families.of(p).kind == spec.op.kind
    for q in _plans(p):
        assert isinstance(q.launch, KernelLaunch)
        own = {f.name for f in dataclasses.fields(q)}
        # no field of the header redeclared, nor aliased by a property of the plan class
        assert not own & set(HEADER), sorted(own & set(HEADER))
        assert not [n for n in HEADER if hasattr(type(q), n)], type(q).__name__


@pytest.mark.parametrize("path", spec_files(), ids=lambda p: p.stem)
def test_launch_json_is_written_from_the_header(path):
    _, p = _plan(path)
    h, rec = p.launch, launch_record(p)
    assert (rec.name, rec.family, rec.kernel_name, rec.backends, rec.threads, rec.smem_bytes, rec.num_blocks,
            rec.auto_blocks, rec.blocks_per_sm, rec.cluster, rec.sizes, rec.ring, rec.target) == (
        h.name, h.family, h.kernel_name, h.backends, h.threads, h.smem_bytes, h.num_blocks, h.auto_blocks,
        h.blocks_per_sm, h.cluster_dims, h.dynamic_sizes, h.ring, h.target)
    assert len(rec.kernel_args) == len(h.kernel_args)
    assert (rec.ring is not None) == families.of(p).multi_device


@pytest.mark.parametrize("path", spec_files(), ids=lambda p: p.stem)
def test_plan_json_shows_the_header_at_the_top(path):
    _, p = _plan(path)
    data = json.loads(json.dumps(to_dict(p)))
    assert "launch" not in data
    shown = {n for n in HEADER if not (n in ("target", "ring") and getattr(p.launch, n) ==
                                       KernelLaunch.__dataclass_fields__[n].default)}
    assert shown <= set(data), sorted(shown - set(data))
    assert data["kernel_name"] == p.launch.kernel_name and data["threads"] == p.launch.threads


def test_no_plan_is_asked_whether_it_has_a_header_field():
    """No getattr / hasattr on a plan for a header field in schedgen/ or bench/: the header is always there. (The
    registry's `families.of` takes a plan, a record, a spec or an op: it looks for `.launch` to tell a plan.)"""
    names = "|".join(HEADER + ("send_to",))
    pattern = re.compile(rf"(getattr|hasattr)\(([a-z_]+(\[[0-9]\])?\.)*(plan|p|mm)\b[^,]*, [\"']({names})[\"']")
    found = [f"{path.relative_to(ROOT)}:{i}" for root in ("schedgen", "bench") for path in (ROOT / root).rglob("*.py")
             for i, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []
