"""Issue 13: what the predicted memory timeline costs — the allocating frames captured at each storage birth.

For zoo models of estimator_accuracy.py (default GPT and ResNet, fp32 AdamW, the zoo's batch), interleaved rounds of:
- the trace alone: `run_trace(plan, batch)` without and with the stack hook (the frame capture itself, per storage
  birth);
- the whole command: `analyze(model, ...)` (what `%gpumem analyze` runs: the trace of the batch plus the search's
  traces) against `predict_timeline(model, ...)` (what `--timeline` runs: the same analysis with the hook on the
  analysed batch's trace only, plus the History and the payload);
and, once, the payload's JSON size and the export sizes. Medians over the rounds; the machine may be shared, so
rounds alternate the two settings.

    PYTHONPATH=. .venv/bin/python benchmarks/timeline_capture.py [--only GPT] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks._common import write_result  # noqa: E402
from benchmarks.estimator_accuracy import ZOO  # noqa: E402
from gpumem_kernel.analysis import analyze  # noqa: E402
from gpumem_kernel.analysis import run_trace  # noqa: E402
from gpumem_kernel.analysis import TracePlan  # noqa: E402
from gpumem_kernel.analysis import default_loss  # noqa: E402
from gpumem_kernel.timeline.export import export  # noqa: E402
from gpumem_kernel.timeline.payload import build_payload  # noqa: E402
from gpumem_kernel.timeline.predicted import predict_timeline, stack_hook  # noqa: E402


def _timed(run: Callable[[], Any]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def measure(name: str, rounds: int) -> Dict[str, Any]:
    make_model, make_batch, batch = ZOO[name]
    torch.manual_seed(0)
    model = make_model()
    options = dict(batch_size=batch, input=lambda b: make_batch(b, False), optimizer="adamw")
    plan = TracePlan(model=model, optimizer="adamw", make_batch=make_batch, loss_fn=default_loss)
    hooked = TracePlan(**{**{f: getattr(plan, f) for f in plan.__dataclass_fields__}, "stack_hook": stack_hook()})

    run_trace(plan, batch)  # warm-up: imports, kernels' first use
    births = len(run_trace(hooked, batch).timeline.records)
    # the capture itself, timed inside the hook (the timer's own ~0.1 µs included); the least of 3 traces, since
    # a shared machine only ever adds time
    capture = stack_hook()
    spent = [0.0, 0]

    def timed_capture() -> Any:
        started = time.perf_counter()
        frames = capture()
        spent[0] += time.perf_counter() - started
        spent[1] += 1
        return frames

    timed_plan = TracePlan(**{**{f: getattr(plan, f) for f in plan.__dataclass_fields__}, "stack_hook": timed_capture})
    per_trace = []
    for _ in range(3):
        spent[0], spent[1] = 0.0, 0
        run_trace(timed_plan, batch)
        per_trace.append((spent[0], spent[1]))
    spent = list(min(per_trace))
    frames_per_stack = statistics.median(len(r.stack or ()) for r in run_trace(hooked, batch).timeline.records)
    trace_off: List[float] = []
    trace_on: List[float] = []
    analyze_off: List[float] = []
    analyze_on: List[float] = []
    for index in range(rounds):
        pairs = [
            (trace_off, lambda: run_trace(plan, batch)),
            (trace_on, lambda: run_trace(hooked, batch)),
            (analyze_off, lambda: analyze(model, **options)),
            (analyze_on, lambda: predict_timeline(model, **options)),
        ]
        if index % 2:  # alternate which setting runs first
            pairs = [pairs[1], pairs[0], pairs[3], pairs[2]]
        for times, run in pairs:
            times.append(_timed(run))

    timeline = predict_timeline(model, **options)
    started = time.perf_counter()
    payload = build_payload(timeline.history, timeline.id)
    build_seconds = time.perf_counter() - started
    t_off, t_on = statistics.median(trace_off), statistics.median(trace_on)
    a_off, a_on = statistics.median(analyze_off), statistics.median(analyze_on)
    return {
        "model": name,
        "batch": batch,
        "storage_births": births,
        "device_events": timeline.history.end,
        "trace_s": round(t_off, 4),
        "trace_with_frames_s": round(t_on, 4),
        "trace_overhead": round(t_on / t_off - 1, 4),
        "capture_us_per_birth": round(spent[0] / max(spent[1], 1) * 1e6, 2),
        "capture_s_per_trace": round(spent[0], 4),
        "frames_per_stack": frames_per_stack,
        "trace_min_s": round(min(trace_off), 4),
        "trace_with_frames_min_s": round(min(trace_on), 4),
        "analyze_min_s": round(min(analyze_off), 4),
        "analyze_timeline_min_s": round(min(analyze_on), 4),
        "analyze_s": round(a_off, 4),
        "analyze_timeline_s": round(a_on, 4),
        "analyze_overhead": round(a_on / a_off - 1, 4),
        "build_payload_s": round(build_seconds, 4),
        "payload_json_bytes": len(json.dumps(payload.to_dict())),
        "bands": len(payload.bands),
        "stacks": len(payload.stacks),
        "snapshot_bytes": len(export(timeline.history, "snapshot").data),
        "csv_bytes": len(export(timeline.history, "csv").data),
        "peak_bytes": payload.peak.bytes,
        "analysis_peak_allocated_bytes": timeline.report.peak_allocated_bytes,
        "rounds": rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="GPT,ResNet", help="comma-separated zoo models (default GPT,ResNet)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for name in [n.strip() for n in args.only.split(",") if n.strip()]:
        row = measure(name, args.rounds)
        print(json.dumps(row))
        rows.append(row)
    write_result(
        "timeline_capture",
        {
            "description": "predicted timeline: frame capture at each storage birth (trace alone and whole analyze)",
            "torch_threads": 1,
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
