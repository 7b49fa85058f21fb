"""The launch record: the one contract between a built package and the code that runs it.

A package holds `launch.json` (this record) next to `plan.json` (the whole plan, for people and tools). The runtime
(schedgen/runtime/kernel.py, schedgen/runtime/multidevice.py) and the multi-device host (bench/multi_gpu.py) read
only this record, so a planner may rename or regroup its plan's fields freely as long as `launch_record` still builds
the same record. A change to the record's fields or meaning bumps `LAUNCH_VERSION`; `load` refuses any other version.

Fields (every one required in launch.json; unknown fields are refused):

- version: int                LAUNCH_VERSION.
- name: str                   the kernel's Python name (the package's function).
- family: str                 the family that planned it (map, matmul, attention, collective_matmul, grouped_matmul).
- kernel_name: str            the CUDA entry point in kernel.cubin.
- backends: [str]             what was built: "cuda" (kernel.cubin) and/or "pallas" (pallas_kernel.py).
- threads: int                threads per block; the launch's block is (threads, 1, 1).
- smem_bytes: int             dynamic shared memory per block (the function's max dynamic SMEM attribute too).
- num_blocks: Extent          the grid's x extent, (num_blocks, 1, 1); a multiple of cluster[0].
- auto_blocks: bool           a persistent grid: the runtime lowers num_blocks to what is resident at once.
- blocks_per_sm: int          blocks resident per SM that the plan's SMEM/registers allow (auto_blocks's bound).
- cluster: [int, int, int]    thread-block cluster dims; [1, 1, 1] launches without a cluster.
- sizes: [SizeRange]          the dynamic sizes (name, min, max, multiple_of), bound from the call's shapes.
- inputs, outputs: [Operand]  the kernel's arrays in call order (name, dtype, shape, itemsize, role); a shape
                              entry is an int or the name of a dynamic size.
- kernel_args: [Arg]          the CUDA kernel's parameters in order, see `Arg`.
- ring: Ring | null           the multi-device ring (collective kernels), null for one-GPU kernels.
- target: str                 the architecture kernel.cubin is built for: "sm_100a"; the one optional field, absent
                              for "sm_90a" (records written before Blackwell read the same). The runtime refuses a
                              GPU of another architecture.

An Extent is an int, a dynamic size's name, or [op, a, b] over extents (schedgen/plan/dims.py): the runtime
evaluates it at each call from the sizes it bound. A record with no dynamic size holds ints only.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from .. import boundedjson
from ..errors import shorten
from . import dims
from .dims import DimLike, SizeRange
from .hardware import TARGETS, target_field

LAUNCH_VERSION = 2
FILE_NAME = "launch.json"
ARG_KINDS = ("tmap", "ptr", "counter", "u32", "i32", "workspace")
DTYPES = ("bf16", "f16", "f32", "f8e4m3", "f8e5m2", "i32", "i64")   # i32 / i64: index operands (grouped_matmul
                                                                   # offsets, rowwise class indices)
COUNTER_BYTES = 8             # a "counter" argument: two u32, zero before the first launch (the kernel re-zeroes it)
WORKSPACE_ALIGN = 16          # a "workspace" argument's byte count is a multiple of this (memset in 32-bit words)


class LaunchRecordError(ValueError):
    """launch.json is missing, of another version, or malformed: the message names the file and the field."""


@dataclass(frozen=True)
class Operand:
    """One array of the kernel's call: its name, element type, shape, bytes per element, and role in the op."""
    name: str
    dtype: str
    shape: tuple[int | str, ...]   # an int, or the name of a dynamic size
    itemsize: int
    role: str


@dataclass(frozen=True)
class Arg:
    """One CUDA kernel parameter.

    kind "tmap": a TMA descriptor over operand `operand` (an index into inputs + outputs) or, in a ring, over the
    buffer `what`: element `dtype`, global `shape` and byte `strides` (numpy order), `box`, `swizzle` bytes, NaN
    fill out of bounds when `oob_nan`. kind "ptr": the raw device pointer of operand `operand` or buffer `what`.
    kind "counter": a COUNTER_BYTES buffer the runtime owns (a dynamic persistent grid's tile claims), one per
    device and stream. kind "u32": a 32-bit scalar the ring host fills, `what` = device (ring position) or epoch.
    kind "i32": a signed 32-bit scalar, the extent `value` evaluated at the call (a dynamic size, a tile count).
    kind "workspace": the device pointer of a scratch buffer of `value` bytes (an extent, a multiple of
    WORKSPACE_ALIGN) that the runtime allocates stream-ordered on the launch's stream, zeroes there just before the
    launch and frees after it (schedgen/runtime/driver.py, Workspace): under CUDA-graph capture these become the
    graph's allocation, memset and free nodes, so every replay starts from zeros. `zero` (omitted: -1, all of it):
    only the first `zero` bytes are zeroed, for a kernel that writes the rest before reading it.
    shape and strides of a tensor map are extents too."""
    kind: str
    operand: int = -1         # -1: not an operand (a counter, a workspace, or a ring argument named by `what`)
    what: str = ""            # a ring argument: lhs | gather | rhs | out | peer_gather | flags | peer_flags_* | ...
    dtype: str = ""
    shape: tuple[DimLike, ...] = ()
    strides: tuple[DimLike, ...] = ()
    box: tuple[int, ...] = ()
    swizzle: int = 0
    oob_nan: bool = False
    value: DimLike = 0
    zero: int = field(default=-1, metadata={"omit_default": True})   # a workspace: bytes zeroed from its start (-1: all)


@dataclass(frozen=True)
class Ring:
    """A multi-device kernel's ring: one launch per device, all at once.

    Ring position d sends to send_to[d] and receives from recv_from[d]. Each device holds lhs [m, k], rhs [k, n],
    out [m_total, n] (m_total = num_devices x m), a gather buffer of gather_bytes and flags of flags_bytes (zeroed
    once); `axis_name` is the Pallas mesh axis."""
    num_devices: int
    send_to: tuple[int, ...]
    recv_from: tuple[int, ...]
    m: int
    n: int
    k: int
    m_total: int
    in_dtype: str
    out_dtype: str
    gather_bytes: int
    flags_bytes: int
    axis_name: str


@dataclass(frozen=True)
class LaunchRecord:
    version: int
    name: str
    family: str
    kernel_name: str
    backends: tuple[str, ...]
    threads: int
    smem_bytes: int
    num_blocks: DimLike
    auto_blocks: bool
    blocks_per_sm: int
    cluster: tuple[int, int, int]
    sizes: tuple[SizeRange, ...]
    inputs: tuple[Operand, ...]
    outputs: tuple[Operand, ...]
    kernel_args: tuple[Arg, ...]
    ring: Ring | None
    target: str = target_field()

    @property
    def operands(self) -> tuple[Operand, ...]:
        return self.inputs + self.outputs

    @property
    def num_devices(self) -> int:
        return self.ring.num_devices if self.ring is not None else 1

    def operand(self, name: str) -> Operand:
        for o in self.operands:
            if o.name == name:
                return o
        raise KeyError(name)

    def by_role(self, role: str) -> Operand:
        return next(o for o in self.inputs if o.role == role)

    def to_dict(self) -> dict:
        return _plain(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)


# ------------------------------------------------------------------------------------------------ a plan's header

@dataclass(frozen=True)
class KernelLaunch:
    """The launch header every family's plan holds as `plan.launch`, built by its planner: how the kernel is named,
    built and launched. `launch_record` reads it (and the plan's operand records, `plan.inputs` / `plan.outputs`);
    templates read `p.launch.<field>`. plan.json shows these fields at the plan's top level (`inline_field`), the
    same keys in every family's plan.json (a package's `plan["kernel_name"]` reads as before).

    name, family, kernel_name, backends, threads, smem_bytes, num_blocks, auto_blocks, blocks_per_sm and target are
    the launch record's fields of those names; cluster_dims is its `cluster`, dynamic_sizes its `sizes`, ring its
    `ring`, kernel_args the plan's own argument records (KernelArg, or the collective plan's CollArg) that become
    its `kernel_args`."""
    name: str
    family: str
    kernel_name: str
    backends: tuple[str, ...]
    threads: int
    smem_bytes: int
    num_blocks: DimLike
    blocks_per_sm: int
    kernel_args: tuple[Any, ...]
    auto_blocks: bool = False
    cluster_dims: tuple[int, int, int] = (1, 1, 1)      # the thread-block cluster; (1, 1, 1): launched without one
    dynamic_sizes: tuple[SizeRange, ...] = ()           # the op's dynamic sizes, spec order
    ring: Ring | None = field(default=None, metadata={"omit_default": True})   # a multi-device plan's ring
    target: str = target_field()     # schedule.target: the architecture planned for (absent in plan.json: sm_90a)

    @property
    def dynamic(self) -> bool:
        """Whether the kernel takes sizes known only at the call (what templates branch on)."""
        return len(self.dynamic_sizes) > 0


def inline_field() -> Any:
    """A plan's `launch` field, or another record a plan is composed of (the GEMM plan's, schedgen/plan/gemm): plan.json
    (schedgen.plan.to_dict) writes the record's fields at the plan's level."""
    return field(metadata={"inline": True})


# ------------------------------------------------------------------------------------------------ from a plan

def _shape_entry(x: Any) -> int | str:
    if isinstance(x, dims.Dim):
        if x.op != "size":
            raise ValueError(f"an operand's shape entry is an int or a dynamic size, got the extent {x}")
        return str(x.args[0])
    return int(x)


def _extent(x: Any) -> DimLike:
    return x if isinstance(x, dims.Dim) else int(x)


def _operand(o: Any) -> Operand:
    return Operand(str(o.name), str(o.dtype), tuple(_shape_entry(x) for x in o.shape), int(o.itemsize), str(o.role))


def _arg(a: Any) -> Arg:
    # single-GPU plans' KernelArg name an operand; the collective plan's CollArg names a ring buffer (`what`) and
    # has no oob_nan (its tensor maps never read out of bounds)
    return Arg(kind=str(a.kind), operand=int(getattr(a, "operand", -1)), what=str(getattr(a, "what", "")),
               dtype=str(a.dtype), shape=tuple(_extent(x) for x in a.shape),
               strides=tuple(_extent(x) for x in a.strides), box=tuple(int(x) for x in a.box),
               swizzle=int(a.swizzle), oob_nan=bool(getattr(a, "oob_nan", False)),
               value=_extent(getattr(a, "value", 0)), zero=int(getattr(a, "zero", -1)))


def launch_record(plan: Any) -> LaunchRecord:
    """The launch record of a plan object (any family's): its header `plan.launch` and its operands."""
    h: KernelLaunch = plan.launch
    return LaunchRecord(
        version=LAUNCH_VERSION, name=str(h.name), family=str(h.family), kernel_name=str(h.kernel_name),
        backends=tuple(str(b) for b in h.backends), threads=int(h.threads), smem_bytes=int(h.smem_bytes),
        num_blocks=_extent(h.num_blocks), auto_blocks=bool(h.auto_blocks), blocks_per_sm=int(h.blocks_per_sm),
        sizes=tuple(h.dynamic_sizes), cluster=tuple(int(x) for x in h.cluster_dims),
        inputs=tuple(_operand(o) for o in plan.inputs), outputs=tuple(_operand(o) for o in plan.outputs),
        kernel_args=tuple(_arg(a) for a in h.kernel_args), ring=h.ring, target=str(h.target))


def _plain(obj: Any) -> Any:
    if isinstance(obj, dims.Dim):
        return dims.to_json(obj)
    if hasattr(obj, "__dataclass_fields__"):
        return {f.name: _plain(getattr(obj, f.name)) for f in fields(obj)
                if not (f.metadata.get("omit_default") and getattr(obj, f.name) == f.default)}
    if isinstance(obj, (list, tuple)):
        return [_plain(x) for x in obj]
    return obj


# ------------------------------------------------------------------------------------------------ from launch.json

class _Reader:
    def __init__(self, where: str):
        self.where = where

    def fail(self, path: str, message: str) -> LaunchRecordError:
        return LaunchRecordError(f"{self.where}: {path}: {message}" if path else f"{self.where}: {message}")

    def obj(self, data: Any, cls: type, path: str) -> dict:
        if not isinstance(data, Mapping):
            raise self.fail(path, f"must be an object, got {type(data).__name__}")
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise self.fail(f"{path}.{unknown[0]}" if path else unknown[0],
                            f"unknown field (fields: {', '.join(names)})")
        missing = [f.name for f in fields(cls) if f.name not in data and not f.metadata.get("omit_default")]
        if missing:
            raise self.fail(f"{path}.{missing[0]}" if path else missing[0], "missing")
        return dict(data)

    def int(self, v: Any, path: str, low: int = 0) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(path, f"must be an integer, got {shorten(v)}")
        if v < low:
            raise self.fail(path, f"must be >= {low}, got {v}")
        return v

    def bool(self, v: Any, path: str) -> bool:
        if not isinstance(v, bool):
            raise self.fail(path, f"must be true or false, got {shorten(v)}")
        return v

    def str(self, v: Any, path: str, choices: tuple[str, ...] | None = None, empty: bool = False) -> str:
        if not isinstance(v, str) or (not v and not empty):
            raise self.fail(path, f"must be a{'' if empty else ' non-empty'} string, got {shorten(v)}")
        if choices is not None and v not in choices:
            raise self.fail(path, f"{shorten(v)} is not one of {', '.join(choices)}")
        return v

    def list(self, v: Any, path: str) -> list:
        if not isinstance(v, list):
            raise self.fail(path, f"must be a list, got {type(v).__name__}")
        return v

    def ints(self, v: Any, path: str, low: int = 0) -> tuple[int, ...]:
        return tuple(self.int(x, f"{path}[{i}]", low) for i, x in enumerate(self.list(v, path)))

    def extent(self, v: Any, path: str, names: set[str]) -> DimLike:
        try:
            return dims.from_json(v, names, path)
        except ValueError as exc:
            raise self.fail("", str(exc)) from None

    def extents(self, v: Any, path: str, names: set[str]) -> tuple[DimLike, ...]:
        return tuple(self.extent(x, f"{path}[{i}]", names) for i, x in enumerate(self.list(v, path)))

    def size_range(self, v: Any, path: str) -> SizeRange:
        d = self.obj(v, SizeRange, path)
        r = SizeRange(name=self.str(d["name"], f"{path}.name"), min=self.int(d["min"], f"{path}.min", 1),
                      max=self.int(d["max"], f"{path}.max", 1), multiple_of=self.int(d["multiple_of"],
                      f"{path}.multiple_of", 1))
        if r.min > r.max:
            raise self.fail(path, f"min {r.min} is above max {r.max}")
        return r

    def operand(self, v: Any, path: str, names: set[str]) -> Operand:
        d = self.obj(v, Operand, path)
        shape = []
        for i, x in enumerate(self.list(d["shape"], f"{path}.shape")):
            if isinstance(x, str):
                if x not in names:
                    raise self.fail(f"{path}.shape[{i}]", f"{shorten(x)} is not a dynamic size of this kernel")
                shape.append(x)
            else:
                shape.append(self.int(x, f"{path}.shape[{i}]", 1))
        return Operand(name=self.str(d["name"], f"{path}.name"), dtype=self.str(d["dtype"], f"{path}.dtype", DTYPES),
                       shape=tuple(shape), itemsize=self.int(d["itemsize"],
                       f"{path}.itemsize", 1), role=self.str(d["role"], f"{path}.role"))

    def arg(self, v: Any, path: str, count: int, names: set[str]) -> Arg:
        d = self.obj(v, Arg, path)
        a = Arg(kind=self.str(d["kind"], f"{path}.kind", ARG_KINDS), operand=self.int(d["operand"],
                f"{path}.operand", -1), what=self.str(d["what"], f"{path}.what", empty=True),
                dtype=self.str(d["dtype"], f"{path}.dtype", empty=True),
                shape=self.extents(d["shape"], f"{path}.shape", names),
                strides=self.extents(d["strides"], f"{path}.strides", names), box=self.ints(d["box"], f"{path}.box"),
                swizzle=self.int(d["swizzle"], f"{path}.swizzle"), oob_nan=self.bool(d["oob_nan"],
                f"{path}.oob_nan"), value=self.extent(d["value"], f"{path}.value", names),
                zero=self.int(d["zero"], f"{path}.zero", -1) if "zero" in d else -1)
        if a.operand >= count:
            raise self.fail(f"{path}.operand", f"{a.operand} is not an operand (the kernel has {count})")
        if a.kind in ("tmap", "ptr") and a.operand < 0 and not a.what:
            raise self.fail(path, f"a {a.kind} argument names an operand or a ring buffer (`what`)")
        if a.kind == "workspace" and isinstance(a.value, int) and (a.value < WORKSPACE_ALIGN or
                                                                   a.value % WORKSPACE_ALIGN):
            raise self.fail(f"{path}.value", f"a workspace is a positive multiple of {WORKSPACE_ALIGN} bytes, got "
                                             f"{a.value}")
        if a.zero != -1 and (a.kind != "workspace" or a.zero < 4 or a.zero % 4 or
                             (isinstance(a.value, int) and a.zero > a.value)):
            raise self.fail(f"{path}.zero", f"a workspace's zeroed prefix is a positive multiple of 4 bytes, at most "
                                            f"its size (-1: all of it), got {a.zero}")
        if a.kind == "tmap":
            if a.dtype not in DTYPES:
                raise self.fail(f"{path}.dtype", f"{shorten(a.dtype)} is not one of {', '.join(DTYPES)}")
            if not (len(a.shape) == len(a.strides) == len(a.box) >= 1):
                raise self.fail(path, f"shape, strides and box of a tensor map have one entry per dimension, got "
                                      f"{len(a.shape)}, {len(a.strides)} and {len(a.box)}")
        return a

    def ring(self, v: Any, path: str) -> Ring | None:
        if v is None:
            return None
        d = self.obj(v, Ring, path)
        n = self.int(d["num_devices"], f"{path}.num_devices", 2)
        r = Ring(num_devices=n, send_to=self.ints(d["send_to"], f"{path}.send_to"),
                 recv_from=self.ints(d["recv_from"], f"{path}.recv_from"),
                 **{k: self.int(d[k], f"{path}.{k}", 1) for k in ("m", "n", "k", "m_total", "flags_bytes")},
                 gather_bytes=self.int(d["gather_bytes"], f"{path}.gather_bytes"),
                 in_dtype=self.str(d["in_dtype"], f"{path}.in_dtype", DTYPES),
                 out_dtype=self.str(d["out_dtype"], f"{path}.out_dtype", DTYPES),
                 axis_name=self.str(d["axis_name"], f"{path}.axis_name"))
        for key in ("send_to", "recv_from"):
            pos = getattr(r, key)
            if len(pos) != n or any(p >= n for p in pos):
                raise self.fail(f"{path}.{key}", f"must name a ring position (0..{n - 1}) for each of {n} devices, "
                                                 f"got {list(pos)}")
        return r


def from_dict(data: Any, where: str = FILE_NAME) -> LaunchRecord:
    """A validated record from parsed launch.json (raises LaunchRecordError naming `where` and the field)."""
    r = _Reader(where)
    if not isinstance(data, Mapping):
        raise r.fail("", f"must hold a JSON object, got {type(data).__name__}")
    if "version" not in data:
        raise r.fail("version", f"missing (this schedgen reads launch record version {LAUNCH_VERSION})")
    if type(data["version"]) is not int or data["version"] != LAUNCH_VERSION:     # true, 2.0: not the version 2
        raise r.fail("version", f"launch record version {shorten(data['version'])}; this schedgen reads version "
                                f"{LAUNCH_VERSION} only: rebuild the package")
    d = r.obj(data, LaunchRecord, "")
    sizes = tuple(r.size_range(x, f"sizes[{i}]") for i, x in enumerate(r.list(d["sizes"], "sizes")))
    names = {x.name for x in sizes}
    inputs = tuple(r.operand(o, f"inputs[{i}]", names) for i, o in enumerate(r.list(d["inputs"], "inputs")))
    outputs = tuple(r.operand(o, f"outputs[{i}]", names) for i, o in enumerate(r.list(d["outputs"], "outputs")))
    bound = {x for o in inputs for x in o.shape if isinstance(x, str)}
    if names - bound:
        raise r.fail("sizes", f"the dynamic size {shorten(sorted(names - bound)[0])} is no input's dimension, so no call "
                              f"could bind it")
    if not inputs or not outputs:
        raise r.fail("inputs" if not inputs else "outputs", "a kernel has at least one")
    count = len(inputs) + len(outputs)
    args = tuple(r.arg(a, f"kernel_args[{i}]", count, names)
                 for i, a in enumerate(r.list(d["kernel_args"], "kernel_args")))
    cluster = r.ints(d["cluster"], "cluster", 1)
    if len(cluster) != 3:
        raise r.fail("cluster", f"must be 3 dims, got {list(cluster)}")
    backends = tuple(r.str(b, f"backends[{i}]", ("cuda", "pallas")) for i, b in enumerate(r.list(d["backends"],
                                                                                              "backends")))
    rec = LaunchRecord(
        version=LAUNCH_VERSION, name=r.str(d["name"], "name"), family=r.str(d["family"], "family"),
        kernel_name=r.str(d["kernel_name"], "kernel_name"), backends=backends, threads=r.int(d["threads"], "threads", 1),
        smem_bytes=r.int(d["smem_bytes"], "smem_bytes"), num_blocks=r.extent(d["num_blocks"], "num_blocks", names),
        auto_blocks=r.bool(d["auto_blocks"], "auto_blocks"), blocks_per_sm=r.int(d["blocks_per_sm"], "blocks_per_sm", 1),
        cluster=cluster, sizes=sizes, inputs=inputs, outputs=outputs, kernel_args=args, ring=r.ring(d["ring"], "ring"),
        target=r.str(d.get("target", "sm_90a"), "target", tuple(TARGETS)))
    if isinstance(rec.num_blocks, int) and rec.num_blocks < 1:
        raise r.fail("num_blocks", f"must be >= 1, got {rec.num_blocks}")
    if isinstance(rec.num_blocks, int) and rec.num_blocks % rec.cluster[0]:
        raise r.fail("num_blocks", f"{rec.num_blocks} is not a multiple of cluster[0] = {rec.cluster[0]}")
    return rec


def loads(text: str | bytes, where: str = FILE_NAME) -> LaunchRecord:
    try:
        data = boundedjson.loads(text)
    except ValueError as exc:                      # UnicodeDecodeError is one
        raise LaunchRecordError(f"{where}: not valid JSON: {exc}") from None
    return from_dict(data, where)


def load(root: str | Path) -> LaunchRecord:
    """The record of the package folder `root` (raises LaunchRecordError naming root/launch.json)."""
    path = Path(root) / FILE_NAME
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise LaunchRecordError(f"{path}: missing: a schedgen package holds its launch record here (rebuild it "
                                f"with this schedgen)") from None
    except OSError as exc:
        raise LaunchRecordError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    return loads(text, str(path))


def record_of(obj: Any) -> LaunchRecord:
    """A LaunchRecord as is, a mapping as parsed launch.json (validated), anything else as a plan object."""
    if isinstance(obj, LaunchRecord):
        return obj
    if isinstance(obj, Mapping):
        return from_dict(obj)
    return launch_record(obj)


class PackagePlan(Mapping):
    """A package module's `plan`: the whole plan (root/plan.json) as a read-only mapping, read on first use, for
    people and tools; nothing that runs the kernel reads it."""

    def __init__(self, root: str | Path):
        self._path = Path(root) / "plan.json"
        self._data: dict | None = None

    def _plan(self) -> dict:
        if self._data is None:
            self._data = boundedjson.loads(self._path.read_bytes())
        return self._data

    def __getitem__(self, key: str) -> Any:
        return self._plan()[key]

    def __iter__(self):
        return iter(self._plan())

    def __len__(self) -> int:
        return len(self._plan())

    def __repr__(self) -> str:
        return f"<plan of {self._path.parent.name} ({self._path})>"


__all__ = ["LAUNCH_VERSION", "FILE_NAME", "COUNTER_BYTES", "WORKSPACE_ALIGN", "LaunchRecord", "LaunchRecordError", "Operand", "Arg",
           "Ring", "KernelLaunch", "inline_field", "launch_record", "from_dict", "loads", "load", "record_of", "PackagePlan"]
