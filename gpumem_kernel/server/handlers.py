"""`GET /gpumem/kernels`: this server's kernels with the GPU memory each holds and how long each has been idle.

The panel's "Idle GPU holders" list reads it. `/api/kernels` alone gives idle times but not who holds GPU
memory: only NVML knows that, for kernels of any language, and the server reads it anyway for `/metrics`.
Same authentication and authorisation as `/api/kernels` (resource "kernels", action "read").
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from gpumem_kernel.server.watch import MachineView

KERNELS_PATH = "/gpumem/kernels"


def kernels_payload(view: MachineView, idle_minutes: float) -> Dict[str, Any]:
    """The JSON answer (src/panel/idleholders.ts reads it)."""
    return {
        "time": view.time,
        "nvml_available": view.nvml_available,
        "reason": view.reason,
        "idle_minutes": idle_minutes,  # the server's threshold, for the metrics; the panel uses its own setting
        "kernels": [
            {
                "id": k.facts.kernel_id,
                "name": k.facts.name,
                "path": k.facts.path,
                "execution_state": k.facts.execution_state,
                "last_activity": k.facts.last_activity,
                "idle_seconds": round(k.idle_seconds, 3),
                "gpu_bytes": k.gpu_bytes,
            }
            for k in view.kernels
        ],
    }


class KernelsHandler(APIHandler):
    auth_resource = "kernels"

    def initialize(self, view: Callable[[], MachineView], idle_minutes: Callable[[], float]) -> None:
        self._view = view
        self._idle_minutes = idle_minutes

    @web.authenticated
    @authorized
    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(kernels_payload(self._view(), self._idle_minutes())))
