"""The `gpu` marker's target (tests/conftest.py): a Hopper test skips on a Blackwell GPU and a Blackwell test
(`gpu(target="sm_100a")`) runs there. Regression: every gpu test was skipped unless the GPU could run sm_90a, so the
sm_100a tests could never run, not even on a B200."""
from __future__ import annotations

import pytest

import conftest
from schedgen.runtime import driver


class _Item:
    def __init__(self, **kwargs):
        self.marker = pytest.mark.gpu(**kwargs).mark
        self.added = []

    def get_closest_marker(self, name):
        return self.marker if name == "gpu" else None

    def add_marker(self, mark):
        self.added.append(mark)


class _Config:
    """The hook's config: --slow given (slow tests are not what this file checks)."""

    @staticmethod
    def getoption(name):
        return True


@pytest.mark.parametrize("gpu,runs", [("sm_100", {"sm_100a"}), ("sm_90", {"sm_90a"}), (None, set())])
def test_gpu_tests_skip_by_their_target(monkeypatch, gpu, runs):
    def available(target="sm_90a"):
        if gpu is None:
            return False, "no NVIDIA driver"
        ok = target.startswith(gpu)
        return ok, "NVIDIA GPU, " + gpu if ok else f"the GPU is {gpu}, the kernels are built for {target}"

    monkeypatch.setattr(driver, "available", available)
    hopper, blackwell = _Item(), _Item(target="sm_100a")
    conftest.pytest_collection_modifyitems(_Config(), [hopper, blackwell])
    for item, target in ((hopper, "sm_90a"), (blackwell, "sm_100a")):
        if target in runs:
            assert item.added == []
        else:
            (mark,) = item.added
            assert mark.name == "skip" and target in mark.kwargs["reason"]
            assert ("Blackwell" if target == "sm_100a" else "Hopper") in mark.kwargs["reason"]


class _SlowItem(_Item):
    def get_closest_marker(self, name):
        return pytest.mark.slow.mark if name == "slow" else None


@pytest.mark.parametrize("flag,env,skipped", [(False, "", True), (True, "", False), (False, "1", False),
                                               (False, "0", True)])
def test_slow_tests_run_only_when_asked(monkeypatch, flag, env, skipped):
    """A `slow` campaign is skipped unless --slow or SCHEDGEN_SLOW (not 0) asks for it (issue 41: CI stays fast)."""
    monkeypatch.setenv("SCHEDGEN_SLOW", env)

    class Config:
        @staticmethod
        def getoption(name):
            return flag

    item = _SlowItem()
    conftest.pytest_collection_modifyitems(Config(), [item])
    assert [m.name for m in item.added] == (["skip"] if skipped else [])
