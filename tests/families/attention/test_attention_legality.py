"""The attention planner's rules that schedgen/plan/legality.py states once for every family: each message, whole
and at its field (file:line:col of the spec's text)."""
from __future__ import annotations

import pytest

from conftest import SPECS_DIR
from schedgen.errors import SpecErrors
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan

BASE = SPECS_DIR / "attention_bf16_4096.yaml"
CUDA = {"schedule.backends": ["cuda"]}
SIZES = {"B": 1, "S": 4096, "H": 16, "D": 128}


def _lines(ov):
    spec, src = load_spec(str(BASE), ov)
    with pytest.raises(SpecErrors) as info:
        plan(spec, src)
    return [line[line.index(".yaml:") + 6:] for line in info.value.lines()]


@pytest.mark.parametrize("ov, want", [
    # the shared SMEM wording: every buffer of the SMEM map (they add up, with the 1 KiB slack, to the total)
    ({**CUDA, "schedule.pipeline.max_concurrent_steps": 4},
     ["26:60: schedule.pipeline.max_concurrent_steps: SMEM needed is 296080 B (q 32768 B, k 131072 B, v 131072 B, "
      "q_full 8 B, q_empty 8 B, k_full 32 B, k_empty 32 B, v_full 32 B, v_empty 32 B), over the NVIDIA H200's "
      "232448 B per block; use fewer stages or a smaller block_kv"]),
    # setmaxnreg with the two nearest legal counts; the Pallas kernel's plgpu.set_max_registers says its own
    ({"schedule.backends": ["cuda", "pallas"], "schedule.pipeline.compute_registers": 236},
     ["26:124: schedule.pipeline.compute_registers: setmaxnreg takes a multiple of 8 registers, got 236; use 232 or 240",
      "26:124: schedule.pipeline.compute_registers: plgpu.set_max_registers takes a multiple of 8 registers, got 236; "
      "use 232 or 240; or set schedule.backends: [cuda]"]),
    ({**CUDA, "schedule.pipeline.compute_registers": 256},
     ["26:124: schedule.pipeline.compute_registers: register budgets 24 + 2 x 256 need 68608 registers; a block of "
      "384 threads holds 64512 (at most 240 per consumer with 24 for the producer)"]),
    ({**CUDA, "schedule.persistent.loop": "dynamic", "schedule.pipeline.memory_registers": 24},
     ["26:101: schedule.pipeline.memory_registers: the producer of a dynamic persistent grid claims its tiles from a "
      "counter and needs 32 registers (24 spill); give memory_registers: 32 and at most 232 compute_registers"]),
    ({**CUDA, "schedule.cluster": [2]},
     ["22:3: schedule.cluster: attention CTAs share no operand here; use cluster: [1]"]),
    ({**CUDA, "op.sizes": {**SIZES, "make": 3}},
     ["13:10: op.sizes.make: 'make' is reserved by the generated module; choose another name"]),
    ({**CUDA, "op.outputs": {"S": {"shape": ["B", "S", "H", "D"], "dtype": "bf16"}}},
     ["19:5: op.outputs.S: name 'S' is already used in op.sizes"]),
])
def test_shared_rules_located(ov, want):
    assert _lines(ov) == want



@pytest.mark.parametrize("path", [BASE, SPECS_DIR / "attention_bf16_4096_sm100_pallas.yaml"], ids=["sm_90a", "sm_100a"])
def test_in_spec_rules_are_the_same_on_both_targets(path):
    """attention/in_specs.py: one check of q / k / v blocks for the sm_90a and sm_100a planners (v with k's rows,
    [rows, head_dim], no index_map, no in_spec for a name that is not an input), each at its field."""
    ov = {"schedule.in_specs.v.block_shape": [64, 128], "schedule.in_specs.q.index_map": "lambda i, j: (i, j)",
          "schedule.in_specs.k.block_shape": [128, 64], "schedule.in_specs.bias": {"block_shape": [128, 128]}}
    spec, src = load_spec(str(path), ov)
    with pytest.raises(SpecErrors) as info:
        plan(spec, src)
    lines = [line.split(": ", 1)[1] for line in info.value.lines()]
    for want in ("schedule.in_specs.q.index_map: attention derives its index maps from the tile order; remove "
                 "index_map",
                 "schedule.in_specs.k.block_shape: a block is [rows, head_dim] = [..., 128]",
                 "schedule.in_specs.v.block_shape[0]: v's block has k's 128 rows",
                 "schedule.in_specs.bias: no input named 'bias'; inputs are q, k, v"):
        assert want in lines, (want, lines)
