"""The payload's bounds, whatever the history: 10^6 allocations with distinct deep stacks still give a payload of
at most 1 MiB of JSON, with its peak exact (in its figures and in what bands + small draw at the peak) and what
is alive there summing to it; and on small histories every allocation is a band."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import List, Optional, Tuple

import jsonschema
import pytest

from gpumem_kernel.timeline.history import CATEGORIES, Alloc, Failed, History, RawFrame
from gpumem_kernel.timeline.payload import (
    MAX_BANDS,
    MAX_HOLDERS,
    MAX_PAYLOAD_BYTES,
    MAX_POINTS,
    build_payload,
    live_curve,
    summary_text,
)
from gpumem_kernel.timeline.store import STORE

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "gpumem_kernel" / "wire" / "schemas" / "timeline.schema.json").read_text()
)
USER = "/home/someone/projects/a-rather-long-project-name/src/models/very_deep_module_path/network.py"
LIB = "/opt/conda/envs/train/lib/python3.11/site-packages/torch/nn/modules/some_long_module_name.py"


def _stacks(count: int, depth: int = 64) -> List[Tuple[RawFrame, ...]]:
    """Distinct deep stacks: library frames inside a user line, then callers (each stack its own lines)."""
    out = []
    for n in range(count):
        frames = [RawFrame(LIB, 100 + k, f"library_function_{k}") for k in range(3)]
        frames += [RawFrame(USER, 10_000 + n * 7 + k, f"user_function_number_{k}") for k in range(depth - 3)]
        out.append(tuple(frames))
    return out


def synthetic(n: int, seed: int = 0, stacks: int = 50_000) -> History:
    """n allocations: sizes log-uniform from 1 B to 4 GiB, lifetimes random, each event its own index; a reserved
    series that changes at every allocation; a baseline; a failed allocation."""
    rng = random.Random(seed)
    pool = _stacks(stacks)
    live: List[Alloc] = []
    allocs: List[Alloc] = []
    at = 0
    reserved: List[Tuple[int, int]] = []
    reserved_now = 1 << 30
    while len(allocs) < n or live:
        if len(allocs) < n and (not live or rng.random() < 0.55):
            size = int(2 ** rng.uniform(0, 32)) + 1
            alloc = Alloc(size, CATEGORIES[rng.randrange(6)], at, None, pool[rng.randrange(stacks)])
            allocs.append(alloc)
            live.append(alloc)
            reserved_now += size
            reserved.append((at, reserved_now))
        else:
            last = rng.randrange(len(live))  # swap-remove: popping from the middle made 10^6 events take 13 s
            live[last], live[-1] = live[-1], live[last]
            victim = live.pop()
            if rng.random() < 0.999 or len(allocs) < n:
                victim.end = at
            else:
                at -= 1  # left alive at the end (no event)
        at += 1
        if len(allocs) == n and rng.random() < 0.001:
            break  # the rest stays alive
    return History(
        "recorded",
        "synthetic " + "x" * 500,
        "GPU",
        0,
        80 << 30,
        allocs,
        at,
        baseline=12345,
        reserved=reserved,
        failed=Failed(1 << 30, 1 << 20, pool[0]),
        notes=["a note from the source"],
    )


def check(payload, history: History) -> None:
    """The invariants every payload keeps."""
    data = payload.to_dict()
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    text = json.dumps(data)
    assert len(text.encode("utf-8")) <= MAX_PAYLOAD_BYTES
    curve = live_curve(history)
    assert payload.peak.bytes == max(curve) and payload.peak.at == curve.index(max(curve))
    assert sum(h.size for h in payload.alive_at_peak) == payload.peak.bytes
    assert len(payload.alive_at_peak) <= MAX_HOLDERS + 1
    assert len(payload.bands) <= MAX_BANDS and len(payload.small) <= MAX_POINTS
    assert payload.reserved is None or len(payload.reserved) <= MAX_POINTS
    # what the view draws at the peak: the baseline, the bands alive there, the small series in force there
    at = payload.peak.at
    bands = sum(b.size for b in payload.bands if b.start <= at and (b.end is None or b.end > at))
    in_force = [p for p in payload.small if p.at <= at]
    small = sum(json.loads(json.dumps(vars(in_force[-1].bytes))).values()) if in_force else 0
    assert payload.baseline + bands + small == payload.peak.bytes
    for band in payload.bands:
        assert band.size >= payload.min_band_bytes
    assert all(len(s.frames) <= 64 for s in payload.stacks)


def test_a_million_allocations_stay_under_one_mebibyte():
    history = synthetic(1_000_000)
    started = time.perf_counter()
    payload = build_payload(history, "tl-0123456789abcdef")
    elapsed = time.perf_counter() - started
    check(payload, history)
    size = len(json.dumps(payload.to_dict()))
    print(f"10^6 allocations: payload {size:,} bytes of JSON, built in {elapsed:.1f} s")
    assert payload.events_total == history.events_total
    assert payload.min_band_bytes > 0 and len(payload.bands) == MAX_BANDS
    assert any("summed per category" in n for n in payload.notes)
    assert any("small series" in n for n in payload.notes)
    assert any("reserved:" in n for n in payload.notes)
    assert payload.alive_at_peak[-1].rest is True  # thousands of source lines alive at the peak
    assert payload.failed is not None and payload.failed.size == 1 << 30
    assert payload.notes[0] == "a note from the source"
    assert len(payload.title) <= 200
    # reserved: exact at the peak
    in_force = [b for a, b in history.reserved if a <= payload.peak.at]
    assert payload.peak.reserved == in_force[-1]
    assert max(p.bytes for p in payload.reserved) == max(b for _, b in history.reserved)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mid_sized_histories_keep_the_invariants(seed):
    history = synthetic(20_000, seed=seed, stacks=300)
    check(build_payload(history, "tl-0123456789abcdef"), history)


def test_a_small_history_draws_every_allocation_and_no_notes():
    frames = (RawFrame(USER, 5, "forward"),)
    allocs = [
        Alloc(100, "activation", 0, 2, frames),
        Alloc(300, "parameter", 1, None),
        Alloc(50, "activation", 2, 3, frames),
    ]
    history = History("predicted", "tiny", None, None, None, allocs, 4)
    payload = build_payload(history, "tl-00000000")
    check(payload, history)
    assert payload.min_band_bytes == 0 and len(payload.bands) == 3 and payload.small == [] and payload.notes == []
    assert payload.peak.bytes == 400 and payload.peak.at == 1  # the first time it is reached
    assert [(h.size, h.category, h.count) for h in payload.alive_at_peak] == [
        (300, "parameter", 1),
        (100, "activation", 1),
    ]
    stack = payload.stacks[payload.bands[0].stack]
    assert stack.source == 0 and stack.frames[0].user is True and stack.frames[0].cell is None
    assert "400 B" in summary_text(payload) and f"{USER}:5 in forward" in summary_text(payload)


def test_allocations_of_one_line_are_one_row_and_the_baseline_is_an_other_row():
    line = (RawFrame(USER, 7, "forward"),)
    other = (RawFrame(USER, 9, "forward"),)
    allocs = [Alloc(10, "activation", i, None, line) for i in range(5)] + [Alloc(60, "activation", 5, None, other)]
    history = History("recorded", "t", None, 0, None, allocs, 6, baseline=1000)
    payload = build_payload(history, "tl-00000000")
    check(payload, history)
    rows = [(h.size, h.count, h.category, h.stack is None) for h in payload.alive_at_peak]
    assert rows == [(1000, 1, "other", True), (60, 1, "activation", False), (50, 5, "activation", False)]


def test_without_an_id_the_history_is_kept_for_export():
    history = History("predicted", "t", None, None, None, [Alloc(1, "other", 0, None)], 1)
    payload = build_payload(history)
    assert payload.id.startswith("tl-") and STORE.get(payload.id) is history


def test_the_store_keeps_the_last_four():
    from gpumem_kernel.timeline.store import TimelineStore

    store = TimelineStore()
    ids = [store.add(History("predicted", str(i), None, None, None, [], 1)) for i in range(6)]
    assert store.ids() == ids[2:] and store.get(ids[0]) is None and store.get(ids[-1]).title == "5"


def _small_check(history: History, expected_points: Optional[int] = None) -> None:
    payload = build_payload(history, "tl-00000000", min_band_bytes=1000)
    check(payload, history)
    if expected_points is not None:
        assert len(payload.small) == expected_points


def test_small_allocations_are_summed_per_category_exactly_when_few():
    allocs = [Alloc(10, "activation", 0, 3), Alloc(20, "gradient", 1, None), Alloc(5000, "parameter", 2, None)]
    history = History("predicted", "t", None, None, None, allocs, 4)
    payload = build_payload(history, "tl-00000000", min_band_bytes=1000)
    check(payload, history)
    assert [(p.at, p.bytes.activation, p.bytes.gradient) for p in payload.small] == [
        (0, 10, 0),
        (1, 10, 20),
        (3, 0, 20),
    ]
