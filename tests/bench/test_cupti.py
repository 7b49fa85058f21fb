"""The CUPTI kernel clock (schedgen/bench/cupti.py) against a fake `cupti` module: what it enables, flushes and
reads, and how it turns activity records into time per call. The real binding runs in bench.gpu on the GPU."""
from __future__ import annotations

import sys
import types

import pytest

from schedgen.bench import cupti as clock


class FakeCupti:
    """cupti-python's activity API as kernel_ms uses it: kernels 'launched' by the test append records, which
    reach the completed-buffer callback at a forced flush, and only while their kind is enabled."""

    class ActivityKind:
        CONCURRENT_KERNEL = 10
        MEMCPY = 1
        MEMSET = 2
        DRIVER = 3

    def __init__(self):
        self.enabled, self.pending, self.calls, self.cb = set(), [], [], None

    def activity_register_callbacks(self, requested, completed):
        assert requested() == (8 << 20, 0)
        self.cb = completed

    def activity_enable(self, kind):
        self.calls.append(("enable", kind))
        self.enabled.add(kind)

    def activity_disable(self, kind):
        self.calls.append(("disable", kind))
        self.enabled.discard(kind)

    def activity_flush_all(self, flag):
        self.calls.append(("flush", flag))
        done, self.pending = self.pending, []
        self.cb(done)

    def launch(self, start, end, kind=10):
        if kind in self.enabled:
            self.pending.append(types.SimpleNamespace(kind=kind, start=start, end=end))


@pytest.fixture
def fake(monkeypatch):
    f = FakeCupti()
    pkg = types.ModuleType("cupti")
    pkg.cupti = f
    monkeypatch.setitem(sys.modules, "cupti", pkg)
    monkeypatch.setattr(clock, "_state", {})
    return f


def test_gpu_time_per_call_counts_only_work_launched_inside(fake):
    fake.enabled = {10}
    fake.launch(0, 999_000)                  # before: flushed away, never counted
    fake.enabled = set()

    def call(i):
        fake.launch(1000 * i, 1000 * i + 2_000_000 + 1000 * i)     # call i: 2 ms + i us of kernel
        fake.launch(0, 5, kind=FakeCupti.ActivityKind.DRIVER)     # an API record is not GPU work
    ms = clock.kernel_ms(call, 5, lambda: None)
    assert ms == pytest.approx(2.002)        # the median of 2.000 .. 2.004
    assert ("enable", 10) in fake.calls and ("disable", 10) in fake.calls
    assert fake.calls.index(("enable", 10)) > fake.calls.index(("flush", 1))


def test_a_device_copy_is_timed_on_the_same_clock_as_a_kernel(fake):
    """The copy peer (cuMemcpyDtoD) and a workspace memset are GPU work of a call: CUPTI times them like kernels,
    so a copy's ratio against a kernel is never mixed with CUDA events."""
    ms = clock.kernel_ms(lambda i: fake.launch(0, 1_500_000, kind=FakeCupti.ActivityKind.MEMCPY), 3, lambda: None)
    assert ms == pytest.approx(1.5)
    assert {("enable", 1), ("enable", 2), ("enable", 10)} <= set(fake.calls)


def test_calls_of_several_kernels_are_summed_per_call():
    stamps = [(0, 10), (10, 40), (100, 110), (110, 150), (200, 210), (210, 230)]   # 3 calls of 2 kernels
    assert clock.per_call(stamps, 3) == pytest.approx(40 / 1e6)
    assert clock.per_call(stamps[:5], 3) == pytest.approx(100 / 3 / 1e6)          # uneven: the mean


def test_no_kernel_seen_is_none_not_zero(fake):
    assert clock.kernel_ms(lambda i: None, 3, lambda: None) is None


def test_missing_binding_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupti", None)       # import cupti raises ImportError
    monkeypatch.setattr(clock, "_state", {})
    assert "cupti-python unavailable" in clock.why_unavailable()
    assert clock.kernel_ms(lambda i: None, 3, lambda: None) is None


def test_clock_sampler_summarises_the_samples_taken_while_timing():
    import threading

    from schedgen.bench.environment import ClockSampler
    seen = threading.Event()
    values = iter([1980.0, 1755.0, 1830.0] + [1830.0] * 1000)

    def read():
        seen.set()
        return {"sm_clock_mhz": next(values), "power_draw_w": 500.0}
    with ClockSampler(period=0.001, read=read) as s:
        assert seen.wait(10)
        while len(s.samples) < 3:
            seen.wait(0.01)
    got = s.summary()
    assert got["samples"] >= 3
    assert got["sm_clock_mhz"]["min"] == 1755.0 and got["sm_clock_mhz"]["max"] == 1980.0
    assert got["power_draw_w"] == {"min": 500.0, "median": 500.0, "max": 500.0}
    assert ClockSampler(read=lambda: {"error": "no GPU"}).summary() == {"error": "no sample"}
