"""Section `residue`: what the traced estimator's misses are made of, named by op and size at the step's peak.

The first GPU run (H200, torch 2.11, cuDNN 9.19) found fp32 convolution steps on 32x32 images holding about 0.65 MiB
per sample more than the trace (CNN at batch 64 and 128, not 256; ResNet-18/4 at every batch), LSTM steps off by
up to 15 % either way, and an MLP at bf16 and batch 4096 10 % low. Here one step of each such configuration runs
(the second of two: the optimizer's state exists) with the allocator history recording C++ and Python frames
(`torch.cuda.memory._record_memory_history(stacks="all")`). At the recorded peak, the blocks alive that were
allocated within that step are grouped by their site: the innermost frame that names a CUDA library or an ATen op
of the kind that asks for workspace (cuDNN, cuBLAS, convolution, RNN, batch norm, matmul), else the innermost
Python frame. The block the trace lacks is then named with its op and size. CNN fp32 at batch 128 runs twice more:
with cuDNN's TF32 off, and with `cudnn.benchmark` on, to tell whether the engine choice moves the excess.

Dry run (CPU): nothing can be recorded; the peak and the grouping run over the timeline tests' snapshot fixture
(PyTorch's format).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from benchmarks.gpu.common import (
    REPO,
    Context,
    NvmlTruth,
    emptied_baseline,
    one_line,
    section_context,
    write_result,
)

NAME = "gpu_residue"
FIXTURE = REPO / "tests" / "timeline" / "fixtures" / "training_step.snapshot.json"
# frames whose names say which library or op asked for a block (C++ symbols from stacks="all")
SITE_WORDS = ("cudnn", "cublas", "workspace", "convolution", "rnn", "lstm", "batch_norm", "addmm", "matmul", "mm")
MAX_ENTRIES = 200_000
TOP = 12


@dataclass(frozen=True)
class Case:
    arch: str
    precision: str
    batch_index: int
    setting: str = "default"  # default | no-tf32 (cuDNN's TF32 off) | benchmark (cudnn.benchmark on)

    def key(self) -> str:
        return f"{self.arch}|{self.precision}|{self.batch_index}|{self.setting}"


# the largest misses first: a slow symbolisation of C++ frames leaves the later ones to the time budget
CASES: Tuple[Case, ...] = (
    Case("CNN", "fp32", 1),
    Case("ResNet-18/4", "fp32", 2),
    Case("LSTM", "fp32", 0),
    Case("LSTM", "bf16", 2),
    Case("MLP", "bf16", 2),
    Case("CNN", "fp32", 2),
    Case("ResNet-18/4", "bf16", 2),
    Case("CNN", "fp32", 1, "no-tf32"),
    Case("CNN", "fp32", 1, "benchmark"),
)


# --- the recorded window: its peak, and what was alive there ---------------------------------------------------


def site(frames: Sequence[Any]) -> str:
    """The innermost frame naming a library or a workspace-asking op, else the innermost Python frame."""
    for frame in frames:
        if any(word in frame.name.lower() for word in SITE_WORDS):
            return frame.name[:160]
    for frame in frames:
        if frame.file.endswith(".py"):
            return f"{frame.file.rsplit('/', 1)[-1]}:{frame.line} {frame.name}"
    return "no frames"


def _made_here(entry: Mapping[str, Any], alloc: Any) -> bool:
    """An allocation made within the trace starts at its own `alloc` entry (a free of an unseen block starts at 0)."""
    return entry.get("action") == "alloc" and entry.get("addr") == alloc.address


def peak_blocks(snapshot: Mapping[str, Any], device: int) -> Dict[str, Any]:
    """The peak of the bytes allocated within one device's recorded trace, and the blocks alive there. The trace is
    read as the timeline reads it (timeline.recorded.history_from_snapshot); blocks allocated before the recording
    (the snapshot's others, and frees of blocks the trace never saw allocated) are left out."""
    from dataclasses import replace

    from gpumem_kernel.timeline.payload import live_curve
    from gpumem_kernel.timeline.recorded import history_from_snapshot

    history = history_from_snapshot(snapshot, device, keep_raw=False)
    trace = (snapshot.get("device_traces") or [])[history.device_index or 0]
    made = [a for a in history.allocs if _made_here(trace[a.start], a)]
    curve = live_curve(replace(history, allocs=made, baseline=0))
    peak = max(curve, default=0)
    at = curve.index(peak) if peak else -1
    alive = [a for a in made if a.start <= at and (a.end is None or a.end > at)]
    sites: Dict[str, List[int]] = defaultdict(lambda: [0, 0])
    for alloc in alive:
        group = sites[site(alloc.frames)]
        group[0] += alloc.size
        group[1] += 1
    ranked = sorted(sites.items(), key=lambda kv: -kv[1][0])[:TOP]
    return {
        "peak_in_window": peak,
        "blocks_at_peak": len(alive),
        "sites": [{"site": name, "bytes": b, "blocks": n} for name, (b, n) in ranked],
    }


# --- one recorded step on the GPU --------------------------------------------------------------------------------


def _apply(setting: str) -> Dict[str, Any]:
    import torch

    before = {"cudnn.allow_tf32": torch.backends.cudnn.allow_tf32, "cudnn.benchmark": torch.backends.cudnn.benchmark}
    if setting == "no-tf32":
        torch.backends.cudnn.allow_tf32 = False
    elif setting == "benchmark":
        torch.backends.cudnn.benchmark = True
    return before


def _restore(before: Mapping[str, Any]) -> None:
    import torch

    torch.backends.cudnn.allow_tf32 = before["cudnn.allow_tf32"]
    torch.backends.cudnn.benchmark = before["cudnn.benchmark"]


def record(case: Case, blas: Any) -> Dict[str, Any]:
    """Two steps of the case; the second recorded with C++ and Python frames; its peak and the sites alive."""
    import torch

    from benchmarks.gpu.estimator import Config, _plan
    from gpumem_kernel.analysis import run_real_steps

    plan, batch = _plan(case.arch, False, Config(case.arch, case.precision, "AdamW", case.batch_index), blas)
    device = torch.device("cuda", torch.cuda.current_device())
    before = _apply(case.setting)
    recording = False

    def start_at_step_two(step: int) -> None:
        nonlocal recording
        if step == 2:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES, stacks="all", context="alloc")
            recording = True

    try:
        base_allocated, _, _ = emptied_baseline(device)
        started = time.perf_counter()
        run_real_steps(plan, batch, device, steps=2, on_step=start_at_step_two)
        torch.cuda.synchronize(device)
        snapshot = torch.cuda.memory._snapshot()
    finally:
        if recording:
            torch.cuda.memory._record_memory_history(enabled=None)
        _restore(before)
    found = peak_blocks(snapshot, device.index or 0)
    return {
        "status": "ok",
        "batch": batch,
        "max_memory_allocated": torch.cuda.max_memory_allocated(device) - base_allocated,
        "seconds": round(time.perf_counter() - started, 1),
        **found,
    }


def _safe_record(case: Case, blas: Any, ctx: Context) -> Dict[str, Any]:
    if ctx.left() < 10:
        return {"status": "not measured", "reason": "time budget"}
    try:
        return record(case, blas)
    except Exception as exc:  # one case the recording cannot follow is a result, not a crash
        return {"status": "failed", "reason": one_line(exc)}


def run(ctx: Context, nvml: NvmlTruth) -> Dict[str, Any]:
    if ctx.dry_run:
        snapshot = json.loads(FIXTURE.read_text())
        return {
            "description": "dry run: the peak and the grouping over the timeline tests' snapshot fixture",
            "rows": [
                {
                    "case": "fixture",
                    "setting": "default",
                    "result": {"status": "dry run", **peak_blocks(snapshot, 0)},
                }
            ],
        }
    from benchmarks.gpu.estimator import device_facts

    _, blas, _ = device_facts(nvml)
    rows = []
    for case in CASES:
        result = _safe_record(case, blas, ctx)
        rows.append({"case": case.key(), "setting": case.setting, "result": result})
        top = (result.get("sites") or [{}])[0]
        print(f"residue: {case.key()}: {result.get('status')} {top.get('site')} {top.get('bytes')}", flush=True)
    return {
        "description": "the estimator's misses of the first GPU run: one recorded step each (C++ and Python "
        "frames); the blocks alive at the step's peak, grouped by the library or op that asked for them",
        "rows": rows,
    }


def main() -> None:
    ctx = section_context(__doc__.splitlines()[0])
    nvml = NvmlTruth()
    write_result(ctx, NAME, run(ctx, nvml), nvml)


if __name__ == "__main__":
    main()
