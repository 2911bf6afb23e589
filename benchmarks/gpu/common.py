"""What every section of the GPU suite shares: its arguments, provenance, result files, NVML truths, errors.

Truths are read with pynvml directly, not through gpumem_kernel.probe.prober: the probe is one of the things under test.
Nothing here imports torch at module level or initialises CUDA (the runner and the context check rely on that).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[2]
SCHEMA = 1
MiB = 1 << 20
GiB = 1 << 30


@dataclass
class Context:
    """What the runner tells a section: where to write, whether this is the CPU dry run, when to stop."""

    out: Path
    dry_run: bool
    deadline: float  # time.time() by which the section must have written its result
    command: str

    @property
    def device(self) -> str:
        return "cpu" if self.dry_run else "cuda"

    @property
    def in_process(self) -> bool:
        """A dry run keeps its work in the section's process (no CUDA context to isolate, two cores to spare);
        GPUMEM_SUITE_PROCESSES=1 gives it the GPU run's process layout, to check that layout on a CPU."""
        return self.dry_run and os.environ.get("GPUMEM_SUITE_PROCESSES") != "1"

    def left(self) -> float:
        return self.deadline - time.time()


def section_context(description: str, argv: Optional[List[str]] = None) -> Context:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--seconds", type=float, default=300.0, help="time budget of this section")
    parser.add_argument("--command", default="", help="the suite's command line, recorded in the result")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    command = args.command or " ".join([Path(sys.executable).name, *sys.argv])
    return Context(args.out, args.dry_run, time.time() + args.seconds, command)


# --- NVML, read directly ------------------------------------------------------------------------------------


class NvmlTruth:
    """pynvml, initialised once; every reader returns None (and `reason` says why) when NVML is not there."""

    def __init__(self) -> None:
        self.reason: Optional[str] = None
        self._nvml: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
        except Exception as exc:  # no driver library on a CPU machine: the dry run records why
            self.reason = f"NVML not available: {type(exc).__name__}: {exc}".splitlines()[0]

    @property
    def available(self) -> bool:
        return self._nvml is not None

    def _handles(self) -> List[Any]:
        n = self._nvml.nvmlDeviceGetCount()
        return [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]

    def processes(self) -> Optional[Dict[int, Optional[int]]]:
        """PID -> NVML used bytes over every GPU (compute and graphics lists); None without NVML."""
        if self._nvml is None:
            return None
        used: Dict[int, Optional[int]] = {}
        for handle in self._handles():
            for function in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
                try:
                    entries = getattr(self._nvml, function)(handle)
                except Exception:
                    continue
                for entry in entries:
                    figure = getattr(entry, "usedGpuMemory", None)  # None where NVML may not say
                    previous = used.get(entry.pid)
                    used[entry.pid] = figure if previous is None else max(previous, figure or 0)
        return used

    def used_by(self, pid: int) -> Optional[int]:
        """NVML's bytes for `pid` (0 when not listed); None without NVML or without a figure."""
        listed = self.processes()
        if listed is None:
            return None
        return listed[pid] if pid in listed else 0

    def held_by(self, pid: int) -> Optional[int]:
        """NVML's bytes for a process known to hold a CUDA context; None when NVML does not list it (a PID
        namespace NVML does not see into: the figure is unknown, not 0) or has no figure."""
        listed = self.processes()
        return None if listed is None else listed.get(pid)

    def lists(self, pids: Iterable[int]) -> Optional[List[int]]:
        """Which of `pids` NVML lists on any GPU; None without NVML."""
        listed = self.processes()
        return None if listed is None else sorted(p for p in pids if p in listed)

    def facts(self) -> Dict[str, Any]:
        if self._nvml is None:
            return {"nvml": self.reason}
        nv = self._nvml
        gpus = []
        for handle in self._handles():
            name = nv.nvmlDeviceGetName(handle)
            major, minor = nv.nvmlDeviceGetCudaComputeCapability(handle)
            gpus.append(
                {
                    "name": name.decode() if isinstance(name, bytes) else name,
                    "memory_total": int(nv.nvmlDeviceGetMemoryInfo(handle).total),
                    "compute_capability": f"{major}.{minor}",
                }
            )
        driver = nv.nvmlSystemGetDriverVersion()
        cuda = nv.nvmlSystemGetCudaDriverVersion()
        return {
            "driver": driver.decode() if isinstance(driver, bytes) else driver,
            "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}",
            "gpus": gpus,
        }


def first_line(proc: "subprocess.Popen[str]", timeout: float) -> Optional[str]:
    """The first line a child prints, or None if it prints none within `timeout` (a hung CUDA init)."""
    got: List[str] = []
    reader = threading.Thread(target=lambda: got.append(proc.stdout.readline() if proc.stdout else ""), daemon=True)
    reader.start()
    reader.join(timeout)
    return got[0].strip() if got else None


def wait_until(predicate: Any, timeout: float, interval: float = 0.05) -> Optional[float]:
    """Seconds until predicate() was true, or None when `timeout` passed first."""
    start = time.monotonic()
    while True:
        if predicate():
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            return None
        time.sleep(interval)


# --- provenance and result files ----------------------------------------------------------------------------


def _torch_facts() -> Dict[str, Any]:
    if "torch" not in sys.modules:  # the runner: its version without the import's seconds (sections import it)
        from importlib import metadata

        try:
            return {"torch": metadata.version("torch")}
        except metadata.PackageNotFoundError:
            return {"torch": None}
    import torch

    return {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.version.cuda else None,
    }


def machine(nvml: Optional[NvmlTruth] = None) -> Dict[str, Any]:
    """Machine, driver, torch, CUDA: enough to tell two runs apart. Touches NVML, never CUDA."""
    facts = (nvml or NvmlTruth()).facts()
    gpus = facts.get("gpus") or []
    return {
        "host": platform.node(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "gpu": gpus[0]["name"] if gpus else None,
        **facts,
        **_torch_facts(),
    }


def write_result(ctx: Context, name: str, data: Dict[str, Any], nvml: Optional[NvmlTruth] = None) -> Path:
    """<out>/<name>.json with provenance; written whole through a rename, so a killed run leaves no torn file."""
    payload = {
        "name": name,
        "schema": SCHEMA,
        "dry_run": ctx.dry_run,
        "device": ctx.device,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": ctx.command,
        "machine": machine(nvml),
        **data,
    }
    path = ctx.out / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    tmp.replace(path)
    return path


# --- predictions: CPU worker processes ----------------------------------------------------------------------


def cpu_pool(workers: int, threads: int = 1) -> ProcessPoolExecutor:
    """Spawned worker processes that see no GPU, for the traced predictions: `threads` torch threads each (fake
    tensors compute nothing, so more only contend)."""
    return ProcessPoolExecutor(
        workers, initializer=_cpu_worker, initargs=(threads,), mp_context=multiprocessing.get_context("spawn")
    )


def _cpu_worker(threads: int) -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the prediction must not use a GPU, and cannot
    import torch

    torch.set_num_threads(threads)


# --- CUDA truths ------------------------------------------------------------------------------------------------


def emptied_baseline(device: Any) -> Tuple[int, int, bool]:
    """Before a measured step: the cache emptied, cuBLAS's workspaces freed (a fresh process allocates them in its
    first step, and the trace counts them), the peaks reset. (allocated, reserved, whether cuBLAS's were freed)."""
    import gc

    import torch

    from gpumem_kernel.analysis import clear_cublas_workspaces

    gc.collect()
    cleared = clear_cublas_workspaces()
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    allocated, reserved = torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)
    torch.cuda.reset_peak_memory_stats(device)
    return allocated, reserved, cleared


# --- errors ------------------------------------------------------------------------------------------------


def planned_for(name: Optional[str], memory: Any) -> Dict[str, Any]:
    """analyze()'s keyword for planning a traced step on this GPU: its table entry (compute capability, hence its
    cuBLAS workspaces) when the table knows the name, else its memory with the default workspace rules."""
    from gpumem_kernel.analysis import gpu_lookup

    try:
        return {"target": gpu_lookup(name).name} if name else {"memory": memory}
    except ValueError:
        return {"memory": memory}


def signed_error(predicted: Optional[float], truth: Optional[float]) -> Optional[float]:
    """(predicted - truth) / truth; positive: the prediction was too high."""
    if predicted is None or truth is None or truth <= 0:
        return None
    return (predicted - truth) / truth


def error_summary(values: Iterable[Optional[float]]) -> Dict[str, Any]:
    signed = [v for v in values if v is not None]
    if not signed:
        return {"n": 0, "median_abs": None, "max_abs": None, "min": None, "max": None}
    magnitudes = [abs(v) for v in signed]
    return {
        "n": len(signed),
        "median_abs": statistics.median(magnitudes),
        "max_abs": max(magnitudes),
        "min": min(signed),
        "max": max(signed),
    }


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


def is_oom(exc: BaseException) -> bool:
    from gpumem_kernel.oom.classify import is_oom as _is_oom

    return _is_oom(exc)
