"""One configuration's timed steps: its DataLoader, warm-up and measured steps phase by phase, peak memory, and
the row they make (an OOM included)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Tuple

from gpumem_kernel.analysis import interrupts_held
from gpumem_kernel.analysis import StepError
from gpumem_kernel.analysis import NullTracker, interrupts_at_operators, make_tracker, register_states
from gpumem_kernel.analysis import autocast_factory
from gpumem_kernel.analysis import Workbench, clean_allocator, first_line, grad_scaler, optimizer_step, to_device
from gpumem_kernel.benchmark.config import BenchmarkConfig
from gpumem_kernel.benchmark.data import Batches, loader_maker
from gpumem_kernel.benchmark.result import BenchmarkRow
from gpumem_kernel.benchmark.timers import CpuTimer, CudaTimer
from gpumem_kernel.benchmark.utilisation import UtilSampler
from gpumem_kernel.benchmark.workers import child_processes, reap_workers
from gpumem_kernel.oom.classify import is_oom

GiB = 1 << 30


@dataclass
class Context:
    bench: Workbench
    device: Any
    cap: Optional[int]
    track: bool  # count tensor bytes (CPU): simulated cap, or the CPU's peak
    forward: Callable[[Any, Any], Any]
    loss_fn: Callable[[Any, Any], Any]
    config: BenchmarkConfig
    dataset: Any
    loader_factory: Optional[Callable[..., Any]]
    cuda_index: Optional[int]
    energy_notes: List[str] = field(default_factory=list)  # how energy was measured, or why not (once each)


def _average(records: List[List[float]]) -> List[float]:
    return [round(statistics.fmean(column), 3) for column in zip(*records)]


def measure(
    ctx: Context, batches: Batches, batch: int, amp: bool, pin: bool, tracker: Any, util: UtilSampler
) -> List[float]:
    """Warm-up + measured steps; returns mean [io, h2d, forward, backward, optimizer, total] in ms."""
    cfg, device = ctx.config, ctx.device
    model = ctx.bench.model
    model.train()
    optimizer = ctx.bench.new_optimizer()
    amp_mode = ("fp16" if device.type == "cuda" else "bf16") if amp else None
    scaler = grad_scaler(amp_mode, device)
    autocast = autocast_factory(amp_mode, device.type)
    timer: Any = CudaTimer(device) if device.type == "cuda" else CpuTimer()
    records: List[List[float]] = []
    for step in range(cfg.warmup_steps + cfg.steps_per_test):
        if step == cfg.warmup_steps:
            util.start()
        started = time.perf_counter()
        data = batches.next()
        io = 1000 * (time.perf_counter() - started)
        with tracker:
            tracker.register(data, check=True)  # made by workers or before the mode: counted on arrival
            timer.start()
            data = to_device(data, device, non_blocking=pin)
            timer.mark()
            with autocast():
                out = ctx.forward(model, data)
                loss = ctx.loss_fn(out, data)
            timer.mark()
            (scaler.scale(loss) if scaler is not None else loss).backward()
            timer.mark()
            optimizer_step(optimizer, scaler)
            timer.mark()
        phases = timer.finish()
        if step >= cfg.warmup_steps:
            records.append([io] + phases + [1000 * (time.perf_counter() - started)])
    return _average(records)


def _energy(ctx: Context, row: BenchmarkRow, util: UtilSampler, samples: int) -> None:
    """Energy per sample and mean power of the measured steps (NVML); the method or the reason, once, in ctx."""
    energy = util.energy()
    if energy is None:
        return
    note = energy.note if energy.joules is not None else (util.power_note or energy.note)
    if note and note not in ctx.energy_notes:
        ctx.energy_notes.append(note)
    if energy.joules is not None and samples > 0:
        row.energy_per_sample_j = round(energy.joules / samples, 4)
        row.mean_power_w = round(energy.mean_watts, 1) if energy.mean_watts is not None else None


def run_config(
    ctx: Context, batch: int, workers: int, amp: bool, pin: bool
) -> Tuple[BenchmarkRow, List[int], List[int]]:
    """One configuration from a clean allocator; an OOM is recovered outside the `except` block."""
    import torch

    cfg, device = ctx.config, ctx.device
    samples = batch * (cfg.warmup_steps + cfg.steps_per_test)
    batches = Batches(loader_maker(ctx.dataset, ctx.loader_factory, batch, workers, pin, samples))
    tracker = make_tracker(ctx.cap) if ctx.track else NullTracker()
    util = UtilSampler(ctx.cuda_index)
    before = list(child_processes())
    clean_allocator(device)
    started = time.perf_counter()
    means: Optional[List[float]] = None
    error: Optional[str] = None
    settled = False  # measured or out of memory: anything else (Ctrl-C, an error) leaves this configuration early
    try:
        register_states(tracker, ctx.bench.model, ctx.bench.optimizer)
        tracker.check_baseline()
        with interrupts_at_operators(tracker):
            means = measure(ctx, batches, batch, amp, pin, tracker, util)
        settled = True
    except Exception as exc:
        if not (isinstance(exc, RuntimeError) and is_oom(exc)):
            raise StepError(exc) from exc  # the user's error keeps its type and its traceback
        error = first_line(exc)  # keep the text only: the exception's frames go when this block ends
        settled = True
    finally:
        with interrupts_held():  # the sampler thread, the tracker's mode and the loader's workers all end
            gpu_util, used = util.stop()
            tracker.close()
            batches.close()
            if not settled:
                reap_workers(before)  # no row to report them in: ended here
    restarts = batches.restarts
    del batches
    row = BenchmarkRow(
        batch, workers, amp, pin, "ok" if error is None else "oom", loader_restarts=restarts, error=error
    )
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        row.peak_allocated_bytes = int(torch.cuda.max_memory_allocated(device))
        row.peak_reserved_bytes = int(torch.cuda.max_memory_reserved(device))
        row.peak_bytes = row.peak_reserved_bytes
    elif ctx.track:
        row.peak_bytes = row.peak_allocated_bytes = int(tracker.peak)
    ctx.bench.reset()
    if error is not None:
        clean_allocator(device)
        row.peak_bytes = row.peak_allocated_bytes = row.peak_reserved_bytes = None
    else:
        row.io_ms, row.h2d_ms, row.forward_ms, row.backward_ms, row.optimizer_ms, row.total_ms = means
        row.samples_per_s = round(1000 * batch / row.total_ms, 2) if row.total_ms else None
        row.gpu_util, row.device_used_bytes = gpu_util, used
        _energy(ctx, row, util, batch * cfg.steps_per_test)
        if row.peak_bytes and row.samples_per_s:
            row.efficiency = round(row.samples_per_s / (row.peak_bytes / GiB), 2)
    row.seconds = round(time.perf_counter() - started, 3)
    left, terminated = reap_workers(before)
    return row, left, terminated
