"""Section `llm`: LitGPT's LoRA steps (phi-1.5, StableLM-Alpha-3B, Llama-2-7B) run on this GPU against the analysis.

The rows are benchmarks/published/source_litgpt.py's bf16 rows (its quantised rows need bitsandbytes, which the
GPU image lacks): LitGPT's own model and loss, LoRA r=8 on query and value, bf16-true, AdamW on the adapters, the
longest Alpaca sample. Truth: `torch.cuda.max_memory_allocated()` over three steps of a model built on this GPU
(random weights), from an emptied cache and cleared cuBLAS workspaces: the source's own measure. Prediction:
the same step traced by `analyze()` planned for this GPU and this process's torch and CUDA, in CPU workers that
see no GPU. The published figure (A100, torch 2.1) is recorded beside them as context, not as the truth.

Llama 2's published memory per sample is 9 % above the trace's (benchmarks/gpu/litgpt-llama-per-sample.md): the
rows at micro batch 1 and 2 give this GPU's per sample against the trace's, and the forward of a 2-layer Llama-2-7B
is walked for what each autograd node saves (storage bytes, each storage once, parameters left out), on CUDA and
on the CPU, so that the node that keeps more on CUDA is named.

Dry run (CPU): the phi-1.5 and Llama rows cut to one layer and 64 tokens; the prediction and the saved-tensor walk
run on the CPU; there is no allocator truth.
"""

from __future__ import annotations

import gc
import os
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Dict, List, Optional

from benchmarks.gpu.common import (
    cpu_pool,
    emptied_baseline,
    Context,
    NvmlTruth,
    is_oom,
    one_line,
    planned_for,
    section_context,
    signed_error,
    write_result,
)

NAME = "gpu_llm"
ROWS = (
    "phi-1_5 bf16 mb1",
    "phi-1_5 bf16 mb4",
    "stablelm-base-alpha-3b bf16 mb1",
    "Llama-2-7b-hf bf16 mb1",
    "Llama-2-7b-hf bf16 mb2",
)
DRY_ROWS = ("phi-1_5 bf16 mb1", "Llama-2-7b-hf bf16 mb1")
# the same blocks, small: one layer, 64 tokens, a narrow width and vocabulary (a CI machine's seconds and memory)
DRY_SHAPE: Dict[str, Any] = dict(
    length=64, n_layer=1, n_embd=256, n_head=4, n_query_groups=4, intermediate_size=512, padded_vocab_size=1024
)
STEPS = 3
TARGET = 0.05  # the published rows' target (source_litgpt.TARGET)
WALK_MODEL = "Llama-2-7b-hf"
WALK_LAYERS = 2


def _row(name: str) -> Any:
    from benchmarks.published import source_litgpt as lit

    return next(r for r in lit.ROWS if r.name == name)


def _shape(dry: bool) -> Dict[str, Any]:
    return dict(DRY_SHAPE) if dry else {}


# --- prediction: CPU workers ------------------------------------------------------------------------------------


def predict(name: str, dry: bool, planned: Dict[str, Any]) -> Dict[str, Any]:
    """analyze() of the row's step, planned for this GPU and this torch; a failure is a result."""
    from benchmarks.published import source_litgpt as lit

    started = time.perf_counter()
    try:
        report = lit.analyse(_row(name), planned=planned, **_shape(dry))
    except Exception as exc:
        return {"status": "failed", "reason": one_line(exc)}
    return {
        "status": "ok",
        "engine": report.engine,
        "allocated": int(report.peak_allocated_bytes),
        "reserved": int(report.peak_reserved_bytes),
        "seconds": round(time.perf_counter() - started, 1),
    }


# --- truth: real steps on this GPU ---------------------------------------------------------------------------


def measure(name: str) -> Dict[str, Any]:
    """The row's step, three times, on a model built on the GPU: the overall max_memory_allocated (and reserved)
    over an emptied baseline, and the cumulative peak after each step."""
    import torch

    from benchmarks.published import source_litgpt as lit

    row = _row(name)
    device = torch.device("cuda", torch.cuda.current_device())
    base_allocated, base_reserved, cleared = emptied_baseline(device)
    started = time.perf_counter()
    oom: Optional[str] = None
    peaks: List[int] = []
    model_bytes = 0
    try:
        model = lit.build(row.model, device="cuda")
        model_bytes = torch.cuda.memory_allocated(device) - base_allocated
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=lit.LR, weight_decay=lit.WEIGHT_DECAY)
        make = lit.batches(model.config.padded_vocab_size, lit.LONGEST[row.model])
        step = lit.make_step()
        for _ in range(STEPS):
            batch = tuple(t.to(device) for t in make(row.micro_batch))
            step(model, optimizer, batch)
            torch.cuda.synchronize(device)
            peaks.append(torch.cuda.max_memory_allocated(device) - base_allocated)
            del batch
    except RuntimeError as exc:
        if not is_oom(exc):
            raise
        oom = one_line(exc)
    result: Dict[str, Any] = (
        {"status": "out of memory", "reason": oom}
        if oom
        else {
            "status": "ok",
            "allocated": torch.cuda.max_memory_allocated(device) - base_allocated,
            "reserved": torch.cuda.max_memory_reserved(device) - base_reserved,
            "model_bytes": model_bytes,
            "peak_after_each_step": peaks,
            "baseline_allocated": base_allocated,
            "cublas_cleared": cleared,
            "seconds": round(time.perf_counter() - started, 1),
        }
    )
    model = optimizer = None  # noqa: F841 - the next row starts from an emptied cache
    gc.collect()
    torch.cuda.empty_cache()
    return result


# --- what the forward saves, per autograd node ------------------------------------------------------------------


def saved_by_node(loss: Any, exclude: set) -> Dict[str, int]:
    """Storage bytes each autograd node type saved for backward, each storage once; `exclude`: storages to leave
    out (the parameters and buffers, counted as the model's)."""
    import torch

    seen = set(exclude)
    sums: Dict[str, int] = {}
    stack = [loss.grad_fn]
    # id -> node: a node's Python object lives only while referenced, and a freed one's id is reused by the next
    # node read, which would then pass for visited; holding every node keeps each id its own
    visited: Dict[int, Any] = {}
    while stack:
        node = stack.pop()
        if node is None or id(node) in visited:
            continue
        visited[id(node)] = node
        for attr in dir(node):
            if not attr.startswith("_saved_"):
                continue
            try:
                value = getattr(node, attr)
            except Exception:  # a saved tensor freed or not exposed: nothing to count
                continue
            for tensor in value if isinstance(value, (tuple, list)) else (value,):
                if not isinstance(tensor, torch.Tensor):
                    continue
                storage = tensor.untyped_storage()
                key = (storage.data_ptr(), str(tensor.device))
                if key in seen or storage.nbytes() == 0:
                    continue
                seen.add(key)
                sums[node.name()] = sums.get(node.name(), 0) + storage.nbytes()
        stack += [n for n, _ in node.next_functions]
    return dict(sorted(sums.items(), key=lambda kv: -kv[1]))


def walk(device: str, dry: bool) -> Dict[str, Any]:
    """The forward (and loss) of a shortened Llama-2-7B at the longest sample, micro batch 1: what it saves."""
    import torch

    from benchmarks.published import source_litgpt as lit

    torch.manual_seed(0)
    shape = _shape(dry) if dry else {"n_layer": WALK_LAYERS}
    model = lit.build(WALK_MODEL, device=device, **shape)
    length = shape.get("length") or lit.LONGEST[WALK_MODEL]
    exclude = {(t.untyped_storage().data_ptr(), str(t.device)) for t in [*model.parameters(), *model.buffers()]}
    ids, targets = lit.batches(model.config.padded_vocab_size, length)(1)
    ids, targets = ids.to(device), targets.to(device)
    logits = [c.float() for c in model(ids, lm_head_chunk_size=128)]
    logits[-1] = logits[-1][..., :-1, :]
    from benchmarks.published.litgpt.utils import chunked_cross_entropy

    loss = chunked_cross_entropy(logits, targets[..., 1:])
    nodes = saved_by_node(loss, exclude)
    return {
        "device": device,
        "n_layer": shape["n_layer"],
        "length": length,
        "saved_bytes": sum(nodes.values()),
        "by_node": nodes,
    }


def _safe_walk(device: str, dry: bool) -> Dict[str, Any]:
    if device == "cpu" and not dry:  # about a TFLOP of bf16 matrix products: more than a trace worker's threads
        import torch

        torch.set_num_threads(max(2, (os.cpu_count() or 2) // 2))
    try:
        return {"status": "ok", **walk(device, dry)}
    except Exception as exc:
        return {"status": "failed", "reason": one_line(exc)}


def walk_difference(cuda: Dict[str, Any], cpu: Dict[str, Any]) -> Dict[str, Any]:
    """Per node name, CUDA's bytes minus the CPU's (non-zero ones), and the total per layer."""
    names = set(cuda.get("by_node", {})) | set(cpu.get("by_node", {}))
    diff = {n: cuda.get("by_node", {}).get(n, 0) - cpu.get("by_node", {}).get(n, 0) for n in names}
    diff = {n: d for n, d in sorted(diff.items(), key=lambda kv: -abs(kv[1])) if d}
    total = cuda.get("saved_bytes", 0) - cpu.get("saved_bytes", 0)
    return {"by_node": diff, "total": total, "per_layer": total / max(1, cuda.get("n_layer") or 1)}


# --- the section ---------------------------------------------------------------------------------------------


def per_sample(rows: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """Llama-2-7B's memory per sample (micro batch 2 less 1): this GPU's against the trace's and the source's."""
    by = {r["name"]: r for r in rows}
    one, two = by.get("Llama-2-7b-hf bf16 mb1"), by.get("Llama-2-7b-hf bf16 mb2")
    if not one or not two:
        return None

    def figure(key: str) -> Optional[int]:
        a, b = (one.get(key) or {}), (two.get(key) or {})
        if a.get("status") != "ok" or b.get("status") != "ok":
            return None
        return int(b["allocated"] - a["allocated"])

    truth, predicted = figure("truth"), figure("predicted")
    published = round((two["published_gb"] - one["published_gb"]) * 1e9)
    return {
        "truth": truth,
        "predicted": predicted,
        "published_a100_torch21": published,
        "error": signed_error(predicted, truth),
    }


def run(ctx: Context, nvml: NvmlTruth) -> Dict[str, Any]:
    names = DRY_ROWS if ctx.dry_run else ROWS
    gpu = (nvml.facts().get("gpus") or [{}])[0]
    planned: Dict[str, Any] = (
        {"memory": "80GiB", "torch_version": None, "cuda_version": None}
        if ctx.dry_run
        else {**planned_for(gpu.get("name"), gpu.get("memory_total")), "torch_version": None, "cuda_version": None}
    )
    futures: Dict[str, Future] = {}
    pool: Optional[ProcessPoolExecutor] = None
    inline: Dict[str, Dict[str, Any]] = {}
    if ctx.in_process:
        inline = {n: predict(n, True, planned) for n in names}
        inline["walk cpu"] = _safe_walk("cpu", True)
    else:
        pool = cpu_pool(min(len(names) + 1, 6), threads=2)
        futures = {n: pool.submit(predict, n, ctx.dry_run, planned) for n in names}
        futures["walk cpu"] = pool.submit(_safe_walk, "cpu", ctx.dry_run)
    truths: Dict[str, Dict[str, Any]] = {}
    for name in names:
        if ctx.dry_run:
            truths[name] = {"status": "not measured", "reason": "dry run: no CUDA allocator"}
        elif ctx.left() < 25:
            truths[name] = {"status": "not measured", "reason": "time budget"}
        else:
            try:
                truths[name] = measure(name)
            except Exception as exc:
                truths[name] = {"status": "failed", "reason": one_line(exc)}
        print(f"llm: {name}: truth {truths[name]}", flush=True)
    walk_cuda = (
        {"status": "not measured", "reason": "dry run: no CUDA"}
        if ctx.dry_run
        else _safe_walk("cuda", False)
        if ctx.left() > 15
        else {"status": "not measured", "reason": "time budget"}
    )

    def result(key: str) -> Dict[str, Any]:
        if key in inline:
            return inline[key]
        try:
            return futures[key].result(timeout=max(1.0, ctx.left() - 5))
        except FutureTimeout:
            return {"status": "not measured", "reason": "time budget"}
        except Exception as exc:  # a worker that died: its row says so
            return {"status": "failed", "reason": one_line(exc)}

    rows = []
    for name in names:
        row, truth, predicted = _row(name), truths[name], result(name)
        ok = truth.get("status") == "ok" and predicted.get("status") == "ok"
        error = signed_error(predicted.get("allocated"), truth.get("allocated")) if ok else None
        rows.append(
            {
                "name": name,
                "settings": row.settings() | ({"shortened": DRY_SHAPE} if ctx.dry_run else {}),
                "published_gb": row.published_gb,
                "truth": truth,
                "predicted": predicted,
                "error": error,
                "met": None if error is None else abs(error) <= TARGET,
            }
        )
    walk_cpu = result("walk cpu")
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)
    both = walk_cuda.get("status") == "ok" and walk_cpu.get("status") == "ok"
    return {
        "description": "LitGPT's LoRA bf16 rows as real steps on this GPU vs analyze() of the same step "
        "planned for this GPU and torch; Llama 2's saved tensors per autograd node on CUDA and the CPU",
        "planned": planned,
        "target": {"allocated_max_abs": TARGET},
        "rows": rows,
        "llama_per_sample": per_sample(rows),
        "saved_tensors": {
            "model": f"{WALK_MODEL}, {WALK_LAYERS} layers, micro batch 1, the longest sample",
            "cuda": walk_cuda,
            "cpu": walk_cpu,
            "cuda_minus_cpu": walk_difference(walk_cuda, walk_cpu) if both else None,
        },
    }


def main() -> None:
    ctx = section_context(__doc__.splitlines()[0])
    nvml = NvmlTruth()
    result = run(ctx, nvml)
    write_result(ctx, NAME, result, nvml)
    for row in result["rows"]:
        print(f"llm: {row['name']}: error {row['error']}", flush=True)


if __name__ == "__main__":
    main()
