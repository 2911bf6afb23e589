"""Loading and unloading the IPython extension: one sampler, one comm target, the OOM handler, the magics —
never twice."""

from __future__ import annotations

import atexit
import os
import threading
from dataclasses import dataclass
from typing import Any, Optional

from gpumem_kernel.growth import hook as growth_hook
from gpumem_kernel.heldby import hook as holders_hook
from gpumem_kernel.oom import handler as oom
from gpumem_kernel.channel.comm import Channel
from gpumem_kernel.probe.lineage import Lineage
from gpumem_kernel.probe.processes import own_create_time
from gpumem_kernel.probe.prober import default_prober
from gpumem_kernel.probe import snapshot
from gpumem_kernel.probe.sampler import Sampler
from gpumem_kernel.timeline import capture
from gpumem_kernel.watchwidget import registry as watches


@dataclass
class Loaded:
    ip: Any
    sampler: Sampler
    channel: Channel
    comm_target: bool  # False outside a kernel (terminal IPython): magics only


_lock = threading.Lock()
_loaded: Optional[Loaded] = None
_atexit_registered = False


def current() -> Optional[Loaded]:
    """The loaded extension's parts, or None."""
    return _loaded


def load(ip: Any, version: str) -> Loaded:
    """Start the sampler, register the `gpumem` comm target, the OOM handler and the magics; a second call
    changes nothing."""
    global _loaded, _atexit_registered
    from gpumem_kernel.magics.gpumem import GpumemMagics  # IPython is only needed once the extension is loaded
    from gpumem_kernel.magics.analysis import last_recommendation
    from gpumem_kernel.magics import memlog

    with _lock:
        if _loaded is not None:
            return _loaded
        sampler = Sampler(default_prober())
        channel = Channel(sampler, version, lineage=_lineage())
        ip.register_magics(GpumemMagics(ip))
        comm_target = channel.register(ip)
        # A browser's silence counts only while the kernel could hear it (see channel.IdleClock).
        ip.events.register("pre_execute", channel.clock.busy)
        ip.events.register("post_execute", channel.clock.idle)
        # The OOM capture (setting "oomTimeline", off by default): a bounded allocator history while cells run.
        ip.events.register("pre_run_cell", capture.pre_run_cell)
        ip.events.register("post_run_cell", capture.post_run_cell)
        # Which variables hold GPU memory, after each cell where CUDA is in use (bounded: heldby.hook); the
        # panel's "Held by" gets each cell's `holders` message.
        holders_hook.install(ip, channel.broadcast)
        # Which cell keeps growing memory run after run, and the running cell's trend (after the holders' hook:
        # the growth notice names the holders that grew).
        growth_hook.install(ip, channel.broadcast, sampler)
        # The checklist's probe goes through the sampler: its lock keeps the shared prober single-threaded.
        # The checklist's "reduce the batch size to N" uses the last %gpumem analyze/recommend pick.
        # With the setting "oomTimeline", the checklist also says what was alive at the error (timeline.capture).
        oom.install_oom_handler(
            ip,
            probe=sampler.snapshot,
            recommendation=lambda: last_recommendation(ip),
            capture=capture.alive_at_oom,
        )
        snapshot.attach(sampler)  # clear, the checklist and `%gpumem status` sample through it
        sampler.start()
        watches.attach(watches.Registry(ip, sampler, channel, front_end=comm_target))  # `%gpumem watch`
        memlog.attach(memlog.Keeper(ip, channel.broadcast))  # `%gpumem log`: a failed write reaches the panel
        _loaded = Loaded(ip=ip, sampler=sampler, channel=channel, comm_target=comm_target)
        if not _atexit_registered:
            atexit.register(shutdown)  # stop sampling before the kernel's sockets go away
            _atexit_registered = True
        return _loaded


def _lineage() -> Optional[Lineage]:
    """This kernel's record among the runs of its notebook's kernel (read before it adds itself)."""
    created = own_create_time()
    return Lineage.for_this_kernel(os.getpid(), created) if created is not None else None


def unload(ip: Any) -> None:
    """Close open comms, stop the sampler, remove the OOM handler and the magics."""
    global _loaded
    with _lock:
        loaded, _loaded = _loaded, None
    if loaded is None:
        return
    from gpumem_kernel.magics import memlog

    memlog.detach()  # the log ends with the sampler it listens to
    watches.detach()
    loaded.channel.unregister()
    for event, callback in (
        ("pre_execute", loaded.channel.clock.busy),
        ("post_execute", loaded.channel.clock.idle),
        ("pre_run_cell", capture.pre_run_cell),
        ("post_run_cell", capture.post_run_cell),
    ):
        try:
            loaded.ip.events.unregister(event, callback)
        except ValueError:
            pass  # never registered (a shell without events)
    holders_hook.uninstall(loaded.ip)
    growth_hook.uninstall(loaded.ip)
    capture.STATE.depth = 1
    capture.post_run_cell()  # a recording the capture started ends with it
    loaded.sampler.stop()
    snapshot.detach(loaded.sampler)
    oom.uninstall_oom_handler(loaded.ip)
    loaded.ip.magics_manager.magics["line"].pop("gpumem", None)
    loaded.ip.magics_manager.magics["cell"].pop("gpumem", None)


def shutdown() -> None:
    """At interpreter exit: stop the thread and release NVML."""
    loaded = current()
    if loaded is not None:
        loaded.sampler.stop(timeout=2.0)
    default_prober().nvml.shutdown()
