"""`%gpumem watch`'s kernel side: a watch gets the panel's own `history` and `sample` messages (valid under the
wire schemas), keeps the sampler at one sample a second while it is live, stops (and says why) on `stop`, on a
closed output, or when more than MAX_LIVE are live, answers the front end's requests with one line when they
are bad, and leaves no listener behind after 100 open/close cycles. The widget is a stand-in here (what a front
end sends and receives is the same); the real anywidget class is checked for what a front end without widgets
shows."""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Optional

import pytest

from gpumem_kernel.channel.comm import Channel
from gpumem_kernel.probe.sampler import Sampler
from gpumem_kernel.watchwidget import registry as watches
from gpumem_kernel.watchwidget.session import (
    MAX_LIVE,
    STOPPED_BY_USER,
    STOPPED_DETACHED,
    STOPPED_REPLACED,
    WATCH_INTERVAL,
)
from gpumem_kernel.wire.protocol import validate
from fake_comm import FakeComm, open_msg
from fake_nvml import FakeGpu, GiB


class FakeWidget:
    """What anywidget gives the kernel side: send() to the front end, on_msg() for what it sends back."""

    def __init__(self) -> None:
        self.sent: List[Dict[str, Any]] = []
        self._callback: Optional[Callable[..., None]] = None

    def send(self, content: Dict[str, Any], buffers: Any = None) -> None:
        json.dumps(content)  # JSON as it stands, as the comm needs it
        self.sent.append(content)

    def on_msg(self, callback: Callable[..., None], remove: bool = False) -> None:
        self._callback = callback

    def front_end_sends(self, content: Any) -> None:
        assert self._callback is not None
        self._callback(self, content, [])

    def kinds(self) -> List[str]:
        return [m["type"] for m in self.sent]


@pytest.fixture
def sampler(make_prober) -> Sampler:
    gpu = FakeGpu(
        name="NVIDIA A100-SXM4-80GB", uuid="GPU-a100", total=80 * GiB, used=31 * GiB, processes=[(4242, 9 * GiB)]
    )
    return Sampler(make_prober([gpu]), interval=5.0)  # the panel asked for a slow rhythm


@pytest.fixture
def channel(sampler) -> Channel:
    return Channel(sampler, "0.1.0")


@pytest.fixture
def registry(sampler, channel) -> watches.Registry:
    return watches.Registry(None, sampler, channel, front_end=True)


def test_a_watch_gets_the_history_then_every_sample_valid_under_the_panels_schemas(registry, sampler):
    sampler.sample_once()
    widget = FakeWidget()
    registry.start(widget)
    sampler.sample_once()
    sampler.sample_once()

    assert widget.kinds() == ["history", "sample", "sample"]
    assert [s["seq"] for s in widget.sent[0]["samples"]] == [1]
    assert [m["seq"] for m in widget.sent[1:]] == [2, 3]
    for message in widget.sent:
        validate(message)
    assert widget.sent[-1]["gpu"]["devices"][0]["name"] == "NVIDIA A100-SXM4-80GB"


def test_the_sampler_runs_once_a_second_while_a_watch_is_live_and_returns_to_its_rhythm_after(registry, sampler):
    widget = FakeWidget()
    watch = registry.start(widget)
    assert sampler.interval == WATCH_INTERVAL

    watch.stop()
    assert sampler.interval == 5.0


def test_a_panel_asking_for_faster_samples_keeps_its_rhythm_beside_a_watch(registry, sampler, channel):
    registry.start(FakeWidget())
    panel = FakeComm("panel")
    channel._on_open(panel, open_msg({"type": "open", "protocol": 1, "interval": 0.2}))
    assert sampler.interval == 0.2


def test_stop_says_why_and_no_sample_follows(registry, sampler):
    widget = FakeWidget()
    registry.start(widget)
    assert registry.stop_all() == 1
    sampler.sample_once()

    assert widget.kinds() == ["history", "watch_event"]
    event = widget.sent[-1]
    validate(event)
    assert event["stopped"] == STOPPED_BY_USER
    assert registry.stop_all() == 0


def test_a_closed_output_stops_the_watch_and_a_view_that_comes_back_starts_it_again(registry, sampler):
    widget = FakeWidget()
    registry.start(widget)
    widget.front_end_sends({"request": "detach"})
    assert widget.sent[-1]["stopped"] == STOPPED_DETACHED
    assert sampler.listener_count == 0

    widget.front_end_sends({"request": "history"})
    sampler.sample_once()
    assert widget.kinds()[-2:] == ["history", "sample"]
    assert sampler.listener_count == 1


def test_the_oldest_watch_stops_when_more_than_max_live_would_be_fed(registry, sampler):
    widgets = [FakeWidget() for _ in range(MAX_LIVE + 1)]
    for widget in widgets:
        registry.start(widget)

    assert widgets[0].sent[-1]["stopped"] == STOPPED_REPLACED
    assert len(registry.live) == MAX_LIVE
    assert sampler.listener_count == MAX_LIVE


def test_a_bad_request_gets_one_line_and_the_watch_goes_on(registry, sampler):
    widget = FakeWidget()
    registry.start(widget)
    widget.front_end_sends({"request": "rm -rf"})
    widget.front_end_sends(["not", "an", "object"])
    sampler.sample_once()

    errors = [m["error"] for m in widget.sent if m["type"] == "watch_event"]
    assert len(errors) == 2 and all("\n" not in e and "unknown watch request" in e for e in errors)
    assert widget.kinds()[-1] == "sample"


def test_no_listener_is_left_after_100_watches_opened_and_closed(registry, sampler):
    for _ in range(100):
        widget = FakeWidget()
        registry.start(widget)
        widget.front_end_sends({"request": "detach"})
    assert sampler.listener_count == 0
    assert registry.live == []
    assert sampler.interval == 5.0


def test_clear_from_the_widget_answers_with_the_clear_report(registry, monkeypatch):
    from gpumem_kernel.clear import reclaim

    calls: List[Any] = []
    real = reclaim.clear_gpu_memory

    def clear(shell: Any = None, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(shell, dry_run=True)  # the test kernel's namespace is not ours to change

    monkeypatch.setattr(reclaim, "clear_gpu_memory", clear)
    widget = FakeWidget()
    registry.start(widget)
    widget.front_end_sends({"request": "clear"})

    event = widget.sent[-1]
    validate(event)
    assert calls == [{}]  # no variable named: nothing of the user's is deleted
    assert event["clear"]["version"] == 1


def test_the_real_widget_shows_a_snapshot_where_no_front_end_renders_widgets(make_prober):
    from gpumem_kernel.probe.sampler import Sampler as _Sampler
    from gpumem_kernel.watchwidget.widget import ESM, OFFLINE_LINE, widget_class

    sample = _Sampler(make_prober([FakeGpu(name="Tesla T4", uuid="GPU-t4", total=15 * GiB, used=GiB)])).snapshot()
    widget = widget_class()(fallback=sample, compact=True)
    try:
        data, _ = widget._repr_mimebundle_()
        assert data["application/vnd.jupyter.widget-view+json"]["model_id"] == widget.model_id
        assert OFFLINE_LINE in data["text/html"] and "Tesla T4" in data["text/html"]
        assert data["text/plain"].startswith(OFFLINE_LINE)
        assert widget._esm == ESM.read_text("utf-8")  # the front end travels with the package
        assert "jp-GpuMem-watch" in widget._esm
    finally:
        widget.close()


def test_100_real_widgets_opened_and_closed_leave_no_listener(registry, sampler, make_prober):
    from gpumem_kernel.watchwidget.widget import widget_class

    fallback = sampler.snapshot()
    for _ in range(100):
        widget = widget_class()(fallback=fallback)
        registry.start(widget)
        widget.close()
    assert sampler.listener_count == 0
    assert registry.live == []
