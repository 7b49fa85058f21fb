"""The map planner's rules that schedgen/plan/legality.py states once for every family: each message, whole and at
its field (file:line:col of the spec's text)."""
from __future__ import annotations

import pytest

from conftest import SPECS_DIR
from schedgen.errors import SpecErrors
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan

BASE = SPECS_DIR / "add_bf16.yaml"


def _lines(ov):
    spec, src = load_spec(str(BASE), ov)
    with pytest.raises(SpecErrors) as info:
        plan(spec, src)
    return [line[line.index(".yaml:") + 6:] for line in info.value.lines()]


@pytest.mark.parametrize("ov, want", [
    ({"schedule.cluster": [1, 2]},
     ["15:3: schedule.cluster: the map family shares no operand between blocks, so there is nothing to multicast; "
      "use cluster: [1]"]),
    ({"op.constants": {"M": 1.0}}, ["6:3: op.constants.M: name 'M' is already used in op.sizes"]),
    ({"op.sizes.N": 2**31},
     ["7:23: op.sizes.N: size 2147483648 does not fit the kernel's 32-bit int index math (at most 2147483647)"]),
    ({"op.inputs.interpret": {"shape": ["M", "N"], "dtype": "bf16"}},
     ["9:5: op.inputs.interpret: 'interpret' is reserved: it is a parameter of the generated function (input names "
      "become the parameters of `def add_bf16(...)` in the generated Pallas module and package); choose another "
      "name"]),
    ({"schedule.pipeline.max_concurrent_steps": 16},
     ["22:57: schedule.pipeline.max_concurrent_steps: SMEM needed is 558208 B (in_x 262144 B, in_y 262144 B, "
      "out_o 32768 B, full 128 B), over the NVIDIA H200's 232448 B per block; use fewer stages or smaller blocks"]),
])
def test_shared_rules_located(ov, want):
    assert _lines(ov) == want


def test_grid_names_share_the_ops_namespace():
    """check_unique_names' name -> group map names the group that took a grid name (the index maps that use the
    renamed grid are reported after it)."""
    lines = _lines({"schedule.grid_names": ["i", "M"]})
    assert lines[0] == "15:15: schedule.grid_names: grid name 'M' is already used in op.sizes"
    assert sum("already used" in line for line in lines) == 1



def test_an_output_of_higher_rank_is_located_not_a_crash():
    """A second output of a higher rank than the first (the iteration space) is reported at its shape; planning
    stops before the operands (it raised IndexError there: tests/frontend/test_fuzz.py's document, kept here)."""
    from schedgen.errors import SourceMap
    from schedgen.frontend.validate import validate_data
    doc = {"name": "x", "op": {"kind": "map", "body": "o = x", "inputs": {"x": {"shape": [1], "dtype": "bf16"}},
                               "outputs": {"o": {"shape": [1], "dtype": "bf16"},
                                           "y": {"shape": [1, 1], "dtype": "bf16"}}}}
    src = SourceMap("<doc>")
    with pytest.raises(SpecErrors) as info:
        plan(validate_data(doc, src), src)
    assert any("op.outputs.y.shape: all outputs must have one shape (1,), got (1, 1)" in ln
               for ln in info.value.lines()), info.value.lines()
