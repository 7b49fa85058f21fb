"""The checks of attention's in_specs that both targets' planners share (plan.py for sm_90a, blackwell.py for
sm_100a): every block is [rows, head_dim], v's block has k's rows, no index maps (attention derives them from the
tile order), no in_spec for a name that is not an input."""
from __future__ import annotations

from ...plan.common import Problems
from .records import Names


def check_in_specs(sch, names: Names, d: int, block_kv: int, problems: Problems) -> None:
    """Adds a located problem for each in_spec that breaks one of the rules above."""
    for n in names.inputs:
        bs = sch.in_specs.get(n)
        if bs is None:
            continue
        path = ("schedule", "in_specs", n, "block_shape")
        if len(bs.block_shape) != 2 or bs.block_shape[1] != d:
            problems.add(path, f"a block is [rows, head_dim] = [..., {d}]")
        if n == names.v and bs.block_shape[0] != block_kv:
            problems.add((*path, 0), f"v's block has k's {block_kv} rows")
        if bs.index_map is not None:
            problems.add(("schedule", "in_specs", n, "index_map"), "attention derives its index maps from the tile "
                                                                   "order; remove index_map")
    for n in sch.in_specs:
        if n not in names.inputs:
            problems.add(("schedule", "in_specs", n), f"no input named '{n}'; inputs are {', '.join(names.inputs)}")
