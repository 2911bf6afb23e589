"""The steps that make the training step smaller: batch size, evaluation batch, gradient accumulation, mixed
precision, input size, gradient checkpointing, a smaller model."""

from __future__ import annotations

import math
import re
from typing import List, Optional, Tuple

from gpumem_kernel.oom.diagnosis import Diagnosis
from gpumem_kernel.oom.step import Step
from gpumem_kernel.render.snippets import LoopNames, accumulation_loop
from gpumem_kernel.render.units import human


def suggested_batch(last_recommendation: Optional[int], batch_size: Optional[int]) -> Tuple[Optional[int], str]:
    """(new batch size, why): the last %gpumem analyze recommendation if it is below the batch that
    failed, else half the current batch, else None."""
    if last_recommendation and (batch_size is None or last_recommendation < batch_size):
        return last_recommendation, "the last %gpumem analyze recommendation"
    if batch_size:
        return max(1, batch_size // 2), f"half of {batch_size}"
    return None, "half of your current batch"


def _count(n: int) -> str:
    for factor, suffix in ((1e9, " B"), (1e6, " M")):
        if n >= factor:
            return f"{n / factor:.1f}{suffix}"
    return f"{n:,}"


def batch_steps(
    d: Diagnosis, new_batch: Optional[int], why: str, batch: Optional[int], hint: Optional[str] = None
) -> List[Step]:
    """The batch size and the evaluation batch. `hint`: with no analysis for the model that failed, the magic
    that computes the batch that fits it."""
    if new_batch is None:
        title, detail = "Halve the batch size", "Half of your current batch is a good first try."
    elif batch is not None and batch <= 1:
        title, detail = "Batch size is already 1", "Use gradient accumulation, smaller inputs or the steps below."
    else:
        title = f"Reduce the batch size to {new_batch}"
        where = f" (found in `{d.batch_size_source}`)" if d.batch_size_source and batch else ""
        detail = f"{new_batch} is {why}{where}."
        if batch and batch >= 4:
            detail += (
                f" Or step down by a quarter at a time: {batch} → {max(1, batch * 3 // 4)} → {max(1, batch // 2)}."
            )
    detail += " Rebuild the DataLoader with the new batch_size; drop_last=True keeps every batch the same size."
    if hint is not None and (batch is None or batch > 1):
        detail += f" {hint}"
    return [Step("batch-size", title, detail, None), _eval_batch_step(d, new_batch, batch)]


EVAL_BATCH_RATIO = 1.3  # the evaluation batch at most 1.3× the training batch (the memory guide's rule)
_EVAL_LOADER_WORDS = ("val", "test", "eval", "pred")


def _eval_batch_step(d: Diagnosis, new_batch: Optional[int], batch: Optional[int]) -> Step:
    """The evaluation batch: advice for any OOM, and the first step with its cap when the OOM happened in
    evaluation (`d.evaluation`)."""
    if d.evaluation is None:
        eval_cap = f" (at most {math.floor((new_batch or batch) * EVAL_BATCH_RATIO)})" if (new_batch or batch) else ""
        return Step(
            "eval-batch-size",
            "Keep the evaluation batch small",
            "If it failed during evaluation or inference: run it under torch.no_grad() or torch.inference_mode() "
            f"so no activations are kept, and keep its batch at most 1.3× the training batch{eval_cap}.",
            None,
        )
    cap = math.floor(batch * EVAL_BATCH_RATIO) if batch else None
    title = f"Reduce the evaluation batch to at most {cap}" if cap else "Reduce the evaluation batch"
    detail = (
        f"This out-of-memory error happened in evaluation: {d.evaluation}. Gradients were off, so no activations "
        "were kept for backward: the evaluation batch (and its input size) decides the memory. "
    )
    if cap:
        where = f" (found in `{d.batch_size_source}`)" if d.batch_size_source and batch == d.batch_size else ""
        detail += f"Keep it at most 1.3× the training batch of {batch}{where}: {cap}."
    else:
        detail += "Keep it at most 1.3× the training batch; halve it until it fits."
    detail += _eval_loader_sizes(d, cap)
    detail += " Rebuild the evaluation DataLoader (or per_device_eval_batch_size, generate()'s batch) with it."
    return Step("eval-batch-size", title, detail, None)


def _eval_loader_sizes(d: Diagnosis, cap: Optional[int]) -> str:
    """The evaluation DataLoaders found in the namespace whose batch is above the cap (or any, without one)."""
    found = [
        loader
        for loader in d.loaders
        if loader.batch_size
        and any(word in loader.name.lower() for word in _EVAL_LOADER_WORDS)
        and (cap is None or loader.batch_size > cap)
    ]
    if not found:
        return ""
    listed = ", ".join(f"`{loader.name}` has batch_size {loader.batch_size}" for loader in found[:4])
    return f" In your namespace {listed}."


def accumulation_code(d: Diagnosis, new_batch: Optional[int], batch: Optional[int]) -> Tuple[int, str]:
    n = d.names
    if new_batch and batch and batch > new_batch:
        steps = math.ceil(batch / new_batch)
        head = [
            f"Gradient accumulation: batches of {new_batch}, one optimizer step every {steps} batches "
            f"= effective batch {new_batch * steps}.",
            f"Rebuild {n.loader} with batch_size={new_batch} first.",
        ]
    else:
        steps = 2
        head = [
            "Gradient accumulation: make each batch smaller (e.g. half), then set",
            "ACCUM_STEPS = old batch size / new batch size to keep the effective batch.",
        ]
    # the loop keeps the user's mixed precision: without it, activations would take twice the memory
    amp = None if d.amp != "likely" else ("bf16" if d.bf16_supported else "fp16")
    new_torch = _torch_at_least(d.torch_version, 2, 3)
    names = LoopNames(
        model=n.model,
        optimizer=n.optimizer,
        loader=n.loader,
        criterion=n.criterion,
        device=n.device,
        device_type='"cuda"',
        steps="ACCUM_STEPS",
        new_scaler='torch.amp.GradScaler("cuda")' if new_torch else "torch.cuda.amp.GradScaler()",
    )
    code = accumulation_loop(steps, amp, names, comments=head)
    return steps, code


def _torch_at_least(version: Optional[str], major: int, minor: int) -> bool:
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return bool(match) and (int(match.group(1)), int(match.group(2))) >= (major, minor)


def amp_step(d: Diagnosis) -> Step:
    n = d.names
    loop = (
        f"for inputs, targets in {n.loader}:\n"
        f"    inputs, targets = inputs.to({n.device}), targets.to({n.device})\n"
        f"    {n.optimizer}.zero_grad(set_to_none=True)\n"
    )
    if d.bf16_supported:
        title = "Train in mixed precision (bfloat16)"
        code = (
            "import torch\n\n# Mixed precision with bfloat16 (this GPU supports it): eligible ops run in 16 bits;\n"
            "# bfloat16 has float32's range, so no GradScaler is needed.\n"
            + loop
            + '    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):\n'
            f"        loss = {n.criterion}({n.model}(inputs), targets)\n"
            "    loss.backward()\n"
            f"    {n.optimizer}.step()\n"
        )
    else:
        title = "Train in mixed precision (float16 with GradScaler)"
        scaler = (
            'torch.amp.GradScaler("cuda")' if _torch_at_least(d.torch_version, 2, 3) else "torch.cuda.amp.GradScaler()"
        )
        code = (
            "import torch\n\n# Mixed precision with float16: eligible ops run in 16 bits; GradScaler keeps small\n"
            "# gradients from underflowing. (On compute capability 8.0+ prefer dtype=torch.bfloat16, no scaler.)\n"
            f"scaler = {scaler}\n" + loop + '    with torch.autocast(device_type="cuda", dtype=torch.float16):\n'
            f"        loss = {n.criterion}({n.model}(inputs), targets)\n"
            "    scaler.scale(loss).backward()\n"
            f"    scaler.step({n.optimizer})\n"
            "    scaler.update()\n"
        )
    if d.amp == "likely":
        detail = (
            "You may use it already (a GradScaler or a half-precision model exists); if you are not using "
            "autocast, activations take about half the memory with it."
        )
    else:
        detail = "If you are not using autocast, activations take about half the memory with it."
    return Step("mixed-precision", title, detail, "insert-cell", code=code)


def inputs_step(d: Diagnosis) -> Step:
    size = d.input_size
    if size is None:
        detail = (
            "Activation memory grows with the pixels per image and the tokens per sequence: e.g. images "
            "224 → 192 px (−27 % pixels), sequences 512 → 384 tokens."
        )
    elif size.kind == "image":
        smaller = max(32, int(size.value * 0.86) // 32 * 32)
        saving = 1 - (smaller / size.value) ** 2
        detail = (
            f"`{size.name}` = {size.value} → {smaller}: {saving:.0%} fewer pixels per image, and about that "
            "much less activation memory."
        )
    else:
        smaller = max(64, int(size.value * 0.75) // 64 * 64)
        detail = (
            f"`{size.name}` = {size.value} → {smaller} tokens: activations shrink at least in proportion "
            "(attention scores quadratically)."
        )
    return Step("smaller-inputs", "Use smaller images or shorter sequences", detail, None)


_CHECKPOINT_WRAPPER = '''import torch
from torch.utils.checkpoint import checkpoint


class Checkpointed(torch.nn.Module):
    """Runs a block without keeping its activations; they are recomputed during backward."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, *args, **kwargs):
        if not torch.is_grad_enabled():
            return self.block(*args, **kwargs)
        return checkpoint(self.block, *args, use_reentrant=False, **kwargs)


'''


def checkpoint_step(d: Diagnosis) -> Step:
    m, name = d.model, d.names.model
    title, action = "Use gradient checkpointing", "insert-cell"
    if m is not None and m.checkpointing_on:
        return Step("grad-checkpointing", title, f"`{name}` already has gradient checkpointing on.", None)
    if m is not None and m.hf_checkpointing:
        code = (
            "# Gradient checkpointing (Hugging Face): activations are recomputed in backward instead of stored.\n"
            f"{name}.gradient_checkpointing_enable()\n"
        )
        return Step(
            "grad-checkpointing", title, "Less activation memory for roughly 20–30 % more compute.", action, code=code
        )
    head = (
        "# Gradient checkpointing: less activation memory for roughly 20-30% more compute.\n"
        "# Saved state_dict keys gain a '.block' part.\n"
    )
    if m is not None and m.blocks is not None:
        target = f"{name}.{m.blocks}" if m.blocks else name
        if m.blocks_kind == "Sequential":
            wrap = f"{target} = torch.nn.Sequential(*(Checkpointed(block) for block in {target}))\n"
        else:
            wrap = f"{target} = torch.nn.ModuleList(Checkpointed(block) for block in {target})\n"
        detail = (
            f"Wraps every layer of `{name}` ({m.blocks_kind})."
            if not m.blocks
            else f"Wraps every block of `{target}`, the largest repeated part of `{name}`."
        )
    else:
        wrap = (
            "# Wrap the model's repeated blocks, for example:\n"
            f"# {name}.layers = torch.nn.ModuleList(Checkpointed(b) for b in {name}.layers)\n"
        )
        detail = "Wrap the repeated blocks (layers) of your model."
    return Step(
        "grad-checkpointing",
        title,
        detail + " Less activation memory for roughly 20–30 % more compute.",
        action,
        code=head + _CHECKPOINT_WRAPPER + wrap,
    )


def model_step(d: Diagnosis) -> Step:
    m = d.model
    if m is not None:
        detail = (
            f"`{m.name}` ({m.type_name}, {_count(m.parameters)} parameters, {human(m.bytes)} of weights; "
            "gradients and optimizer state add 2–3× that in training). A smaller variant of the same family "
            "(e.g. resnet18 or mobilenet_v3_small, T5-small instead of T5-base) needs a fraction of it."
        )
    else:
        detail = (
            "Weights, gradients and optimizer state grow with the parameter count: a smaller variant of the "
            "same family (e.g. mobilenet_v3_small, T5-small) needs a fraction of the memory."
        )
    return Step("smaller-model", "Use a smaller model", detail, None)
