"""The holders report: what the walk found (names, sizes, descriptions: never a user object), as a table for
`%gpumem holders` and as JSON for `--json`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

from gpumem_kernel.render.units import human

OUT_ENTRY = "Out"
TRACEBACK_ENTRY = "sys.last_traceback"
UNREACHABLE = "not reachable from your variables"


@dataclass
class HolderEntry:
    name: str  # the variable, or OUT_ENTRY / TRACEBACK_ENTRY
    source: str  # "variable" | "ipython" | "traceback"
    description: str  # e.g. "list of 40 tensors with grad history"
    bytes: int  # charged here: storages no earlier entry reached
    reached_bytes: int  # all it reaches, shared storages included
    tensors: int
    shared_with: List[str] = field(default_factory=list)  # other entries reaching some of the same storages
    by_device: Dict[str, int] = field(default_factory=dict)  # the charged bytes by device: {"cuda:0": ...}
    # what it keeps alive only through autograd graphs (saved for backward), by device; not in `bytes`: that
    # memory is in the remainder no variable reaches
    graph_by_device: Dict[str, int] = field(default_factory=dict)

    @property
    def graph_bytes(self) -> int:
        return sum(self.graph_by_device.values())


@dataclass
class HoldersReport:
    device: str  # what was accounted: "cuda", or "cpu" in tests
    entries: List[HolderEntry]  # largest charged first
    allocated: Optional[int]  # the allocator's figure for the device, when known
    reachable: int  # the entries' charged bytes together
    unreachable: Optional[int]  # allocated - reachable, when allocated is known
    skipped: bool  # the walk ran past its budget: no entries
    note: Optional[str]  # why skipped or empty, or what was left out
    elapsed_ms: float
    budget_ms: Optional[float]
    history_hint: Optional[str] = None  # which entries keep autograd graphs (their saved tensors are unreachable)
    uninspected: Optional[str] = None  # which variables could not be inspected and were skipped (one line)

    def to_dict(self, top: Optional[int] = None) -> Dict[str, Any]:
        """JSON-ready; with `top`, the `top` largest entries and `more` counting the rest (totals unchanged)."""
        data = asdict(self)
        data["elapsed_ms"] = round(self.elapsed_ms, 3)
        data["entries"] = data["entries"][:top] if top is not None else data["entries"]
        data["more"] = len(self.entries) - len(data["entries"])
        return data

    def __str__(self) -> str:  # print(gpumem_kernel.holders())
        return text(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # how IPython shows `gpumem_kernel.holders()`
        printer.text(text(self))


def _description(entry: HolderEntry) -> str:
    if not entry.shared_with:
        return entry.description
    names = ", ".join(f"`{name}`" for name in entry.shared_with)
    elsewhere = entry.reached_bytes - entry.bytes
    counted = f" ({human(elsewhere)} counted there)" if elsewhere > 0 else ""
    return f"{entry.description}; shared with {names}{counted}"


def unreachable_text(entries: List[HolderEntry], unreachable: int, device: Optional[str] = None) -> str:
    """What the remainder no variable reaches is: the autograd graphs the entries keep (named, with their
    bytes, on `device` or all devices), then what no walk can see."""
    kept = [(e.name, e.graph_by_device.get(device, 0) if device else e.graph_bytes) for e in entries]
    kept = [(name, size) for name, size in kept if size > 0]
    if not kept:
        return "autograd graphs, a library's caches, lost references"
    total = min(sum(size for _, size in kept), unreachable)
    names = ", ".join(f"`{name}`" for name, _ in kept[:3]) + (" …" if len(kept) > 3 else "")
    return f"{human(total)} of it autograd graphs kept by {names}; the rest a library's caches, lost references"


def text(report: HoldersReport, top: Optional[int] = None) -> str:
    """The table: one line per holder, largest first, then the remainder no variable reaches."""
    head = f"{report.device.upper()} memory held by your variables"
    if report.allocated is not None:
        head += f" ({human(report.allocated)} allocated)"
    if report.skipped or (not report.entries and report.note):
        return f"{head}: {report.note}" + (f"\n  {report.uninspected}" if report.uninspected else "")
    shown = report.entries[:top] if top is not None else report.entries
    rows = [(entry.name, human(entry.bytes), _description(entry)) for entry in shown]
    rest = report.entries[len(shown) :]
    if rest:
        rows.append((f"({len(rest)} more)", human(sum(e.bytes for e in rest)), "--top shows more"))
    if report.unreachable is not None:
        rows.append((UNREACHABLE, human(report.unreachable), unreachable_text(report.entries, report.unreachable)))
    if not rows:
        rows.append(("(none)", human(0), f"no variable reaches a {report.device} tensor"))
    width = max(len(name) for name, _, _ in rows)
    lines = [head + ":"] + [f"  {name:<{width}}  {size:>11}  {what}" for name, size, what in rows]
    lines += [f"  {line}" for line in (report.history_hint, report.note, report.uninspected) if line]
    return "\n".join(lines)
