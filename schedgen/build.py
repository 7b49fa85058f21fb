"""spec -> plan -> render -> compile -> package, through the content-addressed cache."""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

from . import families
from . import plan as planner
from .cache import Cache, digest, key_of
from .toolchain.nvrtc import ARCH, compile_cuda, nvrtc_version, resource_usage
from .errors import Problem, SourceMap
from .render import render, templates_hash
from .frontend.specfile import SpecFile
from .frontend.load import read_spec_bytes
from .frontend.validate import load_spec

PACKAGE_TEMPLATE = "shared/package.py.j2"
CUDA_FILES = ("kernel.cu", "kernel.ptx", "kernel.cubin")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def toolchain() -> dict[str, Any]:
    return {
        "schedgen": _version("schedgen") or "source",
        "nvrtc": nvrtc_version(),
        "cuda_bindings": _version("cuda-bindings"),
        "jax": _version("jax"),
        "arch": ARCH,
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
    files: dict[str, bytes]     # kernel.cu, kernel.ptx, kernel.cubin, pallas_kernel.py, plan.json, manifest.json
    cache_hit: bool

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def warnings(self) -> list[str]:
        """The compiler's verdicts that cost speed, located at the field that buys registers back:
        'file:line:col: schedule.pipeline.compute_registers: warning: ...'."""
        verdicts = json.loads(self.files["manifest.json"]).get("compiler_verdicts", [])
        field = ("schedule", "pipeline", "compute_registers")
        advice = "; raise compute_registers (the budget setmaxnreg gives each consumer) or use smaller blocks"
        return [self.source.format(Problem(field, f"warning: {v}{advice}")) for v in verdicts]


def build_spec(path: str | Path, overrides: Mapping[str, Any] | None = None, cache: Cache | None = None) -> Built:
    """Validate, plan, render and compile one schedule file (raises SpecErrors / ToolchainError)."""
    spec, src = load_spec(str(path), overrides)
    plan = planner.plan(spec, src)
    plan_json = planner.to_json(plan)
    tools = toolchain()
    key = key_of({"plan": plan_json, "templates": templates_hash(), **{k: str(v) for k, v in tools.items()}})
    spec_hash = digest(read_spec_bytes(path))  # the same bounded, regular-file-only read as the loader

    def make() -> dict[str, bytes]:
        files: dict[str, bytes] = {"plan.json": plan_json.encode()}
        usage, verdicts = {}, []
        if "cuda" in plan.backends:
            cu = render(plan, "cuda")
            compiled = compile_cuda(cu, f"{plan.name}.cu")
            usage = resource_usage(compiled.cubin).get(plan.kernel_name, {})
            verdicts = compiler_verdicts(compiled.log, usage)
            files.update({"kernel.cu": cu.encode(), "kernel.ptx": compiled.ptx.encode(), "kernel.cubin": compiled.cubin})
        if "pallas" in plan.backends:
            files["pallas_kernel.py"] = render(plan, "pallas").encode()
        manifest = {
            "name": plan.name, "family": plan.family, "kernel": plan.kernel_name, "cache_key": key,
            "plan_sha256": digest(plan_json.encode()), "toolchain": tools, "backends": list(plan.backends),
            "resources": {"smem_bytes": plan.smem_bytes, "threads": plan.threads, "blocks": plan.num_blocks,
                          "blocks_per_sm": plan.blocks_per_sm, **{k.lower(): v for k, v in usage.items()}},
            "compiler_verdicts": verdicts,
        }
        files["manifest.json"] = json.dumps(manifest, indent=1, sort_keys=True).encode()
        return files

    files, hit = (cache or Cache()).get_or_build(key, make)
    manifest = json.loads(files["manifest.json"])
    manifest["spec_sha256"] = spec_hash
    manifest["spec_file"] = str(path)
    files = dict(files, **{"manifest.json": json.dumps(manifest, indent=1, sort_keys=True).encode()})
    return Built(spec, src, plan, files, hit)


def package(built: Built, out_dir: str | Path) -> Path:
    """Write `out_dir/<name>/` importable as a Python package exposing the kernel function."""
    from .render import environment
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    init = out_dir / "__init__.py"
    if not init.exists():
        # A regular package, so `import build.<name>` finds this folder before an installed package of the same
        # name (a folder without __init__.py is only a namespace portion, which any regular package shadows).
        init.write_text('"""Kernels built by schedgen."""\n')
    dest = out_dir / built.name
    tmp = dest.with_name(f".{built.name}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    for name, data in built.files.items():
        (tmp / name).write_bytes(data)
    # a family whose call differs (multi-device) has a package template of its own
    template = families.of(built.plan).template("package.py.j2") or PACKAGE_TEMPLATE
    module = environment().get_template(template).render(p=built.plan)
    (tmp / "__init__.py").write_text(module)
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
    return dest
