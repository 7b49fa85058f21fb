"""`schedgen bench --at`: a dynamic-size package timed at the shapes a user names (one package, no rebuild).

Without it a dynamic package was timed only at its sizes' max, which for attention_bf16_dynamic (B up to 64, S up
to 32768) is a quarter-hour launch and no shape anyone serves."""
from __future__ import annotations

import pytest

from conftest import SPECS_DIR
from schedgen import cli
from schedgen.bench import check_at, run
from schedgen.build import build_spec

DYNAMIC = str(SPECS_DIR / "attention_bf16_dynamic.yaml")      # B: 1..64, S: 128..32768 step 128


@pytest.fixture(scope="module")
def plan():
    return build_spec(DYNAMIC).plan


def test_legal_sizes_pass(plan):
    assert check_at(plan, {"B": 4, "S": 4096}) == []
    assert check_at(plan, {"S": 128}) == []


def test_every_problem_is_named_with_what_is_legal(plan):
    problems = check_at(plan, {"B": 65, "S": 4000, "H": 8})
    assert problems == ["B=65: B must be in 1..64",
                        "S=4000: S must be a multiple of 128 (in 128..32768)",
                        "H is not a dynamic size of attention_bf16_dynamic (its dynamic sizes: B, S)"]


def test_a_fixed_size_spec_has_nothing_to_set():
    problems = check_at(build_spec(str(SPECS_DIR / "add_bf16.yaml")).plan, {"M": 64})
    assert len(problems) == 1 and "has no dynamic size" in problems[0] and "-D NAME=VALUE" in problems[0]


@pytest.fixture
def timed(monkeypatch):
    """bench_built as on a GPU, _bench replaced by a recorder of the sizes each call times at."""
    calls = []
    monkeypatch.setattr(run, "gpu_missing", lambda: None)

    def fake(built, family, backends, *, iters, warmup, env, at=None):
        calls.append(dict(at or {}))
        return [{"spec": built.plan.launch.name, "backend": b, "verified": True} for b in backends]
    monkeypatch.setattr(run, "_bench", fake)
    monkeypatch.setattr("schedgen.bench.print_skips", lambda rows: rows)
    monkeypatch.setattr("schedgen.bench.markdown", lambda rows: f"{len(rows)} rows\n")
    return calls


def test_each_at_is_one_timing_of_the_one_package(timed, capsys):
    assert cli.main(["bench", DYNAMIC, "--at", "B=4,S=4096", "--at", "S=1024", "--backend", "cuda"]) == 0
    assert timed == [{"B": 4, "S": 4096}, {"S": 1024}]
    assert "2 rows" in capsys.readouterr().out


def test_without_at_the_package_is_timed_at_its_max(timed):
    assert cli.main(["bench", DYNAMIC, "--backend", "cuda"]) == 0
    assert timed == [{}]                      # _bench fills in each size's max


def test_an_illegal_at_is_a_usage_error_before_any_timing(timed, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", DYNAMIC, "--at", "B=4,S=4000", "--at", "G=2"])
    assert exc.value.code == 2 and timed == []
    err = capsys.readouterr().err
    assert "attention_bf16_dynamic.yaml: --at: S=4000: S must be a multiple of 128" in err
    assert "G is not a dynamic size" in err


@pytest.mark.parametrize("text", ["B4", "B=four", "B=-1", "=3"])
def test_a_malformed_at_is_an_argparse_error(text, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", DYNAMIC, "--at", text])
    assert exc.value.code == 2
    assert "expected NAME=VALUE with a positive integer value" in capsys.readouterr().err
