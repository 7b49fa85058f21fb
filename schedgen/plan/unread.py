"""Schedule fields a family's kernels do not read: each family declares a table (`UnreadTable`), and every field in
it that a spec sets to a value other than its default is a located error naming the field, what the kernels do
instead and what is legal (a spec must not say something its kernel does not do).

Three kinds of entries: fields neither backend's template nor the planner reads (schedule-wide, on an input's or an
output's BlockSpec, on a named barrier), Mosaic GPU compiler parameters that only the Pallas rendering reads,
reported when schedule.backends has no pallas, and fields only the CUDA kernel reads (num_warpgroups of the map and
rowwise kernels), reported when it has no cuda. The entries several families share are defined here; a family's own
live in its folder (e.g. families/attention/unread.py).

A field a family's schedule model does not have is not here: it is an unknown key where it is written (the spec is a
union on op.kind, frontend/specfile.py). What stays is what a model cannot say: a field of the core schedule (or of a
shared group) that this family's kernels ignore, a field one backend ignores, and a value ignored in some mode
(planar_snake's shape without planar_snake, num_blocks with loop: none)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple

from .common import Problems


class Unread(NamedTuple):
    path: tuple                       # under the owner (schedule, a BlockSpec, a Barrier)
    is_set: Callable[[Any], bool]     # the owner -> the spec sets a value the kernels would ignore
    why: str                          # what the kernels do instead
    legal: str
    sm100: tuple[str, str] | None = None   # (why, legal) on sm_100a, where the Hopper ones speak of wgmma


def _said(u: Unread, sch) -> str:
    """What the spec's target's kernels do instead of reading the field, and what is legal there."""
    why, legal = u.sm100 if u.sm100 is not None and sch.target == "sm_100a" else (u.why, u.legal)
    return f"{why}; legal: {legal}"


@dataclass(frozen=True)
class UnreadTable:
    family: str                                   # as the messages name it ("the cuda and pallas <family> kernels")
    schedule: tuple[Unread, ...] = ()
    in_spec: tuple[Unread, ...] = ()              # on every input's BlockSpec
    out_spec: tuple[Unread, ...] = ()             # on every output's BlockSpec
    barriers: Mapping[str, tuple[Unread, ...]] = None   # on the barrier of that name
    pallas_only: tuple[Unread, ...] = ()          # read by the Pallas kernel only: errors without pallas
    pallas_only_block: tuple[Unread, ...] = ()    # the same, on every operand's BlockSpec
    cuda_only: tuple[Unread, ...] = ()            # read by the CUDA kernel only: errors without cuda


# ---- entries several families share

def _cp(s):
    return s.compiler_params


PALLAS_COMPILER_PARAMS = (
    Unread(("compiler_params", "lowering_semantics"), lambda s: _cp(s).lowering_semantics != "warpgroup",
           "lowering_semantics is Mosaic GPU's lowering mode", "leave it out, or add pallas to schedule.backends"),
    Unread(("compiler_params", "unsafe_no_auto_barriers"), lambda s: _cp(s).unsafe_no_auto_barriers,
           "unsafe_no_auto_barriers turns off Mosaic GPU's automatic barriers; the CUDA kernel places its own",
           "false (the default)"),
)

# written (not picked: a planner's pick keeps model_fields_set as the user wrote it) with no cuda backend: the
# Pallas map and rowwise kernels read no thread count, so the field would change nothing but the kernel's name
CUDA_WARPGROUPS = (
    Unread(("num_warpgroups",), lambda s: "num_warpgroups" in s.model_fields_set,
           "it sets the CUDA kernel's warpgroups (128 threads each, 1 to 4); the Pallas kernel's block is Mosaic "
           "GPU's and reads no thread count",
           "leave it out, or add cuda to schedule.backends"),
)

PLANAR_SNAKE_ONLY = (
    Unread(("persistent", "minor_dim"),
           lambda s: s.persistent.minor_dim != 0 and s.persistent.tile_order != "planar_snake",
           "it shapes the planar_snake tile order, and persistent.tile_order is not planar_snake",
           "leave it out, or set persistent.tile_order: planar_snake"),
    Unread(("persistent", "tile_width"),
           lambda s: s.persistent.tile_width != 1 and s.persistent.tile_order != "planar_snake",
           "it shapes the planar_snake tile order, and persistent.tile_order is not planar_snake",
           "leave it out, or set persistent.tile_order: planar_snake"),
)

ONE_BLOCK_A_TILE = (
    Unread(("persistent", "num_blocks"), lambda s: s.persistent.loop == "none" and s.persistent.num_blocks != "auto",
           "with persistent.loop: none the grid is one block a tile", "auto (the default), or a persistent loop"),
)

OUTPUT_DELAY_RELEASE = (
    Unread(("delay_release",), lambda b: b.delay_release != 0,
           "delay_release keeps an input's pipeline stage for more steps; an output block is written, not released",
           "0 (the default)"),
)

NO_GRID = (
    Unread(("grid",), lambda s: s.grid is not None,
           "the planner sizes the (persistent) grid from the tiles and persistent.num_blocks", "leave grid out"),
)


def _field(path: tuple) -> str:
    return ".".join(str(p) for p in path)


def _blocks(sch, inputs, outputs):
    """(group, name, BlockSpec) of every operand's BlockSpec (names that are no operand: the planner's to report)."""
    for group, names in (("in_specs", inputs), ("out_specs", outputs)):
        for n, bs in getattr(sch, group).items():
            if n in names:
                yield group, n, bs


def check_unread(sch, table: UnreadTable, inputs, outputs, problems: Problems) -> None:
    """Report every field of `table` that the spec sets to a value the kernels would ignore."""
    both = f"the cuda and pallas {table.family} kernels do not read"
    if sch.target == "sm_100a":    # not every backend renders every family there (attention: pallas only)
        kernels = " and ".join(sch.backends)
        both = f"the sm_100a {kernels} {table.family} kernel{'s' if len(sch.backends) > 1 else ''} " \
               f"do{'' if len(sch.backends) > 1 else 'es'} not read"
    for u in table.schedule:
        if u.is_set(sch):
            problems.add(("schedule", *u.path), f"{both} {_field(u.path)}: {_said(u, sch)}")
    for group, n, bs in _blocks(sch, inputs, outputs):
        for u in table.in_spec if group == "in_specs" else table.out_spec:
            if u.is_set(bs):
                problems.add(("schedule", group, n, *u.path),
                             f"{both} a block's {_field(u.path)}: {_said(u, sch)}")
    for bname, entries in (table.barriers or {}).items():
        bar = sch.barriers.get(bname)
        for u in entries if bar is not None else ():
            if u.is_set(bar):
                problems.add(("schedule", "barriers", bname, *u.path),
                             f"{both} the {bname} barrier's {_field(u.path)}: {_said(u, sch)}")
    if "pallas" not in sch.backends:
        _check_pallas_only(sch, table, inputs, outputs, problems)
    if "cuda" not in sch.backends:
        for u in table.cuda_only:
            if u.is_set(sch):
                problems.add(("schedule", *u.path), f"the pallas backend does not read {u.path[-1]}: {u.why}; "
                                                    f"legal: {u.legal}")


def _check_pallas_only(sch, table: UnreadTable, inputs, outputs, problems: Problems) -> None:
    for u in table.pallas_only:
        if u.is_set(sch):
            problems.add(("schedule", *u.path), f"the cuda backend does not read {u.path[-1]}: {u.why}; "
                                                f"legal: {u.legal}")
    for group, n, bs in _blocks(sch, inputs, outputs):
        for u in table.pallas_only_block:
            if u.is_set(bs):
                problems.add(("schedule", group, n, *u.path), f"the cuda backend does not read a block's "
                                                              f"{_field(u.path)}: {u.why}; legal: {u.legal}")
