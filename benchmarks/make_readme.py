"""Regenerate benchmarks/README.md from benchmarks/results/*.json (one section per row of issue 6).

    PYTHONPATH=. .venv/bin/python benchmarks/make_readme.py

A row whose result file is missing reads "not measured"; nothing here measures anything.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
README = HERE / "README.md"
RUN = "PYTHONPATH=. .venv/bin/python"
NOT_MEASURED = "not measured"
GPU_NOT_MEASURED = "not measured (no GPU run yet)"

sys.path.insert(0, str(HERE.parent))  # the repository root: the GPU suite's summary renders its rows
from benchmarks.gpu import summary as gpu_summary  # noqa: E402
from benchmarks.published import readme as published_readme  # noqa: E402
from benchmarks.zoo import readme as zoo_readme  # noqa: E402
from gpumem_kernel.render.units import human  # noqa: E402
from replicate_speed import section as replicate_section  # noqa: E402


def load(name: str) -> Optional[Dict[str, Any]]:
    path = RESULTS / f"{name}.json"
    if not path.exists():
        return None
    return json.loads(path.read_text())


# --- formatting -------------------------------------------------------------------------------------------


def pct(value: Optional[float], digits: int = 2, sign: bool = True) -> str:
    if value is None:
        return NOT_MEASURED
    return f"{value:+.{digits}%}" if sign else f"{value:.{digits}%}"


def mib(value: Optional[int]) -> str:
    return NOT_MEASURED if value is None else f"{value / 2**20:,.2f} MiB"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def command(result: Dict[str, Any]) -> str:
    """The recorded command line, as one runs it from the repository root."""
    raw = str(result.get("command", ""))
    if raw.startswith("cd ") or raw.startswith("PYTHONPATH="):  # recorded as run (Galata; another venv)
        return f"`{raw}`"
    parts = raw.split(" ", 1)
    return f"`{RUN} {parts[1]}`" if len(parts) == 2 else f"`{RUN} {parts[0]}`"


def provenance(result: Dict[str, Any]) -> str:
    m = result.get("machine", {})
    gpu = m.get("gpu") or "no GPU"
    versions = "; ".join(f"{k} {m[k]}" for k in ("python", "torch", "ipykernel", "browser") if m.get(k))
    return (
        f"Measured {result.get('date', '?')} on {m.get('platform', '?')}, {m.get('cpu_count', '?')} CPUs, "
        f"{gpu}; {versions}. "
        f"Reproduce: {command(result)}"
    )


def scalar(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        return f"`{json.dumps(value)[:120]}`"
    return str(value)


def generic(result: Dict[str, Any]) -> str:
    """A result file whose layout this script does not know: its scalars, and the first list of rows."""
    skip = {"name", "date", "command", "machine"}
    out = [
        table(
            ["field", "value"], [(k, scalar(v)) for k, v in result.items() if k not in skip and not isinstance(v, list)]
        )
    ]
    for key, value in result.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            columns: List[str] = []
            for row in value:
                columns += [c for c in row if c not in columns and not isinstance(row[c], (dict, list))]
            out.append(f"\n{key}:\n\n" + table(columns, [[scalar(r.get(c, "")) for c in columns] for r in value]))
            break
    return "\n".join(out)


# --- the rows ---------------------------------------------------------------------------------------------


def row_sampler(r: Optional[Dict[str, Any]]) -> str:
    head = "## 1. Sampler overhead\n\n"
    if r is None:
        return head + f"{NOT_MEASURED}: run `{RUN} benchmarks/sampler_overhead.py`.\n"
    s, a, p = r["settings"], r.get("attributed", {}), r["probe"]
    figure = (
        f"**Figure:** overhead at 1 Hz {pct(a.get('1 Hz', {}).get('overhead'), 3)} (attributed), "
        f"{pct(s['1 Hz']['overhead_mean'])} (A/B); at 10 Hz {pct(a.get('10 Hz', {}).get('overhead'), 3)} "
        f"(attributed), {pct(s['10 Hz']['overhead_mean'])} (A/B). Target < 0.5 % at 1 Hz: "
        f"{'met' if r['target']['met'] else 'not met'} (attributed measure); probe "
        f"{p['probe']['median_ms']:.3f} ms/call."
    )
    rows = []
    for name, e in s.items():
        at = a.get(name, {})
        spread = e.get("overhead_spread")
        rows.append(
            (
                name,
                f"{e['median_step_ms']:.3f}",
                f"{e['mean_step_ms']:.3f}",
                "—" if name == "none" else f"{pct(e['overhead_mean'])} [{pct(spread[0], 1)} … {pct(spread[1], 1)}]",
                "—" if name == "none" else pct(e["overhead_median_step"]),
                "—"
                if not at
                else (
                    f"{pct(at['overhead'], 3)} ± {pct(at.get('overhead_standard_error'), 3, sign=False)}"
                    f" ({at['samples']} samples)"
                ),
                "—" if not at else f"{at['sample_busy_ms_median']:.3f}",
            )
        )
    body = table(
        [
            "sampler",
            "median step (ms)",
            "mean step (ms)",
            f"A/B overhead, mean step (median of {r['rounds']} rounds) [min … max]",
            "A/B overhead, median step",
            "attributed overhead ± standard error",
            "sampler thread busy per sample, GIL waits included (ms)",
        ],
        rows,
    )
    probe_rows = [
        (k, f"{v['median_ms']:.3f}", f"{v['min_ms']:.3f}", f"{v['repeats']} × {v['number']}")
        for k, v in p.items()
        if isinstance(v, dict)
    ]
    gpu_note = r.get("gpu", "")
    return (
        head + figure + "\n\n" + f"Loop: {r['loop']['model']}, torch threads = {r['loop']['torch_threads']}; "
        f"listener JSON-encodes each sample. A/B: {r['rounds']} interleaved rounds of {r['window_s']} s per "
        "setting; attributed: excess time of the steps that overlap a sample over their neighbours' median, "
        "minus the same over placebo windows half an interval later (see the script's docstring). On a "
        "machine shared with other work the A/B round-to-round spread is far wider than the target, so "
        "the attributed figure is the one that resolves it.\n\n" + body + "\n\nProbe cost per call "
        f"(timeit; GPU available: {p['gpu_available']}{', ' + p['gpu_reason'] if p.get('gpu_reason') else ''}):"
        "\n\n"
        + table(["call", "median (ms)", "min (ms)", "repeats × number"], probe_rows)
        + f"\n\nGPU: {gpu_note}.\n\n{provenance(r)}\n"
    )


def row_delivery(r: Optional[Dict[str, Any]]) -> str:
    head = "## 2. Live delivery\n\n"
    if r is None:
        return head + f"{NOT_MEASURED}: run `{RUN} benchmarks/live_delivery.py`.\n"
    measured = [e for e in r["entries"] if e.get("share") is not None]
    worst = min((e["share"] for e in measured), default=None)
    figure = (
        f"**Figure:** lowest delivered share {pct(worst, 1, sign=False)} at {r['interval_s']:g} s "
        f"interval over {r['seconds']:g} s cells (target ≥ 95 %: "
        f"{'met' if r['target']['met'] else 'not met'})."
    )
    rows = []
    for e in r["entries"]:
        kernel = f"ipykernel {e.get('ipykernel') or '?'} (Python {e.get('python') or '?'})"
        if e.get("share") is None:
            rows.append(
                (kernel, e.get("loop", "—"), "—", "—", f"{NOT_MEASURED}: {e.get('not_measured', '')}", "—", "—")
            )
            continue
        rows.append(
            (
                kernel,
                e["loop"],
                f"{e['cell_seconds']:.1f}",
                f"{e['delivered']}/{e['expected']}",
                pct(e["share"], 1, sign=False),
                f"{e['max_gap_s']:.2f}",
                f"{e['steps']:,}",
            )
        )
    loops = {e["loop"]: e["description"] for e in r["entries"] if "description" in e}
    return (
        head + figure + "\n\nA real kernel driven like JupyterLab (bootstrap, `gpumem` comm at "
        f"{r['interval_s']:g} s); samples counted between the cell's execute_input and its idle status, "
        "against duration / interval rounded down. Loops: "
        + "; ".join(f"**{k}**: {v}" for k, v in loops.items())
        + ".\n\n"
        + table(
            ["kernel", "loop", "cell (s)", "delivered / expected", "share", "largest gap (s)", "loop iterations"], rows
        )
        + f"\n\n{provenance(r)}\n"
    )


def row_estimator(r: Optional[Dict[str, Any]]) -> str:
    head = "## 3. Estimator accuracy\n\n"
    if r is None:
        return head + f"{NOT_MEASURED}: run `{RUN} benchmarks/estimator_accuracy.py`.\n"
    cpu, reserved = r["cpu"], r["cpu_reserved_model"]
    gpu = r["gpu"]
    if isinstance(gpu, dict):
        alloc, reserv = gpu["vs_max_memory_allocated"], gpu["vs_max_memory_reserved"]
        gpu_text = (
            f"vs max_memory_allocated median |error| {pct(alloc['median_abs_error'], sign=False)}, "
            f"max {pct(alloc['max_abs_error'], sign=False)}; vs max_memory_reserved "
            f"median {pct(reserv['median_abs_error'], sign=False)}, max "
            f"{pct(reserv['max_abs_error'], sign=False)}"
        )
    else:
        gpu_text = str(gpu)
    figure = (
        f"**Figure:** CPU, traced vs tracked live bytes: median |error| "
        f"{pct(cpu['median_abs_error'], sign=False)}, "
        f"max {pct(cpu['max_abs_error'], sign=False)} over {cpu['n']} configurations. GPU: {gpu_text}."
    )
    configs = [(p, o) for p in ("fp32", "bf16") for o in ("Adam", "SGD(momentum)")]
    rows = []
    for model, summary in r["per_model"].items():
        mine = {(x["precision"], x["optimizer"]): x for x in r["rows"] if x["model"] == model}
        first = next((x for x in mine.values() if "parameters" in x), {})
        cells = []
        for key in configs:
            x = mine.get(key)
            if x is None:
                cells.append(NOT_MEASURED)
            else:
                cells.append(f"failed: {x['failed']}" if "failed" in x else pct(x["error"]))
        rows.append(
            (
                model,
                f"{first.get('parameters', 0):,}",
                first.get("batch", "—"),
                mib(first.get("measured_peak")),
                *cells,
                pct(summary["median_abs_error"], sign=False),
                pct(summary["max_abs_error"], sign=False),
            )
        )
    rows.append(
        (
            "**all**",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            f"**{pct(cpu['median_abs_error'], sign=False)}**",
            f"**{pct(cpu['max_abs_error'], sign=False)}**",
        )
    )
    gpu_rows = [x for x in r["rows"] if "error_vs_max_memory_allocated" in x]
    if gpu_rows:
        gpu_table = table(
            [
                "model",
                "precision",
                "optimizer",
                "max_memory_allocated",
                "predicted",
                "error",
                "max_memory_reserved",
                "predicted",
                "error",
            ],
            [
                (
                    x["model"],
                    x["precision"],
                    x["optimizer"],
                    mib(x["gpu_allocated"]),
                    mib(x["predicted_allocated"]),
                    pct(x["error_vs_max_memory_allocated"]),
                    mib(x["gpu_reserved"]),
                    mib(x["predicted_reserved"]),
                    pct(x["error_vs_max_memory_reserved"]),
                )
                for x in gpu_rows
            ],
        )
    else:
        gpu_table = (
            f"GPU columns (traced `peak_allocated` / `peak_reserved` vs `torch.cuda.max_memory_allocated` / "
            f"`max_memory_reserved`, fp32 and bf16 AMP, Adam and SGD): {gpu}."
        )
    failed = r.get("failed") or []
    return (
        head + figure + "\n\nPrediction: `analysis_trace.run_trace(fake=True)` (fake tensors, no memory). "
        "CPU reference: the same storage tracker over a real CPU training step (`fake=False`), i.e. the peak of "
        "live tensor bytes of the second step; error = (predicted − measured) / measured. This checks that the "
        "fake-tensor trace reproduces the real step's allocations and lifetimes; how well those bytes map to "
        "CUDA's allocator is the GPU column. Models are defined in the script (plain torch).\n\n"
        + table(
            [
                "model",
                "parameters",
                "batch",
                "measured peak (fp32 Adam)",
                "fp32 Adam",
                "fp32 SGD(m)",
                "bf16 Adam",
                "bf16 SGD(m)",
                "median \\|error\\|",
                "max \\|error\\|",
            ],
            rows,
        )
        + f"\n\nCaching-allocator-model replay (predicted `reserved`) of the fake trace vs of "
        f"the real trace: median |error| {pct(reserved['median_abs_error'], sign=False)}, max "
        f"{pct(reserved['max_abs_error'], sign=False)}.\n\n"
        + gpu_table
        + ("\n\nFailed configurations: " + "; ".join(failed) if failed else "")
        + f"\n\n{provenance(r)}\n"
    )


def estimator_cases(r: Optional[Dict[str, Any]]) -> str:
    """The named cases of issue 9 §5 (the estimator's former blind spots), against an independent tracker."""
    head = "### Named cases: the former blind spots (issue 9 §5)\n\n"
    if r is None:
        return head + f"{NOT_MEASURED}: run `{RUN} benchmarks/estimator_accuracy.py --cases all`.\n"
    rows = []
    for x in r["rows"]:
        if "error" not in x:
            reason = x.get("failed", x.get("skipped", ""))
            rows.append(
                (x["case"], x["what"], "—", "—", "—", "—", f"{'failed' if 'failed' in x else NOT_MEASURED}: {reason}")
            )
            continue
        rows.append(
            (
                x["case"],
                x["what"],
                f"{x['parameters']:,}",
                x["batch"],
                mib(x["measured_peak"]),
                mib(x["predicted_peak"]),
                pct(x["error"]),
            )
        )
    cpu = r["cpu"]
    transformers = r.get("transformers")
    return (
        head + "Truth here is not the storage tracker: each case runs the user's own loop on a deep copy of "
        "the model (their module modes, every block checkpointed by hand or by Hugging Face's "
        "`gradient_checkpointing_enable()`, the loss the model returns) under `torch.profiler` with "
        "`profile_memory=True`, and takes the peak of live CPU-allocator bytes in the second step (Adam, fp32). "
        "The prediction is `run_trace(fake=True)` with the options a user passes (`checkpointing=True`, the "
        f"default loss). Median |error| {pct(cpu['median_abs_error'], sign=False)}, max "
        f"{pct(cpu['max_abs_error'], sign=False)} over {cpu['n']} cases"
        + (f"; Hugging Face models from a config, transformers {transformers}" if transformers else "")
        + ".\n\n"
        + table(
            ["case", "what it checks", "parameters", "batch", "measured peak (allocator)", "predicted", "error"], rows
        )
        + f"\n\n{provenance(r)}\n"
    )


def autocast_parity(r: Optional[Dict[str, Any]], real: bool = False) -> str:
    """Row 3c: the trace's ops against CUDA's, per GPU-suite architecture: its dispatch on fake CUDA tensors (no
    GPU), or (real) the GPU's own training step."""
    if real:
        head = "### CUDA dispatch parity on the GPU: the trace's step vs the GPU's own ops (forward and backward)\n\n"
        if r is None:
            return head + f"{NOT_MEASURED}: on a GPU, `python3 benchmarks/autocast_parity.py --real --out DIR`.\n"
    else:
        head = "### CUDA dispatch parity: the trace's forward vs CUDA's autocast, per GPU-suite architecture\n\n"
        if r is None:
            return head + f"{NOT_MEASURED}: run `benchmarks/autocast_parity.py` with a CUDA build of torch.\n"
    rows = []
    for x in r["rows"]:
        kinds: Dict[str, int] = {}
        for d in x["differences"]:
            kinds[d["kind"]] = kinds.get(d["kind"], 0) + 1
        rows.append(
            (
                x["arch"],
                x["amp"] or "fp32",
                f"{x['same_ops']} / {x['ops_cuda']}",
                f"{x['output_bytes_trace'] - x['output_bytes_cuda']:+,} B of {x['output_bytes_cuda']:,} B",
                "; ".join(f"{n} × {kind}" for kind, n in kinds.items()) or "none",
            )
        )
    skipped = "; ".join(f"{k}: {v}" for k, v in r.get("skipped", {}).items())
    return (
        head
        + r["description"][0].upper()
        + r["description"][1:]
        + (
            ". Compared as: " + "; ".join(r["assumed"]) + ".\n\n"
            if real
            else ". Set as an H100 sets them, where fake CUDA cannot ask the device: "
            + "; ".join(r["assumed"])
            + ". Backward is not compared (autograd needs a CUDA driver even for fake tensors); the GPU suite's "
            "estimator rows measure the whole step, and `--real` compares backward on a GPU.\n\n"
        )
        + table(
            ["architecture", "autocast", "ops the same", "output bytes, trace − CUDA", "differences"],
            rows,
        )
        + (f"\n\nNot compared: {skipped}" if skipped else "")
        + f"\n\n{gpu_provenance(r) if real else provenance(r)}\n"
    )


def gpu_real(name: str) -> Optional[Dict[str, Any]]:
    """results/<name>.json of a GPU suite run; None when missing or a dry run (CPU stand-ins, no GPU figure)."""
    data = load(name)
    return None if data is None or data.get("dry_run") else data


def gpu_provenance(r: Dict[str, Any]) -> str:
    m = r.get("machine", {})
    return (
        f"Measured {r.get('date', '?')} on {m.get('gpu') or '?'} (driver {m.get('driver', '?')}, CUDA driver "
        f"{m.get('cuda_driver', '?')}), torch {m.get('torch', '?')}"
        + (f" (CUDA {m['torch_cuda']})" if m.get("torch_cuda") else "")  # the runner's file names no CUDA build
        + ", Python "
        f"{m.get('python', '?')}, {m.get('cpu_count', '?')} CPUs. Reproduce: `{r.get('command', '?')}`"
    )


def row_autobatch(r: Optional[Dict[str, Any]]) -> str:
    head = "## 4. Autobatch vs Lightning BatchSizeFinder / accelerate find_executable_batch_size (GPU)\n\n"
    if r is None:
        return (
            head + f"**Figure:** {GPU_NOT_MEASURED} — trials, seconds, the batch each tool picks, and whether "
            "100 further steps with a validation pass at each pick run out of memory; measured by the GPU "
            "suite (section 6) into `results/gpu_autobatch.json`.\n"
        )
    return (
        head
        + f"Free memory: {r.get('free_memory')}; {r.get('precision')}, {r.get('optimizer')}.\n\n"
        + gpu_summary.markdown(gpu_summary.autobatch_rows(r))
        + f"\n\n{gpu_provenance(r)}\n"
    )


GPU_HOW = """Issue 10: every CUDA promise measured by one command on an NVIDIA GPU (see `benchmarks/gpu/README.md`).
Prepare here (network): `bash scripts/prepare_gpu_wheels.sh` (wheels the GPU image lacks, into `.whl/`), and
rehearse the GPU run on the CPU with the image's Python 3.12 and packages: `bash scripts/rehearse_gpu_image.sh`.
Run there (no network, CUDA torch; carry `.whl` and `gpumem_kernel/watchwidget/static`): `python3 -m benchmarks.gpu
--out DIR` (385 s on an H200 with `--budget 480`), then
copy `DIR/gpu_*.json` into `benchmarks/results/`, regenerate this file, and run
`python3 -m benchmarks.gpu --pytest --out DIR2` there (`pytest -m gpu` against those files).
`python3 -m benchmarks.gpu --dry-run` runs the harness on the CPU (tests/test_gpu_suite.py does, in the test
command); a dry run's files are never shown here.

"""


def row_gpu_suite(r: Optional[Dict[str, Any]]) -> str:
    """Section 6 from results/gpu_*.json of a real run; 'not measured (no GPU run yet)' otherwise."""
    head = "## 6. GPU suite (issue 10)\n\n" + GPU_HOW
    if r is None or r.get("dry_run"):
        return head + f"**Figure:** {GPU_NOT_MEASURED}.\n"
    results = {name: data for name in gpu_summary.FILES if (data := gpu_real(name)) is not None}
    return (
        head
        + gpu_summary.markdown(gpu_summary.rows(results))
        + f"\n\n{gpu_provenance(r)}\n\n{gpu_pytest_line(RESULTS / 'gpu_pytest.xml')}"
        + 'What each miss is, and its cause: `benchmarks/gpu/README.md`, "What the first GPU run found".\n'
    )


def gpu_pytest_line(path: Path) -> str:
    """`pytest -m gpu` against the committed run, from its JUnit file: the counts and each failed test."""
    from xml.etree import ElementTree

    if not path.exists():
        return "`pytest -m gpu` against this run: not recorded.\n\n"
    root = ElementTree.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return "`pytest -m gpu` against this run: unreadable JUnit file.\n\n"
    counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    failed = [
        f"`{case.get('name')}`"
        for case in suite.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    text = (
        f"`pytest -m gpu` against this run ({suite.get('timestamp', '')[:16]}): {passed} passed, "
        f"{counts['failures'] + counts['errors']} failed, {counts['skipped']} skipped"
    )
    return text + (f"; failed: {', '.join(failed)}.\n\n" if failed else ".\n\n")


def row_frontend(r: Optional[Dict[str, Any]]) -> str:
    head = "## 5. Frontend\n\n"
    if r is None:
        return (
            head
            + table(
                ["measure", "figure"],
                [
                    ("labextension bundle size", NOT_MEASURED),
                    ("notebook open → first sample shown (Galata)", NOT_MEASURED),
                    ("panel render cost per update", NOT_MEASURED),
                ],
            )
            + "\n\nNo `results/frontend.json` yet.\n"
        )
    render = r.get("render", {})
    rows = [
        ("labextension bundle size (`gpumem_kernel/labextension/static`)", f"{r['bundle_bytes'] / 1024:.0f} KiB"),
        (
            "notebook open → first sample shown (Galata, kernel start included; median of "
            f"{len(r['first_sample_seconds'])})",
            f"{r['first_sample_median_seconds']:.2f} s ({', '.join(f'{x:.2f}' for x in r['first_sample_seconds'])})",
        ),
        (
            "panel render cost per update (Chromium script + layout + style, panel shown minus hidden, "
            f"{render.get('window_seconds')} s windows, {render.get('samples_visible')} updates)",
            f"{render.get('per_update_ms', float('nan')):.2f} ms",
        ),
    ]
    return head + table(["measure", "figure"], rows) + f"\n\n{provenance(r)}\n"


def row_frontend_timeline(r: Optional[Dict[str, Any]]) -> str:
    """Issue 13: the memory timeline view with the largest payload (ui-tests/bench/timeline.spec.ts)."""
    head = "### 5b. Memory timeline view, largest payload (issue 13)\n\n"
    if r is None:
        return head + f"**Figure:** {NOT_MEASURED}: no `results/frontend_timeline.json` yet.\n"
    p, pan = r["payload"], r["pan"]
    figure = (
        f"**Figure:** panning {p['bands']:,} bands: median frame {pan['frame_ms_median']:.1f} ms, p95 "
        f"{pan['frame_ms_p95']:.1f} ms ({pan['frames_with_a_new_view']} of {pan['frames']} frames showed a new "
        "view).\n\n"
    )
    text = (
        "The largest payload the schema allows (`maximumPayload` of src/outputs/timeline/__tests__/makepayload.ts: "
        "a simulated training step of 666 layers), displayed in a real notebook. Frame times are the intervals "
        "between requestAnimationFrame callbacks in the page (16.7 ms: every frame at 60 Hz) while the page drags "
        "the x axis at 4x zoom, one pointer move per frame, for "
        f"{pan['drag_ms'] / 1000:.0f} s. The bands are drawn once per payload in their own layer; a pan moves "
        "it with a CSS transform.\n\n"
    )
    rows = [
        (
            "payload",
            f"{p['bands']:,} bands, {p['small_points']:,} small points, {p['reserved_points']:,} reserved steps, "
            f"{p['stacks']} stacks; {p['json_bytes'] / 1024:.0f} KiB of JSON; {p['svg_vertices_drawn']:,} SVG "
            "vertices drawn",
        ),
        ("cell run → view drawn (kernel round trip included)", f"{r['shown_after_run_seconds']:.2f} s"),
        (
            f"frame time while panning ({pan['frames']} frames, {pan['zoomed_span_events']:,.0f} of "
            f"{pan['timeline_end_events']:,} events shown)",
            f"median {pan['frame_ms_median']:.1f} ms, p95 {pan['frame_ms_p95']:.1f} ms, "
            f"max {pan['frame_ms_max']:.1f} ms",
        ),
    ]
    return head + figure + text + table(["measure", "figure"], rows) + f"\n\n{provenance(r)}\n"


def row_timeline(r: Optional[Dict[str, Any]]) -> str:
    """Issue 13: the cost of the predicted timeline's frame capture (benchmarks/timeline_capture.py)."""
    head = "## 7. Memory timeline: the cost of frame capture (issue 13)\n\n"
    if r is None:
        return head + f"**Figure:** {NOT_MEASURED}: no `results/timeline_capture.json` yet.\n"
    rows = r.get("rows", [])
    per_birth = max((row["capture_us_per_birth"] for row in rows), default=0.0)
    share = max((row["capture_s_per_trace"] / row["trace_min_s"] for row in rows), default=0.0)
    figure = (
        f"**Figure:** the frame capture costs at most {per_birth:.1f} µs per storage birth, {share:.1%} of the trace "
        "it runs in (timed inside the hook); it runs only in the analysed batch's trace of `--timeline`, never in "
        "an ordinary analyze.\n\n"
    )
    text = (
        "Zoo models of row 3, fp32 AdamW, torch threads = 1. The trace alone: `run_trace` of the zoo's batch without "
        "and with the stack hook; the whole command: `analyze(...)` against `predict_timeline(...)` (the same "
        "analysis with the hook on the analysed batch's trace, plus the History and the payload). Whole-call times "
        "are min / median of the rounds, which alternate which setting runs first; on a machine shared with other "
        "work their difference is mostly noise, which the in-hook time does not suffer from.\n\n"
    )

    def pair(row: Dict[str, Any], key: str) -> str:
        return f"{row[key.replace('_s', '_min_s')]:.2f} / {row[key]:.2f}"

    body = table(
        [
            "model",
            "batch",
            "storage births",
            "frames per stack",
            "capture per birth (µs)",
            "capture per trace (s)",
            "trace, without / with frames (s, min / median)",
            "analyze / --timeline (s, min / median)",
            "payload JSON",
            "snapshot / CSV",
            "peak = analysis peak_allocated",
        ],
        [
            (
                row["model"],
                row["batch"],
                f"{row['storage_births']:,}",
                f"{row['frames_per_stack']:g}",
                f"{row['capture_us_per_birth']:.1f}",
                f"{row['capture_s_per_trace']:.3f}",
                f"{pair(row, 'trace_s')} → {pair(row, 'trace_with_frames_s')}",
                f"{pair(row, 'analyze_s')} → {pair(row, 'analyze_timeline_s')}",
                f"{row['payload_json_bytes'] / 1024:.0f} KiB ({row['bands']} bands, {row['stacks']} stacks)",
                f"{row['snapshot_bytes'] / 1024:.0f} KiB / {row['csv_bytes'] / 1024:.0f} KiB",
                "yes" if row["peak_bytes"] == row["analysis_peak_allocated_bytes"] else "no",
            )
            for row in rows
        ],
    )
    return head + figure + text + body + f"\n\n{provenance(r)}\n"


def row_descendants(r: Optional[Dict[str, Any]]) -> str:
    head = "## 8. Listing the kernel's workers on a busy machine\n\n"
    if r is None:
        return head + f"**Figure:** {NOT_MEASURED}: no `results/descendants_walk.json` yet.\n"
    rows = r["rows"]
    busiest = max(rows, key=lambda row: row["unrelated_processes"])
    old, new = busiest["psutil_every_read"], busiest["descendants"]
    figure = (
        f"**Figure:** with {busiest['machine_processes']:,} processes on the machine and no /proc children files, "
        f"listing the kernel's workers once a second takes {pct(new['core_share'], sign=False)} of a core "
        f"({new['walks']} walks in {new['reads']} reads), against {pct(old['core_share'], sign=False)} when every "
        f"read walked every process ({old['median_ms']:.1f} ms per read); every way found the same workers: "
        f"{all(x['same_workers'] for x in rows)}."
    )
    here = (
        "has children files, so the walk is forced for the `Descendants, walking` rows"
        if r.get("proc_children_files")
        else "has no children files"
    )
    text = (
        "The kernel's sampler (host memory of DataLoader workers) and the server's exit watch (each kernel's "
        "workers before a death) list descendants every second. Where /proc has children files they are read "
        "from there; without them (gVisor, some VMs) it is a walk over every process, which the server's exit "
        "watch made on every look before, whatever /proc offered. `probe.descendants.Descendants` repeats the walk "
        "only within 1 % of a core, one walk serving every kernel of the server, and re-checks older entries' "
        f"parents so no ended worker is listed. This machine's /proc {here}.\n\n"
    )
    ways = (
        ("psutil_every_read", "psutil `children(recursive=True)` every read"),
        ("descendants", "`Descendants`, walking (1 % budget)"),
        ("proc_children", "`Descendants`, /proc children files"),
    )
    body = table(
        ["unrelated processes", "way", "reads", "median per read", "max per read", "share of a core", "walks"],
        [
            (
                x["unrelated_processes"],
                label,
                x[key]["reads"],
                f"{x[key]['median_ms']:.2f} ms",
                f"{x[key]['max_ms']:.2f} ms",
                pct(x[key]["core_share"], sign=False),
                x[key].get("walks", x[key]["reads"] if key == "psutil_every_read" else 0),
            )
            for x in rows
            for key, label in ways
            if x.get(key)
        ],
    )
    return head + figure + "\n\n" + text + body + f"\n\n{provenance(r)}\n"


def row_holders(r: Optional[Dict[str, Any]]) -> str:
    """Issue 27: what the holders walk after each cell costs (benchmarks/holders_cost.py)."""
    head = "## 12. Holders after each cell: the walk's cost (issue 27)\n\n"
    if r is None:
        return head + f"**Figure:** {NOT_MEASURED}: no `results/holders_cost.json` yet.\n"
    budget, repeats, rows = r["budget_ms"], r["repeats"], r["rows"]
    objects = next(row for row in rows if row["namespace"] == f"{r['objects']:,} objects")
    model = next(row for row in rows if row["variables"] == 2)
    figure = (
        f"**Figure:** on {r['objects']:,} objects the walk takes a median {objects['unbounded']['median_ms']:.1f} ms "
        f"(max {objects['unbounded']['max_ms']:.1f} ms) against the {budget:g} ms per-cell budget, and skips "
        f"{objects['with_budget']['skipped']} of {repeats} cells; a {r['model_parameters'] / 1e9:.1f}B-parameter "
        f"model with Adam state takes {model['unbounded']['median_ms']:.1f} ms; a kernel without CUDA in use pays "
        f"{r['hook_without_cuda_us']:.1f} µs per cell.\n\n"
    )
    load_average = ", ".join(f"{n:g}" for n in r.get("load_average", []))
    text = (
        "The post_run_cell hook walks the user's variables where CUDA is in use (gpumem_kernel/heldby). The "
        f"namespace: {r['objects']:,} variables (numbers and strings, small lists and dicts, dataclasses, plain "
        f"objects, a hundredth lists of tensors) and a decoder of {r['model_parameters']:,} parameters "
        f"({r['model_tensors']} tensors) on the meta device with Adam-shaped state: the cost is in the objects, "
        "not their bytes, and the path is the one CUDA takes (`collect` with a device predicate). *Unbounded*: "
        "no time limit (`%gpumem holders` allows 5 s); *with the budget*: "
        f"{budget:g} ms as after each cell, where a walk past it reports a skip with a note. {repeats} walks each, torch threads = 1; load "
        f"average at the end of the run: {load_average or '?'} (a shared machine).\n\n"
    )

    def largest(row: Dict[str, Any]) -> str:
        return "; ".join(f"`{name}` {human(size)} ({what})" for name, size, what in row["unbounded"]["largest"])

    def cost(part: Dict[str, Any]) -> str:
        return f"{part['median_ms']:.1f} / {part['max_ms']:.1f}"

    body = table(
        [
            "namespace",
            "variables",
            "unbounded (ms, median / max)",
            f"with the {budget:g} ms budget (ms, median / max)",
            "cells skipped",
            "largest holders found",
        ],
        [
            (
                row["namespace"],
                f"{row['variables']:,}",
                cost(row["unbounded"]),
                cost(row["with_budget"]),
                f"{row['with_budget']['skipped']} of {repeats}",
                largest(row),
            )
            for row in rows
        ],
    )
    return head + figure + text + body + f"\n\n{provenance(r)}\n"


def row_per_rank(r: Optional[Dict[str, Any]]) -> str:
    """A rank's peak under DDP, ZeRO and FSDP2: the traced rank and the old formula against real gloo ranks."""
    head = "## 13. Per-rank memory: traced rank vs real gloo ranks\n\n"
    if r is None:
        return head + f"**Figure:** {NOT_MEASURED}: no `results/per_rank.json` yet.\n"
    rows = r["rows"]

    def spread(setting: str, model: str) -> str:
        errors = [x["formula_error"] for x in rows if x["setting"] == setting and x["model"] == model]
        return "/".join(pct(e, digits=1) for e in errors)

    settings = list(dict.fromkeys(x["setting"] for x in rows))
    model_names = list(dict.fromkeys(x["model"] for x in rows))
    sizes = "/".join(str(n) for n in dict.fromkeys(x["world_size"] for x in rows))
    worst = max(rows, key=lambda x: abs(x["traced_error"]))
    old = "; ".join(
        f"{setting.split(' (')[0]} "
        + ", ".join(f"{spread(setting, m)} ({m})" for m in model_names if spread(setting, m))
        for setting in settings
    )
    figure = (
        f"**Figure:** a rank traced on fake tensors under a fake process group is within "
        f"{pct(abs(worst['traced_error']), sign=False)} of the largest real rank's peak live bytes in every row "
        f"(worst: {worst['model']} x {worst['world_size']}, {worst['setting']}); the old formula (the "
        f"single-process trace less the sharding's saving) was off by, at world size {sizes}: {old}.\n\n"
    )
    text = (
        "Each row wraps the same model as the strategy does (DistributedDataParallel; + ZeroRedundancyOptimizer; "
        "`fully_shard` per block and at the root) and runs three training steps with "
        f"{r.get('optimizer', 'the optimizer')}. *Measured*: world-size processes on the gloo backend (CPU "
        "tensors), each rank's live tensor bytes over its third step from the storage tracker; the largest rank "
        "(the smallest in brackets where they differ). *Traced*: rank 0 of the same setup on fake tensors under "
        "a fake process group of that world size, in one process; this is what the report's per-rank figure now "
        "comes from. *Formula*: the report's fallback, what it said before. Errors are against the measured "
        "peak; a positive error over-states the rank. The models: `mlp`, four blocks of 256 -> 1024 -> 256, "
        "batch 16; `llama`, tests/data/hf_configs/llama in fp32 (2 layers, hidden 64), batch 4 x 64 tokens; `cnn`, a "
        "3 -> 32 stem, four blocks of Conv2d 32 -> 32 3x3, BatchNorm2d and ReLU and a pooled linear head, batch 8 "
        "of 32x32 images (its 38 k parameters weigh little beside its activations: the strategies move its peak by "
        "little). "
        "Figures are bytes, not times, so the machine's load does not move them (it was not recorded).\n\n"
    )
    for skipped in r.get("not_run", []):
        text += f"Not run: {skipped['model']}, {skipped['setting']}: {skipped['why']}.\n\n"

    def measured(x: Dict[str, Any]) -> str:
        high, low = mib(x["measured_peak_live"]), mib(x["measured_min_peak_live"])
        return high if low == high else f"{high} ({low})"

    body = table(
        [
            "model",
            "world size",
            "strategy",
            "measured per-rank peak",
            "phase",
            "traced (predicted)",
            "traced error",
            "old formula",
            "formula error",
            "single process",
        ],
        [
            (
                x["model"],
                x["world_size"],
                x["setting"],
                measured(x),
                x["measured_peak_phase"],
                mib(x["traced_peak_live"]),
                pct(x["traced_error"]),
                mib(x["formula_peak_live"]),
                pct(x["formula_error"], digits=1),
                mib(x["single_process_peak_live"]),
            )
            for x in rows
        ],
    )
    recorded = str(r.get("command", ""))
    if "benchmarks/" not in recorded:  # recorded from inside benchmarks/: say how to run it from the root
        r = {**r, "command": " ".join(["python", "benchmarks/per_rank.py", *recorded.split()[2:]])}
    return head + figure + text + body + f"\n\n{provenance(r).rstrip()}\n"


def gpu_files() -> str:
    files = sorted(RESULTS.glob("gpu_*.json"))
    if not files:
        return "## GPU result files\n\nNone (`results/gpu_*.json`): no GPU run recorded yet.\n"
    lines = ["## GPU result files\n"]
    for path in files:
        data = json.loads(path.read_text())
        lines.append(
            f"- `results/{path.name}` — {data.get('date', '?')}, {data.get('machine', {}).get('gpu', '?')}"
            f"{': ' + data['description'] if isinstance(data.get('description'), str) else ''}"
        )
    return "\n".join(lines) + "\n"


HOW_TO_RUN = f"""## How to run

From the repository root, with the development venv (`.venv`: torch CPU, ipykernel, jupyter_client). Each
script writes `benchmarks/results/<name>.json` (machine, versions, date, command); then regenerate this file.

| row | command | time |
|---|---|---|
| 1 sampler overhead | `{RUN} benchmarks/sampler_overhead.py` | ~2.5 min |
| 2 live delivery | `{RUN} benchmarks/live_delivery.py` | ~2.5 min per kernel |
| 3 estimator accuracy (zoo and named cases) | `{RUN} benchmarks/estimator_accuracy.py` | ~5 min on CPU |
| 3 named cases only (issue 9 §5) | `{RUN} benchmarks/estimator_accuracy.py --cases all` | ~3 min on CPU |
| 3c CUDA dispatch parity on a GPU (forward and backward; after the GPU suite) | `python3 benchmarks/autocast_parity.py --real --out DIR` | ~1 min |
| 3c CUDA dispatch parity (a CUDA build of torch, no GPU: the rehearsal's venv) | `PYTHONPATH=. ~/.cache/gpumem-gpu-image-venv/bin/python benchmarks/autocast_parity.py` (REHEARSAL_VENV, if set) | ~1 min |
| 5 frontend (Galata, Debian chromium; after `bash scripts/setup.sh --test`) | `cd ui-tests && jlpm playwright test -c playwright.bench.config.js` | ~1 min |
| 5b timeline view only (Galata) | `cd ui-tests && jlpm playwright test -c playwright.bench.config.js bench/timeline.spec.ts` | ~1 min |
| 6 GPU suite (NVIDIA GPU; section 6) | `python3 -m benchmarks.gpu --out benchmarks/results` | < 10 min (H100, plan) |
| 6 GPU suite, dry run (CPU stand-ins, no figure) | `{RUN} -m benchmarks.gpu --dry-run` | ~1 min |
| 6 `pytest -m gpu` against committed GPU results (NVIDIA GPU) | `python3 -m benchmarks.gpu --pytest --out DIR` | a few min |
| 6 rehearsal of a GPU run on the CPU (Python 3.12, the GPU image's packages) | `bash scripts/rehearse_gpu_image.sh` | ~2 min (+ ~4 GB the first time) |
| 7 timeline frame capture (issue 13) | `{RUN} benchmarks/timeline_capture.py` | ~3 min on CPU |
| 8 listing workers on a busy machine | `{RUN} benchmarks/descendants_walk.py` | ~1.5 min |
| 9 model zoo (extra packages: `{zoo_readme.INSTALL}`) | `{zoo_readme.RUN}` | ~30 min on 2 cores |
| 10 published figures (issue 24; torchao's ViT-H needs timm, one of the zoo's extra packages) | `{published_readme.RUN}` (`--sources NAME ...`: only those, the others kept) | ~16 min on 2 cores |
| 11 repeated blocks traced once (issue 25) | `{RUN} benchmarks/replicate_speed.py` | ~13 min on 2 cores |
| 11 the analysis in seconds: QLoRA 8B, `--search seq`, 70B, beside a previous commit (issue 38) | `{RUN} benchmarks/replicate_speed.py --plans-only --previous REV` (the model rows kept) | ~15 min on 2 idle cores |
| 12 holders after each cell (issue 27) | `{RUN} benchmarks/holders_cost.py` | ~10 s |
| 13 per-rank memory (gloo ranks on the CPU) | `{RUN} benchmarks/per_rank.py` | ~10 min on 2 cores |
| README | `{RUN} benchmarks/make_readme.py` | instant |

`live_delivery.py --kernel-python /path/to/venv/bin/python` adds another kernel (e.g. a venv with ipykernel 6);
`--seconds 10` makes a quick run. `estimator_accuracy.py` fills the GPU columns itself when CUDA is available.
Times are ratios or counts measured within one run, so they hold on a loaded machine; absolute step times do not.
"""


def main() -> None:
    sections = [
        "# Benchmarks\n\n"
        "Measured figures for the promises of jupyterlab-gpumem (issue 6). Generated by "
        "`benchmarks/make_readme.py` from `benchmarks/results/*.json`; do not edit by hand. GPU rows read "
        f'"{NOT_MEASURED}" until a run on an NVIDIA GPU records them.\n',
        HOW_TO_RUN,
        row_sampler(load("sampler_overhead")),
        row_delivery(load("live_delivery")),
        row_estimator(load("estimator_accuracy")),
        estimator_cases(load("estimator_cases")),
        autocast_parity(load("autocast_parity")),
        autocast_parity(load("gpu_autocast_parity"), real=True),
        row_autobatch(gpu_real("gpu_autobatch")),
        row_frontend(load("frontend")),
        row_frontend_timeline(load("frontend_timeline")),
        row_gpu_suite(gpu_real("gpu_suite")),
        row_timeline(load("timeline_capture")),
        row_descendants(load("descendants_walk")),
        zoo_readme.section(load("zoo"), provenance),
        published_readme.section(load("published"), provenance),
        replicate_section(load("replicate_speed"), provenance),
        row_holders(load("holders_cost")),
        row_per_rank(load("per_rank")),
        gpu_files(),
    ]
    README.write_text("\n".join(sections))
    print(f"wrote {README.relative_to(HERE.parent)}", file=sys.stderr)


if __name__ == "__main__":
    main()
