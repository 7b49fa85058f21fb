"""Combinations of legal field values. test_every_field changes one field at a time; the crashes found since came
from two fields together (a second output of another rank with no out_specs, session 14; the attention backward's
pick with a written block, session 13). Here two or three of the values test_every_field tries, on different
fields of one bundled spec, each of which plans alone, must plan and render on every backend, or fail with located
problems only (a first campaign, 2026-12-06: 2,414 of 2,436 pairs and triples planned, 22 located errors, no crash).

The Pallas kernels of such combinations must also lower through Mosaic GPU for CUDA on the CPU (the interpreter
checks no layouts or SMEM): a first campaign of 140 lowerings (2026-12-06) found five limits of jax 0.11.2 that the
planner did not know (tests/build/test_pallas_lowers.py: REFUSED).

CI: derandomized, 100 examples and 4 lowerings (about 10 and 15 s on 2 cores); --slow: 300 and 12;
`SCHEDGEN_FUZZ=long`: 20,000 and 1,000, random seeds."""
from __future__ import annotations

import functools
import os

from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

from conftest import fuzz_examples
from schedgen.errors import SpecErrors
from schedgen.frontend.load import load_file
from schedgen.frontend.validate import validate_data
from schedgen.plan import plan
from test_every_field import SPECS, _assign, products, spec_mutations

LONG = os.environ.get("SCHEDGEN_FUZZ", "") == "long"
FIELDS_EXAMPLES = fuzz_examples(100, 300, 20_000)
LOWER_EXAMPLES = fuzz_examples(4, 12, 1_000)


@functools.cache
def _spec(path):
    """The file's data, its source map, and the values test_every_field tries that plan on their own (about one in
    five: the others are its out-of-range and illegal values, which fail located by themselves)."""
    data, src = load_file(str(path))
    legal = []
    for m in spec_mutations(validate_data(data, src)):
        try:
            plan(validate_data(_assign(data, m), src), src)
        except SpecErrors:
            continue
        legal.append(m)
    return data, src, tuple(legal)


@st.composite
def combinations(draw, least: int = 2, one_device: bool = False):
    """`least` to 3 legal values on different fields of one bundled spec (a multi-device one too, unless
    `one_device`): (the file's name, its data with them, its source map, the values)."""
    specs = [p for p in SPECS if not (one_device and "collective" in p.name)]
    path = draw(st.sampled_from(specs), label="spec")
    data, src, muts = _spec(path)
    chosen = draw(st.lists(st.sampled_from(muts), min_size=least, max_size=3, unique_by=lambda m: m.path[:3]),
                  label="fields")
    for m in chosen:
        data = _assign(data, m)
    return path.name, data, src, chosen


@settings(max_examples=FIELDS_EXAMPLES, deadline=None, derandomize=not LONG, print_blob=LONG,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=combinations())
def test_legal_values_of_several_fields_plan_and_render_or_fail_located(case):
    name, data, src, chosen = case
    note(f"{name}: " + ", ".join(f"{m.field}={m.value!r}" for m in chosen))
    try:
        p = plan(validate_data(data, src), src)
    except SpecErrors as exc:
        lines = exc.lines()
        assert lines and all(line.startswith(f"{src.file}:") for line in lines), lines
        assert all(p.path or p.pos is not None for p in exc.problems), lines
        return
    got = products(p)                       # every backend renders, and the launch record is written
    assert set(got) == set(p.launch.backends) and all(got.values())


def test_the_strategy_reaches_specs_that_plan():
    # not a fuzz of nothing: every spec has legal values to combine, and most pairs of them plan (a strategy whose
    # every draw is rejected would test only the error path)
    assert all(len(_spec(path)[2]) >= 20 for path in SPECS)
    data, src, muts = _spec(SPECS[0])
    pairs = [(a, b) for a, b in zip(muts[::3], muts[1::3]) if a.path[:3] != b.path[:3]]
    planned = 0
    for a, b in pairs:
        try:
            plan(validate_data(_assign(_assign(data, a), b), src), src)
            planned += 1
        except SpecErrors:
            pass
    assert len(pairs) >= 5 and planned >= 0.8 * len(pairs), (planned, len(pairs))


@settings(max_examples=LOWER_EXAMPLES, deadline=None, derandomize=not LONG, print_blob=LONG,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(case=combinations(least=1, one_device=True))   # the Hopper Pallas plans among them (assume below)
def test_legal_values_that_plan_for_pallas_lower_through_mosaic_gpu(case):
    import tempfile
    from pathlib import Path

    from conftest import lower_map_for_cuda
    name, data, src, chosen = case
    note(f"{name}: " + ", ".join(f"{m.field}={m.value!r}" for m in chosen))
    try:
        p = plan(validate_data(data, src), src)
    except SpecErrors:
        assume(False)
    assume("pallas" in p.launch.backends and p.launch.target == "sm_90a")
    with tempfile.TemporaryDirectory() as tmp:
        assert "mosaic_gpu" in lower_map_for_cuda(data, Path(tmp))
