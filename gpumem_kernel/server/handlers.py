"""The server extension's endpoints, with the same authentication and authorisation as `/api/kernels`
(resource "kernels", action "read"):

- `GET /gpumem/kernels`: this server's kernels with the GPU memory each holds and how long each has been idle.
  The panel's "Idle GPU holders" list reads it. `/api/kernels` alone gives idle times but not who holds GPU
  memory: only NVML knows that, for kernels of any language, and the server reads it anyway for `/metrics`.
- `POST /gpumem/kernels/<kernel id>/exit`: why that kernel's process died (exits.py), and the host checklist
  when the out-of-memory killer ended it. POST because the browser sends what it last saw of the kernel (its
  PID, and its host reading from the panel's timeline); nothing on the server changes.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, Optional

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from gpumem_kernel.oom.killed import host_reading, killed_payload
from gpumem_kernel.server.exits import ExitWatch
from gpumem_kernel.server.machine import MachineView

KERNELS_PATH = "/gpumem/kernels"
# jupyter_server's kernel id pattern (a UUID)
EXIT_PATH = KERNELS_PATH + r"/(?P<kernel_id>[\w-]+)/exit"


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


def exit_payload(exits: ExitWatch, kernel_id: str, pid: Optional[int], host: Any) -> Dict[str, Any]:
    """The JSON answer (kernel_exit.schema.json): the last death of process `pid` of this kernel (any of its
    processes when pid is None), and the host checklist when the OOM killer caused it."""
    exits.check(kernel_id)  # a death the once-a-second look has not judged yet
    deaths = [d for d in exits.exits(kernel_id) if pid is None or d.pid == pid]
    death = deaths[-1] if deaths else None
    checklist = None
    if death is not None and death.oom_killed:
        checklist = killed_payload(death.to_payload(), host_reading(host))
    return {
        "kernel_id": kernel_id,
        "exit": death.to_payload() if death is not None else None,
        "checklist": checklist,
    }


class ExitHandler(APIHandler):
    auth_resource = "kernels"

    def initialize(self, exits: ExitWatch) -> None:
        self._exits = exits

    @web.authenticated
    @authorized
    def post(self, kernel_id: str) -> None:
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            raise web.HTTPError(400, "the body is not JSON") from None
        if not isinstance(body, dict):
            raise web.HTTPError(400, "the body is not a JSON object")
        pid = body.get("pid")
        if pid is not None and (not isinstance(pid, int) or isinstance(pid, bool) or pid < 0):
            raise web.HTTPError(400, "pid must be a non-negative integer or null")
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(exit_payload(self._exits, kernel_id, pid, body.get("host"))))
