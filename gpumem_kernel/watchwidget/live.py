"""Starting and stopping watches: the code behind `%gpumem watch` and `gpumem_kernel.watch()`.

In Jupyter the loaded extension's sampler feeds the watches and `display` shows them. marimo runs no IPython
extension and shows what a cell ends with: there the watches have a sampler of their own (`cell_watch`), and the
widget is returned, not displayed.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

from IPython.display import display

from gpumem_kernel import current
from gpumem_kernel.probe.snapshot import sample_now
from gpumem_kernel.watchwidget import registry
from gpumem_kernel.watchwidget.session import STOPPED_BY_USER, WATCH_INTERVAL
from gpumem_kernel.watchwidget.widget import Snapshot, WatchUnavailable, offline_bundle, widget_class


def _watches(shell: Any) -> Optional[registry.Registry]:
    """The loaded extension's watches, loading it into `shell` first when needed (the Python API may come first)."""
    if current.kernel() is None and shell is not None:
        shell.extension_manager.load_extension("gpumem_kernel")
    return _loaded_watches()


def _loaded_watches() -> Optional[registry.Registry]:
    kernel = current.kernel()
    return kernel.watches if kernel is not None else None


def start(shell: Any = None, compact: bool = False) -> Optional[str]:
    """Display a live watch; returns one line when it cannot be live here (the static table is shown instead)."""
    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
    watches = _watches(shell)
    sample = sample_now()
    if watches is None or not watches.front_end:  # a terminal IPython, a script: no front end to keep live
        display(offline_bundle(sample), raw=True)
        return None
    try:
        widget = widget_class()(fallback=sample, compact=compact)
    except WatchUnavailable as reason:
        display(offline_bundle(sample), raw=True)
        return str(reason)
    watches.start(widget)
    display(widget)
    return None


def in_marimo() -> bool:
    """True while a marimo notebook runs a cell (marimo is imported by then: a plain import costs nothing here)."""
    marimo = sys.modules.get("marimo")
    if marimo is None:
        return False
    try:
        return bool(marimo.running_in_notebook())
    except Exception:  # a marimo without this call, or one half torn down at exit: treat as any other front end
        return False


def cell_watch(compact: bool = False) -> Any:
    """A live watch for a front end that shows the object a cell ends with (marimo): the widget, fed by the watches'
    own sampler; where no widget can be made, a Snapshot that shows the static table and says why."""
    sample = sample_now()
    try:
        widget = widget_class()(fallback=sample, compact=compact)
    except WatchUnavailable as reason:
        return Snapshot(sample, str(reason))
    current.watches_alone(_own_watches).start(widget)
    return widget


def _own_watches() -> registry.Registry:
    """Watches without the IPython extension: a sampler of their own, and no shell to hook (so no OOM events)."""
    from gpumem_kernel.probe.prober import Prober
    from gpumem_kernel.probe.sampler import Sampler

    sampler = Sampler(Prober(), interval=WATCH_INTERVAL)
    sampler.start()
    return registry.Registry(None, sampler, None, front_end=True)


def stop() -> str:
    """Stop every live watch of this kernel (each keeps its last picture, marked stopped)."""
    every = (_loaded_watches(), current.made_watches_alone())
    count = sum(watches.stop_all(STOPPED_BY_USER) for watches in every if watches is not None)
    if count == 0:
        return "no live watch in this kernel"
    return f"stopped {count} live watch{'es' if count > 1 else ''}"
