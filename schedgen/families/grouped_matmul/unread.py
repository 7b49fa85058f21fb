"""Schedule fields the grouped kernel does not read beyond the matmul family's own (its one-group product is the
matmul family's kernel, whose planner reports those: schedgen/families/matmul/unread.py)."""
from __future__ import annotations

from ...plan.unread import Unread, UnreadTable

IN_SPEC = (
    Unread(("out_of_bounds",), lambda b: b.out_of_bounds != "reject",
           "a group's tiles always load zero-padded edges (its rows past the group's end belong to the next group or "
           "are zero-filled past T, and are never stored; the K and N edges are zero-filled by TMA)",
           "reject (the default)"),
)

TABLE = UnreadTable("grouped_matmul", in_spec=IN_SPEC)
