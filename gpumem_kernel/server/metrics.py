"""GPU metrics in Prometheus' text format, served by jupyter_server's own `/metrics`.

jupyter_server already serves prometheus_client's default registry at `/metrics` and asks for the server's
token (or a logged-in browser) unless `ServerApp.authenticate_prometheus` is False. Registering one
collector there gives the cluster's Prometheus this server's GPUs and kernels with the server's own
authentication, and no second endpoint.

Every name starts with `gpumem_`. Without NVML (no driver, no GPU) the GPU families are empty,
`gpumem_nvml_available` is 0 and the kernel families are still there: a scrape never fails.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterator, List

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpumem_kernel.server.machine import MachineView

log = logging.getLogger(__name__)

GPU_LABELS = ["gpu", "uuid", "name"]
PROCESS_LABELS = ["gpu", "uuid", "pid", "process", "kernel_id", "notebook_path"]
KERNEL_LABELS = ["kernel_id", "kernel_name", "notebook_path"]


def _percent(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole else 0.0


class GpuMemCollector(Collector):
    """A prometheus_client collector of one MachineView per scrape (the view itself is cached for ~1 s)."""

    def __init__(self, view: Callable[[], MachineView], idle_seconds: Callable[[], float]) -> None:
        self._view = view
        self._idle_seconds = idle_seconds

    def describe(self) -> List[GaugeMetricFamily]:
        # Lets the registry check names at registration without reading NVML.
        return list(self._families())

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            view = self._view()
        except Exception:  # never fail the scrape: the server's own metrics are in the same answer
            log.exception("gpumem: could not read the GPUs and kernels for /metrics")
            families = self._families()
            families[0].add_metric([], 0)
            yield from families
            return
        yield from self._families(view, self._idle_seconds())

    @staticmethod
    def _families(view: "MachineView | None" = None, threshold: float = 0.0) -> List[GaugeMetricFamily]:
        nvml = GaugeMetricFamily("gpumem_nvml_available", "1 when the server can read NVML (NVIDIA's driver), else 0")
        total = GaugeMetricFamily("gpumem_gpu_memory_total_bytes", "GPU memory in total, by NVML", labels=GPU_LABELS)
        used = GaugeMetricFamily(
            "gpumem_gpu_memory_used_bytes", "GPU memory in use by every process, by NVML", labels=GPU_LABELS
        )
        used_pct = GaugeMetricFamily(
            "gpumem_gpu_memory_used_percent", "GPU memory in use, percent of the total (0-100)", labels=GPU_LABELS
        )
        util = GaugeMetricFamily(
            "gpumem_gpu_utilization_percent",
            "Percent of the last sample period in which a kernel ran on the GPU (NVML utilization.gpu)",
            labels=GPU_LABELS,
        )
        util_mem = GaugeMetricFamily(
            "gpumem_gpu_memory_utilization_percent",
            "Percent of the last sample period in which GPU memory was read or written (NVML utilization.memory)",
            labels=GPU_LABELS,
        )
        process = GaugeMetricFamily(
            "gpumem_process_gpu_memory_bytes",
            "GPU memory held by a process; kernel_id and notebook_path name this server's kernel that holds it "
            "(its own process or a process it started), empty for any other process",
            labels=PROCESS_LABELS,
        )
        kernel_bytes = GaugeMetricFamily(
            "gpumem_kernel_gpu_memory_bytes",
            "GPU memory held by a kernel of this server and the processes it started, over every GPU",
            labels=KERNEL_LABELS,
        )
        idle = GaugeMetricFamily(
            "gpumem_kernel_idle_seconds",
            "Seconds since a kernel of this server last ran code (0 while it runs code, starts or restarts); "
            "comm traffic such as the GPU panel's samples does not count",
            labels=KERNEL_LABELS,
        )
        holders = GaugeMetricFamily(
            "gpumem_idle_gpu_holders",
            "Kernels of this server that hold GPU memory and have been idle longer than the threshold",
        )
        limit = GaugeMetricFamily(
            "gpumem_idle_threshold_seconds", "The idle threshold (GpuMemServer.idle_minutes) in seconds"
        )
        took = GaugeMetricFamily(
            "gpumem_collect_duration_seconds", "Seconds the last read of NVML, processes and kernels took"
        )
        families = [nvml, total, used, used_pct, util, util_mem, process, kernel_bytes, idle, holders, limit, took]
        if view is None:
            return families

        nvml.add_metric([], 1 if view.nvml_available else 0)
        for g in view.gpus:
            labels = [str(g.index), g.uuid, g.name]
            if g.total is not None:
                total.add_metric(labels, g.total)
            if g.used is not None:
                used.add_metric(labels, g.used)
            if g.used is not None and g.total is not None:
                used_pct.add_metric(labels, _percent(g.used, g.total))
            if g.util_gpu is not None:
                util.add_metric(labels, g.util_gpu)
            if g.util_mem is not None:
                util_mem.add_metric(labels, g.util_mem)
        for p in view.processes:
            if p.used is not None:
                process.add_metric([str(p.gpu), p.uuid, str(p.pid), p.name, p.kernel_id or "", p.path], p.used)
        for k in view.kernels:
            labels = [k.facts.kernel_id, k.facts.name, k.facts.path]
            kernel_bytes.add_metric(labels, k.gpu_bytes)
            idle.add_metric(labels, round(k.idle_seconds, 3))
        holders.add_metric([], len(view.idle_holders(threshold)))
        limit.add_metric([], threshold)
        took.add_metric([], view.took)
        return families
