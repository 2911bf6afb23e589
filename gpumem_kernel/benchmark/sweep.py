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
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from gpumem_kernel.render.text import cut, one_line
from gpumem_kernel.analysis.storage import NullTracker, make_tracker, register_states
from gpumem_kernel.analysis.trace import autocast_factory
from gpumem_kernel.analysis.workbench import (
    RngSnapshot,
    Workbench,
    clean_allocator,
    first_line,
    grad_scaler,
    optimizer_step,
    parse_cap,
    resolve_device,
    to_device,
)
from gpumem_kernel.oom.classify import is_oom
from gpumem_kernel.probe.torchstats import cuda_initialised
from gpumem_kernel.render.snippets import config_yaml
from gpumem_kernel.render.units import format_bytes, unit_for

MIME = "application/vnd.gpumem.benchmark.v1+json"
GiB = 1 << 30
IO_SHARE = 0.30  # the benchmark guide: I/O above this share of the step -> more workers, pin_memory
LOW_UTIL = 70.0  # the benchmark guide: below this GPU% the GPU waits
AMP_WORTH = 1.2  # an AMP speedup at least this large -> use it
SWAP_SLOWDOWN = 2.0  # per-sample time this many times the previous batch's...
SWAP_AT_LIMIT = 0.95  # ...while memory sits at 95% of the device
WORKER_EXIT_TIMEOUT = 5.0


# --- configuration -------------------------------------------------------------------------------------------


@dataclass
class BenchmarkConfig:
    """The benchmark guide's `benchmark:` section (configs/checking_gpu_optimization.yaml), plus warm-up and target."""

    batch_sizes: List[int] = field(default_factory=lambda: [1 << i for i in range(14)])
    num_workers_options: List[int] = field(default_factory=lambda: [0, 2, 4, 8, 12, 16])
    steps_per_test: int = 10
    warmup_steps: int = 2
    test_mixed_precision: bool = True
    test_pin_memory: bool = True
    memory_target: float = 0.8  # recommended: within this share of the device memory (or the simulated cap)


def _int_list(value: Any, minimum: int) -> Optional[List[int]]:
    if isinstance(value, str):
        value = [v for v in value.replace(",", " ").split() if v]
        try:
            value = [int(v) for v in value]
        except ValueError:
            return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if (
        not isinstance(value, (list, tuple))
        or not value
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in value)
    ):
        return None
    return sorted(set(value))


def check_value(name: str, value: Any, label: str) -> Any:
    """One field's value, normalised, or a one-line ValueError naming it."""

    def bad(expected: str) -> ValueError:
        return ValueError(f"{label}: expected {expected}, got {value!r}")

    if name == "batch_sizes":
        result = _int_list(value, 1)
        if result is None:
            raise bad("a list of positive integers")
        return result
    if name == "num_workers_options":
        result = _int_list(value, 0)
        if result is None:
            raise bad("a list of integers >= 0")
        return result
    if name in ("steps_per_test", "warmup_steps"):
        minimum = 1 if name == "steps_per_test" else 0
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise bad("a positive integer" if minimum else "an integer >= 0")
        return value
    if name in ("test_mixed_precision", "test_pin_memory"):
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if name == "memory_target":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise bad("a fraction in (0, 1]")
        return float(value)
    raise ValueError(f"{label}: unknown key; known: {', '.join(f.name for f in fields(BenchmarkConfig))}")


def load_config(source: Union[None, str, os.PathLike, Mapping[str, Any], BenchmarkConfig]) -> BenchmarkConfig:
    """A BenchmarkConfig from a YAML file path, a mapping shaped like it ({"benchmark": {...}}), or None
    (the benchmark guide's defaults). Other top-level sections (data, training, ...) are left alone; an unknown key or
    a bad value under `benchmark:` is a one-line ValueError naming it."""
    if isinstance(source, BenchmarkConfig):
        return source
    if source is None:
        return BenchmarkConfig()
    where = ""
    if isinstance(source, (str, os.PathLike)):
        where = f"{cut(os.fspath(source))}: "
        data = _read_yaml(os.fspath(source))
    else:
        data = source
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}expected a mapping with a 'benchmark:' section, got {type(data).__name__}")
    section = data.get("benchmark")
    if section is None:
        raise ValueError(f"{where}benchmark: missing section (see the benchmark guide's example config)")
    if not isinstance(section, Mapping):
        raise ValueError(f"{where}benchmark: expected a mapping, got {section!r}")
    values = {}
    for key, value in section.items():
        try:
            values[str(key)] = check_value(str(key), value, f"benchmark.{key}")
        except ValueError as exc:
            raise ValueError(f"{where}{exc}") from None
    return BenchmarkConfig(**values)


CONFIG_LIMIT = 1 << 20  # a config is a few lines; this bounds a read of /dev/zero or a huge file


def _read_text(path: str) -> str:
    """The file's text, or a one-line ValueError naming it: every file problem (missing, a directory, no
    permission, unreadable like /proc/self/mem, endless like /dev/zero, not UTF-8) is the user's to fix."""
    name = cut(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(CONFIG_LIMIT + 1)
    except FileNotFoundError:
        raise ValueError(f"{name}: no such config file") from None
    except IsADirectoryError:
        raise ValueError(f"{name}: is a directory, not a config file") from None
    except OSError as exc:  # permission, EIO, a name too long, ...
        raise ValueError(f"{name}: cannot read it: {(exc.strerror or type(exc).__name__).lower()}") from None
    if len(data) > CONFIG_LIMIT:
        raise ValueError(f"{name}: larger than 1 MiB, not a config file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name}: not UTF-8 text (byte {exc.start})") from None


def _read_yaml(path: str) -> Any:
    import yaml

    text = _read_text(path)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        problem = one_line(str(getattr(exc, "problem", None) or exc))
        raise ValueError(f"{cut(path)}: not valid YAML{at}: {problem}") from None


_OVERRIDES = {
    "batch_sizes": "batch_sizes",
    "num_workers": "num_workers_options",
    "steps": "steps_per_test",
    "warmup_steps": "warmup_steps",
    "amp": "test_mixed_precision",
    "pin_memory": "test_pin_memory",
    "memory_target": "memory_target",
}


def with_overrides(config: BenchmarkConfig, **overrides: Any) -> BenchmarkConfig:
    """Command-line style overrides (batch_sizes, num_workers, steps, warmup_steps, amp, pin_memory,
    memory_target); None leaves the config's value."""
    values = asdict(config)
    for name, value in overrides.items():
        if value is None:
            continue
        if name not in _OVERRIDES:
            raise ValueError(f"{name}: unknown override; known: {', '.join(_OVERRIDES)}")
        values[_OVERRIDES[name]] = check_value(_OVERRIDES[name], value, name)
    return BenchmarkConfig(**values)


# --- data ----------------------------------------------------------------------------------------------------


class SyntheticDataset:
    """Samples of a fixed shape (and class labels): a small bank cycled, made with a private generator so the
    user's RNG is not consumed. Picklable, so DataLoader workers of any start method can use it."""

    def __init__(
        self, shape: Sequence[int], classes: Optional[int] = None, length: int = 1 << 16, bank: int = 16
    ) -> None:
        import torch

        self.shape, self.classes, self.length = tuple(shape), classes, length
        generator = torch.Generator().manual_seed(0)
        self.bank = torch.randn((bank,) + self.shape, generator=generator)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        x = self.bank[index % len(self.bank)]
        return x if self.classes is None else (x, index % self.classes)


def default_forward(model: Any, batch: Any) -> Any:
    """(inputs, targets) -> model(inputs); otherwise as analysis: model(x), model(*xs), model(**xs)."""
    from gpumem_kernel.analysis.trace import feed

    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        return feed(model, batch[0])
    return feed(model, batch)


def default_loss(output: Any, batch: Any) -> Any:
    """Cross-entropy for (inputs, class ids), MSE for (inputs, targets shaped like the output), otherwise the
    analysis default (mean of squares over the outputs)."""
    import torch
    import torch.nn.functional as F

    from gpumem_kernel.analysis.trace import default_loss as touch_all

    if isinstance(batch, (tuple, list)) and len(batch) == 2 and isinstance(output, torch.Tensor):
        target = batch[1]
        if isinstance(target, torch.Tensor) and not target.is_floating_point() and output.dim() == target.dim() + 1:
            return F.cross_entropy(output.float(), target)
        if isinstance(target, torch.Tensor) and target.is_floating_point() and target.shape == output.shape:
            return F.mse_loss(output.float(), target.float())
    return touch_all(output, batch)


class _Batches:
    """One configuration's DataLoader and iterator; restarts the iterator if the data runs out."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make
        self.loader: Any = None
        self.iterator: Any = None
        self.restarts = 0

    def next(self) -> Any:
        if self.iterator is None:
            self.loader = self.make()
            self.iterator = iter(self.loader)
        try:
            return next(self.iterator)
        except StopIteration:
            self._shutdown()
            self.restarts += 1
            self.iterator = iter(self.loader)
            return next(self.iterator)

    def _shutdown(self) -> None:
        shutdown = getattr(self.iterator, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()  # joins the workers now rather than whenever the iterator is collected
        self.iterator = None

    def close(self) -> None:
        self._shutdown()
        persistent = getattr(self.loader, "_iterator", None)  # a factory's loader with persistent workers
        if persistent is not None and hasattr(persistent, "_shutdown_workers"):
            persistent._shutdown_workers()
        self.loader = None


def _loader_maker(
    dataset: Any, loader_factory: Optional[Callable[..., Any]], batch: int, workers: int, pin: bool, samples: int
) -> Callable[[], Any]:
    def make() -> Any:
        import torch
        from torch.utils.data import DataLoader, IterableDataset, RandomSampler

        if loader_factory is not None:
            return loader_factory(batch_size=batch, num_workers=workers, pin_memory=pin)
        generator = torch.Generator().manual_seed(0)  # shuffling and worker seeds leave the user's RNG alone
        options: Dict[str, Any] = dict(
            batch_size=batch,
            num_workers=workers,
            pin_memory=pin,
            drop_last=True,
            persistent_workers=False,
            generator=generator,
        )
        if isinstance(dataset, IterableDataset):
            return DataLoader(dataset, **options)
        sampler = RandomSampler(dataset, replacement=True, num_samples=samples, generator=generator)
        return DataLoader(dataset, sampler=sampler, **options)

    return make


# --- timing, utilisation, worker processes ---------------------------------------------------------------------


class _CpuTimer:
    def __init__(self) -> None:
        self.marks: List[float] = []

    def start(self) -> None:
        self.marks = [time.perf_counter()]

    def mark(self) -> None:
        self.marks.append(time.perf_counter())

    def finish(self) -> List[float]:
        return [1000 * (b - a) for a, b in zip(self.marks, self.marks[1:])]


class _CudaTimer:
    """CUDA events around each phase: GPU time, not the host's launch time."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.events: List[Any] = []

    def _record(self) -> None:
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self.events.append(event)

    def start(self) -> None:
        self.events = []
        self._record()

    def mark(self) -> None:
        self._record()

    def finish(self) -> List[float]:
        import torch

        torch.cuda.synchronize(self.device)
        return [a.elapsed_time(b) for a, b in zip(self.events, self.events[1:])]


class _UtilSampler:
    """GPU utilisation and device memory used, from NVML in a daemon thread (never creates a CUDA context)."""

    def __init__(self, cuda_index: Optional[int], interval: float = 0.05) -> None:
        self.interval = interval
        self.util: List[float] = []
        self.used: List[int] = []
        self.total: Optional[int] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._nvml, self._handle = _nvml_handle(cuda_index) if cuda_index is not None else (None, None)

    @property
    def available(self) -> bool:
        return self._handle is not None

    def _read(self) -> None:
        try:
            rates = self._nvml.call("nvmlDeviceGetUtilizationRates", self._handle)
            memory = self._nvml.call("nvmlDeviceGetMemoryInfo", self._handle)
        except Exception:
            return  # a failed read leaves a gap; the next one may work
        self.util.append(float(rates.gpu))
        self.used.append(int(memory.used))
        self.total = int(memory.total)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._read()

    def start(self) -> None:
        if self._handle is not None and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpumem-benchmark-util", daemon=True)
            self._thread.start()

    def stop(self) -> Tuple[Optional[float], Optional[int]]:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=2)
            self._thread = None
            self._read()  # at least one reading for very short runs
        mean = round(statistics.fmean(self.util), 1) if self.util else None
        return mean, (max(self.used) if self.used else None)


def _nvml_handle(cuda_index: int) -> Tuple[Any, Any]:
    try:
        from gpumem_kernel.probe.prober import default_prober, probe

        devices = [d for d in probe().gpu.devices if d.cuda_index == cuda_index and not d.mig]
        nvml = default_prober().nvml
        if not devices or nvml.start() is not None:
            return None, None
        return nvml, nvml.call("nvmlDeviceGetHandleByIndex", devices[0].nvml_index)
    except Exception:
        return None, None


def _children() -> Dict[int, Any]:
    import psutil

    try:
        return {p.pid: p for p in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return {}


def _reap_workers(before: Sequence[int]) -> Tuple[List[int], List[int]]:
    """Child processes started during a configuration that outlive it: wait for them, then end the ones that
    stay (each by its PID: they are this benchmark's DataLoader workers). Returns (left, terminated)."""
    import psutil

    new = [p for pid, p in _children().items() if pid not in before]
    if not new:
        return [], []
    _, alive = psutil.wait_procs(new, timeout=WORKER_EXIT_TIMEOUT)
    left = [p.pid for p in alive]
    for process in alive:
        try:
            process.terminate()
        except psutil.Error:
            pass
    _, still = psutil.wait_procs(alive, timeout=2)
    for process in still:
        try:
            process.kill()
        except psutil.Error:
            pass
    return left, left


# --- rows, picks, result ---------------------------------------------------------------------------------------


@dataclass
class BenchmarkRow:
    batch_size: int
    num_workers: int
    amp: bool
    pin_memory: bool
    status: str  # ok | oom | swapping-suspected
    io_ms: Optional[float] = None  # blocked on next(loader_iter), host clock
    h2d_ms: Optional[float] = None
    forward_ms: Optional[float] = None  # forward + loss
    backward_ms: Optional[float] = None
    optimizer_ms: Optional[float] = None  # step (+ scaler) + zero_grad
    total_ms: Optional[float] = None  # the whole step, wall clock
    samples_per_s: Optional[float] = None
    gpu_util: Optional[float] = None  # NVML mean during the measured steps; None without a GPU
    peak_bytes: Optional[int] = None  # the figure the picks use: CUDA reserved peak, or tracked tensor bytes
    peak_allocated_bytes: Optional[int] = None
    peak_reserved_bytes: Optional[int] = None
    device_used_bytes: Optional[int] = None  # NVML, whole device, max during the steps
    efficiency: Optional[float] = None  # samples/s per GiB of peak_bytes
    loader_restarts: int = 0
    seconds: float = 0.0
    error: Optional[str] = None


@dataclass
class Pick:
    kind: str  # highest_throughput | best_efficiency | recommended
    row: int  # index into rows
    batch_size: int
    num_workers: int
    amp: bool
    pin_memory: bool
    samples_per_s: float
    peak_bytes: Optional[int]
    efficiency: Optional[float]
    gpu_util: Optional[float]
    note: str = ""


@dataclass
class BenchmarkResult:
    engine: str  # cuda | cpu | simulated
    device: Dict[str, Any]  # type, index, name, total_bytes
    limit_bytes: Optional[int]  # what memory_target applies to: the device's memory or the simulated cap
    memory_target: float
    memory_source: str
    amp_dtype: str  # float16 (CUDA, GradScaler) | bfloat16 (CPU autocast)
    config: Dict[str, Any]
    model: Dict[str, Any]
    optimizer: str
    data: str
    rows: List[BenchmarkRow]
    picks: Dict[str, Optional[Pick]]
    diagnostics: List[str]
    notes: List[str]
    interrupted: bool
    seconds: float
    workers: Dict[str, List[int]]  # leftover (found alive after shutdown) and terminated PIDs
    version: int = 1
    # written from the rest by to_payload: the recommended pick as "Copy as YAML" copies it; None without one
    config_yaml: Optional[str] = None

    def to_payload(self) -> Dict[str, Any]:
        """The JSON of `application/vnd.gpumem.benchmark.v1+json` (schemas/benchmark.schema.json)."""
        payload = asdict(self)
        self.config_yaml = payload["config_yaml"] = pick_yaml(payload, "recommended")
        return payload

    def to_yaml(self, pick: str = "recommended") -> str:
        """The picked configuration in the training-config shape (data.*, training.*); a comment alone when
        there is no such pick."""
        return recommended_yaml(self.to_payload(), pick)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Dict[str, Any]:
        return benchmark_bundle(self)

    def __str__(self) -> str:
        return render_text(self.to_payload())


def pick_configurations(rows: Sequence[BenchmarkRow], limit: Optional[int], target: float) -> Dict[str, Optional[Pick]]:
    """The benchmark guide's three picks over the rows that ran (status ok); ties go to the earlier row."""
    ok = [(i, r) for i, r in enumerate(rows) if r.status == "ok" and r.samples_per_s]

    def best(
        candidates: List[Tuple[int, BenchmarkRow]], key: Callable[[BenchmarkRow], float], kind: str, note: str
    ) -> Optional[Pick]:
        if not candidates:
            return None
        i, r = max(candidates, key=lambda item: key(item[1]))
        return Pick(
            kind,
            i,
            r.batch_size,
            r.num_workers,
            r.amp,
            r.pin_memory,
            r.samples_per_s,
            r.peak_bytes,
            r.efficiency,
            r.gpu_util,
            note,
        )

    budget = None if limit is None else target * limit
    within = [(i, r) for i, r in ok if budget is None or (r.peak_bytes is not None and r.peak_bytes <= budget)]
    note = (
        "no memory limit known: highest throughput"
        if budget is None
        else f"highest throughput within {target:.0%} of {format_bytes(limit, 'auto')}"
    )
    return {
        "highest_throughput": best(ok, lambda r: r.samples_per_s, "highest_throughput", ""),
        "best_efficiency": best(
            [(i, r) for i, r in ok if r.efficiency],
            lambda r: r.efficiency,
            "best_efficiency",
            "samples/s per GiB of peak memory",
        ),
        "recommended": best(within, lambda r: r.samples_per_s, "recommended", note),
    }


# --- the sweep ---------------------------------------------------------------------------------------------------


@dataclass
class _Context:
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


def _average(records: List[List[float]]) -> List[float]:
    return [round(statistics.fmean(column), 3) for column in zip(*records)]


def _measure(
    ctx: _Context, batches: _Batches, batch: int, amp: bool, pin: bool, tracker: Any, util: _UtilSampler
) -> List[float]:
    """Warm-up + measured steps; returns mean [io, h2d, forward, backward, optimizer, total] in ms."""
    cfg, device = ctx.config, ctx.device
    model = ctx.bench.model
    model.train()
    optimizer = ctx.bench.new_optimizer()
    amp_mode = ("fp16" if device.type == "cuda" else "bf16") if amp else None
    scaler = grad_scaler(amp_mode, device)
    autocast = autocast_factory(amp_mode, device.type)
    timer: Any = _CudaTimer(device) if device.type == "cuda" else _CpuTimer()
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


def _run_config(
    ctx: _Context, batch: int, workers: int, amp: bool, pin: bool
) -> Tuple[BenchmarkRow, List[int], List[int]]:
    """One configuration from a clean allocator; an OOM is recovered outside the `except` block."""
    import torch

    cfg, device = ctx.config, ctx.device
    samples = batch * (cfg.warmup_steps + cfg.steps_per_test)
    batches = _Batches(_loader_maker(ctx.dataset, ctx.loader_factory, batch, workers, pin, samples))
    tracker = make_tracker(ctx.cap) if ctx.track else NullTracker()
    util = _UtilSampler(ctx.cuda_index)
    before = list(_children())
    clean_allocator(device)
    started = time.perf_counter()
    means: Optional[List[float]] = None
    error: Optional[str] = None
    try:
        register_states(tracker, ctx.bench.model, ctx.bench.optimizer)
        tracker.check_baseline()
        means = _measure(ctx, batches, batch, amp, pin, tracker, util)
    except RuntimeError as exc:
        if not is_oom(exc):
            raise
        error = first_line(exc)  # keep the text only: the exception's frames go when this block ends
    finally:
        gpu_util, used = util.stop()
        tracker.close()
        batches.close()
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
        if row.peak_bytes and row.samples_per_s:
            row.efficiency = round(row.samples_per_s / (row.peak_bytes / GiB), 2)
    row.seconds = round(time.perf_counter() - started, 3)
    left, terminated = _reap_workers(before)
    return row, left, terminated


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

    from gpumem_kernel.analysis.analyze import _check_model, _optimizer_kind, parse_shape

    started = time.perf_counter()
    _check_model(model)
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
    kind = _optimizer_kind(optimizer)
    target = resolve_device(device, model, cap is not None)
    cuda = target.type == "cuda"
    info, limit, memory_source = _device_info(target, cap)
    engine = "simulated" if cap is not None else ("cuda" if cuda else "cpu")
    notes = _setup_notes(engine, cfg, cap, cuda)
    rng = RngSnapshot.take(cuda or cuda_initialised())
    bench = Workbench(model, kind, target)
    if not bench.in_place:
        notes.append(f"the model is not on {target}: the benchmark ran on a copy placed there")
    ctx = _Context(
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
        bench.close()
        rng.restore()
        clean_allocator(target)
    if left:
        notes.append(
            f"{len(left)} DataLoader worker process(es) outlived their configuration and were ended: "
            f"PIDs {', '.join(map(str, left))}"
        )
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
    ctx: _Context,
    rows: List[BenchmarkRow],
    left: List[int],
    terminated: List[int],
    limit: Optional[int],
    on_row: Optional[Callable[[BenchmarkRow], None]],
) -> None:
    for amp, pin, workers in _combinations(ctx.config, ctx.device.type == "cuda"):
        previous: Optional[BenchmarkRow] = None
        for batch in ctx.config.batch_sizes:
            row, gone, ended = _run_config(ctx, batch, workers, amp, pin)
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
    cores = os.cpu_count() or 1
    if max(cfg.num_workers_options) > cores:
        notes.append(f"this machine has {cores} CPU cores: more workers than that compete for them")
    return notes


# --- diagnostics -------------------------------------------------------------------------------------------------


def _ratio(
    rows: Sequence[BenchmarkRow], key: Callable[[BenchmarkRow], Tuple[Any, ...]], split: Callable[[BenchmarkRow], bool]
) -> Optional[Tuple[float, int]]:
    """Median throughput ratio (split true / split false) over configurations that ran both ways."""
    pairs: Dict[Tuple[Any, ...], Dict[bool, float]] = {}
    for r in rows:
        if r.status == "ok" and r.samples_per_s:
            pairs.setdefault(key(r), {})[split(r)] = r.samples_per_s
    ratios = [p[True] / p[False] for p in pairs.values() if True in p and False in p]
    return (statistics.median(ratios), len(ratios)) if ratios else None


def diagnose(
    rows: Sequence[BenchmarkRow], picks: Mapping[str, Optional[Pick]], engine: str, limit: Optional[int]
) -> List[str]:
    """The benchmark guide's reading of the table, in plain words."""
    out: List[str] = []
    chosen = picks.get("recommended") or picks.get("highest_throughput")
    sim = " (simulated)" if engine == "simulated" else ""
    ooms = sorted({r.batch_size for r in rows if r.status == "oom"})
    if ooms:
        out.append(
            f"batch {', '.join(map(str, ooms))} ran out of memory{sim}: larger batches were not tried "
            "for that workers/AMP/pin combination"
        )
    for r in rows:
        if r.status == "swapping-suspected":
            out.append(
                f"batch {r.batch_size} ({r.num_workers} workers): per-sample time jumped while memory sat "
                "at the limit and utilisation fell — likely unified-memory swapping; stay below it"
            )
    if chosen is None:
        return out + ["no configuration ran: try smaller batch sizes" + (" or a larger cap" if sim else "")]
    row = rows[chosen.row]
    if row.io_ms is not None and row.total_ms and row.io_ms / row.total_ms > IO_SHARE:
        more = max(2, 2 * row.num_workers)
        fix = f"raise num_workers (try {more})" + ("" if row.pin_memory or engine != "cuda" else " and set pin_memory")
        out.append(
            f"data loading is {row.io_ms / row.total_ms:.0%} of each step at batch {row.batch_size} with "
            f"{row.num_workers} workers: {fix}"
        )
    if row.gpu_util is not None and row.gpu_util < LOW_UTIL:
        out.append(
            f"GPU utilisation is {row.gpu_util:.0f}% (< {LOW_UTIL:.0f}%): the GPU waits — a larger batch or "
            "more workers keep it busy"
        )
    amp = _ratio(rows, lambda r: (r.batch_size, r.num_workers, r.pin_memory), lambda r: r.amp)
    if amp is not None:
        speedup, n = amp
        if speedup >= AMP_WORTH:
            out.append(f"AMP is {speedup:.2f}x faster (median of {n} configurations): use it (training.use_amp: true)")
        elif speedup < 0.95:
            out.append(
                f"AMP is slower here ({speedup:.2f}x, median of {n})"
                + (": CPU bfloat16 autocast often is" if engine != "cuda" else ": check for casts/syncs")
            )
        else:
            out.append(f"AMP changes throughput little here ({speedup:.2f}x, median of {n}); it still saves memory")
    pin = _ratio(rows, lambda r: (r.batch_size, r.num_workers, r.amp), lambda r: r.pin_memory)
    if pin is not None and pin[0] >= 1.05:
        out.append(f"pin_memory speeds steps up {pin[0]:.2f}x: keep it on")
    workers = _ratio(rows, lambda r: (r.batch_size, r.amp, r.pin_memory), lambda r: r.num_workers > 0)
    if workers is not None and workers[0] < 0.95:
        out.append(
            f"worker processes slow this data down ({workers[0]:.2f}x): loading is cheap here, "
            "num_workers=0 avoids their start-up and transfer cost"
        )
    same = sorted(
        (
            r
            for r in rows
            if r.status == "ok"
            and r.num_workers == row.num_workers
            and r.amp == row.amp
            and r.pin_memory == row.pin_memory
            and r.samples_per_s
        ),
        key=lambda r: r.batch_size,
    )
    if len(same) >= 2 and same[-1].samples_per_s < 1.1 * same[-2].samples_per_s:
        out.append(
            f"throughput from batch {same[-2].batch_size} to {same[-1].batch_size}: "
            f"{same[-2].samples_per_s:.0f} -> {same[-1].samples_per_s:.0f} samples/s (under +10%): "
            "larger batches buy little speed"
        )
    if (
        row.forward_ms is not None
        and row.total_ms
        and not row.amp
        and (row.forward_ms + (row.backward_ms or 0)) / row.total_ms > 0.7
    ):
        out.append(
            "forward + backward are most of the step (compute-bound): AMP and a larger batch help; "
            "gradient checkpointing trades speed for memory"
        )
    if limit and row.peak_bytes is not None:
        share = row.peak_bytes / limit
        if share < 0.5 and not ooms and row.batch_size == max(r.batch_size for r in rows):
            out.append(
                f"the pick uses {share:.0%} of {format_bytes(limit, 'auto')}{sim} and is the largest batch tested: "
                "add larger batch sizes"
            )
    return out


# --- rendering ---------------------------------------------------------------------------------------------------


BANNER = "=" * 80
STATUS = {"ok": "✅", "oom": "OOM", "swapping-suspected": "⚠️ swap?"}


def _ms(value: Optional[float]) -> str:
    return "" if value is None else f"{value:.2f}"


def _mem_unit(payload: Mapping[str, Any]) -> str:
    """The memory column's one unit: GiB when some peak reaches 1 GiB, else MiB."""
    return unit_for(max((r["peak_bytes"] for r in payload["rows"] if r["peak_bytes"]), default=0), "auto")


def _table(payload: Mapping[str, Any]) -> List[str]:
    unit = _mem_unit(payload)
    sim = payload["engine"] == "simulated"
    head = (
        f"{'Batch':>6} {'Workers':>7} {'AMP':>5} {'Pin':>5} {'I/O(ms)':>9} {'H2D(ms)':>9} {'Fwd(ms)':>9} "
        f"{'Bwd(ms)':>9} {'Opt(ms)':>9} {'Total(ms)':>10} {'Samples/s':>10} {'GPU%':>6} "
        f"{f'Mem({unit})':>9} {'Status':>10}"
    )
    lines = [head, "-" * len(head)]
    for r in payload["rows"]:
        status = STATUS.get(r["status"], r["status"]) + (" (sim)" if sim and r["status"] == "oom" else "")
        gpu = "" if r["gpu_util"] is None else f"{r['gpu_util']:.1f}"
        mem = "" if r["peak_bytes"] is None else format_bytes(r["peak_bytes"], unit, label=False)
        sps = "" if r["samples_per_s"] is None else f"{r['samples_per_s']:.1f}"
        lines.append(
            f"{r['batch_size']:>6} {r['num_workers']:>7} {'Yes' if r['amp'] else 'No':>5} "
            f"{'Yes' if r['pin_memory'] else 'No':>5} {_ms(r['io_ms']):>9} {_ms(r['h2d_ms']):>9} "
            f"{_ms(r['forward_ms']):>9} {_ms(r['backward_ms']):>9} {_ms(r['optimizer_ms']):>9} "
            f"{_ms(r['total_ms']):>10} {sps:>10} {gpu:>6} {mem:>9} {status:>10}"
        )
    return lines


def _kv(label: str, value: str) -> str:
    return f"  {label + ':':<20}{value}"


def _pick_lines(payload: Mapping[str, Any]) -> List[str]:
    picks = payload["picks"]
    mem_label = {"simulated": "Memory (simulated)", "cuda": "GPU Memory"}.get(payload["engine"], "Memory (tensors)")

    def block(title: str, pick: Optional[Mapping[str, Any]], extra: Sequence[str]) -> List[str]:
        if pick is None:
            return [title, "  none (no configuration qualified)", ""]
        lines = [
            title,
            _kv("Batch Size", str(pick["batch_size"])),
            _kv("Workers", str(pick["num_workers"])),
            _kv("Mixed Precision", "Yes" if pick["amp"] else "No"),
            _kv("Pin Memory", "Yes" if pick["pin_memory"] else "No"),
        ]
        return lines + [line for line in extra if line] + [""]

    def memory(pick: Mapping[str, Any], safe: bool = False) -> str:
        if pick["peak_bytes"] is None:
            return ""
        suffix = ""
        if safe and payload["limit_bytes"]:
            suffix = f" (safe: within {payload['memory_target']:.0%} of {format_bytes(payload['limit_bytes'], 'auto')})"
        return _kv(mem_label, format_bytes(pick["peak_bytes"], "auto") + suffix)

    hi, eff, rec = picks["highest_throughput"], picks["best_efficiency"], picks["recommended"]
    lines = [BANNER, "🏆 OPTIMAL CONFIGURATION", BANNER, ""]
    lines += block(
        "🚀 Highest Throughput:",
        hi,
        [_kv("Throughput", f"{hi['samples_per_s']:.1f} samples/sec"), memory(hi)] if hi else [],
    )
    lines += block(
        "⚡ Best Efficiency (samples/sec/GiB):",
        eff,
        [_kv("Efficiency", f"{eff['efficiency']:.1f} samples/sec/GiB")] if eff else [],
    )
    util = _kv("GPU Util", f"{rec['gpu_util']:.1f}%") if rec and rec["gpu_util"] is not None else ""
    lines += block(
        "💡 Recommended for Training:",
        rec,
        [_kv("Throughput", f"{rec['samples_per_s']:.1f} samples/sec"), memory(rec, True), util] if rec else [],
    )
    return lines


def _title(payload: Mapping[str, Any]) -> str:
    device = payload["device"]
    if payload["engine"] == "simulated":
        return f"simulated: {format_bytes(payload['limit_bytes'], 'auto')} cap on tracked tensor bytes, CPU timings"
    if payload["engine"] == "cuda":
        return f"cuda:{device['index']} {device['name']} ({format_bytes(device['total_bytes'], 'auto')})"
    return "CPU (no GPU): memory is tracked tensor bytes"


def render_text(payload: Mapping[str, Any]) -> str:
    """The benchmark guide's console summary: the table, the three picks, then diagnostics and notes."""
    lines = [
        BANNER,
        "📋 BENCHMARK SUMMARY",
        BANNER,
        f"{payload['model']['name']} · {payload['data']} · {payload['optimizer']} · {_title(payload)}",
    ]
    if payload["interrupted"]:
        lines.append("⚠️  Interrupted: partial table")
    lines += [""] + _table(payload) + [""] + _pick_lines(payload)
    if payload["diagnostics"]:
        lines += ["🔎 Diagnostics:"] + [f"  - {d}" for d in payload["diagnostics"]] + [""]
    if payload["notes"]:
        lines += ["Notes:"] + [f"  - {n}" for n in payload["notes"]]
    if payload.get("config_yaml"):  # absent from payloads written before it existed
        lines += ["", "📋 Recommended configuration (YAML):"]
        lines += [f"  {line}" for line in payload["config_yaml"].splitlines()]
    lines.append(BANNER)
    return "\n".join(lines)


def render_html(payload: Mapping[str, Any]) -> str:
    import html

    def e(value: Any) -> str:
        return html.escape(str(value), quote=True)

    unit = _mem_unit(payload)
    head = [
        "batch",
        "workers",
        "AMP",
        "pin",
        "I/O ms",
        "H2D ms",
        "fwd ms",
        "bwd ms",
        "opt ms",
        "total ms",
        "samples/s",
        "GPU %",
        f"mem {unit}",
        "status",
    ]
    body = []
    for r in payload["rows"]:
        cells = [
            r["batch_size"],
            r["num_workers"],
            "yes" if r["amp"] else "no",
            "yes" if r["pin_memory"] else "no",
            _ms(r["io_ms"]),
            _ms(r["h2d_ms"]),
            _ms(r["forward_ms"]),
            _ms(r["backward_ms"]),
            _ms(r["optimizer_ms"]),
            _ms(r["total_ms"]),
            "" if r["samples_per_s"] is None else f"{r['samples_per_s']:.1f}",
            "" if r["gpu_util"] is None else f"{r['gpu_util']:.1f}",
            "" if r["peak_bytes"] is None else format_bytes(r["peak_bytes"], unit, label=False),
            r["status"],
        ]
        body.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in cells) + "</tr>")
    picks = []
    for kind, label in (
        ("highest_throughput", "highest throughput"),
        ("best_efficiency", "best efficiency"),
        ("recommended", "recommended"),
    ):
        p = payload["picks"][kind]
        picks.append(
            f"<li>{e(label)}: "
            + (
                e("none")
                if p is None
                else e(
                    f"batch {p['batch_size']}, {p['num_workers']} workers, "
                    f"AMP {'on' if p['amp'] else 'off'}, pin_memory "
                    f"{'on' if p['pin_memory'] else 'off'}: {p['samples_per_s']:.1f} samples/s"
                )
            )
            + "</li>"
        )
    diagnostics = "".join(f"<li>{e(d)}</li>" for d in payload["diagnostics"])
    notes = "".join(f"<li>{e(n)}</li>" for n in payload["notes"])
    flag = "<p><b>Interrupted: partial table</b></p>" if payload["interrupted"] else ""
    return (
        f"<div class='gpumem-benchmark'><p><b>Benchmark — {e(payload['model']['name'])}</b> · "
        f"{e(payload['data'])} · {e(_title(payload))}</p>{flag}"
        f"<table><thead><tr>{''.join(f'<th>{e(h)}</th>' for h in head)}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table><ul>{''.join(picks)}</ul>"
        f"{'<p>Diagnostics</p><ul>' + diagnostics + '</ul>' if diagnostics else ''}"
        f"{'<ul>' + notes + '</ul>' if notes else ''}</div>"
    )


def pick_yaml(payload: Mapping[str, Any], pick: str = "recommended") -> Optional[str]:
    """A pick in the training-config shape (data.batch_size, num_workers, pin_memory; training.use_amp and the
    AMP dtype), with comments saying where it came from; None when there is no such pick."""
    chosen = payload["picks"].get(pick)
    if chosen is None:
        return None
    header = [
        f"gpumem benchmark of {payload['model']['name']}, {pick.replace('_', ' ')}: {_title(payload)}",
        f"{chosen['samples_per_s']:.1f} samples/s"
        + (f", peak {format_bytes(chosen['peak_bytes'], 'auto')}" if chosen["peak_bytes"] is not None else "")
        + (" (interrupted sweep)" if payload["interrupted"] else ""),
    ]
    data = {
        "batch_size": chosen["batch_size"],
        "num_workers": chosen["num_workers"],
        "pin_memory": chosen["pin_memory"],
    }
    training: Dict[str, Any] = {"use_amp": chosen["amp"]}
    if chosen["amp"]:
        training["amp_dtype"] = payload["amp_dtype"]
    return config_yaml(header, {"data": data, "training": training})


def recommended_yaml(payload: Mapping[str, Any], pick: str = "recommended") -> str:
    """`pick_yaml`, or a comment saying there is no such pick (what --save-yaml and --format yaml write)."""
    text = pick_yaml(payload, pick)
    if text is None:
        return f"# gpumem benchmark: no {pick.replace('_', ' ')} configuration (nothing ran within the limits)\n"
    return text


def benchmark_bundle(result: Any) -> Dict[str, Any]:
    """{MIME: payload, text/html, text/plain} for IPython.display.display(..., raw=True)."""
    payload = result.to_payload() if hasattr(result, "to_payload") else dict(result)
    return {MIME: payload, "text/html": render_html(payload), "text/plain": render_text(payload)}
