"""Checking analyze()'s arguments: each bad one is a ValueError with a one-line message. torch is imported
inside functions only."""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple, Union

# the named kinds model_copy.make_optimizer builds (its OPTIMIZER_KINDS); bitsandbytes' are modelled without it
OPTIMIZERS = (
    "adamw",
    "adam",
    "sgd",
    "sgd-momentum",
    "adam8bit",
    "adamw8bit",
    "paged-adamw8bit",
    "paged-adamw",
    "adafactor",
)
# other spellings, Hugging Face TrainingArguments.optim's among them (underscores read as dashes)
OPTIMIZER_ALIASES = {
    "sgdm": "sgd-momentum",
    "momentum": "sgd-momentum",
    "adam-8bit": "adam8bit",
    "adamw-8bit": "adamw8bit",
    "adamw-bnb-8bit": "adamw8bit",
    "paged-adamw-8bit": "paged-adamw8bit",
    "paged-adamw-32bit": "paged-adamw",
}
STRATEGIES = ("ddp", "fsdp", "zero1", "zero2", "zero3")
AMP_MODES = ("fp16", "bf16")


def check_model(model: Any) -> None:
    import torch

    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, not {type(model).__name__}")
    if not any(True for _ in model.parameters()):
        raise ValueError(f"{type(model).__name__} has no parameters: nothing to train")


def positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def parse_shape(value: Any) -> Tuple[int, ...]:
    """(3, 224, 224), [512], '3x224x224', '512', '(3,224,224)', '(512,)' -> a shape without the batch dimension."""
    if isinstance(value, str):
        text = value.strip()
        if text[:1] + text[-1:] in ("()", "[]"):  # the tuple form a hint or a Python user writes
            text = text[1:-1]
        parts = text.lower().replace("×", "x").replace(",", "x").split("x")
        try:
            value = tuple(int(p) for p in parts if p.strip())
        except ValueError:
            raise ValueError(f"bad input shape {value!r}: write e.g. 3x224x224, (3,224,224) or 512") from None
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    if (
        not isinstance(value, (tuple, list))
        or not value
        or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in value)
    ):
        raise ValueError(f"bad input shape {value!r}: a tuple of positive sizes without the batch, e.g. (3, 224, 224)")
    return tuple(value)


def check_choice(value: Optional[str], choices: Sequence[str], name: str) -> Optional[str]:
    if value is None:
        return None
    text = str(value).lower()
    if text not in choices:
        raise ValueError(f"unknown {name} {value!r}; use one of {', '.join(choices)}")
    return text


def amp_mode_of(amp: Any) -> Optional[str]:
    if amp in (None, False, "off", "none", "fp32"):
        return None
    if amp is True:
        return "fp16"
    text = str(amp).lower().replace("float16", "fp16").replace("bfloat16", "bf16")
    return check_choice(text, AMP_MODES, "amp mode")


def optimizer_kind(optimizer: Any) -> Union[str, Any]:
    import torch

    if isinstance(optimizer, torch.optim.Optimizer):
        return optimizer
    if isinstance(optimizer, str):
        kind = optimizer.lower().replace("_", "-")
        kind = OPTIMIZER_ALIASES.get(kind, kind)
        if kind in OPTIMIZERS:
            return kind
    raise ValueError(f"unknown optimizer {optimizer!r}; use {', '.join(OPTIMIZERS)} or an optimizer object")
