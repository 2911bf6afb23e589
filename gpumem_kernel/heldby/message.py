"""The `holders` comm message (holders.schema.json): after each cell where CUDA is in use, the panel's "Held by"
section per device: the top holders on that device (variable, bytes charged there, description, what it shares
with whom), what IPython holds, and the remainder no variable reaches; or that the walk was skipped and why.

Built from a HoldersReport (names, sizes and strings): no user object reaches it, and the hook keeps only the
last message between cells."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from gpumem_kernel.heldby.report import HolderEntry, HoldersReport

TOP = 5  # entries per device in the panel; the rest are counted in `more`


@dataclass
class HolderLine:
    """One holder's share of one device."""

    name: str  # the variable, "Out" or "sys.last_traceback"
    source: str  # "variable" | "ipython" | "traceback"
    description: str  # "list of 40 tensors with grad history"
    bytes: int  # charged on this device: storages no larger holder reached first
    tensors: int  # on-device tensors it reaches, on every device
    shared_with: List[str]  # other holders reaching some of the same storages
    graph_bytes: int = 0  # kept alive on this device only through its autograd graphs (in `unreachable`)


@dataclass
class DeviceHolders:
    """What holds one device's memory."""

    device: str  # "cuda:0" ("cpu" under the tests' switch)
    allocated: Optional[int]  # the allocator's figure for the device at the walk; None: not known
    reachable: int  # charged to holders on this device, all of them (not only the top ones)
    unreachable: Optional[int]  # allocated - reachable: autograd graphs, caches, lost references; None: not known
    entries: List[HolderLine]  # the largest TOP on this device, largest first
    more: int  # holders on this device beyond the top ones
    more_bytes: int  # what they hold on it together
    graph_bytes: int = 0  # of `unreachable`: what the holders' autograd graphs keep alive on this device


@dataclass
class HoldersMessage:
    """The `holders` message: the walk after the last cell where CUDA was in use."""

    type: str = field(default="holders", init=False)
    time: float  # when the walk ended, seconds since the epoch
    cell: Optional[int]  # the cell's execution count
    skipped: bool  # the walk ran past its budget: no entries (note says so)
    note: Optional[str]  # why skipped, or what was left out
    history_hint: Optional[str]  # which holders keep autograd graphs
    elapsed_ms: float
    budget_ms: Optional[float]
    devices: List[DeviceHolders] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def _line(entry: HolderEntry, device: str) -> HolderLine:
    return HolderLine(
        entry.name,
        entry.source,
        entry.description,
        entry.by_device.get(device, 0),
        entry.tensors,
        list(entry.shared_with),
        entry.graph_by_device.get(device, 0),
    )


def _device(device: str, entries: List[HolderEntry], allocated: Optional[int], top: int) -> DeviceHolders:
    here = sorted(
        (e for e in entries if e.by_device.get(device) or e.graph_by_device.get(device)),
        key=lambda e: (-e.by_device.get(device, 0), -e.graph_by_device.get(device, 0), e.name),
    )
    reachable = sum(e.by_device.get(device, 0) for e in here)
    graphs = sum(e.graph_by_device.get(device, 0) for e in here)
    unreachable = None if allocated is None else max(0, allocated - reachable)
    rest = here[top:]
    return DeviceHolders(
        device,
        allocated,
        reachable,
        unreachable,
        [_line(e, device) for e in here[:top]],
        len(rest),
        sum(e.by_device.get(device, 0) for e in rest),
        graphs if unreachable is None else min(graphs, unreachable),
    )


def holders_message(
    report: HoldersReport,
    allocated: Optional[Mapping[str, int]],
    cell: Optional[int],
    now: float,
    top: int = TOP,
) -> HoldersMessage:
    """The message for `report`; `allocated` by device ({"cuda:0": bytes}; None: not known) gives each device
    its "not reachable from your variables" remainder. Devices: every one `allocated` names and every one a
    holder reaches."""
    known = dict(allocated or {})
    names = set(known) | {device for entry in report.entries for device in (*entry.by_device, *entry.graph_by_device)}
    in_order = sorted(names, key=lambda d: (len(d), d))  # cuda:2 before cuda:10
    devices = [] if report.skipped else [_device(d, report.entries, known.get(d), top) for d in in_order]
    return HoldersMessage(
        time=now,
        cell=cell,
        skipped=report.skipped,
        note="; ".join(line for line in (report.note, report.uninspected) if line) or None,
        history_hint=report.history_hint,
        elapsed_ms=round(report.elapsed_ms, 3),
        budget_ms=report.budget_ms,
        devices=devices,
    )
