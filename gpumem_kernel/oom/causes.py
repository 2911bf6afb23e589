"""The cause: which findings explain the out-of-memory error, strongest first, and the note naming the first.
The checklist puts each cause's steps first (order.py CAUSE_STEPS)."""

from __future__ import annotations

from typing import List, Optional, Sequence

from gpumem_kernel.oom.diagnosis import Cause, Diagnosis
from gpumem_kernel.oom.parse import GIB, MIB, OomInfo
from gpumem_kernel.render.units import human


# A finding is a cause when the memory it holds matters for this request: at least a quarter of it (at most
# 1 GiB; 1 GiB when the request is unknown) and at least one 20 MiB large-pool block. It is decisive when that
# memory plus the free memory would have covered the request. Causes are ordered: a request larger than the
# GPU first (nothing else can help), then decisive causes, then the others, each group largest first.


def cause_threshold(tried: Optional[int]) -> int:
    return min(GIB, tried // 4) if tried else GIB


def _cause(amount: int, info: OomInfo, kind: str) -> Optional[Cause]:
    tried = info.tried_to_allocate
    decisive = bool(tried and info.free is not None and amount + info.free >= tried)
    if amount < 20 * MIB or not (decisive or amount >= cause_threshold(tried)):
        return None
    return Cause(kind, amount, decisive)


def find_causes(info: OomInfo, d: Diagnosis) -> List[Cause]:
    if d.too_large:
        return [Cause("too-large", info.tried_to_allocate, True)]
    found: List[Cause] = []
    # the notebook's own processes count too: they hold the GPU as much as anyone's (the note names them apart)
    others = sum(p.used or 0 for p in d.other_processes)
    if others and not d.pid_unmatched:  # unmatched: the "other" process may be this kernel itself
        found.append(_cause(others, info, "other-processes"))
    f = d.fragmentation
    if f is not None and f.suggest:
        found.append(_cause(f.reserved_unallocated, info, "fragmentation"))
    if d.traceback is not None:  # what the failed call's frames keep alive on the GPU that ran out
        cuda = {device: n for device, n in d.traceback.by_device.items() if device.startswith("cuda")}
        pinned = cuda.get(f"cuda:{info.device}", 0) if info.device is not None else sum(cuda.values())
        if pinned:
            found.append(_cause(pinned, info, "traceback"))
    causes = sorted((c for c in found if c is not None), key=lambda c: (not c.decisive, -(c.bytes or 0)))
    if d.host is not None and d.host.low:
        causes.append(Cause("host-memory", None, False))
    return causes


_CAUSE_WORDS = {  # kind: (what holds the memory, given its size; what comes first)
    "other-processes": ("other processes hold {} on this GPU", "the steps about them come first"),
    "fragmentation": ("fragmentation, {} reserved but unallocated", "expandable segments come first"),
    "traceback": ("the failed call's traceback keeps {} of tensors alive", "clearing comes first"),
}


def _other_processes_words(d: Diagnosis) -> Optional[str]:
    """Who the other processes are when some were started from this notebook: the user's own, named apart."""
    mine = sum(p.used or 0 for p in d.other_processes if p.child_of_kernel)
    if not mine:
        return None
    rest = sum(p.used or 0 for p in d.other_processes if not p.child_of_kernel)
    head = f"processes started from this notebook hold {human(mine)}"
    return head + (f" and other processes {human(rest)} on this GPU" if rest else " on this GPU")


def cause_note(info: OomInfo, causes: Sequence[Cause], d: Optional[Diagnosis] = None) -> Optional[str]:
    """One line naming the first cause and what it puts first (too-large and host memory have their own)."""
    cause = causes[0] if causes else None
    if cause is None or cause.bytes is None or cause.kind not in _CAUSE_WORDS:
        return None
    what, first = _CAUSE_WORDS[cause.kind]
    own = _other_processes_words(d) if d is not None and cause.kind == "other-processes" else None
    head = "Likely cause: " + (own if own is not None else what.format(human(cause.bytes)))
    if cause.decisive:
        return f"{head}; that memory plus the free memory would have covered the request, so {first}"
    if info.tried_to_allocate and info.free is not None:
        return (
            f"{head}, so {first}; with the free memory that makes {human(cause.bytes + info.free)} of the "
            f"{human(info.tried_to_allocate)} requested: make the step smaller as well"
        )
    return f"{head}, so {first}"
