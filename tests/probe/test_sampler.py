"""The sampler thread: bounded history, live interval changes, listeners, failures, stopping."""

from __future__ import annotations

import threading
import time
from typing import List

import pytest

from gpumem_kernel.probe.sampler import Sampler


def wait_for(condition, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


@pytest.fixture
def prober(make_prober):
    return make_prober([])


def test_history_keeps_only_history_seconds_worth_of_samples(prober):
    sampler = Sampler(prober, interval=1.0, history_seconds=10)
    for _ in range(25):
        sampler.sample_once()

    history = sampler.history()
    assert len(history) == 10
    assert [s["seq"] for s in history] == list(range(16, 26))  # the newest, oldest first


def test_shorter_interval_makes_room_for_more_samples(prober):
    sampler = Sampler(prober, interval=1.0, history_seconds=10)
    for _ in range(10):
        sampler.sample_once()
    sampler.configure(interval=0.5)
    for _ in range(30):
        sampler.sample_once()
    assert len(sampler.history()) == 20


def test_interval_change_takes_effect_while_running(prober):
    sampler = Sampler(prober, interval=30.0)
    sampler.start()
    try:
        assert wait_for(lambda: len(sampler.history()) == 1)
        sampler.configure(interval=0.1)  # without it the next sample would come in 30 s
        assert wait_for(lambda: len(sampler.history()) >= 5, timeout=5.0)
    finally:
        sampler.stop()


def test_stop_joins_the_thread_promptly(prober):
    sampler = Sampler(prober, interval=60.0)
    sampler.start()
    assert wait_for(lambda: len(sampler.history()) == 1)
    thread = next(t for t in threading.enumerate() if t.name == "gpumem-sampler")

    sampler.stop()

    assert not thread.is_alive()
    assert not sampler.running


def test_listeners_get_each_sample_and_a_raising_one_is_dropped(prober):
    sampler = Sampler(prober)
    got: List[int] = []

    def bad(sample: dict) -> None:
        raise RuntimeError("browser went away")

    sampler.add_listener(bad)
    sampler.add_listener(lambda s: got.append(s["seq"]))
    sampler.sample_once()
    sampler.sample_once()

    assert got == [1, 2]
    assert sampler.listener_count == 1


def test_subscribe_returns_the_past_and_then_delivers_the_future(prober):
    sampler = Sampler(prober)
    sampler.sample_once()
    got: List[int] = []
    past = sampler.subscribe(lambda s: got.append(s["seq"]))
    sampler.sample_once()
    assert [s["seq"] for s in past] == [1] and got == [2]


def test_a_failing_probe_is_reported_once_and_sampling_goes_on(prober):
    calls = {"n": 0}

    def flaky():
        calls["n"] += 1
        if calls["n"] in (2, 3):
            raise OSError("/proc is gone")
        return prober()

    sampler = Sampler(flaky)
    results = [sampler.sample_once() for _ in range(5)]

    assert results[1] is None and results[2] is None
    assert results[3]["errors"] == ["probe failed: OSError: /proc is gone"]
    assert results[4]["errors"] == []
    assert [r["seq"] for r in results if r] == [1, 2, 3]
    assert sampler.errors == ["probe failed: OSError: /proc is gone"]


def test_a_failing_probe_does_not_stop_the_thread(prober):
    calls = {"n": 0}

    def first_fails():
        calls["n"] += 1
        if calls["n"] == 1:
            raise ValueError("boom")
        return prober()

    sampler = Sampler(first_fails, interval=0.1)
    sampler.start()
    try:
        assert wait_for(lambda: len(sampler.history()) >= 2)
    finally:
        sampler.stop()
    assert sampler.history()[0]["errors"] == ["probe failed: ValueError: boom"]


def test_snapshot_is_fresh_and_not_stored(prober):
    sampler = Sampler(prober)
    sampler.sample_once()
    snap = sampler.snapshot()
    assert snap["seq"] == 0 and snap["time"] >= sampler.history()[-1]["time"]
    assert len(sampler.history()) == 1
