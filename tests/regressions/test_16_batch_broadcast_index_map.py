"""Issue 16 (found with section 2's column broadcasts): a map operand of extent 1 along a dimension whose output
block is also 1 ([1, M, 1] in a [B, M, N] body with blocks [1, bm, bn]) got the default index map (i, j, 0), which
sends every batch to its own block of the one-batch operand; the planner's own check then refused the default it
had written ("sends grid point (1, 0, 0) to block (1, 0, 0) ... the body reads block (0, 0, 0)"). A broadcast
dimension (block 1 over extent 1) indexes block 0 whatever the output block, as the check wants."""
from __future__ import annotations

from conftest import ROOT
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan

SPEC = ROOT / "tests" / "data" / "edge" / "col_row_full.yaml"
BATCHED = {"op.sizes": {"B": 2, "M": 200, "N": 640}, "op.inputs.x.shape": ["B", "M", "N"],
           "op.outputs.o.shape": ["B", "M", "N"], "op.outputs.r.shape": ["B", "M", "N"],
           "schedule.out_specs.o.block_shape": [1, 40, 128], "schedule.out_specs.r.block_shape": [1, 40, 128]}


def test_one_batch_operand_indexes_block_zero():
    for shape, want in (([1, "M", 1], "(0, j, 0)"), ([1, "M", "N"], "(0, j, k)"), ([1, 1, "N"], "(0, 0, k)")):
        p = plan(*load_spec(str(SPEC), {**BATCHED, "op.inputs.w.shape": shape}))
        assert {o.name: o.index_map for o in p.inputs}["w"] == want, shape


def test_full_operands_keep_their_grid_names():
    p = plan(*load_spec(str(SPEC), BATCHED))
    assert {o.name: o.index_map for o in p.inputs} == {"x": "(i, j, k)", "s": "(j, 0)", "b": "(k,)", "w": "(j, k)"}
