"""Section `estimator`: the traced estimator and the measured engine against real training steps on CUDA.

Prediction: `analysis_trace.run_trace(fake=True)` in worker processes that never see a GPU
(CUDA_VISIBLE_DEVICES=""), run in parallel with the measurements. Truth, per architecture in a fresh process
(its own CUDA context): `analysis.run_real_steps` (3 steps on a copy, peaks of steps 2-3) from an emptied cache
and cleared cuBLAS workspaces (the trace counts them: a fresh process allocates them in its first step), giving
`max_memory_allocated` and `max_memory_reserved` over the baseline, and NVML's figure for the process right
after the steps (cache still held: context + reserved + what libraries allocate outside the allocator).
The process prediction is the predicted reserved plus `gpus.context_estimate` (the report's footprint).
Errors are signed: (predicted - truth) / truth. The measured engine is `analyze(device="cuda")` at the
middle batch (fp32, AdamW), its safety reserve set so that its search stays within 8 GiB (seconds, not minutes).

Dry run (CPU): the same loops, with `run_trace(fake=False)` (live tensor bytes of a real CPU step and its
allocator-model replay) standing in for the CUDA figures; NVML figures are recorded as unavailable.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from gpumem_kernel.analysis import BlasWorkspaces

from benchmarks.gpu.common import (
    cpu_pool,
    emptied_baseline,
    REPO,
    Context,
    NvmlTruth,
    error_summary,
    is_oom,
    one_line,
    section_context,
    signed_error,
    write_result,
)

NAME = "gpu_estimator"
PRECISIONS: Dict[str, Optional[str]] = {"fp32": None, "bf16": "bf16"}
OPTIMIZERS: Dict[str, str] = {"AdamW": "adamw", "SGD(momentum)": "sgd-momentum"}
TARGETS = {"allocated_median_abs": 0.03, "allocated_max_abs": 0.05, "reserved_max_abs": 0.10}
ENGINE_LIMIT = 8 << 30  # the measured engine's search stays within this much memory: seconds, not minutes
MEASURERS = 3  # measuring processes at a time on the GPU (80 GB: the largest configuration takes ~15 GB)
PER_GROUP_S = 120.0  # one architecture's 12 configurations and its engine row (~25 s planned on an H100)
DRY_FULL = "MLP"  # the dry run's one model with more than one configuration, and its measured-engine row
# the allocator model's other mode, checked on two shapes of step (convolutions; attention and embeddings), in
# processes of their own: PYTORCH_CUDA_ALLOC_CONF must be set before the first CUDA allocation
EXPANDABLE = "expandable"
EXPANDABLE_ARCHS = ("ResNet-50", "GPT-2")


@dataclass(frozen=True)
class Config:
    arch: str
    precision: str
    optimizer: str
    batch_index: int  # into the architecture's three batch sizes (resolved where the model is built)
    allocator: str = "default"  # or EXPANDABLE: expandable_segments:True

    def key(self) -> str:
        base = f"{self.arch}|{self.precision}|{self.optimizer}|{self.batch_index}"
        return base if self.allocator == "default" else f"{base}|{self.allocator}"


def configs(arch: str, dry: bool) -> List[Config]:
    """The full grid on a GPU. A dry run keeps every code path (both precisions and optimizers, three batch
    sizes) in four configurations of one model and one configuration of each other (CI time on two cores)."""
    if not dry:
        grid = [Config(arch, p, o, i) for p in PRECISIONS for o in OPTIMIZERS for i in range(3)]
        if arch in EXPANDABLE_ARCHS:
            grid += [Config(arch, p, "AdamW", 1, EXPANDABLE) for p in PRECISIONS]
        return grid
    first = [Config(arch, "fp32", "AdamW", 0)]
    if arch != DRY_FULL:
        return first
    return first + [
        Config(arch, "fp32", "AdamW", 1),
        Config(arch, "fp32", "AdamW", 2),
        Config(arch, "bf16", "SGD(momentum)", 0),
        Config(arch, "fp32", "AdamW", 1, EXPANDABLE),
    ]


def _plan(arch: str, dry: bool, cfg: Config, blas: BlasWorkspaces) -> Tuple[Any, int]:
    from benchmarks.gpu import models
    from gpumem_kernel.analysis import TracePlan

    built = models.build(arch, dry)
    plan = TracePlan(
        built.model,
        OPTIMIZERS[cfg.optimizer],
        built.make_batch,
        built.loss,
        amp=PRECISIONS[cfg.precision],
        **blas.plan_fields(),
        expandable_segments=cfg.allocator == EXPANDABLE,
    )
    return plan, built.batches[cfg.batch_index]


# --- prediction: CPU only, in a pool -------------------------------------------------------------------------


def predict(arch: str, dry: bool, cfg: Config, blas: BlasWorkspaces) -> Dict[str, Any]:
    from gpumem_kernel.analysis import run_trace

    plan, batch = _plan(arch, dry, cfg, blas)
    started = time.perf_counter()
    traced = run_trace(plan, batch, fake=True)
    return {
        "batch": batch,
        "allocated": traced.device.peak_allocated,
        "reserved": traced.device.peak_reserved,
        "live": traced.peak_live,
        "cublas_bytes": traced.cublas_bytes,
        "cudnn_bytes": traced.cudnn_peak_bytes,
        "trace_s": round(time.perf_counter() - started, 3),
    }


def _safe_predict(arch: str, dry: bool, cfg: Config, blas: BlasWorkspaces) -> Dict[str, Any]:
    try:
        return predict(arch, dry, cfg, blas)
    except Exception as exc:  # one architecture the tracer cannot follow is a result, not a crash
        return {"failed": one_line(exc)}


# --- truth ----------------------------------------------------------------------------------------------------


def cuda_truth(plan: Any, batch: int, nvml: NvmlTruth) -> Dict[str, Any]:
    """Peaks of steps 2-3 over an emptied baseline, and NVML's process figure before the cache is emptied."""
    import torch

    from gpumem_kernel.analysis import run_real_steps

    device = torch.device("cuda", torch.cuda.current_device())

    def reset_at_step_two(step: int) -> None:
        if step == 2:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)

    base_allocated, base_reserved, cleared = emptied_baseline(device)
    oom: Optional[str] = None
    try:
        run_real_steps(plan, batch, device, steps=3, on_step=reset_at_step_two)
        torch.cuda.synchronize(device)
    except RuntimeError as exc:
        if not is_oom(exc):
            raise
        oom = one_line(exc)
    if oom is not None:  # outside the except block: the failed step's frames are gone
        gc.collect()
        torch.cuda.empty_cache()
        return {"status": "out of memory", "reason": oom}
    process = nvml.held_by(os.getpid())  # this process has run CUDA steps: unlisted is unknown, not 0
    reserved_now = torch.cuda.memory_reserved(device)
    return {
        "status": "ok",
        "allocated": torch.cuda.max_memory_allocated(device) - base_allocated,
        "reserved": torch.cuda.max_memory_reserved(device) - base_reserved,
        "process": process,
        "process_minus_reserved": None if process is None else process - reserved_now,
        "baseline_allocated": base_allocated,
        "cublas_cleared": cleared,
    }


def cpu_truth(plan: Any, batch: int) -> Dict[str, Any]:
    """Dry-run stand-in: live bytes of a real CPU step, replayed through the allocator model."""
    from gpumem_kernel.analysis import run_trace

    tracked = run_trace(plan, batch, fake=False)
    return {
        "status": "ok",
        "allocated": tracked.device.peak_allocated,
        "reserved": tracked.device.peak_reserved,
        "process": None,
        "process_minus_reserved": None,
        "stand_in": "run_trace(fake=False): a real CPU step's tracked bytes (no CUDA allocator, no NVML)",
    }


def measured_engine(arch: str, dry: bool, cfg: Config) -> Dict[str, Any]:
    """analyze() end to end at `cfg`: on CUDA the measured engine; on the CPU whichever engine it picks."""
    from benchmarks.gpu import models
    from gpumem_kernel.analysis import analyze
    from gpumem_kernel.analysis import clear_cublas_workspaces

    built = models.build(arch, dry)
    batch = built.batches[cfg.batch_index]
    reserve = None
    if not dry:
        import torch

        gc.collect()
        clear_cublas_workspaces()  # as for the truth (the engine frees them before each point too)
        torch.cuda.empty_cache()
        free, _ = torch.cuda.mem_get_info()
        reserve = max(0, free - ENGINE_LIMIT)  # bytes: whatever the concurrent processes hold
    started = time.perf_counter()
    report = analyze(
        built.model,
        batch_size=batch,
        input=lambda b: built.make_batch(b, False),
        loss=built.loss,
        optimizer=OPTIMIZERS[cfg.optimizer],
        amp=PRECISIONS[cfg.precision],
        device=None if dry else "cuda",
        reserve=reserve,
    )
    return {
        "engine": report.engine,
        "batch": batch,
        "allocated": report.peak_allocated_bytes,
        "reserved": report.peak_reserved_bytes,
        "footprint": report.peak_bytes,
        "points": len(report.curve),
        "maximum": report.recommendations.maximum,
        "seconds": round(time.perf_counter() - started, 3),
    }


# --- the per-architecture measuring process -------------------------------------------------------------------


def _context_at_start(nvml: NvmlTruth) -> Optional[int]:
    import torch

    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    used = nvml.held_by(os.getpid())
    return None if used is None else used - torch.cuda.memory_reserved()


def measure(
    archs: List[str], dry: bool, out: Path, deadline: float, blas: BlasWorkspaces, allocator: str = "default"
) -> None:
    """Truths for every config of `archs` under this process's `allocator`, then (default allocator) the engine
    row; rewrites `out` after each, so a kill keeps them."""
    nvml = NvmlTruth()
    result: Dict[str, Any] = {"rows": {}, "engine": {}, "context_at_start": None}
    if not dry:
        result["context_at_start"] = _context_at_start(nvml)
    for arch in archs:
        for cfg in configs(arch, dry):
            if cfg.allocator == allocator:
                result["rows"][cfg.key()] = _one_truth(arch, dry, cfg, nvml, deadline, blas)
                out.write_text(json.dumps(result))
        if allocator != "default" or (dry and arch != DRY_FULL):
            continue
        middle = Config(arch, "fp32", "AdamW", 1)
        result["engine"][arch] = {"batch_index": middle.batch_index, **_one_engine(arch, dry, middle, deadline)}
        out.write_text(json.dumps(result))


def _one_truth(
    arch: str, dry: bool, cfg: Config, nvml: NvmlTruth, deadline: float, blas: BlasWorkspaces
) -> Dict[str, Any]:
    if time.time() > deadline:
        return {"status": "not measured", "reason": "time budget"}
    try:
        plan, batch = _plan(arch, dry, cfg, blas)  # workspace sizes matter to the CPU stand-in's replay only
        started = time.perf_counter()
        truth = cpu_truth(plan, batch) if dry else cuda_truth(plan, batch, nvml)
        return {**truth, "batch": batch, "seconds": round(time.perf_counter() - started, 3)}
    except Exception as exc:  # recorded: a model that fails on CUDA is a finding
        return {"status": "failed", "reason": one_line(exc)}


def _one_engine(arch: str, dry: bool, cfg: Config, deadline: float) -> Dict[str, Any]:
    if time.time() > deadline:
        return {"status": "not measured", "reason": "time budget"}
    try:
        return {"status": "ok", **measured_engine(arch, dry, cfg)}
    except Exception as exc:
        return {"status": "failed", "reason": one_line(exc)}


# --- orchestration --------------------------------------------------------------------------------------------


def _available(arch: str) -> Optional[str]:
    """None when the architecture can be built here, else why not."""
    from benchmarks.gpu import models

    module = models.source(arch)  # the library's import name, or "plain torch"
    if module == "plain torch":
        return None
    try:
        models._need(module)
    except models.Unavailable as exc:
        return str(exc)
    return None


Group = Tuple[List[str], str]  # architectures measured in one process, and its allocator


def _groups(live: List[str], dry: bool) -> List[Group]:
    """On a GPU one process per architecture (a fresh CUDA context each), and one per expandable-segments
    architecture; a dry run measures every architecture in one go, then the expandable configuration."""
    default: List[Group] = [(live, "default")] if dry else [([a], "default") for a in live]
    expandable = [([a], EXPANDABLE) for a in live if any(c.allocator == EXPANDABLE for c in configs(a, dry))]
    return default + expandable


def _group_name(group: Group) -> str:
    archs, allocator = group
    return ",".join(archs) + ("" if allocator == "default" else f"|{allocator}")


def _spawn_measure(group: Group, ctx: Context, seconds: float, blas: BlasWorkspaces) -> Dict[str, Any]:
    """Run `measure` in a fresh process (in this one for a dry run: no CUDA context to isolate, and two cores
    to spare); whatever it wrote before a failure or a kill is kept."""
    archs, allocator = group
    out = Path(tempfile.mkdtemp(prefix="gpumem-estimator-")) / "truths.json"  # not in <out>: it comes back whole
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.gpu.estimator",
        "--measure",
        ",".join(archs),
        "--result",
        str(out),
        "--seconds",
        str(max(1.0, seconds - 5)),
        "--blas",
        json.dumps(asdict(blas)),
        "--allocator",
        allocator,
    ] + (["--dry-run"] if ctx.dry_run else [])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")}
    if allocator == EXPANDABLE:
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    problem = None
    try:
        if ctx.in_process:
            measure(archs, True, out, time.time() + seconds - 5, blas, allocator)
        else:
            done = subprocess.run(cmd, cwd=REPO, env=env, timeout=seconds + 10, capture_output=True, text=True)
            if done.returncode != 0:
                problem = f"measuring process exited {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
    except subprocess.TimeoutExpired:
        problem = "measuring process killed at its time budget"
    except Exception as exc:  # the dry run's in-process measuring
        problem = one_line(exc)
    data = json.loads(out.read_text()) if out.exists() else {"rows": {}, "engine": {}}
    out.unlink(missing_ok=True)
    out.parent.rmdir()
    data["problem"] = problem
    return data


def _workers() -> int:
    return max(1, min(10, (os.cpu_count() or 4) - 6))  # leave cores to the measuring and kernel processes


def _in_process(
    live: List[str], ctx: Context, blas: BlasWorkspaces
) -> Tuple[Dict[str, "Future[Dict[str, Any]]"], Dict[str, Any]]:
    """The dry run's layout: prediction then truth, one architecture after the other, in this process (on two
    cores worker processes would only add their imports); the first architectures finish even when time is short."""
    futures: Dict[str, "Future[Dict[str, Any]]"] = {}
    truths: Dict[str, Any] = {"rows": {}, "engine": {}, "problems": {}, "context_at_start": {}}
    for arch in live:
        for cfg in configs(arch, ctx.dry_run):
            done: "Future[Dict[str, Any]]" = Future()
            futures[cfg.key()] = done
            done.set_result(
                _safe_predict(arch, ctx.dry_run, cfg, blas)
                if ctx.left() > 20
                else {"failed": "not measured: time budget"}
            )
        got = _measure_all(_groups([arch], ctx.dry_run), ctx, blas)
        for key in ("rows", "engine", "problems", "context_at_start"):
            truths[key].update(got[key])
    return futures, truths


def device_facts(nvml: NvmlTruth) -> Tuple[Optional[str], BlasWorkspaces, int]:
    """(compute capability, cuBLAS workspaces, CUDA context estimate) of this GPU, as NVML names it."""
    import torch

    from gpumem_kernel.analysis import blas_workspaces, context_estimate

    facts = nvml.facts().get("gpus") or [{}]
    cc = facts[0].get("compute_capability")
    return cc, blas_workspaces(cc, torch.__version__), context_estimate(cc)


def run(ctx: Context) -> Dict[str, Any]:
    from benchmarks.gpu import models

    nvml = NvmlTruth()
    cc, blas, context = device_facts(nvml)
    archs = models.names(ctx.dry_run)
    skipped = {a: why for a in archs if (why := _available(a)) is not None}
    live = [a for a in archs if a not in skipped]
    if ctx.in_process:
        futures, truths = _in_process(live, ctx, blas)
    else:
        pool = cpu_pool(1 if ctx.dry_run else _workers())
        futures = {
            cfg.key(): pool.submit(_safe_predict, a, ctx.dry_run, cfg, blas)
            for a in live
            for cfg in configs(a, ctx.dry_run)
        }
        truths = _measure_all(_groups(live, ctx.dry_run), ctx, blas)
    predictions = _collect(futures, ctx)
    if not ctx.in_process:
        pool.shutdown(wait=False, cancel_futures=True)
    rows = [
        _row(a, cfg, predictions.get(cfg.key()), truths["rows"].get(cfg.key()), context)
        for a in live
        for cfg in configs(a, ctx.dry_run)
    ]
    return _result(ctx, rows, truths, skipped, cc, blas, context)


def _measure_all(groups: List[Group], ctx: Context, blas: BlasWorkspaces) -> Dict[str, Any]:
    """One measuring process per group (on a GPU: per architecture, a fresh CUDA context each), MEASURERS at a
    time: allocator peaks and NVML figures are per process, so concurrent processes do not disturb them."""
    from concurrent.futures import ThreadPoolExecutor

    def one(group: Group) -> Tuple[Group, Dict[str, Any]]:
        seconds = min(PER_GROUP_S, ctx.left() - 15)
        if seconds < 10:
            return group, {"rows": {}, "engine": {}, "problem": "not started: time budget"}
        return group, _spawn_measure(group, ctx, seconds, blas)

    truths: Dict[str, Any] = {"rows": {}, "engine": {}, "problems": {}, "context_at_start": {}}
    with ThreadPoolExecutor(1 if ctx.dry_run else MEASURERS) as threads:
        for group, data in threads.map(one, groups):
            truths["rows"].update(data["rows"])
            truths["engine"].update(data["engine"])
            truths["context_at_start"][_group_name(group)] = data.get("context_at_start")
            if data["problem"]:
                truths["problems"][_group_name(group)] = data["problem"]
    return truths


def _collect(futures: Dict[str, "Future[Dict[str, Any]]"], ctx: Context) -> Dict[str, Dict[str, Any]]:
    got: Dict[str, Dict[str, Any]] = {}
    for key, future in futures.items():
        try:
            got[key] = future.result(timeout=max(0.1, ctx.left() - 5))
        except FutureTimeout:
            got[key] = {"failed": "not measured: time budget"}
        except Exception as exc:  # a worker that died (e.g. out of host memory)
            got[key] = {"failed": one_line(exc)}
    return got


def _row(
    arch: str, cfg: Config, pred: Optional[Dict[str, Any]], truth: Optional[Dict[str, Any]], context: int
) -> Dict[str, Any]:
    from benchmarks.gpu import models

    row: Dict[str, Any] = {**asdict(cfg), "source": models.source(arch)}
    pred = pred or {"failed": "not measured: time budget"}
    truth = truth or {"status": "not measured", "reason": "time budget"}
    row["batch"] = pred.get("batch") or truth.get("batch")
    if "failed" in pred:
        return {**row, "status": "prediction failed", "reason": pred["failed"], "truth": truth}
    if truth.get("status") != "ok":
        return {**row, "status": truth.get("status"), "reason": truth.get("reason"), "predicted": pred}
    predicted_process = pred["reserved"] + context
    row.update(
        status="ok",
        predicted={**pred, "process": predicted_process},
        truth=truth,
        error={
            "allocated": signed_error(pred["allocated"], truth["allocated"]),
            "reserved": signed_error(pred["reserved"], truth["reserved"]),
            "process": signed_error(predicted_process, truth.get("process")),
        },
    )
    return row


def _engine_rows(truths: Dict[str, Any], rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The measured engine's figures against the truth of the same configuration (fp32, AdamW, middle batch)."""
    out = []
    for arch, engine in truths["engine"].items():
        truth = next(
            (
                r.get("truth")
                for r in rows
                if r["arch"] == arch
                and r["allocator"] == "default"
                and r["precision"] == "fp32"
                and r["optimizer"] == "AdamW"
                and r["batch_index"] == engine["batch_index"]
            ),
            None,
        )
        entry: Dict[str, Any] = {"arch": arch, **engine}
        if engine.get("status") == "ok" and truth and truth.get("status") == "ok":
            entry["error"] = {
                "allocated": signed_error(engine["allocated"], truth["allocated"]),
                "reserved": signed_error(engine["reserved"], truth["reserved"]),
            }
        out.append(entry)
    return out


def _result(
    ctx: Context,
    rows: List[Dict[str, Any]],
    truths: Dict[str, Any],
    skipped: Dict[str, str],
    cc: Optional[str],
    blas: BlasWorkspaces,
    context: int,
) -> Dict[str, Any]:
    ok = [r for r in rows if r["status"] == "ok" and r["allocator"] == "default"]
    expandable = [r for r in rows if r["status"] == "ok" and r["allocator"] == EXPANDABLE]
    engine = _engine_rows(truths, rows)
    summary = {kind: error_summary(r["error"][kind] for r in ok) for kind in ("allocated", "reserved", "process")}
    engine_summary = {
        kind: error_summary((e.get("error") or {}).get(kind) for e in engine) for kind in ("allocated", "reserved")
    }
    a, r = summary["allocated"], summary["reserved"]
    met = (
        None
        if ctx.dry_run or not a["n"]
        else {
            "allocated_median": a["median_abs"] <= TARGETS["allocated_median_abs"],
            "allocated_max": a["max_abs"] <= TARGETS["allocated_max_abs"],
            "reserved_max": r["max_abs"] <= TARGETS["reserved_max_abs"],
        }
    )
    return {
        "description": "traced prediction (fake tensors, no GPU) vs max_memory_allocated / max_memory_reserved of "
        "real steps 2-3 and NVML's per-process figure; signed error = (predicted - truth) / truth",
        "compute_capability": cc,
        "cublas_workspace_bytes": blas.cublas,
        "cublaslt_workspace_bytes": {"kept": blas.lt, "per_call": blas.lt_per_call},
        "context_estimate": context,
        "context_measured_at_start": truths["context_at_start"],
        "architectures": sorted({r["arch"] for r in rows}),
        "skipped": skipped,
        "rows": rows,
        "summary": summary,
        "expandable_summary": {
            "configuration": "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
            **{kind: error_summary(r["error"][kind] for r in expandable) for kind in ("allocated", "reserved")},
        },
        "targets": TARGETS,
        "targets_met": met,
        "measured_engine": engine,
        "measured_engine_summary": engine_summary,
        "problems": truths["problems"],
        "counts": {s: sum(1 for x in rows if x["status"] == s) for s in sorted({x["status"] for x in rows})},
    }


def main() -> None:
    if "--measure" in sys.argv:
        parser = argparse.ArgumentParser()
        parser.add_argument("--measure", required=True)
        parser.add_argument("--result", type=Path, required=True)
        parser.add_argument("--seconds", type=float, required=True)
        parser.add_argument("--blas", required=True)  # BlasWorkspaces as JSON
        parser.add_argument("--allocator", default="default", choices=("default", EXPANDABLE))
        parser.add_argument("--dry-run", action="store_true")
        args = parser.parse_args()
        blas = BlasWorkspaces(**json.loads(args.blas))
        measure(args.measure.split(","), args.dry_run, args.result, time.time() + args.seconds, blas, args.allocator)
        return
    ctx = section_context(__doc__.splitlines()[0])
    result = run(ctx)
    write_result(ctx, NAME, result)
    s = result["summary"]
    print(
        f"estimator: {result['counts']}; allocated median |err| {s['allocated']['median_abs']}, "
        f"reserved max |err| {s['reserved']['max_abs']}",
        flush=True,
    )


if __name__ == "__main__":
    main()
