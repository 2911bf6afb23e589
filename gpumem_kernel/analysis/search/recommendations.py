"""The recommended and safe picks below the maximum batch, the status of the current batch, the
accumulation steps per pick and how to scale the learning rate."""

from __future__ import annotations

import math
from typing import Dict, Optional

from gpumem_kernel.analysis.search.engines import Point
from gpumem_kernel.analysis.report.picks import Rounding, picks_below
from gpumem_kernel.analysis.report.report import Accumulation, Current, LrScaling, Recommendations

TIGHT_SHARE = 0.9  # a current batch above 90% of the usable memory is "tight"


def recommend(
    maximum: Optional[int],
    current: Point,
    limit: Optional[int],
    reserve: Optional[int],
    *,
    batch_size: int,
    grad_accum: int,
    effective_batch: Optional[int],
    rounding: Rounding,
    extrapolated: bool,
    note: str,
) -> Recommendations:
    recommended, safe = picks_below(maximum, rounding)
    picks: Dict[str, Optional[int]] = {"maximum": maximum, "recommended": recommended, "safe": safe}
    status, fraction = "unknown", None
    if limit:
        fraction = current.footprint / limit
        if current.footprint <= TIGHT_SHARE * limit:
            status = "fits"
        elif current.footprint <= limit + (reserve or 0):
            status = "tight"
        else:
            status = "will-not-fit"
    target = effective_batch or batch_size * grad_accum

    def micro_batch(pick: Optional[int]) -> Optional[int]:
        # with a target effective batch, a pick above it is capped to it (no accumulation needed)
        return min(pick, target) if pick and effective_batch else pick

    steps = {k: (math.ceil(target / micro_batch(v)) if v else None) for k, v in picks.items()}
    lr = _lr_scaling(batch_size * grad_accum, micro_batch(picks["recommended"]), steps["recommended"])
    return Recommendations(
        maximum=picks["maximum"],
        recommended=picks["recommended"],
        safe=picks["safe"],
        rounding=rounding.label,
        extrapolated=extrapolated,
        note=note,
        current=Current(batch_size, current.footprint, status, fraction),
        accumulation=Accumulation(
            target, effective_batch is not None, steps["maximum"], steps["recommended"], steps["safe"]
        ),
        lr=lr,
    )


def _lr_scaling(current_effective: int, batch: Optional[int], steps: Optional[int]) -> LrScaling:
    if not batch or not steps:
        return LrScaling(current_effective, None, None, None, "no recommendation: learning rate unchanged")
    new = batch * steps
    plan = f"{batch} x {steps} accumulation steps" if steps > 1 else f"batch {batch}"
    if new == current_effective:
        hint = f"effective batch stays {new} ({plan}): keep the learning rate"
        return LrScaling(current_effective, new, 1.0, 1.0, hint)
    k = new / current_effective
    hint = (
        f"effective batch {current_effective} -> {new} ({plan}): scale the learning rate by {k:.3g} "
        f"(linear rule, SGD) or {math.sqrt(k):.3g} (square-root rule, Adam-family), with warm-up"
    )
    return LrScaling(current_effective, new, k, math.sqrt(k), hint)
