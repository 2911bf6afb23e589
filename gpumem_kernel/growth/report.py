"""What growth sends and shows: the `growth` comm message (growth.schema.json) and the notice's text and HTML
line in the cell's output. Names, sizes and strings only: never a user object."""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

from gpumem_kernel.render.units import human

HOST = "host"  # growth.memory.HOST: the kernel's RSS, a notice's `device`


@dataclass
class GrowingHolder:
    """A holder that grew between the cell's last two runs."""

    name: str  # the variable, "Out", "sys.last_traceback" or "not reachable from your variables"
    bytes: int  # how much more it holds than after the previous run
    tensors: int  # how many more tensors it reaches
    description: str  # what it is now: "list of 4 tensors with grad history"


@dataclass
class RerunGrowth:
    """Re-running one cell leaves allocated higher by a consistent step."""

    cell: Optional[int]  # the execution count of this run: "Cell [12]"
    cell_id: Optional[str]  # the notebook's cell id, when the front end sent it
    device: str  # "cuda:0"
    step: int  # bytes allocated each run leaves (the median of the consistent runs)
    reserved_step: int  # the same runs' median change of reserved bytes
    runs: int  # consecutive runs with that step, this one included (at least 3)
    runs_left: Optional[int]  # runs until the device is full at this rate; None: not known
    holders: List[GrowingHolder]  # largest growth first, at most 5
    pattern: Optional[str]  # the rule that matched (rules.PATTERNS), or None
    fix: Optional[str]  # what to change, for that pattern


@dataclass
class RunningGrowth:
    """Allocated grows steadily inside the cell that is running now (from the sampler's samples)."""

    device: str
    cell: Optional[int]
    rate: int  # bytes per minute
    allocated: int  # at the newest sample
    since: float  # when the cell started (seconds since the epoch)
    seconds: float  # the span the trend was fitted over
    samples: int
    full_in: Optional[float]  # seconds until the device is full at this rate; None: not known


@dataclass
class Growth:
    """The `growth` message: the in-cell trend now (null: none claimed, or no cell running) and, after a cell's
    run, its re-run notice (null: none)."""

    type: str = field(default="growth", init=False)
    time: float
    running: Optional[RunningGrowth]
    rerun: Optional[RerunGrowth]

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def _signed(n: int) -> str:
    return ("+" if n >= 0 else "-") + human(abs(n))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def headline(notice: RerunGrowth) -> str:
    """The notice's first line: `Cell [12] leaves +512.00 MiB allocated on cuda:0 after each run (3 runs); at this
    rate the GPU is full after 7 more runs`."""
    cell = f"Cell [{notice.cell}]" if notice.cell is not None else "This cell"
    if notice.device == HOST:  # the kernel's resident set: no allocator, the process's own pages
        text = f"{cell} grows this kernel's RSS by {_signed(notice.step)} each run ({notice.runs} runs)"
    else:
        text = f"{cell} leaves {_signed(notice.step)} allocated on {notice.device} after each run ({notice.runs} runs)"
    if notice.runs_left is not None:
        what = "host memory" if notice.device == HOST else notice.device
        what = "the GPU" if notice.device.startswith("cuda") else what
        later = "at the next run" if notice.runs_left <= 0 else f"after {_plural(notice.runs_left, 'more run')}"
        text += f"; at this rate {what} is full {later}"
    return text


def holder_line(holder: GrowingHolder) -> str:
    """One holder that grew: `losses` +1 tensor, +4 B (now list of 4 tensors with grad history)."""
    parts = [f"+{_plural(holder.tensors, 'tensor')}"] if holder.tensors > 0 else []
    parts.append(_signed(holder.bytes))
    return f"`{holder.name}` {', '.join(parts)} (now {holder.description})"


def rerun_text(notice: RerunGrowth, uninspected: Optional[str] = None) -> str:
    """The notice; `uninspected`: the holders' line naming the variables the walk skipped (what grew there is
    not known)."""
    lines = [headline(notice)]
    if notice.holders:
        lines.append("  grew since the last run: " + "; ".join(holder_line(h) for h in notice.holders))
    if notice.fix:
        lines.append(f"  fix: {notice.fix}")
    if uninspected:
        lines.append(f"  {uninspected}")
    return "\n".join(lines)


def rerun_bundle(notice: RerunGrowth, uninspected: Optional[str] = None) -> Dict[str, str]:
    """text/plain and static, escaped text/html for display(..., raw=True) in the cell's output."""
    rows = [f"<p><strong>{html.escape(headline(notice))}</strong></p>"]
    if notice.holders:
        items = "".join(f"<li>{html.escape(holder_line(h))}</li>" for h in notice.holders)
        rows.append(f"<p>grew since the last run:</p><ul>{items}</ul>")
    if notice.fix:
        rows.append(f"<p>fix: {html.escape(notice.fix)}</p>")
    if uninspected:
        rows.append(f"<p>{html.escape(uninspected)}</p>")
    text = rerun_text(notice, uninspected)
    return {"text/plain": text, "text/html": f"<div class='gpumem-growth'>{''.join(rows)}</div>"}


def running_text(trend: RunningGrowth) -> str:
    """The running cell's line: allocated grows 30.00 MiB/min on cuda:0 in this cell; full in ~14 min."""
    text = f"allocated grows {human(trend.rate)}/min on {trend.device} in this cell"
    if trend.full_in is not None:
        minutes = trend.full_in / 60
        text += f"; full in ~{minutes:.0f} min" if minutes >= 1 else "; full in under a minute"
    return text
