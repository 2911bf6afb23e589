"""The batch x workers x AMP x pin_memory benchmark (the benchmark guide): `run_benchmark(model, ...)`.

For every configuration, after warm-up steps: time blocked on the DataLoader, host-to-device copy, forward
(+ loss), backward, optimizer (CUDA events on a GPU, perf_counter on the CPU), the step's wall time,
samples/s, GPU utilisation (NVML, sampled in a thread), peak memory, and a status: ok, oom (the batch stops
growing for that workers/AMP/pin combination) or swapping-suspected (the optimisation guide: per-sample time collapses
while memory sits at the limit and utilisation drops; GPU only). Then the benchmark guide's three picks and its
diagnostics in plain words.

Every configuration gets its own DataLoader (`persistent_workers=False`); its iterator is shut down and
deleted afterwards and psutil checks that no worker process is left. The user's model, optimizer and RNG
states are restored exactly (analysis.workbench), also on Ctrl-C, which returns the
partial table flagged `interrupted`. `simulate="6GiB"` runs on the CPU with a cap on tracked tensor bytes;
everything it measures is labelled "simulated". torch is imported inside functions only.

This module is the sweep and its stopping rule; the parts live beside it: config (the `benchmark:` section),
data (datasets, loaders), step (one configuration's timed steps, with timers, utilisation and workers),
result (rows and the result), picks, diagnostics and report (text, HTML, YAML, the MIME bundle).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from gpumem_kernel.analysis import import_repair, interrupts_held
from gpumem_kernel.analysis import RngSnapshot, Workbench, clean_allocator, parse_cap, resolve_device
from gpumem_kernel.benchmark.config import BenchmarkConfig, load_config, with_overrides
from gpumem_kernel.benchmark.data import SyntheticDataset, default_forward, default_loss
from gpumem_kernel.benchmark.diagnostics import diagnose
from gpumem_kernel.benchmark.picks import pick_configurations
from gpumem_kernel.benchmark.result import BenchmarkResult, BenchmarkRow
from gpumem_kernel.benchmark.step import Context, run_config
from gpumem_kernel.probe.host import usable_cpus
from gpumem_kernel.probe.torchstats import cuda_initialised
from gpumem_kernel.render.units import format_bytes

SWAP_SLOWDOWN = 2.0  # per-sample time this many times the previous batch's...
SWAP_AT_LIMIT = 0.95  # ...while memory sits at 95% of the device


def _swapping(previous: Optional[BenchmarkRow], row: BenchmarkRow, total: Optional[int]) -> bool:
    """The swapping symptom: no OOM, but per-sample time collapses while memory sits at the limit and the GPU
    idles (unified memory / system-memory fallback paging over PCIe)."""
    if previous is None or total is None or row.gpu_util is None or not row.total_ms or not previous.total_ms:
        return False
    slower = (row.total_ms / row.batch_size) > SWAP_SLOWDOWN * (previous.total_ms / previous.batch_size)
    at_limit = max(row.peak_reserved_bytes or 0, row.device_used_bytes or 0) >= SWAP_AT_LIMIT * total
    idler = previous.gpu_util is None or row.gpu_util < previous.gpu_util
    return slower and at_limit and idler


def _combinations(cfg: BenchmarkConfig, cuda: bool) -> List[Tuple[bool, bool, int]]:
    amps = [False, True] if cfg.test_mixed_precision else [False]
    pins = [False, True] if cfg.test_pin_memory and cuda else [False]
    return [(amp, pin, w) for amp in amps for pin in pins for w in cfg.num_workers_options]


def _describe_data(
    dataset: Any, loader_factory: Any, synthetic: Optional[Tuple[int, ...]], classes: Optional[int]
) -> str:
    if loader_factory is not None:
        return f"loader factory {getattr(loader_factory, '__name__', type(loader_factory).__name__)}"
    if synthetic is not None:
        shape = "x".join(str(d) for d in synthetic)
        return f"synthetic {shape}" + (f", {classes} classes" if classes else "")
    try:
        size = f", {len(dataset)} samples"
    except TypeError:
        size = ""
    return f"dataset {type(dataset).__name__}{size}"


def _device_info(device: Any, cap: Optional[int]) -> Tuple[Dict[str, Any], Optional[int], str]:
    import torch

    if cap is not None:
        return (
            {"type": "cpu", "index": None, "name": "simulated device (CPU)", "total_bytes": cap},
            cap,
            "simulated: tracked tensor bytes under the cap",
        )
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return (
            {"type": "cuda", "index": device.index, "name": props.name, "total_bytes": int(props.total_memory)},
            int(props.total_memory),
            "torch.cuda.max_memory_reserved",
        )
    return (
        {"type": "cpu", "index": None, "name": "CPU", "total_bytes": None},
        None,
        "tracked tensor bytes on the CPU (no device memory)",
    )


@import_repair()  # a Ctrl-C in a lazy import leaves no half-imported module (analysis.import_guard)
def run_benchmark(
    model: Any,
    *,
    dataset: Any = None,
    loader_factory: Optional[Callable[..., Any]] = None,
    synthetic_shape: Any = None,
    num_classes: Optional[int] = None,
    config: Union[None, str, os.PathLike, Mapping[str, Any], BenchmarkConfig] = None,
    batch_sizes: Any = None,
    num_workers: Any = None,
    steps: Optional[int] = None,
    warmup_steps: Optional[int] = None,
    amp: Optional[bool] = None,
    pin_memory: Optional[bool] = None,
    memory_target: Optional[float] = None,
    device: Any = None,
    simulate: Any = None,
    optimizer: Any = "adamw",
    loss: Optional[Callable[[Any, Any], Any]] = None,
    forward: Optional[Callable[[Any, Any], Any]] = None,
    on_row: Optional[Callable[[BenchmarkRow], None]] = None,
) -> BenchmarkResult:
    """Sweep batch sizes x DataLoader workers x AMP on/off x pin_memory on `model`.

    Data: `dataset` (map-style or iterable), `loader_factory(batch_size=, num_workers=, pin_memory=)`, or
    `synthetic_shape` ('3x64x64') with `num_classes`. config: a YAML path or mapping in the benchmark guide's shape;
    the keyword overrides replace its values (amp / pin_memory: whether to test them, as test_* do).
    loss(output, batch) and forward(model, batch) default to cross-entropy / MSE on (inputs, targets).
    on_row(row) is called as each row finishes.
    Ctrl-C returns the partial table flagged `interrupted`; the model, optimizer and RNG are restored.
    """

    from gpumem_kernel.analysis import check_model, optimizer_kind, parse_shape

    started = time.perf_counter()
    check_model(model)
    cfg = with_overrides(
        load_config(config),
        batch_sizes=batch_sizes,
        num_workers=num_workers,
        steps=steps,
        warmup_steps=warmup_steps,
        amp=amp,
        pin_memory=pin_memory,
        memory_target=memory_target,
    )
    if sum(x is not None for x in (dataset, loader_factory, synthetic_shape)) != 1:
        raise ValueError("give exactly one data source: dataset=, loader_factory= or synthetic_shape=")
    shape = parse_shape(synthetic_shape) if synthetic_shape is not None else None
    if num_classes is not None and (
        isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1
    ):
        raise ValueError(f"num_classes: expected a positive integer, got {num_classes!r}")
    if num_classes is not None and shape is None:
        raise ValueError("num_classes goes with synthetic_shape")
    data = SyntheticDataset(shape, num_classes) if shape is not None else dataset
    cap = parse_cap(simulate)
    kind = optimizer_kind(optimizer)
    target = resolve_device(device, model, cap is not None)
    cuda = target.type == "cuda"
    info, limit, memory_source = _device_info(target, cap)
    engine = "simulated" if cap is not None else ("cuda" if cuda else "cpu")
    notes = _setup_notes(engine, cfg, cap, cuda)
    rng = RngSnapshot.take(cuda or cuda_initialised())
    bench = Workbench(model, kind, target)
    if not bench.in_place:
        notes.append(f"the model is not on {target}: the benchmark ran on a copy placed there")
    ctx = Context(
        bench,
        target,
        cap,
        not cuda,
        forward or default_forward,
        loss or default_loss,
        cfg,
        data,
        loader_factory,
        target.index if cuda else None,
    )
    rows: List[BenchmarkRow] = []
    left: List[int] = []
    terminated: List[int] = []
    interrupted = False
    try:
        _sweep(ctx, rows, left, terminated, limit, on_row)
    except KeyboardInterrupt:
        interrupted = True
        notes.append("interrupted: the table is partial")
    finally:
        with interrupts_held():  # a Ctrl-C meanwhile waits until the user's model, optimizer and RNG are whole
            bench.close()
            rng.restore()
            clean_allocator(target)
    if left:
        notes.append(
            f"{len(left)} DataLoader worker process(es) outlived their configuration and were ended: "
            f"PIDs {', '.join(map(str, left))}"
        )
    notes.append(_energy_note(engine, rows, ctx.energy_notes))
    picks = pick_configurations(rows, limit, cfg.memory_target)
    return BenchmarkResult(
        engine=engine,
        device=info,
        limit_bytes=limit,
        memory_target=cfg.memory_target,
        memory_source=memory_source,
        amp_dtype="float16" if cuda else "bfloat16",
        config=asdict(cfg),
        model={"name": type(model).__name__, "parameter_count": sum(p.numel() for p in model.parameters())},
        optimizer=kind if isinstance(kind, str) else type(kind).__name__,
        data=_describe_data(dataset, loader_factory, shape, num_classes),
        rows=rows,
        picks=picks,
        diagnostics=diagnose(rows, picks, engine, limit),
        notes=notes,
        interrupted=interrupted,
        seconds=round(time.perf_counter() - started, 3),
        workers={"leftover": left, "terminated": terminated},
    )


def _sweep(
    ctx: Context,
    rows: List[BenchmarkRow],
    left: List[int],
    terminated: List[int],
    limit: Optional[int],
    on_row: Optional[Callable[[BenchmarkRow], None]],
) -> None:
    for amp, pin, workers in _combinations(ctx.config, ctx.device.type == "cuda"):
        previous: Optional[BenchmarkRow] = None
        for batch in ctx.config.batch_sizes:
            row, gone, ended = run_config(ctx, batch, workers, amp, pin)
            left += gone
            terminated += ended
            if row.status == "ok" and _swapping(previous, row, limit):
                row.status = "swapping-suspected"
            rows.append(row)
            if on_row is not None:
                on_row(row)
            if row.status != "ok":
                break  # OOM or swapping: larger batches of this combination only get worse
            previous = row


def _energy_note(engine: str, rows: List[BenchmarkRow], found: List[str]) -> str:
    """One line: how energy per sample was measured, or why it was not."""
    if engine != "cuda":
        return "energy is not measured: NVML reads GPUs, and this run was on the CPU"
    if any(r.energy_per_sample_j is not None for r in rows):
        how = "; ".join(found) or "NVML's energy counter"
        return f"energy per sample: the whole GPU over the measured steps (every process on it), {how}"
    return "energy is not measured: " + ("; ".join(found) or "NVML could not read this GPU")


def _setup_notes(engine: str, cfg: BenchmarkConfig, cap: Optional[int], cuda: bool) -> List[str]:
    notes = []
    if engine == "simulated":
        notes.append(
            f"simulated: memory is tracked tensor bytes under a {format_bytes(cap, 'auto')} cap on the CPU (no CUDA "
            "context, workspaces or allocator rounding); timings are CPU timings, not a GPU's"
        )
    elif engine == "cpu":
        notes.append("CPU run: memory is tracked tensor bytes (timings include the tracker's overhead)")
    if cfg.test_mixed_precision and not cuda:
        notes.append("AMP on the CPU is bfloat16 autocast")
    if cfg.test_pin_memory and not cuda:
        notes.append("pin_memory needs a GPU: tested off only")
    cores = usable_cpus()  # the affinity mask and cgroup quota: a container's share, not the host's cores
    if max(cfg.num_workers_options) > cores:
        notes.append(f"this kernel can use {cores} CPUs: more workers than that compete for them")
    return notes
