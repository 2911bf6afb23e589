"""The host-side steps: host memory (RAM, the container's limit) and DataLoader workers, sized by what each
worker measurably costs when the host ran out."""

from __future__ import annotations

from typing import Optional, Tuple

from gpumem_kernel.oom.diagnosis import Diagnosis, HostMemory
from gpumem_kernel.oom.step import Step
from gpumem_kernel.render.units import human


_CONTAINER = (
    " In a container its memory limit counts, not the machine's RAM (cat /sys/fs/cgroup/memory.max), and the "
    "kernel's out-of-memory killer ends the largest process first, often a DataLoader worker."
)


def host_step(d: Diagnosis, host_oom: bool = False) -> Step:
    h = d.host
    if h is None:
        detail = (
            "free -h (or the Task Manager) shows the host's memory; each DataLoader worker is a process of its own."
        )
        return Step(
            "host-memory", "Check host memory and DataLoader workers", detail + (_CONTAINER if host_oom else ""), None
        )
    parts = [f"kernel RSS {human(h.rss)}"]
    if h.total and h.available is not None:  # unknown for a kernel the OOM killer ended (oom/killed.py)
        parts.append(f"{human(h.available)} of {human(h.total)} available")
    if h.workers:
        parts.append(
            f"{h.workers} child process{'es' if h.workers != 1 else ''} (DataLoader workers?) "
            f"using {human(h.workers_rss)}"
            + (f" RSS, {human(h.workers_uss)} of it unique" if h.workers_uss is not None else "")
        )
    if h.container_limit:
        parts.append(f"container limit {human(h.container_limit)}, {human(h.container_usage)} used")
    detail = "; ".join(parts) + "."
    if h.low:
        detail += " Host memory is nearly exhausted: fewer workers and no pin_memory help here."
    if host_oom and not h.container_limit:
        detail += _CONTAINER
    return Step("host-memory", "Check host memory and DataLoader workers", detail, None)


# Workers are sized to leave this share of the container's (or machine's) memory free.
WORKERS_MARGIN = 0.10


def workers_that_fit(h: Optional[HostMemory]) -> Optional[Tuple[int, int]]:
    """(workers that fit with the margin, each worker's measured unique memory), from the workers' USS and the
    container's limit (else the machine's RAM); None without a measurement."""
    if h is None or not h.workers or not h.workers_uss:
        return None
    if h.container_limit and h.container_usage is not None:
        limit, used = h.container_limit, h.container_usage
    elif h.total and h.available is not None:
        limit, used = h.total, h.total - h.available
    else:
        return None
    per_worker = max(1, h.workers_uss // h.workers)
    headroom = limit * (1 - WORKERS_MARGIN) - (used - h.workers_uss)
    return max(0, int(headroom // per_worker)), per_worker


def _host_workers_step(workers: int, h: Optional[HostMemory] = None) -> Step:
    """The workers step when the host ran out: as many as fit by the measured unique memory, else halve them."""
    fit = workers_that_fit(h)
    if fit is not None and h is not None:
        n, per_worker = fit
        where = "the container's limit" if h.container_limit else "the machine's RAM"
        if workers > 0:
            n = min(n, workers - 1)  # it ran out with `workers`
        title = f"Use at most {n} DataLoader worker{'s' if n != 1 else ''}"
        detail = (
            f"Each worker holds {human(per_worker)} of its own (unique memory, measured over {h.workers}); "
            f"{n} fit in {where} leaving {WORKERS_MARGIN:.0%} free (0 loads in the kernel). A worker's unique "
            "memory grows while it iterates a dataset of Python objects: measure again after an epoch."
        )
    elif workers > 1:
        halves = [workers]
        while len(halves) < 3 and halves[-1] > 1:
            halves.append(halves[-1] // 2)
        title = f"Use fewer DataLoader workers ({' → '.join(str(n) for n in halves)})"
        detail = f"Halve num_workers until it fits ({' → '.join(str(n) for n in halves)}; 0 loads in the kernel)."
    else:
        title, detail = "Use fewer DataLoader workers", "Halve num_workers until it fits (e.g. 32 → 16 → 8)."
    detail += (
        " Each worker is a process with its own copy of the dataset object (copy-on-write pages get copied as "
        "Python touches them). pin_memory=True only with RAM to spare: it pins every batch in host memory. "
        "persistent_workers=True keeps the workers between epochs instead of forking new ones each epoch."
    )
    return Step("fewer-workers", title, detail, None)


def workers_step(d: Diagnosis, host_oom: bool = False) -> Step:
    workers = d.num_workers or 0
    children = d.host.workers if d.host else 0
    if host_oom:
        return _host_workers_step(workers, d.host)
    if workers <= 0 and children <= 0:
        title, detail = "Use fewer DataLoader workers", "Lower num_workers (0 loads in the kernel itself)."
    elif workers > 0:
        title = f"Use fewer DataLoader workers ({workers} → {workers // 2})"
        detail = f"Halve num_workers ({workers} → {workers // 2}; 0 loads in the kernel itself)."
    else:
        title, detail = (
            "Use fewer DataLoader workers",
            f"This kernel has {children} child processes; lower num_workers.",
        )
    detail += (
        " Each worker is a process with its own copy of the dataset object; pin_memory=True pins host memory "
        "per batch, and a worker that touches CUDA holds a CUDA context of its own."
    )
    return Step("fewer-workers", title, detail, None)
