"""`gpumem_kernel.watch()` in a front end that shows the object a cell ends with and runs no IPython extension
(marimo): it returns the live widget, fed by the watches' own sampler, rather than displaying it; `stop=True` stops
it; where no widget can be made it returns the static table saying why. In Jupyter it still returns nothing (a
returned widget would show twice). marimo itself runs the same in tests/test_marimo.py."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Iterator

import pytest

import gpumem_kernel
from gpumem_kernel import current
from gpumem_kernel.probe.sampler import Sampler
from gpumem_kernel.watchwidget import live
from gpumem_kernel.watchwidget import registry as watches
from gpumem_kernel.watchwidget.session import STOPPED_CLOSED
from gpumem_kernel.watchwidget.widget import OFFLINE_LINE, WatchUnavailable
from fake_nvml import FakeGpu, GiB


@pytest.fixture
def sampler(make_prober) -> Sampler:
    return Sampler(make_prober([FakeGpu(name="Tesla T4", uuid="GPU-t4", total=15 * GiB, used=GiB)]))


@pytest.fixture
def own_watches(sampler, monkeypatch) -> Iterator[watches.Registry]:
    """The watches a marimo notebook gets, over a fake GPU (the real ones start a sampler thread of their own)."""
    registry = watches.Registry(None, sampler, None, front_end=True)
    monkeypatch.setattr(current, "_alone_watches", registry)
    monkeypatch.setattr(live, "sample_now", sampler.snapshot)
    yield registry
    registry.close()


@pytest.fixture
def in_marimo(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "marimo", SimpleNamespace(running_in_notebook=lambda: True))


def test_in_marimo_watch_returns_the_live_widget_and_stop_stops_it(in_marimo, own_watches, sampler, capsys):
    widget = gpumem_kernel.watch(compact=True)
    assert type(widget).__name__ == "GpuMemWatch" and widget.compact
    assert capsys.readouterr().out == ""  # returned for the cell to show, not displayed as well
    assert [watch.widget for watch in own_watches.live] == [widget]
    assert sampler.listener_count == 1

    gpumem_kernel.watch(stop=True)
    assert capsys.readouterr().out.strip() == "stopped 1 live watch"
    assert own_watches.live == [] and sampler.listener_count == 0
    widget.close()


def test_in_marimo_without_a_widget_the_cell_shows_the_table_and_why(in_marimo, own_watches, monkeypatch):
    def unavailable() -> None:
        raise WatchUnavailable("live watch needs anywidget (anywidget is not importable): pip install 'anywidget>=0.9'")

    monkeypatch.setattr(live, "widget_class", unavailable)
    shown = gpumem_kernel.watch()._repr_html_()
    assert "live watch needs anywidget" in shown and OFFLINE_LINE in shown and "Tesla T4" in shown
    assert own_watches.live == []


def test_outside_marimo_watch_returns_nothing(monkeypatch, own_watches):
    monkeypatch.setitem(sys.modules, "marimo", SimpleNamespace(running_in_notebook=lambda: False))
    assert gpumem_kernel.watch() is None  # shown by display() (here: no front end, the snapshot table)
    assert own_watches.live == []


def test_a_comm_closed_on_the_kernel_side_stops_the_watch(in_marimo, own_watches, sampler):
    """marimo closes the comm itself, not through the widget, when the watch's cell runs again or is deleted."""
    widget = gpumem_kernel.watch()
    sent = []
    widget.comm.send = lambda data=None, metadata=None, buffers=None: sent.append(data)
    widget.comm.close()
    assert own_watches.live == [] and sampler.listener_count == 0
    assert sent[-1]["content"]["stopped"] == STOPPED_CLOSED  # said before the comm closed
