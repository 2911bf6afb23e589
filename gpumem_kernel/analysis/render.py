"""The analysis report as a MIME bundle: its JSON, a static HTML table, and seed 000's console block.

Renders from the payload dict (not the dataclasses), so the text a terminal shows and the JSON the browser
renders cannot disagree. Every string reaches HTML escaped: layer and model names are the user's.
"""

from __future__ import annotations

import html
from typing import Any, Dict, List, Mapping, Optional, Sequence

from gpumem_kernel.render.units import format_bytes

BANNER = "=" * 70
MIME = "application/vnd.gpumem.analysis.v1+json"
STATUS_TEXT = {"fits": "✅ Good", "tight": "⚠️ Tight", "will-not-fit": "❌ Will not fit", "unknown": "❔ Unknown"}
AMP_NAMES = {"fp16": "float16", "bf16": "bfloat16"}


def _b(n: Optional[int]) -> str:
    """GiB / MiB like the panel, KiB and B for the small figures of small models."""
    if n is not None and abs(n) < 1 << 20:
        return format_bytes(n, "B") if abs(n) < 1 << 10 else format_bytes(n, "KiB")
    return format_bytes(n, "auto")


def _n(value: Optional[int]) -> str:
    return "n/a" if value is None else str(value)


def _row(label: str, value: str) -> str:
    return f"  {label + ':':<18}{value}"


def _figure(payload: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    for figure in payload["figures"]:
        if figure["name"] == name:
            return figure
    return {"name": name, "bytes": None, "engine": "n/a", "note": ""}


def _title(payload: Mapping[str, Any]) -> str:
    device = payload["device"]
    if device["source"] == "nvml":
        index = payload["settings"].get("device") or "GPU 0"
        return f"💾 Memory Analysis - {index}: {device['name']}"
    if device["source"] in ("target", "memory"):
        return f"💾 Memory Analysis - planning for {device['name']}"
    return "💾 Memory Analysis - no GPU (pass target= or memory= for batch sizes)"


def _gpu_block(payload: Mapping[str, Any]) -> List[str]:
    device = payload["device"]
    if device["source"] == "none":
        return ["📊 GPU Memory:", _row("Device", "none visible to this kernel")]
    lines = ["📊 GPU Memory:", _row("Total", _b(device["total_bytes"]))]
    if device["source"] == "nvml":
        used = device["total_bytes"] - device["free_bytes"]
        lines.append(_row("Currently Used", f"{_b(used)} ({100 * used / device['total_bytes']:.1f}%)"))
        lines.append(_row("Free", _b(device["free_bytes"])))
        if device["reclaimable_bytes"]:
            lines.append(_row("Reusable", f"{_b(device['reclaimable_bytes'])} (this model's states, cache)"))
    else:
        lines.append(_row("Source", f"{device['source']} (compute {device['compute_capability'] or '?'})"))
    lines.append(_row("Usable", f"{_b(device['limit_bytes'])} (after a {_b(device['reserve_bytes'])} safety reserve)"))
    return lines


def _model_total(payload: Mapping[str, Any]) -> int:
    return (
        payload["parameters_bytes"] + payload["buffers_bytes"] + payload["gradients_bytes"] + payload["optimizer_bytes"]
    )


def _batch_total(payload: Mapping[str, Any]) -> int:
    return (
        payload["input_bytes"]
        + payload["activations_bytes"]
        + payload["autocast_cache_bytes"]
        + payload["temporary_bytes"]
    )


def _model_block(payload: Mapping[str, Any]) -> List[str]:
    optimizer = _figure(payload, "optimizer")
    total = _model_total(payload)
    return [
        "🏗️  Model Memory:",
        _row("Parameters", f"{_b(payload['parameters_bytes'])} ({payload['model']['parameter_count']:,} parameters)"),
        _row("Buffers", _b(payload["buffers_bytes"])),
        _row("Gradients", _b(payload["gradients_bytes"])),
        _row(
            "Optimizer State",
            f"{_b(payload['optimizer_bytes'])} ({payload['settings']['optimizer']}, {optimizer['engine']})",
        ),
        _row("Total Model", _b(total)),
    ]


def _batch_block(payload: Mapping[str, Any]) -> List[str]:
    temporaries = payload["temporary_bytes"]
    total = _batch_total(payload)
    lines = [
        f"📦 Batch Memory (batch_size={payload['settings']['batch_size']}):",
        _row("Input Data", _b(payload["input_bytes"])),
        _row("Activations", f"{_b(payload['activations_bytes'])} (traced: kept for backward)"),
    ]
    if payload["autocast_cache_bytes"]:
        lines.append(_row("Autocast Cache", _b(payload["autocast_cache_bytes"])))
    lines += [
        _row("Step Transients", f"{_b(temporaries)} (temporaries at the peak)"),
        _row("Total Batch", _b(total)),
    ]
    return lines


# how the CUDA context enters the footprint: (line text, added to the footprint)
_CONTEXT = {
    "estimate": ("estimate, not created yet: added to the footprint", True),
    "nvml": ("measured by NVML, already in use: not added", False),
    "in use": ("already in use: not added", False),
}


def _usage_block(payload: Mapping[str, Any]) -> List[str]:
    """Every total is the sum of the lines it names; the footprint says which ones."""
    device = payload["device"]
    bound = payload["error_bound"]
    peak = payload["peak_bytes"]
    no_gpu = device["source"] == "none"
    where = " on a CUDA GPU" if no_gpu else ""
    if device["context_source"] in _CONTEXT:
        text, added = _CONTEXT[device["context_source"]]
        context = _row("CUDA Context", f"{_b(device['context_bytes'])} ({text})")
    else:
        added = False
        context = _row("CUDA Context", "not counted (no GPU: pass target= or memory= to add its estimate)")
    footprint = "Peak Reserved + CUDA Context" if added else "Peak Reserved"
    lines = [
        f"💡 Total Estimated Usage{where} ({payload['engine']}, ±{bound['relative']:.0%}):",
        _row(
            "Model + Batch",
            f"{_b(_model_total(payload) + _batch_total(payload))} (Total Model + Total Batch; not all live at once)",
        ),
        _row(
            "Peak Allocated",
            f"{_b(payload['peak_allocated_bytes'])} (live at the peak in {payload['peak_phase'] or 'step'}, step 2)",
        ),
        _row("Peak Reserved", f"{_b(payload['peak_reserved_bytes'])} (caching allocator: allocated + cached blocks)"),
        _row("Workspaces", f"{_b(payload['workspace_bytes'])} (cuBLAS + cuDNN{where}, counted in the peaks)"),
        context,
        _row("Peak Footprint", f"{_b(peak)} ({footprint}: the step's device footprint)"),
    ]
    if device["total_bytes"]:
        lines.append(_row("GPU Usage", f"{100 * peak / device['total_bytes']:.1f}% (Peak Footprint / Total)"))
    if device["limit_bytes"] is not None:
        lines.append(_row("Remaining", f"{_b(device['limit_bytes'] - peak)} (Usable - Peak Footprint)"))
    return lines


def _recommendation_block(payload: Mapping[str, Any]) -> List[str]:
    recs = payload["recommendations"]
    current = recs["current"]
    lines = ["🎯 Batch Size Recommendations:"]
    if recs["maximum"] is None:
        lines.append(_row("Maximum", f"n/a ({recs['note'] or 'no device limit'})"))
    elif recs["maximum"] == 0:
        lines.append(_row("Maximum", f"0 ({recs['note'] or 'even batch 1 does not fit'})"))
    else:
        limit = payload["device"]["limit_bytes"]
        extra = ", extrapolated" if recs["extrapolated"] else ""
        lines += [
            _row("Maximum", f"{recs['maximum']} (largest batch whose peak fits {_b(limit)}{extra})"),
            _row("Recommended", f"{recs['recommended']} (balanced, ~60% of maximum, {recs['rounding']})"),
            _row("Safe", f"{recs['safe']} (conservative, very stable, ~40%)"),
        ]
    lines.append(_row("Current", f"{current['batch_size']} {STATUS_TEXT[current['status']]}"))
    acc = recs["accumulation"]
    pick, target = recs["recommended"], acc["target_effective_batch"]
    if pick and acc["explicit_target"] and pick >= target:
        lines.append(_row("Accumulation", f"not needed: batch {target} reaches the target effective batch"))
    elif pick and acc["recommended"] == 1:
        lines.append(_row("Accumulation", f"not needed: {pick} reaches the effective batch {target}"))
    elif pick:
        lines.append(
            _row(
                "Accumulation",
                f"{acc['recommended']} steps of {pick} -> effective batch "
                f"{acc['recommended'] * pick} (target {target})",
            )
        )
    lines.append(_row("Learning Rate", recs["lr"]["hint"]))
    if recs["note"] and recs["maximum"]:
        lines.append(_row("Note", recs["note"]))
    return lines


def _settings_block(payload: Mapping[str, Any]) -> List[str]:
    settings = payload["settings"]
    amp = settings["amp"]
    lines = ["⚙️  Settings:", _row("Mixed Precision", f"Enabled ({AMP_NAMES[amp]})" if amp else "Disabled")]
    saved = payload["amp_saved_bytes"]
    if saved is not None and saved >= 0:
        lines.append(_row("Memory Saved", f"~{_b(saved)} (vs fp32, traced)"))
    elif saved is not None:
        lines.append(
            _row(
                "Memory Saved",
                f"none: AMP adds ~{_b(-saved)} here (low-precision weight copies "
                "outweigh the smaller activations at this batch)",
            )
        )
    lines += [
        _row("Optimizer", str(settings["optimizer"])),
        _row("Input", str(settings["input"])),
        _row("Grad Accum", str(settings["grad_accum"])),
        _row("Checkpointing", "on" if settings["checkpointing"] else "off"),
        _row("Engine", f"{payload['engine']} ({payload['elapsed_seconds']:.1f} s)"),
    ]
    return lines


def _distributed_block(payload: Mapping[str, Any]) -> List[str]:
    dist = payload["distributed"]
    if not dist:
        return []
    lines = [
        f"🌐 Per Rank ({dist['strategy']}, world size {dist['world_size']}):",
        _row("Parameters", _b(dist["parameters_bytes"])),
        _row("Gradients", _b(dist["gradients_bytes"])),
        _row("Optimizer State", _b(dist["optimizer_bytes"])),
    ]
    if dist["extra_bytes"]:
        lines.append(_row("Extra", f"{_b(dist['extra_bytes'])} ({dist['extra_note']})"))
    lines += [
        _row("Activations", _b(dist["activations_bytes"])),
        _row("Peak per Rank", f"{_b(dist['peak_bytes'])} (a rank's Peak Footprint, not the sum above)"),
    ]
    return lines


def render_text(payload: Mapping[str, Any]) -> str:
    blocks = [
        _gpu_block(payload),
        _model_block(payload),
        _batch_block(payload),
        _usage_block(payload),
        _distributed_block(payload),
        _recommendation_block(payload),
        _settings_block(payload),
    ]
    lines = [BANNER, _title(payload), BANNER, ""]
    for block in blocks:
        if block:
            lines += block + [""]
    lines.append("Error bound: " + payload["error_bound"]["statement"])
    if payload["notes"]:
        lines += ["Notes:"] + [f"  - {note}" for note in payload["notes"]]
    lines.append(BANNER)
    return "\n".join(lines)


# --- HTML --------------------------------------------------------------------------------------------------


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _table(caption: str, head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    th = "".join(f"<th style='text-align:left'>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return (
        f"<table class='gpumem-analysis'><caption style='text-align:left'><b>{_e(caption)}</b></caption>"
        f"<thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"
    )


def render_html(payload: Mapping[str, Any]) -> str:
    recs = payload["recommendations"]
    figures = [(f["name"], _b(f["bytes"]), f["engine"], f["note"]) for f in payload["figures"]]
    picks = [
        ("maximum", _n(recs["maximum"]), recs["note"]),
        ("recommended", _n(recs["recommended"]), recs["rounding"]),
        ("safe", _n(recs["safe"]), recs["rounding"]),
        ("current", recs["current"]["batch_size"], STATUS_TEXT[recs["current"]["status"]]),
    ]
    curve = [
        (p["batch_size"], _b(p["peak_bytes"]), _b(p["peak_allocated_bytes"]), _b(p["peak_reserved_bytes"]), p["engine"])
        for p in payload["curve"]
    ]
    device = payload["device"]
    parts = [
        f"<p><b>{_e(_title(payload))}</b> — engine <b>{_e(payload['engine'])}</b>; model "
        f"{_e(payload['model']['name'])} ({payload['model']['parameter_count']:,} parameters); usable "
        f"{_e(_b(device['limit_bytes']))} of {_e(_b(device['total_bytes']))} ({_e(device['source'])})</p>",
        _table("Memory of one training step", ("figure", "size", "engine", "note"), figures),
        _table("Batch sizes", ("pick", "batch", "note"), picks),
        _table("Predicted peak against batch size", ("batch", "peak", "allocated", "reserved", "engine"), curve),
        f"<p>{_e(recs['lr']['hint'])}</p><p><i>{_e(payload['error_bound']['statement'])}</i></p>",
    ]
    if payload["notes"]:
        parts.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in payload["notes"]) + "</ul>")
    return "<div class='gpumem-analysis'>" + "".join(parts) + "</div>"


def analysis_bundle(report: Any) -> Dict[str, Any]:
    """{MIME: payload, text/html, text/plain} for IPython.display.display(..., raw=True)."""
    payload = report.to_payload() if hasattr(report, "to_payload") else dict(report)
    return {MIME: payload, "text/html": render_html(payload), "text/plain": render_text(payload)}


def render_gpu_info(infos: Sequence[Mapping[str, Any]]) -> str:
    """Seed 000's print_gpu_info block."""
    if not infos:
        return "No NVIDIA GPU visible to this kernel (NVML found none, or CUDA_VISIBLE_DEVICES hides them)."
    lines = [BANNER, f"🖥️  GPU Information ({len(infos)} GPU{'s' if len(infos) > 1 else ''})", BANNER]
    for info in infos:
        total = info.get("total_memory")
        used = info.get("used_memory")
        share = f" ({100 * used / total:.1f}%)" if used is not None and total else ""
        lines += [
            f"GPU {info['index']}: {info.get('name') or 'unknown'}",
            _row("Total Memory", format_bytes(total)),
            _row("Used", format_bytes(used) + share),
            _row("Free", format_bytes(info.get("free_memory"))),
            _row("Compute", str(info.get("compute_capability") or "n/a")),
            _row("Multiprocessors", str(info.get("multi_processor_count") or "n/a (CUDA not initialised)")),
        ]
    lines.append(BANNER)
    return "\n".join(lines)
