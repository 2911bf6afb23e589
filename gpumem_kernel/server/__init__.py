"""The Jupyter server extension: watches the machine, not one kernel (docs/monitoring/).

Enabled on install by `jupyter-config/jupyter_server_config.d/jupyterlab_gpumem.json`. It reads NVML in the
server process (any kernel language, busy kernels included), maps GPU processes to this server's kernels and
  - adds GPU, per-process, per-kernel and idle metrics to jupyter_server's own `/metrics` (metrics.py),
  - serves `GET /gpumem/kernels` for the panel's list of idle GPU holders (handlers.py),
  - tells why a kernel died, the out-of-memory killer above all: `POST /gpumem/kernels/<id>/exit` (exits.py).

Settings (jupyter_server_config.py, or `--GpuMemServer.idle_minutes=45` on the command line):
    c.GpuMemServer.idle_minutes = 30     # idle longer than this while holding GPU memory: gpumem_idle_gpu_holders
    c.GpuMemServer.cache_seconds = 1.0   # how long one read of NVML and the kernels is reused

Idle means "has run no code": the extension listens to each kernel's IOPub for the status of execute requests
(activity.py), because jupyter_server's `last_activity` also counts the panel's own samples and widget traffic.

It imports neither IPython nor torch, and NVML never creates a CUDA context.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from traitlets import Float
from traitlets.config import Configurable

from gpumem_kernel.server.activity import ExecutionWatch
from gpumem_kernel.server.exits import ExitWatch
from gpumem_kernel.server.metrics import GpuMemCollector
from gpumem_kernel.server.machine import MachineReader


class GpuMemServer(Configurable):
    """Settings of the server extension."""

    idle_minutes = Float(
        30.0,
        min=0.0,
        config=True,
        help="A kernel that holds GPU memory and has been idle longer than this counts in gpumem_idle_gpu_holders.",
    )
    cache_seconds = Float(
        1.0,
        min=0.0,
        config=True,
        help="How long one read of NVML, the GPU processes and the kernels serves /metrics and /gpumem/kernels.",
    )


class Loaded:
    """The extension in one server: its settings, its machine reader, and the collector registered for /metrics."""

    def __init__(self, serverapp: Any, registry: Any = None) -> None:
        from prometheus_client import REGISTRY

        self.settings = GpuMemServer(parent=serverapp)
        self.serverapp_log = serverapp.log
        self.serverapp_event_logger = getattr(serverapp, "event_logger", None)
        self.executions = ExecutionWatch(serverapp.kernel_manager)
        self.exits = ExitWatch(serverapp.kernel_manager)
        self.machine = MachineReader(
            serverapp.kernel_manager,
            getattr(serverapp, "session_manager", None),
            max_age=self.settings.cache_seconds,
            executions=self.executions,
        )
        self._follow: Any = None
        self.registry = REGISTRY if registry is None else registry
        self.collector = GpuMemCollector(self.machine.view, lambda: self.settings.idle_minutes * 60.0)
        self.registry.register(self.collector)

    def start(self) -> None:
        """On the running event loop: listen to each new kernel's executions within a second of its start."""
        from tornado.ioloop import PeriodicCallback

        self.executions.sync()
        self.exits.sync()
        if self.serverapp_event_logger is not None:
            self.exits.follow_starts(self.serverapp_event_logger)
        self._follow = PeriodicCallback(self._sync, 1000)
        self._follow.start()

    def _sync(self) -> None:
        try:
            self.executions.sync()
        except Exception:  # keep following: the next second may succeed
            self.serverapp_log.exception("gpumem: could not follow the kernels' executions")
        try:
            self.exits.sync()
        except Exception:
            self.serverapp_log.exception("gpumem: could not watch the kernels' processes")

    def unload(self) -> None:
        if self._follow is not None:
            self._follow.stop()
        self.executions.close()
        try:
            self.registry.unregister(self.collector)
        except KeyError:
            pass
        self.machine.prober.nvml.shutdown()


_loaded: Optional[Loaded] = None


def current() -> Optional[Loaded]:
    """The extension loaded in this server process, or None."""
    return _loaded


def _jupyter_server_extension_points() -> List[Dict[str, str]]:
    return [{"module": "gpumem_kernel.server"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    global _loaded
    from jupyter_server.utils import url_path_join

    from gpumem_kernel.server.handlers import EXIT_PATH, KERNELS_PATH, ExitHandler, KernelsHandler

    if _loaded is not None:  # a second ServerApp in the same process: one collector per registry
        _loaded.unload()
    _loaded = loaded = Loaded(serverapp)
    serverapp.web_app.add_handlers(
        ".*$",
        [
            (
                url_path_join(serverapp.web_app.settings["base_url"], KERNELS_PATH),
                KernelsHandler,
                {"view": loaded.machine.view, "idle_minutes": lambda: loaded.settings.idle_minutes},
            ),
            (url_path_join(serverapp.web_app.settings["base_url"], EXIT_PATH), ExitHandler, {"exits": loaded.exits}),
        ],
    )
    serverapp.log.info(
        "jupyterlab-gpumem: GPU metrics at /metrics, idle GPU holders at %s (idle after %g min)",
        KERNELS_PATH,
        loaded.settings.idle_minutes,
    )


async def _start_jupyter_server_extension(serverapp: Any) -> None:
    if _loaded is not None:
        _loaded.start()


def _unload_jupyter_server_extension(serverapp: Any) -> None:
    global _loaded
    if _loaded is not None:
        _loaded.unload()
        _loaded = None
