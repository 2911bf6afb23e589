"""What the browser sends that is far out of bounds: an error echoes a cut value, never megabytes; a huge number
is a range error, never Python's integer-conversion limit; a `configure` that changes no sampling setting does
not make the sampler take a sample."""

from __future__ import annotations

from typing import List, Optional, Tuple

import pytest

from fake_comm import FakeComm, open_msg
from gpumem_kernel.channel.comm import ECHO_LIMIT, MESSAGE_LIMIT, Channel, bounded
from gpumem_kernel.probe.sampler import Sampler
from gpumem_kernel.wire.protocol import validate

FIVE_MB = 5 * 1024 * 1024


class CountingSampler(Sampler):
    """Counts reconfigurations: each one wakes the sampling thread for a sample at once."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.reconfigured: List[Tuple[Optional[float], Optional[int]]] = []

    def configure(self, interval=None, history_seconds=None):
        self.reconfigured.append((interval, history_seconds))
        return super().configure(interval, history_seconds)


@pytest.fixture
def sampler(make_prober) -> CountingSampler:
    return CountingSampler(make_prober([]))


@pytest.fixture
def comm(sampler) -> FakeComm:
    channel = Channel(sampler, "0.1.0")
    comm = FakeComm("c-1")
    channel._on_open(comm, open_msg({"type": "open", "protocol": 1}))
    return comm


def answer(comm: FakeComm, action: str, args) -> dict:
    comm.browser_sends({"type": "request", "id": "r-1", "action": action, "args": args})
    reply = comm.sent[-1]
    validate(reply)
    return reply


@pytest.mark.parametrize(
    "action, args",
    [
        ("configure", {"interval": "9" * FIVE_MB}),
        ("configure", {"rounding": "x" * FIVE_MB}),
        ("configure", {"x" * FIVE_MB: 1}),
        ("configure", {"interval": list(range(FIVE_MB // 8))}),  # a long value of short words
        ("snap" * (FIVE_MB // 4), {}),
    ],
)
def test_an_error_echoes_a_five_megabyte_value_cut(comm, action, args):
    reply = answer(comm, action, args)
    assert reply["type"] == "error" and reply["id"] == "r-1"
    message = reply["message"]
    assert len(message) < MESSAGE_LIMIT + 40 and "\n" not in message
    assert "…" in message  # cut here, or already by the check that quoted it


def test_a_cut_value_says_how_long_it_was():
    line = bounded(f"interval must be a number, got '{'9' * 1000}'")
    assert line == f"interval must be a number, got '{'9' * (ECHO_LIMIT - 1)}… (1,002 characters)"
    assert bounded("short and\nsecond line") == "short and"


def test_a_million_digit_rounding_is_a_range_error(comm):
    reply = answer(comm, "configure", {"rounding": "7" * 1_000_000})
    assert reply["type"] == "error" and reply["code"] == "bad-request"
    assert reply["message"] == (
        "configure: rounding N must be a multiple from 1 to 1048576, got a 1,000,000-digit number"
    )
    assert "limit" not in reply["message"]


def test_a_huge_seq_multiple_is_a_range_error(comm):
    reply = answer(comm, "configure", {"seq_multiple": 10**5000})
    assert reply["message"] == (
        "configure: seq_multiple must be a whole number of tokens from 1 to 65536, got a number of about 5,001 digits"
    )


def test_a_rounding_in_range_is_still_taken(comm):
    assert answer(comm, "configure", {"rounding": "0064"})["type"] == "reply"
    assert answer(comm, "configure", {"rounding": "2000000"})["message"].startswith("configure: unknown rounding")


def test_a_configure_of_settings_only_does_not_wake_the_sampler(comm, sampler):
    before = list(sampler.reconfigured)
    for args in ({"rounding": "pow2"}, {"oom_timeline": False}, {"seq_multiple": 8}, {}, {"interval": 1.0}):
        assert answer(comm, "configure", args)["type"] == "reply"
    assert sampler.reconfigured == before  # nothing the sample depends on changed
    answer(comm, "configure", {"interval": 0.5})
    assert sampler.reconfigured == before + [(0.5, 600)] and sampler.interval == 0.5
