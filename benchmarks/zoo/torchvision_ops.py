"""Make torchvision importable where its compiled ops cannot load (a CUDA wheel next to a CPU torch).

PyPI has no CPU torchvision: the wheel matching torch's release links libtorch_cuda, so on a CPU-only torch
`torchvision/_C.so` does not load, and `import torchvision` then fails in its own `_meta_registrations`
(`register_fake("torchvision::nms")` needs the operator to exist). Declaring the two operators' schemas
first lets torchvision import; nms and qnms then have torchvision's own fake kernels (enough for FakeTensors)
and no real kernel (ops.nms's check for _C is passed); roi_align falls back to its Python implementation as
torchvision does without _C.
"""

from __future__ import annotations

from typing import Any, Optional

_LIBRARY: Optional[Any] = None  # kept alive: dropping a torch.library.Library removes its operators
_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)


def _compiled_ops_load() -> bool:
    import importlib.util
    from pathlib import Path

    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        return True  # not installed: nothing to declare, the import fails on its own
    library = next(Path(spec.origin).parent.glob("_C*.so"), None)
    if library is None:
        return False
    try:
        torch.ops.load_library(str(library))
    except (OSError, RuntimeError):
        return False
    return True


def ensure_importable() -> None:
    """Declare torchvision's nms/qnms schemas when its _C cannot load; a no-op when it can (or was done)."""
    global _LIBRARY
    if _LIBRARY is not None or _compiled_ops_load():
        return
    import torch

    _LIBRARY = torch.library.Library("torchvision", "DEF")
    for schema in _SCHEMAS:
        _LIBRARY.define(schema)
    import torchvision.ops.boxes as boxes

    # ops.nms asserts that _C loaded; declared, nms has torchvision's fake kernel: all a fake trace calls
    boxes._assert_has_ops = lambda: None
