"""Comm lifetimes: each comm has its own interval, a quiet comm is dropped, the sampler runs no faster than
the fastest live comm needs, and the number of comms served is bounded."""

from __future__ import annotations

import time
from typing import List

import pytest

from gpumem_kernel.channel import comm as channel_module
from gpumem_kernel.channel.comm import MAX_COMMS, Channel, IdleClock
from gpumem_kernel.wire.protocol import validate
from gpumem_kernel.probe.sampler import Sampler
from kernel_harness import KernelHarness
from fake_comm import FakeComm, open_msg


class Clock:
    """A hand-moved monotonic clock."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sampler(make_prober) -> Sampler:
    return Sampler(make_prober([]))  # no GPU: the host part is enough here


@pytest.fixture
def channel(sampler, clock) -> Channel:
    return Channel(sampler, "0.1.0", clock=IdleClock(clock), now=clock)


def open_comm(channel: Channel, comm_id: str, **settings) -> FakeComm:
    comm = FakeComm(comm_id)
    channel._on_open(comm, open_msg({"type": "open", "protocol": 1, **settings}))
    return comm


def samples(comm: FakeComm) -> List[dict]:
    return [m for m in comm.sent if m["type"] == "sample"]


def tick(sampler: Sampler, clock: Clock, seconds: float, step: float) -> None:
    """Run the sampler by hand for `seconds` at `step`."""
    for _ in range(round(seconds / step)):
        clock.t += step
        sampler.sample_once()


def test_each_comm_gets_samples_at_its_own_interval(channel, sampler, clock):
    fast = open_comm(channel, "fast", interval=0.1)
    slow = open_comm(channel, "slow", interval=1.0)
    assert sampler.interval == 0.1  # the fastest live comm sets the rhythm
    tick(sampler, clock, 3.0, 0.1)
    assert len(samples(fast)) == 30
    assert 3 <= len(samples(slow)) <= 4


def test_configure_changes_only_the_asking_comm(channel, sampler):
    first = open_comm(channel, "first", interval=1.0)
    second = open_comm(channel, "second", interval=2.0)
    first.browser_sends({"type": "request", "id": "r-1", "action": "configure", "args": {"interval": 0.2}})
    assert first.sent[-1]["result"] == {"interval": 0.2, "history_seconds": 600}
    second.browser_sends({"type": "request", "id": "r-2", "action": "configure", "args": {}})
    assert second.sent[-1]["result"] == {"interval": 2.0, "history_seconds": 600}
    assert sampler.interval == 0.2


def test_the_sampler_slows_down_when_the_fast_comm_goes(channel, sampler):
    base = sampler.interval
    fast = open_comm(channel, "fast", interval=0.1)
    open_comm(channel, "slow", interval=5.0)
    assert sampler.interval == 0.1
    fast.browser_closes()
    assert sampler.interval == 5.0
    channel.unregister()
    assert sampler.interval == base


def test_a_quiet_comm_is_dropped_and_told_why(channel, sampler, clock):
    comm = open_comm(channel, "tab", interval=1.0)
    tick(sampler, clock, channel.quiet_seconds - 5, 1.0)
    assert not comm.closed
    tick(sampler, clock, 10, 1.0)
    assert comm.closed and comm.close_data == {"reason": "quiet"}
    assert channel.open_comms == 0 and sampler.listener_count == 0
    sent = len(comm.sent)
    tick(sampler, clock, 5, 1.0)
    assert len(comm.sent) == sent  # nothing more goes to a dropped comm


def test_pings_keep_a_comm_alive(channel, sampler, clock):
    comm = open_comm(channel, "tab", interval=1.0)
    for i in range(int(3 * channel.quiet_seconds / 15)):
        tick(sampler, clock, 15, 1.0)
        comm.browser_sends({"type": "request", "id": f"p-{i}", "action": "ping", "args": {}})
        assert comm.sent[-1] == {"type": "reply", "id": f"p-{i}", "action": "ping", "result": {}}
    validate(comm.sent[-1])
    assert not comm.closed and channel.open_comms == 1


def test_a_running_cell_does_not_count_as_silence(channel, sampler, clock):
    # Without subshells (ipykernel 6) the browser's pings wait behind the cell: silence then proves nothing.
    comm = open_comm(channel, "tab", interval=1.0)
    channel.clock.busy()
    tick(sampler, clock, 3 * channel.quiet_seconds, 1.0)
    assert not comm.closed
    channel.clock.idle()
    tick(sampler, clock, channel.quiet_seconds + 2, 1.0)
    assert comm.closed


def test_comms_beyond_the_limit_replace_the_quietest(channel, sampler, clock):
    comms = []
    for i in range(MAX_COMMS + 8):
        clock.t += 1.0
        comms.append(open_comm(channel, f"tab-{i}", interval=0.1))
    assert channel.open_comms == MAX_COMMS == sampler.listener_count
    assert all(c.closed and c.close_data == {"reason": "replaced: too many open comms"} for c in comms[:8])
    assert not any(c.closed for c in comms[8:])


@pytest.mark.kernel
def test_reloaded_tabs_leave_no_listeners_in_a_real_kernel():
    """50 tabs that open a comm at 0.1 s and vanish (crash, reload) stop costing anything once quiet."""
    quiet = 3.0
    with KernelHarness(extra_env={"GPUMEM_COMM_QUIET_SECONDS": str(quiet)}) as kernel:
        kernel.bootstrap()
        ids = [kernel.open_comm({"type": "open", "protocol": 1, "interval": 0.1}) for _ in range(50)]
        for comm_id in ids:
            kernel.wait_comm(comm_id, "hello")
        listeners = "__import__('gpumem_kernel.extension').extension.current().sampler.listener_count"
        assert kernel.evaluate(listeners) == channel_module.MAX_COMMS
        deadline = time.monotonic() + 30
        while kernel.evaluate(listeners) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert kernel.evaluate(listeners) == 0
        assert kernel.evaluate("__import__('gpumem_kernel.extension').extension.current().sampler.interval") == 1.0
        closed = {r.content["comm_id"]: r.content["data"] for r in kernel.messages() if r.msg_type == "comm_close"}
        assert set(closed) == set(ids)
        assert sorted({d["reason"] for d in closed.values()}) == ["quiet", "replaced: too many open comms"]
        # A live browser still gets served: it reopens and pings.
        live = kernel.open_comm({"type": "open", "protocol": 1, "interval": 0.5})
        kernel.wait_comm(live, "hello")
        for i in range(int(2 * quiet / 0.5)):
            kernel.send_comm(live, {"type": "request", "id": f"p-{i}", "action": "ping", "args": {}})
            time.sleep(0.5)
        start = len(kernel.messages())
        kernel.wait_comm(live, "sample", start=start, timeout=5)
        assert not [r for r in kernel.messages() if r.msg_type == "comm_close" and r.content["comm_id"] == live]
