"""Row 8: what looking up the kernel's workers once a second costs on a busy machine.

The kernel's sampler (host memory of DataLoader workers) and the server's exit watch (each kernel's workers
before a death) list a process's descendants every second. Without /proc's children files (gVisor, some VMs)
that is a walk over every process on the machine. This spawns N unrelated processes (not descendants) and 2
workers, then reads the descendants at 1 Hz for a while:
  - psutil's `children(recursive=True)` on every read (what the server's exit watch did, and the kernel's
    sampler where /proc has no children files);
  - `probe.descendants.Descendants` made to walk (a walk only when its cost is within 1 % of the time since the
    last), as on a machine without the children files;
  - `Descendants` reading /proc's children files, where this machine has them (what it uses then).
It reports the time per read and the share of one core, and checks that both list the same two workers.

    PYTHONPATH=. .venv/bin/python benchmarks/descendants_walk.py [--processes 0,2000] [--seconds 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List

import psutil

from _common import write_result
from gpumem_kernel.probe.descendants import Descendants, proc_children_supported


def _unrelated(n: int) -> None:
    # each sleeper's parent subshell exits at once: reparented, so none is a descendant of this process
    subprocess.run(["bash", "-c", f"for i in $(seq {n}); do (sleep 600 &) ; done"], check=True)


def _reads(lookup: Callable[[], List[int]], seconds: float) -> Dict[str, Any]:
    costs: List[float] = []
    started = time.monotonic()
    found: List[int] = []
    while time.monotonic() - started < seconds:
        t = time.perf_counter()
        found = lookup()
        costs.append(time.perf_counter() - t)
        time.sleep(max(0.0, 1.0 - costs[-1]))
    wall = time.monotonic() - started
    return {
        "reads": len(costs),
        "median_ms": round(statistics.median(costs) * 1000, 3),
        "max_ms": round(max(costs) * 1000, 3),
        "core_share": round(sum(costs) / wall, 5),
        "found": sorted(found),
    }


def measure(n: int, seconds: float) -> Dict[str, Any]:
    me = os.getpid()
    workers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]) for _ in range(2)]
    marker = "sleep 600"
    try:
        if n:
            _unrelated(n)
        time.sleep(0.5)
        machine_processes = len(psutil.pids())
        before = _reads(lambda: [p.pid for p in psutil.Process(me).children(recursive=True)], seconds)
        seen = Descendants(use_proc=False)
        after = _reads(lambda: seen.of(me), seconds)
        via_proc = Descendants(use_proc=True)
        proc = _reads(lambda: via_proc.of(me), seconds) if proc_children_supported() else None
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
        if n:
            subprocess.run(["pkill", "-f", marker], check=False)
    expected = sorted(w.pid for w in workers)
    return {
        "unrelated_processes": n,
        "machine_processes": machine_processes,
        "psutil_every_read": before,
        "descendants": {**after, "walks": seen.walks},
        "proc_children": proc,
        "same_workers": before["found"] == after["found"] == expected and (proc is None or proc["found"] == expected),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", default="0,2000", help="comma-separated counts of unrelated processes")
    parser.add_argument("--seconds", type=float, default=20.0, help="reading time per way and count")
    args = parser.parse_args()
    rows = [measure(int(n), args.seconds) for n in args.processes.split(",")]
    for row in rows:
        print(row)
    write_result(
        "descendants_walk",
        {
            "description": "listing the kernel's workers once a second: psutil's walk every read vs Descendants",
            "proc_children_files": proc_children_supported(),
            "budget": 0.01,
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
