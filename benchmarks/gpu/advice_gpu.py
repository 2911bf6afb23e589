"""Section `advice`: the rows of "what makes it fit" against real steps with each lever applied on this GPU.

GPT-2 small (256 tokens, the middle batch, fp32, AdamW) is analysed for this GPU's generation within too little
memory to fit (`target` this GPU, `memory` MEMORY), with the advice: each row traces the step with one lever or a
combination (`AdviceRow.changes`: the request's fields it sets). The rows whose changes a single GPU can apply for
real (mixed precision, activation checkpointing, another optimizer of torch's, a smaller batch, gradient
accumulation) then run as real steps here, through the estimator section's truth (steps 2-3 from an emptied cache),
and the row's allocated peak is compared with `max_memory_allocated`. Only those levers are traced (LEVERS): LoRA
and quantisation change the model, bitsandbytes' optimizers are not on the image, sharding needs more GPUs and the
GPU row another card; a row the check still cannot apply says why.

Dry run (CPU): the MLP within 1 MiB; the truths are the estimator section's CPU stand-in (a real CPU step's tracked
bytes through the allocator model).
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional

from benchmarks.gpu.common import Context, NvmlTruth, one_line, section_context, signed_error, write_result

NAME = "gpu_advice"
ARCH, DRY_ARCH = "GPT-2", "MLP"
MEMORY, DRY_MEMORY = "2GiB", "1MiB"
# the levers whose changes a real step on one GPU takes as they are (the others change the model, need bitsandbytes,
# more GPUs or another GPU): only these are traced, which keeps the advice within the section's seconds
LEVERS = ("micro-batch", "checkpointing", "amp-bf16", "amp-fp16", "adafactor")
# the request fields a real step on one GPU can take as they are
APPLICABLE = {"amp", "checkpointing", "optimizer", "batch_size", "grad_accum"}
TORCH_OPTIMIZERS = {"adamw", "adam", "sgd", "sgd-momentum", "adafactor"}
TARGET = 0.05  # a row is as good as the estimator's step: its per-configuration target


def checkable(changes: Dict[str, Any]) -> Optional[str]:
    """None when a real step on this GPU can apply the row's `changes`; else why not."""
    other = sorted(set(changes) - APPLICABLE)
    if other:
        return f"changes {', '.join(other)}: not a step one GPU runs as it is"
    optimizer = changes.get("optimizer")
    if optimizer is not None and optimizer not in TORCH_OPTIMIZERS:
        return f"optimizer {optimizer}: bitsandbytes' (modelled in the trace), not on the image"
    return None


def analysed(dry: bool, gpu_name: Optional[str]) -> Dict[str, Any]:
    """The analysis with its advice, traced on the CPU for this GPU's generation within MEMORY."""
    from benchmarks.gpu import models
    from gpumem_kernel.analysis import AnalysisRequest, advise, analyze

    arch = DRY_ARCH if dry else ARCH
    built = models.build(arch, dry)
    batch = built.batches[1]
    target = None
    if gpu_name:
        from benchmarks.gpu.common import planned_for

        target = planned_for(gpu_name, None).get("target")
    request = AnalysisRequest(
        batch_size=batch,
        input=lambda b: built.make_batch(b, False),
        loss=built.loss,
        optimizer="adamw",
        target=target,
        memory=DRY_MEMORY if dry else MEMORY,
    )
    started = time.perf_counter()
    report = analyze(built.model, request)
    advice = advise(built.model, request, report, only=LEVERS)
    return {
        "arch": arch,
        "built": built,
        "batch": batch,
        "report": report,
        "rows": list(advice.rows),
        "seconds": round(time.perf_counter() - started, 1),
    }


def truth(
    built: Any, batch: int, changes: Dict[str, Any], blas_fields: Dict[str, Any], dry: bool, nvml: NvmlTruth
) -> Dict[str, Any]:
    """The step with `changes` applied, run for real: on CUDA the estimator section's truth, else its stand-in."""
    from benchmarks.gpu.estimator import cpu_truth, cuda_truth
    from gpumem_kernel.analysis import TracePlan

    plan = TracePlan(
        built.model,
        changes.get("optimizer", "adamw"),
        built.make_batch,
        built.loss,
        amp=changes.get("amp"),
        grad_accum=changes.get("grad_accum", 1),
        checkpointing=bool(changes.get("checkpointing", False)),
        **blas_fields,
    )
    at = int(changes.get("batch_size", batch))
    return cpu_truth(plan, at) if dry else cuda_truth(plan, at, nvml)


def run(ctx: Context, nvml: NvmlTruth) -> Dict[str, Any]:
    from benchmarks.gpu.estimator import device_facts

    gpu = (nvml.facts().get("gpus") or [{}])[0]
    try:
        got = analysed(ctx.dry_run, None if ctx.dry_run else gpu.get("name"))
    except Exception as exc:
        return {"status": "failed", "reason": one_line(exc), "rows": []}
    # the cuBLAS workspaces of this GPU and torch, as the estimator section's truths have them
    blas_fields = {} if ctx.dry_run else device_facts(nvml)[1].plan_fields()
    analysed_row = {"key": "analysed", "lever": "the analysed step", "changes": {}}
    rows: List[Dict[str, Any]] = [{**analysed_row, "peak_allocated_bytes": int(got["report"].peak_allocated_bytes)}]
    rows += [
        {"key": r.key, "lever": r.lever, "changes": dict(r.changes), "peak_allocated_bytes": r.peak_allocated_bytes}
        for r in got["rows"]
    ]
    for row in rows:
        why = checkable(row["changes"])
        if why is not None:
            row["truth"] = {"status": "not checked", "reason": why}
        elif ctx.left() < 15:
            row["truth"] = {"status": "not measured", "reason": "time budget"}
        else:
            try:
                row["truth"] = truth(got["built"], got["batch"], row["changes"], blas_fields, ctx.dry_run, nvml)
            except Exception as exc:  # one lever the real step cannot take is a result, not a crash
                row["truth"] = {"status": "failed", "reason": one_line(exc)}
        measured = row["truth"].get("allocated") if row["truth"].get("status") == "ok" else None
        row["error"] = signed_error(row["peak_allocated_bytes"], measured)
        row["met"] = None if row["error"] is None or ctx.dry_run else abs(row["error"]) <= TARGET
        print(f"advice: {row['key']}: {row['truth'].get('status')} error {row['error']}", flush=True)
    return {
        "description": "the rows of what makes it fit (GPT-2, fp32, AdamW, planned within too little memory) vs "
        "real steps with each lever on this GPU",
        "status": "ok",
        "arch": got["arch"],
        "batch": got["batch"],
        "memory": DRY_MEMORY if ctx.dry_run else MEMORY,
        "analysis_seconds": got["seconds"],
        "target": {"allocated_max_abs": TARGET},
        "rows": rows,
    }


def main() -> None:
    ctx = section_context(__doc__.splitlines()[0])
    nvml = NvmlTruth()
    write_result(ctx, NAME, run(ctx, nvml), nvml)


if __name__ == "__main__":
    main()
