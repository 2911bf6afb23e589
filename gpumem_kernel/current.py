"""The process-wide state of the kernel side, all of it here: the loaded extension's Kernel (extension.Kernel), set
by extension.load and cleared by extension.unload; and, for the calls made without the extension, the one prober
the public helpers share, the live watches of a front end without IPython (marimo), and the OOM handler of each
shell that installed one.

IPython's load_ipython_extension / unload_ipython_extension receive only the shell, and the functions scripts call
(get_status, clear_gpu_memory, watch, log_gpu_memory, probe) receive nothing: they find the loaded Kernel here, or
work without one. Everything the Kernel runs is handed its parts instead. This module imports nothing of the
package, so the layers below extension.py may read it without an import circle.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Optional, Protocol


class Loaded(Protocol):
    """What the layers below extension.py read of the loaded Kernel."""

    ip: Any  # the IPython shell it was loaded into
    prober: Any  # probe.prober.Prober: its caches belong to the sampler's thread
    sampler: Any  # probe.sampler.Sampler: a sample goes through its lock
    watches: Any  # watch.registry.Registry, or None before it is made
    analyzed: Any  # oom.analyzed.AnalyzedModel or None: the last %gpumem analyze/recommend, for the OOM checklist
    oom_handler: Any  # oom.handler.OomHandler of `ip`, or None


_kernel: Optional[Loaded] = None


def kernel() -> Optional[Loaded]:
    """The loaded extension's Kernel, or None."""
    return _kernel


def set_kernel(loaded: Optional[Loaded]) -> None:
    """extension.load (the Kernel it made) and extension.unload (None) only."""
    global _kernel
    _kernel = loaded


# --- without the extension ----------------------------------------------------------------------------------

# The prober get_status(), probe() and the reports' figures share while no extension is loaded: made on first use,
# so a script that asks every second starts NVML once. Its lock keeps its caches single-threaded.
_alone_prober: Any = None
_alone_lock = threading.Lock()


def probe_alone(make: Callable[[], Any]) -> Any:
    """One sample (probe.prober.Sample) from the shared prober, made by `make` on first use."""
    global _alone_prober
    with _alone_lock:
        if _alone_prober is None:
            _alone_prober = make()
        return _alone_prober()


# The live watches of a front end where no extension loads (marimo: no IPython shell), with their own sampler: made
# by the first watch, so a notebook that never asks for one starts no thread.
_alone_watches: Any = None
_alone_watches_lock = threading.Lock()


def watches_alone(make: Callable[[], Any]) -> Any:
    """The watches without the extension (watchwidget.registry.Registry), made by `make` on first use."""
    global _alone_watches
    with _alone_watches_lock:
        if _alone_watches is None:
            _alone_watches = make()
        return _alone_watches


def made_watches_alone() -> Any:
    """The watches without the extension, or None before the first."""
    return _alone_watches


# The OOM handler of each shell that installed one while no loaded Kernel owns it (install_oom_handler called by a
# script or a test): keyed weakly, so a shell that goes away takes its handler with it.
_oom_handlers: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def oom_handler(shell: Any) -> Any:
    """The OOM handler `shell` installed (oom.handler.OomHandler): the loaded Kernel's when it is that shell's,
    else the one kept here; None when it has none."""
    loaded = _kernel
    if loaded is not None and loaded.ip is shell and loaded.oom_handler is not None:
        return loaded.oom_handler
    try:
        return _oom_handlers.get(shell)
    except TypeError:  # a shell without weak references never kept one here
        return None


def keep_oom_handler(shell: Any, handler: Any) -> None:
    """Keep (None: forget) the OOM handler of a shell no loaded Kernel owns."""
    try:
        if handler is None:
            _oom_handlers.pop(shell, None)
        else:
            _oom_handlers[shell] = handler
    except TypeError:  # a shell without weak references: nothing is kept for it
        pass
