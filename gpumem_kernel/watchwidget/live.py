"""Starting and stopping watches: the code behind `%gpumem watch` and `gpumem_kernel.watch()`."""

from __future__ import annotations

from typing import Any, Optional

from IPython.display import display

from gpumem_kernel import current
from gpumem_kernel.probe.snapshot import sample_now
from gpumem_kernel.watchwidget import registry
from gpumem_kernel.watchwidget.session import STOPPED_BY_USER
from gpumem_kernel.watchwidget.widget import WatchUnavailable, offline_bundle, widget_class


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


def stop() -> str:
    """Stop every live watch of this kernel (each keeps its last picture, marked stopped)."""
    watches = _loaded_watches()
    count = watches.stop_all(STOPPED_BY_USER) if watches is not None else 0
    if count == 0:
        return "no live watch in this kernel"
    return f"stopped {count} live watch{'es' if count > 1 else ''}"
