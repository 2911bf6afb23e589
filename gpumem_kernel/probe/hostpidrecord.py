"""What a kernel learned about its host PIDs, written for the Jupyter server (gpumem_kernel/server/hostpids.py).

In a container NVML lists host PIDs, and the server (in the same container, or outside it) can no more tell
which is which kernel than the kernel could. Each kernel writes what its sampler matched (hostpid.py): its own
PID and start time in its namespace, its kernel id, its confirmed host PID and the host PIDs of the processes
started from its notebook, to `<Jupyter runtime dir>/gpumem-hostpids/<connection file stem>.json`: the user's
own file (the server checks the owner and that no one else may write it), in a 0700 directory, replaced
atomically, written only when what it says changes.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional

from gpumem_kernel.probe.hostpid import Learned
from gpumem_kernel.probe.lineage import connection_file

FOLDER = "gpumem-hostpids"
# Jupyter names a kernel's connection file `kernel-<kernel id>.json`.
_KERNEL_FILE = re.compile(r"^kernel-([A-Za-z0-9_-]+)$")


def record_dir() -> Path:
    from jupyter_core.paths import jupyter_runtime_dir

    return Path(jupyter_runtime_dir()) / FOLDER


def record_payload(learned: Learned, pid: int, create_time: float, kernel_id: Optional[str]) -> Dict[str, Any]:
    """The record's JSON: only confirmed matches name host PIDs (a probable or ambiguous one is not a fact)."""
    confirmed = learned.kernel_state in ("confirmed", "direct")
    return {
        "version": 1,
        "pid": pid,
        "create_time": create_time,
        "kernel_id": kernel_id,
        "state": learned.kernel_state,
        "host_pids": list(learned.kernel_host_pids) if confirmed else [],
        "children": [{"pid": c[0], "create_time": c[1], "host_pid": c[2]} for c in learned.children],
    }


class HostPidRecord:
    """This kernel's record file; `write` replaces it when what it says changed."""

    def __init__(self, path: Optional[Path], pid: int, create_time: float, kernel_id: Optional[str]) -> None:
        self.path = path
        self.pid, self.create_time, self.kernel_id = pid, create_time, kernel_id
        self._last: Optional[Dict[str, Any]] = None

    @classmethod
    def for_this_kernel(cls, pid: int, create_time: float) -> "HostPidRecord":
        """The record of the running kernel; no file outside an ipykernel (tests, terminal IPython)."""
        conn = connection_file()
        if conn is None:
            return cls(None, pid, create_time, None)
        folder = record_dir()
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:
            return cls(None, pid, create_time, None)
        stem = Path(conn).stem
        match = _KERNEL_FILE.match(stem)
        return cls(folder / f"{stem}.json", pid, create_time, match.group(1) if match else None)

    def write(self, learned: Learned) -> bool:
        """Replace the file when what it says changed; True when written."""
        payload = record_payload(learned, self.pid, self.create_time, self.kernel_id)
        if self.path is None or payload == self._last:
            return False
        try:
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tmp-", suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(payload, handle)
            os.replace(tmp, self.path)
        except OSError:
            return False  # no record: the server labels this kernel's processes by what it sees itself
        self._last = payload
        return True

    def remove(self) -> None:
        if self.path is not None:
            try:
                self.path.unlink()
            except OSError:
                pass
