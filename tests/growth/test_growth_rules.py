"""Growth's decisions without a kernel: when re-runs leave a consistent step, which leak pattern it is (one
test per rule), what the notice says, and when a running cell's samples show a trend. No timing."""

from __future__ import annotations

import math
from typing import List, Optional

import pytest

from gpumem_kernel.growth import reruns, rules
from gpumem_kernel.growth.report import GrowingHolder, RerunGrowth, headline, rerun_bundle, running_text
from gpumem_kernel.growth.trend import RunningTrend, claim
from gpumem_kernel.heldby.report import OUT_ENTRY, HolderEntry, HoldersReport
from gpumem_kernel.wire.protocol import validate

MiB = 1 << 20


def runs(*steps_mib: float) -> List[reruns.Run]:
    return [reruns.Run({"cuda:0": int(s * MiB)}, {"cuda:0": 0}) for s in steps_mib]


@pytest.mark.parametrize(
    "steps, expected",
    [
        ((5.8, 4, 4, 4), (4, 4)),  # a first run a little larger (one-off caches) still counts
        ((0, 4, 4, 4), (3, 4)),
        ((4, 40, 4, 4), None),  # a jump breaks the step: two runs since, not three
        ((4, 4), None),
        ((0.5, 0.5, 0.5, 0.5), None),  # below 1 MiB: allocator rounding
        ((4, 4, 4, -4), None),  # the last run freed memory
    ],
)
def test_a_step_needs_three_consistent_runs(steps, expected):
    found = reruns.growing(runs(*steps))
    assert (None if found is None else (found.runs, found.allocated // MiB)) == expected


def test_the_device_with_the_longest_consistent_step_is_named():
    both = [reruns.Run({"cuda:0": 2 * MiB, "cuda:1": s * MiB}, {}) for s in (9, 2, 2, 2)]
    step = reruns.growing(both)
    assert (step.device, step.runs) == ("cuda:0", 4)


def test_a_cell_is_known_by_its_id_else_by_its_source():
    assert reruns.cell_key("abc", "x = 1") == reruns.cell_key("abc", "x = 2")
    assert reruns.cell_key(None, "x = 1\n") == reruns.cell_key(None, "x = 1")
    assert reruns.cell_key(None, "x = 1") != reruns.cell_key(None, "x = 2")


def report(*entries: HolderEntry, unreachable: Optional[int] = None) -> HoldersReport:
    return HoldersReport("cuda", list(entries), None, 0, unreachable, False, None, 1.0, 50.0)


def entry(name: str, reached: int, tensors: int, description: str) -> HolderEntry:
    return HolderEntry(name, "variable", description, reached, reached, tensors)


def test_the_holders_that_grew_between_runs_largest_first():
    before = report(entry("losses", 12, 3, "list of 3 tensors with grad history"), entry("w", 400, 1, "tensor"))
    after = report(
        entry("losses", 16, 4, "list of 4 tensors with grad history"),
        entry("w", 400, 1, "tensor"),
        entry("cache", 4 * MiB, 2, "dict of 2 tensors"),
    )
    grown = reruns.grown_holders(before, after)
    assert [(h.name, h.bytes, h.tensors) for h in grown] == [("cache", 4 * MiB, 2), ("losses", 4, 1)]
    assert reruns.grown_holders(None, after) == []


def evidence(*grown: GrowingHolder, source: str = "", held: Optional[HoldersReport] = None) -> rules.Evidence:
    return rules.Evidence(list(grown), 8 * MiB, source, held)


GRAPHS = GrowingHolder("outs", 8 * MiB, 1, "list of 4 tensors with grad history")


@pytest.mark.parametrize(
    "case, pattern, named",
    [
        (evidence(GrowingHolder("losses", 4, 1, "list of 4 tensors with grad history")), "loss_with_graph", "losses"),
        (evidence(GRAPHS, source="outs.append(model(x))"), "eval_with_graph", "outs"),
        (evidence(GRAPHS, source="outs.append(model(x))\nloss.backward()"), "outputs_with_graph", "outs"),
        (evidence(GrowingHolder(OUT_ENTRY, 8 * MiB, 1, "IPython's output cache")), "output_cache", "`;`"),
        (
            evidence(
                source="model = Net().cuda()\nopts.append(Adam(model.parameters()))",
                held=report(entry("model", 8 * MiB, 4, "Net, 2.1M params")),
            ),
            "kept_old_object",
            "`del model`",
        ),
    ],
)
def test_each_leak_pattern_has_its_fix(case, pattern, named):
    finding = rules.classify(case)
    assert finding is not None and finding.pattern == pattern and named in finding.fix
    assert finding.pattern in rules.PATTERNS


def test_growth_no_rule_explains_has_no_fix():
    assert rules.classify(evidence(GrowingHolder("cache", 8 * MiB, 2, "dict of 2 tensors"))) is None


def notice(runs_left: Optional[int] = 7) -> RerunGrowth:
    holder = GrowingHolder("losses", 4, 1, "list of 4 tensors with grad history")
    return RerunGrowth(12, None, "cuda:0", 512 * MiB, 0, 3, runs_left, [holder], "loss_with_graph", "use <.item()>")


def test_the_notice_reads_as_one_line_and_escapes_its_html():
    assert headline(notice()) == (
        "Cell [12] leaves +512.00 MiB allocated on cuda:0 after each run (3 runs); "
        "at this rate the GPU is full after 7 more runs"
    )
    assert headline(notice(None)).endswith("after each run (3 runs)")
    bundle = rerun_bundle(notice())
    assert "`losses` +1 tensor, +4 B (now list of 4 tensors with grad history)" in bundle["text/plain"]
    assert "use &lt;.item()&gt;" in bundle["text/html"] and "<.item()>" not in bundle["text/html"]


def sample(t: float, allocated: int, free: Optional[int] = 1024 * MiB) -> dict:
    allocator = {"allocated": allocated, "reserved": allocated}
    return {"time": t, "gpu": {"devices": [{"cuda_index": 0, "allocator": allocator, "free": free}]}}


def line(seconds: int, rate_per_s: float, noise: int = 0) -> list:
    return [(float(t), int(rate_per_s * t + (noise if t % 2 else -noise))) for t in range(seconds)]


@pytest.mark.parametrize(
    "points, claimed",
    [
        (line(120, MiB / 2), True),  # 30 MiB/min for two minutes
        (line(120, MiB / 2, noise=4 * MiB), True),  # a training loop's per-step ups and downs on top
        (line(30, MiB / 2), False),  # too short to say
        (line(120, 0), False),  # flat
        (line(120, 1000), False),  # under 1 MiB/min
        ([(float(t), 0 if t < 60 else 500 * MiB) for t in range(120)], False),  # one jump is no trend
        ([(float(t), int(200 * MiB * abs(math.sin(t / 3)))) for t in range(120)], False),  # a saw-tooth
    ],
)
def test_a_trend_inside_a_cell_needs_time_samples_and_a_steady_rise(points, claimed):
    assert (claim(points) is not None) is claimed


def test_the_running_trend_is_sent_while_claimed_and_ended_once():
    sent = []
    trend = RunningTrend(sent.append, now=lambda: 1000.0)
    trend.start(7)
    for t in range(120):
        trend(sample(1000.0 + t, 100 * MiB + int(t * MiB / 2)))
    assert sent and sent[0].running is not None
    last = sent[-1].running
    assert (last.device, last.cell, round(last.rate / MiB)) == ("cuda:0", 7, 30)
    assert last.full_in == pytest.approx(1024 * MiB / (MiB / 2), rel=0.01)  # free / rate: ~34 min
    assert running_text(last) == "allocated grows 30.00 MiB/min on cuda:0 in this cell; full in ~34 min"
    validate(sent[-1].to_dict())
    assert trend.stop() is True and trend.stop() is False
    before = len(sent)
    trend(sample(2000.0, 0))  # no cell running: nothing is kept or sent
    assert len(sent) == before


def test_a_notice_message_validates():
    from gpumem_kernel.growth.report import Growth

    validate(Growth(time=1.0, running=None, rerun=notice()).to_dict())
