"""Loading and unloading the IPython extension: one `Kernel` (the sampler, the comm target, the cell hooks, the
OOM handler, the magics) per process, never two."""

from __future__ import annotations

import atexit
import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Tuple

from gpumem_kernel import current as current_kernel
from gpumem_kernel.channel.comm import Channel
from gpumem_kernel.growth import hook as growth_hook
from gpumem_kernel.heldby.hook import HoldersHook, LastHolders
from gpumem_kernel.oom import handler as oom
from gpumem_kernel.oom.analyzed import AnalyzedModel
from gpumem_kernel.probe.lineage import Lineage
from gpumem_kernel.probe.processes import own_create_time
from gpumem_kernel.probe.prober import Prober
from gpumem_kernel.probe.sampler import Sampler
from gpumem_kernel.timeline import recorded
from gpumem_kernel.timeline.capture import Capture
from gpumem_kernel.watchwidget import registry as watch_registry

if TYPE_CHECKING:  # IPython is imported only once the extension is loaded
    from gpumem_kernel.magics.memlog import Keeper


@dataclass
class Kernel:
    """The running parts of the kernel side, made by `load` and ended by `unload`: everything the hooks, the
    magics and the channel share is here, handed to them, rather than kept in their modules."""

    ip: Any
    prober: Prober  # one NVML session and its caches, probed on the sampler's thread (or under its lock)
    sampler: Sampler
    channel: Channel
    comm_target: bool  # False outside a kernel (terminal IPython): magics only
    holders: LastHolders  # the last cell's holders report and `holders` message (a new comm gets the message)
    capture: Capture  # the OOM capture (setting "oomTimeline")
    memlog: Keeper  # `%gpumem log`: its one log; a failed write reaches the panel
    growth: Optional[growth_hook.CellGrowth] = None  # the cell hooks: holders' walk, then growth, per cell
    watches: Optional[watch_registry.Registry] = None  # `%gpumem watch` and gpumem_kernel.watch()
    analyzed: Optional[AnalyzedModel] = None  # the last %gpumem analyze/recommend: its model and pick (OOM checklist)
    oom_handler: Optional[oom.OomHandler] = None  # the shell's OOM handler (None: one installed before the load)
    _registered: List[Tuple[str, Callable[..., Any]]] = field(default_factory=list, repr=False)  # to unregister

    def on(self, event: str, callback: Callable[..., Any]) -> None:
        """Register an IPython event callback that `off_all` removes at unload."""
        self.ip.events.register(event, callback)
        self._registered.append((event, callback))

    def off_all(self) -> None:
        for event, callback in reversed(self._registered):
            try:
                self.ip.events.unregister(event, callback)
            except ValueError:
                pass  # never registered (a shell without events)
        self._registered.clear()


_lock = threading.Lock()  # one load or unload at a time


def current() -> Optional[Kernel]:
    """The loaded extension's Kernel, or None (kept in gpumem_kernel.current, the one process-wide handle)."""
    kernel = current_kernel.kernel()
    return kernel if isinstance(kernel, Kernel) else None


def load(ip: Any, version: str) -> Kernel:
    """Start the sampler, register the `gpumem` comm target, the cell hooks, the OOM handler and the magics; a
    second call changes nothing."""
    with _lock:
        kernel = current()
        if kernel is None:
            kernel = _start(ip, version)
            current_kernel.set_kernel(kernel)
        return kernel


def _start(ip: Any, version: str) -> Kernel:
    from gpumem_kernel.magics.gpumem import GpumemMagics  # IPython is only needed once the extension is loaded
    from gpumem_kernel.magics import memlog
    from gpumem_kernel.magics.analysis import fit_advice

    prober = Prober()
    sampler = Sampler(prober)
    holders, capture = LastHolders(), Capture()
    channel = Channel(sampler, version, lineage=_lineage(), holders=holders, capture=capture)
    comm_target = channel.register(ip)
    kernel = Kernel(ip, prober, sampler, channel, comm_target, holders, capture, memlog.Keeper(ip, channel.broadcast))
    ip.register_magics(GpumemMagics(ip, kernel))
    # A browser's silence counts only while the kernel could hear it (see channel.IdleClock).
    kernel.on("pre_execute", channel.clock.busy)
    kernel.on("post_execute", channel.clock.idle)
    # The OOM capture (setting "oomTimeline", off by default): a bounded allocator history while cells run; a
    # recorder (record_timeline) takes the history over for its block.
    kernel.on("pre_run_cell", capture.pre_run_cell)
    kernel.on("post_run_cell", capture.post_run_cell)
    recorded.PAUSERS[:] = [capture.pause]
    # After each cell where CUDA is in use: which variables hold GPU memory (bounded: holders.hook), then which
    # cell keeps growing memory run after run, in that order (the growth notice names the holders that grew);
    # the panel gets each cell's `holders` message. While a cell runs, its trend follows the sampler.
    kernel.growth = growth_hook.install(ip, channel.broadcast, sampler, HoldersHook(ip, holders, channel.broadcast))
    # The checklist's probe goes through the sampler: its lock keeps the shared prober single-threaded.
    # The checklist's "reduce the batch size to N" uses the last %gpumem analyze/recommend pick when it was for the
    # model that failed.
    # With the setting "oomTimeline", the checklist also says what was alive at the error (timeline.capture).
    # fit_advice: each lever's figures on its step, computed for a small model that failed (oom.figures).
    _, kernel.oom_handler = oom.install(
        ip, probe=sampler.snapshot, analyzed=lambda: kernel.analyzed, capture=capture.alive_at_oom, advise=fit_advice
    )
    sampler.start()
    kernel.watches = watch_registry.Registry(ip, sampler, channel, front_end=comm_target)  # `%gpumem watch`
    atexit.unregister(shutdown)  # once per process, however often the extension is loaded again
    atexit.register(shutdown)  # stop sampling before the kernel's sockets go away
    return kernel


def _lineage() -> Optional[Lineage]:
    """This kernel's record among the runs of its notebook's kernel (read before it adds itself)."""
    created = own_create_time()
    return Lineage.for_this_kernel(os.getpid(), created) if created is not None else None


def unload(ip: Any) -> None:
    """Close open comms, stop the sampler, remove the cell hooks, the OOM handler and the magics."""
    with _lock:
        kernel = current()
        current_kernel.set_kernel(None)
    if kernel is not None:
        _stop(kernel)


def _stop(kernel: Kernel) -> None:
    kernel.memlog.close()  # the log ends with the sampler it listens to
    if kernel.watches is not None:
        kernel.watches.close()
    kernel.channel.unregister()
    kernel.off_all()
    if kernel.growth is not None:
        growth_hook.uninstall(kernel.growth)
    kernel.holders.forget()
    kernel.capture.close()  # a recording the capture started ends with it
    if recorded.PAUSERS == [kernel.capture.pause]:
        recorded.PAUSERS.clear()
    kernel.sampler.stop()
    oom.uninstall_oom_handler(kernel.ip, kernel.oom_handler)  # None: the one installed before the load
    kernel.oom_handler = None
    kernel.ip.magics_manager.magics["line"].pop("gpumem", None)
    kernel.ip.magics_manager.magics["cell"].pop("gpumem", None)


def shutdown() -> None:
    """At interpreter exit: stop the thread and release NVML."""
    kernel = current()
    if kernel is not None:
        kernel.sampler.stop(timeout=2.0)
        kernel.prober.nvml.shutdown()
