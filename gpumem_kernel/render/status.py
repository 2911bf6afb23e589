"""The status snapshot as a MIME bundle: text/plain in the console layout of `print_status()`, and a static HTML table.

Every string that comes from the system (device and process names, reasons, errors) is escaped in the
HTML: a process name is chosen by whoever started the process.
"""

from __future__ import annotations

import html
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from gpumem_kernel.render.fallback import Column, html_facts, html_table
from gpumem_kernel.render.units import format_bytes, format_percent

BANNER = "=" * 60
Row = Tuple[str, str]


def _share(part: Optional[int], whole: Optional[int]) -> str:
    return f"{format_bytes(part)} ({format_percent(part, whole)})" if part is not None and whole else format_bytes(part)


def _host_pid(process: Mapping[str, Any]) -> str:
    local = process.get("local_pid")
    return f" (local PID {local})" if local is not None and local != process.get("pid") else ""


def _owner(process: Mapping[str, Any]) -> str:
    """Who holds it; a kernel too old to send `relation` is read from this_kernel and kernel_id."""
    relation = process.get("relation")
    kernel_id = process.get("kernel_id")
    if relation == "probably_this_kernel":
        return "probably this kernel (not yet confirmed)"
    if relation == "ambiguous":
        return process.get("note") or "this kernel or another (ambiguous)"
    if relation == "notebook":
        cmdline = process.get("cmdline")
        return "started from this notebook" + _host_pid(process) + (f": {cmdline[:60]}" if cmdline else "")
    if process.get("this_kernel"):
        return "this kernel" + _host_pid(process)
    return f"kernel {kernel_id[:8]}" if kernel_id else "external"


def _device_title(device: Mapping[str, Any]) -> str:
    name = device.get("name") or "unknown GPU"
    if device.get("cuda_index") is None:
        return f"GPU (NVML {device['nvml_index']}, hidden by CUDA_VISIBLE_DEVICES): {name}"
    kind = "MIG slice " if device.get("mig") else ""
    return f"GPU {device['cuda_index']}: {kind}{name}"


def _device_rows(device: Mapping[str, Any]) -> List[Row]:
    total = device.get("total")
    rows: List[Row] = [
        ("Total", format_bytes(total)),
        ("Used", _share(device.get("used"), total)),
        ("Free", _share(device.get("free"), total)),
    ]
    details = []
    if device.get("compute_capability"):
        details.append(f"compute {device['compute_capability']}")
    if device.get("sm_count") is not None:
        details.append(f"{device['sm_count']} SMs")
    if device.get("util_gpu") is not None:
        details.append(f"{device['util_gpu']}% busy")
    if details:
        rows.append(("Device", ", ".join(details)))
    if device.get("this_kernel") is not None:
        rows.append(("This kernel", _share(device["this_kernel"], total)))
    if device.get("notebook_processes") is not None:
        rows.append(("Started here", _share(device["notebook_processes"], total)))
    if device.get("uncertain") is not None:
        rows.append(("Kernel or other", _share(device["uncertain"], total)))
    allocator = device.get("allocator")
    if allocator:
        rows.append(("Allocated", _share(allocator["allocated"], total)))
        rows.append(("Reserved", _share(allocator["reserved"], total)))
        rows.append(("Peak allocated", format_bytes(allocator["peak_allocated"])))
    return rows


def _process_rows(device: Mapping[str, Any]) -> List[Tuple[str, str, str, str]]:
    return [
        (str(p["pid"]), p.get("name") or "?", format_bytes(p.get("used")), _owner(p))
        for p in sorted(device.get("processes", []), key=lambda p: -(p.get("used") or 0))
    ]


# USS growth below this (bytes per minute) is allocator noise, not copy-on-read (as the panel's row)
GROWTH_SHOWN_FROM = 1024**2


def workers_text(children: Mapping[str, Any]) -> str:
    """ "4 child processes, 1.20 GiB unique (RSS 5.10 GiB), +40.00 MiB/min": unique memory (USS) first, since RSS
    counts the pages forked workers share once per worker; a sample from before USS shows RSS alone."""
    count = children["count"]
    noun = "child process" if count == 1 else "child processes"
    rss = format_bytes(children["rss"], "auto")
    if count == 0 or "uss" not in children:
        return f"{count} {noun}, {rss}"
    uss = children["uss"]
    if uss is None:
        return f"{count} {noun}, {rss} RSS, unique memory not measurable"
    text = f"{count} {noun}, {format_bytes(uss, 'auto')} unique (RSS {rss})"
    growth = children.get("uss_growth_per_min")
    if growth is not None and abs(growth) >= GROWTH_SHOWN_FROM:
        text += f", {'+' if growth > 0 else '-'}{format_bytes(abs(growth), 'auto')}/min"
    return text


def _host_rows(host: Mapping[str, Any]) -> List[Row]:
    rows: List[Row] = [
        ("Kernel RSS", format_bytes(host["rss"], "auto")),
        ("Workers", workers_text(host["children"])),
        ("System available", f"{format_bytes(host['available'])} of {format_bytes(host['total'])}"),
    ]
    limit = host.get("container_limit")
    if limit is None:
        rows.append(("Container limit", "none"))
    else:
        rows.append(("Container limit", f"{format_bytes(limit)} (using {_share(host.get('container_usage'), limit)})"))
    return rows


def _gpu_problem(sample: Mapping[str, Any]) -> Optional[str]:
    """Why this kernel cannot use a GPU, or None when at least one is visible."""
    gpu = sample["gpu"]
    if not gpu["available"]:
        return f"No NVIDIA GPU visible to this kernel: {gpu.get('reason') or 'unknown reason'}"
    if not any(d.get("cuda_index") is not None for d in gpu["devices"]):
        return (
            f"No NVIDIA GPU visible to this kernel: CUDA_VISIBLE_DEVICES={gpu.get('visible_devices')!r} hides every GPU"
        )
    return None


# --- text/plain ---------------------------------------------------------------------------------


def _text_rows(rows: Sequence[Row]) -> List[str]:
    return [f"{label + ':':<18}{value}" for label, value in rows]


def _text_device(device: Mapping[str, Any]) -> List[str]:
    lines = [BANNER, _device_title(device), BANNER]
    if device.get("cuda_index") is None:
        return lines[1:2]
    lines += _text_rows(_device_rows(device))
    processes = _process_rows(device)
    if processes:
        lines.append("Processes:")
        lines += [f"  PID {pid:<8} {name:<16} {used:>11}  {owner}" for pid, name, used, owner in processes]
    return lines


def render_text(sample: Mapping[str, Any]) -> str:
    lines: List[str] = []
    problem = _gpu_problem(sample)
    if problem:
        lines.append(problem)
    for device in sample["gpu"]["devices"]:
        lines += _text_device(device)
    lines += [BANNER, "Host", BANNER] + _text_rows(_host_rows(sample["host"])) + [BANNER]
    if sample.get("errors"):
        lines += ["Problems:"] + [f"  {e}" for e in sample["errors"]]
    return "\n".join(lines)


# --- text/html ----------------------------------------------------------------------------------


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _html_table(title: str, rows: Sequence[Row]) -> str:
    return html_facts(title, rows, "gpumem-status")


PROCESS_COLUMNS = (Column("PID", numeric=True), Column("Name"), Column("GPU memory", numeric=True), Column("Owner"))


def _html_processes(device: Mapping[str, Any]) -> str:
    rows = _process_rows(device)
    return html_table("", PROCESS_COLUMNS, rows, "gpumem-processes") if rows else ""


def render_html(sample: Mapping[str, Any]) -> str:
    parts: List[str] = []
    problem = _gpu_problem(sample)
    if problem:
        parts.append(f"<p><b>{_e(problem)}</b></p>")
    for device in sample["gpu"]["devices"]:
        if device.get("cuda_index") is None:
            parts.append(f"<p>{_e(_device_title(device))}</p>")
            continue
        parts.append(_html_table(_device_title(device), _device_rows(device)) + _html_processes(device))
    parts.append(_html_table("Host", _host_rows(sample["host"])))
    if sample.get("errors"):
        parts.append("<ul>" + "".join(f"<li>{_e(e)}</li>" for e in sample["errors"]) + "</ul>")
    return "<div class='gpumem-snapshot'>" + "".join(parts) + "</div>"


def status_bundle(sample: Mapping[str, Any]) -> Dict[str, str]:
    """The MIME bundle `%gpumem status` displays."""
    return {"text/plain": render_text(sample), "text/html": render_html(sample)}
