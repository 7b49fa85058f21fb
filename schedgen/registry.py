"""The family registry, on the bottom floor: the `Family` manifest and the lookup by `op.kind`.

A family owns everything that differs between kinds of kernel: its op model (the `op:` section), its schedule model
(the core schedule plus the fields only its kernels read), its planner,
its float64 reference, its explain text and drawing, its benchmark peers, its tune aliases and both backends'
templates. The shared stages (frontend, plan framework, render, toolchain, runtime, verify, bench, tune, the CLI)
look a family up here by `op.kind` and never name one.

Adding a family: a folder `schedgen/families/<kind>/` whose `__init__.py` calls `register(Family(...))` naming its
template folder `templates/<kind>/` (`template_folder`), plus one line in `_FAMILIES` below. `docs/architecture.md`
walks through it.

This module imports no family and nothing above the foundation: a family's folder is imported by its kind when the
registry is first asked (`get`, `all_families`), and a manifest names its hooks as strings ('.plan:plan_map', the
module relative to the family's folder), each imported when first called or read (`Hook`). So reading the spec
model loads each family's manifest and op model only, not its planner, runtime, drawing or autodiff.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, get_args


# The registered families, in the order the CLI and the docs list them (one line per family).
_FAMILIES = ("map", "matmul", "attention", "collective_matmul", "grouped_matmul", "rowwise", "attention_backward")

BACKEND_TEMPLATES = {"cuda": "cuda.cu.j2", "pallas": "pallas.py.j2"}

# The templates' folder of the shared partials, beside the families' (and so no family's kind)
COMMON_TEMPLATES = "common"


def template_root() -> Path:
    """The top-level `templates/` folder: one folder per family plus `common/` (the shared partials). A wheel
    carries it inside the package (`schedgen/_data/templates`, pyproject.toml's force-include), which wins where it
    exists; a checkout (and an editable install) has it beside the package."""
    package = Path(__file__).resolve().parent
    installed = package / "_data" / "templates"
    return installed if installed.is_dir() else package.parent / "templates"


def template_folder(name: str) -> Path:
    """A family's template folder (`templates/<kind>/`), or `common`'s, named in its manifest."""
    return template_root() / name


class Hook:
    """A family's hook named 'module:attribute' (the module relative to `package`, the family's folder:
    '.plan:plan_map'), imported when it is first called (a function) or an attribute of it is read (a hooks
    record: `.draw:HOOKS`), then kept."""
    __slots__ = ("ref", "package", "_target")

    def __init__(self, ref: str, package: str):
        module, sep, attribute = ref.partition(":")
        if not sep or not module or not attribute.isidentifier() or (module.startswith(".") and not package):
            raise TypeError(f"hook {ref!r} must be 'module:attribute' (a relative module needs the manifest's "
                            f"package)")
        self.ref, self.package, self._target = ref, package, None

    @property
    def target(self) -> Any:
        if self._target is None:
            module, _, attribute = self.ref.partition(":")
            found = getattr(importlib.import_module(module, self.package or None), attribute, None)
            if found is None:
                raise ImportError(f"hook {self.ref!r} of {self.package}: the module has no {attribute!r}")
            self._target = found
        return self._target

    def __call__(self, *args, **kwargs):
        return self.target(*args, **kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__"):           # copy, pickle and friends ask for dunders: not the target's
            raise AttributeError(name)
        return getattr(self.target, name)

    def __eq__(self, other) -> bool:
        return isinstance(other, Hook) and (self.ref, self.package) == (other.ref, other.package)

    def __hash__(self) -> int:
        return hash((self.ref, self.package))

    def __repr__(self) -> str:
        return f"Hook({self.ref!r}, {self.package!r})"


# the manifest's fields that may be given as 'module:attribute' strings (resolved on first use)
_HOOK_FIELDS = ("plan", "reference", "explain", "small_sizes", "elementwise", "devices", "accumulation", "verify",
                "draw", "tune_aliases", "report", "defaults", "tune_space", "random_inputs", "backward",
                "call_inputs", "dispatch")


@dataclass(frozen=True)
class DrawHooks:
    """What `explain --draw` needs of a family (`families/<kind>/draw.py`); `schedgen/draw.py` draws the data."""
    traversal: Callable[[Any, int], Any]     # (plan, most tiles) -> draw.Traversal: its tiles in the kernel's order
    pipeline: Callable[[Any], Any]           # plan -> draw.Pipeline: the spans of its timing model
    summary: Callable[[Any], list[str]]      # plan -> the lines beside the tile view
    guide: Callable[[Any], str]              # plan -> the "how to read it" text
    smem: Callable[[Any], Any] = lambda plan: plan.smem_buffers   # plan -> its SMEM map (SmemBuffer records)


@dataclass(frozen=True)
class ReportHooks:
    """What the benchmark report (`schedgen.report`) needs of a family; every field has a default."""
    shape_label: Callable[[dict], str] | None = None          # bench row -> its shape's label (default: spec, sizes)
    row_bytes: Callable[[dict], float | None] | None = None   # bench row -> minimum bytes moved (rows without GB/s)
    title: str = ""                                            # its throughput plot's title (default from kind, metric)
    marker: str = "o"                                          # its points on the roofline
    legend: str = ""                                           # the marker's legend label (default: kind)
    always_in_legend: bool = False                             # listed in the roofline legend even when absent
    order: int = 100                                           # its place among the throughput plots
    series_labels: Mapping[str, str] = field(default_factory=dict)   # series (peer) -> its label in this family
    record_rows: Callable[[Any], list[dict] | None] | None = None    # a record in the family's own format -> rows
    unlabelled_rows: bool = False                              # rows with no "family" field are this family's


@dataclass(frozen=True)
class TuneSpace:
    """A family's default tune space for a spec with no tune section (the manifest's `tune_space`), searched around
    the planner's picks: knob (an alias of `tune_aliases` or a field path) -> the values to try, constraints over
    them (as a tune section's), and `why`: one line saying what it searches and why, or, with no params, why there
    is nothing to search for this spec."""
    params: Mapping[str, tuple] = field(default_factory=dict)
    constraints: tuple[str, ...] = ()
    why: str = ""


@dataclass(frozen=True)
class Family:
    """One kernel family's manifest: validated when registered (at import time). A hook (every callable field,
    `draw` and `report`) may be written as a 'module:attribute' string, relative to `package`: it becomes a `Hook`,
    imported when first used."""
    kind: str                                                # op.kind
    op_model: type                                           # pydantic model of op (kind: Literal[kind])
    plan: Callable[[Any, Any], tuple[Any, Any]]              # (spec, hardware) -> (plan | None, Problems)
    reference: Callable[..., Mapping[str, Any]]              # (spec, sizes, inputs, **options) -> float64 outputs
    explain: Callable[[Any], str]                            # plan -> text
    small_sizes: Callable[[Any, Any, int], dict[str, int]]   # (spec, plan, tiles per dim) -> sizes for --small
    summary: str                                             # one line for `schedgen new`, docs and errors
    templates: Path                                          # templates/<kind>/: cuda.cu.j2 / pallas.py.j2 [package.py.j2]
    metric: Literal["tflops", "gbps"] = "gbps"               # what bench reports for it
    elementwise: Callable[[Any], str] = lambda op: ""        # the op's elementwise code (the reference's domain)
    devices: Callable[[Any], int] = lambda op: 1             # GPUs one launch spans (multi-device families: > 1)
    accumulation: Callable[[Any], int] = lambda plan: 0      # f32 terms summed per output (verify's tolerance)
    verify: Callable[..., list] | None = None                # a family's own verify (multi-device)
    draw: DrawHooks | None = None
    tune_aliases: Callable[[Any], dict] | None = None        # spec -> {alias: targets}
    peers: str | None = None                                 # module of its bench peers (schedgen/bench/run.py)
    report: ReportHooks = ReportHooks()                      # what the benchmark report needs of it
    starter: Path | None = None                              # `schedgen new <kind>`'s commented spec (__NAME__, __SCHEMA__, __FILE__)
    # (spec, hardware) -> [plan.defaults.Pick] for the schedule fields the user did not write (None: picks nothing)
    defaults: Callable[[Any, Any], Any] | None = None
    # spec completed with the planner's picks -> TuneSpace: what `schedgen tune` searches for a spec with no tune
    # section (None: the family has none, and such a spec has nothing to tune)
    tune_space: Callable[[Any], TuneSpace] | None = None
    # (spec, sizes, numpy Generator, magnitude) -> {input name: array}: a family's own random inputs where some must
    # be valid rather than random (grouped_matmul's group offsets), floating-point ones scaled by magnitude; None:
    # every input normal (schedgen.reference)
    random_inputs: Callable[[Any, Any, Any, float], dict] | None = None
    # (spec, source map) -> (autodiff.graph.BackwardGraph | None, Problems): the kernels of the spec's backward
    # pass (issue 19); None: the family has no backward, and a spec with a `backward` section is a located error
    backward: Callable[[Any, Any], tuple[Any, Any]] | None = None
    # op -> the names of every operand the kernel takes at a call, in order (default: op.inputs); a backward step
    # may read any of them as "in:<name>" (grouped_matmul: its group operand after the inputs)
    call_inputs: Callable[[Any], tuple[str, ...]] = lambda op: tuple(op.inputs)
    # the schedule.target values (GPU architectures) the family plans for; another is a located error at
    # schedule.target naming the families that take it
    targets: tuple[str, ...] = ("sm_90a",)
    # pydantic model of schedule: the core `frontend.model.Schedule` or a subclass of it in the family's folder adding
    # the fields only its kernels read (None: the core model). A field no family of the op's kind has is an unknown
    # key at its location; the message names the families that have it (frontend/validate.py)
    schedule_model: type | None = None
    # (spec, source map) -> a table (`.size`, the dynamic size it splits; `.buckets`, each with `.lo`, `.hi`,
    # `.overrides` (schedule field paths -> values), `.schedule` and `.why`; `.text()`, what explain prints) of the
    # buckets of a dynamic size and each one's schedule, derived by the planner (`schedule.dispatch: auto`), or None
    # when the spec does not ask for one; SpecErrors where it cannot be derived. None: the family derives none
    dispatch: Callable[[Any, Any], Any] | None = None
    # the family's folder as a module (its `__package__`): what the string hooks are relative to
    package: str = ""

    def __post_init__(self):
        problems = []
        for name in _HOOK_FIELDS:
            if isinstance(getattr(self, name), str):
                try:
                    object.__setattr__(self, name, Hook(getattr(self, name), self.package))
                except TypeError as exc:
                    problems.append(f"{name}: {exc}")
        if not self.kind.isidentifier() or self.kind != self.kind.lower():
            problems.append(f"kind {self.kind!r} must be a lower-case identifier")
        if self.kind == COMMON_TEMPLATES:
            problems.append(f"kind {self.kind!r} is the shared partials' template folder")
        kind_field = getattr(self.op_model, "model_fields", {}).get("kind")
        if kind_field is None or get_args(kind_field.annotation) != (self.kind,):
            problems.append(f"op_model {getattr(self.op_model, '__name__', self.op_model)} must declare "
                            f"kind: Literal[{self.kind!r}]")
        for name in ("plan", "reference", "explain", "small_sizes", "elementwise", "devices", "accumulation",
                     "call_inputs"):
            if not callable(getattr(self, name)):
                problems.append(f"{name} must be callable")
        if self.starter is not None and not self.starter.is_file():
            problems.append(f"starter {self.starter} is not a file")
        for name in ("defaults", "tune_aliases", "tune_space", "random_inputs", "backward", "dispatch"):
            if getattr(self, name) is not None and not callable(getattr(self, name)):
                problems.append(f"{name} must be callable (or None)")
        # (that each is a target of the hardware table, plan/hardware.py, tests/families/test_registry.py checks:
        # the registry stands below the planner)
        if not self.targets or not all(isinstance(t, str) and t.startswith("sm_") for t in self.targets):
            problems.append(f"targets {self.targets!r} must be a non-empty tuple of GPU architectures ('sm_90a')")
        if not any((self.templates / t).is_file() for t in BACKEND_TEMPLATES.values()):
            problems.append(f"no backend template ({', '.join(BACKEND_TEMPLATES.values())}) in {self.templates}")
        if problems:
            raise TypeError(f"family {self.kind!r}: " + "; ".join(problems))

    def template(self, name: str) -> str | None:
        """The loader name of one of the family's templates ('<kind>/<file>'), or None when it has none."""
        return f"{self.kind}/{name}" if (self.templates / name).is_file() else None

    @property
    def multi_device(self) -> bool:
        return self.verify is not None


_REGISTRY: dict[str, Family] = {}
_FOLDER = "schedgen.families"       # where the family folders are (found by kind: this module imports none)


def register(family: Family) -> Family:
    """Add a family (called once, by its folder's __init__); a second family of one kind is an error."""
    if family.kind in _REGISTRY:
        raise ValueError(f"family {family.kind!r} is registered twice")
    _REGISTRY[family.kind] = family
    return family


def _load() -> dict[str, Family]:
    if len(_REGISTRY) < len(_FAMILIES):
        for kind in _FAMILIES:
            importlib.import_module(f"{_FOLDER}.{kind}")
        missing = [k for k in _FAMILIES if k not in _REGISTRY]
        if missing:
            raise ImportError(f"family folder(s) {', '.join(missing)} did not register a Family")
    return _REGISTRY


def get(kind: str) -> Family:
    """The family of `op.kind` (KeyError for an unknown kind: validation rejects those first)."""
    return _load()[kind]


def all_families() -> list[Family]:
    """Every family, in `_FAMILIES` order whatever order their folders were imported in
    (the op union, the schema and every message list kinds in this order)."""
    reg = _load()
    order = [k for k in _FAMILIES if k in reg] + [k for k in reg if k not in _FAMILIES]
    return [reg[k] for k in order]


def kinds() -> list[str]:
    return [f.kind for f in all_families()]


def of(obj: Any) -> Family:
    """The family of a plan (`.launch.family`), a launch header or record (`.family`), a spec (`.op.kind`) or an
    op (`.kind`)."""
    obj = getattr(obj, "launch", obj)      # a plan: its header names its family
    kind = getattr(obj, "family", None) or getattr(getattr(obj, "op", None), "kind", None) or obj.kind
    return get(kind)
