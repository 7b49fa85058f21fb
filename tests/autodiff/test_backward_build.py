"""Building a spec with a `backward` section (schedgen/build.py): the forward from the family's rewrite, every
step a sub-package backward/<step>/ built through the same pipeline and cache, backward.json; the hook's problems
and a step spec that fails its checks as located errors at the spec's `backward` field; an inconsistent graph as a
clear family-bug error; `schedgen explain` listing the backward."""
from __future__ import annotations

import dataclasses
import json

import pytest

import handgraph as hg
from handgraph import build_hand, hand_packages
from schedgen.autodiff.graph import BackwardGraph, Step
from schedgen.errors import Problem, SpecErrors


@pytest.fixture(scope="module")
def hand(tmp_path_factory):
    return hand_packages(tmp_path_factory)


def test_the_package_holds_the_forward_the_steps_and_backward_json(hand):
    built, root = hand["saving"]
    assert [o.name for o in built.plan.outputs] == ["y", "h"]          # the rewritten forward: h kept
    assert built.backward.user_outputs == ("y",)
    assert set(built.backward.steps) == {"dh", "dxwb"}
    for step, sub in built.backward.steps.items():
        folder = root / "backward" / step
        for name, data in sub.files.items():
            assert (folder / name).read_bytes() == data
        assert (folder / "__init__.py").is_file() and (folder / "kernel.cubin").is_file()
        assert json.loads((folder / "launch.json").read_text())["name"] == sub.name == f"fma_saving_{step}"
    rec = json.loads((root / "backward.json").read_text())
    assert rec["user_outputs"] == ["y"] and rec["saved_outputs"] == ["h"]
    assert BackwardGraph.from_json(rec["graph"]) == built.backward.graph
    assert json.loads((root / "launch.json").read_text())["outputs"][1]["name"] == "h"
    doc = (root / "__init__.py").read_text()
    assert "kernel.call_user(x, w, b," in doc and "also writes h for the backward pass" in doc


def test_a_plain_graph_builds_the_spec_as_written(hand):
    built, root = hand["plain"]
    assert [o.name for o in built.plan.outputs] == ["y"]
    assert json.loads((root / "backward.json").read_text())["saved_outputs"] == []
    assert list(built.backward.steps) == ["fma_bwd"]


def test_a_spec_without_backward_is_packaged_as_before(tmp_path):
    spec = tmp_path / "p.yaml"
    spec.write_text(hg.spec_text("no_bw", backward=""))
    from schedgen.build import build_spec, package
    from schedgen.cache import Cache
    built = build_spec(spec, cache=Cache(tmp_path / "c"))
    root = package(built, tmp_path / "out")
    assert built.backward is None and not (root / "backward.json").exists() and not (root / "backward").exists()
    assert "return kernel(x, w, b," in (root / "__init__.py").read_text()


def test_a_rebuild_hits_the_cache_for_every_kernel(hand):
    tmp = hand["tmp"]
    built, _ = build_hand(tmp, "saving", "fma_saving")
    assert built.cache_hit and all(s.cache_hit for s in built.backward.steps.values())


def _line_of(path, start):
    return next(i for i, t in enumerate(path.read_text().splitlines(), 1) if t.startswith(start))


def _with(graph_fn, **changes):
    def hook(spec, src):
        graph, problems = graph_fn(spec, src)
        return dataclasses.replace(graph, **changes), problems
    return hook


def test_the_hooks_problems_are_located_errors(tmp_path):
    def hook(spec, src):
        return None, [Problem(("backward", "save"), "h is not a temporary of the body: legal: (none)")]
    with pytest.raises(SpecErrors) as e:
        build_hand(tmp_path, "plain", "fma_p", "backward: {save: [h]}", hook=hook)
    lines = e.value.lines()
    line = _line_of(tmp_path / "fma_p.yaml", "backward:")
    assert len(lines) == 1 and lines[0].startswith(f"{tmp_path / 'fma_p.yaml'}:{line}:18: ")
    assert "backward.save: h is not a temporary of the body" in lines[0]


def test_a_step_spec_that_fails_validation_is_a_family_bug_at_the_backward_field(tmp_path):
    def bad(spec, src):
        graph, p = hg.plain(spec, src)
        step = graph.steps[0]
        data = dict(step.spec, op=dict(step.spec["op"], body="gx = gy * nope\ngw = gy\ngb = gy"))
        return dataclasses.replace(graph, steps=(dataclasses.replace(step, spec=data),)), p
    with pytest.raises(SpecErrors) as e:
        build_hand(tmp_path, "plain", "fma_bad", hook=bad)
    (line,) = e.value.lines()
    at = _line_of(tmp_path / "fma_bad.yaml", "backward:")
    assert line.startswith(f"{tmp_path / 'fma_bad.yaml'}:{at}:11: backward: step fma_bwd of the map family's backward "
                           f"fails its own checks (a schedgen bug in the map family")
    assert "op.body" in line and "nope" in line


def test_a_step_that_fails_planning_is_a_family_bug_at_the_backward_field(tmp_path):
    def big(spec, src):
        graph, p = hg.plain(spec, src)
        step = graph.steps[0]
        sched = dict(step.spec["schedule"], pipeline={"kind": "emit_pipeline", "max_concurrent_steps": 8})
        return dataclasses.replace(graph, steps=(dataclasses.replace(step, spec=dict(step.spec, schedule=sched)),)), p
    with pytest.raises(SpecErrors, match=r"backward: step fma_bwd of the map family's backward fails its own "
                                         r"checks .*schedule\.pipeline\.max_concurrent_steps: SMEM needed"):
        build_hand(tmp_path, "plain", "fma_big", hook=big)


def test_an_unresolved_reference_is_a_clear_family_bug(tmp_path):
    def wrong(spec, src):
        graph, p = hg.plain(spec, src)
        step = dataclasses.replace(graph.steps[0], inputs={"gy": "grad:y", "x": "in:x", "w": "out:nope"})
        return dataclasses.replace(graph, steps=(step,)), p
    with pytest.raises(RuntimeError, match=r"^fma_ref: the map family's backward graph is inconsistent \(a schedgen "
                                           r"bug in the map family's backward hook\): step fma_bwd: out:nope names no "
                                           r"forward output"):
        build_hand(tmp_path, "plain", "fma_ref", hook=wrong)


def test_a_saved_output_missing_from_the_forward_is_a_clear_family_bug(tmp_path):
    with pytest.raises(RuntimeError, match=r"the forward's outputs \['y'\] are not the spec's outputs then the "
                                           r"saved ones \(\['y', 'h'\]\)"):
        build_hand(tmp_path, "plain", "fma_sv", hook=_with(hg.plain, saved=("h",)))


def test_explain_lists_the_backward(tmp_path, capsys, monkeypatch):
    from schedgen import cli
    spec = tmp_path / "fma_e.yaml"
    spec.write_text(hg.spec_text("fma_e", "h = x * w + b\ny = h * h"))
    hg.installed(monkeypatch, hg.saving)
    assert cli.main(["explain", str(spec)]) == 0
    out = capsys.readouterr().out
    tail = out[out.index("backward pass"):]
    assert "gradients of: x, w, b" in tail
    assert "saved by the forward (extra outputs): h" in tail
    assert "dh (map): dy/dh = 2 h, times gy" in tail and "gh -> value" in tail
    assert "dxwb (map)" in tail and "gb -> grad:b (summed to [N])" in tail
    assert "h (the pre-square value) saved by the forward" in tail


def test_step_graph_is_plain_data():
    step = Step("a", {"name": "a"}, {"g": "grad:y"}, {"o": "value"}, "why")
    g = BackwardGraph(None, (), (step,), ("x",))
    assert BackwardGraph.from_json(json.loads(json.dumps(g.to_json()))) == g


def test_the_built_spec_is_the_forward_built_and_verify_checks_its_saved_outputs(tmp_path, monkeypatch):
    """Built.spec is the spec of the kernel built (the family's rewrite: y and h), so verify's reference covers
    the saved output too; the spec as written stays in Built.backward.written."""
    from schedgen.verify import verify_file
    built, _ = build_hand(tmp_path, "saving", "fma_v")
    assert list(built.spec.op.outputs) == ["y", "h"] and built.spec.backward is None
    assert list(built.backward.written.op.outputs) == ["y"] and built.backward.written.backward is not None
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    hg.installed(monkeypatch, hg.saving)
    checks = verify_file(str(tmp_path / "fma_v.yaml"), ["pallas"], interpret=True, seed=0)
    assert checks and all(c.ok for c in checks)
    assert {c.output for c in checks} >= {"y", "h"}


def test_schedgen_build_names_the_backward_kernels(tmp_path, capsys, monkeypatch):
    from schedgen import cli
    spec = tmp_path / "fma_c.yaml"
    spec.write_text(hg.spec_text("fma_c", "h = x * w + b\ny = h * h"))
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    hg.installed(monkeypatch, hg.saving)
    assert cli.main(["build", str(spec), "-o", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == f"  backward: gradients of x, w, b; 2 kernels in {tmp_path / 'out' / 'fma_c' / 'backward'}: dh, dxwb"
    assert (tmp_path / "out" / "fma_c" / "backward" / "dxwb" / "kernel.cubin").is_file()


def test_a_problem_of_the_written_spec_is_reported_as_the_users_not_as_a_family_bug(tmp_path):
    """The written spec is planned before the hook runs: its own mistakes are located errors of the file."""
    called = []

    def hook(spec, src):
        called.append(1)
        return hg.saving(spec, src)
    spec = tmp_path / "fma_u.yaml"
    spec.write_text(hg.spec_text("fma_u", "h = x * w + b\ny = h * h").replace("max_concurrent_steps: 2",
                                                                              "max_concurrent_steps: 9"))
    from schedgen.build import build_spec
    with pytest.MonkeyPatch.context() as mp:
        hg.installed(mp, hook)
        with pytest.raises(SpecErrors) as e:
            build_spec(spec)
    assert called == [] and "family" not in str(e.value)
    assert "schedule.pipeline.max_concurrent_steps:" in str(e.value)
