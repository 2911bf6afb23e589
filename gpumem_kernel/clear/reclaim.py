"""Clear GPU memory: free what pins memory after an error, then say what still holds memory.

The memory-management guide's `clear_gpu_memory()` (gc.collect + empty_cache) frees nothing while the last traceback or
IPython's output cache still references the tensors, which is the usual state right after an OOM. The
safe clear drops exactly those hidden references, collects, and — only when the user's code already
initialised CUDA — returns the allocator's cache to the driver. User variables are deleted only when
named (`variables=[...]`) or with `all_cuda_vars=True`.

What holds memory, what a dropped reference frees and which variables hold CUDA memory are read by the one walk
over the namespace (heldby.walk), the same the holders panel shows: a `trainer` object holding a model is listed
here as it is there. A variable the walk cannot inspect is named in one note and never deleted unless named.
Never imports torch and never initialises CUDA.
"""

from __future__ import annotations

import gc
import html
import re
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Mapping, MutableMapping, Optional, Sequence, Set, Tuple

from gpumem_kernel.heldby.walk import (
    Holder,
    Walker,
    charge,
    each_variable,
    empty_holder,
    frame_holder,
    holders,
    looks,
    memory_walker,
    named_variable,
)
from gpumem_kernel.probe.holders import (
    exception_tracebacks,
    is_ipython_name,
    namespace_of,
    resolve_shell,
    torch_kinds,
    traceback_frames,
)
from gpumem_kernel.probe.inspection import Skipped
from gpumem_kernel.probe.snapshot import take_sample
from gpumem_kernel.probe.torchstats import allocator_stats, cuda_initialised, initialised_cuda
from gpumem_kernel.render.units import human

CLEAR_MIME = "application/vnd.gpumem.clear.v1+json"
PAYLOAD_VERSION = 1
TOP_HOLDERS = 15
_OUT_NAME = re.compile(r"^_(\d+)$")
_UNDERS = ("_", "__", "___")
_EXCEPTION_ATTRS = ("last_type", "last_value", "last_traceback", "last_exc")  # last_exc: Python 3.12+


# --- the namespace and IPython's hidden references ---------------------------------------------------


@dataclass
class _TracebackRefs:
    """Where the last error's traceback is referenced from (names for the report, and how to drop them)."""

    sources: List[str]
    tracebacks: List[Any]
    drops: List[Callable[[], None]]


def _find_traceback_refs(shell: Any) -> _TracebackRefs:
    sources: List[str] = []
    tracebacks: List[Any] = []
    drops: List[Callable[[], None]] = []
    names = [attr for attr in _EXCEPTION_ATTRS if getattr(sys, attr, None) is not None]
    if names:
        sources.append("sys." + "/".join(names))
        if getattr(sys, "last_traceback", None) is not None:
            tracebacks.append(sys.last_traceback)
        for attr in ("last_value", "last_exc"):
            tracebacks.extend(exception_tracebacks(getattr(sys, attr, None)))
        drops.append(lambda: [delattr(sys, attr) for attr in _EXCEPTION_ATTRS if hasattr(sys, attr)])
    # IPython's traceback formatter keeps the last traceback for %debug.
    formatter = getattr(shell, "InteractiveTB", None)
    if getattr(formatter, "tb", None) is not None:
        sources.append("InteractiveTB.tb")
        tracebacks.append(formatter.tb)
        drops.append(lambda: setattr(formatter, "tb", None))
    # The last cell's ExecutionResult keeps the exception it raised.
    result = getattr(shell, "last_execution_result", None)
    for attr in ("error_in_exec", "error_before_exec"):
        error = getattr(result, attr, None)
        if isinstance(error, BaseException):
            sources.append(f"last_execution_result.{attr}")
            tracebacks.extend(exception_tracebacks(error))
            drops.append(lambda attr=attr: setattr(result, attr, None))
    return _TracebackRefs(sources, tracebacks, drops)


@dataclass
class _CacheEntry:
    """One object in IPython's output cache and every name it is cached under."""

    names: List[str]
    value: Any
    drops: List[Callable[[], None]] = field(default_factory=list)


def _find_output_cache(shell: Any, walker: Walker) -> List[_CacheEntry]:
    """Output-cache entries (Out[N], _N, _, __, ___, the last result) whose value reaches a tensor's memory, by
    the walk's rule (heldby.walk): what the holders panel lists as IPython's output cache."""
    if shell is None:
        return []
    namespace, hidden = namespace_of(shell)
    entries: Dict[int, _CacheEntry] = {}

    def add(name: Optional[str], value: Any, drop: Callable[[], None]) -> None:
        if id(value) not in entries and walker.reach(value) is None:
            return
        entry = entries.setdefault(id(value), _CacheEntry([], value))
        if name is not None and name not in entry.names:
            entry.names.append(name)
        entry.drops.append(drop)

    output = getattr(getattr(shell, "history_manager", None), "output_hist", None)
    if type(output) is not dict:
        output = namespace.get("Out") if type(namespace.get("Out")) is dict else {}  # a user's `Out` is theirs
    for number, value in list(output.items()):
        add(f"Out[{number}]", value, lambda number=number: output.pop(number, None))
    # IPython pushes _N, _, __, ___ with interactive=False, so user_ns_hidden keeps a second reference.
    for space in (namespace, hidden):
        for name, value in list(space.items()):
            match = _OUT_NAME.match(name) if isinstance(name, str) else None
            # _N is IPython's only when it is still the cached object (a user may assign _5 themselves).
            if match and (int(match.group(1)) not in output or output[int(match.group(1))] is value):
                add(
                    name if space is namespace else None,
                    value,
                    lambda space=space, name=name, value=value: _pop_if(space, name, value),
                )
    hook = getattr(shell, "displayhook", None)
    for name in _UNDERS:
        value = getattr(hook, name, None)
        if value is None:
            continue
        # Reset both copies to IPython's initial '' so IPython keeps updating _ (it stops when they differ).
        mine = [space for space in (namespace, hidden) if space.get(name, None) is value]

        def drop(name: str = name, mine: List[MutableMapping[str, Any]] = mine) -> None:
            setattr(hook, name, "")
            for space in mine:
                space[name] = ""

        add(name, value, drop)
    result = getattr(shell, "last_execution_result", None)
    if getattr(result, "result", None) is not None:
        add("last result", result.result, lambda: setattr(result, "result", None))
    for entry in entries.values():
        entry.names = entry.names or ["hidden output cache"]
    return list(entries.values())


def _pop_if(space: MutableMapping[str, Any], name: str, value: Any) -> None:
    if space.get(name, None) is value:
        del space[name]


# --- before/after figures --------------------------------------------------------------------------


@dataclass
class DeviceMemory:
    """One CUDA device before and after: torch allocator (when CUDA is initialised) and NVML's figure
    for this process (includes the CUDA context). None: not measurable."""

    device: str
    name: Optional[str] = None
    allocated_before: Optional[int] = None
    allocated_after: Optional[int] = None
    reserved_before: Optional[int] = None
    reserved_after: Optional[int] = None
    this_kernel_before: Optional[int] = None
    this_kernel_after: Optional[int] = None

    def reclaimed(self) -> Optional[int]:
        """Bytes returned to the driver: NVML's figure when known, else the allocator's reserved."""
        pairs = ((self.this_kernel_before, self.this_kernel_after), (self.reserved_before, self.reserved_after))
        for before, after in pairs:
            if before is not None and after is not None:
                return before - after
        return None


@dataclass
class _Snapshot:
    devices: Dict[str, Dict[str, Any]]
    host_rss: Optional[int]


def _snapshot() -> _Snapshot:
    devices: Dict[str, Dict[str, Any]] = {}
    host_rss: Optional[int] = None
    try:
        for index, stats in allocator_stats().items():
            devices[f"cuda:{index}"] = {"allocated": stats.allocated, "reserved": stats.reserved}
    except Exception:
        pass
    sample = take_sample()
    if sample is not None:
        host_rss = (sample.get("host") or {}).get("rss")
        for device in (sample.get("gpu") or {}).get("devices") or []:
            if device.get("cuda_index") is not None:
                entry = devices.setdefault(f"cuda:{device['cuda_index']}", {})
                entry.update(name=device.get("name"), this_kernel=device.get("this_kernel"))
    if host_rss is None:
        try:
            import psutil

            host_rss = psutil.Process().memory_info().rss
        except Exception:
            pass
    return _Snapshot(devices, host_rss)


def _device_table(before: _Snapshot, after: Optional[_Snapshot]) -> List[DeviceMemory]:
    rows = []
    for device in sorted(set(before.devices) | set(after.devices if after else {})):
        b = before.devices.get(device, {})
        a = after.devices.get(device, {}) if after else {}
        rows.append(
            DeviceMemory(
                device=device,
                name=b.get("name") or a.get("name"),
                allocated_before=b.get("allocated"),
                allocated_after=a.get("allocated"),
                reserved_before=b.get("reserved"),
                reserved_after=a.get("reserved"),
                this_kernel_before=b.get("this_kernel"),
                this_kernel_after=a.get("this_kernel"),
            )
        )
    return rows


# --- the report ------------------------------------------------------------------------------------


@dataclass
class ClearReport:
    """What the clear dropped (or, on a dry run, would drop), what it reclaimed and what still holds memory."""

    dry_run: bool
    torch_imported: bool
    cuda_initialized: bool
    traceback_sources: List[str]
    traceback_frames: int
    traceback_freed: Optional[Holder]
    output_cache: List[Holder]
    output_cache_entries: int
    deleted: List[Holder]
    gc_collected: Optional[int]
    emptied_cache: bool
    devices: List[DeviceMemory]
    host_rss_before: Optional[int]
    host_rss_after: Optional[int]
    holders: List[Holder]
    holders_more: int
    notes: List[str]

    def to_payload(self) -> Dict[str, Any]:
        payload = asdict(self)
        payload = {"version": PAYLOAD_VERSION, **payload}
        payload["reclaimed"] = {row.device: row.reclaimed() for row in self.devices}
        return payload


def _check_variables(names: Sequence[Any], namespace: Mapping[str, Any], hidden: Mapping[str, Any]) -> List[str]:
    """The names to delete, or a one-line ValueError naming the bad ones."""
    if isinstance(names, str):
        names = [names]
    bad_type = [repr(n) for n in names if not isinstance(n, str) or not n.isidentifier()]
    if bad_type:
        raise ValueError(f"not a variable name: {', '.join(bad_type)}")
    unknown = [n for n in names if n not in namespace]
    if unknown:
        raise ValueError(f"no variable named {', '.join(repr(n) for n in unknown)} in this kernel")
    ipython_owned = [n for n in names if is_ipython_name(n, namespace[n], hidden)]
    if ipython_owned:
        raise ValueError(
            f"{', '.join(repr(n) for n in ipython_owned)} belongs to IPython, not to your code; "
            "the safe clear already drops cached outputs"
        )
    return list(dict.fromkeys(names))


def clear_gpu_memory(
    shell: Any = None,
    *,
    variables: Optional[Sequence[str]] = None,
    all_cuda_vars: bool = False,
    dry_run: bool = False,
) -> ClearReport:
    """Drop the last traceback and the output-cache entries that hold torch objects, delete the named
    variables (or all holding CUDA memory), gc.collect(), and empty the CUDA cache when CUDA is initialised.

    `dry_run=True` touches nothing and reports what would be dropped. Bad `variables` → ValueError (one line).
    """
    shell = resolve_shell(shell)
    namespace, hidden = namespace_of(shell)
    to_delete = _check_variables(variables or [], namespace, hidden)
    walks = _Walks()
    notes: List[str] = []
    before = _snapshot()

    skipped = Skipped()  # every walk below records here: the report names the skipped variables once
    refs = _find_traceback_refs(shell)
    frames = traceback_frames(refs.tracebacks)
    traceback_sources, frame_count = list(refs.sources), len(frames)
    if all_cuda_vars:
        cuda_vars = _cuda_variables(shell, walks, to_delete, skipped)
        if not cuda_vars:
            notes.append("no user variable holds CUDA memory: none to delete")
        to_delete += cuda_vars
    cache_walker = walks.start()
    cache = _find_output_cache(shell, cache_walker) if cache_walker is not None else []
    freed = _freed(shell, walks, to_delete, cache, frames, skipped)
    cache_names = sum(len(entry.names) for entry in cache)

    gc_collected: Optional[int] = None
    emptied = False
    after: Optional[_Snapshot] = None
    if not dry_run:
        for drop in refs.drops + [d for entry in cache for d in entry.drops]:
            drop()
        for name in to_delete:
            namespace.pop(name, None)
        # Drop this function's own references before collecting.
        del refs, frames, cache
        gc_collected = gc.collect()
        emptied = _empty_cuda_cache(notes)
        after = _snapshot()
    if not walks.torch:
        notes.append("torch is not imported in this kernel: no tensors to free")
    elif not cuda_initialised():
        notes.append("CUDA is not initialised in this kernel: there is no GPU memory of this kernel to return")

    still = holders(shell, exclude=to_delete if dry_run else (), skipped=skipped, walker=walks.start())
    notes += [line for line in (walks.note(), skipped.line()) if line is not None]
    return ClearReport(
        dry_run=dry_run,
        torch_imported=walks.torch,
        cuda_initialized=cuda_initialised(),
        traceback_sources=traceback_sources,
        traceback_frames=frame_count,
        traceback_freed=freed.traceback,
        output_cache=freed.cache,
        output_cache_entries=cache_names,
        deleted=freed.deleted,
        gc_collected=gc_collected,
        emptied_cache=emptied,
        devices=_device_table(before, after),
        host_rss_before=before.host_rss,
        host_rss_after=after.host_rss if after else None,
        holders=still[:TOP_HOLDERS],
        holders_more=max(0, len(still) - TOP_HOLDERS),
        notes=notes,
    )


class _Walks:
    """The clear's walks of the namespace (heldby.walk), each with its own object budget, so one pass cannot
    spend the next one's; remembers whether any stopped at its budget, for one note."""

    def __init__(self) -> None:
        self.torch = torch_kinds() is not None  # without torch nothing holds a tensor: no walk at all
        self.truncated = False
        self._walkers: List[Walker] = []

    def start(self) -> Optional[Walker]:
        """A fresh walk; None without torch."""
        walker = memory_walker()
        if walker is not None:
            self._walkers.append(walker)
        return walker

    def note(self) -> Optional[str]:
        if not any(walker.truncated for walker in self._walkers):
            return None
        limit = self._walkers[0].limits.objects
        return f"stopped after {limit:,} objects: variables reached only through more may be missing"


@dataclass
class _Freed:
    """What each dropped reference and each deleted variable frees: only what no remaining variable keeps."""

    traceback: Optional[Holder] = None
    cache: List[Holder] = field(default_factory=list)
    deleted: List[Holder] = field(default_factory=list)


def _freed(
    shell: Any, walks: _Walks, to_delete: List[str], cache: List[_CacheEntry], frames: List[Any], skipped: Skipped
) -> _Freed:
    """Charge each dropped reference only for what no remaining user variable keeps alive."""
    namespace, _ = namespace_of(shell)
    walker = walks.start()
    if walker is None:
        return _Freed(deleted=[empty_holder(name, namespace[name]) for name in to_delete])
    kept: Set[Any] = set()
    holders(shell, exclude=to_delete, seen=kept, skipped=skipped, walker=walker)
    deleted = [_deleted(name, namespace[name], walker, kept, skipped) for name in to_delete]
    cache_holders = [_cache_holder(entry, walker, kept) for entry in cache]
    return _Freed(frame_holder(frames, walker, kept) if frames else None, cache_holders, deleted)


def _cache_holder(entry: _CacheEntry, walker: Walker, kept: Set[Any]) -> Holder:
    name = " / ".join(entry.names)
    reach = walker.reach(entry.value)
    held = charge(name, reach, looks(entry.value, walker.kinds), kept, keep_empty=True) if reach else None
    return held or empty_holder(name, entry.value)


def _cuda_variables(shell: Any, walks: _Walks, named: Sequence[str], skipped: Skipped) -> List[str]:
    """The variables (other than `named`) that reach a CUDA tensor, by the walk's rule (a `trainer` holding a
    model on the GPU is one); one that cannot be inspected is never returned, so never deleted."""
    walker = walks.start()
    if walker is None:
        return []
    reached = each_variable(shell, walker, skipped, lambda value, reach: None, exclude=named)
    return [r.name for r in reached if any(str(key[0]).startswith("cuda") for key in r.reach.storages)]


def _deleted(name: str, value: Any, walker: Walker, kept: Set[Any], skipped: Skipped) -> Holder:
    """What deleting a variable the user named frees; its name alone when it reaches nothing or cannot be
    inspected (recorded in `skipped`; it is deleted all the same: the user asked for it)."""
    reached = named_variable(name, value, walker, skipped, lambda v, _: looks(v, walker.kinds))
    held = charge(name, reached.reach, reached.read, kept, keep_empty=True) if reached is not None else None
    return held or empty_holder(name, value)


def _empty_cuda_cache(notes: List[str]) -> bool:
    """empty_cache + ipc_collect, only when CUDA is already initialised (never initialise it here)."""
    cuda = initialised_cuda()
    if cuda is None:
        return False
    for function in ("empty_cache", "ipc_collect"):
        try:
            getattr(cuda, function)()
        except Exception as exc:
            notes.append(f"torch.cuda.{function}() failed: {type(exc).__name__}: {exc}".splitlines()[0])
    return True


# --- rendering -------------------------------------------------------------------------------------


def _on_cuda(device: str) -> bool:
    return device.startswith("cuda")


def _on_host(device: str) -> bool:
    return not device.startswith("cuda")


def _graph(h: Holder, device_filter: Callable[[str], bool] = lambda d: True) -> int:
    return sum(n for d, n in h.graph_by_device.items() if device_filter(d))


def _what(h: Holder, device_filter: Callable[[str], bool] = lambda d: True) -> str:
    what = f"{h.dtype} {list(h.shape)}" if h.shape is not None else f"{h.type_name}, {plural(h.tensors, 'tensor')}"
    graph = _graph(h, device_filter)
    if graph:  # memory `del` frees that no byte count of the variable itself shows
        what += f"; keeps {human(graph)} alive through autograd graphs — store `loss.item()` or `t.detach()`"
    return what


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _holds(h: Holder, device_filter: Callable[[str], bool]) -> bool:
    return any(device_filter(d) for d in (*h.by_device, *h.graph_by_device))


def _holder_line(h: Holder, device_filter: Callable[[str], bool]) -> str:
    size = sum(n for d, n in h.by_device.items() if device_filter(d))
    devices = ", ".join(dict.fromkeys(d for d in (*h.by_device, *h.graph_by_device) if device_filter(d)))
    what = _what(h, device_filter)
    return f"{h.name:<24} {human(size):>12}  {devices}  ({what})"


def _holder_groups(report: ClearReport) -> List[Tuple[str, List[str]]]:
    cuda = [_holder_line(h, _on_cuda) for h in report.holders if _holds(h, _on_cuda)]
    host = [
        _holder_line(h, _on_host)
        for h in sorted(report.holders, key=lambda h: -(h.bytes - h.on_cuda()))
        if _holds(h, _on_host)
    ]
    return [(title, lines) for title, lines in (("CUDA", cuda), ("host", host)) if lines]


def _dropped_lines(report: ClearReport) -> List[str]:
    verb = "would drop" if report.dry_run else "dropped"
    lines = []
    if report.traceback_sources:
        freed = report.traceback_freed
        size = (
            f", {freed.tensors} tensor{'' if freed.tensors == 1 else 's'} only it kept alive: {human(freed.bytes)}"
            if freed and freed.tensors
            else ""
        )
        lines.append(
            f"{verb} the last error's traceback ({report.traceback_frames} frames{size}) "
            f"from {', '.join(report.traceback_sources)}"
        )
    for h in report.output_cache:
        lines.append(f"{verb} cached output {h.name} ({human(h.bytes)})")
    for h in report.deleted:
        graph = f", and {human(h.graph_bytes)} its autograd graphs kept alive" if h.graph_bytes else ""
        lines.append(f"{'would delete' if report.dry_run else 'deleted'} variable {h.name} ({human(h.bytes)}{graph})")
    if not lines:
        lines.append("nothing to drop: no traceback and no cached output holding tensors")
    if report.gc_collected is not None:
        lines.append(f"gc.collect() found {report.gc_collected} unreachable objects")
    if report.emptied_cache:
        lines.append("torch.cuda.empty_cache() and ipc_collect() returned cached blocks to the driver")
    return lines


def _device_lines(report: ClearReport) -> List[str]:
    lines = []
    for row in report.devices:
        parts = []
        for label, before, after in (
            ("reserved", row.reserved_before, row.reserved_after),
            ("allocated", row.allocated_before, row.allocated_after),
            ("this kernel (NVML)", row.this_kernel_before, row.this_kernel_after),
        ):
            if before is not None or after is not None:
                parts.append(f"{label} {human(before)}" + ("" if report.dry_run else f" → {human(after)}"))
        if parts:
            lines.append(f"{row.device}{' ' + row.name if row.name else ''}: " + "; ".join(parts))
    if report.host_rss_before is not None:
        after = "" if report.dry_run or report.host_rss_after is None else f" → {human(report.host_rss_after)}"
        lines.append(f"host: kernel RSS {human(report.host_rss_before)}{after}")
    return lines


def clear_text(report: ClearReport) -> str:
    title = "GPU memory clear — dry run (nothing changed)" if report.dry_run else "GPU memory clear"
    lines = [title] + [f"  {line}" for line in _dropped_lines(report) + _device_lines(report) + report.notes]
    groups = _holder_groups(report)
    lines.append("Still holding memory (largest first):" if groups else "No user variable holds tensors.")
    for heading, rows in groups:
        lines.append(f"  {heading}")
        lines.extend(f"    {row}" for row in rows)
    if report.holders_more:
        lines.append(f"  … and {report.holders_more} more")
    return "\n".join(lines)


def clear_html(report: ClearReport) -> str:
    e = html.escape
    title = "GPU memory clear — dry run (nothing changed)" if report.dry_run else "GPU memory clear"
    items = "".join(f"<li>{e(line)}</li>" for line in _dropped_lines(report) + _device_lines(report) + report.notes)
    parts = [f'<div class="gpumem-clear"><h4>{e(title)}</h4><ul>{items}</ul>']
    groups = _holder_groups(report)
    if not groups:
        parts.append("<p>No user variable holds tensors.</p>")
    for heading, _ in groups:
        on = _on_cuda if heading == "CUDA" else _on_host
        rows = "".join(
            f"<tr><td><code>{e(h.name)}</code></td><td>{e(h.type_name)}</td>"
            f"<td>{e(', '.join(dict.fromkeys(d for d in (*h.by_device, *h.graph_by_device) if on(d))))}</td>"
            f"<td>{e(_what(h, on))}</td>"
            f'<td style="text-align:right">{e(human(sum(n for d, n in h.by_device.items() if on(d))))}</td></tr>'
            for h in report.holders
            if _holds(h, on)
        )
        parts.append(
            f"<h5>Still holding memory — {e(heading)}</h5><table><thead><tr><th>variable</th><th>type</th>"
            f"<th>device</th><th>what</th><th>bytes</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    if report.holders_more:
        parts.append(f"<p>… and {report.holders_more} more</p>")
    parts.append("</div>")
    return "".join(parts)


def clear_bundle(report: ClearReport) -> Dict[str, Any]:
    """MIME bundle for display(..., raw=True): the rich payload plus static HTML and console text."""
    return {CLEAR_MIME: report.to_payload(), "text/html": clear_html(report), "text/plain": clear_text(report)}
