"""The benchmark's report from its payload: the console summary, the HTML table, a pick as training-config YAML,
and the MIME bundle the notebook displays."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

from gpumem_kernel.render.fallback import PICK_LABELS, Column, esc, html_table
from gpumem_kernel.render.snippets import config_yaml
from gpumem_kernel.render.units import format_bytes, format_joules, format_watts, unit_for

MIME = "application/vnd.gpumem.benchmark.v1+json"
BANNER = "=" * 80
STATUS = {"ok": "ok", "oom": "OOM", "swapping-suspected": "swap?"}
STATUS_WORDS = {"ok": "ok", "oom": "out of memory", "swapping-suspected": "swapping suspected"}


def _ms(value: Optional[float]) -> str:
    return "" if value is None else f"{value:.2f}"


def _mem_unit(payload: Mapping[str, Any]) -> str:
    """The memory column's one unit: GiB when some peak reaches 1 GiB, else MiB."""
    return unit_for(max((r["peak_bytes"] for r in payload["rows"] if r["peak_bytes"]), default=0), "auto")


def _measured_energy(payload: Mapping[str, Any]) -> bool:
    """Whether some row has energy per sample (a GPU run with NVML power); payloads from before lack it."""
    return any(r.get("energy_per_sample_j") is not None for r in payload["rows"])


def _energy(row: Mapping[str, Any]) -> str:
    value = row.get("energy_per_sample_j")
    return "" if value is None else format_joules(value)


def table_lines(payload: Mapping[str, Any]) -> List[str]:
    unit = _mem_unit(payload)
    sim = payload["engine"] == "simulated"
    energy = _measured_energy(payload)  # the J/sample column only where a GPU's energy was measured
    joules = f" {'J/sample':>10}" if energy else ""
    head = (
        f"{'Batch':>6} {'Workers':>7} {'AMP':>5} {'Pin':>5} {'I/O(ms)':>9} {'H2D(ms)':>9} {'Fwd(ms)':>9} "
        f"{'Bwd(ms)':>9} {'Opt(ms)':>9} {'Total(ms)':>10} {'Samples/s':>10} {'GPU%':>6} "
        f"{f'Mem({unit})':>9}{joules} {'Status':>10}"
    )
    lines = [head, "-" * len(head)]
    for r in payload["rows"]:
        status = STATUS.get(r["status"], r["status"]) + (" (sim)" if sim and r["status"] == "oom" else "")
        gpu = "" if r["gpu_util"] is None else f"{r['gpu_util']:.1f}"
        mem = "" if r["peak_bytes"] is None else format_bytes(r["peak_bytes"], unit, label=False)
        sps = "" if r["samples_per_s"] is None else f"{r['samples_per_s']:.1f}"
        joules = f" {_energy(r):>10}" if energy else ""
        lines.append(
            f"{r['batch_size']:>6} {r['num_workers']:>7} {'Yes' if r['amp'] else 'No':>5} "
            f"{'Yes' if r['pin_memory'] else 'No':>5} {_ms(r['io_ms']):>9} {_ms(r['h2d_ms']):>9} "
            f"{_ms(r['forward_ms']):>9} {_ms(r['backward_ms']):>9} {_ms(r['optimizer_ms']):>9} "
            f"{_ms(r['total_ms']):>10} {sps:>10} {gpu:>6} {mem:>9}{joules} {status:>10}"
        )
    return lines


def _kv(label: str, value: str) -> str:
    return f"  {label + ':':<20}{value}"


def _pick_lines(payload: Mapping[str, Any]) -> List[str]:
    picks = payload["picks"]
    mem_label = {"simulated": "Memory (simulated)", "cuda": "GPU Memory"}.get(payload["engine"], "Memory (tensors)")

    def block(title: str, pick: Optional[Mapping[str, Any]], extra: Sequence[str]) -> List[str]:
        if pick is None:
            return [title, "  none (no configuration qualified)", ""]
        lines = [
            title,
            _kv("Batch Size", str(pick["batch_size"])),
            _kv("Workers", str(pick["num_workers"])),
            _kv("Mixed Precision", "Yes" if pick["amp"] else "No"),
            _kv("Pin Memory", "Yes" if pick["pin_memory"] else "No"),
        ]
        return lines + [line for line in extra if line] + [""]

    def memory(pick: Mapping[str, Any], safe: bool = False) -> str:
        if pick["peak_bytes"] is None:
            return ""
        suffix = ""
        if safe and payload["limit_bytes"]:
            suffix = f" (safe: within {payload['memory_target']:.0%} of {format_bytes(payload['limit_bytes'], 'auto')})"
        return _kv(mem_label, format_bytes(pick["peak_bytes"], "auto") + suffix)

    hi, eff, rec = picks["highest_throughput"], picks["best_efficiency"], picks["recommended"]
    lines = [BANNER, "OPTIMAL CONFIGURATION", BANNER, ""]
    lines += block(
        "Highest Throughput:",
        hi,
        [_kv("Throughput", f"{hi['samples_per_s']:.1f} samples/sec"), memory(hi)] if hi else [],
    )
    lines += block(
        "Best Efficiency (samples/sec/GiB):",
        eff,
        [_kv("Efficiency", f"{eff['efficiency']:.1f} samples/sec/GiB")] if eff else [],
    )
    util = _kv("GPU Util", f"{rec['gpu_util']:.1f}%") if rec and rec["gpu_util"] is not None else ""
    lines += block(
        "Recommended for Training:",
        rec,
        [_kv("Throughput", f"{rec['samples_per_s']:.1f} samples/sec"), memory(rec, True), util] if rec else [],
    )
    green = picks.get("most_energy_efficient")  # absent from payloads written before energy was measured
    if green is not None:
        row = payload["rows"][green["row"]]
        power = f" (mean {format_watts(row.get('mean_power_w'))})" if row.get("mean_power_w") is not None else ""
        lines += block(
            "Most Energy-Efficient:",
            green,
            [
                _kv("Energy", f"{format_joules(green['energy_per_sample_j'])} per sample{power}"),
                _kv("Throughput", f"{green['samples_per_s']:.1f} samples/sec"),
            ],
        )
    return lines


def _title(payload: Mapping[str, Any]) -> str:
    device = payload["device"]
    if payload["engine"] == "simulated":
        return f"simulated: {format_bytes(payload['limit_bytes'], 'auto')} cap on tracked tensor bytes, CPU timings"
    if payload["engine"] == "cuda":
        return f"cuda:{device['index']} {device['name']} ({format_bytes(device['total_bytes'], 'auto')})"
    return "CPU (no GPU): memory is tracked tensor bytes"


def render_text(payload: Mapping[str, Any]) -> str:
    """The benchmark guide's console summary: the table, the three picks, then diagnostics and notes."""
    lines = [
        BANNER,
        "BENCHMARK SUMMARY",
        BANNER,
        f"{payload['model']['name']} · {payload['data']} · {payload['optimizer']} · {_title(payload)}",
    ]
    if payload["interrupted"]:
        lines.append("Interrupted: partial table")
    lines += [""] + table_lines(payload) + [""] + _pick_lines(payload)
    if payload["diagnostics"]:
        lines += ["Diagnostics:"] + [f"  - {d}" for d in payload["diagnostics"]] + [""]
    if payload["notes"]:
        lines += ["Notes:"] + [f"  - {n}" for n in payload["notes"]]
    if payload.get("config_yaml"):  # absent from payloads written before it existed
        lines += ["", "Recommended configuration (YAML):"]
        lines += [f"  {line}" for line in payload["config_yaml"].splitlines()]
    lines.append(BANNER)
    return "\n".join(lines)


def _pick_text(pick: Mapping[str, Any]) -> str:
    """A pick in words: "batch 256, 2 workers, AMP on, pinned memory off: 1234.5 samples/s"."""
    text = (
        f"batch {pick['batch_size']}, {pick['num_workers']} workers, AMP {'on' if pick['amp'] else 'off'}, "
        f"pinned memory {'on' if pick['pin_memory'] else 'off'}: {pick['samples_per_s']:.1f} samples/s"
    )
    if pick.get("energy_per_sample_j") is not None:
        text += f", {format_joules(pick['energy_per_sample_j'])} per sample"
    return text


def render_html(payload: Mapping[str, Any]) -> str:
    """The summary as the rich view's table reads: its column names, words left and numbers right."""
    unit = _mem_unit(payload)
    energy = _measured_energy(payload)
    columns = [
        Column("Batch", True),
        Column("Workers", True),
        Column("AMP"),
        Column("Pin memory"),
        Column("I/O wait ms", True),
        Column("H2D ms", True),
        Column("Forward ms", True),
        Column("Backward ms", True),
        Column("Optimizer ms", True),
        Column("Step ms", True),
        Column("Samples/s", True),
        Column("GPU util %", True),
        Column(f"Peak memory ({unit})", True),
        *([Column("J/sample", True)] if energy else []),
        Column("Status"),
    ]
    rows = [
        [
            r["batch_size"],
            r["num_workers"],
            "yes" if r["amp"] else "no",
            "yes" if r["pin_memory"] else "no",
            _ms(r["io_ms"]),
            _ms(r["h2d_ms"]),
            _ms(r["forward_ms"]),
            _ms(r["backward_ms"]),
            _ms(r["optimizer_ms"]),
            _ms(r["total_ms"]),
            "" if r["samples_per_s"] is None else f"{r['samples_per_s']:.1f}",
            "" if r["gpu_util"] is None else f"{r['gpu_util']:.1f}",
            "" if r["peak_bytes"] is None else format_bytes(r["peak_bytes"], unit, label=False),
            *([_energy(r)] if energy else []),
            STATUS_WORDS.get(r["status"], r["status"]),
        ]
        for r in payload["rows"]
    ]
    picks = []
    for kind in ("highest_throughput", "best_efficiency", "recommended", "most_energy_efficient"):
        p = payload["picks"].get(kind)
        if p is None and kind == "most_energy_efficient":
            continue  # energy not measured: the notes say why
        picks.append(f"<li>{esc(PICK_LABELS[kind])}: {esc('none' if p is None else _pick_text(p))}</li>")
    diagnostics = "".join(f"<li>{esc(d)}</li>" for d in payload["diagnostics"])
    notes = "".join(f"<li>{esc(n)}</li>" for n in payload["notes"])
    flag = "<p><b>Interrupted: partial table</b></p>" if payload["interrupted"] else ""
    return (
        f"<div class='gpumem-benchmark'><p><b>Benchmark — {esc(payload['model']['name'])}</b> · "
        f"{esc(payload['data'])} · {esc(_title(payload))}</p>{flag}"
        + html_table("Summary (times per step, after warm-up)", columns, rows)
        + f"<ul>{''.join(picks)}</ul>"
        f"{'<p>Diagnostics</p><ul>' + diagnostics + '</ul>' if diagnostics else ''}"
        f"{'<ul>' + notes + '</ul>' if notes else ''}</div>"
    )


def pick_yaml(payload: Mapping[str, Any], pick: str = "recommended") -> Optional[str]:
    """A pick in the training-config shape (data.batch_size, num_workers, pin_memory; training.use_amp and the
    AMP dtype), with comments saying where it came from; None when there is no such pick."""
    chosen = payload["picks"].get(pick)
    if chosen is None:
        return None
    header = [
        f"gpumem benchmark of {payload['model']['name']}, {pick.replace('_', ' ')}: {_title(payload)}",
        f"{chosen['samples_per_s']:.1f} samples/s"
        + (f", peak {format_bytes(chosen['peak_bytes'], 'auto')}" if chosen["peak_bytes"] is not None else "")
        + (" (interrupted sweep)" if payload["interrupted"] else ""),
    ]
    data = {
        "batch_size": chosen["batch_size"],
        "num_workers": chosen["num_workers"],
        "pin_memory": chosen["pin_memory"],
    }
    training: Dict[str, Any] = {"use_amp": chosen["amp"]}
    if chosen["amp"]:
        training["amp_dtype"] = payload["amp_dtype"]
    return config_yaml(header, {"data": data, "training": training})


def recommended_yaml(payload: Mapping[str, Any], pick: str = "recommended") -> str:
    """`pick_yaml`, or a comment saying there is no such pick (what --save-yaml and --format yaml write)."""
    text = pick_yaml(payload, pick)
    if text is None:
        return f"# gpumem benchmark: no {pick.replace('_', ' ')} configuration (nothing ran within the limits)\n"
    return text


def benchmark_bundle(result: Any) -> Dict[str, Any]:
    """{MIME: payload, text/html, text/plain} for IPython.display.display(..., raw=True)."""
    payload = result.to_payload() if hasattr(result, "to_payload") else dict(result)
    return {MIME: payload, "text/html": render_html(payload), "text/plain": render_text(payload)}
