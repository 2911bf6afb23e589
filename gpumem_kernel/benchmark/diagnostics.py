"""The benchmark guide's reading of the table in plain words: OOMs, swapping, I/O share, utilisation, and what
AMP, pin_memory, workers and larger batches bought."""

from __future__ import annotations

import statistics
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from gpumem_kernel.benchmark.result import BenchmarkRow, Pick
from gpumem_kernel.render.units import format_bytes

IO_SHARE = 0.30  # the benchmark guide: I/O above this share of the step -> more workers, pin_memory
LOW_UTIL = 70.0  # the benchmark guide: below this GPU% the GPU waits
AMP_WORTH = 1.2  # an AMP speedup at least this large -> use it


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
