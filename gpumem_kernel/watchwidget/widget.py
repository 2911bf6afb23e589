"""The watch as a Jupyter widget: anywidget serves the front end (static/watch.js, built from src/watch/) from
this package, so it runs wherever ipywidgets 8 runs (JupyterLab and Notebook 7 without our labextension, VS
Code, Colab) with nothing fetched from a CDN for our part.

Where no widget manager renders it (nbconvert, GitHub, a terminal IPython) the same output shows the static
status table, with one line saying it would be live in a notebook.
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from gpumem_kernel.render.status import status_bundle

STATIC = Path(__file__).resolve().parent / "static"
ESM = STATIC / "watch.js"
CSS = STATIC / "watch.css"
OFFLINE_LINE = (
    "A snapshot: %gpumem watch is live in a notebook front end with Jupyter widgets "
    "(JupyterLab, Notebook 7, VS Code, Colab)."
)


class WatchUnavailable(RuntimeError):
    """Why no live widget can be made here (one line)."""


@lru_cache(maxsize=1)
def widget_class() -> Any:
    """The anywidget class, built on first use (anywidget and ipywidgets load only when a watch is asked for)."""
    try:
        import anywidget
        import traitlets
    except ImportError as error:
        raise WatchUnavailable(
            f"live watch needs anywidget ({error.name} is not importable): pip install 'anywidget>=0.9'"
        ) from None
    if not ESM.is_file():
        raise WatchUnavailable(f"the watch's front end is missing ({ESM}): reinstall jupyterlab-gpumem")

    class GpuMemWatch(anywidget.AnyWidget):  # type: ignore[misc]
        _esm = ESM
        _css = CSS
        compact = traitlets.Bool(False).tag(sync=True)
        # The kernel's clock when the watch was made: the peak counts samples from then on. Samples are messages,
        # not state: a view opened later asks for the history instead.
        started = traitlets.Float(0.0).tag(sync=True)

        def __init__(self, fallback: Mapping[str, Any], **kwargs: Any) -> None:
            super().__init__(started=time.time(), **kwargs)
            self._fallback = dict(fallback)
            self._closers: List[Callable[[], None]] = []
            if self.comm is not None:
                self.comm.on_close(lambda _msg: self._run_closers())  # the front end's widget manager went away
                _stop_before_close(self.comm, self._run_closers)

        def on_close(self, callback: Callable[[], None]) -> None:
            """`callback()` once, when the widget is closed from either side (the watch stops feeding it)."""
            self._closers.append(callback)

        def close(self) -> None:
            self._run_closers()
            super().close()

        def _run_closers(self) -> None:
            closers, self._closers = self._closers, []
            for callback in closers:
                callback()

        def _repr_mimebundle_(self, **kwargs: Any) -> Optional[Tuple[Dict[str, Any], Dict[str, Any]]]:
            bundle = super()._repr_mimebundle_(**kwargs)
            if bundle is None:
                return None
            data, metadata = bundle
            return {**offline_bundle(self._fallback), **data, "text/plain": offline_text(self._fallback)}, metadata

    return GpuMemWatch


def _stop_before_close(comm: Any, stop: Callable[[], None]) -> None:
    """marimo closes a widget's comm itself, not through the widget, when the widget's cell runs again or is deleted:
    the watch must stop feeding it then too. A comm has no hook for its own side's close, so its close is wrapped."""
    close = comm.close

    def stop_then_close(*args: Any, **kwargs: Any) -> Any:
        stop()  # first: the front end still gets the watch's last message, saying it stopped
        return close(*args, **kwargs)

    comm.close = stop_then_close


def offline_text(sample: Mapping[str, Any]) -> str:
    return f"{OFFLINE_LINE}\n{status_bundle(sample)['text/plain']}"


def offline_bundle(sample: Mapping[str, Any]) -> Dict[str, str]:
    """What a front end without widgets shows: the static table, saying it is a snapshot."""
    table = status_bundle(sample)
    return {
        "text/html": f'<p class="jp-GpuMem-watchOffline"><em>{OFFLINE_LINE}</em></p>{table["text/html"]}',
        "text/plain": offline_text(sample),
    }


@dataclass
class Snapshot:
    """What a cell ending with `gpumem_kernel.watch()` shows where no live widget can be made: the static table and
    the one line saying why (marimo shows the object a cell ends with)."""

    sample: Mapping[str, Any]
    reason: str

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Dict[str, str]:
        bundle = offline_bundle(self.sample)
        return {
            "text/html": f"<p>{html.escape(self.reason)}</p>{bundle['text/html']}",
            "text/plain": f"{self.reason}\n{bundle['text/plain']}",
        }

    def _repr_html_(self) -> str:
        return self._repr_mimebundle_()["text/html"]
