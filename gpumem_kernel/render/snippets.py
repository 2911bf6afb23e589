"""What the user copies or inserts into a notebook: a training configuration as YAML, and the training loop with
gradient accumulation.

Both are written once, here, in the kernel: the payloads carry the text (`config_yaml`, `accumulation_code`), the
console output prints it, and the browser copies or inserts it verbatim. The YAML is written by PyYAML, so it
always parses back; the user's own strings (model and device names) only ever reach comments, flattened to one
line. The loop keeps the user's mixed precision: autocast, and a GradScaler for float16.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence

AMP_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}  # the names PyTorch and training configs use
COMMENT_LIMIT = 120
# C0 controls, DEL, and what YAML reads as a line break (NEL, LS, PS): a comment must stay on its line
_BREAKS = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]+")


def comment_line(text: str, limit: int = COMMENT_LIMIT) -> str:
    """`text` as one line of a comment: control characters and line breaks become spaces, and it is cut."""
    flat = _BREAKS.sub(" ", str(text)).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def config_yaml(header: Sequence[str], sections: Mapping[str, Mapping[str, Any]]) -> str:
    """`# header` lines, then `sections` (e.g. data: {batch_size: 64}, training: {use_amp: true}) as YAML in the
    given key order."""
    import yaml

    comments = "".join(f"# {comment_line(line)}\n" for line in header)
    body = {name: dict(values) for name, values in sections.items()}
    return comments + yaml.safe_dump(body, sort_keys=False, default_flow_style=False, allow_unicode=True)


@dataclass(frozen=True)
class LoopNames:
    """The names the inserted loop uses: the user's own where known, so it runs as it is."""

    model: str = "model"
    optimizer: str = "optimizer"
    loader: str = "train_loader"
    criterion: str = "criterion"
    device: str = "device"  # an expression `.to()` takes: a variable, or '"cuda"'
    device_type: str = "device.type"  # an expression that is "cuda" or "cpu", for autocast and the GradScaler
    steps: str = "accumulation_steps"  # the variable holding the number of micro-batches per optimizer step
    new_scaler: str = ""  # how to make a GradScaler; default torch.amp.GradScaler(device_type) (torch >= 2.3)


def accumulation_loop(
    steps: int,
    amp: Optional[str],
    names: LoopNames = LoopNames(),
    *,
    comments: Sequence[str] = (),
    setup: Sequence[str] = (),
) -> str:
    """A training loop that steps the optimizer every `steps` batches, the loss averaged over them.

    amp: None, "fp16" (autocast to float16 with a GradScaler, which keeps small gradients from underflowing)
    or "bf16" (autocast to bfloat16: float32's range, no scaler). `comments` open the cell (one line each);
    `setup` lines (e.g. building the loader) come after `import torch`.
    """
    if amp is not None and amp not in AMP_DTYPES:
        raise ValueError(f"amp must be None, 'fp16' or 'bf16', got {amp!r}")
    n = names
    scaled = amp == "fp16"
    lines: List[str] = [f"# {comment_line(line)}" for line in comments]
    lines += ["import torch", *setup, f"{n.steps} = {int(steps)}"]
    if scaled:
        lines.append(f"scaler = {n.new_scaler or f'torch.amp.GradScaler({n.device_type})'}")
    lines += [
        "",
        f"{n.model}.train()",
        f"{n.optimizer}.zero_grad(set_to_none=True)",
        f"for step, (inputs, targets) in enumerate({n.loader}):",
        f"    inputs, targets = inputs.to({n.device}, non_blocking=True), targets.to({n.device}, non_blocking=True)",
    ]
    loss = f"loss = {n.criterion}({n.model}(inputs), targets) / {n.steps}  # averaged over the effective batch"
    if amp is not None:
        lines.append(f"    with torch.autocast(device_type={n.device_type}, dtype=torch.{AMP_DTYPES[amp]}):")
        lines.append(f"        {loss}")
    else:
        lines.append(f"    {loss}")
    lines.append("    scaler.scale(loss).backward()" if scaled else "    loss.backward()")
    lines.append(f"    if (step + 1) % {n.steps} == 0:")
    if scaled:
        lines += [f"        scaler.step({n.optimizer})", "        scaler.update()"]
    else:
        lines.append(f"        {n.optimizer}.step()")
    lines.append(f"        {n.optimizer}.zero_grad(set_to_none=True)")
    return "\n".join(lines) + "\n"
