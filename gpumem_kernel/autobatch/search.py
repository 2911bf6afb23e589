"""Auto batch size: the largest batch that runs full training steps without running out of memory.

`auto_select_batch_size(model, device, start_batch)` (the analysis guide's name) starts from the analysis prediction,
verifies it with real training steps (forward, loss, backward, optimizer step; at least two steps, so the
optimizer state exists), then grows or bisects until the boundary is exact: batch N runs, N + 1 does not.
It avoids the anchors' failures (shared/notes/memory-estimation.md): no extrapolation from small probes
(every answer is a batch that ran), every trial starts from a clean allocator, an OOM is recovered outside
the `except` block (its frames pin the tensors), and the recommended batch keeps a margin below the maximum.

The user's model (parameters, buffers, gradients, train/eval flags), optimizer (state, param-group settings)
and RNG states (torch CPU + CUDA, python `random`, numpy if imported) are snapshotted to CPU memory before
and restored after, also on Ctrl-C. Without a GPU, `simulate="6GiB"` runs the same search on the CPU against
a cap on tracked live tensor bytes (a TorchDispatchMode that raises `SimulatedOOM` past the cap); every
figure it produces is labelled "simulated".

The storage tracker is analysis.storage's, the snapshots and the device analysis.workbench's (the benchmark
uses both too), the OOM test oom.classify's. torch is imported inside functions only; CUDA is touched only
when the device is a CUDA device.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from gpumem_kernel.analysis import import_repair, interrupts_held
from gpumem_kernel.analysis import StepError
from gpumem_kernel.analysis import NullTracker, interrupts_at_operators, make_tracker, register_states
from gpumem_kernel.analysis import autocast_factory
from gpumem_kernel.analysis import (
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
from gpumem_kernel.oom.classify import is_oom  # the kernel's one OOM rule; SimulatedOOM's text is a CUDA OOM's
from gpumem_kernel.probe.torchstats import cuda_initialised
from gpumem_kernel.render.fallback import Column, esc, html_table
from gpumem_kernel.render.snippets import AMP_DTYPES, config_yaml
from gpumem_kernel.render.units import format_bytes

MIME = "application/vnd.gpumem.autobatch.v1+json"
MAX_TRIALS = 64  # a monotone search over 2**16 needs < 40; past this something is wrong
SLOPE_PROBE = 16  # with one fitting point, probe lo + lo/16 to learn the per-sample slope


# --- result ---------------------------------------------------------------------------------------------


@dataclass
class Trial:
    batch: int
    ok: bool
    peak_bytes: Optional[int]  # CUDA max_memory_allocated, or the tracked live-bytes peak (simulated)
    seconds: float
    reserved_bytes: Optional[int] = None  # CUDA max_memory_reserved; None when simulated
    phase: str = "start"  # start | predicted | grow | shrink | slope | secant | edge | bisect | scan
    error: Optional[str] = None


@dataclass
class AutobatchResult:
    maximum: int  # largest batch that ran `steps` full training steps; 0: not even batch 1
    recommended: int  # maximum x (1 - margin), rounded down
    margin: float
    rounding: str  # "power of two" | "multiple of N" | "none"
    trials: List[Trial]
    n_trials: int
    seconds: float
    engine: str  # cuda | simulated
    device: str
    limit_bytes: Optional[int]  # the simulated cap, or free + reserved at the start (CUDA: what the secant aims at)
    steps: int
    start_batch: int
    start_source: str  # start_batch | analysis | default
    predicted: Optional[int]  # the analysis prediction, when there was one
    model_name: str
    optimizer: str
    amp: Optional[str]
    at_least: bool = False  # the search stopped at max_batch: the true maximum may be higher
    interrupted: bool = False
    notes: List[str] = field(default_factory=list)
    round: str = "pow2"  # the rounding as --round takes it: pow2 | none | N
    round_source: str = "default"  # where it came from: option (--round) | setting (JupyterLab) | default
    version: int = 1
    config_yaml: str = ""  # written from the rest by to_payload: what "Copy as YAML" copies

    def __int__(self) -> int:
        return self.maximum

    __index__ = __int__

    def to_payload(self) -> Dict[str, Any]:
        """The JSON of `application/vnd.gpumem.autobatch.v1+json` (schemas/autobatch.schema.json)."""
        payload = asdict(self)
        self.config_yaml = payload["config_yaml"] = autobatch_yaml(payload)
        return payload

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Dict[str, Any]:
        return autobatch_bundle(self)

    def __str__(self) -> str:
        return render_text(self.to_payload())


# --- the search ------------------------------------------------------------------------------------------


@dataclass
class _Plan:
    bench: Workbench
    make_batch: Callable[[int], Any]
    forward: Callable[[Any, Any], Any]
    loss_fn: Callable[[Any, Any], Any]
    amp: Optional[str]
    steps: int
    cap: Optional[int]


def _train(plan: _Plan, batch: int, tracker: Any) -> None:
    """`steps` full training steps at `batch`; raises on OOM. Locals die with this frame."""
    bench = plan.bench
    model = bench.model
    model.train()
    optimizer = bench.new_optimizer()
    scaler = grad_scaler(plan.amp, bench.device)
    autocast = autocast_factory(plan.amp, bench.device.type)
    for _ in range(plan.steps):
        data = to_device(plan.make_batch(batch), bench.device)
        tracker.register(data, check=True)
        with autocast():
            out = plan.forward(model, data)
            loss = plan.loss_fn(out, data)
        (scaler.scale(loss) if scaler is not None else loss).backward()
        optimizer_step(optimizer, scaler)  # out, loss, data stay bound until the next batch, as in a user's loop


def run_trial(plan: _Plan, batch: int, phase: str) -> Trial:
    """One trial from a clean allocator; an OOM is recovered outside the `except` block."""
    import torch

    device = plan.bench.device
    cuda = device.type == "cuda"
    clean_allocator(device)
    tracker = make_tracker(plan.cap) if plan.cap is not None else NullTracker()
    started = time.perf_counter()
    error: Optional[str] = None
    try:
        register_states(tracker, plan.bench.model, plan.bench.optimizer)
        with interrupts_at_operators(tracker), tracker:
            tracker.check_baseline()
            _train(plan, batch, tracker)
        if cuda:
            torch.cuda.synchronize(device)
    except Exception as exc:
        if not (isinstance(exc, RuntimeError) and is_oom(exc)):
            raise StepError(exc) from exc  # the user's error keeps its type and its traceback
        error = first_line(exc)  # only the text: the exception and its frames go when this block ends
    finally:
        tracker.close()
    seconds = time.perf_counter() - started
    peak = reserved = None
    if cuda:
        peak, reserved = torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device)
    elif plan.cap is not None:
        peak = tracker.peak
    plan.bench.reset()
    if error is not None:  # outside the except block: the failed step's frames are gone, their tensors can go
        clean_allocator(device)
    return Trial(
        batch,
        error is None,
        peak if error is None else None,
        round(seconds, 4),
        reserved if error is None else None,
        phase,
        error,
    )


def _measure(trial: Trial, cuda: bool) -> Optional[int]:
    """The figure compared against the limit: reserved on CUDA (what the allocator asks the device for)."""
    return trial.reserved_bytes if cuda else trial.peak_bytes


class _Search:
    """Bracket the boundary, then close it: secant steps along the measured peaks (when the limit is known),
    alternating with bisection, so a poor line costs a few trials and never a wrong answer."""

    def __init__(
        self,
        run: Callable[[int, str], Trial],
        limit: Optional[int],
        cuda: bool,
        max_batch: int,
        progress: Optional[Callable[[Trial], None]],
    ) -> None:
        self.run, self.limit, self.cuda, self.max_batch, self.progress = run, limit, cuda, max_batch, progress
        self.trials: List[Trial] = []
        self.lo: Optional[Trial] = None  # largest batch that ran
        self.hi: Optional[int] = None  # smallest batch that ran out of memory

    def trial(self, batch: int, phase: str) -> Trial:
        result = self.run(batch, phase)
        self.trials.append(result)
        if result.ok and (self.lo is None or batch > self.lo.batch):
            self.lo = result
        if not result.ok and (self.hi is None or batch < self.hi):
            self.hi = batch
        if self.progress is not None:
            self.progress(result)
        return result

    def done(self) -> bool:
        lo = self.lo.batch if self.lo else 0
        if self.hi is not None and self.hi - lo <= 1:
            return True
        return self.lo is not None and self.hi is None and lo >= self.max_batch

    def _slope(self) -> Optional[Tuple[Trial, float]]:
        """(largest fitting trial, bytes per sample) from the two largest fitting trials with figures."""
        fits = sorted(
            {t.batch: t for t in self.trials if t.ok and _measure(t, self.cuda) is not None}.values(),
            key=lambda t: t.batch,
        )
        if len(fits) < 2 or self.limit is None:
            return None
        a, b = fits[-2], fits[-1]
        slope = (_measure(b, self.cuda) - _measure(a, self.cuda)) / (b.batch - a.batch)
        return (b, slope) if slope > 0 else None

    def _secant(self) -> Optional[int]:
        line = self._slope()
        if line is None:
            return None
        point, slope = line
        return int(math.floor(point.batch + (self.limit - _measure(point, self.cuda)) / slope))

    def next_batch(self, last: Trial) -> Tuple[int, str]:
        lo, hi = self.lo, self.hi
        if lo is None:  # nothing ran yet: a predicted start is likely close, step down a little first
            step = max(1, hi // SLOPE_PROBE) if last.phase == "predicted" else hi - max(1, hi // 2)
            return max(1, hi - step), "shrink"
        if last.ok and last.phase in ("secant", "predicted"):
            return lo.batch + 1, "edge"  # the line says this is the last fitting batch: check the next one
        secant = self._secant()  # a secant at or below a batch that ran means the line is off: ignore it
        if hi is None:  # nothing failed yet: grow, at most doubling
            if secant is not None and secant > lo.batch:
                if secant < 2 * lo.batch and secant <= self.max_batch:
                    return secant, "secant"
                return min(2 * lo.batch, self.max_batch), "grow"
            if self.limit is not None and last.phase != "slope":
                return min(lo.batch + max(1, lo.batch // SLOPE_PROBE), self.max_batch), "slope"
            return min(2 * lo.batch, self.max_batch), "grow"
        if secant is not None and lo.batch < secant < hi and last.phase != "secant":
            return secant, "secant"
        return (lo.batch + hi) // 2, "bisect"

    def search(self, start: int, predicted: bool = False) -> None:
        last = self.trial(start, "predicted" if predicted else "start")
        while not self.done() and not (self.lo is None and self.hi == 1) and len(self.trials) < MAX_TRIALS:
            batch, phase = self.next_batch(last)
            last = self.trial(batch, phase)


# --- public API ---------------------------------------------------------------------------------------------


class _LiveBytesEngine:
    """analysis.search_maximum's engine interface over fake traces, measuring live tensor bytes: the figure
    the simulated cap counts (analyze()'s own figures add allocator rounding, workspaces and a context)."""

    name = "traced"

    def __init__(self, plan: Any) -> None:
        self.plan = plan
        self.cache: Dict[int, Any] = {}

    def point(self, batch: int) -> Any:
        from gpumem_kernel.analysis import Point
        from gpumem_kernel.analysis import run_trace
        from gpumem_kernel.analysis import TraceError

        if batch not in self.cache:
            try:
                live = run_trace(self.plan, batch, fake=True).peak_live
            except TraceError:
                if not self.cache:
                    raise
                self.cache[batch] = None
                return None
            self.cache[batch] = Point(batch, live, None, live, "traced")
        return self.cache[batch]


def _predict(
    model: Any, optimizer: Any, input: Any, loss: Any, amp: Optional[str], device: Any, cap: Optional[int], hint: int
) -> Tuple[Optional[int], str]:
    """The analysis engines' maximum, or None and why; only where the verified search starts.

    Simulated: analysis.search_maximum over fake traces (a few, each ~50 ms for small models) against the
    cap. CUDA: analyze() on the device, measured, without its safety reserve: the search wants the boundary (it
    steps down from a start that fails), and a reserve of 5 % of the card can exceed what is free on a shared
    one (an H200 with 8 GiB free started at 2 where 45 fit)."""
    from gpumem_kernel.analysis import analyze
    from gpumem_kernel.analysis import batch_maker
    from gpumem_kernel.analysis import AnalysisRequest
    from gpumem_kernel.analysis import search_maximum
    from gpumem_kernel.analysis import TracePlan
    from gpumem_kernel.analysis import default_loss

    try:
        if cap is None:
            asked = AnalysisRequest(
                batch_size=hint, input=input, loss=loss, optimizer=optimizer, amp=amp, device=device, reserve=0
            )
            report = analyze(model, asked)
            maximum = report.recommendations.maximum
            return maximum, f"analysis ({report.engine}) predicted {maximum}"
        make, _ = batch_maker(model, input)
        plan = TracePlan(model=model, optimizer=optimizer, make_batch=make, loss_fn=loss or default_loss, amp=amp)
        found = search_maximum(_LiveBytesEngine(plan), cap)
    except (ValueError, RuntimeError) as exc:
        return None, f"no analysis prediction ({first_line(exc)})"
    return found.maximum, f"analysis (traced live bytes, {len(found.points)} traces) predicted {found.maximum}"


def _cuda_limit(device: Any) -> int:
    """Free memory plus what torch already holds: where the allocator's reserved peak would hit the wall."""
    import torch

    clean_allocator(device)
    free, _ = torch.cuda.mem_get_info(device)
    return int(free + torch.cuda.memory_reserved(device))


def _check_args(
    model: Any, margin: float, max_batch: int, steps: int, start_batch: Optional[int], multiple: Optional[int]
) -> None:
    from gpumem_kernel.analysis import check_model, positive_int

    check_model(model)
    if not isinstance(margin, (int, float)) or isinstance(margin, bool) or not 0 <= margin < 1:
        raise ValueError(f"margin must be a fraction in [0, 1), got {margin!r}")
    positive_int(max_batch, "max_batch")
    if positive_int(steps, "steps") < 2:
        raise ValueError("steps must be at least 2: the optimizer state appears at the first step")
    if start_batch is not None:
        positive_int(start_batch, "start_batch")
    if multiple is not None:
        positive_int(multiple, "multiple")


def _optimizer_name(optimizer: Any) -> str:
    return optimizer if isinstance(optimizer, str) else type(optimizer).__name__


def _batch_source(model: Any, input: Any) -> Callable[[int], Any]:
    from gpumem_kernel.analysis import batch_maker

    make, _ = batch_maker(model, input)
    return lambda b: make(b, False)


@import_repair()  # a Ctrl-C in a lazy import leaves no half-imported module (analysis.import_guard)
def auto_select_batch_size(
    model: Any,
    device: Any = None,
    start_batch: Optional[int] = None,
    *,
    input: Any = None,
    loss: Optional[Callable[[Any, Any], Any]] = None,
    forward: Optional[Callable[[Any, Any], Any]] = None,
    optimizer: Any = "adamw",
    amp: Any = None,
    margin: float = 0.10,
    multiple: Optional[int] = None,
    max_batch: int = 2**16,
    simulate: Any = None,
    steps: int = 2,
    predict: bool = True,
    progress: Optional[Callable[[Trial], None]] = None,
    rounding: Any = None,
    rounding_setting: Any = None,
) -> AutobatchResult:
    """The largest batch that runs `steps` full training steps on `device` without OOM, and a recommended
    batch `margin` below it, rounded down: `rounding` 'pow2', 'none' or N (a multiple of N; `multiple=N` says
    the same); default: `rounding_setting` (the JupyterLab setting "Batch-size rounding" the magic passes on), else a
    power of two.

    input: shape without the batch ('3x224x224', (512,)), a sample batch, or a callable batch_size -> batch
    (as in analyze()). loss(output, batch) -> scalar; forward(model, batch) -> output (default: model(x),
    model(*xs), model(**xs)). optimizer: adamw | adam | sgd | sgd-momentum, or your optimizer (stepped in
    place and restored). simulate: a cap such as '6GiB' on tracked tensor bytes, run on the CPU.
    progress(trial) is called after each trial. Ctrl-C stops the search: the result is partial and
    `interrupted`. The model, optimizer and RNG states are restored exactly in every case.
    """

    from gpumem_kernel.analysis import amp_mode_of, optimizer_kind
    from gpumem_kernel.analysis import rounding_from_options as from_options, resolve_rounding as resolve
    from gpumem_kernel.analysis import default_loss, feed

    started = time.perf_counter()
    _check_args(model, margin, max_batch, steps, start_batch, multiple)
    picks_rounding, round_source = resolve(from_options(rounding, multiple), rounding_setting)
    cap = parse_cap(simulate)
    amp_mode = amp_mode_of(amp)
    kind = optimizer_kind(optimizer)
    if loss is not None and not callable(loss):
        raise ValueError("loss must be a callable (output, batch) -> scalar")
    target = resolve_device(device, model, cap is not None)
    cuda = target.type == "cuda"
    if not cuda and cap is None:
        raise ValueError(
            "no GPU to search on: pass device='cuda', or simulate='6GiB' to search against a "
            "simulated memory cap on the CPU"
        )
    make_batch = _batch_source(model, input)
    notes: List[str] = []
    rng = RngSnapshot.take(cuda or cuda_initialised())
    bench: Optional[Workbench] = None
    search: Optional[_Search] = None
    interrupted = False
    try:
        if start_batch is not None:
            start, start_source, predicted = min(start_batch, max_batch), "start_batch", None
        elif predict and forward is None:
            predicted, why = _predict(model, kind, input, loss, amp_mode, target, cap, hint=min(8, max_batch))
            notes.append(why)
            start, start_source = min(max(1, predicted or 1), max_batch), "analysis" if predicted else "default"
        else:
            start, start_source, predicted = 1, "default", None
        bench = Workbench(model, kind, target)
        plan = _Plan(bench, make_batch, forward or feed, loss or default_loss, amp_mode, steps, cap)
        limit = cap if cap is not None else _cuda_limit(target)
        search = _Search(lambda b, phase: run_trial(plan, b, phase), limit, cuda, max_batch, progress)
        search.search(start, predicted=start_source == "analysis")
    except KeyboardInterrupt:
        if search is None:
            raise  # before the first trial: no partial result to show
        interrupted = True
    finally:
        with interrupts_held():  # a Ctrl-C meanwhile waits until the user's model, optimizer and RNG are whole
            if bench is not None:
                bench.close()
            rng.restore()
            clean_allocator(target)
    if not bench.in_place:
        notes.append(f"the model is not on {target}: the trials ran on a copy placed there")
    maximum = search.lo.batch if search.lo else 0
    if interrupted:
        notes.append("search interrupted: the maximum is the largest batch verified so far (a lower bound)")
    at_least = search.lo is not None and search.hi is None and maximum >= max_batch
    if at_least:
        notes.append(f"batch {max_batch} (max_batch) fits: the true maximum may be higher")
    if maximum == 0 and not interrupted:
        notes.append("even batch 1 does not fit: try amp, checkpointing or a smaller model")
    if cap is not None:
        notes.append(
            f"simulated: a cap of {format_bytes(cap, 'MiB')} on tracked live tensor bytes on the CPU; a real GPU adds "
            "the CUDA context, cuBLAS/cuDNN workspaces and allocator rounding"
        )
    recommended = max(1, picks_rounding.apply(maximum * (1 - margin))) if maximum else 0
    return AutobatchResult(
        maximum=maximum,
        recommended=recommended,
        margin=float(margin),
        rounding=picks_rounding.label,
        trials=search.trials,
        n_trials=len(search.trials),
        seconds=round(time.perf_counter() - started, 3),
        engine="cuda" if cuda else "simulated",
        device=str(target),
        limit_bytes=limit,
        steps=steps,
        start_batch=start,
        start_source=start_source,
        predicted=predicted,
        model_name=type(model).__name__,
        optimizer=_optimizer_name(kind),
        amp=amp_mode,
        at_least=at_least,
        interrupted=interrupted,
        notes=notes,
        round=picks_rounding.code,
        round_source=round_source,
    )


@import_repair()
def scan_batch_sizes(
    model: Any,
    batch_sizes: Sequence[int],
    device: Any = None,
    *,
    input: Any = None,
    loss: Optional[Callable[[Any, Any], Any]] = None,
    forward: Optional[Callable[[Any, Any], Any]] = None,
    optimizer: Any = "adamw",
    amp: Any = None,
    simulate: Any = None,
    steps: int = 2,
) -> List[Trial]:
    """Brute force: one trial per batch size, no search (the reference the search is checked against)."""

    from gpumem_kernel.analysis import amp_mode_of, optimizer_kind
    from gpumem_kernel.analysis import default_loss, feed

    _check_args(model, 0.0, max(batch_sizes), steps, None, None)
    cap = parse_cap(simulate)
    target = resolve_device(device, model, cap is not None)
    rng = RngSnapshot.take(target.type == "cuda" or cuda_initialised())
    bench = Workbench(model, optimizer_kind(optimizer), target)
    plan = _Plan(
        bench, _batch_source(model, input), forward or feed, loss or default_loss, amp_mode_of(amp), steps, cap
    )
    try:
        return [run_trial(plan, b, "scan") for b in batch_sizes]
    finally:
        with interrupts_held():
            bench.close()
            rng.restore()


# --- rendering ------------------------------------------------------------------------------------------------


def _label(payload: Dict[str, Any]) -> str:
    return "simulated" if payload["engine"] == "simulated" else payload["device"]


def recommended_note(payload: Mapping[str, Any]) -> str:
    """What the recommended batch is: how far below the maximum, computed from the two numbers shown, and
    the margin and rounding that made it (the one wording of the text, the HTML and the YAML comment)."""
    from gpumem_kernel.analysis import below_caption

    if not payload["maximum"]:
        return "n/a: not even batch 1 ran"
    return below_caption(payload["recommended"], payload["maximum"], payload["margin"], payload["rounding"])


def _rounding_text(payload: Mapping[str, Any]) -> str:
    from gpumem_kernel.analysis import rounding_text

    return rounding_text(payload["rounding"], payload.get("round_source"))


def render_text(payload: Dict[str, Any]) -> str:
    sim = payload["engine"] == "simulated"
    cap = payload["limit_bytes"]
    where = (
        f"simulated: {format_bytes(cap, 'auto')} cap on tracked tensor bytes (CPU)"
        if sim
        else f"{payload['device']}, limit {format_bytes(cap, 'auto')}"
    )
    lines = ["=" * 70, f"Auto Batch Size - {payload['model_name']} ({where})", "=" * 70]
    if payload["interrupted"]:
        lines.append("Interrupted: partial result")
    maximum = payload["maximum"]
    more = "+ (max_batch reached)" if payload["at_least"] else ""
    lines += [
        f"  Maximum:          {maximum}{more} (ran {payload['steps']} full training steps"
        f"{', simulated' if sim else ''})",
        f"  Recommended:      {payload['recommended']} ({recommended_note(payload)})",
        f"  Rounding:         {_rounding_text(payload)}",
        f"  Start:            {payload['start_batch']} ({payload['start_source']})",
        f"  Trials:           {payload['n_trials']} in {payload['seconds']:.1f} s",
        "",
        f"  {'#':>3} {'batch':>7} {'phase':<8} {'result':<14} {'peak':>12} {'seconds':>8}",
    ]
    for i, t in enumerate(payload["trials"], 1):
        result = "ok" if t["ok"] else ("OOM (sim)" if sim else "OOM")
        lines.append(
            f"  {i:>3} {t['batch']:>7} {t['phase']:<8} {result:<14} "
            f"{format_bytes(t['peak_bytes'], 'auto'):>12} {t['seconds']:>8.3f}"
        )
    if payload["notes"]:
        lines += ["", "Notes:"] + [f"  - {n}" for n in payload["notes"]]
    if payload.get("config_yaml"):  # absent from payloads written before it existed
        lines += ["", "Configuration (YAML):"] + [f"  {line}" for line in payload["config_yaml"].splitlines()]
    lines.append("=" * 70)
    return "\n".join(lines)


def autobatch_yaml(payload: Mapping[str, Any]) -> str:
    """The recommended batch in the training-config shape (data.batch_size, training.use_amp), with comments
    saying where it came from."""
    measured = "simulated" if payload["engine"] == "simulated" else "measured"
    limit = payload["limit_bytes"]
    header = [
        f"gpumem autobatch of {payload['model_name']}: {measured} on {payload['device']}"
        + (f", limit {format_bytes(limit, 'auto')}" if limit is not None else ""),
        f"maximum {'at least ' if payload['at_least'] else ''}{payload['maximum']}, recommended "
        f"{payload['recommended']} ({recommended_note(payload)})" + (", interrupted" if payload["interrupted"] else ""),
    ]
    training: Dict[str, Any] = {"use_amp": payload["amp"] is not None}
    if payload["amp"] is not None:
        training["amp_dtype"] = AMP_DTYPES[payload["amp"]]
    return config_yaml(header, {"data": {"batch_size": payload["recommended"]}, "training": training})


def render_html(payload: Dict[str, Any]) -> str:
    """The result and its trials as the rich view reads: words left, numbers right, whatever the stylesheet."""
    sim = payload["engine"] == "simulated"
    columns = [
        Column("#", True),
        Column("Batch", True),
        Column("Phase"),
        Column("Result"),
        Column("Peak", True),
        Column("Seconds", True),
    ]
    rows = [
        (
            i,
            t["batch"],
            t["phase"],
            "ok" if t["ok"] else ("out of memory (simulated)" if sim else "out of memory"),
            format_bytes(t["peak_bytes"], "auto"),
            f"{t['seconds']:.3f}",
        )
        for i, t in enumerate(payload["trials"], 1)
    ]
    notes = "".join(f"<li>{esc(n)}</li>" for n in payload["notes"])
    flag = "<p><b>Interrupted: partial result</b></p>" if payload["interrupted"] else ""
    return (
        f"<div class='gpumem-autobatch'><p><b>Auto batch size — {esc(payload['model_name'])}</b> "
        f"({esc(_label(payload))})</p>{flag}<p>maximum <b>{payload['maximum']}</b>, recommended "
        f"<b>{payload['recommended']}</b> ({esc(recommended_note(payload))}; rounding {esc(_rounding_text(payload))}); "
        f"{payload['n_trials']} trials in {payload['seconds']:.1f} s</p>"
        + html_table("Trials", columns, rows)
        + f"{'<ul>' + notes + '</ul>' if notes else ''}</div>"
    )


def autobatch_bundle(result: Any) -> Dict[str, Any]:
    """{MIME: payload, text/html, text/plain} for IPython.display.display(..., raw=True)."""
    payload = result.to_payload() if hasattr(result, "to_payload") else dict(result)
    return {MIME: payload, "text/html": render_html(payload), "text/plain": render_text(payload)}
