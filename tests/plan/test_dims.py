"""Extents known at the call (schedgen/plan/dims.py): folding, evaluation, bounds, JSON and spelling."""
from __future__ import annotations

import pytest

from schedgen.plan import dims as d
from schedgen.render import _cxxdim, _pydim

M, N = d.size("M"), d.size("N")
R = {"M": d.SizeRange("M", 1, 65536, 8), "N": d.SizeRange("N", 128, 4096, 128)}


def test_constants_fold_to_int_so_static_plans_keep_their_numbers():
    assert d.cdiv(4096, 128) * 2 + 1 == 65 and isinstance(d.cdiv(4096, 128), int)
    assert M * 1 is M and M + 0 is M and (M * 0) == 0 and d.cdiv(M, 1) is M


@pytest.mark.parametrize("m,n", [(1, 128), (8, 4096), (300, 1000), (65536, 128)])
def test_evaluate_matches_python_and_json_round_trips(m, n):
    e = d.dmin(d.cdiv(M, 128) * d.cdiv(N, 256), 132) + M % 64 + (N // 2)
    want = min(-(-m // 128) * -(-n // 256), 132) + m % 64 + n // 2
    assert d.evaluate(e, {"M": m, "N": n}) == want
    back = d.from_json(d.to_json(e), {"M", "N"})
    assert back == e and d.evaluate(back, {"M": m, "N": n}) == want
    # the spellings compute the same number
    assert eval(_pydim(e), {"sz_M": m, "sz_N": n}) == want


def test_bounds_cover_every_legal_call():
    e = d.cdiv(M, 128) * d.cdiv(N, 256)
    assert d.upper(e, R) == 512 * 16 and d.lower(e, R) == 1
    assert d.divisible(M * 16, 128, R) and not d.divisible(M, 16, R) and d.divisible(N + 128, 128, R)


def test_a_dynamic_extent_refuses_to_act_as_a_number():
    with pytest.raises(TypeError, match="known only at launch"):
        bool(M > 0) if False else bool(M)
    with pytest.raises(TypeError):
        range(M)


@pytest.mark.parametrize("bad,msg", [("K", "'K' is not a dynamic size"), (["**", "M", 2], "op one of"),
                                     (-1, "must be >= 0"), (True, "must be an integer")])
def test_from_json_refuses_what_it_did_not_write(bad, msg):
    with pytest.raises(ValueError, match=msg):
        d.from_json(bad, {"M"}, "num_blocks")


def test_cxx_spelling_is_int_math_over_kernel_arguments():
    assert _cxxdim(d.cdiv(M, 128) * 4) == "(((sz_M + 128 - 1) / 128) * 4)"
    assert _cxxdim(77) == "77" and _pydim(77) == "77"


def test_size_range_check_says_what_is_legal():
    r = R["M"]
    assert r.check(64) is None
    assert r.check(65544) == "must be in 1..65536"
    assert r.check(12) == "must be a multiple of 8 (in 1..65536)"
