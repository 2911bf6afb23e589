"""The summary table of a GPU suite run, from its result files: printed by the runner, rendered by
benchmarks/make_readme.py. Plain Python (no torch): it only reads JSON.

A row's status is `met` / `not met` against issue 10's target, `ok` / `NOT OK` for a yes-or-no promise,
`measured` where the issue sets no target, `dry run` for CPU stand-ins (never a GPU figure), or
`not measured` / `failed` with the reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

Row = Tuple[str, str, str, str]  # check, figure, target, status
FILES = (
    "gpu_estimator",
    "gpu_kernel",
    "gpu_sampler",
    "gpu_distributed",
    "gpu_llm",
    "gpu_residue",
    "gpu_advice",
    "gpu_autobatch",
    "gpu_timeline",
)
HEADER = ("check", "figure", "target", "status")


def load(folder: Path) -> Dict[str, Dict[str, Any]]:
    found = {}
    for name in FILES:
        path = folder / f"{name}.json"
        if path.exists():
            found[name] = json.loads(path.read_text())
    return found


def pct(value: Optional[float]) -> str:
    return "—" if value is None else f"{value:+.2%}"


def mib(value: Optional[float]) -> str:
    return "—" if value is None else f"{value / 2**20:,.0f} MiB"


def _status(data: Dict[str, Any], met: Optional[bool], yes: str = "met", no: str = "not met") -> str:
    if data.get("dry_run"):
        return "dry run"
    if met is None:
        return "measured"
    return yes if met else no


def _errors(summary: Dict[str, Any]) -> str:
    if not summary.get("n"):
        return "no configuration measured"
    return (
        f"median |err| {summary['median_abs']:.2%}, max |err| {summary['max_abs']:.2%} "
        f"(signed {pct(summary['min'])} … {pct(summary['max'])}), n={summary['n']}"
    )


def estimator_rows(d: Dict[str, Any]) -> List[Row]:
    s, met = d["summary"], d.get("targets_met") or {}
    engine = d.get("measured_engine_summary") or {}
    both = None if not met else met.get("allocated_median") and met.get("allocated_max")
    skipped = f"; skipped: {', '.join(d['skipped'])}" if d.get("skipped") else ""
    return [
        (
            "traced vs max_memory_allocated",
            _errors(s["allocated"]) + skipped,
            "≤ 3 % median, ≤ 5 % max",
            _status(d, both),
        ),
        (
            "traced vs max_memory_reserved",
            _errors(s["reserved"]),
            "≤ 10 % max",
            _status(d, met.get("reserved_max") if met else None),
        ),
        ("traced footprint vs NVML per process", _errors(s["process"]), "—", _status(d, None)),
        (
            "traced vs max_memory_reserved, expandable segments",
            _errors((d.get("expandable_summary") or {}).get("reserved", {})),
            "—",
            _status(d, None),
        ),
        ("measured engine vs max_memory_allocated", _errors(engine.get("allocated", {})), "—", _status(d, None)),
        ("measured engine vs max_memory_reserved", _errors(engine.get("reserved", {})), "—", _status(d, None)),
    ]


def _tool(entry: Dict[str, Any]) -> str:
    if entry.get("status") != "ok":
        return f"{entry.get('status')}: {entry.get('reason')}"
    survival = entry.get("survival") or {}
    fate = "no pick" if not survival else ("OOM" if survival.get("oom") else "survived")
    return f"pick {entry['pick']} in {entry['trials']} trials, {entry['seconds']:.1f} s, {fate}"


def autobatch_rows(d: Dict[str, Any]) -> List[Row]:
    checks = {c["arch"]: c for c in (d.get("targets") or {}).get("checks", [])}
    rows: List[Row] = []
    for row in d.get("rows", []):
        if row.get("status") != "ok":
            rows.append((f"autobatch {row['arch']}", f"{row.get('status')}: {row.get('reason')}", "", "not measured"))
            continue
        figure = "; ".join(f"{name.split()[0]}: {_tool(t)}" for name, t in row["tools"].items())
        check = checks.get(row["arch"])
        met = None if check is None else check["ours_survived"] and check["no_more_trials"]
        rows.append((f"autobatch {row['arch']}", figure, "ours survives, ≤ Lightning's trials", _status(d, met)))
    for arch, why in (d.get("skipped") or {}).items():
        rows.append((f"autobatch {arch}", f"skipped: {why}", "", "not measured"))
    return rows


def _ok(d: Dict[str, Any], entry: Dict[str, Any]) -> str:
    if entry.get("failed"):
        return "failed"
    return _status(d, bool(entry.get("ok")), "ok", "NOT OK")


def kernel_rows(d: Dict[str, Any]) -> List[Row]:
    c, cl, r = d.get("no_implicit_context", {}), d.get("clear", {}), d.get("restart_and_free", {})
    key = cl.get("figure_checked", "nvml_process")

    def freed(part: str) -> str:
        got = (cl.get(part) or {}).get("reclaimed", {})
        return f"{mib(got.get(key))} of {mib(cl.get('tensor_bytes'))} ({key})"

    return [
        (
            "no implicit CUDA context",
            c.get("failed")
            or f"is_initialized {c.get('torch_cuda_is_initialized')}, NVML lists kernel: {c.get('nvml_listed_pids')}, "
            f"{c.get('samples')} samples in {c.get('sampled_seconds')} s, status shown {c.get('status_shown')}",
            "no context",
            _ok(d, c),
        ),
        (
            "clear: traceback-pinned tensor",
            cl.get("failed") or freed("traceback"),
            "returned to the driver",
            _ok(d, cl),
        ),
        ("clear: Out-pinned tensor", cl.get("failed") or freed("out"), "returned to the driver", _ok(d, cl)),
        (
            "restart and free",
            r.get("failed")
            or f"old PID left NVML after {r.get('nvml_released_s')} s; restart {r.get('restart_returned_s')} s; "
            f"panel lists old PID: {r.get('panel_lists_old_pid')}",
            "old PID leaves NVML",
            _ok(d, r),
        ),
    ]


def sampler_rows(d: Dict[str, Any]) -> List[Row]:
    ab, local, probe = d["ab"], d["attributed_1hz"], d["probe"]
    return [
        (
            "sampler overhead at 1 Hz",
            f"A/B {pct(ab['1 Hz']['overhead_median'])} (10 Hz "
            f"{pct(ab['10 Hz']['overhead_median'])}); attributed {local['overhead']:+.3%}",
            "< 0.5 %",
            _status(d, (d.get("target") or {}).get("met")),
        ),
        (
            "probe cost per call",
            f"{probe['probe']['median_ms']:.3f} ms; with JSON "
            f"{probe['probe + to_dict + json']['median_ms']:.3f} ms; GPU seen: {probe['gpu_available']}",
            "—",
            _status(d, None),
        ),
    ]


def distributed_rows(d: Dict[str, Any]) -> List[Row]:
    rows: List[Row] = []
    for r in d.get("rows", []):
        if r.get("status") != "ok":
            figure = f"failed: {r.get('reason')}"
        elif r.get("error"):
            figure = f"allocated {pct(r['error']['allocated'])}, reserved {pct(r['error']['reserved'])}"
        else:
            figure = str(r.get("truth"))
        rows.append((f"per-rank {r['strategy'].upper()} ws=1, {r['arch']}", figure, "—", _status(d, None)))
    return rows


def _gb(value: Optional[float]) -> str:
    return "—" if value is None else f"{value / 1e9:.2f} GB"


def llm_rows(d: Dict[str, Any]) -> List[Row]:
    rows: List[Row] = []
    target = f"≤ {d['target']['allocated_max_abs']:.0%}"
    for r in d.get("rows", []):
        truth, predicted = r["truth"], r["predicted"]
        if truth.get("status") == "ok" and predicted.get("status") == "ok":
            figure = (
                f"max_memory_allocated {_gb(truth['allocated'])}, traced {_gb(predicted['allocated'])} "
                f"({pct(r['error'])}); published {r['published_gb']:.2f} GB on an A100, torch 2.1"
            )
        else:
            failed = truth if truth.get("status") != "ok" else predicted
            figure = f"traced {_gb(predicted.get('allocated'))}; truth {failed.get('status')}: {failed.get('reason')}"
        rows.append((f"LitGPT LoRA {r['name']}", figure, target, _status(d, r.get("met"))))
    sample = d.get("llama_per_sample")
    if sample:
        rows.append(
            (
                "Llama-2-7B memory per sample",
                f"this GPU {_gb(sample['truth'])}, traced {_gb(sample['predicted'])} ({pct(sample['error'])}); "
                f"published {_gb(sample['published_a100_torch21'])}",
                "—",
                _status(d, None),
            )
        )
    saved = (d.get("saved_tensors") or {}).get("cuda_minus_cpu")
    # "reviewed": a part of a committed run found defective after it ran, with why; its figure is not shown
    review = (d.get("reviewed") or {}).get("saved_tensors")
    if saved and review:
        rows.append(("Llama-2-7B saved tensors, CUDA − CPU", f"not evidence: {review}", "—", "failed"))
    elif saved:
        top = ", ".join(f"{name} {value / 2**20:+,.1f} MiB" for name, value in list(saved["by_node"].items())[:3])
        rows.append(
            (
                "Llama-2-7B saved tensors, CUDA − CPU",
                f"{saved['per_layer'] / 2**20:+,.1f} MiB per layer; {top or 'no node differs'}",
                "—",
                _status(d, None),
            )
        )
    return rows


def residue_rows(d: Dict[str, Any]) -> List[Row]:
    rows: List[Row] = []
    for r in d.get("rows", []):
        got = r["result"]
        if got.get("sites"):
            top = "; ".join(f"{s['site'][:60]} {mib(s['bytes'])}" for s in got["sites"][:2])
            figure = f"window peak {mib(got['peak_in_window'])} in {got['blocks_at_peak']} blocks; {top}"
        else:
            figure = f"{got.get('status')}: {got.get('reason') or 'no block at the peak'}"
        status = "failed" if got.get("status") == "failed" else _status(d, None)
        rows.append((f"residue {r['case']}", figure, "—", status))
    return rows


def advice_rows(d: Dict[str, Any]) -> List[Row]:
    if d.get("status") != "ok":
        return [("fit advice", f"failed: {d.get('reason')}", "", "failed")]
    target = f"≤ {d['target']['allocated_max_abs']:.0%}"
    rows: List[Row] = []
    for r in d.get("rows", []):
        got = r["truth"]
        if got.get("status") == "ok":
            figure = f"traced {mib(r['peak_allocated_bytes'])}, real step {mib(got['allocated'])} ({pct(r['error'])})"
        else:
            figure = f"traced {mib(r['peak_allocated_bytes'])}; {got.get('status')}: {got.get('reason')}"
        rows.append((f"advice {d['arch']}: {r['lever']}", figure, target, _status(d, r.get("met"))))
    return rows


def timeline_rows(d: Dict[str, Any]) -> List[Row]:
    rows: List[Row] = []
    for r in d.get("rows", []):
        rec = r.get("recorded") or {}
        if rec.get("status") == "ok":
            figure = (
                f"recorded peak {mib(rec['peak'])} vs max_memory_allocated {mib(rec['max_memory_allocated'])} "
                f"({pct(rec['vs_truth'])}); predicted {mib(r['predicted']['peak'])} ({pct(rec['vs_predicted'])})"
            )
            met: Optional[bool] = rec.get("ok")
        else:
            figure, met = f"{rec.get('status') or r.get('status')}: {rec.get('reason') or r.get('reason')}", None
        rows.append(
            (
                f"recorded timeline, {r['arch']}",
                figure,
                f"≤ max_memory_allocated, ≥ -{d.get('peak_slack', 0.1):.0%}",
                _status(d, met, "ok", "NOT OK"),
            )
        )
    oom = d.get("oom_capture") or {}
    alive = oom.get("alive") or {}
    oom_figure = (
        f"{oom.get('status')}: alive {mib(alive.get('allocated'))} in {alive.get('blocks')} blocks "
        f"(memory_allocated {mib(oom.get('allocated_at_error'))}), observer {oom.get('observer')}"
        if alive
        else f"{oom.get('status')}: {oom.get('reason') or 'nothing captured'}"
    )
    rows.append(
        (
            "OOM capture of a provoked OOM",
            oom_figure,
            "alive = memory_allocated",
            _status(d, oom.get("ok"), "ok", "NOT OK"),
        )
    )
    cost = d.get("recording_cost") or {}
    per_event = cost.get("us_per_event_median")
    cost_figure = (
        f"{pct(cost.get('overhead_median'))} per step; "
        + (
            f"{per_event:.2f} µs per event, {cost.get('events_per_step'):.0f} events per step"
            if per_event
            else "no events"
        )
        if cost.get("recorded")
        else "not recorded (no CUDA): the A/B harness ran with the recording off in both arms"
        if "overhead_median" in cost
        else f"failed: {cost.get('reason')}"
    )
    cost_status = "failed" if cost.get("status") == "failed" else _status(d, None)
    rows.append(("recording cost (allocator history)", cost_figure, "≈ 2 µs per event (PyTorch's docs)", cost_status))
    return rows


RENDERERS = {
    "gpu_estimator": estimator_rows,
    "gpu_autobatch": autobatch_rows,
    "gpu_kernel": kernel_rows,
    "gpu_sampler": sampler_rows,
    "gpu_distributed": distributed_rows,
    "gpu_llm": llm_rows,
    "gpu_residue": residue_rows,
    "gpu_advice": advice_rows,
    "gpu_timeline": timeline_rows,
}


def rows(results: Dict[str, Dict[str, Any]]) -> List[Row]:
    out: List[Row] = []
    for name in FILES:
        data = results.get(name)
        if data is None:
            out.append((name.replace("gpu_", ""), "no result file", "", "not measured"))
            continue
        try:
            out += RENDERERS[name](data)
        except (KeyError, TypeError) as exc:  # a section that wrote a partial result: say so, keep the rest
            out.append((name.replace("gpu_", ""), f"unreadable result: {type(exc).__name__} {exc}", "", "failed"))
    return out


def text_table(table: Sequence[Row], width: int = 118) -> str:
    """Aligned plain text: check and status columns fixed, the figure wrapped to fit."""
    import textwrap

    lines = [f"{'check':<40} {'status':<12} figure (target)", "-" * width]
    for check, figure, target, status in table:
        text = figure + (f" (target {target})" if target and target != "—" else "")
        wrapped = textwrap.wrap(text, width - 54) or [""]
        lines.append(f"{check[:40]:<40} {status:<12} {wrapped[0]}")
        lines += [" " * 54 + more for more in wrapped[1:]]
    return "\n".join(lines)


def markdown(table: Sequence[Row]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| " + " | ".join(HEADER) + " |", "|---|---|---|---|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in table]
    return "\n".join(lines)
