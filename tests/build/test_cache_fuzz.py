"""A small seeded run of tests/build/cache_fuzz.py (the figures in docs/reliability.md come from a larger run)."""
from __future__ import annotations

from cache_fuzz import concurrency_rounds, corruption_cases


def test_random_damage_to_a_cache_entry_is_always_a_clean_rebuild(tmp_path):
    cats, bad, notes = corruption_cases(24, seed=7, work=tmp_path)
    assert sum(cats.values()) == 24
    assert not notes, "\n".join(notes)


def test_random_concurrent_rounds_leave_one_whole_package(tmp_path):
    report = concurrency_rounds(6, seed=7, work=tmp_path)
    assert len(report) == 6
    failed = [r for r in report if r["problems"]]
    assert not failed, failed
