"""Defect 10 (issue 14): `-D` values bypassed the loader's alias limit.

`-D` values were read with yaml.safe_load, which shares aliased nodes: a 300-character value with 9 nested
aliases (9**9 leaves) loaded at once, then deepcopy and validation walked all of it (41 s). Values now go
through the loader's own reader (`load_yaml_value`): aliases are expanded against MAX_NODES, nesting against
MAX_DEPTH, tags and integers checked, exactly as in a file.
"""
from __future__ import annotations

import pytest

from _cli import DATA, run_child
from schedgen.frontend.load import MAX_NODES
from schedgen.frontend.validate import parse_overrides

BOMB = "[" + ",".join(["&a [x,x,x,x,x,x,x,x,x]"]
                      + [f"&{c} [" + ",".join([f"*{p}"] * 9) + "]" for p, c in zip("abcdefgh", "bcdefghi")]) + "]"


def test_alias_bomb_value_is_refused_at_once():
    assert len(BOMB) <= 300
    # refused once MAX_NODES values are made, which the message says (the old code walked all 9**9 leaves, 41 s, and
    # said something else): no wall-clock limit, which a loaded machine fails
    with pytest.raises(ValueError, match=rf"^-D schedule.backends: document has more than {MAX_NODES} values "
                                         r"\(alias bomb\?\)"):
        parse_overrides([f"schedule.backends={BOMB}"])


def test_alias_bomb_on_the_command_line_exits_2_quickly():
    # the message says the reader stopped at MAX_NODES values (see above); the child's time limit only stops a hang
    res = run_child("validate", str(DATA / "add_bf16.yaml"), "-D", f"schedule.backends={BOMB}")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.startswith("schedgen: -D schedule.backends: document has more than")


def test_recursive_alias_value_is_refused():
    with pytest.raises(ValueError, match="nested more than 100 levels"):
        parse_overrides(["schedule.backends=&a [*a]"])


@pytest.mark.parametrize("value,why", [("!!python/object:os.system x", "YAML tag"), ("0x10", "hexadecimal"),
                                       ("1:08:16", "base-60")])
def test_value_gets_the_file_loaders_checks(value, why):
    with pytest.raises(ValueError, match=why):
        parse_overrides([f"M={value}"])


def test_small_aliases_and_plain_values_still_work():
    got = parse_overrides(["schedule.backends=[&b cuda, *b]", "M=64", "dt=bf16", "flag=true", "r=[1, 2]", "e=",
                           "op.body=o = x + y"])
    assert got == {"schedule.backends": ["cuda", "cuda"], "M": 64, "dt": "bf16", "flag": True, "r": [1, 2], "e": "",
                   "op.body": "o = x + y"}
