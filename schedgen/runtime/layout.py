"""Strided operands: which arrays a kernel may take as strided views, and the tensor maps over them.

A kernel reads or writes an operand either through tensor maps (TMA: the launch record's "tmap" arguments) or
through its raw pointer ("ptr": the kernel computes addresses from the dense shape). An operand reached through
tensor maps only (`tmap_only`) may be any strided view that TMA can address: its innermost dimension contiguous
(stride 1), every stride of the tensor map a positive multiple of 16 bytes (and the base address 16-byte aligned,
checked with the pointer): a fused QKV projection's q, k and v (`qkv[:, :, 0]` of a [B, S, 3, H, D] tensor, or a
head range of `qkv.view(B, S, H + 2 * Hkv, D)`), a column block of a wider matrix. Its tensor maps are encoded over
the array's own strides, no copy. An operand that any "ptr" argument reaches stays C-contiguous (the kernel is not
given strides).

A tensor map is a view of the dense operand (the planner's shape and byte strides, e.g. attention's [B, S, H*D] of a
[B, S, H, D] array): `tmap_strides` re-expresses it over the array's real strides, which works when each of the
map's dimensions lies within a run of the array's dimensions that address memory as one (stride[j] ==
shape[j + 1] * stride[j + 1]); anything else is a located ArgumentError saying what TMA needs. An output must not
overlap itself (two elements at one address would be a race between the kernel's stores).
"""
from __future__ import annotations

from typing import Any, Sequence

from ..plan import dims
from .arrays import ArgumentError

TMA_RULE = ("TMA needs the innermost dimension contiguous (stride 1), every other stride a positive multiple of 16 "
            "bytes and the base address 16-byte aligned")


def tmap_only(record: Any) -> tuple[bool, ...]:
    """Per operand (inputs, then outputs): whether the kernel reaches it through tensor maps only, so that a strided
    view of it is legal."""
    kinds: list[set] = [set() for _ in record.operands]
    for a in record.kernel_args:
        if a.kind in ("tmap", "ptr") and 0 <= a.operand < len(kinds):
            kinds[a.operand].add(a.kind)
    return tuple(k == {"tmap"} for k in kinds)


def _hint(name: str) -> str:
    return f"make it contiguous first: {name.removeprefix('out[').removesuffix(']')}.contiguous()"


def check_strides(name: str, shape: Sequence[int], strides: Sequence[int], *, output: bool) -> None:
    """The rules on an array's own element strides whatever the tensor map: no negative or zero stride on a
    dimension of more than one element, the innermost dimension contiguous, and no overlap for an output."""
    for i, (d, s) in enumerate(zip(shape, strides)):
        if d != 1 and s <= 0:
            what = "a reversed view" if s < 0 else "a broadcast (expanded) view"
            raise ArgumentError(f"{name}: dimension {i} has stride {s} ({what}, strides {tuple(strides)}); "
                                f"{TMA_RULE}; {_hint(name)}")
    if shape and shape[-1] != 1 and strides[-1] != 1:
        raise ArgumentError(f"{name}: its innermost dimension has stride {strides[-1]}, not 1 (a transposed view? "
                            f"strides {tuple(strides)}); {TMA_RULE}; {_hint(name)}")
    if output and _overlaps(_groups(shape, strides)):
        raise ArgumentError(f"{name}: strides {tuple(strides)} make elements of shape {tuple(shape)} share "
                            f"addresses; an output the kernel writes must not overlap itself; {_hint(name)}")


def _groups(shape: Sequence[int], strides: Sequence[int]) -> list[list[int]]:
    """Runs of dimensions that address memory as one, innermost first, as [dense stride, extent, real stride] in
    elements (dimensions of one element skipped: their stride is never used)."""
    groups: list[list[int]] = []
    dense = 1
    for d, s in zip(reversed(shape), reversed(strides)):
        if d != 1:
            if groups and s == groups[-1][1] * groups[-1][2]:
                groups[-1][1] *= d
            else:
                groups.append([dense, d, s])
        dense *= d
    return groups


def _overlaps(groups: list[list[int]]) -> bool:
    """Two elements at one address: each run, by real stride, must start past the one below it ends."""
    runs = sorted((g[2], g[1]) for g in groups)
    return any(s < ps * pd for (ps, pd), (s, _) in zip(runs, runs[1:]))


def tmap_strides(name: str, shape: Sequence[int], strides: Sequence[int], itemsize: int,
                 tshape: Sequence[int], tstrides: Sequence[int]) -> tuple[int, ...]:
    """The byte strides of a tensor map of extents `tshape` and dense byte strides `tstrides` (the planner's, over
    the C-contiguous operand of `shape`) over an array of these element `strides`; ArgumentError when the map
    cannot be expressed over them (see the module docstring)."""
    groups = _groups(shape, strides)
    used = [0] * len(groups)
    out = []
    for k, (n, tb) in enumerate(zip(tshape, tstrides)):
        if n == 1:
            out.append(int(tb))      # never stepped: the planned stride stays (a legal one)
            continue
        t = int(tb) // itemsize
        g = next((j for j, (c, d, _) in enumerate(groups) if c <= t < c * d), None)
        if g is None or t % groups[g][0]:
            raise _unjoined(name, shape, strides, tshape, tstrides, itemsize, k)
        used[g] += (n - 1) * t
        real = t // groups[g][0] * groups[g][2] * itemsize
        if k < len(tshape) - 1 and real % 16:
            raise ArgumentError(f"{name}: the kernel's tensor map over it (extents {tuple(tshape)}) would step "
                                f"{real} bytes in its dimension {k} (strides {tuple(strides)} elements of "
                                f"{itemsize} B); {TMA_RULE}; {_hint(name)}")
        if k == len(tshape) - 1 and real != itemsize:
            raise ArgumentError(f"{name}: the kernel's tensor map over it (extents {tuple(tshape)}) reads its "
                                f"innermost dimension with stride {real // itemsize}, not 1 (strides "
                                f"{tuple(strides)}); {TMA_RULE}; {_hint(name)}")
        out.append(real)
    for g, (c, d, _) in enumerate(groups):
        if used[g] >= c * d:
            k = next(k for k, (n, tb) in enumerate(zip(tshape, tstrides)) if n > 1 and c <= tb // itemsize < c * d)
            raise _unjoined(name, shape, strides, tshape, tstrides, itemsize, k)
    return tuple(out)


def _unjoined(name: str, shape: Sequence[int], strides: Sequence[int], tshape: Sequence[int],
              tstrides: Sequence[int], itemsize: int, k: int) -> ArgumentError:
    """The tensor map's dimension k spans dimensions of the array that its strides do not join."""
    t, n = int(tstrides[k]) // itemsize, int(tshape[k])
    dense, spans = 1, []
    for j in reversed(range(len(shape))):
        if shape[j] != 1 and dense <= (n - 1) * t and dense * shape[j] > t:
            spans.append(j)
        dense *= shape[j]
    lo, hi = (min(spans), max(spans)) if spans else (0, len(shape) - 1)
    return ArgumentError(
        f"{name}: the kernel's tensor map reads it as extents {tuple(tshape)} (dense strides "
        f"{tuple(s // itemsize for s in tstrides)}), whose dimension {k} spans its dimensions {lo}..{hi} (shape "
        f"{tuple(shape[lo:hi + 1])}), which strides {tuple(strides)} do not join (stride[j] must equal shape[j+1] x "
        f"stride[j+1] there); only dimensions the map keeps apart may be strided; {_hint(name)}")


def operand_tmaps(record: Any, operand: int, strides: Sequence[int], sizes: dict) -> dict[int, tuple[int, ...]]:
    """kernel-arg index -> byte strides of each tensor map over operand `operand` (an index into inputs + outputs)
    when the array has these element strides, at these sizes; ArgumentError naming the argument when TMA cannot
    address it."""
    o = record.operands[operand]
    output = operand >= len(record.inputs)
    name = f"out[{o.name}]" if output else o.name
    shape = tuple(d if isinstance(d, int) else int(sizes[d]) for d in o.shape)
    strides = tuple(int(s) for s in strides)
    if len(strides) != len(shape):
        raise ArgumentError(f"{name}: {len(strides)} strides for a shape of rank {len(shape)}")
    check_strides(name, shape, strides, output=output)
    found: dict[int, tuple[int, ...]] = {}
    for i, a in enumerate(record.kernel_args):
        if a.kind == "tmap" and a.operand == operand:
            tshape = tuple(int(dims.evaluate(d, sizes)) for d in a.shape)
            tstrides = tuple(int(dims.evaluate(d, sizes)) for d in a.strides)
            found[i] = tmap_strides(name, shape, strides, o.itemsize, tshape, tstrides)
    return found
