"""One zoo entry: a public architecture, how to build it without a download, its input and batches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

FULL = "full size"


@dataclass(frozen=True)
class Entry:
    name: str
    family: str  # huggingface | timm | torchvision | ultralytics | diffusers
    package: str  # the import it needs; the entry is skipped, with the reason, when it is missing
    build: Callable[[], Any]  # the model, from a config or a constructor: never a download
    input: Any  # as analyze(input=...): a shape without the batch, or a callable batch_size -> batch
    input_text: str  # what the input is, for the table: "tokens (128,) + mask", "images (3,224,224)"
    batch: int = 2
    eval_batch: int = 4
    loss: Optional[Callable[[Any, Any], Any]] = None  # None: the model's own loss, else analyze's default
    size: str = FULL  # FULL, or how the config was shrunk (the full size would take too long on 2 cores)
