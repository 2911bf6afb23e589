"""The host checklist for a kernel that the out-of-memory killer ended.

No error message exists: the kernel vanished. The server extension knows that it died, by which signal, that its
memory cgroup counted a new OOM kill, and the cgroup's limit (server/exits.py); the browser knows the kernel's
last RSS and its DataLoader workers' memory from the panel's timeline. From both this builds the same payload as
an OOM error (oom.schema.json), of the host family, so the panel shows it with its usual checklist, ticks and
Markdown copy. Steps that act on the dead process (clear its memory, restart it, free its traceback) are left
out: the process is gone.
"""

from __future__ import annotations

import time
import types
import uuid
from dataclasses import asdict
from typing import Any, Dict, List, Mapping, Optional

from gpumem_kernel.oom.bundle import PAYLOAD_VERSION
from gpumem_kernel.oom.checklist import build_checklist
from gpumem_kernel.oom.diagnose import diagnose
from gpumem_kernel.oom.parse import OomInfo
from gpumem_kernel.render.units import human

# Steps about the dead process itself.
_GONE_STEPS = ("clear", "restart", "other-processes")

# The numeric fields of the wire format's host reading (sample.schema.json `host`) the checklist reads.
_HOST_FIELDS = ("rss", "total", "available", "container_limit", "container_usage")
_CHILDREN_FIELDS = ("count", "rss", "uss")


def _count(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def host_reading(value: Any) -> Optional[Dict[str, Any]]:
    """The host reading a browser sent, reduced to non-negative integers of known fields; None when unusable."""
    if not isinstance(value, Mapping):
        return None
    host: Dict[str, Any] = {key: _count(value.get(key)) for key in _HOST_FIELDS}
    children = value.get("children")
    if isinstance(children, Mapping):
        host["children"] = {key: _count(children.get(key)) for key in _CHILDREN_FIELDS}
    return host


def killed_message(death: Mapping[str, Any]) -> str:
    """One line: who ended which process, on what evidence."""
    how = f" ({death['signal']})" if death.get("signal") else ""
    if death.get("evidence") == "cgroup":
        where = f"its memory cgroup {death.get('cgroup') or '/'} counted {death.get('kills')} new OOM kill(s)"
    else:
        where = f"the machine counted {death.get('kills')} new OOM kill(s) as it died"
    limit = f"; memory limit {human(death['limit'])}" if death.get("limit") else "; no container memory limit"
    return f"The out-of-memory killer ended the kernel process {death.get('pid')}{how}: {where}{limit}."


def _summary(death: Mapping[str, Any], host: Optional[Mapping[str, Any]]) -> List[str]:
    lines = [killed_message(death)]
    figures: List[str] = []
    rss = (host or {}).get("rss") or death.get("rss")
    if rss:
        figures.append(f"kernel RSS {human(rss)}")
    children = (host or {}).get("children") or {}
    if children.get("count"):
        unique = f", {human(children['uss'])} of it unique" if children.get("uss") is not None else ""
        figures.append(f"{children['count']} worker process(es) {human(children.get('rss'))} RSS{unique}")
    if death.get("peak"):
        figures.append(f"the cgroup's peak usage {human(death['peak'])}")
    if figures:
        lines.append("Last seen before it died: " + "; ".join(figures) + ".")
    return lines


def killed_payload(death: Mapping[str, Any], host: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """The host checklist (an oom.schema.json payload) for a kernel death the OOM killer caused.

    `death`: KernelExit.to_payload(); `host`: host_reading() of the last sample the browser held, or None."""
    info = OomInfo(
        format="unknown",
        backend="CUDA",
        exception=None,
        message=killed_message(death),
        family="host",
    )
    if host is None and death.get("rss") is not None:
        # No reading from the browser (no panel followed this kernel): the server's own last look.
        children = {"count": death.get("children"), "rss": death.get("children_rss"), "uss": None}
        host = {key: None for key in _HOST_FIELDS} | {"rss": death["rss"], "children": children}
    if host is not None and death.get("limit"):
        # The kernel's own cgroup limit is the one that applied, and at the kill its usage had reached it (the
        # browser's last reading is up to a second older): how many workers fit is computed from a full cgroup.
        host = {**host, "container_limit": death["limit"], "container_usage": death["limit"]}
    sample = {"host": host} if host is not None else None
    # An empty namespace: the server has no user variables, and must not scan its own.
    empty_shell = types.SimpleNamespace(user_ns={}, user_ns_hidden={})
    diagnosis = diagnose(info, sample, empty_shell, env={})
    diagnosis.traceback = None  # the failed call's frames died with the process
    steps = [s for s in build_checklist(info, diagnosis, sample=sample) if s.id not in _GONE_STEPS]
    return {
        "version": PAYLOAD_VERSION,
        "summary": _summary(death, host),
        "info": info.to_payload(),
        "diagnosis": diagnosis.to_payload(),
        "steps": [asdict(s) for s in steps],
        "occurrence": {
            "id": uuid.uuid4().hex,
            "kernel_pid": int(death.get("pid") or 0),
            "kernel_start": None,
            "time": time.time(),
        },
    }
