"""Defect 7 (issue 14): `tune` expanded the whole product of the knobs' values before pruning.

Before the fix `expand()` built a list of every point, so a 10^10-point space (ten knobs of ten values) died of
MemoryError after ~22 s, and an index in a tune key such as `schedule.cluster[2000000000]` was accepted (a cluster
was "padded with 1s" to any length), so expanding it padded a list to 2e9 entries. `load_space` raised nothing for
either. Now the space is counted first (the product of the list lengths), a space past `MAX_SPACE` points is refused
with a located error at `tune.params` unless a `--budget N` random sample is asked for (seeded, without replacement,
drawn over the mixed-radix index space, never materialising the product), points are enumerated lazily, and an
index in a tune key is bounded by the list field's own `max_length`.
"""
from __future__ import annotations

import itertools
import math

import pytest

from _bounds import small_memory
from _specs import add_with_tune, matmul_with_tune
from schedgen import cli
from schedgen import tune as T
from schedgen.errors import SpecErrors

# ten knobs of ten values: 10^10 points. Every point fails validation (stages > 16), so a sample of them is pruned
# without compiling anything.
HUGE = """tune:
  params:
    block_M: [8, 16, 24, 32, 40, 48, 56, 64, 72, 80]
    block_N: [64, 128, 192, 256, 320, 384, 448, 512, 576, 640]
    stages: [17, 18, 19, 20, 21, 22, 23, 24, 25, 26]
    warpgroups: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    tile_width: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    num_blocks: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    minor_dim: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    schedule.in_specs.x.delay_release: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    schedule.in_specs.y.delay_release: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    schedule.compiler_params.profile_space: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
"""


def test_oversized_space_is_refused_at_load_with_a_located_error(tmp_path):
    path = add_with_tune(tmp_path, HUGE)
    with small_memory(), pytest.raises(SpecErrors) as err:
        T.load_space(path)
    text = err.value.render()
    line = path.read_text().splitlines().index("  params:") + 1
    assert text.startswith(f"{path}:{line}:") and ": tune.params: " in text, text
    assert "10000000000 points" in text and f"{T.MAX_SPACE}" in text and "--budget" in text, text
    assert "\n" not in text                         # one problem, one line


def test_cli_refuses_an_oversized_space_with_exit_2(tmp_path, capsys):
    path = add_with_tune(tmp_path, HUGE)
    with small_memory():
        assert cli.main(["tune", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "tune.params: the space has 10000000000 points" in err and "Traceback" not in err


def _decode(space, index):
    """The point at `index` in itertools.product order (the last knob fastest)."""
    values, rest = [], index
    for knob in reversed(space.knobs):
        rest, digit = divmod(rest, len(knob.values))
        values.append(knob.values[digit])
    return {k.name: v for k, v in zip(space.knobs, reversed(values))}


def test_budget_samples_without_replacement_lazily_and_reproducibly(tmp_path):
    path = add_with_tune(tmp_path, HUGE)
    with small_memory():
        space = T.load_space(path, budget=200, seed=7)
        cands = list(T.expand(space))
    assert space.size == 10 ** 10 and len(cands) == 200
    idx = [c.index for c in cands]
    assert idx == sorted(set(idx)) and all(0 <= i < 10 ** 10 for i in idx)
    assert all(c.values == _decode(space, c.index) for c in cands)
    again = [c.index for c in T.expand(T.load_space(path, budget=200, seed=7))]
    other = [c.index for c in T.expand(T.load_space(path, budget=200, seed=8))]
    assert again == idx and other != idx
    # spread over the whole space, not the first 200 points: the leading knob takes many values
    assert len({c.values["block_M"] for c in cands}) >= 8
    pruning = T.prune(space)
    assert pruning.total == 200 and pruning.space_size == 10 ** 10 and not pruning.kept


def test_budget_at_least_the_space_takes_every_point_in_order(tmp_path):
    path = add_with_tune(tmp_path, "tune:\n  params:\n    block_M: [16, 32, 64]\n    stages: [2, 3, 4]\n")
    space = T.load_space(path, budget=100)
    want = [dict(zip(("block_M", "stages"), v)) for v in itertools.product([16, 32, 64], [2, 3, 4])]
    assert [c.values for c in T.expand(space)] == want and [c.index for c in T.expand(space)] == list(range(9))


def test_cli_budget_runs_a_sample_and_says_so(tmp_path, capsys):
    path = add_with_tune(tmp_path, HUGE)
    assert cli.main(["tune", str(path), "--dry-run", "--budget", "30"]) == 0
    captured = capsys.readouterr()
    text = " ".join((captured.err + captured.out).split())          # rich wraps long lines
    assert "a random sample of 30 of 10000000000 points (--budget 30, seed 0)" in text
    assert "30 candidates, 30 pruned, 0 compiled" in text
    with pytest.raises(SystemExit) as stop:                         # a usage error, as argparse's own
        cli.main(["tune", str(path), "--dry-run", "--budget", str(T.MAX_SPACE + 1)])
    assert stop.value.code == 2
    assert f"--budget: at most {T.MAX_SPACE}" in capsys.readouterr().err


def test_enumeration_is_lazy(tmp_path):
    """A space just under the limit is not built as a list: the first point comes at once."""
    path = add_with_tune(tmp_path, HUGE.replace("[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n", "[0]\n")
                         .replace("[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n", "[1]\n"))
    space = T.load_space(path)
    assert space.size == 1000 <= T.MAX_SPACE
    first = next(iter(T.expand(space)))
    assert first.index == 0 and first.values["block_M"] == 8
    assert math.prod(len(k.values) for k in space.knobs) == space.size


@pytest.mark.parametrize("key", ["schedule.cluster[2000000000]", "schedule.cluster[3]",
                                 "schedule.in_specs.a.block_shape[5]"])
def test_index_past_the_fields_length_limit_is_located_at_the_tune_key(tmp_path, key):
    path = matmul_with_tune(tmp_path, f"tune:\n  params:\n    '{key}': [1, 2]\n")
    with small_memory(), pytest.raises(SpecErrors) as err:
        T.load_space(path)
    text = err.value.render()
    line = len(path.read_text().splitlines())
    assert text.startswith(f"{path}:{line}:") and f": tune.params.{key}: " in text, text
    assert "no entry" in text and ("at most 3 entries" in text or "has 2 entries" in text), text


def test_index_within_the_length_limit_pads_the_cluster(tmp_path):
    path = matmul_with_tune(tmp_path, "tune:\n  params:\n    'schedule.cluster[2]': [1, 2]\n")
    space = T.load_space(path)
    cands = list(T.expand(space))
    assert [c.overrides["schedule.cluster"] for c in cands] == [[1, 1, 1], [1, 1, 2]]
