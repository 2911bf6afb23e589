"""The selection rule: the benchmark guide's three picks (highest throughput, best efficiency, recommended
within the memory target) over the rows that ran, and the most energy-efficient one where energy was measured."""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

from gpumem_kernel.benchmark.result import BenchmarkRow, Pick
from gpumem_kernel.render.units import format_bytes


def pick_configurations(rows: Sequence[BenchmarkRow], limit: Optional[int], target: float) -> Dict[str, Optional[Pick]]:
    """The benchmark guide's three picks over the rows that ran (status ok), and the most energy-efficient
    (None where no row has energy: a CPU run, a GPU without power readings); ties go to the earlier row."""
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
            r.energy_per_sample_j,
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
        "most_energy_efficient": best(
            [(i, r) for i, r in ok if r.energy_per_sample_j],
            lambda r: -(r.energy_per_sample_j or 0.0),
            "most_energy_efficient",
            "lowest energy per sample (NVML: the whole GPU over the measured steps)",
        ),
    }
