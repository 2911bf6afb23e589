"""This kernel's allocated and reserved bytes per device, read only where device memory is in use, and its
resident set size (RSS) on the host, read after every cell: a cell that appends numpy arrays or CPU tensors to a
global list grows the host's memory run after run as a CUDA leak grows the GPU's.

"In use" is the holders' switch (heldby.collect.cuda_in_use: the user's code initialised CUDA), so the tests'
switch that lets the holders walk CPU tensors lets this run on CPU too. CUDA devices are read from torch's
allocator counters (probe.torchstats, never creating a context); under the tests' switch, with no CUDA
initialised, the C allocator's bytes in use (glibc's mallinfo2) stand in for one "cpu" device: what the
process's tensors and their autograd graphs hold, to within a few KiB. The host reading is under its own key,
HOST: RSS for both of its figures (the host has no allocator cache to tell apart).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Dict, Optional

import psutil

from gpumem_kernel.growth.report import HOST
from gpumem_kernel.heldby import collect
from gpumem_kernel.probe.host import CgroupReader
from gpumem_kernel.probe.torchstats import allocator_stats, initialised_cuda


@dataclass(frozen=True)
class Reading:
    allocated: int  # bytes in live tensors
    reserved: int  # bytes the caching allocator holds


Readings = Dict[str, Reading]  # "cuda:0" (or "cpu" under the tests' switch), HOST -> its reading


def read() -> Optional[Readings]:
    """The kernel's RSS (HOST) and, where device memory is in use, every device's reading now; None when not
    even the RSS can be read."""
    readings = _devices() or {}
    rss = _rss()
    if rss is not None:
        readings[HOST] = Reading(rss, rss)
    return readings or None


def _devices() -> Optional[Readings]:
    """Every device's reading; None when device memory is not in use in this kernel (nothing is read)."""
    if collect.cuda_in_use() is None:
        return None
    stats = allocator_stats()
    if stats:
        return {f"cuda:{index}": Reading(a.allocated, a.reserved) for index, a in stats.items()}
    host = _host_in_use()
    return None if host is None else {"cpu": host}


def _rss() -> Optional[int]:
    try:
        return int(psutil.Process().memory_info().rss)
    except (psutil.Error, OSError):
        return None


def headroom(device: str, reading: Reading) -> Optional[int]:
    """Bytes `device` can still give this kernel: CUDA's free bytes plus what the allocator caches unused; for
    HOST, the memory available to it (the container's limit less its usage, when tighter). Asked only of a
    device this kernel already reserves memory on (a context exists: none is created); None for the CPU stand-in
    or when CUDA cannot say."""
    if device == HOST:
        return _host_headroom()
    cuda = initialised_cuda()
    if cuda is None or not device.startswith("cuda:") or reading.reserved <= 0:
        return None
    try:
        free, _ = cuda.mem_get_info(int(device[len("cuda:") :]))
    except Exception:
        return None
    return int(free) + max(0, reading.reserved - reading.allocated)


def _host_headroom() -> Optional[int]:
    try:
        memory = psutil.virtual_memory()
    except (psutil.Error, OSError):
        return None
    available = int(memory.available)
    cgroup = CgroupReader().read(memory.total)
    if cgroup.limit is not None and cgroup.usage is not None:
        available = min(available, max(0, cgroup.limit - cgroup.usage))
    return available


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


def _host_in_use() -> Optional[Reading]:
    """glibc's bytes in use (allocated) and obtained from the system (reserved); None elsewhere."""
    try:
        function = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):  # not glibc, or glibc < 2.33
        return None
    function.restype = _MallInfo2
    info = function()
    return Reading(int(info.uordblks + info.hblkhd), int(info.arena + info.hblkhd))
