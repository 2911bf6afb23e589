"""The step "Re-run this cell with the timeline on", offered when no OOM capture is attached, and its place
among the steps."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

from gpumem_kernel.oom.step import Step


RERUN_STEP_ID = "timeline-rerun"
_RERUN_LIMIT = 20_000  # characters of a cell copied into the step


def timeline_rerun_code(cell: Optional[str]) -> Optional[str]:
    """The failed cell with `%%gpumem --timeline` as its first line (added to a `%%gpumem` line that is
    there); None when there is no cell, it is too long to copy, or it already records its timeline."""
    if not cell or not cell.strip() or len(cell) > _RERUN_LIMIT:
        return None
    lines = cell.split("\n")
    first = lines[0].strip()
    if first.startswith("%%gpumem"):
        if "--timeline" in first.split():
            return None
        lines[0] = lines[0].rstrip() + " --timeline"
        return "\n".join(lines)
    return "%%gpumem --timeline\n" + cell


def timeline_rerun_step(cell: Optional[str]) -> Optional[Step]:
    code = timeline_rerun_code(cell)
    if code is None:
        return None
    return Step(
        RERUN_STEP_ID,
        "Re-run this cell with the timeline on",
        "Inserts a copy of the failed cell below with %%gpumem --timeline as its first line; it is not run. "
        "Free memory first, then run it: the timeline shows what was alive at each moment and which line "
        'allocated it, up to the failing allocation. The setting "Capture the timeline at an out-of-memory '
        'error" attaches this to the next error by itself (about 2 µs per allocation while cells run).',
        "insert-cell",
        code=code,
    )


RERUN_AFTER = 3  # the panel's brief shows the first steps: those stay the fixes, the re-run (a diagnosis) follows


def with_rerun_step(steps: Sequence[Step], rerun: Step) -> List[Step]:
    """The steps with the re-run step after the first RERUN_AFTER applicable steps, which are the fixes the
    diagnosis ranks first ("Clear GPU memory" among them, so memory is freed before the re-run); never among
    the folded ones."""
    ordered = list(steps)
    applicable = [i for i, s in enumerate(ordered) if s.not_applicable is None]
    clear = [i for i in applicable if ordered[i].id == "clear"]
    first = applicable[:RERUN_AFTER]
    at = max(first + clear) + 1 if first or clear else 0
    ordered.insert(at, rerun)
    return ordered


def failing_cell(shell: Any) -> Optional[str]:
    """The source of the cell running now (IPython stores it before running it), or None."""
    history = getattr(getattr(shell, "history_manager", None), "input_hist_raw", None)
    try:
        cell = history[-1] if history else None
    except Exception:
        return None
    return cell if isinstance(cell, str) else None
