"""Hand-written backward graphs on the map family, for the wiring tests (build, package, torch autograd, jax.grad)
while the families' own backward hooks are being written: `installed(monkeypatch, hook)` puts a hook on the
registered map Family (a frozen dataclass: dataclasses.replace, then the registry entry patched).

The forward is `y = x * w + b` over x, w [M, N] and a bias row b [N] (f32):
- `plain`: nothing saved, one step `gx = gy * w; gw = gy * x; gb = gy` (gb full-shape: the runtime sums it back to
  [N]);
- `saving`: the forward rewritten to `h = x * w + b; y = h * h` with h an extra output (saved), and two steps:
  `gh = 2 * gy * h` (a value), then `gx = gh * w; gw = gh * x; gb = gh`.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from conftest import import_package  # noqa: F401  (re-exported to the autodiff tests)
from schedgen import registry
from schedgen.autodiff.graph import BackwardGraph, Step, evaluate
from schedgen.build import build_spec, package
from schedgen.cache import Cache
from schedgen.frontend.validate import validate_data
from schedgen.errors import SourceMap
from schedgen.reference import reference

M, N = 64, 512


def spec_text(name: str = "fma_f32", body: str = "y = x * w + b", backward: str = "backward: {}") -> str:
    return f"""name: {name}
op:
  kind: map
  sizes: {{M: {M}, N: {N}}}
  inputs:
    x: {{shape: [M, N], dtype: f32}}
    w: {{shape: [M, N], dtype: f32}}
    b: {{shape: [N], dtype: f32}}
  outputs:
    y: {{shape: [M, N], dtype: f32}}
  body: |
    {body.replace(chr(10), chr(10) + '    ')}
schedule:
  grid_names: [i, j]
  in_specs:
    x: {{block_shape: [32, 256], index_map: "(i, j)"}}
    w: {{block_shape: [32, 256], index_map: "(i, j)"}}
    b: {{block_shape: [256], index_map: "(j,)"}}
  out_specs:
    y: {{block_shape: [32, 256], index_map: "(i, j)"}}
  num_warpgroups: 2
  pipeline: {{kind: emit_pipeline, max_concurrent_steps: 2}}
{backward}
"""


def map_spec(name: str, sizes: dict, inputs: dict, outputs: dict, body: str) -> dict:
    """A map spec (plain data) over [M, N] / [N] operands, tiled like the forward."""
    def block(shape):
        return {"block_shape": [32, 128], "index_map": "(i, j)"} if len(shape) == 2 else \
            {"block_shape": [128], "index_map": "(j,)"}
    return {
        "name": name,
        "op": {"kind": "map", "sizes": dict(sizes),
               "inputs": {n: {"shape": list(s), "dtype": "f32"} for n, s in inputs.items()},
               "outputs": {n: {"shape": list(s), "dtype": "f32"} for n, s in outputs.items()},
               "body": body},
        "schedule": {"grid_names": ["i", "j"], "in_specs": {n: block(s) for n, s in inputs.items()},
                     "out_specs": {n: block(s) for n, s in outputs.items()}, "num_warpgroups": 2,
                     "pipeline": {"kind": "emit_pipeline", "max_concurrent_steps": 2}},
    }


MN, NN = ["M", "N"], ["N"]


def plain(spec, src):
    """One step writing the gradients of the inputs in backward.wrt (default: x, w and b)."""
    sizes = dict(spec.op.sizes)
    wrt = tuple(spec.backward.wrt or ("x", "w", "b"))
    lines = {"x": "gx = gy * w", "w": "gw = gy * x", "b": "gb = gy"}
    reads = {"x": "w", "w": "x", "b": None}
    ins = {"gy": MN, **{reads[n]: MN for n in wrt if reads[n]}}
    step = Step("fma_bwd", map_spec(f"{spec.name}_bwd", sizes, ins, {f"g{n}": MN for n in wrt},
                                    "\n".join(lines[n] for n in wrt)),
                inputs={"gy": "grad:y", **{k: f"in:{k}" for k in ins if k != "gy"}},
                outputs={f"g{n}": f"grad:{n}" for n in wrt},
                why="the gradients of x, w and b from gy (gb summed over the rows)")
    return BackwardGraph(forward=None, saved=(), steps=(step,), grads=wrt,
                         notes=("nothing saved: the step reads x and w",)), []


def saving(spec, src):
    sizes = dict(spec.op.sizes)
    fwd = map_spec(spec.name, sizes, {"x": MN, "w": MN, "b": NN}, {"y": MN, "h": MN}, "h = x * w + b\ny = h * h")
    s1 = Step("dh", map_spec(f"{spec.name}_dh", sizes, {"gy": MN, "h": MN}, {"gh": MN}, "gh = 2.0 * gy * h"),
              inputs={"gy": "grad:y", "h": "out:h"}, outputs={"gh": "value"}, why="dy/dh = 2 h, times gy")
    s2 = Step("dxwb", map_spec(f"{spec.name}_dxwb", sizes, {"gh": MN, "x": MN, "w": MN},
                               {"gx": MN, "gw": MN, "gb": MN}, "gx = gh * w\ngw = gh * x\ngb = gh"),
              inputs={"gh": "step:dh.gh", "x": "in:x", "w": "in:w"},
              outputs={"gx": "grad:x", "gw": "grad:w", "gb": "grad:b"}, why="the gradients of x, w and b from gh")
    return BackwardGraph(forward=fwd, saved=("h",), steps=(s1, s2), grads=("x", "w", "b"),
                         notes=("h (the pre-square value) saved by the forward",)), []


def installed(monkeypatch, hook):
    """The map family with `hook` as its backward, for the test's duration."""
    registry._load()
    fam = dataclasses.replace(registry._REGISTRY["map"], backward=hook)
    monkeypatch.setitem(registry._REGISTRY, "map", fam)
    return fam


def step_spec(step: Step):
    return validate_data(step.spec, SourceMap(file="<step>"))


def run_reference(step: Step, values: dict) -> dict:
    """A step by its family's float64 reference."""
    spec = step_spec(step)
    return reference(spec, dict(spec.op.sizes), values)


def float64_grads(graph: BackwardGraph, fwd_spec, ins: dict, gy: np.ndarray) -> dict:
    """The backward's float64 reference: the graph evaluated with the families' references."""
    outs = reference(fwd_spec, dict(fwd_spec.op.sizes), ins)
    return evaluate(graph, ins, outs, {"y": gy}, run_reference)


def forward64(body_outputs: str, ins: dict) -> np.ndarray:
    """y of the forward, float64."""
    x, w, b = (np.asarray(ins[k], np.float64) for k in "xwb")
    h = x * w + b
    return h if body_outputs == "plain" else h * h


def finite_difference(which: str, ins: dict, gy: np.ndarray, name: str, index: tuple, eps: float = 1e-3) -> float:
    """d(sum(y * gy)) / d ins[name][index], central differences of the float64 forward."""
    def loss(v):
        changed = {k: np.asarray(a, np.float64).copy() for k, a in ins.items()}
        changed[name][index] = v
        return float(np.sum(forward64(which, changed) * gy))
    x0 = float(ins[name][index])
    return (loss(x0 + eps) - loss(x0 - eps)) / (2 * eps)


BODIES = {"plain": "y = x * w + b", "saving": "h = x * w + b\ny = h * h"}


def build_hand(tmp: Path, which: str, name: str, backward: str = "backward: {}", hook=None):
    """Build (and package into tmp/out) the spec `name` with the `which` graph as the map family's backward."""
    spec = tmp / f"{name}.yaml"
    spec.write_text(spec_text(name, BODIES[which], backward))
    with pytest.MonkeyPatch.context() as mp:
        installed(mp, hook or globals()[which])
        built = build_spec(spec, cache=Cache(tmp / "cache"))
    return built, package(built, tmp / "out")




_BUILT: dict = {}


def hand_packages(tmp_path_factory):
    """{which: (Built, package folder)} for the plain and the saving graph, and a wrt: [x] build of the plain one
    (built once a session: each test module's fixture calls this)."""
    if not _BUILT:
        tmp = tmp_path_factory.mktemp("handgraph")
        _BUILT.update({"plain": build_hand(tmp, "plain", "fma_plain"),
                       "saving": build_hand(tmp, "saving", "fma_saving"),
                       "wrt_x": build_hand(tmp, "plain", "fma_wrt_x", "backward: {wrt: [x]}"),
                       "tmp": tmp})
    return _BUILT


def host_inputs(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((M, N)).astype(np.float32),
            "w": rng.standard_normal((M, N)).astype(np.float32),
            "b": rng.standard_normal(N).astype(np.float32)}


def upstream(seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((M, N)).astype(np.float32)


def closed_form(which: str, ins: dict, gy: np.ndarray) -> dict:
    """The gradients of sum(y * gy), worked by hand in float64 (independent of the graph)."""
    x, w, b = (np.asarray(ins[k], np.float64) for k in "xwb")
    gh = np.asarray(gy, np.float64) * (1.0 if which == "plain" else 2.0 * (x * w + b))
    return {"x": gh * w, "w": gh * x, "b": gh.sum(axis=0)}
