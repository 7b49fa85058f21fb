"""Shared pytest setup: the --update-golden option, GPU auto-skip, and small helpers for the CPU suite."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from timeouts_plugin import pytest_runtest_logreport, pytest_runtest_protocol  # noqa: F401  (hung tests fail)

# torch.compile's C++/Triton compiles run in this process, not in inductor's pool of compile workers: the suite already
# runs a worker per CPU, and a pool of subprocesses under each xdist worker is one more thing that can wait forever
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
SPECS_DIR = ROOT / "specs"
GOLDEN_DIR = Path(__file__).resolve().parent / "golden"


def spec_files(family: str | None = None, target: str | None = None) -> list[Path]:
    """Every bundled spec (the suite's parametrisation source), or those of one op family, or of one
    schedule.target (sm_90a: what runs on the H200; the sm_100a ones compile only)."""
    files = sorted(p for p in SPECS_DIR.iterdir() if p.suffix in (".yaml", ".yml", ".toml"))
    if family is None and target is None:
        return files
    from schedgen.frontend.validate import load_spec
    specs = [(p, load_spec(str(p))[0]) for p in files]
    return [p for p, s in specs if (family is None or s.op.kind == family)
            and (target is None or s.schedule.target == target)]


def small_legal(size) -> int:
    """A small legal value of a dynamic size (op.sizes' DynamicSize): two of its steps, at least its min and at
    most its max (tests that pin a bundled spec's sizes: every dynamic size, whatever its name)."""
    step = size.multiple_of
    return min(size.max, -(-max(size.min or step, 2 * step) // step) * step)


def without_warpgroups(path, folder: Path) -> Path:
    """A copy of the spec file `path` in `folder` without its `num_warpgroups` line: the CUDA kernel's warpgroups,
    a located error written in a spec with no cuda backend (issue 42), for tests that build a bundled map or rowwise
    spec with `schedule.backends: [pallas]`."""
    text = Path(path).read_text()
    out = Path(folder) / Path(path).name
    out.write_text("".join(ln for ln in text.splitlines(keepends=True)
                           if not re.match(r"\s*num_warpgroups\s*[:=]", ln)))
    return out


def plan_spec(path, overrides: dict | None = None):
    """The plan of a spec file with `-D`-style overrides ({dotted.field: value}), as `schedgen build` makes it."""
    from schedgen.frontend.validate import load_spec
    from schedgen.plan import plan
    spec, src = load_spec(str(path), overrides or {})
    return plan(spec, src)


def plan_errors(path, overrides: dict | None = None) -> list[str]:
    """The located error lines that planning the spec file with these overrides raises (fails if it plans)."""
    from schedgen.errors import SpecErrors
    with pytest.raises(SpecErrors) as info:
        plan_spec(path, overrides)
    return info.value.lines()


_OPCODE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)", re.M)


def opcodes(sass: str) -> list[str]:
    """The opcodes (with modifiers) of nvdisasm output, in order (the SASS tests of every family)."""
    return _OPCODE.findall(sass)


def hgmma_gaps(sass: str) -> list[int]:
    """The instructions between consecutive HGMMAs of one commit group of nvdisasm output (their issue cost:
    descriptors, moves), in order."""
    gaps, n, in_group = [], 0, False
    for s in re.findall(r"/\*[0-9a-f]{4,}\*/\s+([^;]*);", sass):
        if "HGMMA" in s:
            if in_group:
                gaps.append(n)
            in_group, n = "gsb0" not in s, 0
        else:
            n += 1
    return gaps


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite tests/golden/* from the current templates instead of comparing")
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run the tests marked slow (the long campaigns; SCHEDGEN_SLOW=1 does the same)")


def slow_enabled(config) -> bool:
    return bool(config.getoption("--slow")) or os.environ.get("SCHEDGEN_SLOW", "") not in ("", "0")


def pytest_configure(config):
    # --slow reaches the fuzz modules' example counts (read at import, before any item exists) as SCHEDGEN_SLOW
    if config.getoption("--slow"):
        os.environ["SCHEDGEN_SLOW"] = "1"


def fuzz_examples(ci: int, slow: int, long: int) -> int:
    """A fuzz campaign's example count: `ci` by default (derandomized: the same examples every run, a smoke check
    that keeps CI fast), `slow` with --slow / SCHEDGEN_SLOW=1, `long` with SCHEDGEN_FUZZ=long (random seeds)."""
    if os.environ.get("SCHEDGEN_FUZZ", "") == "long":
        return long
    return slow if os.environ.get("SCHEDGEN_SLOW", "") not in ("", "0") else ci


@pytest.fixture
def update_golden(request) -> bool:
    return bool(request.config.getoption("--update-golden"))


def pytest_collection_modifyitems(config, items):
    """A `slow` test (a long campaign: every mode of every bundled spec, a 3-minute tuning run) runs only with --slow
    or SCHEDGEN_SLOW=1, so that the default run (CI's) stays fast. A `gpu` test runs only where a GPU of its target
    is: `@pytest.mark.gpu` is a Hopper (sm_90a) test, `@pytest.mark.gpu(target="sm_100a")` a Blackwell one; the
    others are skipped with the driver's reason."""
    if not slow_enabled(config):
        for item in items:
            if item.get_closest_marker("slow"):
                item.add_marker(pytest.mark.skip(reason="a slow campaign: run with --slow (or SCHEDGEN_SLOW=1)"))
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    from schedgen.runtime.driver import available
    verdicts: dict[str, tuple[bool, str]] = {}
    for item in gpu_items:
        target = item.get_closest_marker("gpu").kwargs.get("target", "sm_90a")
        ok, why = verdicts.setdefault(target, available(target))
        if not ok:
            gpu = "Blackwell" if target == "sm_100a" else "Hopper"
            item.add_marker(pytest.mark.skip(reason=f"needs an NVIDIA {gpu} GPU ({target}): {why}"))


def lower_map_for_cuda(data: dict, tmp_path: Path, fuel: int | None = None) -> str:
    """A map spec (plain data) planned, its Pallas kernel rendered and lowered for CUDA on the CPU at the max of
    every dynamic size (Mosaic GPU's layout inference and lowering run there; the interpreter checks no layouts);
    the lowered text. With `fuel`, layout inference gets that many tries instead of jax's 100000, so a kernel
    whose layouts are found only by a long search fails too."""
    import importlib.util

    import jax
    from jax.experimental.mosaic.gpu import layout_inference

    from schedgen.errors import SourceMap
    from schedgen.frontend.validate import validate_data
    from schedgen.plan import dims, plan
    from schedgen.render import render
    src = SourceMap(f"<{data['name']}>")
    p = plan(validate_data(data, src), src)
    assert "pallas" in p.launch.backends, p.launch.backends
    path = tmp_path / f"{p.launch.name}_lowered_pallas.py"
    path.write_text(render(p, "pallas"))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sizes = {r.name: r.max for r in p.launch.dynamic_sizes}
    args = [jax.ShapeDtypeStruct(tuple(dims.evaluate(x, sizes) for x in o.shape), mod._DTYPES[o.dtype])
            for o in p.inputs]
    defaults = layout_inference.infer_layout.__kwdefaults__
    saved = dict(defaults)
    if fuel is not None:
        defaults["fuel"] = fuel
    try:
        return jax.jit(mod.make(sizes)).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    finally:
        defaults.update(saved)


def import_package(folder, name: str):
    """The package `name` that schedgen wrote under `folder`, imported as a user's program imports it: it stays in
    sys.modules and its folder on sys.path (first), because torch.compile's tracing imports it again by name (a
    helper that popped both made the GPU tests fail with "No module named ..."). An earlier import of the same name
    (another test's folder: tests build packages of one name at different sizes) is dropped first."""
    import importlib
    import sys
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[mod]
    entry = str(folder)
    while entry in sys.path:
        sys.path.remove(entry)
    sys.path.insert(0, entry)
    return importlib.import_module(name)


def stub_cuda_with_references(monkeypatch, specs: dict, record=None) -> list:
    """Kernel._call_cuda (the custom ops' real implementation) replaced by each kernel's float64 reference, so torch
    autograd, the custom ops and torch.compile run on the CPU: `specs` maps a kernel name to the spec its reference
    reads (forward kernels and backward steps). The call's dynamic sizes are bound from its arguments' shapes,
    floating inputs go in as float64 (integer ones, class indices, as they are), outputs come back rounded to the
    kernel's dtypes, into `out=` when given. Returns the list of `record(kernel, args)` of every call, in order
    (default: the kernel's name)."""
    import numpy as np
    import torch

    from schedgen.reference import reference
    from schedgen.runtime.kernel import Kernel
    from schedgen.runtime.torch_op import torch_dtype
    seen: list = []
    record = record or (lambda kernel, args: kernel.name)

    def call_cuda(self, args, out, stream):
        seen.append(record(self, args))
        spec = specs[self.name]
        sizes = {n: v for n, v in spec.op.sizes.items() if isinstance(v, int)}
        sizes.update(self.bind([tuple(a.shape) for a in args]))
        ins = {o.name: (a.detach().to(torch.float64) if a.dtype.is_floating_point else a.detach()).numpy()
               for a, o in zip(args, self.inputs)}
        res = reference(spec, sizes, ins)
        made = tuple(torch.tensor(np.asarray(res[o.name], np.float64)).to(torch_dtype(o.dtype)) for o in self.outputs)
        if out is not None:
            for dst, r in zip(out, made):
                dst.copy_(r)
            made = tuple(out)
        return made[0] if len(made) == 1 else made

    monkeypatch.setattr(Kernel, "_call_cuda", call_cuda)
    return seen


def graph_keeping_backend():
    """A torch.compile backend (aot_autograd) that keeps the forward and backward graphs it is given and runs them
    as they are: (backend, graphs), graphs filled with "fw" and "bw" once a compiled call has traced."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    graphs: dict = {}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind] = gm
            return make_boxed_func(gm.forward)
        return compiler
    return aot_autograd(fw_compiler=keep("fw"), bw_compiler=keep("bw")), graphs


def run_process_group(cmd: list[str], timeout: float, **kw):
    """subprocess.run(cmd, capture_output=True, text=True) in a session of its own, which is killed whole when
    `timeout` passes (then subprocess.TimeoutExpired, as subprocess.run raises). For helpers that fork: run's own
    timeout kills the helper alone, and its reading of the pipes then waits for every forked child that holds
    them, forever if one is stuck (a child forked beside another thread can be)."""
    import signal
    import subprocess
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                          **kw) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise subprocess.TimeoutExpired(cmd, timeout, out, err) from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
