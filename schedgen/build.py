"""spec -> plan -> render -> compile -> package, through the content-addressed cache."""
from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import stat
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

from . import registry as families
from . import plan as planner
from .cache import Cache, write_new, digest, is_plain_name, key_of, source_hash
from .staging import clean_stale, held_temp
from .plan.launch import FILE_NAME as LAUNCH_FILE, launch_record
from .toolchain.nvrtc import ARCH, compile_cuda, nvrtc_version, resource_usage
from .autodiff import graph as bwgraph
from .autodiff.spec import value_at, written
from .autodiff.stepwarn import DerivedStep
from .errors import Problem, SourceMap, SpecErrors
from .render import render
from .frontend.load import read_spec_bytes
from .frontend.specfile import SpecFile
from .frontend.validate import load_spec, validate_data

PACKAGE_TEMPLATE = "common/package.py.j2"
CUDA_FILES = ("kernel.cu", "kernel.ptx", "kernel.cubin")
BACKWARD_FILE = "backward.json"      # the backward graph and what the runtime needs of it (runtime/autograd.py)
BACKWARD_DIR = "backward"            # backward/<step>/: one sub-package a step


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def toolchain(arch: str = ARCH) -> dict[str, Any]:
    return {
        "schedgen": _version("schedgen") or "source",
        "nvrtc": nvrtc_version(),
        "cuda_bindings": _version("cuda-bindings"),
        "jax": _version("jax"),
        "arch": arch,
    }


# ptxas' own verdicts that cost speed, not correctness: wgmma serialized (C7510-C7515) and the like
_PTXAS_PERF = re.compile(r"\((C75\d\d)\)\s*(.*?)(?: in the function '[^']*'.*| for the function '[^']*'.*)?$", re.M)


def compiler_verdicts(log: str, usage: Mapping[str, int]) -> list[str]:
    """What the CUDA compiler said costs this kernel speed: spilled registers / a stack frame, and ptxas'
    performance warnings (e.g. C7512: wgmma serialized for lack of registers), one line each."""
    out = []
    if usage.get("LOCAL", 0) or usage.get("STACK", 0):
        out.append(f"the kernel spills: {usage.get('STACK', 0)} B of stack frame, {usage.get('LOCAL', 0)} B of local "
                   f"memory a thread")
    for m in _PTXAS_PERF.finditer(log):
        text = f"ptxas {m.group(1)}: {m.group(2).strip().rstrip('.')}"
        if text not in out:
            out.append(text)
    return out


@dataclass(frozen=True)
class Built:
    spec: SpecFile
    source: SourceMap
    plan: Any
    files: dict[str, bytes]     # kernel.cu, kernel.ptx, kernel.cubin, pallas_kernel.py, launch.json, plan.json,
    #                             manifest.json
    cache_hit: bool
    backward: "BackwardBuilt | None" = None   # the spec's backward pass (a `backward` section the family took)
    derived: DerivedStep | None = None        # a backward step: its warnings point into the user's file

    @property
    def name(self) -> str:
        return self.plan.launch.name

    @property
    def warnings(self) -> list[str]:
        """The compiler's verdicts that cost speed, located at the field that buys registers back:
        'file:line:col: schedule.pipeline.compute_registers: warning: ...'. A backward step's name the step and
        point at what reaches it in the user's file (autodiff/stepwarn.py)."""
        verdicts = json.loads(self.files["manifest.json"]).get("compiler_verdicts", [])
        field = ("schedule", "pipeline", "compute_registers")
        advice = "; raise compute_registers (the budget setmaxnreg gives each consumer) or use smaller blocks"
        own = getattr(self.plan, "spill_advice", None)       # a family whose registers another field buys back
        if own is not None:
            field, advice = own
        if self.derived is not None:
            return [self.derived.warning(v, field, advice) for v in verdicts]
        return [self.source.format(Problem(field, f"warning: {v}{advice}")) for v in verdicts]


@dataclass(frozen=True)
class BackwardBuilt:
    """The backward pass of a built spec: the family's graph, the kernels of its steps (built like any spec) and
    what the runtime reads (backward.json)."""
    graph: Any                     # autodiff.graph.BackwardGraph
    steps: dict[str, Built]        # step name -> its build (the sub-package backward/<step>/)
    user_outputs: tuple[str, ...]  # the forward outputs the spec wrote (the package call returns these)
    forward: SpecFile              # the forward spec built (the family's rewrite, or the spec as written)
    written: SpecFile              # the spec as written (its `backward` section included)

    def record(self) -> dict:
        """backward.json: the graph, and which forward outputs are the user's and which are kept for the backward
        only (the package call drops those)."""
        return {"graph": self.graph.to_json(), "user_outputs": list(self.user_outputs),
                "saved_outputs": list(self.graph.saved), "steps": {n: b.name for n, b in self.steps.items()}}


def expected_files(plan) -> set[str]:
    """The file names build_spec stores for a plan (a cache entry holding any other set is a miss)."""
    names = {LAUNCH_FILE, "plan.json", "manifest.json"}
    if "cuda" in plan.launch.backends:
        names.update(CUDA_FILES)
    if "pallas" in plan.launch.backends:
        names.add("pallas_kernel.py")
    return names


def build_spec(path: str | Path, overrides: Mapping[str, Any] | None = None, cache: Cache | None = None) -> Built:
    """Validate, plan, render and compile one spec (raises SpecErrors / ToolchainError).

    The cache key covers everything that shapes the stored files: the plan (itself a function of the spec's bytes,
    the overrides and schedgen's code), every .py and .j2 file of schedgen (`cache.source_hash`) and the toolchain."""
    raw = read_spec_bytes(path)  # read once: the loader parses and the manifest hashes these same bytes
    spec, src = load_spec(str(path), overrides, raw)
    derived = derived_specs(spec, src)
    if derived is None:
        return _build(spec, src, raw, str(path), cache)
    graph, forward_spec, step_specs = derived
    steps: dict[str, Built] = {}
    user = written(spec)
    for step in graph.steps:
        built = _build(step_specs[step.name], _step_source(src, step.name), raw, f"{path}#backward/{step.name}",
                       cache, where=(spec, src, f"step {step.name}"))
        steps[step.name] = replace(built, derived=DerivedStep(step.name, step.why, step.spec, user, src))
    forward = _build(forward_spec, src, raw, str(path), cache,
                     where=(spec, src, "forward") if graph.forward is not None else None)
    # the Built's spec is the forward it built (its plan's spec: verify's reference covers the saved outputs too)
    return Built(forward_spec, src, forward.plan, forward.files, forward.cache_hit,
                 BackwardBuilt(graph, steps, tuple(spec.op.outputs), forward_spec, spec))


def derived_specs(spec, src: SourceMap):
    """The specs of a spec's backward, validated: (the family's graph, the forward to build, step name -> its
    spec), or None without a `backward` section. Raises SpecErrors located at the user's fields."""
    graph = _backward_graph(spec, src)
    if graph is None:
        return None
    forward_spec = spec
    if graph.forward is not None:
        forward_spec = _derived(graph.forward, "forward", spec, src)
    forward_spec = _model_copy(forward_spec, backward=None)
    _check_graph(spec, forward_spec, graph)
    steps = {step.name: _model_copy(_derived(step.spec, f"step {step.name}", spec, src), backward=None)
             for step in graph.steps}
    return graph, forward_spec, steps


def check_backward(spec, src: SourceMap) -> None:
    """What `build` checks of a spec's backward before it renders anything (`validate` runs it): the family's hook
    (backward.wrt, backward.save), the derived specs validated and planned. Raises SpecErrors located at the
    user's fields."""
    derived = derived_specs(spec, src)
    if derived is None:
        return
    graph, forward_spec, steps = derived
    planned = [("forward", forward_spec)] if graph.forward is not None else []
    for what, derived_spec in planned + [(f"step {name}", s) for name, s in steps.items()]:
        try:
            planner.plan(derived_spec, _step_source(src, what))
        except SpecErrors as exc:
            raise _derived_problems(derived_spec, spec, src, what, exc.problems) from None


def _backward_graph(spec, src: SourceMap):
    """The family's backward graph of a spec with a `backward` section (None without one, or when the family
    returns none); the hook's problems are located errors of the spec."""
    if getattr(spec, "backward", None) is None:
        return None
    family = families.of(spec)
    # the spec as written is planned first: its own problems (and, for a family without a backward, the planner's
    # located error saying which families have one) come before anything derived from it
    planner.plan(spec, src)
    if family.backward is None:
        raise AssertionError("unreachable: plan() refuses a backward section of a family without a backward")
    graph, problems = family.backward(spec, src)
    if problems:
        raise SpecErrors(list(problems), src)
    return graph


def _model_copy(spec, **fields):
    return spec.model_copy(update=fields)


def _step_source(src: SourceMap, step: str) -> SourceMap:
    """A derived spec's problems point at the user's `backward` field (the derived spec is no file)."""
    pos = src.positions.get(("backward",))
    return SourceMap(file=src.file, positions={(): pos} if pos is not None else {})


def _family_bug(spec, src: SourceMap, what: str, lines: list[str]) -> SpecErrors:
    fam = spec.op.kind
    return SpecErrors([Problem(("backward",), f"{what} of the {fam} family's backward fails its own checks (a "
                                              f"schedgen bug in the {fam} family, not in this file; please report "
                                              f"it): {'; '.join(lines)}")], src)


def _derived_problems(derived, user, user_src: SourceMap, what: str, problems) -> SpecErrors:
    """Planning problems of a spec a family derived. One about a size or a shape the derived spec copied from the
    user's (the same value at the same op path: a sequence length the backward kernel cannot take, say) is the
    user's to fix: a located error there, saying which kernel refuses it. Any other is a family bug."""
    mine, theirs = written(derived), written(user)
    relocated, bugs = [], []
    for p in problems:
        path = tuple(p.path)
        copied = path[:2] == ("op", "sizes") or path[:2] == ("op", "inputs") and "shape" in path
        found, value = value_at(mine, path)
        found_user, user_value = value_at(theirs, path)
        if copied and found and found_user and value == user_value:
            relocated.append(Problem(path, f"the backward's {what} cannot take it: {p.message}; or remove the "
                                           f"backward section"))
        else:
            bugs.append(f"{'.'.join(map(str, path))}: {p.message}")
    if bugs:
        return _family_bug(user, user_src, what, bugs)
    return SpecErrors(relocated, user_src)


def _derived(data: Any, what: str, spec, src: SourceMap) -> SpecFile:
    """A spec a family derived (plain data), validated like a file; its problems are a family bug, reported at the
    user's `backward` field with the step's name."""
    try:
        return validate_data(data, SourceMap(file="<derived>"))
    except SpecErrors as exc:
        raise _family_bug(spec, src, what, [f"{'.'.join(map(str, p.path))}: {p.message}" for p in exc.problems]) \
            from None


def _check_graph(spec, forward_spec, graph) -> None:
    """A graph whose references do not resolve, or a rewritten forward that is not the written one plus its saved
    outputs, is a family bug: a clear error (not a located one: nothing in the file can fix it)."""
    fam = spec.op.kind
    ins, outs = set(families.of(forward_spec).call_inputs(forward_spec.op)), set(forward_spec.op.outputs)
    problems = bwgraph.check(graph, ins, outs)
    if list(forward_spec.op.inputs) != list(spec.op.inputs):
        problems.append(f"the rewritten forward's inputs {list(forward_spec.op.inputs)} are not the spec's "
                        f"{list(spec.op.inputs)}")
    want = list(spec.op.outputs) + [s for s in graph.saved if s not in spec.op.outputs]
    if list(forward_spec.op.outputs) != want:
        problems.append(f"the forward's outputs {list(forward_spec.op.outputs)} are not the spec's outputs then "
                        f"the saved ones ({want})")
    missing = [g for g in graph.grads if g not in spec.op.inputs]
    if missing:
        problems.append(f"grads names {missing}, not inputs of the spec")
    if problems:
        raise RuntimeError(f"{spec.name}: the {fam} family's backward graph is inconsistent (a schedgen bug in the "
                           f"{fam} family's backward hook): " + "; ".join(problems))


def _cache_key(plan) -> tuple[str, str, dict, str]:
    """(plan.json, launch.json, the toolchain, the cache key) of a plan's build."""
    plan_json = planner.to_json(plan)
    launch_json = launch_record(plan).to_json()   # what the runtime reads (schedgen/plan/launch.py)
    tools = toolchain(plan.launch.target)
    key = key_of({"plan": plan_json, "source": source_hash(), **{k: str(v) for k, v in tools.items()}})
    return plan_json, launch_json, tools, key


def cached_verdicts(plan, cache: Cache | None = None) -> list[str] | None:
    """The compiler's verdicts on the cached build of `plan` (what `Built.warnings` words: a spill, serialized
    wgmmas), read without building: None when this plan was not built with this schedgen and toolchain (or the
    toolchain is missing), [] when it was and the compiler said nothing that costs speed."""
    try:
        _, _, _, key = _cache_key(plan)
        files = (cache or Cache()).get(key, names=expected_files(plan))
    except Exception:                # no toolchain here, an unreadable cache: nothing known
        return None
    if files is None:
        return None
    try:
        verdicts = json.loads(files["manifest.json"]).get("compiler_verdicts", [])
    except (ValueError, KeyError, AttributeError):
        return None
    return [str(v) for v in verdicts] if isinstance(verdicts, list) else None


def _build(spec, src: SourceMap, raw: bytes, spec_file: str, cache: Cache | None, where=None) -> Built:
    """Plan, render and compile one validated spec through the cache. `where` (a derived spec: the forward a
    family rewrote, a backward step): (user spec, its source map, what it is), and a problem planning it is a
    family bug located at the user's `backward` field."""
    if where is None:
        plan = planner.plan(spec, src)
    else:
        try:
            plan = planner.plan(spec, src)
        except SpecErrors as exc:
            user, user_src, what = where
            raise _derived_problems(spec, user, user_src, what, exc.problems) from None
    plan_json, launch_json, tools, key = _cache_key(plan)
    spec_hash = digest(raw)

    def make() -> dict[str, bytes]:
        files: dict[str, bytes] = {"plan.json": plan_json.encode(), LAUNCH_FILE: launch_json.encode()}
        usage, verdicts = {}, []
        if "cuda" in plan.launch.backends:
            cu = render(plan, "cuda")
            compiled = compile_cuda(cu, f"{plan.launch.name}.cu", arch=plan.launch.target)
            usage = resource_usage(compiled.cubin).get(plan.launch.kernel_name, {})
            verdicts = compiler_verdicts(compiled.log, usage)
            files.update({"kernel.cu": cu.encode(), "kernel.ptx": compiled.ptx.encode(), "kernel.cubin": compiled.cubin})
        if "pallas" in plan.launch.backends:
            files["pallas_kernel.py"] = render(plan, "pallas").encode()
        manifest = {
            "name": plan.launch.name, "family": plan.launch.family, "kernel": plan.launch.kernel_name, "cache_key": key,
            "plan_sha256": digest(plan_json.encode()), "toolchain": tools, "backends": list(plan.launch.backends),
            "resources": {"smem_bytes": plan.launch.smem_bytes, "threads": plan.launch.threads, "blocks": planner.to_dict(plan.launch.num_blocks),
                          "blocks_per_sm": plan.launch.blocks_per_sm, **{k.lower(): v for k, v in usage.items()}},
            "compiler_verdicts": verdicts,
        }
        files["manifest.json"] = json.dumps(manifest, indent=1, sort_keys=True).encode()
        return files

    def check(files: dict[str, bytes]) -> None:
        """An entry is this plan's: its plan.json is this plan, its launch.json this plan's record, its manifest a
        JSON object naming this key."""
        if files["plan.json"] != plan_json.encode():
            raise ValueError("plan.json is another plan")
        if files[LAUNCH_FILE] != launch_json.encode():
            raise ValueError("launch.json is not this plan's launch record")
        manifest = json.loads(files["manifest.json"])
        if not isinstance(manifest, dict) or manifest.get("cache_key") != key or manifest.get("name") != plan.launch.name:
            raise ValueError("manifest.json is not this entry's")
        if not isinstance(manifest.get("compiler_verdicts", []), list):
            raise ValueError("manifest.json's compiler_verdicts is not a list")

    files, hit = (cache or Cache()).get_or_build(key, make, names=expected_files(plan), check=check)
    manifest = json.loads(files["manifest.json"])
    manifest["spec_sha256"] = spec_hash
    manifest["spec_file"] = spec_file
    files = dict(files, **{"manifest.json": json.dumps(manifest, indent=1, sort_keys=True).encode()})
    return Built(spec, src, plan, files, hit)


# ------------------------------------------------------------------------------------------------ package()
# OUT/<name>/ is written into a fresh staging folder of this process (staging.held_temp inside OUT, locked while the
# build lives: nothing in it can be a symlink) and swapped in with one rename(2), or, where OUT/<name> exists, one
# renameat2(RENAME_EXCHANGE) so OUT/<name> is never missing; then the old one is removed. Symlinks are never written through: OUT itself may be a
# symlink to a folder; a symlink at OUT/<name> or OUT/__init__.py is replaced, its target left alone.

_UMASK = os.umask(0o022)
os.umask(_UMASK)
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


@lru_cache(maxsize=1)
def _renameat2():
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def _exchange(a: Path, b: Path) -> bool | None:
    """Atomically swap two paths: True done, False `b` is gone, None not supported here (no renameat2, or a
    file system without RENAME_EXCHANGE)."""
    fn = _renameat2()
    if fn is None:
        return None
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err == errno.ENOENT:
        return False
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
        return None
    raise OSError(err, os.strerror(err), str(b))


def _swap_in(staged: Path, dest: Path) -> None:
    """Put the folder `staged` at `dest`, replacing whatever is there (folder, file or symlink, never followed).
    Afterwards `staged` holds the old one, or is gone. Each step is one rename, so whichever writer is last, `dest`
    is one writer's whole package."""
    for _ in range(1000):
        try:
            os.rename(staged, dest)                         # dest missing (or an empty folder)
            return
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                raise
        done = _exchange(staged, dest)
        if done:
            return
        if done is None:                                     # no atomic exchange: move the old one aside first
            with held_temp(dest.parent, dest.name, "old") as aside:
                try:
                    os.rename(dest, aside / "old")
                except FileNotFoundError:
                    pass                                     # another writer moved it first
                try:
                    os.rename(staged, dest)
                    return
                except OSError as exc:
                    if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                        raise
    raise OSError(errno.EBUSY, "other builds keep replacing it", str(dest))


def _output_folder(out_dir: Path) -> None:
    """Create OUT (a symlink to a folder is fine) and its `__init__.py`, a regular package: `import build.<name>`
    finds this folder before an installed package of the same name (a folder without __init__.py is only a
    namespace portion, which any regular package shadows)."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise NotADirectoryError(errno.ENOTDIR, "the output is not a folder" + (
            " (a symlink to nothing)" if out_dir.is_symlink() else ""), str(out_dir)) from None
    init = out_dir / "__init__.py"
    try:
        if stat.S_ISREG(init.lstat().st_mode):
            return
    except FileNotFoundError:
        pass
    with held_temp(out_dir, "__init__.py", folder=False) as tmp:
        with open(tmp, "wb") as f:
            f.write(b'"""Kernels built by schedgen."""\n')
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, init)                                # replaces a symlink there, never its target


def _write_package(built: Built, folder: Path) -> None:
    """The files of one kernel and its module (__init__.py) into `folder`."""
    from .render import environment
    # a family whose call differs (multi-device) has a package template of its own
    template = families.of(built.plan).template("package.py.j2") or PACKAGE_TEMPLATE
    module = environment().get_template(template).render(p=built.plan, backward=built.backward)
    for name, data in built.files.items():
        write_new(folder / name, data)
    write_new(folder / "__init__.py", module.encode())


def package(built: Built, out_dir: str | Path) -> Path:
    """Write `out_dir/<name>/` importable as a Python package exposing the kernel function (raises OSError when
    the output cannot be written)."""
    for b in (built, *(built.backward.steps.values() if built.backward is not None else ())):
        bad = [n for n in b.files if not is_plain_name(n) or n in ("__init__.py", BACKWARD_FILE)]
        if bad:
            raise ValueError(f"package files must be plain file names, not {bad}")
    return publish(out_dir, built.name, lambda staged: _fill(built, staged))


def publish(out_dir: str | Path, name: str, fill) -> Path:
    """`out_dir/<name>/`: `fill(staged)` writes the files into a fresh staging folder, swapped in whole."""
    out_dir = Path(out_dir)
    _output_folder(out_dir)
    clean_stale(out_dir)
    dest = out_dir / name
    with held_temp(out_dir, name) as staged:     # locked while this build lives: clean_stale leaves it alone
        fill(staged)
        os.chmod(staged, 0o777 & ~_UMASK)
        _swap_in(staged, dest)
    return dest


def _fill(built: Built, staged: Path) -> None:
    """One kernel's package (and its backward sub-packages) into the staging folder."""
    _write_package(built, staged)
    if built.backward is not None:
        write_backward(built.backward, built.name, staged)


def write_backward(bw: BackwardBuilt, name: str, staged: Path) -> None:
    """backward.json and backward/<step>/ (one package per step) of the package `name` into the staging folder:
    what runtime/autograd.py loads next to the forward (a one-kernel package's, or a bucketed one's)."""
    write_new(staged / BACKWARD_FILE, json.dumps(bw.record(), indent=1, sort_keys=True).encode())
    (staged / BACKWARD_DIR).mkdir()
    write_new(staged / BACKWARD_DIR / "__init__.py",
              f'"""The backward kernels of {name} (backward.json says how they chain)."""\n'.encode())
    for step, sub in bw.steps.items():
        (staged / BACKWARD_DIR / step).mkdir()
        _write_package(sub, staged / BACKWARD_DIR / step)
    for folder in (staged / BACKWARD_DIR, *(staged / BACKWARD_DIR / s for s in bw.steps)):
        os.chmod(folder, 0o777 & ~_UMASK)
