"""Section `distributed`: the per-rank estimate for DDP and FSDP at world size 1, against real wrapped steps.

Prediction: `analyze(world_size=1, strategy="ddp" | "fsdp", target=<this GPU>)` (traced; per-rank figures).
Truth: one process group of one rank (NCCL), the model wrapped in DistributedDataParallel or FSDP2's
`fully_shard` (the root module), three AdamW steps; `max_memory_allocated` / `max_memory_reserved` of steps
2-3 over an emptied baseline. At world size 1 nothing is sharded and no gradient is all-reduced across
ranks, so only the wrapper's own cost on one rank is checked; see UNCHECKABLE for what needs more GPUs.

Dry run (CPU): a gloo group on the CPU, the same wrapping and steps; no CUDA allocator, so the truth is
recorded as unavailable and only the code path and the prediction are exercised.
"""

from __future__ import annotations

import copy
import gc
import socket
import time
from typing import Any, Dict, List, Optional

from benchmarks.gpu.common import (
    Context,
    NvmlTruth,
    one_line,
    planned_for,
    section_context,
    signed_error,
    write_result,
)

NAME = "gpu_distributed"
STRATEGIES = ("ddp", "fsdp")
UNCHECKABLE = [
    "DDP's second copy of the gradients in its buckets (analyze adds it only at world size > 1)",
    "the 1/n shares of parameters, gradients and optimizer state under FSDP / ZeRO at world size n > 1",
    "FSDP's all-gathered largest layer during forward and backward (world size > 1)",
    "NCCL's communication buffers (not modelled by analyze at any world size)",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wrap(model: Any, strategy: str, device: Any) -> Any:
    from torch.nn.parallel import DistributedDataParallel

    if strategy == "ddp":
        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    fully_shard(model, mesh=init_device_mesh(device.type, (1,)))
    return model


def _steps(built: Any, batch: int, strategy: str, device: Any) -> Optional[Dict[str, int]]:
    """Three wrapped AdamW steps; CUDA peaks of steps 2-3 over the baseline (None on the CPU)."""
    import torch

    from gpumem_kernel.analysis import clear_cublas_workspaces

    cuda = device.type == "cuda"
    if cuda:
        gc.collect()
        clear_cublas_workspaces()
        torch.cuda.empty_cache()
        base_a, base_r = torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)
    model = _wrap(copy.deepcopy(built.model).to(device), strategy, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    for step in (1, 2, 3):
        if step == 2 and cuda:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        data = built.make_batch(batch, False).to(device)
        out = model(data)
        built.loss(out, data).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if not cuda:
        return None
    torch.cuda.synchronize(device)
    return {
        "allocated": torch.cuda.max_memory_allocated(device) - base_a,
        "reserved": torch.cuda.max_memory_reserved(device) - base_r,
    }


def _predict(built: Any, batch: int, strategy: str, gpu: Dict[str, Any]) -> Dict[str, Any]:
    from gpumem_kernel.analysis import analyze

    where = planned_for(gpu.get("name"), gpu.get("memory_total") or "80GiB")
    report = analyze(
        built.model,
        batch_size=batch,
        input=lambda b: built.make_batch(b, False),
        loss=built.loss,
        optimizer="adamw",
        world_size=1,
        strategy=strategy,
        **where,
    )
    d = report.distributed
    return {
        "engine": report.engine,
        "allocated": report.peak_allocated_bytes,
        "reserved": report.peak_reserved_bytes,
        "per_rank": None
        if d is None
        else {
            "parameters": d.parameters_bytes,
            "gradients": d.gradients_bytes,
            "optimizer": d.optimizer_bytes,
            "extra": d.extra_bytes,
            "peak": d.peak_bytes,
        },
        "planned_for": where,
    }


def _one(arch: str, strategy: str, ctx: Context, device: Any, gpu: Dict[str, Any]) -> Dict[str, Any]:
    from benchmarks.gpu import models

    row: Dict[str, Any] = {"arch": arch, "strategy": strategy}
    started = time.perf_counter()
    try:
        built = models.build(arch, ctx.dry_run)
        batch = built.batches[1]
        row.update(batch=batch, predicted=_predict(built, batch, strategy, gpu))
        truth = _steps(built, batch, strategy, device)
        row["truth"] = truth or "no CUDA allocator on the CPU: the wrapped steps ran, nothing to compare"
        if truth:
            row["error"] = {k: signed_error(row["predicted"][k], truth[k]) for k in ("allocated", "reserved")}
        row["status"] = "ok"
    except Exception as exc:  # e.g. FSDP2 missing from an old torch: recorded, the next one runs
        row.update(status="failed", reason=one_line(exc))
    row["seconds"] = round(time.perf_counter() - started, 2)
    return row


def run(ctx: Context) -> Dict[str, Any]:
    import torch
    import torch.distributed as dist

    nvml = NvmlTruth()
    facts = (nvml.facts().get("gpus") or [{}])[0]
    device = torch.device("cpu") if ctx.dry_run else torch.device("cuda", 0)
    if not ctx.dry_run:
        torch.cuda.set_device(device)
    archs: List[str] = ["MLP"] if ctx.dry_run else ["nanoGPT", "U-Net"]
    dist.init_process_group(
        "gloo" if ctx.dry_run else "nccl", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1
    )
    try:
        rows = [_one(a, s, ctx, device, facts) for a in archs for s in STRATEGIES if ctx.left() > 5]
    finally:
        dist.destroy_process_group()
    return {
        "description": "analyze(world_size=1, strategy=...) per-rank figures vs DDP / FSDP2-wrapped AdamW steps "
        "in a one-rank process group",
        "world_size": 1,
        "rows": rows,
        "not_checkable_on_one_gpu": UNCHECKABLE,
    }


def main() -> None:
    ctx = section_context(__doc__.splitlines()[0])
    result = run(ctx)
    write_result(ctx, NAME, result)
    print("distributed: " + ", ".join(f"{r['arch']}/{r['strategy']} {r['status']}" for r in result["rows"]), flush=True)


if __name__ == "__main__":
    main()
