"""The analysis report as a MIME bundle: its JSON, a static HTML table, and the analysis guide's console block.

Renders from the payload dict (not the dataclasses), so the text a terminal shows and the JSON the browser
renders cannot disagree. Every string reaches HTML escaped: layer and model names are the user's.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

from gpumem_kernel.analysis.report.llm_render import llm_block, llm_tables, sequence_block
from gpumem_kernel.analysis.report.picks import RECOMMENDED_SHARE, SAFE_SHARE, rule, share_caption
from gpumem_kernel.analysis.report.picks import rounding_text as _rounding_text
from gpumem_kernel.render.fallback import PICK_LABELS, auto_table, plain
from gpumem_kernel.render.fallback import label as key_label
from gpumem_kernel.render.snippets import AMP_DTYPES, LoopNames, accumulation_loop, config_yaml
from gpumem_kernel.render.units import human

BANNER = "=" * 70
MIME = "application/vnd.gpumem.analysis.v1+json"
STATUS_TEXT = {"fits": "✅ Good", "tight": "⚠️ Tight", "will-not-fit": "❌ Will not fit", "unknown": "❔ Unknown"}


def _n(value: Optional[int]) -> str:
    return "n/a" if value is None else str(value)


def _row(label: str, value: str) -> str:
    return f"  {label + ':':<18}{value}"


def _figure(payload: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    for figure in payload["figures"]:
        if figure["name"] == name:
            return figure
    return {"name": name, "bytes": None, "engine": "n/a", "note": ""}


def title_of(payload: Mapping[str, Any]) -> str:
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
    lines = ["📊 GPU Memory:", _row("Total", human(device["total_bytes"]))]
    if device["source"] == "nvml":
        used = device["total_bytes"] - device["free_bytes"]
        lines.append(_row("Currently Used", f"{human(used)} ({100 * used / device['total_bytes']:.1f}%)"))
        lines.append(_row("Free", human(device["free_bytes"])))
        if device["reclaimable_bytes"]:
            lines.append(_row("Reusable", f"{human(device['reclaimable_bytes'])} (this model's states, cache)"))
    else:
        compute = device["compute_capability"] or "not given: generic context and workspaces"
        lines.append(_row("Source", f"{device['source']} (compute {compute})"))
    usable = f"{human(device['limit_bytes'])} (after a {human(device['reserve_bytes'])} safety reserve)"
    lines.append(_row("Usable", usable))
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
        _row(
            "Parameters", f"{human(payload['parameters_bytes'])} ({payload['model']['parameter_count']:,} parameters)"
        ),
        _row("Buffers", human(payload["buffers_bytes"])),
        _row("Gradients", human(payload["gradients_bytes"])),
        _row(
            "Optimizer State",
            f"{human(payload['optimizer_bytes'])} ({payload['settings']['optimizer']}, {optimizer['engine']})",
        ),
        *_fine_tune_rows(payload),
        _row("Total Model", human(total)),
    ]


# a PEFT plan's figures (LoRA, QLoRA, DoRA, IA3, ...: analysis.model.fine_tune), each inside the lines above or the
# step's temporaries
_FINE_TUNE = (
    ("quantised_weights", "Quantised"),
    ("adapters", "Adapters"),  # any PEFT method: its figure's note names it (LoRA, DoRA, IA3, ...)
    ("dequant_transient", "Dequantisation"),
)


def _fine_tune_rows(payload: Mapping[str, Any]) -> List[str]:
    rows = []
    for name, label in _FINE_TUNE:
        figure = _figure(payload, name)
        if figure["bytes"] is not None:
            rows.append(_row(label, f"{human(figure['bytes'])} ({figure['note']})"))
    return rows


def _batch_block(payload: Mapping[str, Any]) -> List[str]:
    temporaries = payload["temporary_bytes"]
    total = _batch_total(payload)
    lines = [
        f"📦 Batch Memory (batch_size={payload['settings']['batch_size']}):",
        _row("Input Data", human(payload["input_bytes"])),
        _row("Activations", f"{human(payload['activations_bytes'])} (traced: kept for backward)"),
    ]
    if payload["autocast_cache_bytes"]:
        lines.append(_row("Autocast Cache", human(payload["autocast_cache_bytes"])))
    lines += [
        _row("Step Transients", f"{human(temporaries)} (temporaries at the peak)"),
        _row("Total Batch", human(total)),
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
        basis = device.get("context_basis")
        context = _row("CUDA Context", f"{human(device['context_bytes'])} ({text})" + (f"; {basis}" if basis else ""))
    else:
        added = False
        context = _row("CUDA Context", "not counted (no GPU: pass target= or memory= to add its estimate)")
    footprint = "Peak Reserved + CUDA Context" if added else "Peak Reserved"
    lines = [
        f"💡 Total Estimated Usage{where} ({payload['engine']}, ±{bound['relative']:.0%}):",
        _row(
            "Model + Batch",
            f"{human(_model_total(payload) + _batch_total(payload))} (Total Model + Total Batch; not all live at once)",
        ),
        _row(
            "Peak Allocated",
            f"{human(payload['peak_allocated_bytes'])} (live at the peak in {payload['peak_phase'] or 'step'}, step 2)",
        ),
        _row(
            "Peak Reserved", f"{human(payload['peak_reserved_bytes'])} (caching allocator: allocated + cached blocks)"
        ),
        _row("Workspaces", f"{human(payload['workspace_bytes'])} (cuBLAS + cuDNN{where}, counted in the peaks)"),
        context,
        _row("Peak Footprint", f"{human(peak)} ({footprint}: the step's device footprint)"),
    ]
    if device["total_bytes"]:
        lines.append(_row("GPU Usage", f"{100 * peak / device['total_bytes']:.1f}% (Peak Footprint / Total)"))
    if device["limit_bytes"] is not None:
        lines.append(_row("Remaining", f"{human(device['limit_bytes'] - peak)} (Usable - Peak Footprint)"))
    return lines


def pick_notes(payload: Mapping[str, Any]) -> Dict[str, str]:
    """What the maximum, recommended and safe picks are, each share computed from the numbers shown: the
    one wording of the text report, the HTML table and `%gpumem recommend`."""
    recs = payload["recommendations"]
    maximum = recs["maximum"]
    if not maximum:
        why = recs["note"] or ("no device limit" if maximum is None else "even batch 1 does not fit")
        return {"maximum": why, "recommended": "n/a", "safe": "n/a"}
    shares = payload["settings"].get("pick_shares") or {"recommended": RECOMMENDED_SHARE, "safe": SAFE_SHARE}
    extra = ", extrapolated" if recs["extrapolated"] else ""
    return {
        "maximum": f"largest batch whose peak fits {human(payload['device']['limit_bytes'])}{extra}",
        "recommended": "balanced: "
        + share_caption(recs["recommended"], maximum, shares["recommended"], recs["rounding"]),
        "safe": "conservative: " + share_caption(recs["safe"], maximum, shares["safe"], recs["rounding"]),
    }


def rounding_text(payload: Mapping[str, Any]) -> str:
    """ "power of two (default)", "multiple of 8 (JupyterLab setting)", "none (--round)"."""
    return _rounding_text(payload["recommendations"]["rounding"], payload["settings"].get("round_source"))


def recommendation_block(payload: Mapping[str, Any]) -> List[str]:
    recs = payload["recommendations"]
    current = recs["current"]
    notes = pick_notes(payload)
    lines = ["🎯 Batch Size Recommendations:"]
    if not recs["maximum"]:
        lines.append(_row("Maximum", f"{_n(recs['maximum'])} ({notes['maximum']})"))
    else:
        lines += [
            _row("Maximum", f"{recs['maximum']} ({notes['maximum']})"),
            _row("Recommended", f"{recs['recommended']} ({notes['recommended']})"),
            _row("Safe", f"{recs['safe']} ({notes['safe']})"),
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


def evaluation_line(evaluation: Mapping[str, Any]) -> str:
    """'Evaluation at batch N: X; largest evaluation batch M' (the browser's row says the same)."""
    peak = f"{human(evaluation['peak_allocated_bytes'])} allocated, {human(evaluation['peak_bytes'])} footprint"
    largest = "n/a (no device limit)" if evaluation["max_batch"] is None else str(evaluation["max_batch"])
    return f"Evaluation at batch {evaluation['batch']}: {peak}; largest evaluation batch {largest}"


def evaluation_rule(evaluation: Mapping[str, Any]) -> str:
    return (
        f"the guides' rule of thumb: an evaluation batch at most 1.3 x the training batch "
        f"({evaluation['rule_of_thumb_batch']} for {evaluation['training_batch']}) unless measured"
    )


def _evaluation_block(payload: Mapping[str, Any]) -> List[str]:
    evaluation = payload.get("evaluation")  # absent from payloads written before it existed
    if not evaluation:
        return []
    return [
        "🧪 Evaluation Step (no gradients, traced):",
        "  " + evaluation_line(evaluation),
        _row("Rule of Thumb", evaluation_rule(evaluation)),
        _row("Note", evaluation["note"]),
    ]


def _step_autocast(settings: Mapping[str, Any]) -> Optional[str]:
    """The autocast the user's step entered itself, as torch.autocast('cuda', bfloat16) says it; else None."""
    seen = settings.get("step_autocast")  # absent from payloads written before it existed
    return f"torch.autocast({seen['device_type']!r}, {AMP_DTYPES[seen['amp']]})" if seen else None


def _seen_in_step(settings: Mapping[str, Any]) -> str:
    seen = _step_autocast(settings)
    return f", seen in your step: {seen}" if seen else ""


def _settings_block(payload: Mapping[str, Any]) -> List[str]:
    settings = payload["settings"]
    amp = settings["amp"]
    precision = f"Enabled ({AMP_DTYPES[amp]})" if amp else "Disabled"
    lines = ["⚙️  Settings:", _row("Mixed Precision", precision + _seen_in_step(settings))]
    saved = payload["amp_saved_bytes"]
    if saved is not None and saved >= 0:
        lines.append(_row("Memory Saved", f"~{human(saved)} (vs fp32, traced)"))
    elif saved is not None:
        lines.append(
            _row(
                "Memory Saved",
                f"none: AMP adds ~{human(-saved)} here (low-precision weight copies "
                "outweigh the smaller activations at this batch)",
            )
        )
    lines += [
        _row("Optimizer", str(settings["optimizer"])),
        _row("Input", str(settings["input"])),
        _row("Grad Accum", str(settings["grad_accum"])),
        _row("Checkpointing", "on" if settings["checkpointing"] else "off"),
        _row("Pick Rounding", rounding_text(payload)),
        _row("Engine", f"{payload['engine']} ({payload['elapsed_seconds']:.1f} s)"),
    ]
    return lines


def _rank_engine(dist: Mapping[str, Any]) -> str:
    """How the per-rank lines were found: rank 0 traced (figures at its peak), or the formula (states shared)."""
    return "rank 0 traced, at its peak" if dist.get("engine") == "traced" else "by formula"


def _distributed_block(payload: Mapping[str, Any]) -> List[str]:
    dist = payload["distributed"]
    if not dist:
        return []
    lines = [
        f"🌐 Per Rank ({dist['strategy']}, world size {dist['world_size']}, {_rank_engine(dist)}):",
        _row("Parameters", human(dist["parameters_bytes"])),
        _row("Gradients", human(dist["gradients_bytes"])),
        _row("Optimizer State", human(dist["optimizer_bytes"])),
    ]
    if dist["extra_bytes"]:
        lines.append(_row("Extra", f"{human(dist['extra_bytes'])} ({dist['extra_note']})"))
    # a traced rank at its peak: activations with the step's temporaries (the optimizer's, at its step)
    activations = "Other at Peak" if dist.get("engine") == "traced" else "Activations"
    lines += [
        _row(activations, human(dist["activations_bytes"])),
        _row("Peak per Rank", f"{human(dist['peak_bytes'])} (a rank's Peak Footprint, not the sum above)"),
    ]
    return lines


def _advice_row(row: Mapping[str, Any], mark: str) -> str:
    peak = human(row["peak_bytes"]) + (" /GPU" if row["per_rank"] else "")
    maximum = f"{'seq' if row['maximum_of'] == 'sequence' else 'batch'} {_n(row['maximum'])}"
    return f"{mark} {row['lever']:<34} {peak:>15}  {maximum:<11} {row['status']:<13} {row['flags']}"


def advice_lines(advice: Mapping[str, Any]) -> List[str]:
    """What makes it fit (analysis.pipeline.advice): one line per row, cheapest first, the recommended one marked
    with *, then the recommendation and why, and each row's cost."""
    on = f" on {advice['target']}" if advice["target"] else ""
    lines = [
        f"What makes it fit{on} (each row traced as an analysis of its own; as analysed "
        f"{human(advice['peak_bytes'])}, {advice['status']}):"
    ]
    rows, chosen = advice["rows"], advice["recommended"]
    lines += [_advice_row(row, "*" if i == chosen else " ") for i, row in enumerate(rows)]
    if chosen is not None:
        lines.append(f"Recommended: {rows[chosen]['lever']}: {advice['reason']}")
        lines.append(f"  {rows[chosen]['command']}")
    elif advice["reason"]:
        lines.append(f"Recommended: none: {advice['reason']}")
    lines += ["Costs:"] + [f"  {row['lever']}: {row['cost']}" + _advice_note(row) for row in rows]
    return lines


def _advice_hint(payload: Mapping[str, Any]) -> List[str]:
    """Where the analysed batch will not fit and no advice was traced: how to ask for it (each lever is an analysis
    of its own, minutes for a large model on a few cores: unasked, the magic computes it only where that is quick)."""
    if payload["recommendations"]["current"]["status"] != "will-not-fit":
        return []
    return [
        "What would make it fit: %gpumem analyze … --advise (python -m gpumem_kernel analyze … --advise in a "
        "terminal), or gpumem_kernel.analysis.advise() from Python (each change traced as an analysis of its own)"
    ]


def _advice_note(row: Mapping[str, Any]) -> str:
    return f" ({row['note']})" if row["note"] else ""


def render_text(payload: Mapping[str, Any]) -> str:
    blocks = [
        _gpu_block(payload),
        _model_block(payload),
        _batch_block(payload),
        _usage_block(payload),
        _distributed_block(payload),
        recommendation_block(payload),
        advice_lines(payload["advice"]) if payload.get("advice") else _advice_hint(payload),
        sequence_block(payload),
        _evaluation_block(payload),
        llm_block(payload),
        _settings_block(payload),
    ]
    lines = [BANNER, title_of(payload), BANNER, ""]
    for block in blocks:
        if block:
            lines += block + [""]
    lines.append("Error bound: " + payload["error_bound"]["statement"])
    if payload["notes"]:
        lines += ["Notes:"] + [f"  - {note}" for note in payload["notes"]]
    lines += _yaml_block(payload)
    lines.append(BANNER)
    return "\n".join(lines)


def _yaml_block(payload: Mapping[str, Any]) -> List[str]:
    """The configuration "Copy as YAML" copies (absent from payloads written before it existed)."""
    text = payload.get("config_yaml")
    return ["", "📋 Configuration (YAML):"] + [f"  {line}" for line in text.splitlines()] if text else []


# --- what the user copies or inserts ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Config:
    batch_size: int
    accumulation_steps: int
    amp: Optional[str]
    checkpointing: bool
    recommended: bool  # the recommended pick; False: no recommendation, the analysed batch


def _micro_batch(payload: Mapping[str, Any], pick: Optional[int]) -> Optional[int]:
    """The micro-batch the accumulation steps refer to: a pick above an explicit target is capped to it."""
    acc = payload["recommendations"]["accumulation"]
    if not pick:
        return None
    return min(pick, acc["target_effective_batch"]) if acc["explicit_target"] else pick


def _config(payload: Mapping[str, Any]) -> _Config:
    """The configuration an analysis hands over: the recommended pick with its accumulation steps, or the
    analysed batch when there is no recommendation."""
    recs, settings = payload["recommendations"], payload["settings"]
    batch = _micro_batch(payload, recs["recommended"])
    steps = recs["accumulation"]["recommended"]
    if batch is not None and steps is not None and steps >= 1:
        return _Config(batch, steps, settings["amp"], settings["checkpointing"], True)
    return _Config(settings["batch_size"], settings["grad_accum"], settings["amp"], settings["checkpointing"], False)


def _where(payload: Mapping[str, Any]) -> str:
    device = payload["device"]
    return "no device limit" if device["source"] == "none" else f"{device['name'] or 'device'} ({device['source']})"


def analysis_yaml(payload: Mapping[str, Any]) -> str:
    """The analysed configuration in the training-config shape (data.batch_size, training.*), with comments
    saying where each number came from."""
    recs, config = payload["recommendations"], _config(payload)
    bound = round(payload["error_bound"]["relative"] * 100)
    header = [f"gpumem analysis of {payload['model']['name']}: {payload['engine']}, ±{bound}%, {_where(payload)}"]
    if recs["maximum"] is not None:
        header.append(
            f"maximum {recs['maximum']}, recommended {_n(recs['recommended'])}, safe {_n(recs['safe'])} "
            f"({rule(recs['rounding'])})" + (", maximum extrapolated" if recs["extrapolated"] else "")
        )
    else:
        header.append(f"no batch recommendation: {recs['note'] or 'no device limit'}")
    lr = recs["lr"]
    if lr["to_effective_batch"] is not None and lr["linear"] is not None and lr["linear"] != 1:
        header.append(
            f"learning rate: x{lr['linear']:.3g} (linear rule) or x{lr['sqrt'] or 1:.3g} (square-root rule), "
            "with warm-up"
        )
    if not config.recommended:
        batch_note = "as analysed (no recommendation)"
    elif recs["recommended"] is not None and config.batch_size < recs["recommended"]:
        batch_note = f"recommended {recs['recommended']}, capped at the target effective batch"
    else:
        batch_note = "recommended"
    effective = config.batch_size * config.accumulation_steps
    header.append(f"batch_size: {batch_note}; effective batch {effective}")
    seen = _step_autocast(payload["settings"])
    if seen:
        header.append(f"use_amp: seen in your step ({seen})")
    training: Dict[str, Any] = {
        "gradient_accumulation_steps": config.accumulation_steps,
        "use_amp": config.amp is not None,
    }
    if config.amp is not None:
        training["amp_dtype"] = AMP_DTYPES[config.amp]
    training["gradient_checkpointing"] = config.checkpointing
    return config_yaml(header, {"data": {"batch_size": config.batch_size}, "training": training})


def accumulation_code(payload: Mapping[str, Any]) -> Optional[str]:
    """The training loop with gradient accumulation at the recommended pick ("Insert code"), or None when the
    pick needs no accumulation. Only numbers from the payload reach the code."""
    config = _config(payload)
    if not config.recommended or config.accumulation_steps < 2:
        return None
    steps, batch = config.accumulation_steps, config.batch_size
    return accumulation_loop(
        steps,
        config.amp,
        LoopNames(),
        comments=[
            f"Gradient accumulation (gpumem): {steps} micro-batches of {batch} = effective batch {steps * batch}",
            "Assumes model, optimizer, criterion and train_dataset are defined; adjust the names to yours.",
        ],
        setup=[
            "from torch.utils.data import DataLoader",
            "",
            f"batch_size = {batch}",
            "train_loader = DataLoader(train_dataset, batch_size=batch_size, shuffle=True, drop_last=True)",
            "device = next(model.parameters()).device",
        ],
    )


# --- HTML --------------------------------------------------------------------------------------------------


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def html_table(caption: str, head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A table of the HTML fallback: every cell says its alignment (words left, numbers right), since the
    stylesheets of JupyterLab and nbconvert right-align `td` (render/fallback.py)."""
    return auto_table(caption, head, rows, "gpumem-analysis")


def pick_rows(payload: Mapping[str, Any]) -> List[Sequence[Any]]:
    """The "Batch sizes" table of the HTML and of `%gpumem recommend`: (pick, batch, note)."""
    recs, notes = payload["recommendations"], pick_notes(payload)
    return [
        ("maximum", _n(recs["maximum"]), notes["maximum"]),
        ("recommended", _n(recs["recommended"]), notes["recommended"]),
        ("safe", _n(recs["safe"]), notes["safe"]),
        ("current", recs["current"]["batch_size"], STATUS_TEXT[recs["current"]["status"]]),
        ("rounding", "", rounding_text(payload)),
    ]


# For a page whose stylesheet gives table cells no padding (marimo's; Jupyter's gives some): without it a figure's
# size runs into the next column and wraps inside its own cell ("8.64" over "KiB").
CELL_SPACING = (
    "<style>.gpumem-analysis th, .gpumem-analysis td { padding: 0.15em 0.75em 0.15em 0; }"
    " .gpumem-analysis td[style*='right'] { white-space: nowrap; }</style>"
)


def render_html(payload: Mapping[str, Any]) -> str:
    recs = payload["recommendations"]
    figures = [(key_label(f["name"]), human(f["bytes"]), f["engine"], f["note"]) for f in payload["figures"]]
    picks = [(key_label(pick, PICK_LABELS), batch, plain(str(note))) for pick, batch, note in pick_rows(payload)]
    curve = [
        (
            p["batch_size"],
            human(p["peak_bytes"]),
            human(p["peak_allocated_bytes"]),
            human(p["peak_reserved_bytes"]),
            p["engine"],
        )
        for p in payload["curve"]
    ]
    device = payload["device"]
    parts = [
        f"<p><b>{esc(plain(title_of(payload)))}</b> — engine <b>{esc(payload['engine'])}</b>; model "
        f"{esc(payload['model']['name'])} ({payload['model']['parameter_count']:,} parameters); usable "
        f"{esc(human(device['limit_bytes']))} of {esc(human(device['total_bytes']))} ({esc(device['source'])})</p>",
        html_table("Memory of one training step", ("figure", "size", "engine", "note"), figures),
        html_table("Batch sizes", ("pick", "batch", "note"), picks),
        html_table("Predicted peak against batch size", ("batch", "peak", "allocated", "reserved", "engine"), curve),
        *(html_table(*table) for table in llm_tables(payload)),
        *_advice_html(payload.get("advice")),
        f"<p>{esc(recs['lr']['hint'])}</p><p><i>{esc(payload['error_bound']['statement'])}</i></p>",
    ]
    if payload["notes"]:
        parts.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in payload["notes"]) + "</ul>")
    return "<div class='gpumem-analysis'>" + "".join(parts) + "</div>"


def _advice_html(advice: Optional[Mapping[str, Any]]) -> List[str]:
    """What makes it fit, as the page without the labextension shows it: the table, then the recommendation."""
    if not advice:
        return []
    rows = [
        (
            ("★ " if i == advice["recommended"] else "") + r["lever"],
            human(r["peak_bytes"]) + (" per GPU" if r["per_rank"] else ""),
            _n(r["maximum"]) + (" tokens" if r["maximum_of"] == "sequence" else ""),
            r["status"],
            r["cost"],
            r["flags"],
        )
        for i, r in enumerate(advice["rows"])
    ]
    head = ("lever", "peak", "maximum", "status", "cost", "flags")
    return [html_table("What makes it fit", head, rows), f"<p>{esc(advice['reason'] or '')}</p>"]


def analysis_bundle(report: Any) -> Dict[str, Any]:
    """{MIME: payload, text/html, text/plain} for IPython.display.display(..., raw=True)."""
    payload = report.to_payload() if hasattr(report, "to_payload") else dict(report)
    # text/plain is what a page without the labextension shows: no emoji its fonts may lack
    return {MIME: payload, "text/html": render_html(payload), "text/plain": plain(render_text(payload))}
