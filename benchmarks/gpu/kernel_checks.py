"""Section `kernel`: the promises a real ipykernel keeps, read from outside it with NVML (pynvml, directly).

1. No implicit CUDA context: `import torch`, `%load_ext gpumem_kernel`, the browser's bootstrap and a comm
   sampling at 1 s for 30 s, `%gpumem status`; then NVML must list neither the kernel nor its children, and
   `torch.cuda.is_initialized()` must be False. A positive control (a process that does create a context)
   shows that NVML's list, read this way, sees this machine's PIDs at all.
2. Clear: a tensor pinned only by a traceback, then one pinned only by `Out`; `%gpumem clear` after each;
   NVML's figure for the kernel and `torch.cuda.memory_reserved()` before and after.
3. Restart and free: the kernel holds 2 GiB; restart it as the server does (`restart_kernel(now=False)`);
   NVML is polled every 20 ms from the request on, until the old PID leaves its list; then the new kernel's
   first sample must not list the old PID either (what the panel's restart report reads).

Dry run (CPU): the same kernels and steps with CPU tensors (64 MiB); NVML is unavailable, so its figures are
recorded as such, and host RSS (from the clear's own report) stands in for the GPU figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional

import psutil

from benchmarks.gpu.common import (
    GiB,
    MiB,
    REPO,
    Context,
    NvmlTruth,
    first_line,
    one_line,
    section_context,
    write_result,
)

sys.path.insert(0, str(REPO / "tests"))
try:
    from kernel_harness import KernelHarness
except ImportError as _missing:  # jupyter_client not installed: every check says so in the result file
    MISSING: Optional[str] = f"{_missing} (carry the wheels of scripts/prepare_gpu_wheels.sh)"
else:
    MISSING = None

NAME = "gpu_kernel"
CLEAR_MIME = "application/vnd.gpumem.clear.v1+json"
OPEN = {"type": "open", "protocol": 1, "interval": 1.0, "client": "gpu-suite"}


def _display(kernel: KernelHarness, msg_id: str) -> List[Dict[str, Any]]:
    return [
        r.content.get("data", {}) for r in kernel.messages() if r.parent_id == msg_id and r.msg_type == "display_data"
    ]


def _descendants(pid: int) -> List[int]:
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


# --- 1. no implicit CUDA context --------------------------------------------------------------------------------


def positive_control(nvml: NvmlTruth) -> Dict[str, Any]:
    """A process that creates a context must be listed, or an empty list proves nothing."""
    code = (
        "import time, torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize(); "
        "print('ready', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        ready = first_line(proc, 120) == "ready"
        listed = nvml.lists([proc.pid]) if ready else None
        return {"pid": proc.pid, "created_context": ready, "listed_by_nvml": bool(listed)}
    finally:
        proc.kill()
        proc.wait(10)


def no_implicit_context(ctx: Context, nvml: NvmlTruth) -> Dict[str, Any]:
    seconds = 2.0 if ctx.dry_run else 30.0
    with KernelHarness() as kernel:
        kernel.execute("import torch")
        loaded = kernel.execute("%load_ext gpumem_kernel")["status"]
        kernel.bootstrap()
        comm = kernel.open_comm(OPEN)
        hello = kernel.wait_comm(comm, "hello")
        start = len(kernel.messages())
        time.sleep(seconds)
        samples = [r.comm_data(comm) or {} for r in kernel.comm_messages(comm, "sample", start=start)]
        status = kernel.execute("%gpumem status")
        shown = _display(kernel, status["msg_id"])
        initialised = kernel.evaluate("torch.cuda.is_initialized()")
        pids = [hello["pid"], *_descendants(hello["pid"])]
        listed = nvml.lists(pids)
    control = None if ctx.dry_run else positive_control(nvml)
    return {
        "kernel_pid": hello["pid"],
        "load_ext": loaded,
        "sampled_seconds": seconds,
        "samples": len(samples),
        "samples_said_cuda_initialized": any(
            s.get("kernel", {}).get("torch", {}).get("cuda_initialized") for s in samples
        ),
        "status_shown": status["status"] == "ok" and any("text/plain" in d for d in shown),
        "torch_cuda_is_initialized": initialised,
        "nvml_listed_pids": listed,
        "nvml": "read" if nvml.available else nvml.reason,
        "positive_control": control,
        "ok": initialised is False and not listed and status["status"] == "ok",
    }


# --- 2. clear ---------------------------------------------------------------------------------------------------


def _figures(kernel: KernelHarness, nvml: NvmlTruth, pid: int, cuda: bool) -> Dict[str, Any]:
    return {
        "nvml_process": nvml.used_by(pid),
        "memory_reserved": kernel.evaluate("torch.cuda.memory_reserved()") if cuda else None,
        "rss": psutil.Process(pid).memory_info().rss,
    }


def _clear(kernel: KernelHarness) -> Dict[str, Any]:
    reply = kernel.execute("%gpumem clear")
    payloads = [d[CLEAR_MIME] for d in _display(kernel, reply["msg_id"]) if CLEAR_MIME in d]
    return payloads[0] if payloads else {"error": reply.get("evalue") or "no clear report shown"}


def _reclaim(kernel: KernelHarness, nvml: NvmlTruth, pid: int, cuda: bool, alive: str) -> Dict[str, Any]:
    before = _figures(kernel, nvml, pid, cuda)
    payload = _clear(kernel)
    after = _figures(kernel, nvml, pid, cuda)
    freed = {k: (before[k] - after[k]) if before[k] is not None and after[k] is not None else None for k in before}
    return {
        "before": before,
        "after": after,
        "reclaimed": freed,
        "tensor_alive_after": kernel.evaluate(alive),
        "report_reclaimed": payload.get("reclaimed"),
        "report_host_rss": [payload.get("host_rss_before"), payload.get("host_rss_after")],
    }


def clear_reclaim(kernel: KernelHarness, ctx: Context, nvml: NvmlTruth, pid: int) -> Dict[str, Any]:
    size = 64 * MiB if ctx.dry_run else GiB
    device = ctx.device
    cuda = not ctx.dry_run
    kernel.execute("import gc, weakref, torch\n%load_ext gpumem_kernel")
    if cuda:
        kernel.execute("torch.zeros(1, device='cuda'); None")  # the context, so 'before' holds only the tensor
    kernel.execute(
        f"def f():\n    t = torch.ones({size}, dtype=torch.uint8, device='{device}')\n"
        "    global w\n    w = weakref.ref(t)\n    raise ValueError('pinned by this traceback')"
    )
    kernel.execute("f()")
    traceback = _reclaim(kernel, nvml, pid, cuda, "w() is not None")
    reply = kernel.execute(f"torch.ones({size}, dtype=torch.uint8, device='{device}')")
    number = reply["execution_count"]
    kernel.execute(f"w2 = weakref.ref(Out[{number}])")
    out = _reclaim(kernel, nvml, pid, cuda, "w2() is not None")
    out["still_in_out"] = kernel.evaluate(f"{number} in Out")
    key = "rss" if ctx.dry_run else "nvml_process"
    ok = all(not r["tensor_alive_after"] and (r["reclaimed"][key] or 0) >= 0.9 * size for r in (traceback, out))
    return {"tensor_bytes": size, "figure_checked": key, "traceback": traceback, "out": out, "ok": ok}


# --- 3. restart and free ---------------------------------------------------------------------------------------


class _Poll:
    """Polls NVML from the restart request on; notes when `pid` is first missing from its list."""

    def __init__(self, nvml: NvmlTruth, pid: int) -> None:
        self.nvml, self.pid = nvml, pid
        self.started = time.monotonic()
        self.released: Optional[float] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and self.released is None:
            listed = self.nvml.processes()
            if listed is not None and self.pid not in listed:
                self.released = time.monotonic() - self.started
            self._stop.wait(0.02)

    def stop(self, timeout: float) -> None:
        self._thread.join(timeout)
        self._stop.set()


def restart_and_free(kernel: KernelHarness, ctx: Context, nvml: NvmlTruth) -> Dict[str, Any]:
    from gpumem_kernel.probe.processes import gpu_usage

    size = 64 * MiB if ctx.dry_run else 2 * GiB
    kernel.bootstrap()
    comm = kernel.open_comm(OPEN)
    old = kernel.wait_comm(comm, "hello")["pid"]
    kernel.execute(f"x = torch.ones({size}, dtype=torch.uint8, device='{ctx.device}')")
    held = nvml.used_by(old)
    poll = _Poll(nvml, old) if nvml.available else None
    started = time.monotonic()
    kernel.restart(now=False)  # as the server does; returns once the new kernel answers
    restarted = time.monotonic() - started
    if poll is not None:
        poll.stop(timeout=30)
    mark = len(kernel.messages())
    kernel.bootstrap()
    comm = kernel.open_comm(OPEN)
    new = kernel.wait_comm(comm, "hello", start=mark)["pid"]
    sample = kernel.wait_comm(comm, "sample", start=mark)
    first_sample = time.monotonic() - started
    usage = gpu_usage(sample)
    released = poll.released if poll else None
    return {
        "tensor_bytes": size,
        "old_pid": old,
        "new_pid": new,
        "nvml_before": held,
        "restart_returned_s": round(restarted, 3),
        "old_process_alive": psutil.pid_exists(old),
        "nvml_released_s": None if released is None else round(released, 3),
        "new_kernel_first_sample_s": round(first_sample, 3),
        "panel_lists_old_pid": None if usage is None else old in usage,
        "nvml": "read" if nvml.available else nvml.reason,
        "ok": new != old and (ctx.dry_run or (bool(held) and released is not None)),
    }


def _guarded(name: str, fn: Any, *args: Any) -> Dict[str, Any]:
    started = time.monotonic()
    try:
        result = fn(*args)
    except Exception as exc:  # each check is recorded, whatever happens to the others
        result = {"ok": False, "failed": one_line(exc)}
    result["seconds"] = round(time.monotonic() - started, 2)
    print(f"kernel/{name}: {'ok' if result.get('ok') else 'NOT OK'} ({result['seconds']} s)", flush=True)
    return result


def _clear_then_restart(ctx: Context, nvml: NvmlTruth) -> Dict[str, Dict[str, Any]]:
    with KernelHarness() as kernel:
        pid = kernel.evaluate("__import__('os').getpid()")
        return {
            "clear": _guarded("clear", clear_reclaim, kernel, ctx, nvml, pid),
            "restart_and_free": _guarded("restart_and_free", restart_and_free, kernel, ctx, nvml),
        }


def run(ctx: Context) -> Dict[str, Any]:
    nvml = NvmlTruth()
    if MISSING is not None:
        return {k: {"ok": False, "failed": MISSING} for k in ("no_implicit_context", "clear", "restart_and_free")}
    context = _guarded("no_implicit_context", no_implicit_context, ctx, nvml)
    try:
        rest = _clear_then_restart(ctx, nvml)
    except Exception as exc:  # the kernel itself would not start
        rest = {k: {"ok": False, "failed": one_line(exc)} for k in ("clear", "restart_and_free")}
    return {
        "description": "a real ipykernel (jupyter_client): no CUDA context from the extension, clear "
        "reclaiming pinned tensors, restart-and-free; truths from NVML (pynvml) outside the kernel",
        "no_implicit_context": context,
        **rest,
    }


def main() -> None:
    ctx = section_context(__doc__.splitlines()[0])
    result = run(ctx)
    write_result(ctx, NAME, result)
    print(json.dumps({k: v.get("ok") for k, v in result.items() if isinstance(v, dict)}), flush=True)


if __name__ == "__main__":
    main()
