"""Helpers of the backward tests: a spec with a backward section, float64 gradients by the graph and by finite
differences of the forward's reference."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from schedgen import families
from schedgen.autodiff.graph import check, evaluate
from schedgen.errors import SourceMap
from schedgen.frontend.validate import load_spec, validate_data
from schedgen.reference import shape_of

ROOT = Path(__file__).resolve().parents[2]


def spec_with(tmp_path, data: dict, backward: dict | None = None):
    data = dict(data)
    if backward is not None:
        data["backward"] = backward
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_spec(str(path))


def bundled(name: str) -> dict:
    return yaml.safe_load((ROOT / "specs" / name).read_text())


def validated(data: dict, label: str = "<derived>"):
    return validate_data(data, SourceMap(label))


def step_spec(step):
    return validated(step.spec, f"<{step.name}>")


def reference_runner(sizes):
    def run(step, values):
        spec = step_spec(step)
        return families.of(spec).reference(spec, sizes, values)
    return run


def graph_gradients(spec, graph, sizes, inputs, upstream):
    """The graph's gradients with the families' float64 references, each summed back to its input's shape."""
    fwd = spec if graph.forward is None else validated(graph.forward, "<forward>")
    outputs = families.of(fwd).reference(fwd, sizes, inputs)
    assert not check(graph, set(spec.op.inputs), set(outputs)), check(graph, set(spec.op.inputs), set(outputs))
    grads = evaluate(graph, inputs, outputs, upstream, reference_runner(sizes))
    return grads      # evaluate sums each broadcast gradient back to its input's shape (graph.sum_to)


def finite_differences(spec, sizes, inputs, upstream, wrt, h=1e-6):
    ref = families.of(spec).reference

    def loss(vals):
        out = ref(spec, sizes, vals)
        return sum(float(np.sum(np.asarray(out[o], dtype=np.float64) * upstream[o])) for o in upstream)

    grads = {}
    for w in wrt:
        g = np.zeros(inputs[w].shape)
        for idx in np.ndindex(*inputs[w].shape):
            p, m = dict(inputs), dict(inputs)
            p[w] = inputs[w].copy()
            m[w] = inputs[w].copy()
            p[w][idx] += h
            m[w][idx] -= h
            g[idx] = (loss(p) - loss(m)) / (2 * h)
        grads[w] = g
    return grads


def random_case(spec, sizes, seed=0, positive=()):
    rng = np.random.default_rng(seed)
    inputs = {n: rng.standard_normal(shape_of(o, sizes)) for n, o in spec.op.inputs.items()}
    for n in positive:
        inputs[n] = np.abs(inputs[n]) + 0.5
    out_shapes = {n: shape_of(o, sizes) for n, o in spec.op.outputs.items()}
    upstream = {n: rng.standard_normal(s) for n, s in out_shapes.items()}
    return inputs, upstream
